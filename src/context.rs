//! What every resource and data source shares once the provider block is configured: the
//! PVE client, storage defaults, the VMID range and the process-wide runtime.
//!
//! It lives apart from `provider` so that resources and data sources depend on this context
//! only, and `provider` depends on them (to list them), never the other way round.

use std::sync::{Arc, OnceLock};

use tfplugin::Diagnostic;

use crate::vmid::VmidRange;

pub const DEFAULT_SEED_STORAGE: &str = "local";

/// What resources and data sources get once the provider block is configured.
#[derive(Debug)]
pub struct Configured {
    pub client: pve::Client,
    pub seed_storage: String,
    pub clone_storage: Option<String>,
    pub vmid_range: VmidRange,
    /// The namespace of this configuration's VMs (empty: the default fleet).
    pub fleet: String,
    pub runtime: crate::runtime::Runtime,
    /// What plan-time checks learned of the cluster, fetched once per process.
    pub facts: crate::cluster_facts::ClusterFacts,
    /// This working directory's own creates and replacements (see `crate::journal`).
    pub journal: crate::journal::Journal,
}

/// The provider's configured state, filled by `ConfigureProvider`.
#[derive(Debug, Default)]
pub struct Shared {
    configured: OnceLock<Result<Arc<Configured>, String>>,
}

impl Shared {
    /// Records the outcome of `ConfigureProvider`; later calls keep the first outcome.
    pub fn set(&self, outcome: Result<Arc<Configured>, String>) {
        let _ = self.configured.set(outcome);
    }

    /// The configured state, or the diagnostic that explains why there is none.
    pub fn get(&self) -> Result<Arc<Configured>, Diagnostic> {
        match self.configured.get() {
            Some(Ok(configured)) => Ok(configured.clone()),
            Some(Err(why)) => Err(Diagnostic::error("Provider not configured", why.clone())),
            None => Err(Diagnostic::error(
                "Provider not configured",
                "Terraform called the resource before configuring the provider. This is a bug in \
                    the provider, which should be reported in the provider's own issue tracker.",
            )),
        }
    }
}
