//! The contract harness refuses what Terraform refuses: a rogue provider, served in-process
//! straight from the generated gRPC service (so none of tfplugin's own checks stand in the
//! way), breaks one rule per test, and the harness must name the Terraform check it breaks.

use std::sync::Arc;

use tfplugin::proto::tfplugin6 as pb;
use tfplugin::proto::tfplugin6::provider_server::{Provider, ProviderServer};
use tfplugin::testing::{Client, MoveChange, PlanChange, Violation};
use tfplugin::{Type, Value, encode_dynamic_value};
use tokio::net::UnixListener;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

/// The rule the rogue breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rogue {
    Behaves,
    UnknownIdentity,
    IdentityWithoutSchema,
    ImportsWithoutIdentity,
    ImportsTwo,
    ImportsWriteOnlyValue,
    ListsWithoutIdentity,
    WarnsThenListsWithoutIdentity,
    ListsPastTheLimit,
    ProgressAfterCompletion,
    EmptyEvent,
    NoCompletion,
    BothImportFlags,
    MapInIdentity,
    UnknownGeneratedConfig,
    MovesWriteOnlyValue,
}

fn thing_type() -> Type {
    Type::object([("name", Type::String), ("secret", Type::String)])
}

fn identity_type() -> Type {
    Type::object([("id", Type::String)])
}

fn dynamic(value: &Value, ty: &Type) -> Option<pb::DynamicValue> {
    Some(encode_dynamic_value(value, ty).unwrap())
}

fn identity(id: Value) -> Option<pb::ResourceIdentityData> {
    Some(pb::ResourceIdentityData {
        identity_data: dynamic(&Value::object([("id", id)]), &identity_type()),
    })
}

fn attribute(name: &str, ty: &str, flags: fn(&mut pb::schema::Attribute)) -> pb::schema::Attribute {
    let mut attribute = pb::schema::Attribute {
        name: name.into(),
        r#type: ty.as_bytes().to_vec(),
        ..Default::default()
    };
    flags(&mut attribute);
    attribute
}

fn schema(attributes: Vec<pb::schema::Attribute>) -> pb::Schema {
    pb::Schema {
        version: 0,
        block: Some(pb::schema::Block {
            attributes,
            ..Default::default()
        }),
    }
}

