//! Acceptance (#41): plans that say why a VM is replaced, rebooted or stopped, and further
//! NICs (`networks`) on bridges and VLANs of their own, checked at plan, changed in place,
//! with drift shown.

use crate::support;

use support::{SimClient, Workspace, acceptance_enabled, flat, start_sim};

/// One VM `name` with `extra` HCL lines.
fn one_vm_tf(name: &str, extra: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "one" {{
  name     = "{name}"
  node     = "pve1"
  template = "debian-13-proxy"
  memory   = 512
{extra}}}
"#,
        Workspace::preamble()
    )
}

async fn plan_text(ws: &Workspace) -> String {
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    flat(&out.all_text())
}

#[tokio::test(flavor = "multi_thread")]
async fn plans_name_what_replaces_reboots_or_stops_a_vm() {
    if !acceptance_enabled("plans_name_what_replaces_reboots_or_stops_a_vm") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let user_data = "  user_data = \"#cloud-config\\n\"\n";
    ws.init_with(&one_vm_tf("why-0", &format!("{user_data}  cores = 1\n")))
        .await;
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    let empty = plan_text(&ws).await;
    assert!(!empty.contains("Warning"), "an empty plan warns: {empty}");

    // A change PVE holds until the next boot, left pending (reboot_if_needed unset).
    ws.write_main_tf(&one_vm_tf("why-0", &format!("{user_data}  cores = 2\n")));
    ws.apply().await.success();
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();

    // Turning reboot_if_needed on shows only `false -> true`: the warning names the VM.
    let rebooting = format!("{user_data}  cores = 2\n  reboot_if_needed = true\n");
    ws.write_main_tf(&one_vm_tf("why-0", &rebooting));
    let text = plan_text(&ws).await;
    assert!(
        text.contains(&format!("Warning: VM {vmid} (`why-0`) will be rebooted")),
        "{text}"
    );
    assert!(text.contains("with proxmox_proxy_vm.one"), "{text}");
    assert!(text.contains("changes to cores"), "{text}");
    assert!(!text.contains("will be replaced"), "{text}");
    ws.apply().await.success();
    ws.assert_plans_empty().await;

    // started = false: the VM to be stopped is named.
    ws.write_main_tf(&one_vm_tf(
        "why-0",
        &format!("{rebooting}  started = false\n"),
    ));
    let text = plan_text(&ws).await;
    assert!(
        text.contains(&format!("Warning: VM {vmid} (`why-0`) will be stopped")),
        "{text}"
    );
    assert!(!text.contains("will be rebooted"), "{text}");

    // A user_data change: the cause is named, not only `seed_hash`.
    let changed = "  user_data = \"#cloud-config\\npackages: [nginx]\\n\"\n  cores = 2\n";
    ws.write_main_tf(&one_vm_tf("why-0", changed));
    let text = plan_text(&ws).await;
    assert!(text.contains("forces replacement"), "{text}");
    assert!(
        text.contains(&format!("Warning: VM {vmid} (`why-0`) will be replaced")),
        "{text}"
    );
    assert!(
        text.contains("the seed's content changed: `user_data`"),
        "{text}"
    );
    assert!(!text.contains("will be stopped"), "{text}");
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

/// The default world with `extra` bridges on every node.
fn with_bridges(extra: &[&str]) -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    for node in &mut config.nodes {
        node.bridges
            .extend(extra.iter().map(|bridge| (*bridge).to_owned()));
    }
    config
}

/// `networks = [...]` of `(bridge, vlan_tag, mac_address)` elements, as HCL.
fn networks(nics: &[(&str, Option<u16>, Option<&str>)]) -> String {
    let elements: Vec<String> = nics
        .iter()
        .map(|(bridge, tag, mac)| {
            let mut parts = vec![format!("bridge = \"{bridge}\"")];
            if let Some(tag) = tag {
                parts.push(format!("vlan_tag = {tag}"));
            }
            if let Some(mac) = mac {
                parts.push(format!("mac_address = \"{mac}\""));
            }
            format!("{{ {} }}", parts.join(", "))
        })
        .collect();
    format!(
        "  bridge   = \"vmbr0\"\n  vlan_tag = 10\n  networks = [{}]\n",
        elements.join(", ")
    )
}

/// Our one VM's config as pve-sim holds it.
async fn vm_config(sim: &SimClient) -> serde_json::Value {
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 1, "{vms:#?}");
    vms[0]["config"].clone()
}

