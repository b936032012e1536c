//! The echo provider driven as Terraform 1.12 to 1.16 drive a provider, through the contract
//! harness (`tfplugin::testing`): every answer passes the checks Terraform's client makes, and
//! the server's own promises on the new RPCs hold (identity on every answer of a resource that
//! has one, lists that end at their limit or first error, one completion per invocation).

use tfplugin::proto::tfplugin6 as pb;
use tfplugin::testing::{ApplyChange, Client, MoveChange, PlanChange};
use tfplugin::{Severity, Value};

use crate::common::plugin_binary;

async fn echo() -> Client {
    let mut client = Client::start(plugin_binary(), &[]).await.unwrap();
    let config = Value::object([("prefix", Value::Null)]);
    let configured = client.configure("1.14.9", &config).await.unwrap();
    assert!(configured.is_empty(), "{configured:?}");
    client
}

fn identity(name: &str) -> Value {
    Value::object([
        ("name", Value::from(name)),
        ("namespace", Value::from("default")),
    ])
}

#[tokio::test]
async fn the_schemas_announce_identity_lists_actions_and_generated_configuration() {
    let mut client = echo().await;
    let schemas = client.schemas().await.unwrap();
    let item = &schemas.resources["echo_item"];
    let identity = item.identity.as_ref().unwrap();
    assert_eq!(identity.version, 1);
    assert_eq!(identity.required_for_import, ["name"]);
    assert_eq!(item.write_only, ["secret"]);
    assert!(schemas.list_resources["echo_item"].config_required);
    assert!(schemas.actions.contains_key("echo_countdown"));
    assert!(schemas.capabilities.generate_resource_config);
    assert!(schemas.capabilities.plan_destroy);
    let metadata = client
        .raw()
        .get_metadata(pb::get_metadata::Request {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(metadata.list_resources[0].type_name, "echo_item");
    assert_eq!(metadata.actions[0].type_name, "echo_countdown");
}

#[tokio::test]
async fn create_read_update_and_destroy_carry_the_identity() {
    let mut client = echo().await;
    let config = Value::object([("name", Value::from("a")), ("value", Value::from("v"))]);
    let create = PlanChange {
        type_name: "echo_item".into(),
        proposed_new_state: config.clone(),
        config: config.clone(),
        ..PlanChange::default()
    };
    let planned = client.plan_resource_change(&create).await.unwrap();
    assert_eq!(planned.identity, identity("a"));
    let applied = client
        .apply_resource_change(&ApplyChange {
            type_name: "echo_item".into(),
            planned_state: planned.planned_state,
            config: config.clone(),
            planned_identity: planned.identity,
            ..ApplyChange::default()
        })
        .await
        .unwrap();
    assert_eq!(applied.identity, identity("a"));
    let state = applied.new_state;
    let read = client
        .read_resource("echo_item", &state, &applied.private, &applied.identity)
        .await
        .unwrap();
    assert_eq!(read.identity, identity("a"));
    assert_eq!(read.new_state, state);

    let mut changed = state.clone();
    changed.set_attr("value", Value::from("w"));
    let update = PlanChange {
        type_name: "echo_item".into(),
        prior_state: state.clone(),
        proposed_new_state: changed.clone(),
        config: changed,
        prior_identity: read.identity.clone(),
        ..PlanChange::default()
    };
    let planned = client.plan_resource_change(&update).await.unwrap();
    assert!(!planned.replaces);
    assert_eq!(planned.identity, identity("a"));

    let destroy = PlanChange {
        type_name: "echo_item".into(),
        prior_state: state.clone(),
        prior_identity: read.identity.clone(),
        ..PlanChange::default()
    };
    let planned = client.plan_resource_change(&destroy).await.unwrap();
    assert!(planned.planned_state.is_null() && planned.identity.is_null());
    let deleted = client
        .apply_resource_change(&ApplyChange {
            type_name: "echo_item".into(),
            prior_state: state,
            planned_identity: read.identity,
            ..ApplyChange::default()
        })
        .await
        .unwrap();
    assert!(deleted.new_state.is_null() && deleted.identity.is_null());
}

#[tokio::test]
async fn a_rename_replaces_and_plans_the_new_identity() {
    let mut client = echo().await;
    let prior = Value::object([("name", Value::from("a")), ("id", Value::from("item-a"))]);
    let renamed = Value::object([("name", Value::from("b"))]);
    let planned = client
        .plan_resource_change(&PlanChange {
            type_name: "echo_item".into(),
            prior_state: prior,
            proposed_new_state: renamed.clone(),
            config: renamed,
            prior_identity: identity("a"),
            ..PlanChange::default()
        })
        .await
        .unwrap();
    assert!(planned.replaces);
    assert_eq!(planned.identity, identity("b"));
}

#[tokio::test]
async fn import_by_identity_and_by_id_return_the_identity() {
    let mut client = echo().await;
    // `namespace` is optional for import: left null.
    let wanted = Value::object([("name", Value::from("z")), ("namespace", Value::Null)]);
    let imported = client
        .import_resource_state_by_identity("echo_item", &wanted)
        .await
        .unwrap();
    assert!(
        imported.diagnostics.is_empty(),
        "{:?}",
        imported.diagnostics
    );
    assert_eq!(imported.identity, identity("z"));
    assert_eq!(imported.state.get_attr("id").as_str(), Some("item-z"));

    let by_id = client
        .import_resource_state("echo_item", "item-z")
        .await
        .unwrap();
    assert_eq!(by_id.identity, identity("z"));

    let elsewhere = Value::object([("name", Value::from("z")), ("namespace", Value::from("x"))]);
    let refused = client
        .import_resource_state_by_identity("echo_item", &elsewhere)
        .await
        .unwrap();
    assert_eq!(
        refused.diagnostics.iter().next().unwrap().summary,
        "Unknown namespace"
    );
}

#[tokio::test]
async fn a_stored_identity_of_version_0_is_upgraded() {
    let mut client = echo().await;
    let (upgraded, diagnostics) = client
        .upgrade_resource_identity("echo_item", 0, br#"{"item_name":"a"}"#)
        .await
        .unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(upgraded, identity("a"));
    let (newer, diagnostics) = client
        .upgrade_resource_identity("echo_item", 2, b"{}")
        .await
        .unwrap();
    assert!(newer.is_null() && diagnostics.has_errors());
}

fn list_config(count: i64) -> Value {
    Value::object([("count", Value::from(count))])
}

#[tokio::test]
async fn a_list_sends_identities_and_states_only_when_asked() {
    let mut client = echo().await;
    let listed = client
        .list_resource("echo_item", &list_config(3), false, 100)
        .await
        .unwrap();
    assert!(listed.ended_by_provider);
    let names: Vec<&str> = listed
        .results
        .iter()
        .map(|r| r.display_name.as_str())
        .collect();
    assert_eq!(names, ["item-0", "item-1", "item-2"]);
    assert_eq!(listed.results[2].identity, identity("item-2"));
    assert!(listed.results.iter().all(|r| r.state.is_null()));

    let with_states = client
        .list_resource("echo_item", &list_config(3), true, 100)
        .await
        .unwrap();
    let state = &with_states.results[1].state;
    assert_eq!(state.get_attr("id").as_str(), Some("item-item-1"));
}

/// Events of a raw `ListResource` stream, read to its end.
async fn raw_list(
    client: &mut Client,
    config: &Value,
    limit: i64,
) -> Vec<pb::list_resource::Event> {
    let config_type = client.schemas().await.unwrap().list_resources["echo_item"]
        .config_type
        .clone();
    let request = pb::list_resource::Request {
        type_name: "echo_item".into(),
        config: Some(tfplugin::encode_dynamic_value(config, &config_type).unwrap()),
        include_resource_object: true,
        limit,
    };
    let mut stream = client
        .raw()
        .list_resource(request)
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event);
    }
    events
}

#[tokio::test]
async fn a_list_ends_at_its_limit() {
    let mut client = echo().await;
    let listed = client
        .list_resource("echo_item", &list_config(5), false, 2)
        .await
        .unwrap();
    assert_eq!(listed.results.len(), 2);
    // The server ends the stream there itself: no third result, not even the final warning.
    let events = raw_list(&mut client, &list_config(5), 2).await;
    assert_eq!(events.len(), 2);
    assert!(raw_list(&mut client, &list_config(5), 0).await.is_empty());
    // Under the limit the final diagnostics follow the results.
    let events = raw_list(&mut client, &list_config(5), 10).await;
    assert_eq!(events.len(), 6);
    assert!(events[5].identity.is_none());
    assert_eq!(events[5].diagnostic[0].summary, "Many items");
}

#[tokio::test]
async fn a_result_without_identity_becomes_an_error_that_ends_the_list() {
    let mut client = echo().await;
    let config = Value::object([("count", Value::from(3)), ("broken_at", Value::from(1))]);
    let listed = client
        .list_resource("echo_item", &config, false, 100)
        .await
        .unwrap();
    assert_eq!(listed.results.len(), 1);
    assert!(listed.diagnostics.has_errors());
    let events = raw_list(&mut client, &config, 100).await;
    assert_eq!(events.len(), 2, "the error event ends the stream");
    assert_eq!(
        events[1].diagnostic[0].summary,
        "Provider produced an invalid list result"
    );
}

#[tokio::test]
async fn list_configuration_is_validated_and_unknown_lists_are_errors() {
    let mut client = echo().await;
    let invalid = client
        .validate_list_resource_config("echo_item", &list_config(-1))
        .await
        .unwrap();
    let problem = invalid.iter().next().unwrap();
    assert_eq!(problem.attribute.as_ref().unwrap().to_string(), "count");
    let request = pb::list_resource::Request {
        type_name: "echo_nothing".into(),
        limit: 10,
        ..Default::default()
    };
    let mut stream = client
        .raw()
        .list_resource(request)
        .await
        .unwrap()
        .into_inner();
    let event = stream.message().await.unwrap().unwrap();
    assert_eq!(event.diagnostic[0].summary, "Unknown list resource type");
    assert!(stream.message().await.unwrap().is_none());
}

#[tokio::test]
async fn generated_configuration_leaves_out_what_only_the_provider_sets() {
    let mut client = echo().await;
    let state = Value::object([
        ("name", Value::from("a")),
        ("value", Value::from("v")),
        ("wait_for_stop", Value::from(false)),
        ("id", Value::from("item-a")),
    ]);
    let (config, diagnostics) = client
        .generate_resource_config("echo_item", &state)
        .await
        .unwrap();
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    assert_eq!(config.get_attr("name").as_str(), Some("a"));
    assert_eq!(config.get_attr("value").as_str(), Some("v"));
    assert!(config.get_attr("id").is_null());
    assert!(config.get_attr("wait_for_stop").is_null());
    let (config, _) = client
        .generate_resource_config("echo_item", &Value::Null)
        .await
        .unwrap();
    assert!(config.is_null());
}

#[tokio::test]
async fn an_action_is_validated_planned_and_invoked_with_progress() {
    let mut client = echo().await;
    let config = |from: i64| Value::object([("from", Value::from(from)), ("fail", Value::Null)]);
    let too_far = client
        .validate_action_config("echo_countdown", &config(101))
        .await
        .unwrap();
    let problem = too_far.iter().next().unwrap();
    assert_eq!(problem.attribute.as_ref().unwrap().to_string(), "from");
    // Values may be unknown at validation and plan.
    let unknown = Value::object([("from", Value::Unknown), ("fail", Value::Null)]);
    assert!(
        client
            .validate_action_config("echo_countdown", &unknown)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        client
            .plan_action("echo_countdown", &unknown)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        client
            .plan_action("echo_countdown", &config(0))
            .await
            .unwrap()
            .has_errors()
    );

    let invoked = client
        .invoke_action("echo_countdown", &config(3))
        .await
        .unwrap();
    assert_eq!(invoked.progress, ["3", "2", "1"]);
    assert!(invoked.diagnostics.is_empty());

    let failing = Value::object([("from", Value::from(1)), ("fail", Value::from(true))]);
    let invoked = client
        .invoke_action("echo_countdown", &failing)
        .await
        .unwrap();
    assert_eq!(invoked.progress, ["1"]);
    let error = invoked.diagnostics.iter().next().unwrap();
    assert_eq!(error.severity, Severity::Error);
}

#[tokio::test]
async fn an_invocation_that_cannot_start_still_completes_once() {
    let mut client = echo().await;
    let request = pb::invoke_action::Request {
        action_type: "echo_nothing".into(),
        ..Default::default()
    };
    let mut stream = client
        .raw()
        .invoke_action(request)
        .await
        .unwrap()
        .into_inner();
    let event = stream.message().await.unwrap().unwrap();
    let Some(pb::invoke_action::event::Type::Completed(completed)) = event.r#type else {
        panic!("{event:?}");
    };
    assert_eq!(completed.diagnostics[0].summary, "Unknown action type");
    assert!(stream.message().await.unwrap().is_none());
}

#[tokio::test]
async fn a_provider_that_takes_no_moves_says_so() {
    let mut client = echo().await;
    let change = MoveChange {
        source_type_name: "echo_note".into(),
        source_state_json: b"{}".to_vec(),
        target_type_name: "echo_item".into(),
        ..MoveChange::default()
    };
    let refused = client.move_resource_state(&change).await.unwrap_err();
    assert!(refused.check.contains("prepareCrossTypeMove"), "{refused}");
    // A client that asks anyway gets the resource's refusal.
    let request = pb::move_resource_state::Request {
        source_type_name: "echo_note".into(),
        target_type_name: "echo_item".into(),
        ..Default::default()
    };
    let answer = client
        .raw()
        .move_resource_state(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.diagnostics[0].summary, "Move not supported");
    assert!(answer.target_identity.is_none());
}
