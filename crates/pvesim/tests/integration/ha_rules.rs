//! HA rules through the API: pve-ha-manager 5.2.0 `src/PVE/API2/HA/Rules.pm` (`index`,
//! `read_rule`, `create_rule`, `update_rule`, `delete_rule`), the rule plugins
//! (`src/PVE/HA/Rules/NodeAffinity.pm`, `ResourceAffinity.pm`) and the feasibility checks
//! of `src/PVE/HA/Rules.pm`, the rules' `oneOf` parameter schema (pve-common 9.2.1
//! `SectionConfig.pm` `make_isolated_base_schema`, `JSONSchema.pm` `check_one_of`), and the
//! group endpoints' refusals (`src/PVE/API2/HA/Groups.pm`).

use crate::common::{Harness, start};
use pvesim::testing::fast_config;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// HA resources for `vmids` (the default world's 100, 101, 102), and a first CRM round,
/// so the CRM's node list (`manager_status`) is known.
pub async fn with_resources(h: &Harness, vmids: &[u32]) {
    for vmid in vmids {
        let sid = format!("vm:{vmid}");
        let answer = h
            .post(
                "/cluster/ha/resources",
                &[("sid", &sid), ("state", "stopped")],
            )
            .await;
        assert_eq!(answer.data(), Value::Null);
    }
    h.poll_until("/cluster/ha/status/current", |a| {
        a.json()["data"][1]["id"] == "master"
    })
    .await;
}

async fn rules(h: &Harness, query: &str) -> Vec<Value> {
    let answer = h.get(&format!("/cluster/ha/rules{query}")).await.data();
    answer.as_array().unwrap().clone()
}

/// `create_rule`, `index` (file order, the `type` and `resource` filters), `read_rule`
/// (`$get_api_ha_rule`: `rule`, `digest`, `order`, `nodes` encoded by
/// `encode_plugin_value`), `update_rule` (`digest`, `delete`) and `delete_rule`, which
/// takes a rule that does not exist without complaint.
#[tokio::test]
async fn rules_are_created_listed_read_updated_and_deleted() {
    let h = start(fast_config()).await;
    with_resources(&h, &[100, 101, 102]).await;
    let pin = [
        ("rule", "pin"),
        ("type", "node-affinity"),
        ("resources", "vm:100"),
        ("nodes", "pve2:2,pve1"),
        ("strict", "1"),
        ("comment", "dns stays home"),
    ];
    assert_eq!(h.post("/cluster/ha/rules", &pin).await.data(), Value::Null);
    let apart = [
        ("rule", "apart"),
        ("type", "resource-affinity"),
        ("resources", "vm:102,vm:101"),
        ("affinity", "negative"),
    ];
    assert_eq!(
        h.post("/cluster/ha/rules", &apart).await.data(),
        Value::Null
    );

    let listed = rules(&h, "").await;
    let digest = listed[0]["digest"].as_str().unwrap().to_string();
    assert_eq!(
        listed[0],
        json!({"rule": "pin", "type": "node-affinity", "resources": "vm:100",
               "nodes": "pve1,pve2:2", "strict": 1, "comment": "dns stays home",
               "digest": digest, "order": 1})
    );
    assert_eq!(
        listed[1],
        json!({"rule": "apart", "type": "resource-affinity", "resources": "vm:101,vm:102",
               "affinity": "negative", "digest": digest, "order": 2})
    );
    assert_eq!(rules(&h, "?type=resource-affinity").await.len(), 1);
    assert_eq!(rules(&h, "?resource=vm:100").await[0]["rule"], "pin");
    assert!(
        rules(&h, "?resource=100").await.is_empty(),
        "a sid, not a VMID"
    );
    assert_eq!(h.get("/cluster/ha/rules/apart").await.data(), listed[1]);
    let missing = h.get("/cluster/ha/rules/nope").await;
    assert_eq!(missing.message(), "no such ha rule 'nope'\n");

    let stale = [("type", "node-affinity"), ("strict", "0"), ("digest", "00")];
    let answer = h.put("/cluster/ha/rules/pin", &stale).await;
    assert_eq!(
        answer.message(),
        "update HA rules failed: detected modified configuration - file changed by other \
         user? Try again.\n"
    );
    let change = [
        ("type", "node-affinity"),
        ("strict", "0"),
        ("delete", "comment"),
        ("digest", digest.as_str()),
    ];
    h.put("/cluster/ha/rules/pin", &change).await.data();
    let pin = h.get("/cluster/ha/rules/pin").await.data();
    assert_eq!(pin["strict"], 0, "a strict=0 given is kept: {pin}");
    assert!(pin.get("comment").is_none(), "{pin}");
    assert_ne!(pin["digest"], json!(digest));

    assert_eq!(h.delete("/cluster/ha/rules/pin").await.data(), Value::Null);
    assert_eq!(h.delete("/cluster/ha/rules/pin").await.data(), Value::Null);
    let left = rules(&h, "").await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["order"], 1);
    h.sim.shutdown().await;
}

