//! nocloud: placeholder, filled by its issue.
