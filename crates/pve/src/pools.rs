//! `GET /pools`.

use serde::Deserialize;

use crate::client::Client;
use crate::error::Result;
use crate::wire::Form;

/// A resource pool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Pool {
    /// Pool id.
    pub poolid: String,
    /// Comment.
    #[serde(default)]
    pub comment: Option<String>,
    /// Members (only when asked for one pool).
    #[serde(default)]
    pub members: Vec<serde_json::Value>,
}

impl Client {
    /// `GET /pools`.
    pub async fn pools(&self) -> Result<Vec<Pool>> {
        self.get("/pools", &Form::new()).await
    }

    /// `GET /pools?poolid=…` with members; an unknown pool is `NotFound`.
    pub async fn pool(&self, poolid: &str) -> Result<Option<Pool>> {
        let pools: Vec<Pool> = self
            .get("/pools", &Form::new().text("poolid", poolid))
            .await?;
        Ok(pools.into_iter().find(|p| p.poolid == poolid))
    }
}