/// The state's `networks` of the one VM.
async fn state_networks(ws: &Workspace) -> Vec<serde_json::Value> {
    let state = ws.state().await;
    state["values"]["root_module"]["resources"][0]["values"]["networks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The MAC of a `netN` value (`virtio=MAC,...`).
fn mac_of(net: &serde_json::Value) -> String {
    let text = net.as_str().unwrap_or_default();
    let first = text.split(',').next().unwrap_or_default();
    first
        .split_once('=')
        .map(|(_, mac)| mac.to_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_nic_is_made_changed_in_place_and_its_drift_shown() {
    if !acceptance_enabled("a_second_nic_is_made_changed_in_place_and_its_drift_shown") {
        return;
    }
    let (_sim, target) = start_sim(with_bridges(&["vmbr1", "vmbr2"])).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&one_vm_tf(
        "nics-0",
        &networks(&[("vmbr1", Some(20), None)]),
    ))
    .await;
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    let config = vm_config(&sim).await;
    let (net0, net1) = (
        config["net0"].as_str().unwrap(),
        config["net1"].as_str().unwrap(),
    );
    assert!(
        net0.contains("bridge=vmbr0") && net0.contains("tag=10"),
        "{net0}"
    );
    assert!(
        net1.contains("bridge=vmbr1") && net1.contains("tag=20"),
        "{net1}"
    );
    assert!(net1.starts_with("virtio="), "net0's model: {net1}");
    let mac = mac_of(&config["net1"]);
    let nics = state_networks(&ws).await;
    assert_eq!(nics.len(), 1, "{nics:?}");
    assert_eq!(nics[0]["mac_address"], mac.as_str());
    let state = ws.state().await;
    let values = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(
        values["ipv4_addresses"].as_array().map(Vec::len),
        Some(2),
        "one address per NIC from pve-sim's DHCP: {values:#}"
    );

    // The second NIC moves to another bridge and VLAN in place, keeping its MAC.
    ws.write_main_tf(&one_vm_tf(
        "nics-0",
        &networks(&[("vmbr2", Some(30), None)]),
    ));
    let plan = plan_text(&ws).await;
    assert!(plan.contains("will be updated in-place"), "{plan}");
    assert!(!plan.contains("forces replacement"), "{plan}");
    let out = ws.apply().await.success();
    assert!(
        out.stdout().contains("0 added, 1 changed, 0 destroyed"),
        "{}",
        out.stdout()
    );
    ws.assert_plans_empty().await;
    let config = vm_config(&sim).await;
    let net1 = config["net1"].as_str().unwrap();
    assert!(
        net1.contains("bridge=vmbr2") && net1.contains("tag=30"),
        "{net1}"
    );
    assert_eq!(
        mac_of(&config["net1"]),
        mac,
        "the MAC changed with the bridge"
    );

    // Behind Terraform's back: net1 back on vmbr1. The plan shows it, the apply undoes it.
    let vm = &sim.our_vms().await[0];
    let (node, vmid) = (vm["node"].as_str().unwrap(), vm["vmid"].as_u64().unwrap());
    let by_hand = format!("virtio={mac},bridge=vmbr1,tag=30");
    sim.api(
        "PUT",
        &format!("/nodes/{node}/qemu/{vmid}/config"),
        &[("net1", by_hand.as_str())],
    )
    .await;
    let plan = plan_text(&ws).await;
    assert!(plan.contains("will be updated in-place"), "{plan}");
    assert!(
        plan.contains("\"vmbr1\" -> \"vmbr2\""),
        "drift not shown: {plan}"
    );
    ws.apply().await.success();
    ws.assert_plans_empty().await;

    // A third NIC with a pinned MAC is added in place, then both further NICs removed.
    let pinned = "BC:24:11:7E:00:02";
    ws.write_main_tf(&one_vm_tf(
        "nics-0",
        &networks(&[("vmbr2", Some(30), None), ("vmbr1", None, Some(pinned))]),
    ));
    let out = ws.apply().await.success();
    assert!(
        out.stdout().contains("0 added, 1 changed"),
        "{}",
        out.stdout()
    );
    ws.assert_plans_empty().await;
    let config = vm_config(&sim).await;
    assert_eq!(mac_of(&config["net2"]), pinned);
    assert!(
        !config["net2"].as_str().unwrap().contains("tag="),
        "{config}"
    );
    ws.write_main_tf(&one_vm_tf("nics-0", &networks(&[])));
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    let config = vm_config(&sim).await;
    assert!(
        config.get("net1").is_none() && config.get("net2").is_none(),
        "{config}"
    );
    assert!(config["net0"].as_str().unwrap().contains("bridge=vmbr0"));
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bridge_for_net1_is_refused_at_plan_before_any_write() {
    if !acceptance_enabled("a_missing_bridge_for_net1_is_refused_at_plan_before_any_write") {
        return;
    }
    // Only pve2 has vmbr1.
    let mut config = pvesim::SimConfig::default();
    config.nodes[1].bridges.push("vmbr1".into());
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let before = sim.journal().await.len();
    ws.init_with(&one_vm_tf("nics-1", &networks(&[("vmbr1", None, None)])))
        .await;
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = flat(&out.all_text());
    assert!(text.contains("Error: Bridge not found"), "{text}");
    assert!(
        text.contains("bridge `vmbr1` of networks[0] (net1) does not exist on node pve1"),
        "{text}"
    );
    assert!(text.contains("with proxmox_proxy_vm.one"), "{text}");
    // Pointed at the element, not at the top-level `bridge`.
    assert!(
        text.contains(": networks = [{ bridge = \"vmbr1\" }]"),
        "pointed at the element: {text}"
    );
    let out = ws.apply().await.failure();
    assert!(flat(&out.all_text()).contains("Bridge not found"));
    assert!(
        sim.writes_since(before).await.is_empty(),
        "a write was made"
    );

    // With `node` unset, placement takes the one node that has it.
    let unplaced = one_vm_tf("nics-1", &networks(&[("vmbr1", None, None)]))
        .replace("  node     = \"pve1\"\n", "");
    ws.write_main_tf(&unplaced);
    ws.apply().await.success();
    assert_eq!(sim.our_vms().await[0]["node"], "pve2");
    ws.destroy().await.success();
}

#[tokio::test(flavor = "multi_thread")]
async fn health_names_a_missing_second_bridge() {
    if !acceptance_enabled("health_names_a_missing_second_bridge") {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    config.nodes[1].bridges.push("vmbr1".into());
    let (_sim, target) = start_sim(config).await;
    let ws = Workspace::new(target);
    ws.init_with(&format!(
        "{}\nprovider \"proxmox\" {{}}\n\ndata \"proxmox_health\" \"pve\" {{\n  bridges = \
            [\"vmbr0\", \"vmbr1\"]\n}}\n\noutput \"health\" {{\n  value = \
            data.proxmox_health.pve\n}}\n",
        Workspace::preamble()
    ))
    .await;
    ws.apply().await.success();
    let out = ws
        .terraform(&["output", "-json", "-no-color", "health"])
        .await
        .success();
    let health: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
    let reasons = health["reasons"].to_string();
    assert!(reasons.contains("BridgeNotFound"), "{health:#}");
    let messages = health["messages"].to_string();
    assert!(
        messages.contains("Bridge vmbr1 does not exist on node pve1"),
        "{health:#}"
    );
    assert!(!messages.contains("node pve2"), "{health:#}");
}

/// Requests bound to a VM (`/nodes/{node}/qemu/{vmid}/…` and its tasks), and the writes
/// among them, in a slice of pve-sim's journal: what a create costs beyond the shared,
/// cached reads (listings, storages, bridges), whose count depends on timing.
fn vm_requests(entries: &[serde_json::Value]) -> (usize, usize) {
    let bound: Vec<&serde_json::Value> = entries
        .iter()
        .filter(|entry| {
            let path = entry["path"].as_str().unwrap_or_default();
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            match parts.as_slice() {
                ["nodes", _, "qemu" | "tasks", id, ..] => !id.is_empty(),
                _ => false,
            }
        })
        .collect();
    let writes = bound
        .iter()
        .filter(|entry| entry["method"] != "GET")
        .count();
    (bound.len(), writes)
}

/// A further NIC costs no request: its bridge is checked against the node's bridge list the
/// plan reads anyway, and it is written in the configure step's one config write. Counted
/// with instant tasks, one create at a time, against the same create without `networks`.
#[tokio::test(flavor = "multi_thread")]
async fn a_further_nic_costs_no_request() {
    if !acceptance_enabled("a_further_nic_costs_no_request") {
        return;
    }
    let mut counts = Vec::new();
    for extra in ["", "  networks = [{ bridge = \"vmbr1\", vlan_tag = 20 }]\n"] {
        let mut config = with_bridges(&["vmbr1"]);
        for ms in config.timings.task_ms.values_mut() {
            *ms = 0;
        }
        config.timings.agent_boot_ms = 0;
        config.timings.cloud_init_ms = 0;
        let (_sim, target) = start_sim(config).await;
        let sim = SimClient::new(&target);
        let ws = Workspace::new(target);
        ws.init_with(&one_vm_tf("budget-0", extra)).await;
        let before = sim.journal().await.len();
        ws.apply().await.success();
        let create = vm_requests(&sim.journal().await.split_off(before));
        let before = sim.journal().await.len();
        ws.assert_plans_empty().await;
        let refresh = vm_requests(&sim.journal().await.split_off(before));
        counts.push((create, refresh));
        if !extra.is_empty() {
            let net1 = vm_config(&sim).await["net1"].clone();
            assert!(net1.as_str().unwrap().contains("bridge=vmbr1"), "{net1}");
        }
    }
    assert_eq!(
        counts[1], counts[0],
        "(create, refresh) requests and writes with a further NIC vs without"
    );
}
