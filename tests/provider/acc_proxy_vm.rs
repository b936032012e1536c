//! Acceptance: the whole life of proxy VMs driven by the real `terraform` against pve-sim —
//! create, empty plans, in-place changes keeping the MAC, replacement, drift, re-creation,
//! import, destroy leaving nothing behind. Everything but the journal check also runs in live
//! mode (see `tests/provider/support/host.rs`), observed through the PVE API.

use crate::support;

use support::{Host, Observer, SimClient, Workspace, flat};

/// The default world plus a second template, so a template change can be planned.
fn sim_config() -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    let mut second = config
        .vms
        .iter()
        .find(|vm| vm.vmid == 9000)
        .expect("the default world has template 9000")
        .clone();
    second.vmid = 9001;
    second
        .config
        .insert("name".into(), "debian-13-proxy-b".into());
    second.config.insert(
        "scsi0".into(),
        "vmdata:9001/base-9001-disk-0.qcow2,iothread=1,size=4G".into(),
    );
    second.config.insert(
        "net0".into(),
        "virtio=BC:24:11:9A:00:02,bridge=vmbr0,firewall=1".into(),
    );
    config.vms.push(second);
    config
}

struct Fleet {
    prefix: String,
    nodes: Vec<String>,
    template: String,
    seed_storage: String,
    bridge: String,
    cores: u32,
    memory: u32,
    disk_gib: u32,
    vlan_tag: Option<u32>,
    pool: Option<String>,
    template_of_last: String,
    user_data_of_last: &'static str,
}

impl Fleet {
    fn new(host: &Host) -> Self {
        Self {
            prefix: host.prefix.clone(),
            nodes: host.facts.nodes.clone(),
            template: host.facts.template.clone(),
            seed_storage: host.facts.seed_storage.clone(),
            bridge: host.facts.bridge.clone(),
            cores: 1,
            memory: 1024,
            disk_gib: 8,
            vlan_tag: host.facts.vlan,
            pool: host.facts.pool.clone(),
            template_of_last: host.facts.template.clone(),
            user_data_of_last: r"#cloud-config\npackages: [nginx]\n",
        }
    }
}

fn fleet_tf(fleet: &Fleet) -> String {
    let nodes = fleet
        .nodes
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let vlan = fleet
        .vlan_tag
        .map(|v| format!("  vlan_tag  = {v}\n"))
        .unwrap_or_default();
    let pool = fleet
        .pool
        .as_ref()
        .map(|p| format!("  pool      = \"{p}\"\n"))
        .unwrap_or_default();
    format!(
        r##"{preamble}
provider "proxmox" {{
  seed_storage = "{seed_storage}"
}}

locals {{
  nodes = [{nodes}]
}}

resource "proxmox_proxy_vm" "edge" {{
  count     = 3
  name      = "{prefix}edge-${{count.index}}"
  node      = local.nodes[count.index % length(local.nodes)]
  template  = count.index == 2 ? "{template_of_last}" : "{template}"
  cores     = {cores}
  memory    = {memory}
  disk_gib  = {disk}
  bridge    = "{bridge}"
{vlan}{pool}  tags      = ["edge", "team-a"]
  user_data = count.index == 2 ? "{user_data_of_last}" : "#cloud-config\npackages: [nginx]\n"
  # This lifecycle checks the attached seed (its drift, its import); the default's detach
  # has its own tests (acc_seed_life).
  seed_lifetime = "vm"
}}

output "addresses" {{ value = proxmox_proxy_vm.edge[*].ipv4_address }}
output "macs" {{ value = proxmox_proxy_vm.edge[*].mac_address }}
output "vmids" {{ value = proxmox_proxy_vm.edge[*].vmid }}
"##,
        preamble = Workspace::preamble(),
        seed_storage = fleet.seed_storage,
        prefix = fleet.prefix,
        template = fleet.template,
        template_of_last = fleet.template_of_last,
        user_data_of_last = fleet.user_data_of_last,
        bridge = fleet.bridge,
        cores = fleet.cores,
        memory = fleet.memory,
        disk = fleet.disk_gib,
    )
}

