//! Typed views of the resource's values: what the configuration asks for, and what the
//! cluster shows, turned into state. One module per job; this one only re-exports them, so
//! the rest of the resource imports `model::…` whichever file a type lives in.

mod boot;
mod desired;
mod ha;
pub mod networks;
mod observed;
mod private;
mod seed_hash;
mod state;
mod write_only;

pub use super::seed_life::{SeedLifetime, WaitFor};
pub use boot::{startup_of, startup_value};
pub use desired::{DEFAULT_CLOUD_INIT_TIMEOUT, Desired, Timeouts, wait_for};
pub use ha::{HaSpec, observed_ha, parse_ha_state};
pub use observed::{Observed, RunningValues};
pub use private::{Private, SeedStays, UNREADABLE};
pub use seed_hash::{planned_seed_hash, seed_hash};
pub use state::{STATUS_GONE, fleet_of, vm_is_gone, vmid_of};
pub use write_only::refuse_write_only_without_support;

pub use super::schema::validate_config;
