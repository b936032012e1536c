//! Managed resources, one folder each with its schema, model and lifecycle side by side.

use std::sync::Arc;

use tfplugin::Resource;

use crate::provider::Shared;

pub fn all(_shared: &Arc<Shared>) -> Vec<Arc<dyn Resource>> {
    Vec::new()
}