/// `create_rule` inside `lock_ha_domain` ("create ha rule failed: …"): the rule id,
/// `$assert_valid_resources_param` (some resources, each an HA resource) and
/// `$assert_valid_nodes_param` (each a cluster node). Creating a rule needs `Sys.Console`
/// on `/`.
#[tokio::test]
async fn rule_create_checks_its_id_resources_and_nodes() {
    let h = start(fast_config()).await;
    with_resources(&h, &[100, 101]).await;
    let post = |form: Vec<(&'static str, &'static str)>| {
        let h = &h;
        async move { h.post("/cluster/ha/rules", &form).await }
    };
    let base = |resources: &'static str, nodes: &'static str| {
        vec![
            ("rule", "r1"),
            ("type", "node-affinity"),
            ("resources", resources),
            ("nodes", nodes),
        ]
    };
    let unmanaged = post(base("vm:100,vm:555,vm:102", "pve1")).await;
    assert_eq!(
        unmanaged.message(),
        "create ha rule failed: cannot use unmanaged resource(s) vm:102, vm:555.\n"
    );
    let empty = post(base("", "pve1")).await;
    assert_eq!(
        empty.message(),
        "create ha rule failed: no resources were specified\n"
    );
    let nodes = post(base("vm:100", "pve9,pve1,zz")).await;
    assert_eq!(
        nodes.message(),
        "create ha rule failed: cannot use non-existent node(s) pve9, zz.\n"
    );
    let no_nodes = post(base("vm:100", "")).await;
    assert_eq!(
        no_nodes.message(),
        "create ha rule failed: no nodes were specified\n"
    );
    post(base("vm:100", "pve1")).await.data();
    let again = post(base("vm:101", "pve2")).await;
    assert_eq!(
        again.message(),
        "create ha rule failed: HA rule 'r1' already defined\n"
    );
    h.sim.shutdown().await;

    let mut config = fast_config();
    let root = config.privileges.get_mut("/").unwrap();
    root.retain(|p| p != "Sys.Console");
    let h = start(config).await;
    let denied = h
        .post(
            "/cluster/ha/rules",
            &[
                ("rule", "r1"),
                ("type", "resource-affinity"),
                ("resources", "vm:100,vm:101"),
                ("affinity", "negative"),
            ],
        )
        .await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    assert_eq!(
        denied.message(),
        "Permission check failed (/, Sys.Console)\n"
    );
    h.sim.shutdown().await;
}

/// The rules' parameters are a `oneOf` on `type` (libpve-common-perl 9.1.21): a property of
/// the other type is unknown, a variant's required property is reported under
/// `oneOf[<type>]`, and `type` is required for updates too.
#[tokio::test]
async fn rule_parameters_are_the_one_of_their_type() {
    let h = start(fast_config()).await;
    let errors = |form: &'static [(&'static str, &'static str)], put: bool| {
        let h = &h;
        async move {
            let answer = if put {
                h.put("/cluster/ha/rules/r1", form).await
            } else {
                h.post("/cluster/ha/rules", form).await
            };
            assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
            assert_eq!(answer.message(), "Parameter verification failed.\n");
            answer.json()["errors"].clone()
        }
    };
    let unknown = "property is not defined in schema and the schema does not allow additional \
                   properties";
    let missing = "property is missing and it is not optional";
    let mixed = &[
        ("rule", "r1"),
        ("type", "node-affinity"),
        ("resources", "vm:100"),
        ("nodes", "pve1"),
        ("affinity", "negative"),
    ];
    assert_eq!(errors(mixed, false).await, json!({ "affinity": unknown }));
    let no_nodes = &[
        ("rule", "r1"),
        ("type", "node-affinity"),
        ("resources", "vm:100"),
    ];
    assert_eq!(
        errors(no_nodes, false).await,
        json!({ "oneOf[node-affinity].nodes": missing })
    );
    let bad_node = &[
        ("rule", "r1"),
        ("type", "node-affinity"),
        ("resources", "vm:100"),
        ("nodes", "pve1:x"),
    ];
    assert_eq!(
        errors(bad_node, false).await,
        json!({"oneOf[node-affinity].nodes":
            "invalid format - value does not look like a valid ha node\n"})
    );
    let no_type = &[("rule", "r1"), ("comment", "x")];
    assert_eq!(
        errors(no_type, true).await,
        json!({ "type": missing, "comment": unknown })
    );
    let bad_sid = &[
        ("rule", "r1"),
        ("type", "resource-affinity"),
        ("affinity", "positive"),
        ("resources", "vm:100,101"),
    ];
    assert_eq!(
        errors(bad_sid, false).await,
        json!({"oneOf[resource-affinity].resources":
            "invalid format - value does not look like a valid ha resource id\n"})
    );
    h.sim.shutdown().await;
}

