//! Acceptance: addresses across replacements (#41 item 1). A `user_data` change replaces the
//! VM; with `mac_address` pinned the new VM gets its predecessor's MAC, and DHCP (pve-sim's
//! leases are keyed by MAC, as a DHCP server's are) gives it the same address. Under
//! `create_before_destroy` two VMs would hold one MAC during the roll: that create is
//! refused before any write.

use crate::support;

use std::collections::BTreeMap;
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

/// Three VMs with pinned MACs, greeted with `greeting` (a change replaces them all).
fn pinned_fleet(greeting: &str, create_before_destroy: bool) -> String {
    format!(
        r##"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

locals {{
  macs = {{
    "pin-0" = "BC:24:11:AA:00:01"
    "pin-1" = "BC:24:11:AA:00:02"
    "pin-2" = "BC:24:11:AA:00:03"
  }}
}}

resource "proxmox_proxy_vm" "edge" {{
  for_each    = local.macs
  name        = each.key
  template    = "debian-13-proxy"
  memory      = 512
  mac_address = each.value
  user_data   = "#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: {greeting}\n"

  lifecycle {{
    create_before_destroy = {create_before_destroy}
  }}
}}
"##,
        Workspace::preamble()
    )
}

/// Each VM of the state: name → (seed hash (keyed per create), MAC, primary IPv4 address).
async fn held(ws: &Workspace) -> BTreeMap<String, (String, String, String)> {
    let state = ws.state().await;
    let mut out = BTreeMap::new();
    for r in state["values"]["root_module"]["resources"]
        .as_array()
        .unwrap()
    {
        let v = &r["values"];
        let text = |key: &str| v[key].as_str().unwrap_or_default().to_owned();
        out.insert(
            text("name"),
            (text("seed_hash"), text("mac_address"), text("ipv4_address")),
        );
    }
    out
}

/// The MAC on `net0` of each of our VMs in pve-sim, by name.
async fn net0_macs(sim: &SimClient) -> BTreeMap<String, String> {
    sim.our_vms()
        .await
        .iter()
        .map(|vm| {
            let net0 = vm["config"]["net0"].as_str().unwrap_or_default();
            let mac = net0
                .split(',')
                .find_map(|part| part.split_once('=').map(|(_, mac)| mac))
                .unwrap_or_default()
                .to_owned();
            (vm["name"].as_str().unwrap().to_owned(), mac)
        })
        .collect()
}

/// A `user_data` roll of three VMs with pinned MACs (replaced without
/// `create_before_destroy`): every VM is replaced (a new create: another seed hash), keeps
/// its MAC on `net0` and gets its old DHCP address back.
#[tokio::test(flavor = "multi_thread")]
async fn a_roll_with_pinned_macs_keeps_every_vms_address() {
    if !acceptance_enabled("a_roll_with_pinned_macs_keeps_every_vms_address") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&pinned_fleet("one", false)).await;
    ws.apply().await.success();
    let before = held(&ws).await;
    assert_eq!(before.len(), 3, "{before:?}");
    for (name, (_, mac, address)) in &before {
        assert!(!address.is_empty(), "{name} has an address: {before:?}");
        assert!(mac.starts_with("BC:24:11:AA:00:0"), "{name}: {mac}");
    }
    let addresses: std::collections::BTreeSet<_> = before.values().map(|v| &v.2).collect();
    assert_eq!(addresses.len(), 3, "three addresses: {before:?}");

    ws.write_main_tf(&pinned_fleet("two", false));
    ws.apply().await.success();
    let after = held(&ws).await;
    for (name, (seed, mac, address)) in &after {
        let (old_seed, old_mac, old_address) = &before[name];
        assert_ne!(seed, old_seed, "{name} was replaced");
        assert_eq!(mac, old_mac, "{name} kept its MAC");
        assert_eq!(address, old_address, "{name} kept its DHCP address");
    }
    let on_pve = net0_macs(&sim).await;
    for (name, (_, mac, _)) in &after {
        assert_eq!(&on_pve[name], mac, "net0 of {name} on PVE: {on_pve:?}");
    }
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// The same roll under `create_before_destroy`: the new VM's create is refused, naming the
/// predecessor that holds the MAC and what to do, before it writes anything; the old VMs
/// stay with their addresses, and the plan still shows the replacement.
#[tokio::test(flavor = "multi_thread")]
async fn a_roll_under_create_before_destroy_with_pinned_macs_is_refused_before_any_write() {
    let test = "a_roll_under_create_before_destroy_with_pinned_macs_is_refused_before_any_write";
    if !acceptance_enabled(test) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&pinned_fleet("one", true)).await;
    ws.apply().await.success();
    let before = held(&ws).await;
    let vms_before = sim.our_vms().await.len();

    ws.write_main_tf(&pinned_fleet("two", true));
    let since = sim.journal().await.len();
    let out = ws.apply().await.failure();
    let text = support::flat(&out.all_text());
    assert!(
        text.contains("is held by VM") && text.contains("create_before_destroy"),
        "{text}"
    );
    assert!(text.contains("Nothing was changed"), "{text}");
    let writes = sim.writes_since(since).await;
    assert!(writes.is_empty(), "the refused roll wrote: {writes:?}");
    assert_eq!(
        sim.our_vms().await.len(),
        vms_before,
        "no VM added or removed"
    );
    assert_eq!(
        held(&ws).await,
        before,
        "the old VMs stay, with their addresses"
    );
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false", "-detailed-exitcode"])
        .await;
    assert_eq!(plan.code(), 2, "{}", plan.all_text());
    assert!(plan.stdout().contains("3 to add"), "{}", plan.all_text());
}
