//! pvesim: placeholder, filled by its issue.
