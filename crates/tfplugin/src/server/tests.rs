//! The server's own side of the 6.9/6.10 rules, called directly: what Terraform would refuse
//! becomes an error diagnostic here, and a resource without identity gets none.

use std::sync::Arc;

use tonic::Request;

use super::ProviderService;
use crate::action::{Action, ActionProgress};
use crate::context::Context;
use crate::diag::Diagnostics;
use crate::identity::UpgradeIdentityResponse;
use crate::identity::{IdentityAttribute, IdentitySchema, UpgradeIdentityRequest};
use crate::list::{ListRequest, ListResource, ListResults};
use crate::moves::{MoveRequest, MoveResponse};
use crate::proto::tfplugin6 as pb;
use crate::proto::tfplugin6::provider_server::Provider as _;
use crate::provider::{ApplyRequest, ApplyResponse, Provider, ReadRequest, ReadResponse, Resource};
use crate::provider::{DataSource, DataSourceResponse};
use crate::provider::{ImportResponse, ImportedResource};
use crate::schema::{Attribute, Block, Schema};
use crate::value::{Type, Value};
use crate::{codec::encode_dynamic_value, decode_dynamic_value};

/// `t_thing` has an identity `{id}` taken from `name`: `name = "unknown"` gives an unknown
/// id, `name = "none"` no identity; it takes objects of `t_old` (`{"title": ...}`) by a move,
/// keeping their `secret` when told to (which Terraform refuses). `t_plain` has none, but
/// answers a read of `name = "explicit"` with one. `t_map` declares an identity Terraform
/// refuses.
struct Thing {
    type_name: &'static str,
    identity: Option<IdentitySchema>,
}

#[tonic::async_trait]
impl Resource for Thing {
    fn type_name(&self) -> &str {
        self.type_name
    }
    fn schema(&self) -> Schema {
        Schema::new(
            Block::new()
                .attribute(Attribute::new("name", Type::String).required())
                .attribute(
                    Attribute::new("secret", Type::String)
                        .optional()
                        .write_only(),
                ),
        )
    }
    fn identity_schema(&self) -> Option<IdentitySchema> {
        self.identity.clone()
    }
    fn identity_of(&self, state: &Value) -> Value {
        match state.get_attr("name").as_str() {
            Some("unknown") => Value::object([("id", Value::Unknown)]),
            Some("none") => Value::Null,
            _ => Value::object([("id", state.get_attr("name").clone())]),
        }
    }
    async fn apply(&self, _ctx: &Context, request: ApplyRequest) -> ApplyResponse {
        ApplyResponse {
            new_state: request.planned_state,
            ..ApplyResponse::default()
        }
    }
    async fn read(&self, _ctx: &Context, request: ReadRequest) -> ReadResponse {
        let explicit = request.current_state.get_attr("name").as_str() == Some("explicit");
        ReadResponse {
            new_identity: explicit.then(|| Value::object([("id", Value::from("x"))])),
            new_state: request.current_state,
            ..ReadResponse::default()
        }
    }
    async fn import_by_identity(&self, _ctx: &Context, identity: &Value) -> ImportResponse {
        let name = identity.get_attr("id").clone();
        ImportResponse {
            imported: vec![ImportedResource {
                type_name: self.type_name.to_owned(),
                state: Value::object([("name", name)]),
                private: Vec::new(),
            }],
            diagnostics: Diagnostics::new(),
        }
    }
    async fn upgrade_identity(
        &self,
        _ctx: &Context,
        _request: UpgradeIdentityRequest,
    ) -> UpgradeIdentityResponse {
        UpgradeIdentityResponse::default()
    }
    fn accepts_moves(&self) -> bool {
        self.type_name == "t_thing"
    }
    async fn move_state(&self, _ctx: &Context, request: MoveRequest) -> MoveResponse {
        let old: serde_json::Value = serde_json::from_slice(&request.source_state_json).unwrap();
        let secret = old["keep_secret"].as_str().map_or(Value::Null, Value::from);
        let title = Value::from(old["title"].as_str().unwrap());
        MoveResponse {
            target_state: Value::object([("name", title), ("secret", secret)]),
            target_private: request.source_private,
            ..MoveResponse::default()
        }
    }
}

/// Lists `t_plain`, which has no identity.
struct PlainList;

#[tonic::async_trait]
impl ListResource for PlainList {
    fn type_name(&self) -> &str {
        "t_plain"
    }
    fn schema(&self) -> Schema {
        Schema::new(Block::new())
    }
    async fn list(&self, _: &Context, _: ListRequest, _: &mut ListResults) -> Diagnostics {
        unreachable!("a list without identity is refused before it runs")
    }
}

