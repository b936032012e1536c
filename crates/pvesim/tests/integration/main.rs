//! pvesim's integration tests, one binary (`cargo test -p pvesim --test integration`): one
//! link step instead of one per file, and one copy of the shared helpers in `common`.

mod cluster_life;
mod common;
mod conformance;
mod cost_profile;
mod guest_profiles;
mod ha_affinity;
mod ha_life;
mod ha_rules;
mod ha_states;
mod hold;
mod iso_tools;
mod pve_fidelity;
mod schema_conformance;
mod schema_validate;
mod seed_life;
mod transport;
