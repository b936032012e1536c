//! The provider binary over real gRPC, driven the way an older CLI drives it (no
//! `client_capabilities`, `terraform_version` 1.9.8) and the way Terraform 1.11.4 does.
//! An older CLI gets one plain error on `user_data` at validate and again at plan, and no plan
//! or state ever carries the value; everything else works on it. Terraform 1.11.4 plans and
//! applies the same configuration with `user_data` kept out of plan and state.
//!
//! Needs no terraform binary (so it is not gated by `TF_ACC`): the test is the client.

use crate::support;

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::task::Poll;

use hyper_util::rt::TokioIo;
use terraform_provider_proxmox::provider::{ProxmoxProvider, provider_schema};
use terraform_provider_proxmox::resources::proxy_vm::TYPE_NAME;
use tfplugin::proto::tfplugin6 as pb;
use tfplugin::proto::tfplugin6::provider_client::ProviderClient;
use tfplugin::{Provider as _, Type, Value, decode_msgpack, encode_msgpack};
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

const USER_DATA: &str = "#cloud-config\npassword: hunter2-not-for-state\n";

/// go-plugin's magic cookie, as Terraform sets it.
const COOKIE: &str = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";

/// What Terraform 1.11.4 sends on ValidateResourceConfig, ConfigureProvider, ReadResource and
/// PlanResourceChange of `terraform plan` (observed with `TF_LOG_PROVIDER=debug`, where the
/// provider logs what each request announces; the re-plan during apply sets
/// `deferral_allowed` too).
fn terraform_1_11_4() -> Option<pb::ClientCapabilities> {
    Some(pb::ClientCapabilities {
        deferral_allowed: false,
        write_only_attributes_allowed: true,
    })
}

/// One provider process, as Terraform starts it (plaintext: no `PLUGIN_CLIENT_CERT`).
struct ProviderProcess {
    child: Child,
    _socket_dir: tempfile::TempDir,
    client: ProviderClient<Channel>,
}

impl Drop for ProviderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProviderProcess {
    async fn start() -> ProviderProcess {
        let socket_dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_terraform-provider-proxmox"))
            .env("TF_PLUGIN_MAGIC_COOKIE", COOKIE)
            .env("PLUGIN_PROTOCOL_VERSIONS", "5,6")
            .env("PLUGIN_UNIX_SOCKET_DIR", socket_dir.path())
            .env_remove("PLUGIN_CLIENT_CERT")
            .env_remove("TF_LOG")
            .env_remove("TF_LOG_PROVIDER")
            .env_remove("PROXMOX_VE_ENDPOINT")
            .env_remove("PROXMOX_VE_API_TOKEN")
            .env_remove("PROXMOX_VE_CA_CERT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let fields: Vec<&str> = line.trim_end().split('|').collect();
        assert_eq!(fields[..3], ["1", "6", "unix"], "handshake {line:?}");
        let socket = PathBuf::from(fields[3]);
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(UnixConnector(socket))
            .await
            .unwrap();
        ProviderProcess {
            child,
            _socket_dir: socket_dir,
            client: ProviderClient::new(channel),
        }
    }
}

#[derive(Clone)]
struct UnixConnector(PathBuf);

impl tonic::codegen::Service<Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move { Ok(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) })
    }
}

fn vm_type() -> Type {
    ProxmoxProvider::new()
        .resources()
        .into_iter()
        .find(|r| r.type_name() == TYPE_NAME)
        .unwrap()
        .schema()
        .value_type()
}

fn dynamic(value: &Value, ty: &Type) -> Option<pb::DynamicValue> {
    Some(pb::DynamicValue {
        msgpack: encode_msgpack(value, ty).unwrap(),
        json: Vec::new(),
    })
}

fn decoded(value: &Option<pb::DynamicValue>) -> Value {
    decode_msgpack(&value.as_ref().unwrap().msgpack, &vm_type()).unwrap()
}

fn carries_user_data(value: &Option<pb::DynamicValue>) -> bool {
    let bytes = value.as_ref().map(|v| v.msgpack.as_slice()).unwrap_or(&[]);
    bytes
        .windows(USER_DATA.len())
        .any(|window| window == USER_DATA.as_bytes())
}