#[tonic::async_trait]
impl Provider for Rogue {
    async fn get_provider_schema(
        &self,
        _: Request<pb::get_provider_schema::Request>,
    ) -> Result<Response<pb::get_provider_schema::Response>, Status> {
        let thing = schema(vec![
            attribute("name", r#""string""#, |a| a.required = true),
            attribute("secret", r#""string""#, |a| {
                (a.optional, a.write_only) = (true, true)
            }),
        ]);
        let action = pb::ActionSchema {
            schema: Some(schema(Vec::new())),
        };
        Ok(Response::new(pb::get_provider_schema::Response {
            provider: Some(schema(Vec::new())),
            resource_schemas: [
                ("rogue_thing".into(), thing.clone()),
                ("rogue_plain".into(), thing),
            ]
            .into(),
            list_resource_schemas: [
                ("rogue_thing".into(), schema(Vec::new())),
                ("rogue_plain".into(), schema(Vec::new())),
            ]
            .into(),
            action_schemas: [("rogue_act".into(), action)].into(),
            server_capabilities: Some(pb::ServerCapabilities {
                move_resource_state: true,
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn get_resource_identity_schemas(
        &self,
        _: Request<pb::get_resource_identity_schemas::Request>,
    ) -> Result<Response<pb::get_resource_identity_schemas::Response>, Status> {
        let mut id = pb::resource_identity_schema::IdentityAttribute {
            name: "id".into(),
            r#type: br#""string""#.to_vec(),
            required_for_import: true,
            ..Default::default()
        };
        match self {
            Rogue::BothImportFlags => id.optional_for_import = true,
            Rogue::MapInIdentity => id.r#type = br#"["map","string"]"#.to_vec(),
            _ => {}
        }
        let schema = pb::ResourceIdentitySchema {
            version: 0,
            identity_attributes: vec![id],
        };
        Ok(Response::new(pb::get_resource_identity_schemas::Response {
            identity_schemas: [("rogue_thing".into(), schema)].into(),
            diagnostics: Vec::new(),
        }))
    }

    async fn read_resource(
        &self,
        request: Request<pb::read_resource::Request>,
    ) -> Result<Response<pb::read_resource::Response>, Status> {
        let request = request.into_inner();
        let new_identity = match self {
            Rogue::UnknownIdentity => identity(Value::Unknown),
            Rogue::IdentityWithoutSchema => identity(Value::from("x")),
            _ => identity(Value::from("x")).filter(|_| request.type_name == "rogue_thing"),
        };
        Ok(Response::new(pb::read_resource::Response {
            new_state: request.current_state,
            new_identity,
            ..Default::default()
        }))
    }

    async fn plan_resource_change(
        &self,
        request: Request<pb::plan_resource_change::Request>,
    ) -> Result<Response<pb::plan_resource_change::Response>, Status> {
        let request = request.into_inner();
        let id = if *self == Rogue::UnknownIdentity {
            Value::Unknown
        } else {
            Value::from("x")
        };
        Ok(Response::new(pb::plan_resource_change::Response {
            planned_state: request.proposed_new_state,
            planned_identity: identity(id),
            ..Default::default()
        }))
    }

    async fn import_resource_state(
        &self,
        _: Request<pb::import_resource_state::Request>,
    ) -> Result<Response<pb::import_resource_state::Response>, Status> {
        let secret = match self {
            Rogue::ImportsWriteOnlyValue => Value::from("leaked"),
            _ => Value::Null,
        };
        let state = Value::object([("name", Value::from("x")), ("secret", secret)]);
        let object = pb::import_resource_state::ImportedResource {
            type_name: "rogue_thing".into(),
            state: dynamic(&state, &thing_type()),
            private: Vec::new(),
            identity: identity(Value::from("x")).filter(|_| *self != Rogue::ImportsWithoutIdentity),
        };
        let count = if *self == Rogue::ImportsTwo { 2 } else { 1 };
        Ok(Response::new(pb::import_resource_state::Response {
            imported_resources: vec![object; count],
            ..Default::default()
        }))
    }

    async fn move_resource_state(
        &self,
        _: Request<pb::move_resource_state::Request>,
    ) -> Result<Response<pb::move_resource_state::Response>, Status> {
        let (secret, id) = match self {
            Rogue::MovesWriteOnlyValue => (Value::from("leaked"), Value::from("x")),
            Rogue::UnknownIdentity => (Value::Null, Value::Unknown),
            _ => (Value::Null, Value::from("x")),
        };
        let state = Value::object([("name", Value::from("x")), ("secret", secret)]);
        Ok(Response::new(pb::move_resource_state::Response {
            target_state: dynamic(&state, &thing_type()),
            target_identity: identity(id),
            ..Default::default()
        }))
    }

    async fn generate_resource_config(
        &self,
        request: Request<pb::generate_resource_config::Request>,
    ) -> Result<Response<pb::generate_resource_config::Response>, Status> {
        let config = match self {
            Rogue::UnknownGeneratedConfig => {
                dynamic(&Value::object([("name", Value::Unknown)]), &thing_type())
            }
            _ => request.into_inner().state,
        };
        Ok(Response::new(pb::generate_resource_config::Response {
            config,
            diagnostics: Vec::new(),
        }))
    }

    async fn list_resource(
        &self,
        _: Request<pb::list_resource::Request>,
    ) -> Result<Response<BoxStream<pb::list_resource::Event>>, Status> {
        let item = |n: usize| pb::list_resource::Event {
            identity: identity(Value::from(n.to_string())),
            display_name: format!("thing-{n}"),
            ..Default::default()
        };
        let nameless = pb::list_resource::Event {
            display_name: "nameless".into(),
            ..Default::default()
        };
        let warning = pb::list_resource::Event {
            diagnostic: vec![pb::Diagnostic {
                severity: pb::diagnostic::Severity::Warning as i32,
                summary: "careful".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let events = match self {
            Rogue::ListsWithoutIdentity => vec![item(0), nameless],
            Rogue::WarnsThenListsWithoutIdentity => vec![warning, nameless, item(1)],
            Rogue::ListsPastTheLimit => (0..5).map(item).collect(),
            _ => vec![item(0)],
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(
            events.into_iter().map(Ok),
        ))))
    }

    async fn invoke_action(
        &self,
        _: Request<pb::invoke_action::Request>,
    ) -> Result<Response<BoxStream<pb::invoke_action::Event>>, Status> {
        use pb::invoke_action::event::{Completed, Progress, Type as Event};
        let progress = pb::invoke_action::Event {
            r#type: Some(Event::Progress(Progress {
                message: "working".into(),
            })),
        };
        let completed = pb::invoke_action::Event {
            r#type: Some(Event::Completed(Completed {
                diagnostics: Vec::new(),
            })),
        };
        let events = match self {
            Rogue::ProgressAfterCompletion => vec![completed, progress],
            Rogue::EmptyEvent => vec![progress, pb::invoke_action::Event { r#type: None }],
            Rogue::NoCompletion => vec![progress],
            _ => vec![progress, completed],
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(
            events.into_iter().map(Ok),
        ))))
    }
}

/// A client of a rogue served in-process on a unix socket.
async fn serve(rogue: Rogue) -> (Client, Arc<tempfile::TempDir>) {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let path = dir.path().join("rogue.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ProviderServer::new(rogue))
            .serve_with_incoming(incoming),
    );
    let channel = tfplugin::testing::channel("unix", path.to_str().unwrap())
        .await
        .unwrap();
    (Client::connect(channel), dir)
}

fn thing() -> Value {
    Value::object([("name", Value::from("x")), ("secret", Value::Null)])
}

fn refused<T: std::fmt::Debug>(answer: Result<T, Violation>, check: &str, detail: &str) {
    let violation = answer.expect_err("the harness accepted what Terraform refuses");
    assert!(violation.check.contains(check), "{violation}");
    assert!(violation.detail.contains(detail), "{violation}");
}

#[tokio::test]
async fn identities_must_be_known_where_terraform_stores_them() {
    let (mut client, _dir) = serve(Rogue::UnknownIdentity).await;
    let read = client
        .read_resource("rogue_thing", &thing(), &[], &Value::Null)
        .await;
    refused(read, "validateIdentityKnown", "unknown values");
    let update = PlanChange {
        type_name: "rogue_thing".into(),
        prior_state: thing(),
        proposed_new_state: thing(),
        config: thing(),
        ..PlanChange::default()
    };
    refused(
        client.plan_resource_change(&update).await,
        "validateIdentityKnown",
        "update",
    );
    // A create may plan an identity it does not know yet.
    let create = PlanChange {
        prior_state: Value::Null,
        ..update
    };
    let planned = client.plan_resource_change(&create).await.unwrap();
    assert!(!planned.identity.get_attr("id").is_known());
}

#[tokio::test]
async fn an_identity_needs_an_identity_schema() {
    let (mut client, _dir) = serve(Rogue::IdentityWithoutSchema).await;
    let read = client
        .read_resource("rogue_plain", &thing(), &[], &Value::Null)
        .await;
    refused(
        read,
        "grpc_provider.go ReadResource",
        "without identity schema",
    );
    let listed = client
        .list_resource("rogue_plain", &Value::Null, false, 10)
        .await;
    refused(
        listed,
        "grpc_provider.go ListResource",
        "Identity schema not found",
    );
}

#[tokio::test]
async fn imports_return_one_object_with_identity_and_no_write_only_value() {
    let by_identity = Value::object([("id", Value::from("x"))]);
    let (mut client, _dir) = serve(Rogue::ImportsWithoutIdentity).await;
    let imported = client
        .import_resource_state_by_identity("rogue_thing", &by_identity)
        .await;
    refused(imported, "importState", "no identity");
    let (mut client, _dir) = serve(Rogue::ImportsTwo).await;
    refused(
        client.import_resource_state("rogue_thing", "x").await,
        "importState",
        "2 objects",
    );
    let (mut client, _dir) = serve(Rogue::ImportsWriteOnlyValue).await;
    let imported = client.import_resource_state("rogue_thing", "x").await;
    refused(imported, "ValidateWriteOnlyAttributes", "secret");
    let (mut client, _dir) = serve(Rogue::Behaves).await;
    let imported = client
        .import_resource_state_by_identity("rogue_thing", &by_identity)
        .await;
    assert_eq!(imported.unwrap().identity, by_identity);
}

#[tokio::test]
async fn list_events_need_identity_unless_a_warning_came_first() {
    let (mut client, _dir) = serve(Rogue::ListsWithoutIdentity).await;
    let listed = client
        .list_resource("rogue_thing", &Value::Null, false, 10)
        .await;
    refused(listed, "ListResource", "missing identity data");
    let (mut client, _dir) = serve(Rogue::WarnsThenListsWithoutIdentity).await;
    let listed = client
        .list_resource("rogue_thing", &Value::Null, false, 10)
        .await
        .unwrap();
    assert_eq!(listed.results.len(), 1);
    assert_eq!(listed.results[0].display_name, "thing-1");
}

#[tokio::test]
async fn terraform_stops_reading_at_the_limit() {
    let (mut client, _dir) = serve(Rogue::ListsPastTheLimit).await;
    let listed = client
        .list_resource("rogue_thing", &Value::Null, false, 2)
        .await
        .unwrap();
    assert_eq!(listed.results.len(), 2);
    assert!(!listed.ended_by_provider);
}

#[tokio::test]
async fn an_invocation_is_progress_then_one_completion() {
    let config = Value::Object(Default::default());
    for (rogue, detail) in [
        (Rogue::ProgressAfterCompletion, "after the completion"),
        (Rogue::EmptyEvent, "neither progress nor completion"),
        (Rogue::NoCompletion, "without a completion"),
    ] {
        let (mut client, _dir) = serve(rogue).await;
        refused(
            client.invoke_action("rogue_act", &config).await,
            "InvokeAction",
            detail,
        );
    }
    let (mut client, _dir) = serve(Rogue::Behaves).await;
    let invoked = client.invoke_action("rogue_act", &config).await.unwrap();
    assert_eq!(invoked.progress, ["working"]);
}

#[tokio::test]
async fn identity_schemas_terraform_refuses_fail_every_command() {
    for (rogue, detail) in [
        (Rogue::BothImportFlags, "exactly one of"),
        (Rogue::MapInIdentity, "a map, set or object"),
    ] {
        let (mut client, _dir) = serve(rogue).await;
        refused(
            client.schemas().await,
            "loadschemas/plugins.go ProviderSchema",
            detail,
        );
    }
}

#[tokio::test]
async fn generated_configuration_must_be_known() {
    let (mut client, _dir) = serve(Rogue::UnknownGeneratedConfig).await;
    let generated = client
        .generate_resource_config("rogue_thing", &thing())
        .await;
    refused(
        generated,
        "writeConfigAttributesFromExisting",
        "unknown values",
    );
}

#[tokio::test]
async fn a_move_must_give_a_known_identity_and_no_write_only_value() {
    let change = MoveChange {
        source_type_name: "rogue_old".into(),
        source_state_json: br#"{"title":"x"}"#.to_vec(),
        target_type_name: "rogue_thing".into(),
        ..MoveChange::default()
    };
    let (mut client, _dir) = serve(Rogue::MovesWriteOnlyValue).await;
    let moved = client.move_resource_state(&change).await;
    refused(moved, "ValidateWriteOnlyAttributes", "secret");
    let (mut client, _dir) = serve(Rogue::UnknownIdentity).await;
    let moved = client.move_resource_state(&change).await;
    refused(
        moved,
        "cross_provider_move.go applyCrossTypeMove",
        "unknown values",
    );
    let (mut client, _dir) = serve(Rogue::Behaves).await;
    let moved = client.move_resource_state(&change).await.unwrap();
    assert_eq!(
        moved.target_identity,
        Value::object([("id", Value::from("x"))])
    );
}
