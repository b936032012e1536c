//! `GET /version`.

use serde::Deserialize;

use crate::client::Client;
use crate::error::Result;
use crate::wire::Form;

/// PVE's version triple.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Version {
    /// e.g. `9.1.5`.
    pub version: String,
    /// e.g. `9.1`.
    pub release: String,
    /// Git commit of pve-manager.
    #[serde(default)]
    pub repoid: String,
}

impl Version {
    /// The major version number, e.g. 9.
    pub fn major(&self) -> Option<u32> {
        self.version.split('.').next()?.parse().ok()
    }
}

impl Client {
    /// `GET /version`: any authenticated token may call it, so it doubles as a credentials check.
    pub async fn version(&self) -> Result<Version> {
        self.get("/version", &Form::new()).await
    }
}
