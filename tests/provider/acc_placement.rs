//! Acceptance: with `node` unset the provider places each VM on an eligible node with the
//! most memory not yet promised, spreads a parallel apply evenly, explains why no node fits,
//! keeps the chosen node (no re-plan, no move), and resumes a killed create wherever an
//! earlier run placed it.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{SimClient, Workspace, acceptance_enabled, start_sim};

const GIB: u64 = 1 << 30;

fn fleet_tf(count: usize, extra: &str) -> String {
    format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "spread" {{
  count            = {count}
  name             = "spread-${{count.index}}"
  template         = "debian-13-proxy"
  wait_for         = "none"
  # Not waiting, the seed would leave at the next apply (an in-place change, #30); these
  # plans must stay empty.
  seed_lifetime    = "vm"
{extra}}}
"#,
        Workspace::preamble()
    )
}

/// Our VMs per node, from the simulator.
async fn per_node(sim: &SimClient) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for vm in sim.our_vms().await {
        *out.entry(vm["node"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    out
}

fn with_node_memory(gib: &[(&str, u64)]) -> pvesim::SimConfig {
    let mut config = pvesim::SimConfig::default();
    for node in &mut config.nodes {
        if let Some((_, size)) = gib.iter().find(|(name, _)| *name == node.name) {
            node.memory_bytes = size * GIB;
        }
    }
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn one_vm_lands_on_the_node_with_the_most_memory_left() {
    if !acceptance_enabled("one_vm_lands_on_the_node_with_the_most_memory_left") {
        return;
    }
    let (_sim, target) = start_sim(with_node_memory(&[
        ("pve1", 16),
        ("pve2", 64),
        ("pve3", 32),
    ]))
    .await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(1, "")).await;
    ws.apply().await.success();
    assert_eq!(
        per_node(&sim).await,
        BTreeMap::from([("pve2".to_owned(), 1)])
    );
    let state = ws.state().await;
    assert_eq!(
        state["values"]["root_module"]["resources"][0]["values"]["node"],
        "pve2"
    );
    ws.assert_plans_empty().await;
    // An unrelated change updates in place and never moves the VM.
    ws.write_main_tf(&fleet_tf(1, "  tags = [\"edge\"]\n"));
    let out = ws.apply().await.success();
    assert!(
        out.stdout().contains("0 added, 1 changed, 0 destroyed"),
        "{}",
        out.stdout()
    );
    // Setting `node` to where it is changes nothing.
    ws.write_main_tf(&fleet_tf(1, "  tags = [\"edge\"]\n  node = \"pve2\"\n"));
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

#[tokio::test(flavor = "multi_thread")]
async fn thirty_vms_spread_evenly_over_three_equal_nodes() {
    if !acceptance_enabled("thirty_vms_spread_evenly_over_three_equal_nodes") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(30, "")).await;
    ws.terraform(&["apply", "-auto-approve", "-input=false", "-parallelism=10"])
        .await
        .success();
    let spread = per_node(&sim).await;
    assert_eq!(spread.values().sum::<usize>(), 30, "{spread:?}");
    for (node, count) in &spread {
        assert!((9..=11).contains(count), "{node}: {count} ({spread:?})");
    }
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn ineligible_nodes_are_left_out_and_no_fit_names_every_reason() {
    if !acceptance_enabled("ineligible_nodes_are_left_out_and_no_fit_names_every_reason") {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    // pve1 lacks the bridge, pve3 is offline: only pve2 can take VMs on vmbr7.
    for node in &mut config.nodes {
        match node.name.as_str() {
            "pve1" => node.bridges = vec!["vmbr0".into()],
            "pve2" => node.bridges = vec!["vmbr0".into(), "vmbr7".into()],
            "pve3" => {
                node.bridges = vec!["vmbr0".into(), "vmbr7".into()];
                node.online = false;
            }
            _ => {}
        }
    }
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(3, "  bridge = \"vmbr7\"\n")).await;
    ws.apply().await.success();
    assert_eq!(
        per_node(&sim).await,
        BTreeMap::from([("pve2".to_owned(), 3)])
    );

    // Candidates restrict the choice: none of them can take the VM, each says why.
    ws.write_main_tf(&fleet_tf(
        4,
        "  bridge = \"vmbr7\"\n  node_candidates = [\"pve1\", \"pve3\"]\n",
    ));
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = out.all_text();
    assert!(text.contains("No node can run this VM"), "{text}");
    assert!(text.contains("pve1: no bridge `vmbr7`"), "{text}");
    assert!(text.contains("pve3: offline"), "{text}");
    ws.write_main_tf(&fleet_tf(3, "  bridge = \"vmbr7\"\n"));
    ws.destroy().await.success();

    // More memory than any node has: every node named with what it has left.
    ws.write_main_tf(&fleet_tf(1, "  memory = 900000\n"));
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = out.all_text();
    for node in ["pve1", "pve2"] {
        assert!(
            text.contains(&format!("{node}: not enough memory")),
            "{text}"
        );
    }
    assert!(text.contains("pve3: offline"), "{text}");
    let writes: Vec<Value> = sim
        .journal()
        .await
        .into_iter()
        .filter(|e| e["method"] == "POST" && e["path"].as_str().unwrap_or("").ends_with("/clone"))
        .collect();
    assert_eq!(writes.len(), 3, "only the three placed VMs were cloned");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_template_on_node_local_storage_keeps_the_fleet_on_its_node() {
    if !acceptance_enabled("a_template_on_node_local_storage_keeps_the_fleet_on_its_node") {
        return;
    }
    // pve2 and pve3 have more memory, but cannot clone a template whose disk is on pve1's
    // own LVM-thin storage.
    let mut config = with_node_memory(&[("pve1", 16), ("pve2", 64), ("pve3", 64)]);
    let template = config.vms.iter_mut().find(|vm| vm.vmid == 9000).unwrap();
    template
        .config
        .insert("scsi0".into(), "local-lvm:base-9000-disk-0,size=4G".into());
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(3, "")).await;
    ws.apply().await.success();
    assert_eq!(
        per_node(&sim).await,
        BTreeMap::from([("pve1".to_owned(), 3)])
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_placed_create_killed_mid_clone_resumes_where_it_was_placed() {
    if !acceptance_enabled("a_placed_create_killed_mid_clone_resumes_where_it_was_placed") {
        return;
    }
    let mut config = with_node_memory(&[("pve1", 16), ("pve2", 32), ("pve3", 64)]);
    config.timings.task_ms.insert("qmclone".into(), 2000);
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(1, "")).await;
    let apply = ws.spawn_terraform(&["apply", "-auto-approve", "-input=false"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sim.state().await["vms"]
        .as_array()
        .unwrap()
        .iter()
        .any(|vm| vm["lock"] == "clone")
    {
        assert!(Instant::now() < deadline, "the clone never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    apply.kill_group();
    // The resumed create adopts its half-made VM on the node it was placed on.
    ws.apply().await.success();
    let vms = sim.our_vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert_eq!(vms[0]["node"], "pve3");
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
    assert!(sim.volumes_on("proxy-seeds").await.is_empty());
}

/// The error diagnostics of `terraform plan -json`, one JSON document per line.
fn plan_errors(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|json| json.get("diagnostic").cloned())
        .filter(|d| d["severity"] == "error")
        .collect()
}

/// Whether Terraform's snippet of the diagnostic is the line setting `attribute`.
fn points_at(diagnostic: &Value, attribute: &str) -> bool {
    diagnostic["snippet"]["code"]
        .as_str()
        .unwrap_or_default()
        .trim_start()
        .starts_with(&format!("{attribute} ="))
}

#[tokio::test(flavor = "multi_thread")]
async fn vms_without_bridge_avoid_the_node_lacking_the_templates_bridge() {
    if !acceptance_enabled("vms_without_bridge_avoid_the_node_lacking_the_templates_bridge") {
        return;
    }
    // The template's net0 is on vmbr0, which pve3 lacks; pve3 has the most memory.
    let mut config = with_node_memory(&[("pve1", 64), ("pve2", 64), ("pve3", 128)]);
    for node in &mut config.nodes {
        if node.name == "pve3" {
            node.bridges = vec!["vmbr1".into()];
        }
    }
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(24, "")).await;
    ws.terraform(&["apply", "-auto-approve", "-input=false", "-parallelism=10"])
        .await
        .success();
    let spread = per_node(&sim).await;
    assert_eq!(spread.values().sum::<usize>(), 24, "{spread:?}");
    assert!(!spread.contains_key("pve3"), "{spread:?}");
    ws.assert_plans_empty().await;

    // Only pve3 as a candidate: refused at plan, the node's reason naming the bridge.
    ws.write_main_tf(&fleet_tf(25, "  node_candidates = [\"pve3\"]\n"));
    let out = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .failure();
    let text = out.all_text();
    assert!(
        text.contains("pve3: no bridge `vmbr0` (the template's net0)"),
        "{text}"
    );

    // `node` set to it: refused at plan, on `node`, naming the missing bridge.
    ws.write_main_tf(&fleet_tf(25, "  node = \"pve3\"\n"));
    let plan = ws
        .terraform(&["plan", "-json", "-no-color", "-input=false"])
        .await
        .failure();
    let errors = plan_errors(&plan.stdout());
    assert!(
        errors
            .iter()
            .any(|d| points_at(d, "node")
                && d["detail"].as_str().is_some_and(|t| t.contains("`vmbr0`"))),
        "{errors:#?}"
    );
    ws.write_main_tf(&fleet_tf(24, ""));
    ws.destroy().await.success();
    assert!(sim.our_vms().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn node_candidates_are_checked_against_the_cluster_at_plan() {
    if !acceptance_enabled("node_candidates_are_checked_against_the_cluster_at_plan") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(1, "  node_candidates = [\"pve1\", \"pve9\"]\n"))
        .await;
    // One unknown name among known ones, and only unknown ones: both refused at plan, on
    // the attribute, naming the cluster's nodes.
    for candidates in ["[\"pve1\", \"pve9\"]", "[\"pve9\"]"] {
        ws.write_main_tf(&fleet_tf(1, &format!("  node_candidates = {candidates}\n")));
        let plan = ws
            .terraform(&["plan", "-json", "-no-color", "-input=false"])
            .await
            .failure();
        let errors = plan_errors(&plan.stdout());
        assert!(
            errors.iter().any(|d| points_at(d, "node_candidates")
                && d["detail"]
                    .as_str()
                    .is_some_and(|t| t.contains("`pve9`") && t.contains("pve1, pve2, pve3"))),
            "{candidates}: {errors:#?}"
        );
        // Nothing refers to the block alone, and no reason list ends empty.
        for d in &errors {
            let detail = d["detail"].as_str().unwrap_or_default();
            assert!(
                !detail.contains(":\n\n") && !detail.contains(":\nSet"),
                "{detail}"
            );
        }
    }
    assert!(sim.writes_since(0).await.is_empty());

    // An update that changes the candidates is checked too (it never moves the VM).
    ws.write_main_tf(&fleet_tf(1, "  node_candidates = [\"pve1\"]\n"));
    ws.apply().await.success();
    ws.write_main_tf(&fleet_tf(1, "  node_candidates = [\"pve1\", \"pve9\"]\n"));
    let plan = ws
        .terraform(&["plan", "-json", "-no-color", "-input=false"])
        .await
        .failure();
    let errors = plan_errors(&plan.stdout());
    assert!(
        errors.iter().any(|d| points_at(d, "node_candidates")),
        "{errors:#?}"
    );
    ws.write_main_tf(&fleet_tf(1, "  node_candidates = [\"pve1\"]\n"));
    ws.destroy().await.success();
}

#[tokio::test(flavor = "multi_thread")]
async fn health_shows_each_nodes_memory_promised_beside_its_total() {
    if !acceptance_enabled("health_shows_each_nodes_memory_promised_beside_its_total") {
        return;
    }
    // pve2 has 4 GiB, and its VMs are promised 3 GiB each: overcommitted, as PVE allows.
    let mut config = with_node_memory(&[("pve2", 4)]);
    config.timings.cluster_resources_lag_ms = 0;
    config.vms.push(pvesim::VmSeed {
        vmid: 777,
        node: "pve2".into(),
        running: false,
        config: [("name", "extra"), ("memory", "3072")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    });
    let mut on_pve2: u64 = 0;
    for vm in &mut config.vms {
        if vm.node == "pve2" && vm.config.get("template").is_none_or(|t| t != "1") {
            vm.config.insert("memory".into(), "3072".into());
            on_pve2 += 1;
        }
    }
    assert!(on_pve2 >= 2, "{on_pve2}");
    let (_sim, target) = start_sim(config).await;
    let ws = Workspace::new(target);
    ws.init_with(&format!(
        r#"{}
data "proxmox_health" "cluster" {{}}

output "memory" {{
  value = {{
    for n in data.proxmox_health.cluster.nodes :
    n.name => [n.memory_total_bytes, n.memory_promised_bytes]
  }}
}}
"#,
        Workspace::preamble()
    ))
    .await;
    ws.apply().await.success();
    let out = ws.terraform(&["output", "-json", "memory"]).await.success();
    let memory: Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(memory["pve2"][0], 4 * GIB, "{memory}");
    assert_eq!(memory["pve2"][1], on_pve2 * 3 * GIB, "{memory}");
    assert!(memory["pve1"][1].as_u64().is_some(), "{memory}");
}

#[tokio::test(flavor = "multi_thread")]
async fn health_judges_eligibility_on_the_templates_bridges_as_placement_does() {
    if !acceptance_enabled("health_judges_eligibility_on_the_templates_bridges_as_placement_does") {
        return;
    }
    let mut config = pvesim::SimConfig::default();
    for node in &mut config.nodes {
        if node.name == "pve3" {
            node.bridges = vec!["vmbr1".into()];
        }
    }
    let (_sim, target) = start_sim(config).await;
    let ws = Workspace::new(target);
    ws.init_with(&format!(
        r#"{}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

data "proxmox_health" "cluster" {{
  templates = ["debian-13-proxy"]
}}

output "nodes" {{
  value = {{ for n in data.proxmox_health.cluster.nodes : n.name => n }}
}}
"#,
        Workspace::preamble()
    ))
    .await;
    ws.apply().await.success();
    let out = ws.terraform(&["output", "-json", "nodes"]).await.success();
    let nodes: Value = serde_json::from_str(&out.stdout()).unwrap();
    for name in ["pve1", "pve2"] {
        assert_eq!(nodes[name]["eligible"], true, "{name}: {nodes:#}");
    }
    let pve3 = &nodes["pve3"];
    assert_eq!(pve3["eligible"], false, "{pve3:#}");
    assert_eq!(pve3["bridges_ok"], false, "{pve3:#}");
    assert_eq!(
        pve3["reasons"],
        serde_json::json!(["BridgeNotFound"]),
        "{pve3:#}"
    );
    assert!(
        pve3["messages"][0]
            .as_str()
            .is_some_and(|m| m.contains("vmbr0") && m.contains("debian-13-proxy")),
        "{pve3:#}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_own_template_copy_decides_its_bridges() {
    if !acceptance_enabled("a_nodes_own_template_copy_decides_its_bridges") {
        return;
    }
    // pve3 lacks vmbr0 but has its own copy of the template, on vmbr1: its VMs clone that
    // copy, so pve3 is eligible (and, with the most memory, chosen).
    let mut config = with_node_memory(&[("pve1", 16), ("pve2", 16), ("pve3", 128)]);
    for node in &mut config.nodes {
        if node.name == "pve3" {
            node.bridges = vec!["vmbr1".into()];
        }
    }
    let mut copy = config
        .vms
        .iter()
        .find(|vm| vm.vmid == 9000)
        .unwrap()
        .clone();
    copy.vmid = 9003;
    copy.node = "pve3".into();
    copy.config.insert(
        "scsi0".into(),
        "local-lvm:base-9003-disk-0,iothread=1,size=4G".into(),
    );
    copy.config.insert(
        "net0".into(),
        "virtio=BC:24:11:9A:03:00,bridge=vmbr1".into(),
    );
    copy.config.insert(
        "smbios1".into(),
        "uuid=6f1c2a9e-3c1b-4f7e-9a0d-2b9f0c1d9003".into(),
    );
    copy.config.remove("vmgenid");
    config.vms.push(copy);
    let (_sim, target) = start_sim(config).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&fleet_tf(2, "")).await;
    ws.apply().await.success();
    assert_eq!(
        per_node(&sim).await,
        BTreeMap::from([("pve3".to_owned(), 2)])
    );
    ws.assert_plans_empty().await;
    ws.destroy().await.success();
}
