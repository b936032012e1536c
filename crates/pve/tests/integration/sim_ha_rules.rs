//! `client.cluster().ha()`'s rule calls against pve-sim, which answers as pve-ha-manager
//! 5.2.0's `src/PVE/API2/HA/Rules.pm` does: each call's shape, and the error kinds the
//! provider branches on.

use std::time::Duration;

use crate::common::{Env, poll_until, start_with};
use pve::ErrorKind;
use pve::cluster::ha::{HaAffinity, HaResourceSettings, HaRuleSettings, HaRuleType, HaState};

/// HA resources for the default world's VMs, and the CRM's first round (negative rules
/// are checked against the nodes it knows).
async fn with_resources(env: &Env, sids: &[&str]) {
    let ha = env.client.cluster().ha();
    let stopped = HaResourceSettings {
        state: Some(HaState::Stopped),
        ..HaResourceSettings::default()
    };
    for sid in sids {
        ha.add_resource(sid, &stopped).await.unwrap();
    }
    poll_until("the CRM's first round", Duration::from_secs(10), || async {
        let status = ha.status_current().await.unwrap();
        status
            .iter()
            .any(|e| e.entry_type == "master")
            .then_some(())
    })
    .await;
}

fn apart() -> HaRuleSettings {
    HaRuleSettings {
        resources: Some(vec!["vm:100".into(), "vm:101".into()]),
        affinity: Some(HaAffinity::Negative),
        comment: Some("replicas".into()),
        ..HaRuleSettings::default()
    }
}

#[tokio::test]
async fn rules_are_created_read_updated_and_deleted() {
    let env = start_with(pvesim::testing::fast_config(), |_| {}).await;
    with_resources(&env, &["vm:100", "vm:101"]).await;
    let ha = env.client.cluster().ha();
    let kind = HaRuleType::ResourceAffinity;
    ha.create_rule("apart", kind, &apart()).await.unwrap();
    let again = ha.create_rule("apart", kind, &apart()).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::AlreadyExists, "{again}");

    let rule = ha.rule("apart").await.unwrap().expect("the rule");
    assert_eq!(rule.rule_type, kind);
    assert_eq!(rule.resource_ids(), ["vm:100", "vm:101"]);
    assert_eq!(rule.affinity, Some(HaAffinity::Negative));
    assert_eq!(rule.comment.as_deref(), Some("replicas"));
    assert_eq!(rule.errors, None);
    assert_eq!(ha.rules(Some("vm:101")).await.unwrap().len(), 1);
    assert!(ha.rules(Some("vm:102")).await.unwrap().is_empty());

    let none = HaRuleSettings::default();
    let stale = ha
        .update_rule("apart", kind, &none, &["comment"], Some("0000"))
        .await
        .unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::Conflict, "{stale}");
    let digest = rule.digest.as_deref();
    ha.update_rule("apart", kind, &none, &["comment"], digest)
        .await
        .unwrap();
    assert_eq!(ha.rule("apart").await.unwrap().unwrap().comment, None);
    let missing = ha
        .update_rule("nope", kind, &none, &["comment"], None)
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");

    ha.delete_rule("apart").await.unwrap();
    ha.delete_rule("apart").await.unwrap();
    assert_eq!(ha.rule("apart").await.unwrap(), None);
    env.shutdown().await;
}

#[tokio::test]
async fn node_affinity_rules_carry_priorities_and_infeasible_ones_are_refused() {
    let env = start_with(pvesim::testing::fast_config(), |_| {}).await;
    with_resources(&env, &["vm:100", "vm:101"]).await;
    let ha = env.client.cluster().ha();
    let pin = HaRuleSettings {
        resources: Some(vec!["vm:100".into(), "vm:101".into()]),
        nodes: Some(vec![("pve2".into(), Some(2)), ("pve1".into(), None)]),
        strict: Some(true),
        ..HaRuleSettings::default()
    };
    ha.create_rule("pin", HaRuleType::NodeAffinity, &pin)
        .await
        .unwrap();
    let rule = ha.rule("pin").await.unwrap().unwrap();
    assert_eq!(rule.node_priorities(), [("pve1", 0), ("pve2", 2)]);
    assert_eq!(rule.strict, Some(true));

    // Both resources may only use pve1 and pve2: three nodes cannot be spread over.
    let mut narrow = pin.clone();
    narrow.nodes = Some(vec![("pve1".into(), None)]);
    let kind = HaRuleType::NodeAffinity;
    ha.update_rule("pin", kind, &narrow, &[], None)
        .await
        .unwrap();
    let refused = ha
        .create_rule("apart", HaRuleType::ResourceAffinity, &apart())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Permanent, "{refused}");
    assert!(
        refused.message().contains("Rule 'apart' is invalid."),
        "{refused}"
    );
    let unmanaged = HaRuleSettings {
        resources: Some(vec!["vm:102".into(), "vm:100".into()]),
        affinity: Some(HaAffinity::Positive),
        ..HaRuleSettings::default()
    };
    let refused = ha
        .create_rule("together", HaRuleType::ResourceAffinity, &unmanaged)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Permanent, "{refused}");
    env.shutdown().await;
}
