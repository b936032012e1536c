//! Data sources, one folder each with its schema and read side by side.

pub mod health;
pub mod proxy_vms;

use std::sync::Arc;

use tfplugin::DataSource;

use crate::context::Shared;

pub fn all(shared: &Arc<Shared>) -> Vec<Arc<dyn DataSource>> {
    vec![
        Arc::new(health::HealthDataSource::new(shared.clone())),
        Arc::new(proxy_vms::ProxyVmsDataSource::new(shared.clone())),
    ]
}
