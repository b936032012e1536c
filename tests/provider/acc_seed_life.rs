//! Acceptance (#30): the seed's life after the apply. With the defaults a create waits for
//! cloud-init's verdict and the seed leaves once it finished cleanly; a failed user-data
//! fails the apply with cloud-init's own words and the next apply replaces the VM;
//! `seed_lifetime = "vm"` keeps the seed as before. Run on the in-process pve-sim only
//! (its state and faults API).

use crate::support;

use support::{SimClient, Workspace, flat, simulator_only, start_sim};

fn fleet(count: u32, extra: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "edge" {{
  count    = {count}
  name     = "seed-life-${{count.index}}"
  template = "debian-13-proxy"
  node     = "pve1"
{extra}}}
"#,
        Workspace::preamble()
    )
}

async fn ide2_of(sim: &SimClient, vmid: u64) -> String {
    sim.api("GET", &format!("/nodes/pve1/qemu/{vmid}/config"), &[])
        .await["ide2"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A fleet made with the defaults ends with every seed detached and deleted: no file of
/// ours on the seed storage, `ide2: none`, `seed_volume` empty, and an empty plan; then
/// every VM migrates to another node, and the plan stays empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_with_defaults_ends_with_every_seed_gone() {
    let test = "a_fleet_with_defaults_ends_with_every_seed_gone";
    if !simulator_only(test, "the simulator's state") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet(10, "")).await;
    let out = ws.apply().await.success();
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 10, "{vms:?}");
    for vm in &vms {
        let vmid = vm["vmid"].as_u64().unwrap();
        assert!(
            ide2_of(&sim, vmid).await.starts_with("none"),
            "VM {vmid}'s seed is detached: {}",
            out.all_text()
        );
    }
    assert!(
        sim.volumes_on("proxy-seeds").await.is_empty(),
        "{:?}",
        sim.volumes_on("proxy-seeds").await
    );
    let state = ws.state().await.to_string();
    assert!(!state.contains("proxy-seeds:iso/"), "{state}");
    ws.assert_plans_empty().await;

    // With the seed gone from its node-local storage, every VM migrates (PVE's API, as an
    // operator draining pve1 does), and the plan stays empty.
    for vm in &vms {
        let vmid = vm["vmid"].as_u64().unwrap();
        let path = format!("/nodes/pve1/qemu/{vmid}/migrate");
        let form = [
            ("target", "pve2"),
            ("online", "1"),
            ("with-local-disks", "1"),
        ];
        let upid = sim.api("POST", &path, &form).await;
        sim.wait_task(&upid).await;
    }
    let moved = sim.our_vms().await;
    assert!(moved.iter().all(|vm| vm["node"] == "pve2"), "{moved:?}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

/// `seed_lifetime = "vm"` keeps today's behaviour: the seed stays attached and on its
/// storage until destroy, which removes it; the plan warns where that blocks migration.
#[tokio::test(flavor = "multi_thread")]
async fn seed_lifetime_vm_keeps_the_seed() {
    let test = "seed_lifetime_vm_keeps_the_seed";
    if !simulator_only(test, "the simulator's state") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet(1, "  seed_lifetime = \"vm\"\n")).await;
    let out = ws.apply().await.success();
    // `proxy-seeds` is a node-local directory in a three-node cluster: the plan warns that
    // such a VM cannot migrate (qemu-server `QemuMigrate.pm`: "local cdrom image").
    let text = flat(&out.all_text());
    assert!(text.contains("Kept seed on node-local storage"), "{text}");
    assert!(text.contains("local CD-ROM image"), "{text}");
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, vmid).await.starts_with("proxy-seeds:iso/"));
    assert_eq!(sim.volumes_on("proxy-seeds").await.len(), 1);
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

