//! pve: placeholder, filled by its issue.
