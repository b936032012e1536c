//! Acceptance: the edges of delete and of choosing a create's VMID that the lifecycle
//! tests do not reach: a destroy that meets a VM which is no longer this state's (left
//! alone, with the seed it boots) or no VM at all (the seed still goes), and creates that
//! find no VMID to use (a range used up, one explicit VMID asked for twice, a VM of the
//! name being destroyed). Simulator-only: they edit VMs behind Terraform's back.

use crate::support;

use serde_json::Value;
use support::{SimClient, Workspace, flat, simulator_only, start_sim};

fn config(provider_extra: &str, resources: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
{provider_extra}}}
{resources}"#,
        Workspace::preamble()
    )
}

fn vm(label: &str, name: &str, extra: &str) -> String {
    format!(
        r#"
resource "proxmox_proxy_vm" "{label}" {{
  name             = "{name}"
  node             = "pve1"
  template         = "debian-13-proxy"
  wait_for         = "none"
  # Not waiting, the seed would leave at the next apply (an in-place change, #30); these
  # plans must stay empty.
  seed_lifetime    = "vm"
{extra}}}
"#
    )
}

/// The VMID and seed volume the state holds for `name`.
async fn tracked(ws: &Workspace, name: &str) -> (u32, String) {
    let state = ws.state().await;
    let resources = state["values"]["root_module"]["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let vm = resources
        .iter()
        .find(|r| r["values"]["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {state}"));
    (
        u32::try_from(vm["values"]["vmid"].as_u64().unwrap()).unwrap(),
        vm["values"]["seed_volume"].as_str().unwrap().to_owned(),
    )
}

fn seeds(sim_state: &Value) -> Vec<String> {
    sim_state["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["storage"] == "proxy-seeds")
        .map(|v| v["volid"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn vm_exists(sim_state: &Value, vmid: u32) -> bool {
    sim_state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .any(|vm| vm["vmid"] == vmid)
}

async fn description(sim: &SimClient, vmid: u32) -> String {
    sim.api("GET", &format!("/nodes/pve1/qemu/{vmid}/config"), &[])
        .await["description"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn set_description(sim: &SimClient, vmid: u32, text: &str) {
    sim.api(
        "PUT",
        &format!("/nodes/pve1/qemu/{vmid}/config"),
        &[("description", text)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_leaves_a_vm_that_became_another_names_and_the_seed_it_boots() {
    let test = "destroy_leaves_a_vm_that_became_another_names_and_the_seed_it_boots";
    if !simulator_only(test, "edits a VM's mark behind Terraform's back") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&config("", &vm("a", "keep-0", ""))).await;
    ws.apply().await.success();
    let (vmid, seed) = tracked(&ws, "keep-0").await;

    // Someone re-purposes the VM: its mark now names another VM of ours.
    let mark = description(&sim, vmid).await;
    assert!(mark.contains("proxyvm-owner: keep-0"), "{mark}");
    set_description(
        &sim,
        vmid,
        &mark.replace("proxyvm-owner: keep-0", "proxyvm-owner: other-0"),
    )
    .await;

    let out = ws
        .terraform(&["destroy", "-auto-approve", "-refresh=false", "-no-color"])
        .await
        .success();
    let text = flat(&out.all_text());
    assert!(
        text.contains(&format!("VM {vmid} on pve1 is not this state's VM")),
        "{text}"
    );
    assert!(text.contains("it was left untouched"), "{text}");
    assert!(
        text.contains(&format!("Its seed {seed} was left too")),
        "{text}"
    );
    let after = sim.state().await;
    assert!(vm_exists(&after, vmid), "the other name's VM was destroyed");
    assert!(
        seeds(&after).contains(&seed),
        "the seed the VM boots was deleted"
    );
    let config = sim
        .api("GET", &format!("/nodes/pve1/qemu/{vmid}/config"), &[])
        .await;
    assert!(
        config["description"]
            .as_str()
            .unwrap()
            .contains("proxyvm-owner: other-0"),
        "the mark was rewritten: {config}"
    );
}

/// Deletes the VM at `vmid` on pve1 behind Terraform's back, as an operator would (PVE's
/// purge keeps the cdrom's ISO).
async fn delete_by_hand(sim: &SimClient, vmid: u32) {
    let path = format!("/nodes/pve1/qemu/{vmid}");
    let stop = sim.api("POST", &format!("{path}/status/stop"), &[]).await;
    sim.wait_task(&stop).await;
    let destroy = sim.api("DELETE", &path, &[]).await;
    sim.wait_task(&destroy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn destroy_of_a_vm_already_gone_still_deletes_its_seed() {
    let test = "destroy_of_a_vm_already_gone_still_deletes_its_seed";
    if !simulator_only(test, "deletes a VM behind Terraform's back") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&config("", &vm("a", "gone-0", ""))).await;
    ws.apply().await.success();
    let (vmid, seed) = tracked(&ws, "gone-0").await;

    delete_by_hand(&sim, vmid).await;
    assert!(
        seeds(&sim.state().await).contains(&seed),
        "PVE left the ISO"
    );

    // Without a refresh the delete itself finds the VM gone: done, and no ISO left behind.
    ws.terraform(&["destroy", "-auto-approve", "-refresh=false", "-no-color"])
        .await
        .success();
    let after = sim.state().await;
    assert!(
        !seeds(&after).contains(&seed),
        "the seed ISO leaked: {:?}",
        seeds(&after)
    );
    assert!(ws.state().await["values"].is_null(), "{}", ws.state().await);
}

/// A VM gone from under its state while the state records its seed (deleted by hand here; a
/// destroy killed between the VM's removal and the seed's delete is the same: fuzzer seed
/// 11162) stays in state with status `gone` and a warning, so its seed is not forgotten: the
/// next apply replaces it (with and without create_before_destroy) and the next destroy
/// deletes the seed.
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_gone_with_its_seed_left_stays_in_state_until_the_seed_is_deleted() {
    let test = "a_vm_gone_with_its_seed_left_stays_in_state_until_the_seed_is_deleted";
    if !simulator_only(test, "deletes a VM behind Terraform's back") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&config("", &vm("a", "gone-1", ""))).await;
    ws.apply().await.success();
    let (vmid, seed) = tracked(&ws, "gone-1").await;
    delete_by_hand(&sim, vmid).await;

    let plan = ws
        .terraform(&["plan", "-detailed-exitcode", "-input=false", "-no-color"])
        .await;
    let text = flat(&plan.all_text());
    assert_eq!(plan.code(), 2, "{text}");
    assert!(text.contains("Proxy VM gone; its seed is left"), "{text}");
    assert!(text.contains(&seed), "the warning names the seed: {text}");
    assert!(text.contains("must be replaced"), "{text}");
    assert!(
        text.contains("status = \"gone\" -> \"running\" # forces replacement"),
        "{text}"
    );
    ws.apply().await.success();
    let (_, replaced_seed) = tracked(&ws, "gone-1").await;
    assert_eq!(
        seeds(&sim.state().await),
        [replaced_seed],
        "one seed, the new VM's"
    );
    ws.assert_plans_empty().await;

    // Under create_before_destroy the new VM is made first, at the freed VMID: the old
    // instance's destroy deletes only its seed, and says nothing of the new VM.
    let cbd = "  lifecycle {\n    create_before_destroy = true\n  }\n";
    ws.write_main_tf(&config("", &vm("a", "gone-1", cbd)));
    ws.assert_plans_empty().await;
    let (vmid, _) = tracked(&ws, "gone-1").await;
    delete_by_hand(&sim, vmid).await;
    let out = ws.apply().await.success();
    let text = flat(&out.all_text());
    assert!(!text.contains("not this state's"), "{text}");
    let (vmid, seed) = tracked(&ws, "gone-1").await;
    assert_eq!(seeds(&sim.state().await), [seed], "one seed, the new VM's");
    ws.assert_plans_empty().await;

    // The destroy after a VM went: its refresh keeps the instance, and the seed goes.
    delete_by_hand(&sim, vmid).await;
    ws.destroy().await.success();
    assert!(
        seeds(&sim.state().await).is_empty(),
        "{:?}",
        seeds(&sim.state().await)
    );
    assert!(ws.state().await["values"].is_null(), "{}", ws.state().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_used_up_vmid_range_fails_the_create_naming_the_range() {
    let test = "a_used_up_vmid_range_fails_the_create_naming_the_range";
    if !simulator_only(test, "a VMID range of one") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    let range = "  vmid_range_start = 9100\n  vmid_range_end   = 9100\n";
    ws.init_with(&config(range, &vm("a", "one-0", ""))).await;
    ws.apply().await.success();
    assert_eq!(tracked(&ws, "one-0").await.0, 9100);

    let both = format!("{}{}", vm("a", "one-0", ""), vm("b", "two-0", ""));
    ws.write_main_tf(&config(range, &both));
    let out = ws.apply().await.failure();
    let text = flat(&out.all_text());
    assert!(
        text.contains("no free VMID left in the provider's range 9100-9100 for `two-0`"),
        "{text}"
    );
    // Nothing of the failed create is left; the first VM is untouched.
    let ours: Vec<u64> = sim
        .our_vms()
        .await
        .iter()
        .map(|vm| vm["vmid"].as_u64().unwrap())
        .collect();
    assert_eq!(ours, [9100]);
    ws.write_main_tf(&config(range, &vm("a", "one-0", "")));
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn one_explicit_vmid_asked_for_twice_fails_the_second_create() {
    let test = "one_explicit_vmid_asked_for_twice_fails_the_second_create";
    if !simulator_only(test, "the request journal") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    let both = format!(
        "{}{}",
        vm("a", "twin-0", "  vmid = 9200\n"),
        vm("b", "twin-1", "  vmid = 9200\n")
    );
    ws.init_with(&config("", &both)).await;
    let out = ws.apply().await.failure();
    let text = flat(&out.all_text());
    let refused = [
        "VMID 9200 is also being created by another resource in this run",
        "VMID 9200 is taken by the proxy VM",
    ];
    assert!(refused.iter().any(|r| text.contains(r)), "{text}");
    // One VM was made, the state holds it, and a destroy leaves nothing.
    let ours = sim.our_vms().await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
    assert!(seeds(&sim.state().await).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_meeting_its_names_vm_mid_destroy_refuses_and_writes_nothing() {
    let test = "a_create_meeting_its_names_vm_mid_destroy_refuses_and_writes_nothing";
    if !simulator_only(test, "edits a VM's mark behind Terraform's back") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let owner = Workspace::new(target.clone());
    owner.init_with(&config("", &vm("a", "dying-0", ""))).await;
    owner.apply().await.success();
    let (vmid, _) = tracked(&owner, "dying-0").await;
    // The owner's destroy was killed after it marked the VM.
    let mark = description(&sim, vmid).await;
    assert!(mark.contains("proxyvm-phase: done"), "{mark}");
    set_description(
        &sim,
        vmid,
        &mark.replace("proxyvm-phase: done", "proxyvm-phase: deleting"),
    )
    .await;

    let other = Workspace::new(target.clone());
    other.init_with(&config("", &vm("a", "dying-0", ""))).await;
    let journal_before = sim.journal().await.len();
    let out = other.apply().await.failure();
    let text = flat(&out.all_text());
    assert!(
        text.contains(&format!(
            "VM {vmid} on pve1, named `dying-0`, is being destroyed by the state that owns it"
        )),
        "{text}"
    );
    let writes = sim.writes_since(journal_before).await;
    assert!(writes.is_empty(), "the refused create wrote: {writes:?}");
    // The owner's next destroy finishes the job.
    owner.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

/// A refresh that meets the state's VM in the middle of a PVE destroy (an operator's here;
/// also this state's own destroy killed after PVE took it): qemu-server's `destroy_vm` has
/// freed its disks and left the config only `lock: destroyed` until its worker ends. That
/// VM is as good as gone, and the refresh says so; it must not call it another's VM "left
/// untouched". An update without a refresh writes nothing to it and says why. The
/// `stalled_tasks` fault holds the worker in that phase, so the refresh
/// meets it whatever the machine's load.
#[tokio::test(flavor = "multi_thread")]
async fn a_refresh_meeting_its_vm_mid_destroy_reads_it_as_gone() {
    let test = "a_refresh_meeting_its_vm_mid_destroy_reads_it_as_gone";
    if !simulator_only(
        test,
        "destroys a VM behind Terraform's back and stalls the task",
    ) {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&config("", &vm("a", "going-0", ""))).await;
    ws.apply().await.success();
    let (vmid, seed) = tracked(&ws, "going-0").await;

    sim.set_faults(
        serde_json::json!({"stalled_tasks": [{"task_type": "qmdestroy", "vmid": vmid}]}),
    )
    .await;
    let stop = sim
        .api("POST", &format!("/nodes/pve1/qemu/{vmid}/status/stop"), &[])
        .await;
    sim.wait_task(&stop).await;
    let destroy = sim
        .api(
            "DELETE",
            &format!("/nodes/pve1/qemu/{vmid}"),
            &[("purge", "1")],
        )
        .await;
    assert!(
        sim.until_destroy_locked("pve1", vmid).await,
        "the destroy never reached its lock"
    );

    // Without a refresh, an update meets it and writes nothing, saying why.
    ws.write_main_tf(&config("", &vm("a", "going-0", "  cores = 2\n")));
    let out = ws
        .terraform(&[
            "apply",
            "-refresh=false",
            "-auto-approve",
            "-input=false",
            "-no-color",
        ])
        .await
        .failure();
    let text = flat(&out.all_text());
    assert!(
        text.contains("a PVE destroy task is removing it: its config is only `lock: destroyed`"),
        "{text}"
    );
    ws.write_main_tf(&config("", &vm("a", "going-0", "")));

    let out = ws
        .terraform(&["plan", "-refresh-only", "-input=false", "-no-color"])
        .await
        .success();
    let text = flat(&out.all_text());
    assert!(!text.contains("not this state's VM"), "{text}");
    assert!(
        text.contains(&format!("VM {vmid} of `going-0` is gone from the cluster")),
        "{text}"
    );

    // Once PVE's worker ends, the next apply makes the name again, deleting the old seed.
    sim.set_faults(serde_json::json!({})).await;
    sim.wait_task(&destroy).await;
    ws.apply().await.success();
    let (_, new_seed) = tracked(&ws, "going-0").await;
    assert_eq!(
        seeds(&sim.state().await),
        [new_seed],
        "the old seed {seed} stays"
    );
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

/// A running VM that an interrupted destroy left marked `deleting`, then applied with
/// `started = false` and another change: the refresh reads it as not started (so the apply
/// marks it finished again), and the plan must still show that the apply stops it, not keep
/// `status = "running"` for a VM the apply shuts down (fuzz seed 24034, I6: Terraform kept a
/// status PVE did not show).
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_an_interrupted_destroy_marked_is_kept_stopped_as_configured() {
    let test = "a_vm_an_interrupted_destroy_marked_is_kept_stopped_as_configured";
    if !simulator_only(test, "edits a VM's mark behind Terraform's back") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    ws.init_with(&config("", &vm("a", "halted-0", ""))).await;
    ws.apply().await.success();
    let (vmid, _) = tracked(&ws, "halted-0").await;
    // The destroy was killed after it marked the VM, before it stopped it.
    mark_deleting(&sim, vmid).await;

    ws.write_main_tf(&config(
        "",
        &vm("a", "halted-0", "  started = false\n  cores = 2\n"),
    ));
    let out = ws.apply().await.success();
    let text = flat(&out.all_text());
    assert!(text.contains("marked by an interrupted destroy"), "{text}");
    // The plan names the shutdown the apply makes.
    assert!(
        text.contains(&format!("VM {vmid} (`halted-0`) will be stopped")),
        "{text}"
    );
    let state = ws.state().await;
    let status = &state["values"]["root_module"]["resources"][0]["values"]["status"];
    assert_eq!(status, "stopped", "{state}");
    assert!(
        description(&sim, vmid)
            .await
            .contains("proxyvm-phase: done")
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

/// A stopped VM that an interrupted destroy left marked `deleting`, configured
/// `started = false` with no other change: the refresh's warning says an apply marks it
/// finished again, so the plan must hold an update that does, not stay empty and leave the
/// VM marked `deleting` for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_vm_an_interrupted_destroy_marked_is_marked_finished_by_the_next_apply() {
    let test = "a_stopped_vm_an_interrupted_destroy_marked_is_marked_finished_by_the_next_apply";
    if !simulator_only(test, "edits a VM's mark behind Terraform's back") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target.clone());
    let stopped = vm("a", "idle-0", "  started = false\n");
    ws.init_with(&config("", &stopped)).await;
    ws.apply().await.success();
    let (vmid, _) = tracked(&ws, "idle-0").await;
    // The destroy was killed after it marked the VM (a stopped VM has nothing to stop).
    mark_deleting(&sim, vmid).await;

    let out = ws.apply().await.success();
    let text = flat(&out.all_text());
    assert!(text.contains("marked by an interrupted destroy"), "{text}");
    assert!(!text.contains("will be stopped"), "{text}");
    assert!(
        description(&sim, vmid)
            .await
            .contains("proxyvm-phase: done"),
        "the apply left the VM marked deleting: {text}"
    );
    let state = ws.state().await;
    let values = &state["values"]["root_module"]["resources"][0]["values"];
    assert_eq!(values["status"], "stopped", "{state}");
    assert_eq!(values["started"], false, "{state}");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

/// The mark a destroy writes first (`deleting`), as a destroy killed right after it leaves.
async fn mark_deleting(sim: &SimClient, vmid: u32) {
    let mark = description(sim, vmid).await;
    let deleting = mark.replace("proxyvm-phase: done", "proxyvm-phase: deleting");
    set_description(sim, vmid, &deleting).await;
}
