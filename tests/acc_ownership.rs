//! Acceptance: a VM belongs to exactly one resource instance. Two states with the same VM
//! name never share (or take over) a VM, one after the other or at the same moment; fleets
//! keep configurations apart; duplicate names in one configuration are refused at plan;
//! import across fleets is refused. These run only on the in-process pve-sim (they read its
//! journal and state): in live mode each says it is skipped.

mod support;

use std::collections::BTreeMap;

use serde_json::Value;
use support::{SimClient, Workspace, simulator_only, start_sim};

fn fleet_tf(fleet: Option<&str>, names: &[String]) -> String {
    let fleet = fleet.map_or(String::new(), |f| format!("  fleet = \"{f}\"\n"));
    let names = names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
{fleet}}}

resource "proxmox_proxy_vm" "edge" {{
  for_each = toset([{names}])
  name     = each.value
  node     = "pve1"
  template = "debian-13-proxy"
  cores    = 1
}}
"#,
        Workspace::preamble()
    )
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// The VMs (by VMID) whose description marks them as ours.
fn marked(state: &Value) -> BTreeMap<u64, Value> {
    state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| {
            vm["config"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("proxyvm-owner:"))
        })
        .map(|vm| (vm["vmid"].as_u64().unwrap(), vm.clone()))
        .collect()
}