/// The configs of every template of the test nodes (by VMID), read through the API: what
/// "nothing foreign was touched" can check on a live host, where others may use other VMs.
async fn templates(host: &Host, pve: &Observer) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for node in &host.facts.nodes {
        let vms = pve.api("GET", &format!("/nodes/{node}/qemu"), &[]).await;
        for vm in vms.as_array().cloned().unwrap_or_default() {
            if vm["template"].as_u64() == Some(1) || vm["template"] == "1" {
                let vmid = vm["vmid"].to_string();
                let config = pve
                    .api("GET", &format!("/nodes/{node}/qemu/{vmid}/config"), &[])
                    .await;
                out.push(serde_json::json!({"vmid": vmid, "config": config}));
            }
        }
    }
    out
}

async fn outputs(ws: &Workspace) -> serde_json::Value {
    let out = ws.terraform(&["output", "-json"]).await.success();
    serde_json::from_str(&out.stdout()).unwrap()
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string())
        })
        .collect()
}

fn apply_summary(out: &support::TfOutput) -> String {
    out.stdout()
        .lines()
        .find(|l| l.starts_with("Apply complete!"))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn fleet_lifecycle_create_change_drift_import_destroy() {
    let Some(host) = Host::start(
        "fleet_lifecycle_create_change_drift_import_destroy",
        sim_config,
    )
    .await
    else {
        return;
    };
    let pve = host.observer();
    // On the simulator every VM below 9000 is foreign; on a live host others may be busy
    // with their own VMs, so what must stay untouched there is the templates.
    let foreign = async || match host.sim() {
        Some(sim) => sim.state().await["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|vm| vm["vmid"].as_u64().unwrap() < 9000)
            .cloned()
            .collect::<Vec<serde_json::Value>>(),
        None => templates(&host, &pve).await,
    };
    let foreign_before = foreign().await;
    let ws = Workspace::new(host.target.clone());
    let mut fleet = Fleet::new(&host);
    ws.write_main_tf(&fleet_tf(&fleet));
    ws.init().await;

    // Create three, each with an address from the guest agent.
    let out = ws.apply().await.success();
    assert!(
        apply_summary(&out).contains("3 added, 0 changed, 0 destroyed"),
        "{}",
        out.all_text()
    );
    ws.assert_plans_empty().await;
    let first = outputs(&ws).await;
    let addresses = strings(&first["addresses"]);
    assert!(
        addresses
            .iter()
            .all(|a| a.parse::<std::net::Ipv4Addr>().is_ok()),
        "no IPv4 addresses: {addresses:?}"
    );
    let macs = strings(&first["macs"]);
    let ours = pve.our_vms().await;
    assert_eq!(ours.len(), 3, "{ours:#?}");
    let seeds_at = format!("{}:iso/", host.facts.seed_storage);
    for vm in &ours {
        // As a set: the order PVE keeps them in follows the datacenter's `tag-style`.
        let mut tags: Vec<&str> = vm["tags"]
            .as_str()
            .unwrap()
            .split([';', ',', ' '])
            .collect();
        tags.sort_unstable();
        assert_eq!(
            tags,
            ["edge", "proxyvm", "team-a"],
            "tags as PVE stores them"
        );
        assert!(
            vm["config"]["ide2"]
                .as_str()
                .unwrap()
                .starts_with(&seeds_at),
            "{vm}"
        );
        assert_eq!(vm["config"]["agent"], "1");
    }
    assert_eq!(pve.volumes_on(&host.facts.seed_storage).await.len(), 3);

    // In-place changes: cores, memory, disk growth and the VLAN (to the lab's second one),
    // keeping every MAC.
    fleet.cores = 2;
    fleet.memory = 2048;
    fleet.disk_gib = 10;
    match host.facts.vlan_alt {
        Some(tag) => fleet.vlan_tag = Some(tag),
        None => support::skip_part(
            "fleet_lifecycle_create_change_drift_import_destroy",
            "the in-place VLAN change",
            "set PROXMOX_VE_TEST_VLAN_ALT to a second VLAN tag of the test bridge",
        ),
    }
    ws.write_main_tf(&fleet_tf(&fleet));
    let out = ws.apply().await.success();
    assert!(
        apply_summary(&out).contains("0 added, 3 changed, 0 destroyed"),
        "{}",
        out.all_text()
    );
    ws.assert_plans_empty().await;
    assert_eq!(
        strings(&outputs(&ws).await["macs"]),
        macs,
        "a MAC changed with the VLAN"
    );
    for vm in pve.our_vms().await {
        let net0 = vm["config"]["net0"].as_str().unwrap();
        match fleet.vlan_tag {
            Some(tag) => assert!(net0.contains(&format!("tag={tag}")), "{vm}"),
            None => assert!(!net0.contains("tag="), "{vm}"),
        }
        assert!(
            vm["config"]["scsi0"].as_str().unwrap().contains("size=10G"),
            "{vm}"
        );
    }

    // A template change replaces that VM only; a lab without a second template
    // (`PROXMOX_VE_TEST_TEMPLATE_ALT`) changes the last VM's user-data instead (which also
    // replaces it).
    match &host.facts.template_alt {
        Some(template) => fleet.template_of_last = template.clone(),
        None => {
            support::skip_part(
                "fleet_lifecycle_create_change_drift_import_destroy",
                "the template change",
                "set PROXMOX_VE_TEST_TEMPLATE_ALT to a second template; the user-data change \
                    replaces the VM instead",
            );
            fleet.user_data_of_last = r"#cloud-config\npackages: [nginx, curl]\n";
        }
    }
    ws.write_main_tf(&fleet_tf(&fleet));
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.stdout().contains("forces replacement"),
        "{}",
        plan.stdout()
    );
    let out = ws.apply().await.success();
    assert!(
        apply_summary(&out).contains("1 added, 0 changed, 1 destroyed"),
        "{}",
        out.all_text()
    );
    ws.assert_plans_empty().await;
    assert_eq!(pve.our_vms().await.len(), 3);
    assert_eq!(
        pve.volumes_on(&host.facts.seed_storage).await.len(),
        3,
        "the replaced VM's seed leaked"
    );

    // Drift behind Terraform's back: cores changed through the API, a VM stopped.
    let vmids = strings(&outputs(&ws).await["vmids"]);
    let node = |i: usize| host.facts.node(i).to_owned();
    pve.api(
        "PUT",
        &format!("/nodes/{}/qemu/{}/config", node(0), vmids[0]),
        &[("cores", "4")],
    )
    .await;
    let upid = pve
        .api(
            "POST",
            &format!("/nodes/{}/qemu/{}/status/stop", node(1), vmids[1]),
            &[],
        )
        .await;
    pve.wait_task(&upid).await;
    let plan = ws
        .terraform(&["plan", "-detailed-exitcode", "-no-color", "-input=false"])
        .await;
    assert_eq!(plan.code(), 2, "drift not shown:\n{}", plan.all_text());
    let text = plan.stdout();
    assert!(text.contains("cores") && text.contains("4 -> 2"), "{text}");
    assert!(
        text.contains("started") && text.contains("false -> true"),
        "{text}"
    );
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    let vm1 = pve
        .vm_at(vmids[1].parse().unwrap())
        .await
        .expect("the stopped VM is gone");
    assert_eq!(vm1["status"], "running");

    // A VM deleted behind Terraform's back is made again. The state still records its seed,
    // which PVE's delete keeps: the plan replaces the instance, and its destroy half deletes
    // that seed (the refresh warns of it).
    let node3_vmid = &vmids[2];
    let upid = pve
        .api(
            "POST",
            &format!("/nodes/{}/qemu/{node3_vmid}/status/stop", node(2)),
            &[],
        )
        .await;
    pve.wait_task(&upid).await;
    let upid = pve
        .api(
            "DELETE",
            &format!("/nodes/{}/qemu/{node3_vmid}", node(2)),
            &[("purge", "1")],
        )
        .await;
    pve.wait_task(&upid).await;
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let text = flat(&plan.all_text());
    assert!(
        text.contains("1 to add, 0 to change, 1 to destroy"),
        "{text}"
    );
    assert!(
        text.contains("status = \"gone\" -> \"running\" # forces replacement"),
        "{text}"
    );
    assert!(text.contains("Proxy VM gone; its seed is left"), "{text}");
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    assert_eq!(pve.our_vms().await.len(), 3);

    // Import round-trips: forget one, import it by node/vmid, and the plan is empty (the
    // import records `seed_lifetime = "vm"` from the seed it finds attached, #43).
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge[0]"])
        .await
        .success();
    ws.terraform(&[
        "import",
        "-no-color",
        "-input=false",
        "proxmox_proxy_vm.edge[0]",
        &format!("{}/{}", node(0), vmids[0]),
    ])
    .await
    .success();
    ws.assert_plans_empty().await;
    // And by bare VMID.
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge[1]"])
        .await
        .success();
    ws.terraform(&[
        "import",
        "-no-color",
        "-input=false",
        "proxmox_proxy_vm.edge[1]",
        &vmids[1],
    ])
    .await
    .success();
    ws.assert_plans_empty().await;

    // Destroy leaves no VM of ours and no seed.
    ws.destroy().await.success();
    assert!(
        pve.our_vms().await.is_empty(),
        "VMs left: {:#?}",
        pve.our_vms().await
    );
    assert!(
        pve.volumes_on(&host.facts.seed_storage).await.is_empty(),
        "seeds left: {:#?}",
        pve.volumes_on(&host.facts.seed_storage).await
    );
    let foreign_after = foreign().await;
    assert_eq!(foreign_before, foreign_after, "a foreign VM was touched");
}

/// A VM without our mark, made behind Terraform's back: on the simulator the default world
/// has them (`dns1` is 100, `gitlab` is a plain VM); on a live host the test clones one from
/// the template and deletes it at the end. Returns its VMID and name.
async fn foreign_vm(host: &Host) -> (u32, String) {
    if !host.is_live() {
        return (100, "gitlab".into());
    }
    host.make_unmarked_vm("foreign").await
}

#[tokio::test(flavor = "multi_thread")]
async fn importing_a_foreign_vm_is_refused() {
    let Some(host) = Host::start("importing_a_foreign_vm_is_refused", sim_config).await else {
        return;
    };
    let (foreign, _) = foreign_vm(&host).await;
    let ws = Workspace::new(host.target.clone());
    ws.write_main_tf(&format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"{}\"\n}}\nresource \"proxmox_proxy_vm\" \
            \"dns\" {{\n  name = \"{}\"\n  node = \"{}\"\n  template = \"{}\"\n}}\n",
        Workspace::preamble(),
        host.facts.seed_storage,
        host.name("dns1"),
        host.facts.node(0),
        host.facts.template,
    ));
    ws.init().await;
    let out = ws
        .terraform(&[
            "import",
            "-no-color",
            "-input=false",
            "proxmox_proxy_vm.dns",
            &foreign.to_string(),
        ])
        .await
        .failure();
    assert!(
        out.all_text().contains("ownership mark"),
        "{}",
        out.all_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_refused_at_plan_before_any_write() {
    let Some(host) = Host::start("bad_input_is_refused_at_plan_before_any_write", sim_config).await
    else {
        return;
    };
    let ws = Workspace::new(host.target.clone());
    ws.write_main_tf(&format!(
        "{}\nresource \"proxmox_proxy_vm\" \"bad\" {{\n  name = \"{}edge_1\"\n  node = \
            \"{}\"\n  template = \"{}\"\n  vlan_tag = 5000\n  user_data = \"packages: \
            [nginx]\"\n  timeouts = {{ create = \"soon\" }}\n}}\n",
        Workspace::preamble(),
        host.prefix,
        host.facts.node(0),
        host.facts.template,
    ));
    ws.init().await;
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = out.all_text();
    // Each diagnostic points at its attribute's line (the preamble has 8 lines).
    for (message, line) in [
        ("is not a DNS name", 11),
        ("vlan_tag value must be", 14),
        ("must start with a line cloud-init recognises", 15),
        ("is not a duration", 16),
    ] {
        let at = text
            .find(message)
            .unwrap_or_else(|| panic!("no diagnostic `{message}`:\n{text}"));
        let before = &text[..at];
        let pointer = before
            .rfind("on main.tf line ")
            .map(|i| &before[i..])
            .unwrap_or_default();
        assert!(
            pointer.starts_with(&format!("on main.tf line {line},")),
            "`{message}` not at line {line}:\n{text}"
        );
    }
    match host.sim() {
        Some(sim) => {
            let journal = sim_writes(&sim).await;
            assert!(
                journal.is_empty(),
                "API writes before the input was valid: {journal:?}"
            );
        }
        // No journal on a live host: what a write would have left is a VM or a seed.
        None => {
            let pve = host.observer();
            assert!(pve.our_vms().await.is_empty());
            assert!(pve.volumes_on(&host.facts.seed_storage).await.is_empty());
        }
    }
}

/// Every write request the simulator has seen.
async fn sim_writes(sim: &SimClient) -> Vec<String> {
    sim.journal()
        .await
        .into_iter()
        .filter(|entry| entry["method"] != "GET")
        .map(|entry| format!("{} {}", entry["method"], entry["path"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn reboot_if_needed_applies_pending_changes() {
    let Some(host) = Host::start("reboot_if_needed_applies_pending_changes", sim_config).await
    else {
        return;
    };
    let pve = host.observer();
    let ws = Workspace::new(host.target.clone());
    let tf = |cores: u32| {
        format!(
            "{}\nprovider \"proxmox\" {{\n  seed_storage = \"{}\"\n}}\nresource \
                \"proxmox_proxy_vm\" \"one\" {{\n  name = \"{}\"\n  node = \"{}\"\n  template = \
                \"{}\"\n  cores = {cores}\n  reboot_if_needed = true\n}}\n",
            Workspace::preamble(),
            host.facts.seed_storage,
            host.name("reboot-1"),
            host.facts.node(0),
            host.facts.template,
        )
    };
    ws.write_main_tf(&tf(1));
    ws.init().await;
    ws.apply().await.success();
    ws.write_main_tf(&tf(3));
    let out = ws.apply().await.success();
    assert!(
        !out.all_text().contains("pending until reboot"),
        "{}",
        out.all_text()
    );
    let ours = pve.our_vms().await;
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0]["status"], "running");
    assert_eq!(ours[0]["config"]["cores"], "3");
    assert!(
        ours[0]["pending"].as_object().unwrap().is_empty(),
        "still pending: {}",
        ours[0]["pending"]
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(pve.our_vms().await.is_empty());
}

/// A storage the test nodes have that takes no ISO images (`vmdata` on the simulator).
async fn storage_without_iso(host: &Host) -> Option<String> {
    if !host.is_live() {
        return Some("vmdata".into());
    }
    let storages = host
        .client()
        .node(host.facts.node(0))
        .storages(None)
        .await
        .unwrap();
    storages
        .into_iter()
        .find(|s| s.enabled && s.active && !s.accepts("iso"))
        .map(|s| s.storage)
}

/// The flattened text of a plan that must fail.
async fn refused_plan(ws: &Workspace) -> String {
    flat(
        &ws.terraform(&["plan", "-no-color", "-input=false"])
            .await
            .failure()
            .all_text(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_name_the_vm_quote_pve_and_hint() {
    let Some(host) = Host::start("failures_name_the_vm_quote_pve_and_hint", sim_config).await
    else {
        return;
    };
    let pve = host.observer();
    let (_, plain_vm) = foreign_vm(&host).await;
    let name = host.name("hint-1");
    let ws = Workspace::new(host.target.clone());
    let tf = |template: &str, seed_storage: &str| {
        format!(
            "{}\nresource \"proxmox_proxy_vm\" \"one\" {{\n  name = \"{name}\"\n  node = \
                \"{}\"\n  template = \"{template}\"\n  seed_storage = \"{seed_storage}\"\n}}\n",
            Workspace::preamble(),
            host.facts.node(0),
        )
    };
    ws.init_with(&tf(&plain_vm, &host.facts.seed_storage)).await;

    // A VM that is not a template: refused at plan, on `template`, before anything is
    // cloned.
    let text = refused_plan(&ws).await;
    assert!(text.contains("Not a template"), "{text}");
    assert!(
        text.contains(&format!("template = \"{plain_vm}\"")),
        "{text}"
    );
    assert!(
        text.contains("is not a template") && text.contains("Convert it to a template"),
        "{text}"
    );
    ws.apply().await.failure();
    assert!(
        pve.our_vms().await.is_empty(),
        "a VM was made for a bad template"
    );

    // A seed storage that does not take ISO images: refused at plan, with what to do.
    match storage_without_iso(&host).await {
        Some(no_iso) => {
            ws.write_main_tf(&tf(&host.facts.template, &no_iso));
            let text = refused_plan(&ws).await;
            assert!(text.contains("does not take ISO images"), "{text}");
            assert!(
                text.contains(&format!("seed_storage = \"{no_iso}\"")),
                "{text}"
            );
            assert!(text.contains("or choose another"), "no hint:\n{text}");
            ws.apply().await.failure();
            assert!(
                pve.our_vms().await.is_empty(),
                "a VM was cloned before the seed storage was checked"
            );
        }
        None => support::skip_part(
            "failures_name_the_vm_quote_pve_and_hint",
            "a seed storage without ISO content",
            &format!("{} has no storage without ISO content", host.facts.node(0)),
        ),
    }
    ws.destroy().await.success();
}

/// Issue #26, item 1, as a new user met it: two VMs placed by the provider (`node` unset),
/// gated by `proxmox_health` in a `check` and a `precondition`; a cores change left pending
/// until reboot (the warning says to set reboot_if_needed = true), then reboot_if_needed is
/// set and applied from a saved plan. The apply must reboot and converge, not end in
/// "Provider produced inconsistent result after apply".
#[tokio::test(flavor = "multi_thread")]
async fn reboot_if_needed_set_after_a_pending_change_reboots_and_converges() {
    if !support::acceptance_enabled(
        "reboot_if_needed_set_after_a_pending_change_reboots_and_converges",
    ) {
        return;
    }
    let (_sim, target) = support::start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = |cores: [u32; 2], reboot: &str| {
        format!(
            r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

data "proxmox_health" "pve" {{
  templates = ["debian-13-proxy"]
}}

check "proxmox" {{
  assert {{
    condition     = data.proxmox_health.pve.healthy
    error_message = "PVE health: ${{join("; ", data.proxmox_health.pve.messages)}}"
  }}
}}

resource "proxmox_proxy_vm" "a" {{
  name     = "pending-a"
  template = "debian-13-proxy"
  memory   = 512
  cores    = {}
{reboot}
  lifecycle {{
    precondition {{
      condition     = data.proxmox_health.pve.healthy
      error_message = "PVE is not ready: ${{join(", ", data.proxmox_health.pve.reasons)}}"
    }}
  }}
}}

resource "proxmox_proxy_vm" "b" {{
  name     = "pending-b"
  template = "debian-13-proxy"
  memory   = 512
  cores    = {}
{reboot}
  lifecycle {{
    precondition {{
      condition     = data.proxmox_health.pve.healthy
      error_message = "PVE is not ready: ${{join(", ", data.proxmox_health.pve.reasons)}}"
    }}
  }}
}}
"#,
            Workspace::preamble(),
            cores[0],
            cores[1],
        )
    };
    let cores_of = |state: &serde_json::Value| {
        let mut out: Vec<(String, String, String, bool)> = state["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|vm| {
                vm["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("pending-"))
            })
            .map(|vm| {
                (
                    vm["name"].as_str().unwrap().to_owned(),
                    vm["config"]["cores"].as_str().unwrap_or("?").to_owned(),
                    vm["status"].as_str().unwrap_or("?").to_owned(),
                    vm["pending"].as_object().is_some_and(|p| !p.is_empty()),
                )
            })
            .collect();
        out.sort();
        out
    };
    ws.init_with(&tf([2, 3], "")).await;
    ws.apply().await.success();
    ws.assert_plans_empty().await;

    // A change PVE holds until the next boot: applied with a warning, left pending.
    ws.write_main_tf(&tf([3, 4], ""));
    let out = ws.apply().await.success();
    assert!(
        out.all_text().contains("pending until reboot"),
        "{}",
        out.all_text()
    );
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.all_text().contains("reboot_if_needed = true"),
        "the warning gives the advice this test follows:\n{}",
        plan.all_text()
    );

    // The advice: set reboot_if_needed = true, from a saved plan as a careful user does.
    ws.write_main_tf(&tf([3, 4], "  reboot_if_needed = true\n"));
    ws.terraform(&["plan", "-no-color", "-input=false", "-out=tfplan"])
        .await
        .success();
    let out = ws
        .terraform(&["apply", "-no-color", "-input=false", "tfplan"])
        .await
        .success();
    assert!(
        !out.all_text().contains("inconsistent result"),
        "{}",
        out.all_text()
    );
    assert_eq!(
        cores_of(&sim.state().await),
        [
            ("pending-a".into(), "3".into(), "running".into(), false),
            ("pending-b".into(), "4".into(), "running".into(), false),
        ]
    );
    ws.assert_plans_empty().await;

    // And without a saved plan, the same sequence once more.
    ws.write_main_tf(&tf([4, 5], ""));
    ws.apply().await.success();
    ws.write_main_tf(&tf([4, 5], "  reboot_if_needed = true\n"));
    ws.apply().await.success();
    assert_eq!(
        cores_of(&sim.state().await),
        [
            ("pending-a".into(), "4".into(), "running".into(), false),
            ("pending-b".into(), "5".into(), "running".into(), false),
        ]
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

/// Issue #26, item 2: a VM made with `user_data`, imported through `-generate-config-out`
/// and an import block. The generated configuration leaves `user_data` unset (Terraform
/// writes `user_data = null # sensitive`: a write-only value cannot be read back), which
/// means "keep the VM's seed": the plan imports and changes nothing, neither with the
/// generated `vmid` ("Proxy VM already exists" before) nor without it (`seed_hash` forced a
/// replacement before).
#[tokio::test(flavor = "multi_thread")]
async fn import_through_generated_config_keeps_the_seed_of_user_data() {
    if !support::acceptance_enabled("import_through_generated_config_keeps_the_seed_of_user_data") {
        return;
    }
    let (_sim, target) = support::start_sim(sim_config()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let provider = format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n}}\n",
        Workspace::preamble()
    );
    ws.init_with(&format!(
        "{provider}\nresource \"proxmox_proxy_vm\" \"edge\" {{\n  name      = \
            \"imported-1\"\n  node      = \"pve1\"\n  template  = \"debian-13-proxy\"\n  user_data \
            = \"#cloud-config\\npackages: [haproxy]\\n\"\n}}\n"
    ))
    .await;
    ws.apply().await.success();
    let vmid = ws.state().await["values"]["root_module"]["resources"][0]["values"]["vmid"]
        .as_i64()
        .unwrap();
    let seed_before = sim.volumes_on("proxy-seeds").await;
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge"])
        .await
        .success();

    for keep_vmid in [true, false] {
        let import_block = format!(
            "{provider}\nimport {{\n  to = proxmox_proxy_vm.edge\n  id = \"pve1/{vmid}\"\n}}\n"
        );
        ws.write_main_tf(&import_block);
        let _ = std::fs::remove_file(ws.work_dir().join("generated.tf"));
        let out = ws
            .terraform(&[
                "plan",
                "-no-color",
                "-input=false",
                "-generate-config-out=generated.tf",
            ])
            .await;
        let generated = std::fs::read_to_string(ws.work_dir().join("generated.tf"))
            .unwrap_or_else(|_| panic!("no generated.tf:\n{}", out.all_text()));
        assert!(
            generated.contains("user_data") && generated.contains("null"),
            "{generated}"
        );
        let generated = if keep_vmid {
            generated
        } else {
            generated
                .lines()
                .filter(|l| !l.trim_start().starts_with("vmid "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        std::fs::write(ws.work_dir().join("generated.tf"), &generated).unwrap();
        let plan = ws
            .terraform(&["plan", "-no-color", "-input=false"])
            .await
            .success();
        assert!(
            plan.stdout()
                .contains("1 to import, 0 to add, 0 to change, 0 to destroy"),
            "vmid kept: {keep_vmid}\n{generated}\n{}",
            plan.all_text()
        );
        ws.apply().await.success();
        ws.assert_plans_empty().await;
        // Nothing was replaced: the same VM and the same seed.
        assert_eq!(sim.volumes_on("proxy-seeds").await, seed_before);
        assert_eq!(
            ws.state().await["values"]["root_module"]["resources"][0]["values"]["vmid"],
            vmid
        );
        if keep_vmid {
            // Forget it again for the second round, without `vmid` in the configuration.
            ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge"])
                .await
                .success();
        }
    }

    // A replacement of the imported VM with its `vmid` kept: the plan-time check of the VMID
    // knows the VM there is the one the replacement destroys first, not another state's.
    let generated = std::fs::read_to_string(ws.work_dir().join("generated.tf")).unwrap();
    let replaced = generated
        .replace("\"debian-13-proxy\"", "\"debian-13-proxy-b\"")
        .replace(
            "resource \"proxmox_proxy_vm\" \"edge\" {",
            &format!("resource \"proxmox_proxy_vm\" \"edge\" {{\n  vmid = {vmid}"),
        );
    std::fs::write(ws.work_dir().join("generated.tf"), &replaced).unwrap();
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.stdout()
            .contains("1 to add, 0 to change, 1 to destroy"),
        "{replaced}\n{}",
        plan.all_text()
    );
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    assert_eq!(
        ws.state().await["values"]["root_module"]["resources"][0]["values"]["vmid"],
        vmid
    );
    std::fs::write(ws.work_dir().join("generated.tf"), &generated).unwrap();

    // A user_data given later is a new seed: that replaces the VM, as for any state.
    let with_user_data: String = generated
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("user_data ") {
                "  user_data = \"#cloud-config\\npackages: [nginx]\\n\"".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(ws.work_dir().join("generated.tf"), with_user_data).unwrap();
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.stdout().contains("seed_hash") && plan.stdout().contains("forces replacement"),
        "{}",
        plan.all_text()
    );
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}
