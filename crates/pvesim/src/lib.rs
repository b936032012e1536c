//! pvesim: placeholder, filled by its issue.

pub mod iso;
pub mod schema;