struct Act;

#[tonic::async_trait]
impl Action for Act {
    fn type_name(&self) -> &str {
        "t_act"
    }
    fn schema(&self) -> Schema {
        Schema::new(Block::new().attribute(Attribute::new("n", Type::Number).required()))
    }
    async fn invoke(&self, _: &Context, _: &Value, _: &ActionProgress) -> Diagnostics {
        unreachable!("unknown configurations are refused before the action runs")
    }
}

/// `t_stamped`, a resource and a data source whose `stamp` only the provider sets; its own
/// validate warns, so a test sees both checks run.
struct Stamped;

impl Stamped {
    fn schema() -> Schema {
        Schema::new(
            Block::new()
                .attribute(Attribute::new("name", Type::String).optional())
                .attribute(Attribute::new("stamp", Type::String).computed()),
        )
    }

    fn own_check() -> Diagnostics {
        let mut diagnostics = Diagnostics::new();
        diagnostics.warning("checked by t_stamped", "");
        diagnostics
    }
}

#[tonic::async_trait]
impl Resource for Stamped {
    fn type_name(&self) -> &str {
        "t_stamped"
    }
    fn schema(&self) -> Schema {
        Stamped::schema()
    }
    async fn validate(&self, _ctx: &Context, _config: &Value) -> Diagnostics {
        Stamped::own_check()
    }
    async fn apply(&self, _ctx: &Context, _request: ApplyRequest) -> ApplyResponse {
        unreachable!("only validated")
    }
    async fn read(&self, _ctx: &Context, _request: ReadRequest) -> ReadResponse {
        unreachable!("only validated")
    }
}

#[tonic::async_trait]
impl DataSource for Stamped {
    fn type_name(&self) -> &str {
        "t_stamped"
    }
    fn schema(&self) -> Schema {
        Stamped::schema()
    }
    async fn validate(&self, _ctx: &Context, _config: &Value) -> Diagnostics {
        Stamped::own_check()
    }
    async fn read(&self, _ctx: &Context, _config: &Value) -> DataSourceResponse {
        unreachable!("only validated")
    }
}

struct Strict;

fn id_schema(ty: Type) -> Option<IdentitySchema> {
    Some(IdentitySchema::new().attribute(IdentityAttribute::required("id", ty)))
}

#[tonic::async_trait]
impl Provider for Strict {
    fn schema(&self) -> Schema {
        Schema::default()
    }
    async fn configure(&self, _ctx: &Context, _version: &str, _config: &Value) -> Diagnostics {
        Diagnostics::new()
    }
    fn resources(&self) -> Vec<Arc<dyn Resource>> {
        let thing = |type_name, identity| {
            Arc::new(Thing {
                type_name,
                identity,
            }) as _
        };
        vec![
            thing("t_thing", id_schema(Type::String)),
            thing("t_plain", None),
            thing("t_map", id_schema(Type::map(Type::String))),
            Arc::new(Stamped),
        ]
    }
    fn data_sources(&self) -> Vec<Arc<dyn DataSource>> {
        vec![Arc::new(Stamped)]
    }
    fn list_resources(&self) -> Vec<Arc<dyn ListResource>> {
        vec![Arc::new(PlainList)]
    }
    fn actions(&self) -> Vec<Arc<dyn Action>> {
        vec![Arc::new(Act)]
    }
}

fn service() -> ProviderService {
    ProviderService::new(Arc::new(Strict))
}

fn state(name: &str) -> Option<pb::DynamicValue> {
    let ty = Type::object([("name", Type::String), ("secret", Type::String)]);
    let value = Value::object([("name", Value::from(name)), ("secret", Value::Null)]);
    Some(encode_dynamic_value(&value, &ty).unwrap())
}

fn identity(id: &str) -> Option<pb::ResourceIdentityData> {
    let ty = Type::object([("id", Type::String)]);
    let value = Value::object([("id", Value::from(id))]);
    Some(pb::ResourceIdentityData {
        identity_data: Some(encode_dynamic_value(&value, &ty).unwrap()),
    })
}

async fn read(type_name: &str, name: &str) -> pb::read_resource::Response {
    let request = pb::read_resource::Request {
        type_name: type_name.into(),
        current_state: state(name),
        ..Default::default()
    };
    service()
        .read_resource(Request::new(request))
        .await
        .unwrap()
        .into_inner()
}

