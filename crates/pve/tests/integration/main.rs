//! pve's integration tests, one binary (`cargo test -p pve --test integration`): one
//! link step instead of one per file, and one copy of the shared helpers in `common`.

mod agent_failures;
mod common;
mod keep_alive;
mod observability;
mod redaction;
mod sim_api;
mod sim_faults;
mod sim_ha_rules;
mod source_rules;
mod tls;
