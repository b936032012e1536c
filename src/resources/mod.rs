//! Managed resources, one folder each with its schema, model and lifecycle side by side.

pub mod proxy_vm;

use std::sync::Arc;

use tfplugin::Resource;

use crate::context::Shared;

pub fn all(shared: &Arc<Shared>) -> Vec<Arc<dyn Resource>> {
    vec![Arc::new(proxy_vm::ProxyVm::new(shared.clone()))]
}