fn summaries(diagnostics: &[pb::Diagnostic]) -> Vec<&str> {
    diagnostics.iter().map(|d| d.summary.as_str()).collect()
}

#[tokio::test]
async fn a_read_answers_with_the_identity_of_its_state_and_refuses_unknowns() {
    let known = read("t_thing", "a").await;
    assert!(known.diagnostics.is_empty());
    let data = known.new_identity.unwrap().identity_data.unwrap();
    let ty = Type::object([("id", Type::String)]);
    assert_eq!(
        decode_dynamic_value(&data, &ty)
            .unwrap()
            .get_attr("id")
            .as_str(),
        Some("a")
    );
    let unknown = read("t_thing", "unknown").await;
    assert_eq!(
        summaries(&unknown.diagnostics),
        ["Provider produced invalid identity"]
    );
    assert!(unknown.new_identity.is_none());
    let none = read("t_thing", "none").await;
    assert!(none.diagnostics.is_empty() && none.new_identity.is_none());
}

#[tokio::test]
async fn a_resource_without_identity_schema_never_sends_or_takes_one() {
    let plain = read("t_plain", "a").await;
    assert!(plain.diagnostics.is_empty() && plain.new_identity.is_none());
    let explicit = read("t_plain", "explicit").await;
    assert_eq!(
        summaries(&explicit.diagnostics),
        ["Provider produced invalid identity"]
    );
    assert!(explicit.new_identity.is_none());
    let request = pb::read_resource::Request {
        type_name: "t_plain".into(),
        current_state: state("a"),
        current_identity: identity("a"),
        ..Default::default()
    };
    let answer = service()
        .read_resource(Request::new(request))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        summaries(&answer.diagnostics),
        ["Invalid current identity received from Terraform"]
    );
}

#[tokio::test]
async fn a_create_plan_may_carry_an_unknown_identity() {
    let request = pb::plan_resource_change::Request {
        type_name: "t_thing".into(),
        proposed_new_state: state("unknown"),
        config: state("unknown"),
        ..Default::default()
    };
    let plan = service()
        .plan_resource_change(Request::new(request))
        .await
        .unwrap();
    let plan = plan.into_inner();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    assert!(plan.planned_identity.is_some());
}

#[tokio::test]
async fn a_delete_answers_without_identity() {
    let request = pb::apply_resource_change::Request {
        type_name: "t_thing".into(),
        prior_state: state("a"),
        planned_identity: identity("a"),
        ..Default::default()
    };
    let applied = service()
        .apply_resource_change(Request::new(request))
        .await
        .unwrap();
    let applied = applied.into_inner();
    assert!(applied.diagnostics.is_empty() && applied.new_identity.is_none());
}

#[tokio::test]
async fn an_import_by_identity_must_give_each_object_an_identity() {
    let import = |id| pb::import_resource_state::Request {
        type_name: "t_thing".into(),
        identity: identity(id),
        ..Default::default()
    };
    let imported = service()
        .import_resource_state(Request::new(import("a")))
        .await
        .unwrap();
    let imported = imported.into_inner();
    assert!(imported.diagnostics.is_empty());
    assert!(imported.imported_resources[0].identity.is_some());
    let nameless = service()
        .import_resource_state(Request::new(import("none")))
        .await
        .unwrap();
    let nameless = nameless.into_inner();
    assert_eq!(
        summaries(&nameless.diagnostics),
        ["Provider produced invalid identity"]
    );
}

