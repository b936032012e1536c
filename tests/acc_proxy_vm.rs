//! Acceptance: the whole life of proxy VMs driven by the real `terraform` against pve-sim —
//! create, empty plans, in-place changes keeping the MAC, replacement, drift, re-creation,
//! import, destroy leaving nothing behind.

mod support;

use support::{SimClient, Workspace, acceptance_enabled, start_sim};

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
    cores: u32,
    memory: u32,
    disk_gib: u32,
    vlan_tag: u32,
    template_of_last: &'static str,
}

fn fleet_tf(fleet: &Fleet) -> String {
    format!(
        r##"{preamble}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "edge" {{
  count     = 3
  name      = "edge-${{count.index}}"
  node      = "pve${{count.index + 1}}"
  template  = count.index == 2 ? "{template}" : "debian-13-proxy"
  cores     = {cores}
  memory    = {memory}
  disk_gib  = {disk}
  bridge    = "vmbr0"
  vlan_tag  = {vlan}
  tags      = ["edge", "team-a"]
  user_data = "#cloud-config\npackages: [nginx]\n"
}}

output "addresses" {{ value = proxmox_proxy_vm.edge[*].ipv4_address }}
output "macs" {{ value = proxmox_proxy_vm.edge[*].mac_address }}
output "vmids" {{ value = proxmox_proxy_vm.edge[*].vmid }}
"##,
        preamble = Workspace::preamble(),
        template = fleet.template_of_last,
        cores = fleet.cores,
        memory = fleet.memory,
        disk = fleet.disk_gib,
        vlan = fleet.vlan_tag,
    )
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
    if !acceptance_enabled("fleet_lifecycle_create_change_drift_import_destroy") {
        return;
    }
    let (_sim, target) = start_sim(sim_config()).await;
    let sim = SimClient::new(&target);
    let foreign_before: Vec<serde_json::Value> = sim.state().await["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["vmid"].as_u64().unwrap() < 9000)
        .cloned()
        .collect();
    let ws = Workspace::new(target);
    let mut fleet = Fleet {
        cores: 1,
        memory: 1024,
        disk_gib: 8,
        vlan_tag: 4,
        template_of_last: "debian-13-proxy",
    };
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
    let ours = sim.our_vms().await;
    assert_eq!(ours.len(), 3, "{ours:#?}");
    for vm in &ours {
        let tags = vm["tags"].as_str().unwrap();
        assert_eq!(tags, "edge;proxyvm;team-a", "tags as PVE stores them");
        assert!(
            vm["config"]["ide2"]
                .as_str()
                .unwrap()
                .starts_with("proxy-seeds:iso/"),
            "{vm}"
        );
        assert_eq!(vm["config"]["agent"], "1");
    }
    assert_eq!(sim.volumes_on("proxy-seeds").await.len(), 3);

    // In-place changes: cores, memory, disk growth and VLAN, keeping every MAC.
    fleet.cores = 2;
    fleet.memory = 2048;
    fleet.disk_gib = 10;
    fleet.vlan_tag = 5;
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
    for vm in sim.our_vms().await {
        assert!(
            vm["config"]["net0"].as_str().unwrap().contains("tag=5"),
            "{vm}"
        );
        assert!(
            vm["config"]["scsi0"].as_str().unwrap().contains("size=10G"),
            "{vm}"
        );
    }

    // A template change replaces that VM only.
    fleet.template_of_last = "debian-13-proxy-b";
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
    assert_eq!(sim.our_vms().await.len(), 3);
    assert_eq!(
        sim.volumes_on("proxy-seeds").await.len(),
        3,
        "the replaced VM's seed leaked"
    );

    // Drift behind Terraform's back: cores changed through the API, a VM stopped.
    let vmids = strings(&outputs(&ws).await["vmids"]);
    sim.api(
        "PUT",
        &format!("/nodes/pve1/qemu/{}/config", vmids[0]),
        &[("cores", "4")],
    )
    .await;
    let upid = sim
        .api(
            "POST",
            &format!("/nodes/pve2/qemu/{}/status/stop", vmids[1]),
            &[],
        )
        .await;
    sim.wait_task(&upid).await;
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
    let state = sim.state().await;
    let vm1 = state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|vm| vm["vmid"].as_u64().map(|v| v.to_string()).as_deref() == Some(vmids[1].as_str()))
        .unwrap();
    assert_eq!(vm1["status"], "running");

    // A VM deleted behind Terraform's back is created again.
    let node3_vmid = &vmids[2];
    let upid = sim
        .api(
            "POST",
            &format!("/nodes/pve3/qemu/{node3_vmid}/status/stop"),
            &[],
        )
        .await;
    sim.wait_task(&upid).await;
    let upid = sim
        .api(
            "DELETE",
            &format!("/nodes/pve3/qemu/{node3_vmid}"),
            &[("purge", "1")],
        )
        .await;
    sim.wait_task(&upid).await;
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        plan.stdout()
            .contains("1 to add, 0 to change, 0 to destroy"),
        "{}",
        plan.stdout()
    );
    ws.apply().await.success();
    ws.assert_plans_empty().await;
    assert_eq!(sim.our_vms().await.len(), 3);

    // Import round-trips: forget one, import it by node/vmid, and the plan is empty.
    ws.terraform(&["state", "rm", "proxmox_proxy_vm.edge[0]"])
        .await
        .success();
    ws.terraform(&[
        "import",
        "-no-color",
        "-input=false",
        "proxmox_proxy_vm.edge[0]",
        &format!("pve1/{}", vmids[0]),
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
        sim.our_vms().await.is_empty(),
        "VMs left: {:#?}",
        sim.our_vms().await
    );
    assert!(
        sim.volumes_on("proxy-seeds").await.is_empty(),
        "seeds left: {:#?}",
        sim.volumes_on("proxy-seeds").await
    );
    let foreign_after: Vec<serde_json::Value> = sim.state().await["vms"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|vm| vm["vmid"].as_u64().unwrap() < 9000)
        .cloned()
        .collect();
    assert_eq!(foreign_before, foreign_after, "a foreign VM was touched");
}

