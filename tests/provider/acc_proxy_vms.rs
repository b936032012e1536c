//! Acceptance: `data "proxmox_proxy_vms"` through the real terraform against pve-sim. VMs of
//! ours and foreign ones are made through the simulator's PVE API directly; the listing
//! shows ours only, sorted, without our tag, and filters by name prefix. All but the test of a
//! VM without stats also run in live mode (see `tests/provider/support/host.rs`).

use crate::support;

use std::time::{Duration, Instant};

use pvesim::SimConfig;
use serde_json::Value;
use support::{Host, Target, Workspace, simulator_only, start_sim};
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
    make_vm_from(
        client,
        ("pve1", TEMPLATE_VMID),
        vmid,
        name,
        node,
        tags,
        ours,
    )
    .await
}

/// [`make_vm`] from a template at (node, VMID), which our mark names by VMID (as a
/// configuration naming the template by VMID would).
async fn make_vm_from(
    client: &pve::Client,
    template: (&str, u32),
    vmid: u32,
    name: &str,
    node: &str,
    tags: &[&str],
    ours: bool,
) {
    let description = ours.then(|| {
        ownership::Mark::creating(name, "", "t0", &template.1.to_string())
            .with_phase(ownership::Phase::Done)
            .render()
    });
    support::clone_template(client, template, vmid, name, node, description).await;
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

/// The template to clone a VM on `node` from: the copy on that node if the lab has one
/// there, else the copy on shared storage (see [`Host::template_for`]).
async fn template_for(host: &Host, node: &str) -> (String, u32) {
    if !host.is_live() {
        return ("pve1".into(), TEMPLATE_VMID);
    }
    host.template_for(node).await
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_ours_only_sorted_and_filtered_by_prefix() {
    let Some(host) = Host::start("lists_ours_only_sorted_and_filtered_by_prefix", || {
        let mut sim_config = SimConfig::default();
        // Names and status show in the listing at once (no stats lag) for this test.
        sim_config.timings.cluster_resources_lag_ms = 0;
        sim_config
    })
    .await
    else {
        return;
    };
    let pve = host.client();
    let live = host.is_live();
    // VMIDs: fixed on the simulator; on a live host whatever PVE says is free, in order.
    let mut fixed = [5003, 5001, 5002, 5004, 5005].into_iter();
    let mut vmid = async || match live {
        true => host.free_vmid().await,
        false => fixed.next().unwrap(),
    };
    let (first, second) = (host.facts.node(0), host.facts.node(1));
    let (on_first, on_second) = (
        template_for(&host, first).await,
        template_for(&host, second).await,
    );
    let from_first = (on_first.0.as_str(), on_first.1);
    let from_second = (on_second.0.as_str(), on_second.1);
    // Made out of VMID order (on the simulator), on two nodes.
    let other_c = vmid().await;
    make_vm_from(
        &pve,
        from_first,
        other_c,
        &host.name("other-c"),
        first,
        &[],
        true,
    )
    .await;
    let edge_a = vmid().await;
    make_vm_from(
        &pve,
        from_first,
        edge_a,
        &host.name("edge-a"),
        first,
        &[],
        true,
    )
    .await;
    let edge_b = vmid().await;
    make_vm_from(
        &pve,
        from_second,
        edge_b,
        &host.name("edge-b"),
        second,
        &["Web", "blue"],
        true,
    )
    .await;
    // Foreign: a lookalike name, and one even carrying our description but not our tag.
    let foreign = vmid().await;
    host.made_unmarked(first, foreign);
    make_vm_from(
        &pve,
        from_first,
        foreign,
        &host.name("edge-foreign"),
        first,
        &["web"],
        false,
    )
    .await;
    let untagged = vmid().await;
    host.made_unmarked(second, untagged);
    make_vm_from(
        &pve,
        from_second,
        untagged,
        &host.name("edge-untagged"),
        second,
        &[],
        false,
    )
    .await;
    let marked = pve::qemu::ConfigUpdate::new().description(
        &ownership::Mark::creating(&host.name("edge-untagged"), "", "t0", &host.facts.template)
            .with_phase(ownership::Phase::Done)
            .render(),
    );
    pve.node(second)
        .qemu(untagged)
        .update_config(&marked)
        .await
        .unwrap();
    // A lock only on the simulator: on a real host only root@pam may set one, and a locked
    // VM could not be cleaned up.
    if !live {
        // Only root@pam may write `lock`; a backup job holds it, as pve-sim's held lock does.
        support::SimClient::new(&host.target)
            .set_faults(serde_json::json!({
                "held_locks": [{"vmid": edge_a, "lock": "backup", "seconds": 600}]
            }))
            .await;
    } else {
        // pvestatd names a new VM in /cluster/resources only after its next cycle.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let listed = pve.cluster().vm_resources().await.unwrap();
            let named = [other_c, edge_a, edge_b]
                .iter()
                .all(|v| listed.iter().any(|vm| vm.vmid == *v && vm.name.is_some()));
            if named {
                break;
            }
            assert!(Instant::now() < deadline, "the new VMs never got names");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    let ws = Workspace::new(host.target.clone());
    ws.write_main_tf(&config(&format!(
        r#"
data "proxmox_proxy_vms" "all" {{}}

data "proxmox_proxy_vms" "edge" {{
  name_prefix = "{}"
}}

# On a live host other tests' VMs come and go in the full listing while this test runs:
# the output keeps this test's, so the plans after it stay empty.
output "all" {{
  value = [for vm in data.proxmox_proxy_vms.all.vms : vm if startswith(vm.name, "{}")]
}}
output "edge" {{ value = data.proxmox_proxy_vms.edge.vms }}
"#,
        host.name("edge-"),
        host.prefix
    )));
    ws.init().await;
    let out = outputs(&ws).await;
    // The output holds this test's VMs only (all of them on the simulator, whose prefix is
    // empty): the listing's own filter is what `edge` judges.
    let all = out["all"]["value"].clone();
    let mut expected = vec![other_c as u64, edge_a as u64, edge_b as u64];
    expected.sort_unstable();
    assert_eq!(vmids(&all), expected, "{all:#}");
    let mut expected_edge = vec![edge_a as u64, edge_b as u64];
    expected_edge.sort_unstable();
    assert_eq!(vmids(&out["edge"]["value"]), expected_edge);

    let by_vmid = |v: u32| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|vm| vm["vmid"].as_u64() == Some(v as u64))
            .unwrap()
            .clone()
    };
    let b = by_vmid(edge_b);
    assert_eq!(b["name"], host.name("edge-b"));
    assert_eq!(b["node"], second);
    assert_eq!(b["status"], "stopped");
    // As a set, case folded: the order and case PVE keeps follow the datacenter's
    // `tag-style` (`ordering`, `case-sensitive`), which differs between labs.
    let mut tags: Vec<String> = b["tags"]
        .as_array()
        .unwrap_or_else(|| panic!("no tags: {b}"))
        .iter()
        .map(|t| t.as_str().unwrap().to_lowercase())
        .collect();
    tags.sort();
    assert_eq!(tags, ["blue", "web"], "our tag is hidden: {b}");
    assert_eq!(b["lock"], "");
    assert_eq!(by_vmid(edge_a)["lock"], if live { "" } else { "backup" });

    // Foreign VMs (the default world's on the simulator) never appear either.
    let everything = vmids(&out["all"]["value"]);
    let default_world: &[u64] = if live { &[] } else { &[100, 101, 102] };
    for foreign in [foreign, untagged, on_first.1, on_second.1]
        .map(u64::from)
        .iter()
        .chain(default_world)
    {
        assert!(!everything.contains(foreign), "{foreign} listed");
    }
    ws.assert_plans_empty().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_without_stats_yet_has_an_empty_name() {
    if !simulator_only(
        "a_vm_without_stats_yet_has_an_empty_name",
        "a stats lag of ten minutes (pvestatd's cycle held back)",
    ) {
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
    let Some(host) = Host::start(
        "an_empty_cluster_lists_nothing_and_a_bad_token_is_an_error",
        SimConfig::default,
    )
    .await
    else {
        return;
    };
    let target = host.target.clone();
    // A live cluster is never empty of ours for sure: there, a prefix nothing has.
    let all = if host.is_live() {
        format!("{{\n  name_prefix = \"{}\"\n}}", host.name("nothing-"))
    } else {
        "{}".to_owned()
    };
    let ws = Workspace::new(target.clone());
    ws.write_main_tf(&config(&format!(
        "data \"proxmox_proxy_vms\" \"all\" {all}\noutput \"all\" {{ value = \
            data.proxmox_proxy_vms.all.vms }}\n",
    )));
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