/// A degraded cloud-init (recoverable errors only, `cloud-init status` "degraded") is a
/// warning quoting them: the create succeeds and the seed still leaves.
#[tokio::test(flavor = "multi_thread")]
async fn a_degraded_cloud_init_is_a_warning() {
    let test = "a_degraded_cloud_init_is_a_warning";
    if !simulator_only(test, "the simulator's faults") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let warning = "Failed to set locale en_US.UTF-8";
    sim.set_faults(serde_json::json!({
        "cloud_init_errors": [{"vm_name_regex": "^seed-life-", "errors": [],
                               "recoverable_errors": [warning]}]
    }))
    .await;
    ws.init_with(&fleet(1, "")).await;
    let out = ws.apply().await.success();
    let text = flat(&out.all_text());
    assert!(text.contains("degraded"), "{text}");
    assert!(text.contains(warning), "{text}");
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, vmid).await.starts_with("none"), "{text}");
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// A user-data whose final stage fails makes the apply fail quoting cloud-init's error; the
/// VM and its seed stay (tainted) and the next apply replaces the VM.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_user_data_fails_the_apply_and_the_next_replaces_the_vm() {
    let test = "a_failed_user_data_fails_the_apply_and_the_next_replaces_the_vm";
    if !simulator_only(test, "the simulator's faults") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    let error = "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd)'))";
    sim.set_faults(serde_json::json!({
        "cloud_init_errors": [{"vm_name_regex": "^seed-life-", "errors": [error]}]
    }))
    .await;
    ws.init_with(&fleet(1, "")).await;
    let out = ws.apply().await.failure();
    let text = flat(&out.all_text());
    assert!(text.contains("finished with errors"), "{text}");
    assert!(text.contains("Runparts: 1 failures"), "{text}");
    let first = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(
        ide2_of(&sim, first).await.starts_with("proxy-seeds:iso/"),
        "the failed VM keeps its seed"
    );
    sim.set_faults(serde_json::json!({})).await;
    let out = ws.apply().await.success();
    assert!(
        out.stdout().contains("1 added, 0 changed, 1 destroyed"),
        "{}",
        out.stdout()
    );
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
    ws.assert_plans_empty().await;
}

/// A create that did not wait keeps its seed; the next plan finds cloud-init finished and
/// shows the detach as an in-place change, whose apply removes the seed.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_that_did_not_wait_detaches_at_the_next_apply() {
    let test = "a_create_that_did_not_wait_detaches_at_the_next_apply";
    if !simulator_only(test, "the simulator's state") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet(1, "  wait_for = \"address\"\n")).await;
    ws.apply().await.success();
    assert_eq!(sim.volumes_on("proxy-seeds").await.len(), 1);
    // cloud-init finishes `cloud_init_ms` after the agent answered: poll with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = ws
            .terraform(&["apply", "-auto-approve", "-input=false", "-no-color"])
            .await
            .success();
        if out.stdout().contains("0 added, 1 changed, 0 destroyed") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", out.stdout());
    }
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, vmid).await.starts_with("none"));
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// A VM created stopped keeps its seed (nothing booted it); the apply that starts it waits
/// for cloud-init and detaches the seed itself, so the plan after it is empty (fuzzer seed
/// 10020). Its plan shows `seed_volume` as known after apply.
#[tokio::test(flavor = "multi_thread")]
async fn the_apply_that_starts_a_stopped_vm_detaches_its_seed() {
    let test = "the_apply_that_starts_a_stopped_vm_detaches_its_seed";
    if !simulator_only(test, "the simulator's state") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet(1, "  started = false\n")).await;
    ws.apply().await.success();
    assert_eq!(sim.volumes_on("proxy-seeds").await.len(), 1);
    ws.assert_plans_empty().await;

    ws.write_main_tf(&fleet(1, "  started = true\n"));
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    assert!(
        flat(&plan.stdout()).contains("seed_volume = \"proxy-seeds:iso/"),
        "{}",
        plan.stdout()
    );
    assert!(
        plan.stdout().contains("(known after apply)"),
        "{}",
        plan.stdout()
    );
    ws.apply().await.success();
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, vmid).await.starts_with("none"));
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

/// A VM created stopped whose first boot, in the apply that starts it, fails in cloud-init:
/// that apply fails quoting cloud-init's words, as the create would have, and the seed stays
/// for debugging. The VM runs and is not replaced (a started VM cannot be tainted): the plans
/// after it are empty, and the seed stays after a later, clean boot too.
#[tokio::test(flavor = "multi_thread")]
async fn the_apply_that_starts_a_stopped_vm_whose_first_boot_fails_keeps_its_seed() {
    let test = "the_apply_that_starts_a_stopped_vm_whose_first_boot_fails_keeps_its_seed";
    if !simulator_only(test, "the simulator's faults") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet(1, "  started = false\n")).await;
    ws.apply().await.success();
    let error = "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd)'))";
    sim.set_faults(serde_json::json!({
        "cloud_init_errors": [{"vm_name_regex": "^seed-life-", "errors": [error]}]
    }))
    .await;
    ws.write_main_tf(&fleet(1, "  started = true\n"));
    let out = ws.apply().await.failure();
    let text = flat(&out.all_text());
    assert!(text.contains("finished with errors"), "{text}");
    assert!(text.contains("Runparts: 1 failures"), "{text}");
    sim.set_faults(serde_json::json!({})).await;
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, vmid).await.starts_with("proxy-seeds:iso/"));
    ws.assert_plans_empty().await;
    assert_eq!(sim.our_vms().await.len(), 1);
    assert!(ide2_of(&sim, vmid).await.starts_with("proxy-seeds:iso/"));
    assert_eq!(sim.volumes_on("proxy-seeds").await.len(), 1);
    ws.destroy().await.success();
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

