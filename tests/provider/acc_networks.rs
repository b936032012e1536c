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
