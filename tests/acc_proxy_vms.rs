//! Acceptance: `data "proxmox_proxy_vms"` through the real terraform against pve-sim. VMs of
//! ours and foreign ones are made through the simulator's PVE API directly; the listing
//! shows ours only, sorted, without our tag, and filters by name prefix.

mod support;

use pvesim::SimConfig;
use serde_json::Value;
use support::{Target, Workspace, acceptance_enabled, start_sim};
use terraform_provider_proxmox::ownership;

const TEMPLATE_VMID: u32 = 9000;

fn client(target: &Target) -> pve::Client {
    let token = pve::ApiToken::parse(&target.token).unwrap();
    let tls = pve::TlsTrust::CaPem(target.ca_pem.clone().unwrap());
    pve::Client::new(pve::ClientConfig::new(&target.endpoint, token, tls)).unwrap()
}

/// Clones the template onto `vmid` (on `node`) and tags it; `ours` decides whether it
/// carries our mark and tag, as the provider writes them.
async fn make_vm(
    client: &pve::Client,
    vmid: u32,
    name: &str,
    node: &str,
    tags: &[&str],
    ours: bool,
) {
    let mut clone = pve::qemu::CloneRequest::full(vmid);
    clone.name = Some(name.to_owned());
    clone.target = Some(node.to_owned());
    if ours {
        clone.description = Some(
            ownership::Mark::creating(name, "", "t0", "debian-13-proxy")
                .with_phase(ownership::Phase::Done)
                .render(),
        );
    }
    let template = client.node("pve1").qemu(TEMPLATE_VMID);
    let upid = template.clone_to(&clone).await.unwrap();
    client.wait_for_task(&upid).await.unwrap();
    let mut all_tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
    if ours {
        all_tags.push(ownership::OWNER_TAG.to_owned());
    }
    if !all_tags.is_empty() {
        let update = pve::qemu::ConfigUpdate::new().tags(&all_tags);
        client
            .node(node)
            .qemu(vmid)
            .update_config(&update)
            .await
            .unwrap();
    }
}

fn config(data_sources: &str) -> String {
    format!(
        "{}\nprovider \"proxmox\" {{}}\n{data_sources}",
        Workspace::preamble()
    )
}

async fn outputs(ws: &Workspace) -> Value {
    ws.apply().await.success();
    let out = ws
        .terraform(&["output", "-json", "-no-color"])
        .await
        .success();
    serde_json::from_str(&out.stdout()).expect("terraform output printed no JSON")
}

