//! Acceptance: a state file written by the previous provider (commit 953641d, state schema
//! version 0) is upgraded by the current one and, after one in-place update that sets
//! `start_on_boot` (added since, default `true`), plans empty against the VM the old one made.
//!
//! `tests/provider/fixtures/state_v0/` holds what the provider built from 953641d left behind after
//! `terraform apply` of `resource.tf` with Terraform 1.11.4 against pve-sim:
//! - `state-v0.json`: its `terraform.tfstate`, byte for byte (renamed: `*.tfstate` files are
//!   ignored by git);
//! - `vm.json`: the VM as pve-sim stored it (its config, MAC and ownership mark included);
//! - `seed-edge-0-2c5db7b7.iso`: the seed ISO it uploaded.
//!
//! The test puts that VM and its seed back into a fresh simulator and boots it, so the
//! refreshing plan reads the very VM the old provider made.

use crate::support;

use std::path::Path;

use serde_json::Value;
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

const VMID: u32 = 191913;
const SEED_FILE: &str = "seed-edge-0-2c5db7b7.iso";

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/provider/fixtures/state_v0")
        .join(name)
}

fn instance(state: &Value) -> &Value {
    &state["resources"][0]["instances"][0]
}

/// The world of the default simulator plus the VM the old provider made, powered off until its
/// seed is back on the storage. The agent answers at once, so the first read sees an address.
fn sim_config() -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    let vm: pvesim::VmSeed =
        serde_json::from_str(&std::fs::read_to_string(fixture("vm.json")).unwrap()).unwrap();
    assert_eq!(vm.vmid, VMID);
    config.vms.push(vm);
    config.timings.agent_boot_ms = 0;
    config
}

/// Uploads the old provider's seed ISO and starts the VM, as its create did.
async fn restore_vm(target: &support::Target) {
    let client = pve::Client::new(pve::ClientConfig::new(
        target.endpoint.clone(),
        pve::ApiToken::parse(&target.token).unwrap(),
        pve::TlsTrust::CaPem(target.ca_pem.clone().unwrap()),
    ))
    .unwrap();
    let iso = std::fs::read(fixture(SEED_FILE)).unwrap();
    let upid = client
        .node("pve1")
        .storage("proxy-seeds")
        .upload(pve::storage::Upload::iso(SEED_FILE, iso))
        .await
        .unwrap();
    client.wait_for_task(&upid).await.unwrap();
    let sim = SimClient::new(target);
    let upid = sim
        .api(
            "POST",
            &format!("/nodes/pve1/qemu/{VMID}/status/start"),
            &[],
        )
        .await;
    sim.wait_task(&upid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_written_by_the_previous_release_upgrades_to_an_empty_plan() {
    if !acceptance_enabled("a_state_written_by_the_previous_release_upgrades_to_an_empty_plan") {
        return;
    }
    let (_sim, target) = start_sim(sim_config()).await;
    restore_vm(&target).await;

    let ws = Workspace::new(target);
    let resource_tf = std::fs::read_to_string(fixture("resource.tf")).unwrap();
    ws.init_with(&format!("{}\n{resource_tf}", Workspace::preamble()))
        .await;
    let old_text = std::fs::read_to_string(fixture("state-v0.json")).unwrap();
    let old: Value = serde_json::from_str(&old_text).unwrap();
    assert_eq!(
        instance(&old)["schema_version"],
        0,
        "the fixture is a v0 state"
    );
    assert!(instance(&old)["attributes"].get("fleet").is_none());
    std::fs::write(ws.work_dir().join("terraform.tfstate"), &old_text).unwrap();

    // `network_config` became sensitive: Terraform records the new sensitivity with an
    // in-place update, which sends nothing for it. `start_on_boot` came later with a default
    // of `true` (#31): the old state has none, so that same update sets it, and it is the
    // only attribute that changes (where the VM is, `current_node`, is known after any
    // update's apply) and the only thing written: `onboot=1`.
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false", "-refresh=false"])
        .await
        .success();
    let text = plan.stdout();
    assert!(
        text.contains("0 to add, 1 to change, 0 to destroy"),
        "{text}"
    );
    let changes: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("~ ") || l.starts_with("+ ") || l.starts_with("- "))
        .filter(|l| l.contains(" = "))
        .collect();
    assert_eq!(
        changes,
        [
            "~ current_node     = \"pve1\" -> (known after apply)",
            "+ start_on_boot    = true"
        ],
        "an attribute changes: {text}"
    );
    assert!(!text.contains("forces replacement"), "{text}");
    let sim = SimClient::new(&ws.target);
    let journal_before = sim.journal().await.len();
    ws.terraform(&[
        "apply",
        "-auto-approve",
        "-input=false",
        "-no-color",
        "-refresh=false",
    ])
    .await
    .success();
    let writes = sim.writes_since(journal_before).await;
    assert_eq!(writes.len(), 1, "one config write: {writes:?}");
    let params = writes[0]["params"].as_object().unwrap();
    let mut keys: Vec<&str> = params.keys().map(String::as_str).collect();
    keys.sort_unstable();
    // `background_delay` is no config key: it asks PVE to wait for the write's task before
    // answering (#42).
    assert_eq!(keys, ["background_delay", "digest", "onboot"], "{writes:?}");
    assert_eq!(params["onboot"], "1", "{writes:?}");
    // Then, both without and with a refresh (which reads the old provider's VM), nothing to
    // do.
    ws.assert_plans_empty().await;

    // Persist the upgrade: the state moves to version 2 with the default fleet, `wait_for`
    // for the old `wait_for_address = true` (which is gone), the default `seed_lifetime`, and
    // every other attribute the old provider stored carried over unchanged.
    ws.terraform(&[
        "apply",
        "-refresh-only",
        "-auto-approve",
        "-input=false",
        "-no-color",
    ])
    .await
    .success();
    let new: Value = serde_json::from_str(
        &std::fs::read_to_string(ws.work_dir().join("terraform.tfstate")).unwrap(),
    )
    .unwrap();
    assert_eq!(instance(&new)["schema_version"], 2);
    let mut attributes = instance(&new)["attributes"].as_object().unwrap().clone();
    assert_eq!(
        attributes.remove("fleet"),
        Some(Value::String(String::new()))
    );
    assert_eq!(
        attributes.remove("wait_for"),
        Some(Value::String("cloud-init".into()))
    );
    assert_eq!(
        attributes.remove("seed_lifetime"),
        Some(Value::String("until_ready".into()))
    );
    assert_eq!(instance(&old)["attributes"]["wait_for_address"], true);
    assert_eq!(
        attributes.get("wait_for_address"),
        None,
        "dropped from the schema"
    );
    attributes.insert("wait_for_address".into(), Value::Bool(true));
    // Optional arguments added since (with nothing to carry) are stored as null.
    assert_eq!(attributes.remove("node_candidates"), Some(Value::Null));
    assert_eq!(attributes.remove("cloud_init_timeout"), Some(Value::Null));
    assert_eq!(attributes.remove("startup"), Some(Value::Null));
    assert_eq!(attributes.remove("ha"), Some(Value::Null));
    assert_eq!(attributes.remove("networks"), Some(Value::Null));
    // Set by the update above (#31).
    assert_eq!(attributes.remove("start_on_boot"), Some(Value::Bool(true)));
    assert_eq!(
        Value::Object(attributes),
        instance(&old)["attributes"],
        "the upgrade changed a stored attribute"
    );
    // The upgraded state round-trips through read.
    ws.assert_plans_empty().await;
}
