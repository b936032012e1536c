//! The plugin binary as Terraform sees it: handshake, AutoMTLS refusal,
//! the protocol over real gRPC, Shutdown, StopProvider, signals.

mod common;
mod contract;
mod harness_checks;
mod old_clients;
mod proto_numbers;

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{COOKIE, Plugin, plugin_binary, terraform_like_client_identity};
use tfplugin::proto::health::health_client::HealthClient;
use tfplugin::proto::plugin::grpc_controller_client::GrpcControllerClient;
use tfplugin::proto::tfplugin6 as pb;
use tfplugin::proto::tfplugin6::provider_client::ProviderClient;
use tfplugin::{Type, Value, decode_msgpack, encode_msgpack};

fn item_type() -> Type {
    Type::object([
        ("name", Type::String),
        ("value", Type::String),
        ("secret", Type::String),
        ("wait_for_stop", Type::Bool),
        ("id", Type::String),
    ])
}

fn dynamic(value: &Value) -> Option<pb::DynamicValue> {
    Some(pb::DynamicValue {
        msgpack: encode_msgpack(value, &item_type()).unwrap(),
        json: Vec::new(),
    })
}

fn undynamic(value: Option<pb::DynamicValue>) -> Value {
    decode_msgpack(&value.unwrap().msgpack, &item_type()).unwrap()
}

#[test]
fn without_the_cookie_it_explains_and_exits_1() {
    let output = Command::new(plugin_binary())
        .env_remove("TF_PLUGIN_MAGIC_COOKIE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty(), "stdout must stay empty");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("This binary is a plugin"), "{stderr}");
    assert!(stderr.contains("Terraform or OpenTofu"), "{stderr}");
}

#[test]
fn a_wrong_cookie_is_refused_too() {
    let output = Command::new(plugin_binary())
        .env("TF_PLUGIN_MAGIC_COOKIE", "nope")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
}

#[test]
fn handshake_line_names_a_private_unix_socket_and_our_certificate() {
    let client = terraform_like_client_identity();
    let plugin = Plugin::start(Some(&client.pem));
    let handshake = &plugin.handshake;
    assert_eq!(handshake.network, "unix");
    let socket = std::path::Path::new(&handshake.address);
    assert!(socket.starts_with(plugin.socket_dir.path()), "{socket:?}");
    let dir_mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    assert!(handshake.server_cert.is_some());
    assert!(handshake.line.ends_with('\n'));
}

#[test]
fn without_client_cert_the_line_has_no_certificate() {
    let plugin = Plugin::start(None);
    assert!(plugin.handshake.server_cert.is_none());
    assert!(plugin.handshake.line.ends_with("|grpc|\n"));
}

#[tokio::test]
async fn pinned_client_certificate_is_served() {
    let client = terraform_like_client_identity();
    let plugin = Plugin::start(Some(&client.pem));
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let channel = common::connect_with_versions(&plugin.handshake, Some(&client), versions)
            .await
            .unwrap();
        let metadata = ProviderClient::new(channel)
            .get_metadata(pb::get_metadata::Request {})
            .await
            .unwrap()
            .into_inner();
        let capabilities = metadata.server_capabilities.unwrap();
        assert!(capabilities.plan_destroy);
        assert!(capabilities.get_provider_schema_optional);
        assert_eq!(metadata.resources[0].type_name, "echo_item");
        assert_eq!(metadata.data_sources[0].type_name, "echo_length");
    }
}