fn vm_config(name: &str, user_data: Option<&str>) -> Value {
    Value::object([
        ("name", Value::string(name)),
        ("node", Value::string("pve1")),
        ("template", Value::string("debian-13-proxy")),
        (
            "user_data",
            user_data.map(Value::string).unwrap_or(Value::Null),
        ),
    ])
}

fn error_attribute(diagnostic: &pb::Diagnostic) -> Option<&str> {
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

impl ProviderProcess {
    async fn validate(
        &mut self,
        config: &Value,
        capabilities: Option<pb::ClientCapabilities>,
    ) -> Vec<pb::Diagnostic> {
        self.client
            .validate_resource_config(pb::validate_resource_config::Request {
                type_name: TYPE_NAME.into(),
                config: dynamic(config, &vm_type()),
                client_capabilities: capabilities,
            })
            .await
            .unwrap()
            .into_inner()
            .diagnostics
    }

    async fn configure(
        &mut self,
        version: &str,
        target: &support::Target,
        capabilities: Option<pb::ClientCapabilities>,
    ) {
        let config = Value::object([
            ("endpoint", Value::string(&target.endpoint)),
            ("api_token", Value::string(&target.token)),
            ("ca_cert", Value::string(target.ca_pem.clone().unwrap())),
            ("seed_storage", Value::string("proxy-seeds")),
        ]);
        let response = self
            .client
            .configure_provider(pb::configure_provider::Request {
                terraform_version: version.into(),
                config: dynamic(&config, &provider_schema().value_type()),
                client_capabilities: capabilities,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            response.diagnostics.is_empty(),
            "{:?}",
            response.diagnostics
        );
    }

    /// A create plan. `proposed` is what the CLI proposes: an older CLI leaves `user_data` in
    /// it, Terraform 1.11 nulls write-only attributes first.
    async fn plan_create(
        &mut self,
        config: &Value,
        proposed: &Value,
        capabilities: Option<pb::ClientCapabilities>,
    ) -> pb::plan_resource_change::Response {
        let ty = vm_type();
        self.client
            .plan_resource_change(pb::plan_resource_change::Request {
                type_name: TYPE_NAME.into(),
                prior_state: dynamic(&Value::Null, &ty),
                proposed_new_state: dynamic(proposed, &ty),
                config: dynamic(config, &ty),
                client_capabilities: capabilities,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    async fn apply_create(
        &mut self,
        config: &Value,
        planned: &Option<pb::DynamicValue>,
    ) -> pb::apply_resource_change::Response {
        let ty = vm_type();
        self.client
            .apply_resource_change(pb::apply_resource_change::Request {
                type_name: TYPE_NAME.into(),
                prior_state: dynamic(&Value::Null, &ty),
                planned_state: planned.clone(),
                config: dynamic(config, &ty),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// Reads with the private data the apply returned, as Terraform passes it on.
    async fn read(
        &mut self,
        applied: &pb::apply_resource_change::Response,
        capabilities: Option<pb::ClientCapabilities>,
    ) -> pb::read_resource::Response {
        self.client
            .read_resource(pb::read_resource::Request {
                type_name: TYPE_NAME.into(),
                current_state: applied.new_state.clone(),
                private: applied.private.clone(),
                client_capabilities: capabilities,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_older_cli_gets_a_plain_error_on_user_data_and_nothing_is_planned_or_stored() {
    let (_sim, target) = support::start_sim(pvesim::SimConfig::default()).await;
    let sim = support::SimClient::new(&target);
    let config = vm_config("old-cli", Some(USER_DATA));

    // Terraform validates before it configures the provider: the version is not known yet.
    let mut provider = ProviderProcess::start().await;
    let diagnostics = provider.validate(&config, None).await;
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let error = &diagnostics[0];
    assert_eq!(error.severity, pb::diagnostic::Severity::Error as i32);
    assert_eq!(error_attribute(error), Some("user_data"));
    assert_eq!(
        error.summary,
        "user_data needs Terraform >= 1.11 or OpenTofu >= 1.11"
    );
    assert!(
        error.detail.contains(
            "The Terraform or OpenTofu version running this command does not support write-only \
                arguments"
        ),
        "{}",
        error.detail
    );
    assert!(error.detail.contains("or remove `user_data`"));
    assert!(!error.detail.contains("hunter2"));

    // Should a client plan anyway, the plan names the version and holds nothing.
    let mut provider = ProviderProcess::start().await;
    provider.configure("1.9.8", &target, None).await;
    let plan = provider.plan_create(&config, &config, None).await;
    assert_eq!(plan.diagnostics.len(), 1, "{:?}", plan.diagnostics);
    assert_eq!(error_attribute(&plan.diagnostics[0]), Some("user_data"));
    assert!(
        plan.diagnostics[0]
            .detail
            .contains("Terraform or OpenTofu 1.9.8 does not support write-only arguments"),
        "{}",
        plan.diagnostics[0].detail
    );
    assert!(decoded(&plan.planned_state).is_null());
    assert!(!carries_user_data(&plan.planned_state));
    assert!(sim.our_vms().await.is_empty(), "nothing was created");

    // network_config is refused the same way.
    let mut network = vm_config("old-cli", None);
    network.set_attr("network_config", Value::string("version: 2\n"));
    let plan = provider.plan_create(&network, &network, None).await;
    assert_eq!(
        error_attribute(&plan.diagnostics[0]),
        Some("network_config")
    );

    // Without the write-only inputs the older CLI plans, applies and reads as usual.
    let plain = vm_config("old-cli", None);
    assert!(provider.validate(&plain, None).await.is_empty());
    let plan = provider.plan_create(&plain, &plain, None).await;
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    let applied = provider.apply_create(&plain, &plan.planned_state).await;
    assert!(applied.diagnostics.is_empty(), "{:?}", applied.diagnostics);
    let read = provider.read(&applied, None).await;
    assert!(read.diagnostics.is_empty(), "{:?}", read.diagnostics);
    let state = decoded(&read.new_state);
    assert_eq!(state.get_attr("status").as_str(), Some("running"));
    // The seed's vendor-data alone still installs the guest agent, which reports the address.
    assert!(
        state
            .get_attr("ipv4_address")
            .as_str()
            .is_some_and(|a| !a.is_empty()),
        "no address without user_data"
    );
    assert_eq!(sim.our_vms().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_1_11_4_plans_and_applies_user_data_without_storing_it() {
    let (_sim, target) = support::start_sim(pvesim::SimConfig::default()).await;
    let config = vm_config("new-cli", Some(USER_DATA));
    let mut proposed = config.clone();
    proposed.set_attr("user_data", Value::Null);

    let mut provider = ProviderProcess::start().await;
    assert!(
        provider
            .validate(&config, terraform_1_11_4())
            .await
            .is_empty(),
        "validate"
    );

    let mut provider = ProviderProcess::start().await;
    provider
        .configure("1.11.4", &target, terraform_1_11_4())
        .await;
    let plan = provider
        .plan_create(&config, &proposed, terraform_1_11_4())
        .await;
    assert!(plan.diagnostics.is_empty(), "{:?}", plan.diagnostics);
    let planned = decoded(&plan.planned_state);
    assert!(planned.get_attr("user_data").is_null());
    // Keyed with the create's token, which apply chooses: known after apply.
    assert!(!planned.get_attr("seed_hash").is_known());
    assert!(!carries_user_data(&plan.planned_state));

    let applied = provider.apply_create(&config, &plan.planned_state).await;
    assert!(applied.diagnostics.is_empty(), "{:?}", applied.diagnostics);
    assert!(
        decoded(&applied.new_state)
            .get_attr("seed_hash")
            .as_str()
            .is_some_and(|h| h.len() == 64)
    );
    assert!(decoded(&applied.new_state).get_attr("user_data").is_null());
    assert!(!carries_user_data(&applied.new_state));

    let read = provider.read(&applied, terraform_1_11_4()).await;
    assert!(read.diagnostics.is_empty(), "{:?}", read.diagnostics);
    assert!(!carries_user_data(&read.new_state));
    assert_eq!(
        decoded(&read.new_state).get_attr("status").as_str(),
        Some("running")
    );
}