/// The VMIDs a terraform state tracks, by VM name.
async fn tracked(ws: &Workspace) -> BTreeMap<String, u64> {
    let state = ws.state().await;
    let mut out = BTreeMap::new();
    if let Some(resources) = state["values"]["root_module"]["resources"].as_array() {
        for r in resources {
            out.insert(
                r["values"]["name"].as_str().unwrap().to_owned(),
                r["values"]["vmid"].as_u64().unwrap(),
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_state_with_the_same_name_never_takes_the_vm() {
    if !simulator_only(
        "a_second_state_with_the_same_name_never_takes_the_vm",
        "the request journal and state",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let first = Workspace::new(target.clone());
    let second = Workspace::new(target.clone());
    let edge = names("edge", 1);
    first.init_with(&fleet_tf(None, &edge)).await;
    second.init_with(&fleet_tf(None, &edge)).await;
    first.apply().await.success();
    let vmid = tracked(&first).await["edge-0"];
    let before = marked(&sim.state().await);
    let journal_before = sim.journal().await.len();

    // The second state's apply fails before any write, with the import hint.
    let out = second.apply().await.failure();
    let text = out.all_text();
    assert!(text.contains("already exists"), "{text}");
    assert!(
        text.contains(&format!("terraform import 'ADDRESS' pve1/{vmid}")),
        "{text}"
    );
    assert!(text.contains("import {"), "{text}");
    let writes = sim.writes_since(journal_before).await;
    assert!(writes.is_empty(), "the refused apply wrote: {writes:?}");
    assert_eq!(
        marked(&sim.state().await)[&vmid]["config"],
        before[&vmid]["config"],
        "the first state's VM changed"
    );
    assert_eq!(
        marked(&sim.state().await)[&vmid]["status"],
        before[&vmid]["status"]
    );
    assert!(tracked(&second).await.is_empty());

    // The second state's destroy touches nothing; the first one's plan stays empty.
    let journal_before = sim.journal().await.len();
    second.destroy().await.success();
    assert!(sim.writes_since(journal_before).await.is_empty());
    assert_eq!(marked(&sim.state().await).len(), 1);
    first.assert_plans_empty().await;

    // With different fleets, the same name makes two VMs, and both states stay settled.
    let staging = Workspace::new(target.clone());
    staging.init_with(&fleet_tf(Some("staging"), &edge)).await;
    staging.apply().await.success();
    let staging_vmid = tracked(&staging).await["edge-0"];
    assert_ne!(staging_vmid, vmid);
    let vms = marked(&sim.state().await);
    assert_eq!(vms.len(), 2);
    assert!(
        vms[&staging_vmid]["tags"]
            .as_str()
            .unwrap()
            .contains("proxyvm.fleet.staging"),
        "{}",
        vms[&staging_vmid]
    );
    first.assert_plans_empty().await;
    staging.assert_plans_empty().await;

    // proxmox_proxy_vms lists the provider's fleet by default, every fleet on request.
    let listing = Workspace::new(target.clone());
    listing
        .init_with(&format!(
            "{}\nprovider \"proxmox\" {{\n  fleet = \"staging\"\n}}\ndata \"proxmox_proxy_vms\" \"mine\" {{}}\ndata \"proxmox_proxy_vms\" \"all\" {{\n  all_fleets = true\n}}\noutput \"mine\" {{\n  value = [for vm in data.proxmox_proxy_vms.mine.vms : vm.vmid]\n}}\noutput \"all\" {{\n  value = [for vm in data.proxmox_proxy_vms.all.vms : \"${{vm.fleet}}/${{vm.vmid}}\"]\n}}\n",
            Workspace::preamble()
        ))
        .await;
    listing.apply().await.success();
    let out = listing
        .terraform(&["output", "-json"])
        .await
        .success()
        .stdout();
    let outputs: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(outputs["mine"]["value"], serde_json::json!([staging_vmid]));
    let mut all: Vec<String> = outputs["all"]["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    all.sort();
    let mut expected = vec![format!("/{vmid}"), format!("staging/{staging_vmid}")];
    expected.sort();
    assert_eq!(all, expected);

    // Import across fleets is refused, naming the VM's fleet.
    let importer = Workspace::new(target.clone());
    importer.init_with(&fleet_tf(None, &edge)).await;
    let out = importer
        .terraform(&[
            "import",
            "-no-color",
            "-input=false",
            "proxmox_proxy_vm.edge[\"edge-0\"]",
            &format!("pve1/{staging_vmid}"),
        ])
        .await
        .failure();
    assert!(
        out.all_text().contains("belongs to fleet `staging`"),
        "{}",
        out.all_text()
    );

    first.destroy().await.success();
    staging.destroy().await.success();
    assert!(marked(&sim.state().await).is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_states_applying_the_same_names_at_once_own_each_vm_exactly_once() {
    if !simulator_only(
        "two_states_applying_the_same_names_at_once_own_each_vm_exactly_once",
        "the request journal and state",
    ) {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    // Long enough tasks that the two applies overlap at every step.
    for (task, ms) in [("qmclone", 400), ("qmconfig", 60), ("qmstart", 100)] {
        config.timings.task_ms.insert(task.into(), ms);
    }
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let fleet = names("race", 10);
    for round in 0..3 {
        let a = Workspace::new(target.clone());
        let b = Workspace::new(target.clone());
        a.init_with(&fleet_tf(None, &fleet)).await;
        b.init_with(&fleet_tf(None, &fleet)).await;
        let (out_a, out_b) = tokio::join!(a.apply(), b.apply());
        let (in_a, in_b) = (tracked(&a).await, tracked(&b).await);
        // Every name is tracked by exactly one state, and the other one said why.
        for name in &fleet {
            let owners =
                usize::from(in_a.contains_key(name)) + usize::from(in_b.contains_key(name));
            assert_eq!(
                owners,
                1,
                "round {round}: `{name}` is tracked by {owners} states\nA: {in_a:?}\nB: {in_b:?}\n{}\n{}",
                out_a.all_text(),
                out_b.all_text()
            );
        }
        for (out, tracked) in [(&out_a, &in_a), (&out_b, &in_b)] {
            if tracked.len() < fleet.len() {
                let text = out.all_text();
                assert!(
                    text.contains("already exists") || text.contains("taken over"),
                    "round {round}: an apply lost VMs without saying why:\n{text}"
                );
            }
        }
        // One VM per name in the fleet; all of them finished.
        let vms = marked(&sim.state().await);
        let mut per_name: BTreeMap<String, usize> = BTreeMap::new();
        for vm in vms.values() {
            *per_name
                .entry(vm["config"]["name"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
            assert!(
                vm["config"]["description"]
                    .as_str()
                    .unwrap()
                    .contains("proxyvm-phase: done"),
                "round {round}: {vm}\n{}\n{}",
                out_a.all_text(),
                out_b.all_text()
            );
        }
        assert_eq!(per_name.len(), fleet.len(), "round {round}: {per_name:?}");
        assert!(
            per_name.values().all(|n| *n == 1),
            "round {round}: {per_name:?}"
        );
        // Each state stays settled on what it owns; it would only (try to) create the rest.
        for (ws, tracked) in [(&a, &in_a), (&b, &in_b)] {
            let plan = ws
                .terraform(&["plan", "-no-color", "-input=false"])
                .await
                .success();
            let wanted = fleet.len() - tracked.len();
            let summary = if wanted == 0 {
                "No changes.".to_owned()
            } else {
                format!("Plan: {wanted} to add, 0 to change, 0 to destroy.")
            };
            assert!(
                plan.stdout().contains(&summary),
                "round {round}: expected `{summary}`:\n{}",
                plan.stdout()
            );
        }
        let (da, db) = tokio::join!(a.destroy(), b.destroy());
        da.success();
        db.success();
        assert!(
            marked(&sim.state().await).is_empty(),
            "round {round}: VMs left"
        );
        assert!(
            sim.volumes_on("proxy-seeds").await.is_empty(),
            "round {round}: seeds left"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_resources_with_one_name_are_refused_at_plan() {
    if !simulator_only(
        "two_resources_with_one_name_are_refused_at_plan",
        "the request journal (no write at all)",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "a" {{
  name     = "twin"
  node     = "pve1"
  template = "debian-13-proxy"
}}

resource "proxmox_proxy_vm" "b" {{
  count    = 2
  name     = "twin-${{count.index}}"
  node     = "pve1"
  template = "debian-13-proxy"
}}

resource "proxmox_proxy_vm" "c" {{
  name     = "twin"
  node     = "pve2"
  template = "debian-13-proxy"
}}
"#,
        Workspace::preamble()
    );
    ws.init_with(&tf).await;
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = out.all_text();
    assert!(text.contains("Duplicate proxy VM name"), "{text}");
    assert!(text.contains("`twin`"), "{text}");
    assert!(
        text.contains("name     = \"twin\""),
        "the diagnostic points at `name`: {text}"
    );
    assert!(!text.contains("twin-0`"), "{text}");
    assert!(sim.writes_since(0).await.is_empty());
}
