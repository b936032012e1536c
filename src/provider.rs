//! The `provider "proxmox"` block: its schema, its checks, and building the configured
//! context (`crate::context`) from it.

use std::sync::Arc;

use tfplugin::{
    Attribute, AttributePath, Block, Context, DataSource, Diagnostic, Diagnostics, Provider,
    Resource, Schema, Type, Value,
};

use crate::context::{Configured, DEFAULT_SEED_STORAGE, Shared};
use crate::validate;
use crate::vmid::VmidRange;

pub const PROVIDER_ADDRESS: &str = "registry.terraform.io/proxyvm/proxmox";

pub const ENV_ENDPOINT: &str = "PROXMOX_VE_ENDPOINT";
pub const ENV_API_TOKEN: &str = "PROXMOX_VE_API_TOKEN";
pub const ENV_CA_CERT: &str = "PROXMOX_VE_CA_CERT";
pub const ENV_INSECURE: &str = "PROXMOX_VE_INSECURE";
pub const ENV_FLEET: &str = "PROXMOX_VE_FLEET";

#[derive(Debug)]
pub struct ProxmoxProvider {
    shared: Arc<Shared>,
}

impl ProxmoxProvider {
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared::default()),
        }
    }
}

impl Default for ProxmoxProvider {
    fn default() -> Self {
        Self::new()
    }
}

pub fn provider_schema() -> Schema {
    Schema::new(
        Block::new()
            .description(
                "Runs fleets of small proxy VMs on a Proxmox VE 9 cluster through its REST API with an API token: no SSH, nothing installed on the host.",
            )
            .attribute(Attribute::new("endpoint", Type::String).optional().description(format!(
                "The PVE API URL, e.g. `https://pve1.example:8006` (without `/api2/json`). Can also be set with `{ENV_ENDPOINT}`."
            )))
            .attribute(Attribute::new("api_token", Type::String).optional().sensitive().description(format!(
                "An API token `USER@REALM!TOKENID=SECRET`. Can also be set with `{ENV_API_TOKEN}`; prefer that, or a variable marked sensitive, over writing the secret in configuration."
            )))
            .attribute(Attribute::new("ca_cert", Type::String).optional().description(format!(
                "PEM certificate(s) to trust for the endpoint, e.g. the content of the cluster's `/etc/pve/pve-root-ca.pem`. Without it the system's roots are used. Can also be set with `{ENV_CA_CERT}` (PEM text, or the path of a PEM file)."
            )))
            .attribute(Attribute::new("insecure", Type::Bool).optional().description(format!(
                "Skip TLS certificate verification. Never the default; only for throwaway labs. Can also be set with `{ENV_INSECURE}` (`true`/`1`)."
            )))
            .attribute(Attribute::new("fleet", Type::String).optional().description(format!(
                "A namespace for this configuration's VMs, e.g. `terraform.workspace`: part of each VM's ownership mark and of the VMID derived from its name, so configurations with different fleets can use the same VM names on one cluster without meeting. A VM belongs to exactly one fleet; `proxmox_proxy_vms` lists this fleet's VMs. Lower-case letters, digits, `_ . -`, at most 32. Defaults to empty (the default fleet). Can also be set with `{ENV_FLEET}`."
            )))
            .attribute(Attribute::new("seed_storage", Type::String).optional().description(format!(
                "Default storage for the NoCloud seed ISOs; it must accept `iso` content on every node that runs proxy VMs. Defaults to `{DEFAULT_SEED_STORAGE}`."
            )))
            .attribute(Attribute::new("clone_storage", Type::String).optional().description(
                "Default storage for the disks of cloned VMs. Defaults to the template's storage.",
            ))
            .attribute(Attribute::new("vmid_range_start", Type::Number).optional().description(format!(
                "First VMID the provider derives VMIDs in, for VMs without an explicit `vmid`. Defaults to `{}`.",
                VmidRange::default().bounds().start()
            )))
            .attribute(Attribute::new("vmid_range_end", Type::Number).optional().description(format!(
                "Last VMID (inclusive) of that range. Defaults to `{}`.",
                VmidRange::default().bounds().end()
            ))),
    )
}

/// The provider block merged with the environment: configuration wins.
struct Settings {
    endpoint: Setting,
    fleet: Setting,
    api_token: Setting,
    ca_cert: Setting,
    insecure: Option<Result<bool, String>>,
}

/// A string setting: absent, unknown until apply, or known with where it came from.
enum Setting {
    Absent,
    Unknown,
    FromConfig(String),
    FromEnv(String),
}

