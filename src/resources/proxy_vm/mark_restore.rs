//! The ownership mark a user puts back on a VM whose mark was edited away, as the refresh
//! and destroy messages print it.

use tfplugin::Value;

use super::attr;
use crate::ownership;

/// The mark that makes the VM this state's again, as the warnings print it: without this
/// state's create token (tokens stay out of messages); the seed hash, keyed with the token,
/// proves it is this state's VM.
pub(super) fn mark_to_restore(prior: &Value, name: &str, fleet: &str) -> ownership::Mark {
    let mut mark = ownership::Mark::creating(
        name,
        fleet,
        "",
        prior.get_attr(attr::TEMPLATE).as_str().unwrap_or_default(),
    )
    .with_phase(ownership::Phase::Done);
    mark.create_token = None;
    if let Some(hash) = prior
        .get_attr(attr::SEED_HASH)
        .as_str()
        .filter(|h| !h.is_empty())
    {
        mark = mark.with_seed_hash(hash);
    }
    mark
}