/// A token without `VM.GuestAgent.FileRead` (nor `…Unrestricted`, which covers it): the
/// create warns naming the privilege and the `pveum` line, counts the VM ready at its
/// address, and keeps the seed; the plans after it stay empty.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_without_file_read_warns_and_keeps_the_seed() {
    let test = "a_token_without_file_read_warns_and_keeps_the_seed";
    if !simulator_only(test, "the simulator's privileges") {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    for privileges in config.privileges.values_mut() {
        privileges.retain(|p| p != "VM.GuestAgent.FileRead" && p != "VM.GuestAgent.Unrestricted");
    }
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet(1, "")).await;
    let out = ws.apply().await.success();
    let text = flat(&out.all_text());
    assert!(text.contains("VM.GuestAgent.FileRead"), "{text}");
    assert!(text.contains("pveum role modify"), "{text}");
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, vmid).await.starts_with("proxy-seeds:iso/"));
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

/// A guest whose qemu-ga blocks file reads (some distributions ship it so): a warning that
/// says so, and the seed stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_refuses_file_reads_keeps_its_seed() {
    let test = "a_guest_that_refuses_file_reads_keeps_its_seed";
    if !simulator_only(test, "the simulator's faults") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    sim.set_faults(serde_json::json!({
        "agent_blocked_commands": [
            {"vm_name_regex": "^seed-life-", "commands": ["guest-file-open"]}
        ]
    }))
    .await;
    let ws = Workspace::new(target);
    ws.init_with(&fleet(1, "")).await;
    let out = ws.apply().await.success();
    let text = flat(&out.all_text());
    assert!(text.contains("refuses file reads"), "{text}");
    let vmid = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, vmid).await.starts_with("proxy-seeds:iso/"));
    ws.assert_plans_empty().await;
    sim.set_faults(serde_json::json!({})).await;
    ws.destroy().await.success();
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

/// A detached VM is imported (its state records no seed) with an empty plan, and its
/// destroy leaves nothing; a changed `user_data` after the detach replaces the VM, whose
/// new seed leaves in turn.
#[tokio::test(flavor = "multi_thread")]
async fn detached_vms_import_destroy_and_replace_on_a_new_user_data() {
    let test = "detached_vms_import_destroy_and_replace_on_a_new_user_data";
    if !simulator_only(test, "the simulator's state") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&fleet(
        1,
        "  user_data = \"#cloud-config\\npackages: [haproxy]\\n\"\n",
    ))
    .await;
    ws.apply().await.success();
    let first = sim.our_vms().await[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, first).await.starts_with("none"));

    ws.write_main_tf(&fleet(
        1,
        "  user_data = \"#cloud-config\\npackages: [nginx]\\n\"\n",
    ));
    let out = ws.apply().await.success();
    assert!(
        out.stdout().contains("1 added, 0 changed, 1 destroyed"),
        "{}",
        out.stdout()
    );
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    let second = vms[0]["vmid"].as_u64().unwrap();
    assert!(ide2_of(&sim, second).await.starts_with("none"));
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());

    // Another working directory imports the detached VM.
    let importer = Workspace::new(target);
    importer.init_with(&fleet(1, "")).await;
    importer
        .terraform(&[
            "import",
            "-no-color",
            "-input=false",
            "proxmox_proxy_vm.edge[0]",
            &format!("pve1/{second}"),
        ])
        .await
        .success();
    let state = importer.state().await.to_string();
    assert!(!state.contains("proxy-seeds:iso/"), "{state}");
    ws.terraform(&["state", "rm", "-no-color", "proxmox_proxy_vm.edge[0]"])
        .await
        .success();
    importer.assert_plans_empty().await;
    importer.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}