impl Setting {
    fn merged(config: &Value, name: &str, env: &str) -> Setting {
        let value = config.get_attr(name);
        if !value.is_known() {
            return Setting::Unknown;
        }
        if let Some(text) = value.as_str() {
            return Setting::FromConfig(text.to_owned());
        }
        match std::env::var(env) {
            Ok(text) if !text.is_empty() => Setting::FromEnv(text),
            _ => Setting::Absent,
        }
    }

    fn known(&self) -> Option<&str> {
        match self {
            Setting::FromConfig(text) | Setting::FromEnv(text) => Some(text),
            Setting::Absent | Setting::Unknown => None,
        }
    }

    /// Where a problem with the value should point: the attribute, or the environment.
    fn origin(&self, attribute: &str, env: &str) -> String {
        match self {
            Setting::FromEnv(_) => format!("(from the environment variable {env})"),
            _ => format!("(attribute {attribute})"),
        }
    }
}

impl Settings {
    fn read(config: &Value) -> Settings {
        let insecure_value = config.get_attr("insecure");
        let insecure = if !insecure_value.is_known() {
            None
        } else if let Some(flag) = insecure_value.as_bool() {
            Some(Ok(flag))
        } else {
            std::env::var(ENV_INSECURE)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|text| match text.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" => Ok(true),
                    "0" | "false" | "no" => Ok(false),
                    _ => Err(format!(
                        "{ENV_INSECURE}=`{text}` is not a boolean; use true or false"
                    )),
                })
        };
        Settings {
            endpoint: Setting::merged(config, "endpoint", ENV_ENDPOINT),
            fleet: Setting::merged(config, "fleet", ENV_FLEET),
            api_token: Setting::merged(config, "api_token", ENV_API_TOKEN),
            ca_cert: Setting::merged(config, "ca_cert", ENV_CA_CERT),
            insecure,
        }
    }

    /// Every check that needs no network. `require` asks for endpoint and token to be
    /// present (at configure time; validation may still lack them).
    fn check(&self, config: &Value, require: bool) -> Diagnostics {
        let mut diags = Diagnostics::new();
        let attr = |name: &str| AttributePath::root().attr(name);
        match &self.endpoint {
            Setting::Absent if require => diags.attribute_error(
                attr("endpoint"),
                "Missing PVE endpoint",
                format!("Set `endpoint` in the provider block or the environment variable {ENV_ENDPOINT}, e.g. https://pve1.example:8006."),
            ),
            setting => {
                if let Some(text) = setting.known()
                    && let Err(why) = validate::endpoint(text)
                {
                    diags.attribute_error(
                        attr("endpoint"),
                        "Invalid PVE endpoint",
                        format!("{why} {}", setting.origin("endpoint", ENV_ENDPOINT)),
                    );
                }
            }
        }
        match &self.api_token {
            Setting::Absent if require => diags.attribute_error(
                attr("api_token"),
                "Missing API token",
                format!("Set `api_token` in the provider block or the environment variable {ENV_API_TOKEN}; see docs/guides/pve-setup.md for creating one."),
            ),
            setting => {
                if let Some(text) = setting.known()
                    && let Err(why) = validate::api_token(text)
                {
                    diags.attribute_error(
                        attr("api_token"),
                        "Invalid API token",
                        format!("{why} {}", setting.origin("api_token", ENV_API_TOKEN)),
                    );
                }
            }
        }
        if self.ca_cert.known().is_some() {
            match ca_pem_text(&self.ca_cert) {
                Ok(pem) => {
                    if let Err(why) = validate::ca_pem(&pem) {
                        diags.attribute_error(
                            attr("ca_cert"),
                            "Invalid CA certificate",
                            format!("{why} {}", self.ca_cert.origin("ca_cert", ENV_CA_CERT)),
                        );
                    }
                }
                Err(why) => diags.attribute_error(attr("ca_cert"), "Invalid CA certificate", why),
            }
        }
        if let Some(text) = self.fleet.known()
            && let Err(why) = validate::fleet(text)
        {
            diags.attribute_error(
                attr("fleet"),
                "Invalid fleet",
                format!("{why} {}", self.fleet.origin("fleet", ENV_FLEET)),
            );
        }
        if let Some(Err(why)) = &self.insecure {
            diags.attribute_error(attr("insecure"), "Invalid insecure flag", why.clone());
        }
        if let (Some(Ok(true)), Some(_)) = (&self.insecure, self.ca_cert.known()) {
            diags.push(
                Diagnostic::warning(
                    "Both ca_cert and insecure are set",
                    "With insecure = true the certificate is not verified at all, so ca_cert has no effect.",
                )
                .with_attribute(attr("insecure")),
            );
        }
        for name in ["seed_storage", "clone_storage"] {
            if let Some(text) = config.get_attr(name).as_str()
                && let Err(why) = validate::storage_id(text)
            {
                diags.attribute_error(attr(name), "Invalid storage name", why);
            }
        }
        if let Err((name, why)) = vmid_range(config) {
            diags.attribute_error(attr(name), "Invalid VMID range", why);
        }
        diags
    }
}

