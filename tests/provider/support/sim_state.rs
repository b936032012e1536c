//! Reads of pve-sim's state that the cluster-life and HA tests share: waiting for a state,
//! our VMs by name, and the HA resources.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::SimClient;

/// Polls pve-sim's state until `done` holds (at most 60 s) and returns that state.
pub async fn until(sim: &SimClient, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = sim.state().await;
        if done(&state) {
            return state;
        }
        assert!(Instant::now() < deadline, "{what}: never happened; {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The VMs of `state` whose name starts with `base`.
pub fn vms_named<'a>(state: &'a Value, base: &str) -> Vec<&'a Value> {
    state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["name"].as_str().is_some_and(|n| n.starts_with(base)))
        .collect()
}

/// The one VM named `name` (or starting so).
pub async fn the_vm(sim: &SimClient, name: &str) -> Value {
    let state = sim.state().await;
    let vms = vms_named(&state, name);
    assert_eq!(vms.len(), 1, "one VM named {name}: {state}");
    vms[0].clone()
}

pub fn vmid(vm: &Value) -> u64 {
    vm["vmid"].as_u64().unwrap()
}

/// `GET /cluster/ha/resources`.
pub async fn ha_resources(sim: &SimClient) -> Vec<Value> {
    sim.api("GET", "/cluster/ha/resources", &[])
        .await
        .as_array()
        .cloned()
        .unwrap_or_default()
}