fn vmids(vms: &Value) -> Vec<u64> {
    vms.as_array()
        .unwrap_or_else(|| panic!("not a list: {vms}"))
        .iter()
        .map(|vm| vm["vmid"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_ours_only_sorted_and_filtered_by_prefix() {
    if !acceptance_enabled("lists_ours_only_sorted_and_filtered_by_prefix") {
        return;
    }
    let mut sim_config = SimConfig::default();
    // Names and status show in the listing at once (no stats lag) for this test.
    sim_config.timings.cluster_resources_lag_ms = 0;
    let (_sim, target) = start_sim(sim_config).await;
    let pve = client(&target);
    // Made out of VMID order, on two nodes.
    make_vm(&pve, 5003, "other-c", "pve1", &[], true).await;
    make_vm(&pve, 5001, "edge-a", "pve1", &[], true).await;
    make_vm(&pve, 5002, "edge-b", "pve2", &["Web", "blue"], true).await;
    // Foreign: a lookalike name, and one even carrying our description but not our tag.
    make_vm(&pve, 5004, "edge-foreign", "pve1", &["web"], false).await;
    make_vm(&pve, 5005, "edge-untagged", "pve2", &[], false).await;
    let marked = pve::qemu::ConfigUpdate::new().description(
        &ownership::Mark::creating("edge-untagged", "", "t0", "debian-13-proxy")
            .with_phase(ownership::Phase::Done)
            .render(),
    );
    pve.node("pve2")
        .qemu(5005)
        .update_config(&marked)
        .await
        .unwrap();
    // Only root@pam may write `lock`; a backup job holds it, as pve-sim's held lock does.
    support::SimClient::new(&target)
        .put_admin(
            "faults",
            serde_json::json!({"held_locks": [{"vmid": 5001, "lock": "backup", "seconds": 600}]}),
        )
        .await;

    let ws = Workspace::new(target);
    ws.write_main_tf(&config(
        r#"
data "proxmox_proxy_vms" "all" {}

data "proxmox_proxy_vms" "edge" {
  name_prefix = "edge-"
}

output "all" { value = data.proxmox_proxy_vms.all.vms }
output "edge" { value = data.proxmox_proxy_vms.edge.vms }
"#,
    ));
    ws.init().await;
    let out = outputs(&ws).await;
    let all = &out["all"]["value"];
    assert_eq!(vmids(all), [5001, 5002, 5003], "{all:#}");
    assert_eq!(vmids(&out["edge"]["value"]), [5001, 5002]);

    let edge_b = &all[1];
    assert_eq!(edge_b["name"], "edge-b");
    assert_eq!(edge_b["node"], "pve2");
    assert_eq!(edge_b["status"], "stopped");
    assert_eq!(
        edge_b["tags"],
        serde_json::json!(["blue", "web"]),
        "our tag is hidden"
    );
    assert_eq!(edge_b["lock"], "");
    assert_eq!(all[0]["lock"], "backup");

    // Foreign VMs of the default world never appear either.
    for foreign in [100, 101, 102, TEMPLATE_VMID as u64] {
        assert!(!vmids(all).contains(&foreign));
    }
    ws.assert_plans_empty().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_without_stats_yet_has_an_empty_name() {
    if !acceptance_enabled("a_vm_without_stats_yet_has_an_empty_name") {
        return;
    }
    let mut sim_config = SimConfig::default();
    // pvestatd has not seen the new VM yet for the whole test.
    sim_config.timings.cluster_resources_lag_ms = 600_000;
    let (_sim, target) = start_sim(sim_config).await;
    let pve = client(&target);
    make_vm(&pve, 5001, "edge-a", "pve1", &[], true).await;

    let ws = Workspace::new(target);
    ws.write_main_tf(&config(
        r#"
data "proxmox_proxy_vms" "all" {}
data "proxmox_proxy_vms" "edge" {
  name_prefix = "edge-"
}

output "all" { value = data.proxmox_proxy_vms.all.vms }
output "edge" { value = data.proxmox_proxy_vms.edge.vms }
"#,
    ));
    ws.init().await;
    let out = outputs(&ws).await;
    let all = &out["all"]["value"];
    assert_eq!(vmids(all), [5001], "{all:#}");
    assert_eq!(all[0]["name"], "");
    assert_eq!(all[0]["status"], "unknown");
    assert_eq!(vmids(&out["edge"]["value"]), Vec::<u64>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_cluster_lists_nothing_and_a_bad_token_is_an_error() {
    if !acceptance_enabled("an_empty_cluster_lists_nothing_and_a_bad_token_is_an_error") {
        return;
    }
    let (_sim, target) = start_sim(SimConfig::default()).await;
    let ws = Workspace::new(target.clone());
    ws.write_main_tf(&config(
        "data \"proxmox_proxy_vms\" \"all\" {}\noutput \"all\" { value = data.proxmox_proxy_vms.all.vms }\n",
    ));
    ws.init().await;
    let out = outputs(&ws).await;
    assert_eq!(out["all"]["value"], serde_json::json!([]));

    let mut wrong = target;
    let (id, _) = wrong.token.rsplit_once('=').unwrap();
    wrong.token = format!("{id}=00000000-0000-4000-8000-000000000000");
    let ws = Workspace::new(wrong);
    ws.write_main_tf(&config("data \"proxmox_proxy_vms\" \"all\" {}\n"));
    ws.init().await;
    let out = ws
        .terraform(&["plan", "-input=false", "-no-color"])
        .await
        .failure();
    let text = out.all_text();
    assert!(text.contains("Unable to list proxy VMs"), "{text}");
    assert!(text.contains("401"), "{text}");
    assert!(
        !text.contains("00000000-0000-4000-8000-000000000000"),
        "the secret leaked: {text}"
    );
}