#[tokio::test]
async fn identity_schemas_terraform_refuses_are_reported() {
    let request = Request::new(pb::get_resource_identity_schemas::Request {});
    let answer = service()
        .get_resource_identity_schemas(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.identity_schemas.len(), 2);
    assert!(!answer.identity_schemas.contains_key("t_plain"));
    let [error] = &answer.diagnostics[..] else {
        panic!("{answer:?}")
    };
    assert!(
        error.detail.contains("t_map") && error.detail.contains("a map"),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_upgrade_to_a_null_identity_is_refused() {
    let request = pb::upgrade_resource_identity::Request {
        type_name: "t_thing".into(),
        version: 0,
        raw_identity: Some(pb::RawState {
            json: b"{}".to_vec(),
            flatmap: Default::default(),
        }),
    };
    let answer = service()
        .upgrade_resource_identity(Request::new(request))
        .await
        .unwrap();
    let answer = answer.into_inner();
    assert!(answer.upgraded_identity.is_none());
    assert_eq!(
        summaries(&answer.diagnostics),
        ["Provider produced invalid identity"]
    );
}

#[tokio::test]
async fn a_list_of_a_type_without_identity_is_one_error_event() {
    use tokio_stream::StreamExt as _;
    let request = pb::list_resource::Request {
        type_name: "t_plain".into(),
        limit: 10,
        ..Default::default()
    };
    let stream = service()
        .list_resource(Request::new(request))
        .await
        .unwrap()
        .into_inner();
    let events: Vec<_> = stream.collect().await;
    let [Ok(event)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(
        summaries(&event.diagnostic),
        ["List resource without identity"]
    );
}

#[tokio::test]
async fn an_invocation_of_unknown_values_completes_with_an_error() {
    use tokio_stream::StreamExt as _;
    let ty = Type::object([("n", Type::Number)]);
    let config = Value::object([("n", Value::Unknown)]);
    let request = pb::invoke_action::Request {
        action_type: "t_act".into(),
        config: Some(encode_dynamic_value(&config, &ty).unwrap()),
        ..Default::default()
    };
    let stream = service()
        .invoke_action(Request::new(request))
        .await
        .unwrap()
        .into_inner();
    let events: Vec<_> = stream.collect().await;
    let [
        Ok(pb::invoke_action::Event {
            r#type: Some(completed),
        }),
    ] = &events[..]
    else {
        panic!("{events:?}")
    };
    let pb::invoke_action::event::Type::Completed(completed) = completed else {
        panic!("{completed:?}")
    };
    assert_eq!(
        summaries(&completed.diagnostics),
        ["Invalid configuration received from Terraform"]
    );
}

async fn move_from_old(target: &str, old: &str) -> pb::move_resource_state::Response {
    let request = pb::move_resource_state::Request {
        source_type_name: "t_old".into(),
        source_state: Some(pb::RawState {
            json: old.as_bytes().to_vec(),
            flatmap: Default::default(),
        }),
        source_private: b"p".to_vec(),
        target_type_name: target.into(),
        ..Default::default()
    };
    service()
        .move_resource_state(Request::new(request))
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn a_move_across_types_gets_the_identity_of_its_new_state() {
    let capabilities = service()
        .get_metadata(Request::new(pb::get_metadata::Request {}))
        .await
        .unwrap()
        .into_inner()
        .server_capabilities
        .unwrap();
    assert!(capabilities.move_resource_state);
    let moved = move_from_old("t_thing", r#"{"title":"a"}"#).await;
    assert!(moved.diagnostics.is_empty(), "{:?}", moved.diagnostics);
    assert_eq!(moved.target_private, b"p");
    assert!(moved.target_identity.is_some());
    let leaked = move_from_old("t_thing", r#"{"title":"a","keep_secret":"s"}"#).await;
    assert_eq!(
        summaries(&leaked.diagnostics),
        ["Provider returned invalid value"]
    );
}

/// A configuration that sets a read-only attribute is refused at validate, on the attribute,
/// for a resource and a data source alike, and their own checks still run.
#[tokio::test]
async fn a_read_only_attribute_in_a_configuration_is_refused_at_validate() {
    let ty = Stamped::schema().value_type();
    let config = |stamp: Value| {
        let value = Value::object([("name", Value::from("a")), ("stamp", stamp)]);
        Some(encode_dynamic_value(&value, &ty).unwrap())
    };
    let read_only = crate::read_only::SUMMARY;
    for stamp in [Value::from("x"), Value::Unknown, Value::Null] {
        let refused = !stamp.is_null();
        let resource = pb::validate_resource_config::Request {
            type_name: "t_stamped".into(),
            config: config(stamp.clone()),
            ..Default::default()
        };
        let resource = service()
            .validate_resource_config(Request::new(resource))
            .await
            .unwrap()
            .into_inner()
            .diagnostics;
        let data = pb::validate_data_resource_config::Request {
            type_name: "t_stamped".into(),
            config: config(stamp),
        };
        let data = service()
            .validate_data_resource_config(Request::new(data))
            .await
            .unwrap()
            .into_inner()
            .diagnostics;
        for diagnostics in [resource, data] {
            let expected: &[&str] = if refused {
                &[read_only, "checked by t_stamped"]
            } else {
                &["checked by t_stamped"]
            };
            assert_eq!(summaries(&diagnostics), expected);
            if refused {
                let path = diagnostics[0].attribute.as_ref().unwrap();
                assert_eq!(
                    crate::diag::AttributePath::from_proto(path).steps().len(),
                    1
                );
            }
        }
    }
}