/// `ca_cert` is PEM text; from the environment it may also be a file path.
fn ca_pem_text(setting: &Setting) -> Result<String, String> {
    match setting {
        Setting::FromEnv(text) if !text.contains("-----BEGIN") => std::fs::read_to_string(text)
            .map_err(|e| {
                format!("{ENV_CA_CERT} is neither PEM text nor a readable file `{text}`: {e}")
            }),
        other => Ok(other.known().unwrap_or_default().to_owned()),
    }
}

/// The VMID range from the two attributes; unknown or absent parts take the defaults.
fn vmid_range(config: &Value) -> Result<VmidRange, (&'static str, String)> {
    let default = VmidRange::default();
    let read = |name: &'static str, fallback: u32| -> Result<u32, (&'static str, String)> {
        let value = config.get_attr(name);
        match value.as_i64() {
            None => Ok(fallback),
            Some(n) => u32::try_from(n).map_err(|_| (name, format!("{n} is not a VMID"))),
        }
    };
    let first = read("vmid_range_start", *default.bounds().start())?;
    let last = read("vmid_range_end", *default.bounds().end())?;
    VmidRange::new(first, last).map_err(|why| ("vmid_range_start", why))
}

#[tfplugin::async_trait]
impl Provider for ProxmoxProvider {
    fn schema(&self) -> Schema {
        provider_schema()
    }

    async fn validate_config(&self, _ctx: &Context, config: &Value) -> Diagnostics {
        // Endpoint and token may legitimately come from the environment only at apply time.
        Settings::read(config).check(config, false)
    }

    async fn configure(
        &self,
        _ctx: &Context,
        _terraform_version: &str,
        config: &Value,
    ) -> Diagnostics {
        let settings = Settings::read(config);
        let mut diags = settings.check(config, true);
        let outcome = if diags.has_errors() {
            Err("The provider block is invalid; see the other errors.".to_owned())
        } else {
            build(&settings, config).inspect_err(|why| {
                diags.error("Unable to configure the Proxmox provider", why.clone());
            })
        };
        self.shared.set(outcome.map(Arc::new));
        diags
    }

    fn resources(&self) -> Vec<Arc<dyn Resource>> {
        crate::resources::all(&self.shared)
    }

    fn data_sources(&self) -> Vec<Arc<dyn DataSource>> {
        crate::data_sources::all(&self.shared)
    }
}

fn build(settings: &Settings, config: &Value) -> Result<Configured, String> {
    let unknown = |what: &str| {
        format!(
            "`{what}` depends on a value known only after apply; the provider needs it to plan. Set it from a variable or the environment."
        )
    };
    if matches!(settings.endpoint, Setting::Unknown) {
        return Err(unknown("endpoint"));
    }
    if matches!(settings.api_token, Setting::Unknown) {
        return Err(unknown("api_token"));
    }
    if matches!(settings.fleet, Setting::Unknown) {
        return Err(unknown("fleet"));
    }
    let endpoint = settings.endpoint.known().unwrap_or_default();
    let token = pve::ApiToken::parse(settings.api_token.known().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let tls = match (&settings.insecure, settings.ca_cert.known()) {
        (Some(Ok(true)), _) => pve::TlsTrust::Insecure,
        (_, Some(_)) => pve::TlsTrust::CaPem(ca_pem_text(&settings.ca_cert)?),
        _ => pve::TlsTrust::SystemRoots,
    };
    let client = pve::Client::new(pve::ClientConfig::new(endpoint, token, tls))
        .map_err(|e| e.to_string())?;
    let vmid_range = vmid_range(config).map_err(|(_, why)| why)?;
    Ok(Configured {
        client,
        seed_storage: config
            .get_attr("seed_storage")
            .as_str()
            .unwrap_or(DEFAULT_SEED_STORAGE)
            .to_owned(),
        clone_storage: config.get_attr("clone_storage").as_str().map(str::to_owned),
        vmid_range,
        fleet: settings.fleet.known().unwrap_or_default().to_owned(),
        runtime: crate::runtime::Runtime::default(),
        facts: Default::default(),
        journal: crate::journal::Journal::for_working_directory(),
    })
}
