//! What a client of protocol 6.8 (Terraform 1.11) sees: the answers to one Terraform-1.11-shaped
//! session, compared with the answers the server gave before protocol 6.9/6.10 support was added
//! (recorded at commit 0afa8e7 in `golden/terraform_1_11_session.txt`).
//!
//! A 6.8 client never calls the new RPCs and never sets the new request fields. Each answer is
//! decoded, the fields that minors 6.9 and 6.10 added are checked and cleared, and the rest must
//! equal the recorded answer: prost encodes nothing for an absent or default field, so equal
//! messages are equal bytes on the wire, up to the order of map entries.
//!
//! Re-record (only on purpose): `TFPLUGIN_RECORD_GOLDEN=1 cargo test -p tfplugin -- old_clients`.

use std::path::PathBuf;

use prost::Message as _;
use tfplugin::proto::tfplugin6 as pb;
use tfplugin::proto::tfplugin6::provider_client::ProviderClient;
use tfplugin::{Type, Value, encode_msgpack};
use tonic::transport::Channel;

use crate::common::Plugin;

type Grpc = ProviderClient<Channel>;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/terraform_1_11_session.txt")
}

fn item_type() -> Type {
    Type::object([
        ("name", Type::String),
        ("value", Type::String),
        ("secret", Type::String),
        ("wait_for_stop", Type::Bool),
        ("id", Type::String),
    ])
}

fn dynamic(value: &Value, ty: &Type) -> Option<pb::DynamicValue> {
    Some(pb::DynamicValue {
        msgpack: encode_msgpack(value, ty).unwrap(),
        json: Vec::new(),
    })
}

/// What Terraform 1.11.4 announces on the requests that carry capabilities.
fn terraform_1_11() -> Option<pb::ClientCapabilities> {
    Some(pb::ClientCapabilities {
        deferral_allowed: false,
        write_only_attributes_allowed: true,
    })
}

/// One answer of the session, by RPC name, as the bytes of its message.
struct Answer {
    rpc: &'static str,
    bytes: Vec<u8>,
}

fn answer(rpc: &'static str, message: &impl prost::Message) -> Answer {
    Answer {
        rpc,
        bytes: message.encode_to_vec(),
    }
}

/// The RPCs `terraform plan`, `apply`, `import` and `destroy` of Terraform 1.11 send, in order.
async fn session(client: &mut Grpc) -> Vec<Answer> {
    let mut answers = schema_and_configuration(client).await;
    answers.extend(lifecycle(client).await);
    answers.extend(upgrade_import_and_data(client).await);
    answers
}

async fn schema_and_configuration(client: &mut Grpc) -> Vec<Answer> {
    let metadata = client.get_metadata(pb::get_metadata::Request {}).await;
    let schema = client
        .get_provider_schema(pb::get_provider_schema::Request {})
        .await;
    let provider_type = Type::object([("prefix", Type::String)]);
    let config = Value::object([("prefix", Value::Null)]);
    let validated = client
        .validate_provider_config(pb::validate_provider_config::Request {
            config: dynamic(&config, &provider_type),
        })
        .await;
    let configured = client
        .configure_provider(pb::configure_provider::Request {
            terraform_version: "1.11.4".into(),
            config: dynamic(&config, &provider_type),
            client_capabilities: terraform_1_11(),
        })
        .await;
    vec![
        answer("GetMetadata", &metadata.unwrap().into_inner()),
        answer("GetProviderSchema", &schema.unwrap().into_inner()),
        answer("ValidateProviderConfig", &validated.unwrap().into_inner()),
        answer("ConfigureProvider", &configured.unwrap().into_inner()),
    ]
}

