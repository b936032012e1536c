//! Where the CRM puts HA services under rules: pve-ha-manager 5.2.0
//! `src/PVE/HA/Manager.pm` (`select_service_node`, `next_state_started`,
//! `next_state_recovery`, `update_crm_commands`, `queue_resource_motion`, `load_balance`),
//! `src/PVE/HA/Rules/NodeAffinity.pm` `get_node_affinity`,
//! `src/PVE/HA/Rules/ResourceAffinity.pm` (`get_resource_affinity`, `apply_*`),
//! `src/PVE/HA/Usage/Basic.pm`, `src/PVE/HA/Config.pm` `get_resource_motion_info`, and
//! qemu-server 9.2.6 `src/PVE/API2/Qemu.pm` `migrate_vm_precondition`.

use std::time::Duration;

use crate::cluster_life::run_task;
use crate::common::{Harness, start};
use crate::ha_life::{add_resource, poll_vm};
use pvesim::testing::fast_config;
use serde_json::{Value, json};

/// A full clone of the template (disk on the shared `vmdata`) made on `node`.
async fn clone_on(h: &Harness, vmid: u32, node: &str) {
    let newid = vmid.to_string();
    let name = format!("replica-{vmid}");
    let form = [
        ("newid", newid.as_str()),
        ("name", name.as_str()),
        ("full", "1"),
        ("target", node),
    ];
    let upid = h.post("/nodes/pve1/qemu/9000/clone", &form).await.data();
    assert_eq!(h.wait_task(upid.as_str().unwrap()).await, "OK");
}

/// Polls until the service row of `sid` shows `state` on `node`.
async fn poll_service_on(h: &Harness, sid: &str, state: &str, node: &str) -> Value {
    let answer = h
        .poll_until("/cluster/ha/status/current", |a| {
            a.json()["data"].as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r["sid"] == sid && r["state"] == state && r["node"] == node)
            })
        })
        .await;
    let rows = answer.data();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["sid"] == sid)
        .unwrap()
        .clone()
}

/// HA services `vm:<vmid>` for VMs cloned onto `nodes`, started and running there.
async fn started_replicas(h: &Harness, placed: &[(u32, &str)]) {
    for (vmid, node) in placed {
        clone_on(h, *vmid, node).await;
        add_resource(h, &[("sid", &format!("vm:{vmid}"))]).await;
    }
    for (vmid, node) in placed {
        poll_vm(h, node, *vmid, "running").await;
        poll_service_on(h, &format!("vm:{vmid}"), "started", node).await;
    }
}

async fn rule(h: &Harness, form: &[(&str, &str)]) {
    assert_eq!(h.post("/cluster/ha/rules", form).await.data(), Value::Null);
}