#[tokio::test(flavor = "multi_thread")]
async fn importing_a_foreign_vm_is_refused() {
    if !acceptance_enabled("importing_a_foreign_vm_is_refused") {
        return;
    }
    let (_sim, target) = start_sim(sim_config()).await;
    let ws = Workspace::new(target);
    ws.write_main_tf(&format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n}}\nresource \"proxmox_proxy_vm\" \"dns\" {{\n  name = \"dns1\"\n  node = \"pve1\"\n  template = \"debian-13-proxy\"\n}}\n",
        Workspace::preamble()
    ));
    ws.init().await;
    let out = ws
        .terraform(&[
            "import",
            "-no-color",
            "-input=false",
            "proxmox_proxy_vm.dns",
            "100",
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
    if !acceptance_enabled("bad_input_is_refused_at_plan_before_any_write") {
        return;
    }
    let (_sim, target) = start_sim(sim_config()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.write_main_tf(&format!(
        "{}\nresource \"proxmox_proxy_vm\" \"bad\" {{\n  name = \"edge_1\"\n  node = \"pve1\"\n  template = \"debian-13-proxy\"\n  vlan_tag = 5000\n  user_data = \"packages: [nginx]\"\n  timeouts = {{ create = \"soon\" }}\n}}\n",
        Workspace::preamble()
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
    let journal = sim_writes(&sim).await;
    assert!(
        journal.is_empty(),
        "API writes before the input was valid: {journal:?}"
    );
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
    if !acceptance_enabled("reboot_if_needed_applies_pending_changes") {
        return;
    }
    let (_sim, target) = start_sim(sim_config()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = |cores: u32| {
        format!(
            "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n}}\nresource \"proxmox_proxy_vm\" \"one\" {{\n  name = \"reboot-1\"\n  node = \"pve1\"\n  template = \"debian-13-proxy\"\n  cores = {cores}\n  reboot_if_needed = true\n}}\n",
            Workspace::preamble()
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
    let ours = sim.our_vms().await;
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
    assert!(sim.our_vms().await.is_empty());
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
    if !acceptance_enabled("failures_name_the_vm_quote_pve_and_hint") {
        return;
    }
    let (_sim, target) = start_sim(sim_config()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let tf = |template: &str, seed_storage: &str| {
        format!(
            "{}\nresource \"proxmox_proxy_vm\" \"one\" {{\n  name = \"hint-1\"\n  node = \"pve1\"\n  template = \"{template}\"\n  seed_storage = \"{seed_storage}\"\n}}\n",
            Workspace::preamble()
        )
    };
    ws.init_with(&tf("gitlab", "proxy-seeds")).await;

    // A VM that is not a template: refused at plan, on `template`, before anything is
    // cloned.
    let text = refused_plan(&ws).await;
    assert!(text.contains("Not a template"), "{text}");
    assert!(text.contains("template = \"gitlab\""), "{text}");
    assert!(
        text.contains("is not a template") && text.contains("Convert it to a template"),
        "{text}"
    );
    ws.apply().await.failure();
    assert!(
        sim.our_vms().await.is_empty(),
        "a VM was made for a bad template"
    );

    // A seed storage that does not take ISO images: refused at plan, with what to do.
    ws.write_main_tf(&tf("debian-13-proxy", "vmdata"));
    let text = refused_plan(&ws).await;
    assert!(text.contains("does not take ISO images"), "{text}");
    assert!(text.contains("seed_storage = \"vmdata\""), "{text}");
    assert!(text.contains("or choose another"), "no hint:\n{text}");
    ws.apply().await.failure();
    assert!(
        sim.our_vms().await.is_empty(),
        "a VM was cloned before the seed storage was checked"
    );
    ws.destroy().await.success();
}

/// Terraform wraps diagnostic text at 78 columns; compare with white space folded.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