/// `$assert_feasibility`: a rule that makes the rule set infeasible is refused, PVE's 400
/// exception flattened to text by `lock_ha_domain` (the checks of `Rules.pm`,
/// `NodeAffinity.pm` and `ResourceAffinity.pm`, each blaming `resources`). Negative rules
/// are counted against the nodes of the CRM's `manager_status`: none before its first
/// round.
#[tokio::test]
async fn infeasible_rules_are_refused_with_pves_texts() {
    let mut config = fast_config();
    config.timings.ha_delay_ms = 60_000;
    let h = start(config).await;
    for sid in ["vm:100", "vm:101", "vm:102"] {
        h.post(
            "/cluster/ha/resources",
            &[("sid", sid), ("state", "stopped")],
        )
        .await
        .data();
    }
    let apart = [
        ("rule", "apart"),
        ("type", "resource-affinity"),
        ("affinity", "negative"),
        ("resources", "vm:100,vm:101"),
    ];
    let early = h.post("/cluster/ha/rules", &apart).await;
    assert_eq!(
        early.message(),
        "create ha rule failed: 400 Rule 'apart' is invalid.\nresources: rule defines more \
         resources than available nodes\n"
    );
    let mut timings = h.admin.timings().await;
    timings.ha_delay_ms = 20;
    h.admin.set_timings(&timings).await;
    h.poll_until("/cluster/ha/status/current", |a| {
        a.json()["data"][1]["id"] == "master"
    })
    .await;
    h.post("/cluster/ha/rules", &apart).await.data();

    let together = [
        ("rule", "together"),
        ("type", "resource-affinity"),
        ("affinity", "positive"),
        ("resources", "vm:101,vm:100,vm:102"),
    ];
    let conflict = h.post("/cluster/ha/rules", &together).await;
    assert_eq!(
        conflict.message(),
        "create ha rule failed: 400 Rule 'together' is invalid.\nresources: rule shares two \
         or more resources with a negative resource affinity rule\n"
    );
    let lonely = [
        ("rule", "lonely"),
        ("type", "resource-affinity"),
        ("affinity", "positive"),
        ("resources", "vm:102"),
    ];
    let lonely = h.post("/cluster/ha/rules", &lonely).await;
    assert!(
        lonely
            .message()
            .ends_with("resources: rule is ineffective as there are less than two resources\n"),
        "{}",
        lonely.body
    );
    let pin = |id: &'static str, nodes: &'static str| {
        [
            ("rule", id),
            ("type", "node-affinity"),
            ("resources", "vm:100,vm:101"),
            ("nodes", nodes),
        ]
    };
    let narrow = h.post("/cluster/ha/rules", &pin("narrow", "pve1")).await;
    assert_eq!(
        narrow.message(),
        "create ha rule failed: 400 Rule 'narrow' is invalid.\nresources: at least one \
         resource is in a negative resource affinity rule and this rule would restrict these \
         to less nodes than available to the resources\n"
    );
    h.post("/cluster/ha/rules", &pin("wide", "pve1,pve2"))
        .await
        .data();
    let twice = h
        .post("/cluster/ha/rules", &pin("twice", "pve3,pve2"))
        .await;
    assert_eq!(
        twice.message(),
        "create ha rule failed: 400 Rule 'twice' is invalid.\nresources: resource 'vm:100' \
         is already used in another node affinity rule, resource 'vm:101' is already used in \
         another node affinity rule\n"
    );
    h.sim.shutdown().await;
}