#[tokio::test]
async fn a_client_without_certificate_is_refused() {
    let client = terraform_like_client_identity();
    let plugin = Plugin::start(Some(&client.pem));
    let refused = match plugin.channel(None).await {
        Err(_) => true,
        Ok(channel) => ProviderClient::new(channel)
            .get_metadata(pb::get_metadata::Request {})
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
}

#[tokio::test]
async fn a_client_with_another_certificate_is_refused() {
    let expected = terraform_like_client_identity();
    let intruder = terraform_like_client_identity();
    let plugin = Plugin::start(Some(&expected.pem));
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let refused =
            match common::connect_with_versions(&plugin.handshake, Some(&intruder), versions).await
            {
                Err(_) => true,
                Ok(channel) => ProviderClient::new(channel)
                    .get_metadata(pb::get_metadata::Request {})
                    .await
                    .is_err(),
            };
        assert!(refused, "a client with another certificate was served");
    }
    // The plugin keeps serving the right client after refusing others.
    let channel = plugin.channel(Some(&expected)).await.unwrap();
    assert!(
        ProviderClient::new(channel)
            .get_metadata(pb::get_metadata::Request {})
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn plaintext_without_client_cert_serves_the_schema() {
    let plugin = Plugin::start(None);
    let channel = plugin.channel(None).await.unwrap();
    let schema = ProviderClient::new(channel)
        .get_provider_schema(pb::get_provider_schema::Request {})
        .await
        .unwrap()
        .into_inner();
    assert!(schema.diagnostics.is_empty());
    let item = &schema.resource_schemas["echo_item"];
    let block = item.block.as_ref().unwrap();
    let value = block.attributes.iter().find(|a| a.name == "value").unwrap();
    assert!(value.sensitive && value.optional);
    assert!(schema.data_source_schemas.contains_key("echo_length"));
    assert!(schema.provider.is_some());
    assert!(schema.server_capabilities.unwrap().plan_destroy);
}

#[tokio::test]
async fn unimplemented_rpcs_answer_unimplemented() {
    let plugin = Plugin::start(None);
    let mut client = ProviderClient::new(plugin.channel(None).await.unwrap());
    let status = client
        .call_function(pb::call_function::Request {
            name: "f".into(),
            arguments: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    let status = client
        .open_ephemeral_resource(pb::open_ephemeral_resource::Request::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    // The server is still healthy afterwards.
    let health = HealthClient::new(plugin.channel(None).await.unwrap())
        .check(tfplugin::proto::health::HealthCheckRequest {
            service: "plugin".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1);
}

#[tokio::test]
async fn shutdown_exits_promptly_and_removes_the_socket() {
    let client = terraform_like_client_identity();
    let mut plugin = Plugin::start(Some(&client.pem));
    let socket = std::path::PathBuf::from(&plugin.handshake.address);
    let channel = plugin.channel(Some(&client)).await.unwrap();
    GrpcControllerClient::new(channel.clone())
        .shutdown(tfplugin::proto::plugin::Empty {})
        .await
        .unwrap();
    drop(channel);
    let started = std::time::Instant::now();
    // go-plugin kills a plugin that is still alive 2 s after Shutdown.
    let status = plugin
        .wait_exit(Duration::from_secs(2))
        .expect("plugin still running 2 s after Shutdown");
    eprintln!("exited {:?} after Shutdown", started.elapsed());
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "socket left behind");
    assert_eq!(
        plugin.rest_of_stdout(),
        "",
        "stdout after the handshake line"
    );
}

#[tokio::test]
async fn sigint_is_ignored() {
    let plugin = Plugin::start(None);
    plugin.signal("INT");
    let mut client = ProviderClient::new(plugin.channel(None).await.unwrap());
    // Still serving after the signal was delivered and handled.
    for _ in 0..3 {
        client
            .get_metadata(pb::get_metadata::Request {})
            .await
            .unwrap();
    }
    assert!(plugin_alive(&plugin), "the plugin died on SIGINT");
}

fn plugin_alive(plugin: &Plugin) -> bool {
    std::path::Path::new(&format!("/proc/{}", plugin.child.id())).exists()
}

#[tokio::test]
async fn stop_provider_cancels_an_apply_in_flight() {
    let plugin = Plugin::start(None);
    let channel = plugin.channel(None).await.unwrap();
    let planned = Value::object([
        ("name", Value::from("slow")),
        ("wait_for_stop", Value::from(true)),
        ("id", Value::Unknown),
    ]);
    let mut apply_client = ProviderClient::new(channel.clone());
    let apply = tokio::spawn(async move {
        apply_client
            .apply_resource_change(pb::apply_resource_change::Request {
                type_name: "echo_item".into(),
                prior_state: dynamic(&Value::Null),
                planned_state: dynamic(&planned),
                config: dynamic(&planned),
                ..Default::default()
            })
            .await
    });
    // StopProvider only affects calls already in flight, so repeat it until
    // the apply has started and returned (bounded by a deadline).
    let mut stop_client = ProviderClient::new(channel);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let response = loop {
        stop_client
            .stop_provider(pb::stop_provider::Request {})
            .await
            .unwrap();
        if apply.is_finished() {
            break apply.await.unwrap().unwrap().into_inner();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "apply was not cancelled"
        );
        tokio::task::yield_now().await;
    };
    assert_eq!(response.diagnostics[0].summary, "Stopped");
}

#[tokio::test]
async fn a_resource_lifecycle_over_grpc() {
    let plugin = Plugin::start(None);
    let mut client = ProviderClient::new(plugin.channel(None).await.unwrap());

    configure_and_validate_the_provider(&mut client).await;
    let (state, private) = create(&mut client).await;
    read_round_trips(&mut client, &state, private).await;
    plan_a_rename_and_a_destroy(&mut client, &state).await;
    upgrade_states(&mut client).await;
    import(&mut client).await;
    read_a_data_source(&mut client).await;
    refuse_an_unknown_type(&mut client).await;
}

type Grpc = ProviderClient<tonic::transport::Channel>;

/// ConfigureProvider, then ValidateProviderConfig pointing at the attribute at fault.
async fn configure_and_validate_the_provider(client: &mut Grpc) {
    let configured = client
        .configure_provider(pb::configure_provider::Request {
            terraform_version: "1.11.4".into(),
            config: Some(pb::DynamicValue {
                msgpack: encode_msgpack(
                    &Value::object([("prefix", Value::Null)]),
                    &Type::object([("prefix", Type::String)]),
                )
                .unwrap(),
                json: vec![],
            }),
            client_capabilities: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(configured.diagnostics.is_empty());

    // Invalid provider config points at the attribute.
    let invalid = client
        .validate_provider_config(pb::validate_provider_config::Request {
            config: Some(pb::DynamicValue {
                msgpack: encode_msgpack(
                    &Value::object([("prefix", Value::from(""))]),
                    &Type::object([("prefix", Type::String)]),
                )
                .unwrap(),
                json: vec![],
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(invalid.diagnostics.len(), 1);
    let steps = &invalid.diagnostics[0].attribute.as_ref().unwrap().steps;
    assert_eq!(
        steps[0].selector,
        Some(pb::attribute_path::step::Selector::AttributeName(
            "prefix".into()
        ))
    );
}

/// Plan and apply a create: the new state and its private bytes.
async fn create(client: &mut Grpc) -> (Value, Vec<u8>) {
    // The id is planned unknown.
    let config = Value::object([("name", Value::from("a")), ("value", Value::from("v"))]);
    let plan = client
        .plan_resource_change(pb::plan_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: dynamic(&Value::Null),
            proposed_new_state: dynamic(&config),
            config: dynamic(&config),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    let planned = undynamic(plan.planned_state);
    assert_eq!(planned.get_attr("id"), &Value::Unknown);
    assert!(plan.requires_replace.is_empty());

    let applied = client
        .apply_resource_change(pb::apply_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: dynamic(&Value::Null),
            planned_state: dynamic(&planned),
            config: dynamic(&config),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let state = undynamic(applied.new_state);
    assert_eq!(state.get_attr("id").as_str(), Some("item-a"));
    assert_eq!(applied.private, b"{\"v\":1}");
    (state, applied.private)
}

/// Read round-trips state and private bytes.
async fn read_round_trips(client: &mut Grpc, state: &Value, private: Vec<u8>) {
    let read = client
        .read_resource(pb::read_resource::Request {
            type_name: "echo_item".into(),
            current_state: dynamic(state),
            private: private.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(undynamic(read.new_state), *state);
    assert_eq!(read.private, private);
}

/// Renaming requires replacement.
async fn plan_a_rename_and_a_destroy(client: &mut Grpc, state: &Value) {
    let mut renamed = state.clone();
    renamed.set_attr("name", Value::from("b"));
    let plan = client
        .plan_resource_change(pb::plan_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: dynamic(state),
            proposed_new_state: dynamic(&renamed),
            config: dynamic(&renamed),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plan.requires_replace.len(), 1);

    // Destroy plan: null proposed state plans null.
    let plan = client
        .plan_resource_change(pb::plan_resource_change::Request {
            type_name: "echo_item".into(),
            prior_state: dynamic(state),
            proposed_new_state: dynamic(&Value::Null),
            config: dynamic(&Value::Null),
            prior_private: b"p".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(undynamic(plan.planned_state).is_null());
    assert_eq!(plan.planned_private, b"p");
}

/// Upgrade: raw JSON state becomes msgpack for the current schema.
async fn upgrade_states(client: &mut Grpc) {
    let upgraded = client
        .upgrade_resource_state(pb::upgrade_resource_state::Request {
            type_name: "echo_item".into(),
            version: 0,
            raw_state: Some(pb::RawState {
                json: br#"{"name":"a","value":"v","id":"item-a","gone":1}"#.to_vec(),
                flatmap: Default::default(),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        upgraded.diagnostics.is_empty(),
        "{:?}",
        upgraded.diagnostics
    );
    let upgraded = undynamic(upgraded.upgraded_state);
    assert_eq!(upgraded.get_attr("id").as_str(), Some("item-a"));
    assert!(upgraded.get_attr("wait_for_stop").is_null());

    // A state from a newer schema version is an error.
    let newer = client
        .upgrade_resource_state(pb::upgrade_resource_state::Request {
            type_name: "echo_item".into(),
            version: 7,
            raw_state: Some(pb::RawState {
                json: b"{}".to_vec(),
                flatmap: Default::default(),
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(newer.diagnostics[0].severity, 1);
}

/// Import by id: the imported object carries the name taken from the id.
async fn import(client: &mut Grpc) {
    let imported = client
        .import_resource_state(pb::import_resource_state::Request {
            type_name: "echo_item".into(),
            id: "item-z".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let object = &imported.imported_resources[0];
    assert_eq!(object.type_name, "echo_item");
    assert_eq!(
        undynamic(object.state.clone()).get_attr("name").as_str(),
        Some("z")
    );
}

/// A data source read: the length of the text.
async fn read_a_data_source(client: &mut Grpc) {
    let length_type = Type::object([("text", Type::String), ("length", Type::Number)]);
    let read = client
        .read_data_source(pb::read_data_source::Request {
            type_name: "echo_length".into(),
            config: Some(pb::DynamicValue {
                msgpack: encode_msgpack(
                    &Value::object([("text", Value::from("hello"))]),
                    &length_type,
                )
                .unwrap(),
                json: vec![],
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let state = decode_msgpack(&read.state.unwrap().msgpack, &length_type).unwrap();
    assert_eq!(state.get_attr("length").as_i64(), Some(5));
}

/// An unknown type is a diagnostic, not a crash.
async fn refuse_an_unknown_type(client: &mut Grpc) {
    let unknown = client
        .validate_resource_config(pb::validate_resource_config::Request {
            type_name: "echo_nothing".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(unknown.diagnostics[0].summary, "Unknown resource type");
}

/// The capabilities Terraform 1.11.4 sends on ValidateResourceConfig and PlanResourceChange.
fn terraform_1_11_capabilities() -> Option<pb::ClientCapabilities> {
    Some(pb::ClientCapabilities {
        deferral_allowed: false,
        write_only_attributes_allowed: true,
    })
}

fn attribute_name(diagnostic: &pb::Diagnostic) -> Option<&str> {
    match diagnostic
        .attribute
        .as_ref()?
        .steps
        .first()?
        .selector
        .as_ref()?
    {
        pb::attribute_path::step::Selector::AttributeName(name) => Some(name),
        _ => None,
    }
}

#[tokio::test]
async fn client_capabilities_and_version_reach_the_resource() {
    let plugin = Plugin::start(None);
    let mut client = ProviderClient::new(plugin.channel(None).await.unwrap());
    let config = Value::object([
        ("name", Value::from("a")),
        ("secret", Value::from("s3cr3t")),
    ]);
    let validate = |capabilities| pb::validate_resource_config::Request {
        type_name: "echo_item".into(),
        config: dynamic(&config),
        client_capabilities: capabilities,
    };
    let plan = |capabilities| pb::plan_resource_change::Request {
        type_name: "echo_item".into(),
        prior_state: dynamic(&Value::Null),
        proposed_new_state: dynamic(&config),
        config: dynamic(&config),
        client_capabilities: capabilities,
        ..Default::default()
    };

    // A client before 1.11 sends no capabilities. Validation comes before configuration, so
    // the version is not known yet.
    let validated = client
        .validate_resource_config(validate(None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        validated.diagnostics.len(),
        1,
        "{:?}",
        validated.diagnostics
    );
    assert_eq!(attribute_name(&validated.diagnostics[0]), Some("secret"));
    assert!(
        validated.diagnostics[0]
            .detail
            .starts_with("This client does not support")
    );

    let configured = client
        .configure_provider(pb::configure_provider::Request {
            terraform_version: "1.9.8".into(),
            config: Some(pb::DynamicValue {
                msgpack: encode_msgpack(
                    &Value::object([("prefix", Value::Null)]),
                    &Type::object([("prefix", Type::String)]),
                )
                .unwrap(),
                json: vec![],
            }),
            client_capabilities: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(configured.diagnostics.is_empty());

    // Once configured, every call knows the version.
    let planned = client
        .plan_resource_change(plan(None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(planned.diagnostics.len(), 1, "{:?}", planned.diagnostics);
    assert_eq!(attribute_name(&planned.diagnostics[0]), Some("secret"));
    assert!(
        planned.diagnostics[0]
            .detail
            .starts_with("Terraform or OpenTofu 1.9.8 does not support"),
        "{}",
        planned.diagnostics[0].detail
    );
    assert!(undynamic(planned.planned_state).is_null());

    // The same requests as Terraform 1.11.4 sends them pass, and the secret is not planned.
    let validated = client
        .validate_resource_config(validate(terraform_1_11_capabilities()))
        .await
        .unwrap()
        .into_inner();
    assert!(
        validated.diagnostics.is_empty(),
        "{:?}",
        validated.diagnostics
    );
    let planned = client
        .plan_resource_change(plan(terraform_1_11_capabilities()))
        .await
        .unwrap()
        .into_inner();
    assert!(planned.diagnostics.is_empty(), "{:?}", planned.diagnostics);
    let planned = undynamic(planned.planned_state);
    assert_eq!(planned.get_attr("name").as_str(), Some("a"));
    assert!(planned.get_attr("secret").is_null());
}

#[test]
fn debug_mode_prints_reattach_config_and_serves_plaintext() {
    use std::io::BufRead as _;
    let socket_dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(plugin_binary())
        .arg("--debug")
        .env_remove("TF_PLUGIN_MAGIC_COOKIE")
        .env("PLUGIN_CLIENT_CERT", "ignored in debug mode")
        .env("PLUGIN_UNIX_SOCKET_DIR", socket_dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map(Result::unwrap)
        .find(|line| line.contains("TF_REATTACH_PROVIDERS="))
        .expect("no TF_REATTACH_PROVIDERS line");
    let json = line
        .split_once("TF_REATTACH_PROVIDERS='")
        .unwrap()
        .1
        .trim_end_matches('\'');
    let parsed: serde_json::Value = serde_json::from_str(json).unwrap();
    for address in [
        "registry.terraform.io/example/echo",
        "registry.opentofu.org/example/echo",
    ] {
        let entry = &parsed[address];
        assert_eq!(entry["Protocol"], "grpc");
        assert_eq!(entry["ProtocolVersion"], 6);
        assert_eq!(entry["Pid"], child.id());
        assert_eq!(entry["Addr"]["Network"], "unix");
    }
    let socket = parsed["registry.terraform.io/example/echo"]["Addr"]["String"]
        .as_str()
        .unwrap()
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let handshake = common::parse_handshake(&format!("1|6|unix|{socket}|grpc|\n"));
        let channel = common::connect(&handshake, None).await.unwrap();
        ProviderClient::new(channel)
            .get_metadata(pb::get_metadata::Request {})
            .await
            .unwrap();
    });
    // Interrupt ends debug mode.
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still running after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    assert!(status.success());
}

#[test]
fn cookie_constant_matches_terraforms() {
    assert_eq!(tfplugin::MAGIC_COOKIE_VALUE, COOKIE);
}

#[tokio::test]
async fn logs_are_hclog_json_on_stderr_at_the_requested_level() {
    use std::io::Read as _;
    let mut plugin = common::Plugin::start_capturing_stderr(&[("TF_LOG_PROVIDER", "INFO")]);
    let channel = plugin.channel(None).await.unwrap();
    ProviderClient::new(channel.clone())
        .configure_provider(pb::configure_provider::Request {
            terraform_version: "1.11.4".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    GrpcControllerClient::new(channel)
        .shutdown(tfplugin::proto::plugin::Empty {})
        .await
        .unwrap();
    let mut stderr = String::new();
    // EOF arrives when the plugin exits.
    plugin
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(
        plugin.rest_of_stdout(),
        "",
        "stdout after the handshake line"
    );
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).expect("every stderr line is JSON"))
        .collect();
    let configured = lines
        .iter()
        .find(|line| line["@message"] == "echo provider configured")
        .expect("the provider's info line");
    assert_eq!(configured["@level"], "info");
    assert_eq!(configured["terraform_version"], "1.11.4");
    assert_eq!(configured["tf_rpc"], "ConfigureProvider");
    assert!(
        configured["@module"]
            .as_str()
            .unwrap()
            .starts_with("provider")
    );
    let stamp = configured["@timestamp"].as_str().unwrap();
    let fraction = stamp.split('.').nth(1).unwrap();
    assert_eq!(fraction.len(), "123456Z".len(), "{stamp}");
    // INFO filters out the server's debug lines.
    assert!(
        lines.iter().all(|line| line["@level"] != "debug"),
        "{stderr}"
    );
}

#[tokio::test]
async fn falls_back_to_loopback_tcp_when_no_unix_socket_can_be_made() {
    let client = terraform_like_client_identity();
    let plugin = Plugin::start_with(
        Some(&client.pem),
        &[("PLUGIN_UNIX_SOCKET_DIR", "/nonexistent/tfplugin-test")],
    );
    assert_eq!(plugin.handshake.network, "tcp");
    assert!(plugin.handshake.address.starts_with("127.0.0.1:"));
    let port: u16 = plugin.handshake.address[10..].parse().unwrap();
    assert!(
        (10000..=25000).contains(&port),
        "port {port} outside PLUGIN_MIN/MAX_PORT"
    );
    let channel = plugin.channel(Some(&client)).await.unwrap();
    ProviderClient::new(channel)
        .get_metadata(pb::get_metadata::Request {})
        .await
        .unwrap();
    let refused = match plugin.channel(None).await {
        Err(_) => true,
        Ok(channel) => ProviderClient::new(channel)
            .get_metadata(pb::get_metadata::Request {})
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a client without a certificate was served over TCP"
    );
}

#[test]
fn an_orphaned_plugin_exits_when_its_host_dies() {
    use std::io::BufRead as _;
    // A shell stands in for Terraform: it starts the plugin in the background,
    // reports the plugin's pid, waits for the handshake line, then dies
    // without shutting the plugin down.
    let socket_dir = tempfile::tempdir().unwrap();
    let handshake_file = socket_dir.path().join("handshake");
    let mut host = Command::new("sh")
        .arg("-c")
        .arg(r#""$0" >"$1" 2>/dev/null & echo $!; while [ ! -s "$1" ]; do :; done"#)
        .arg(plugin_binary())
        .arg(&handshake_file)
        .env("TF_PLUGIN_MAGIC_COOKIE", COOKIE)
        .env("PLUGIN_UNIX_SOCKET_DIR", socket_dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pid = String::new();
    std::io::BufReader::new(host.stdout.take().unwrap())
        .read_line(&mut pid)
        .unwrap();
    host.wait().unwrap();
    let handshake = std::fs::read_to_string(&handshake_file).unwrap();
    assert!(handshake.starts_with("1|6|unix|"), "{handshake:?}");
    let proc_dir = format!("/proc/{}", pid.trim());
    let start = std::time::Instant::now();
    while std::path::Path::new(&proc_dir).exists() {
        // Zombies of exited orphans are reaped by init; a live plugin stays "S"/"R".
        let state = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap_or_default();
        if state.contains(") Z ") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "orphaned plugin {pid} still running"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