async fn poll_log(h: &Harness, line: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = h.admin.ha_log().await;
        if log.iter().any(|l| l == line) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never logged {line:?}: {log:#?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Recovery after a node failure keeps a negative-affinity pair apart: the best-scored
/// node (`Usage/Basic.pm` counts guests; pve3 runs one, pve2 two) holds the other replica,
/// so `apply_negative_resource_affinity` leaves pve2.
#[tokio::test]
async fn negative_affinity_keeps_replicas_apart_on_recovery() {
    let h = start(fast_config()).await;
    started_replicas(&h, &[(201, "pve1"), (202, "pve3")]).await;
    clone_on(&h, 203, "pve2").await;
    let (_, exit) = run_task(&h, "/nodes/pve2/qemu/203/status/start", &[]).await;
    assert_eq!(exit, "OK");
    rule(
        &h,
        &[
            ("rule", "apart"),
            ("type", "resource-affinity"),
            ("affinity", "negative"),
            ("resources", "vm:201,vm:202"),
        ],
    )
    .await;
    h.admin.fail_node("pve1").await;
    poll_vm(&h, "pve2", 201, "running").await;
    let row = poll_service_on(&h, "vm:201", "started", "pve2").await;
    assert_eq!(row["crm_state"], "started");
    poll_log(
        &h,
        "recover service 'vm:201' from fenced node 'pve1' to node 'pve2'",
    )
    .await;
    h.sim.shutdown().await;
}

/// A strict node-affinity rule: the CRM moves a running service onto its nodes
/// (`next_state_started` with `select_service_node`'s `none`), and when all of them are
/// down it finds no recovery node and the service waits in `recovery`, until its node is
/// back ("recover service … to previous failed and fenced node … again").
#[tokio::test]
async fn strict_node_affinity_moves_services_and_limits_recovery() {
    let h = start(fast_config()).await;
    started_replicas(&h, &[(201, "pve2")]).await;
    rule(
        &h,
        &[
            ("rule", "pin"),
            ("type", "node-affinity"),
            ("resources", "vm:201"),
            ("nodes", "pve1"),
            ("strict", "1"),
        ],
    )
    .await;
    poll_vm(&h, "pve1", 201, "running").await;
    poll_service_on(&h, "vm:201", "started", "pve1").await;
    poll_log(&h, "migrate service 'vm:201' to node 'pve1' (running)").await;
    let migrations = h.get("/nodes/pve2/tasks?typefilter=qmigrate").await.data();
    assert_eq!(migrations[0]["user"], "root@pam", "the LRM's migration");

    h.admin.fail_node("pve1").await;
    poll_service_on(&h, "vm:201", "recovery", "pve1").await;
    poll_log(
        &h,
        "recovering service 'vm:201' from fenced node 'pve1' failed, no recovery node found",
    )
    .await;
    h.admin.recover_node("pve1").await;
    poll_vm(&h, "pve1", 201, "running").await;
    poll_log(
        &h,
        "recover service 'vm:201' to previous failed and fenced node 'pve1' again",
    )
    .await;
    h.sim.shutdown().await;
}

/// A non-strict rule prefers its highest priority class (`get_node_affinity`) and, with
/// `failback` (the default), the CRM moves the service there.
#[tokio::test]
async fn node_priorities_pull_a_service_to_the_preferred_node() {
    let h = start(fast_config()).await;
    started_replicas(&h, &[(201, "pve1")]).await;
    rule(
        &h,
        &[
            ("rule", "prefer"),
            ("type", "node-affinity"),
            ("resources", "vm:201"),
            ("nodes", "pve2:1,pve3:2"),
        ],
    )
    .await;
    poll_vm(&h, "pve3", 201, "running").await;
    poll_service_on(&h, "vm:201", "started", "pve3").await;
    h.sim.shutdown().await;
}

/// A requested move onto a node where a negative partner runs: the migration
/// precondition lists it (`blocking-ha-resources`), `Resources.pm` `migrate` answers
/// `blocking-resources`, and the CRM refuses the command (`queue_resource_motion`); a
/// `qm migrate` elsewhere goes through HA as usual.
#[tokio::test]
async fn a_move_onto_a_negative_partner_is_refused_by_the_crm() {
    let h = start(fast_config()).await;
    started_replicas(&h, &[(201, "pve1"), (202, "pve2")]).await;
    rule(
        &h,
        &[
            ("rule", "apart"),
            ("type", "resource-affinity"),
            ("affinity", "negative"),
            ("resources", "vm:201,vm:202"),
        ],
    )
    .await;
    let pre = h.get("/nodes/pve1/qemu/201/migrate").await.data();
    let blocker = json!([{"sid": "vm:202", "cause": "resource-affinity"}]);
    assert_eq!(
        pre["not_allowed_nodes"]["pve2"]["blocking-ha-resources"],
        blocker
    );
    assert_eq!(pre["allowed_nodes"], json!(["pve3"]));
    assert_eq!(pre["dependent-ha-resources"], json!([]));

    let answer = h
        .post("/cluster/ha/resources/vm:201/migrate", &[("node", "pve2")])
        .await
        .data();
    assert_eq!(
        answer,
        json!({"sid": "vm:201", "requested-node": "pve2", "blocking-resources": blocker})
    );
    poll_log(
        &h,
        "crm command 'migrate vm:201 pve2' error - service 'vm:202' on node 'pve2' in \
         negative affinity with service 'vm:201'",
    )
    .await;
    let form = [("target", "pve3"), ("online", "1")];
    let (upid, exit) = run_task(&h, "/nodes/pve1/qemu/201/migrate", &form).await;
    assert!(upid.contains(":hamigrate:201:"), "{upid}");
    assert_eq!(exit, "OK");
    poll_vm(&h, "pve3", 201, "running").await;
    let row = poll_service_on(&h, "vm:201", "started", "pve3").await;
    assert_eq!(row["status"], "vm:201 (pve3, started)");
    h.sim.shutdown().await;
}

/// Services in positive affinity move together: `migrate` answers
/// `comigrated-resources` and `queue_resource_motion` gives the partner the same command.
#[tokio::test]
async fn positive_partners_migrate_together() {
    let h = start(fast_config()).await;
    started_replicas(&h, &[(201, "pve1"), (202, "pve1")]).await;
    rule(
        &h,
        &[
            ("rule", "together"),
            ("type", "resource-affinity"),
            ("affinity", "positive"),
            ("resources", "vm:201,vm:202"),
        ],
    )
    .await;
    let pre = h.get("/nodes/pve1/qemu/201/migrate").await.data();
    assert_eq!(pre["dependent-ha-resources"], json!(["vm:202"]));
    let answer = h
        .post("/cluster/ha/resources/vm:201/migrate", &[("node", "pve3")])
        .await
        .data();
    assert_eq!(answer["comigrated-resources"], json!(["vm:202"]));
    poll_vm(&h, "pve3", 201, "running").await;
    poll_vm(&h, "pve3", 202, "running").await;
    poll_log(
        &h,
        "crm command 'migrate vm:201 pve3' - migrate service 'vm:202' to node 'pve3' \
         (service 'vm:202' in positive affinity with service 'vm:201')",
    )
    .await;
    h.sim.shutdown().await;
}

/// The rebalancer (`load_balance`, PVE 9.2's automatic rebalancing) moves a started
/// service by itself, through the CRM's migration and the LRM's `migrate_vm`; it only
/// picks targets `get_resource_migration_candidates` allows, and only started bundles.
#[tokio::test]
async fn the_rebalancer_moves_a_service_without_any_request() {
    let h = start(fast_config()).await;
    started_replicas(&h, &[(201, "pve1"), (202, "pve2")]).await;
    rule(
        &h,
        &[
            ("rule", "apart"),
            ("type", "resource-affinity"),
            ("affinity", "negative"),
            ("resources", "vm:201,vm:202"),
        ],
    )
    .await;
    let refused = h.admin.ha_rebalance("vm:201", "pve2").await.unwrap_err();
    assert!(refused.contains("not a rebalancing target"), "{refused}");
    let moved = h.admin.ha_rebalance("vm:201", "pve3").await.unwrap();
    assert_eq!(moved.resources, ["vm:201"]);
    poll_vm(&h, "pve3", 201, "running").await;
    poll_service_on(&h, "vm:201", "started", "pve3").await;
    poll_log(&h, "auto rebalance - migrate vm:201 to pve3").await;
    let migrations = h.get("/nodes/pve1/tasks?typefilter=qmigrate").await.data();
    assert_eq!(migrations[0]["user"], "root@pam");

    h.put("/cluster/ha/resources/vm:202", &[("state", "stopped")])
        .await
        .data();
    poll_service_on(&h, "vm:202", "stopped", "pve2").await;
    let stopped = h.admin.ha_rebalance("vm:202", "pve1").await.unwrap_err();
    assert!(stopped.contains("not in a started"), "{stopped}");
    h.sim.shutdown().await;
}

/// pve-ha-manager 5.2.0 checks only resource affinity when it takes a requested move
/// (`queue_resource_motion`): a migration out of a strict node-affinity rule's nodes is
/// carried out, and the next round's `select_service_node` moves the service back.
#[tokio::test]
async fn a_move_out_of_a_strict_rule_is_undone_by_the_crm() {
    let h = start(fast_config()).await;
    started_replicas(&h, &[(201, "pve1")]).await;
    rule(
        &h,
        &[
            ("rule", "pin"),
            ("type", "node-affinity"),
            ("resources", "vm:201"),
            ("nodes", "pve1"),
            ("strict", "1"),
        ],
    )
    .await;
    let answer = h
        .post("/cluster/ha/resources/vm:201/migrate", &[("node", "pve2")])
        .await
        .data();
    assert_eq!(answer, json!({"sid": "vm:201", "requested-node": "pve2"}));
    poll_log(&h, "migrate service 'vm:201' to node 'pve2'").await;
    poll_log(&h, "migrate service 'vm:201' to node 'pve1' (running)").await;
    poll_vm(&h, "pve1", 201, "running").await;
    poll_service_on(&h, "vm:201", "started", "pve1").await;
    let back = h.get("/nodes/pve2/tasks?typefilter=qmigrate").await.data();
    assert_eq!(back[0]["status"], "OK", "it went to pve2 first: {back}");
    h.sim.shutdown().await;
}