/// Rules that became infeasible stay in the file: the listing shows their `errors` (as
/// arrays), and the CRM drops them when it compiles the rules (`Rules.pm` `transform`:
/// "Drop rule '…', because ….").
#[tokio::test]
async fn rules_made_infeasible_show_errors_and_the_crm_drops_them() {
    let h = start(fast_config()).await;
    with_resources(&h, &[100, 101]).await;
    let apart = [
        ("rule", "apart"),
        ("type", "resource-affinity"),
        ("affinity", "negative"),
        ("resources", "vm:100,vm:101"),
    ];
    h.post("/cluster/ha/rules", &apart).await.data();
    // `delete` with `purge=0` keeps the resource in its rules.
    h.delete("/cluster/ha/resources/vm:101?purge=0")
        .await
        .data();
    assert_eq!(rules(&h, "").await[0]["resources"], "vm:100,vm:101");
    // The default `purge=1` takes it out of them (`delete_service_from_config`).
    h.delete("/cluster/ha/resources/vm:100").await.data();
    let rule = &rules(&h, "").await[0];
    assert_eq!(rule["resources"], "vm:101");
    assert_eq!(
        rule["errors"],
        json!({"resources": ["rule is ineffective as there are less than two resources"]})
    );
    let dropped =
        "Drop rule 'apart', because rule is ineffective as there are less than two resources.";
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !h.admin.ha_log().await.iter().any(|l| l == dropped) {
        assert!(tokio::time::Instant::now() < deadline, "never dropped");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    h.sim.shutdown().await;
}

/// `update_rule`: `check_config` with the rule's own type (`unexpected property 'type'`
/// for another), `delete_from_config`'s refusals, and `disable` (a false one is dropped, so
/// a rule is enabled again by deleting the key).
#[tokio::test]
async fn rule_updates_keep_to_the_rules_type_and_options() {
    let h = start(fast_config()).await;
    with_resources(&h, &[100, 101]).await;
    let apart = [
        ("rule", "apart"),
        ("type", "resource-affinity"),
        ("affinity", "negative"),
        ("resources", "vm:100,vm:101"),
        ("comment", "replicas"),
    ];
    h.post("/cluster/ha/rules", &apart).await.data();
    let path = "/cluster/ha/rules/apart";
    let put = |form: &'static [(&'static str, &'static str)]| {
        let h = &h;
        async move { h.put(path, form).await.message() }
    };
    let fail = |text: &str| format!("update HA rules failed: {text}\n");
    assert_eq!(
        put(&[("type", "node-affinity"), ("nodes", "pve1")]).await,
        fail("unexpected property 'type'")
    );
    assert_eq!(
        put(&[("type", "resource-affinity"), ("delete", "resources")]).await,
        fail("unable to delete required option 'resources'")
    );
    assert_eq!(
        put(&[("type", "resource-affinity"), ("delete", "strict")]).await,
        fail("no such option 'strict'")
    );
    assert_eq!(
        put(&[
            ("type", "resource-affinity"),
            ("comment", "x"),
            ("delete", "comment")
        ])
        .await,
        fail("cannot set and delete property 'comment' at the same time!")
    );
    assert_eq!(
        put(&[
            ("type", "resource-affinity"),
            ("resources", "vm:100,vm:102")
        ])
        .await,
        fail("cannot use unmanaged resource(s) vm:102.")
    );
    let missing = h
        .put(
            "/cluster/ha/rules/nope",
            &[("type", "resource-affinity"), ("comment", "x")],
        )
        .await;
    assert_eq!(missing.message(), fail("HA rule 'nope' does not exist"));

    let disable = [("type", "resource-affinity"), ("disable", "1")];
    h.put(path, &disable).await.data();
    assert_eq!(h.get(path).await.data()["disable"], 1);
    let enable = [("type", "resource-affinity"), ("disable", "0")];
    h.put(path, &enable).await.data();
    assert_eq!(
        h.get(path).await.data()["disable"],
        1,
        "disable=0 is dropped"
    );
    let delete = [("type", "resource-affinity"), ("delete", "disable")];
    h.put(path, &delete).await.data();
    assert!(h.get(path).await.data().get("disable").is_none());
    h.sim.shutdown().await;
}

/// `Groups.pm`: with the groups migrated to rules (`have_groups_been_migrated`), each
/// handler refuses with its own text after the permission check.
#[tokio::test]
async fn group_endpoints_refuse_since_groups_became_rules() {
    let h = start(fast_config()).await;
    let text = |what: &str| format!("cannot {what}: ha groups have been migrated to rules\n");
    assert_eq!(
        h.get("/cluster/ha/groups").await.message(),
        text("index groups")
    );
    assert_eq!(
        h.get("/cluster/ha/groups/g1").await.message(),
        text("read group")
    );
    let create = h
        .post(
            "/cluster/ha/groups",
            &[("group", "g1"), ("nodes", "pve1:2,pve2")],
        )
        .await;
    assert_eq!(create.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(create.message(), text("create group"));
    assert_eq!(
        h.put("/cluster/ha/groups/g1", &[("restricted", "1")])
            .await
            .message(),
        text("update group")
    );
    assert_eq!(
        h.delete("/cluster/ha/groups/g1").await.message(),
        text("delete group")
    );
    let schema = h.post("/cluster/ha/groups", &[("group", "g1")]).await;
    assert_eq!(
        schema.json()["errors"]["nodes"],
        "property is missing and it is not optional"
    );
    h.sim.shutdown().await;
}