async fn lifecycle(client: &mut Grpc) -> Vec<Answer> {
    let ty = item_type();
    let config = Value::object([("name", Value::from("a")), ("value", Value::from("v"))]);
    let validated = client
        .validate_resource_config(pb::validate_resource_config::Request {
            type_name: "echo_item".into(),
            config: dynamic(&config, &ty),
            client_capabilities: terraform_1_11(),
        })
        .await
        .unwrap()
        .into_inner();
    let planned = client
        .plan_resource_change(pb::plan_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: dynamic(&Value::Null, &ty),
            proposed_new_state: dynamic(&config, &ty),
            config: dynamic(&config, &ty),
            client_capabilities: terraform_1_11(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let applied = client
        .apply_resource_change(pb::apply_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: dynamic(&Value::Null, &ty),
            planned_state: planned.planned_state.clone(),
            config: dynamic(&config, &ty),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let read = client
        .read_resource(pb::read_resource::Request {
            type_name: "echo_item".into(),
            current_state: applied.new_state.clone(),
            private: applied.private.clone(),
            client_capabilities: terraform_1_11(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut answers = vec![
        answer("ValidateResourceConfig", &validated),
        answer("PlanResourceChange create", &planned),
        answer("ApplyResourceChange create", &applied),
        answer("ReadResource", &read),
    ];
    answers.extend(update_and_destroy(client, &read).await);
    answers
}

async fn update_and_destroy(client: &mut Grpc, read: &pb::read_resource::Response) -> Vec<Answer> {
    let ty = item_type();
    let config = Value::object([("name", Value::from("a")), ("value", Value::from("w"))]);
    let updated = client
        .plan_resource_change(pb::plan_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: read.new_state.clone(),
            proposed_new_state: dynamic(&config, &ty),
            config: dynamic(&config, &ty),
            prior_private: read.private.clone(),
            client_capabilities: terraform_1_11(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let destroy_plan = client
        .plan_resource_change(pb::plan_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: read.new_state.clone(),
            proposed_new_state: dynamic(&Value::Null, &ty),
            config: dynamic(&Value::Null, &ty),
            prior_private: read.private.clone(),
            client_capabilities: terraform_1_11(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let destroyed = client
        .apply_resource_change(pb::apply_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: read.new_state.clone(),
            planned_state: dynamic(&Value::Null, &ty),
            config: dynamic(&Value::Null, &ty),
            planned_private: destroy_plan.planned_private.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    vec![
        answer("PlanResourceChange update", &updated),
        answer("PlanResourceChange destroy", &destroy_plan),
        answer("ApplyResourceChange delete", &destroyed),
    ]
}

async fn upgrade_import_and_data(client: &mut Grpc) -> Vec<Answer> {
    let upgraded = client
        .upgrade_resource_state(pb::upgrade_resource_state::Request {
            type_name: "echo_item".into(),
            version: 0,
            raw_state: Some(pb::RawState {
                json: br#"{"name":"a","value":"v","id":"item-a"}"#.to_vec(),
                flatmap: Default::default(),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let imported = client
        .import_resource_state(pb::import_resource_state::Request {
            type_name: "echo_item".into(),
            id: "item-z".into(),
            client_capabilities: terraform_1_11(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let length_type = Type::object([("text", Type::String), ("length", Type::Number)]);
    let data_config = Value::object([("text", Value::from("hello"))]);
    let data_validated = client
        .validate_data_resource_config(pb::validate_data_resource_config::Request {
            type_name: "echo_length".into(),
            config: dynamic(&data_config, &length_type),
        })
        .await
        .unwrap()
        .into_inner();
    let data_read = client
        .read_data_source(pb::read_data_source::Request {
            type_name: "echo_length".into(),
            config: dynamic(&data_config, &length_type),
            client_capabilities: terraform_1_11(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    vec![
        answer("UpgradeResourceState", &upgraded),
        answer("ImportResourceState", &imported),
        answer("ValidateDataResourceConfig", &data_validated),
        answer("ReadDataSource", &data_read),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn read_golden() -> Vec<(String, Vec<u8>)> {
    std::fs::read_to_string(golden_path())
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (rpc, bytes) = line.rsplit_once(' ').unwrap();
            (rpc.to_owned(), unhex(bytes))
        })
        .collect()
}

fn write_golden(answers: &[Answer]) {
    let mut text = String::from(
        "# Answers of the tfplugin-echo server to a Terraform-1.11-shaped session \
         (tests/old_clients), one per line: RPC, then the message's bytes in hex.\n",
    );
    for answer in answers {
        text.push_str(&format!("{} {}\n", answer.rpc, hex(&answer.bytes)));
    }
    std::fs::write(golden_path(), text).unwrap();
}

#[tokio::test]
async fn a_terraform_1_11_session_gets_the_answers_it_got_before_6_9() {
    let plugin = Plugin::start(None);
    let mut client = ProviderClient::new(plugin.channel(None).await.unwrap());
    let answers = session(&mut client).await;
    if std::env::var_os("TFPLUGIN_RECORD_GOLDEN").is_some() {
        write_golden(&answers);
    }
    let golden = read_golden();
    let rpcs: Vec<&str> = answers.iter().map(|a| a.rpc).collect();
    let golden_rpcs: Vec<&str> = golden.iter().map(|(rpc, _)| rpc.as_str()).collect();
    assert_eq!(rpcs, golden_rpcs);
    for (answer, (_, recorded)) in answers.iter().zip(&golden) {
        assert_same_answer(answer, recorded);
    }
}

/// Clears the fields protocol minors 6.9 and 6.10 added to an answer, naming those that were
/// set.
trait NewFields {
    fn clear_new_fields(&mut self) -> Vec<&'static str>;
}

fn take<T: Default + PartialEq>(field: &mut T, name: &'static str, set: &mut Vec<&'static str>) {
    if std::mem::take(field) != T::default() {
        set.push(name);
    }
}

fn take_capability(capabilities: &mut Option<pb::ServerCapabilities>, set: &mut Vec<&'static str>) {
    if let Some(capabilities) = capabilities {
        take(
            &mut capabilities.generate_resource_config,
            "generate_resource_config",
            set,
        );
    }
}

impl NewFields for pb::get_metadata::Response {
    fn clear_new_fields(&mut self) -> Vec<&'static str> {
        let mut set = Vec::new();
        take_capability(&mut self.server_capabilities, &mut set);
        take(&mut self.list_resources, "list_resources", &mut set);
        take(&mut self.actions, "actions", &mut set);
        set
    }
}

impl NewFields for pb::get_provider_schema::Response {
    fn clear_new_fields(&mut self) -> Vec<&'static str> {
        let mut set = Vec::new();
        take_capability(&mut self.server_capabilities, &mut set);
        take(
            &mut self.list_resource_schemas,
            "list_resource_schemas",
            &mut set,
        );
        take(&mut self.action_schemas, "action_schemas", &mut set);
        set
    }
}

impl NewFields for pb::plan_resource_change::Response {
    fn clear_new_fields(&mut self) -> Vec<&'static str> {
        let mut set = Vec::new();
        take(&mut self.planned_identity, "planned_identity", &mut set);
        set
    }
}

impl NewFields for pb::apply_resource_change::Response {
    fn clear_new_fields(&mut self) -> Vec<&'static str> {
        let mut set = Vec::new();
        take(&mut self.new_identity, "new_identity", &mut set);
        set
    }
}

impl NewFields for pb::read_resource::Response {
    fn clear_new_fields(&mut self) -> Vec<&'static str> {
        let mut set = Vec::new();
        take(&mut self.new_identity, "new_identity", &mut set);
        set
    }
}

impl NewFields for pb::import_resource_state::Response {
    fn clear_new_fields(&mut self) -> Vec<&'static str> {
        let mut set = Vec::new();
        for imported in &mut self.imported_resources {
            take(&mut imported.identity, "imported identity", &mut set);
        }
        set
    }
}

/// Answers that gained no field.
macro_rules! unchanged {
    ($($message:ty),*) => {
        $(impl NewFields for $message {
            fn clear_new_fields(&mut self) -> Vec<&'static str> {
                Vec::new()
            }
        })*
    };
}

unchanged!(
    pb::validate_provider_config::Response,
    pb::configure_provider::Response,
    pb::validate_resource_config::Response,
    pb::upgrade_resource_state::Response,
    pb::validate_data_resource_config::Response,
    pb::read_data_source::Response
);

/// The new fields the echo provider sets in each answer: its list resource, action and
/// generated configuration, and `echo_item`'s identity.
fn expected_new_fields(rpc: &str) -> Vec<&'static str> {
    match rpc {
        "GetMetadata" => vec!["generate_resource_config", "list_resources", "actions"],
        "GetProviderSchema" => vec![
            "generate_resource_config",
            "list_resource_schemas",
            "action_schemas",
        ],
        "PlanResourceChange create" | "PlanResourceChange update" => vec!["planned_identity"],
        "ApplyResourceChange create" | "ReadResource" => vec!["new_identity"],
        "ImportResourceState" => vec!["imported identity"],
        _ => Vec::new(),
    }
}

fn assert_same_answer(answer: &Answer, recorded: &[u8]) {
    macro_rules! same {
        ($message:ty) => {{
            let mut now = <$message>::decode(answer.bytes.as_slice()).unwrap();
            let before = <$message>::decode(recorded).unwrap();
            let new_fields = now.clear_new_fields();
            assert_eq!(
                new_fields,
                expected_new_fields(answer.rpc),
                "{}",
                answer.rpc
            );
            assert_eq!(
                now, before,
                "{} differs from the recorded answer",
                answer.rpc
            );
        }};
    }
    match answer.rpc {
        "GetMetadata" => same!(pb::get_metadata::Response),
        "GetProviderSchema" => same!(pb::get_provider_schema::Response),
        "ValidateProviderConfig" => same!(pb::validate_provider_config::Response),
        "ConfigureProvider" => same!(pb::configure_provider::Response),
        "ValidateResourceConfig" => same!(pb::validate_resource_config::Response),
        "PlanResourceChange create"
        | "PlanResourceChange update"
        | "PlanResourceChange destroy" => same!(pb::plan_resource_change::Response),
        "ApplyResourceChange create" | "ApplyResourceChange delete" => {
            same!(pb::apply_resource_change::Response)
        }
        "ReadResource" => same!(pb::read_resource::Response),
        "UpgradeResourceState" => same!(pb::upgrade_resource_state::Response),
        "ImportResourceState" => same!(pb::import_resource_state::Response),
        "ValidateDataResourceConfig" => same!(pb::validate_data_resource_config::Response),
        "ReadDataSource" => same!(pb::read_data_source::Response),
        other => panic!("no decoder for {other}"),
    }
}
