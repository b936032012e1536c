//! The ownership marks a create writes.

use super::super::model::{Desired, seed_hash};
use crate::ownership::Mark;

/// The mark a create in progress writes: this attempt's token and the keyed hash of its
/// seed's content.
pub(super) fn creating_mark(desired: &Desired) -> Mark {
    Mark::creating(
        &desired.name,
        &desired.fleet,
        &desired.create_token,
        &desired.template,
    )
    .with_seed_hash(&seed_hash(
        Some(&desired.create_token),
        desired.user_data.as_deref(),
        desired.network_config.as_deref(),
    ))
}
