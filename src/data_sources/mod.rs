//! Data sources, one folder each with its schema and read side by side.

use std::sync::Arc;

use tfplugin::DataSource;

use crate::provider::Shared;

pub fn all(_shared: &Arc<Shared>) -> Vec<Arc<dyn DataSource>> {
    Vec::new()
}
