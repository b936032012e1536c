//! The root package's integration tests, in one test binary: linking one binary instead of
//! one per file is most of an incremental `cargo test` on a small machine.
//!
//! Each module is one former test file; run a part with a filter on its path, e.g.
//! `TF_ACC=1 cargo test --test provider -- acc_proxy_vm::` (filters are ORed; the trailing
//! `::` keeps `acc_proxy_vm::` from also picking `acc_proxy_vm_resilience::`).
//! `support` is the harness every module shares; `pve_sim_bin` finds the pve-sim binary.

mod pve_sim_bin;
mod support;

mod acc_addresses;
mod acc_changed_during_apply;
mod acc_clone_window;
mod acc_cluster_life;
mod acc_cost;
mod acc_create_waits;
mod acc_delete_and_vmid_choice;
mod acc_docs;
mod acc_examples;
mod acc_failure_paths;
mod acc_fuzz;
mod acc_guests;
mod acc_ha;
mod acc_health;
mod acc_modules;
mod acc_networks;
mod acc_no_harm;
mod acc_one_per_name;
mod acc_ownership;
mod acc_placement;
mod acc_plan_checks;
mod acc_pool_visibility;
mod acc_provider;
mod acc_proxy_vm;
mod acc_proxy_vm_resilience;
mod acc_proxy_vms;
mod acc_pve_setup;
mod acc_read_only;
mod acc_release;
mod acc_replace;
mod acc_request_budget;
mod acc_seed_life;
mod acc_state_upgrade;
mod acc_token_refused;
mod acc_workflows;
mod cli_versions_docs;
mod contract_harness;
mod create_spans;
mod docs_names;
mod grpc_cli_compat;
mod sweeper;
mod test_script;
