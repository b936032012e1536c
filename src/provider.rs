//! The `provider "proxmox"` block: its schema, its checks, and building the configured
//! context (`crate::context`) from it.

use std::sync::Arc;

use tfplugin::{
    Attribute, AttributePath, Block, Context, DataSource, Diagnostic, Diagnostics, ListResource,
    Provider, Resource, Schema, Type, Value,
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
    // Every provider attribute is optional: each has an environment variable or a default.
    let string = |name: &str| Attribute::new(name, Type::String).optional();
    let number = |name: &str| Attribute::new(name, Type::Number).optional();
    Schema::new(
        Block::new()
            .description(
                "Runs fleets of small proxy VMs on a Proxmox VE 9 cluster through its REST API \
                    with an API token: no SSH, nothing installed on the host.",
            )
            .attribute(string("endpoint").description(format!(
                "The PVE API URL, e.g. `https://pve1.example:8006` (without `/api2/json`). Can \
                    also be set with `{ENV_ENDPOINT}`."
            )))
            .attribute(string("api_token").sensitive().description(format!(
                "An API token `USER@REALM!TOKENID=SECRET`. Can also be set with `{ENV_API_TOKEN}`; \
                    prefer that, or a variable marked sensitive, over writing the secret in \
                    configuration."
            )))
            .attribute(string("ca_cert").description(format!(
                "The CA certificate(s) to trust for the endpoint: PEM text (e.g. \
                    `file(\"pve-root-ca.pem\")`), or the path of a PEM file, such as a copy of \
                    the cluster's `/etc/pve/pve-root-ca.pem`. A value holding `-----BEGIN` is PEM \
                    text; any other is a path, read when the provider is configured. Without it \
                    the system's roots are used. Can also be set with `{ENV_CA_CERT}`, read the \
                    same way."
            )))
            .attribute(Attribute::new("insecure", Type::Bool).optional().description(format!(
                "Skip TLS certificate verification. Never the default; only for throwaway labs. \
                    Can also be set with `{ENV_INSECURE}` (`true`/`1`)."
            )))
            .attribute(string("fleet").description(format!(
                "A namespace for this configuration's VMs, e.g. `terraform.workspace`: part of \
                    each VM's ownership mark and of the VMID derived from its name, so \
                    configurations with different fleets can use the same VM names on one cluster \
                    without meeting. A VM belongs to exactly one fleet; `proxmox_proxy_vms` lists \
                    this fleet's VMs. Lower-case letters, digits, `_ . -`, at most 32. Defaults to \
                    empty (the default fleet). Can also be set with `{ENV_FLEET}`."
            )))
            .attribute(string("seed_storage").description(format!(
                "Default storage for the NoCloud seed ISOs; it must accept `iso` content on every \
                    node that runs proxy VMs. Defaults to `{DEFAULT_SEED_STORAGE}`."
            )))
            .attribute(string("clone_storage").description(
                "Default storage for the disks of cloned VMs. Defaults to the template's storage.",
            ))
            .attribute(number("vmid_range_start").description(format!(
                "First VMID the provider derives VMIDs in, for VMs without an explicit `vmid`. \
                    Defaults to `{}`.",
                VmidRange::default().bounds().start()
            )))
            .attribute(number("vmid_range_end").description(format!(
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

/// Reads an environment variable; the process's environment outside tests.
type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Setting {
    fn merged(config: &Value, name: &str, env_name: &str, env: EnvLookup<'_>) -> Setting {
        let value = config.get_attr(name);
        if !value.is_known() {
            return Setting::Unknown;
        }
        if let Some(text) = value.as_str() {
            return Setting::FromConfig(text.to_owned());
        }
        match env(env_name) {
            Some(text) if !text.is_empty() => Setting::FromEnv(text),
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
    fn read(config: &Value, env: EnvLookup<'_>) -> Settings {
        let insecure_value = config.get_attr("insecure");
        let insecure = if !insecure_value.is_known() {
            None
        } else if let Some(flag) = insecure_value.as_bool() {
            Some(Ok(flag))
        } else {
            env(ENV_INSECURE).filter(|v| !v.is_empty()).map(|text| {
                match text.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" => Ok(true),
                    "0" | "false" | "no" => Ok(false),
                    _ => Err(format!(
                        "{ENV_INSECURE}=`{text}` is not a boolean; use true or false"
                    )),
                }
            })
        };
        Settings {
            endpoint: Setting::merged(config, "endpoint", ENV_ENDPOINT, env),
            fleet: Setting::merged(config, "fleet", ENV_FLEET, env),
            api_token: Setting::merged(config, "api_token", ENV_API_TOKEN, env),
            ca_cert: Setting::merged(config, "ca_cert", ENV_CA_CERT, env),
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
                format!(
                    "Set `endpoint` in the provider block or the environment variable \
                    {ENV_ENDPOINT}, e.g. https://pve1.example:8006."
                ),
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
                format!(
                    "Set `api_token` in the provider block or the environment variable \
                    {ENV_API_TOKEN}; see docs/guides/pve-setup.md for creating one."
                ),
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
        if let Some(why) = ca_cert_problem(&self.ca_cert) {
            diags.attribute_error(attr("ca_cert"), "Invalid CA certificate", why);
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
                    "With insecure = true the certificate is not verified at all, so ca_cert has \
                        no effect.",
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

/// What is wrong with a known `ca_cert`, saying where it came from.
fn ca_cert_problem(setting: &Setting) -> Option<String> {
    let text = setting.known()?;
    let pem = match ca_pem_text(setting) {
        Ok(pem) => pem,
        Err(why) => return Some(why),
    };
    let why = validate::ca_pem(&pem).err()?;
    let read_from = if text.contains("-----BEGIN") {
        String::new()
    } else {
        format!(" (read from the file `{text}`)")
    };
    Some(format!(
        "{why}{read_from} {}",
        setting.origin("ca_cert", ENV_CA_CERT)
    ))
}

/// `ca_cert` is PEM text or the path of a PEM file, in the provider block and in the
/// environment alike: PEM text always holds a `-----BEGIN` line, which no sensible path does.
fn ca_pem_text(setting: &Setting) -> Result<String, String> {
    let text = setting.known().unwrap_or_default();
    if text.contains("-----BEGIN") {
        return Ok(text.to_owned());
    }
    std::fs::read_to_string(text).map_err(|e| {
        format!(
            "`{text}` is neither PEM text nor a readable file: {e} {}",
            setting.origin("ca_cert", ENV_CA_CERT)
        )
    })
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
        Settings::read(config, &process_env).check(config, false)
    }

    async fn configure(
        &self,
        _ctx: &Context,
        _terraform_version: &str,
        config: &Value,
    ) -> Diagnostics {
        let settings = Settings::read(config, &process_env);
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

    fn list_resources(&self) -> Vec<Arc<dyn ListResource>> {
        let proxy_vms = crate::resources::proxy_vm::ProxyVmList::new(self.shared.clone());
        vec![Arc::new(proxy_vms)]
    }
}

fn build(settings: &Settings, config: &Value) -> Result<Configured, String> {
    let unknown = |what: &str| {
        format!(
            "`{what}` depends on a value known only after apply; the provider needs it to plan. \
                Set it from a variable or the environment."
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
    let mut client_config = pve::ClientConfig::new(endpoint, token, tls);
    // One provider process serves one Terraform command: a token PVE refused stays refused
    // for it, so the first refusal is sent once and reported once, with its hint.
    client_config.token_refusal_is_final = true;
    let client = pve::Client::new(client_config).map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tfplugin::Severity;

    const TOKEN: &str = "terraform@pve!provider=0b5ee6e7-0000-4000-8000-000000000001";
    const ENDPOINT: &str = "https://pve1.example:8006";
    const CA_PEM: &str = include_str!("../tests/provider/fixtures/unrelated-ca.pem");

    fn config(attrs: &[(&str, Value)]) -> Value {
        Value::object(attrs.iter().cloned())
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn check(config: &Value, env: EnvLookup<'_>, require: bool) -> Diagnostics {
        Settings::read(config, env).check(config, require)
    }

    /// (severity, summary, attribute, detail) of each diagnostic, for assertions.
    fn found(diags: &Diagnostics) -> Vec<(Severity, String, String, String)> {
        diags
            .iter()
            .map(|d| {
                let attribute = d
                    .attribute
                    .as_ref()
                    .map(|path| format!("{path:?}"))
                    .unwrap_or_default();
                (d.severity, d.summary.clone(), attribute, d.detail.clone())
            })
            .collect()
    }

    fn one_error_on(diags: &Diagnostics, attribute: &str) -> String {
        let errors: Vec<_> = found(diags)
            .into_iter()
            .filter(|(severity, ..)| *severity == Severity::Error)
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].2.contains(attribute), "{errors:?}");
        errors[0].3.clone()
    }

    #[test]
    fn endpoint_and_token_are_required_at_configure_only() {
        let empty = config(&[]);
        assert!(check(&empty, &no_env, false).is_empty());
        let diags = check(&empty, &no_env, true);
        let summaries: Vec<_> = found(&diags).into_iter().map(|d| d.1).collect();
        assert_eq!(summaries, ["Missing PVE endpoint", "Missing API token"]);
    }

    #[test]
    fn the_environment_fills_in_and_a_bad_value_names_its_variable() {
        static ENV: &[(&str, &str)] = &[
            (ENV_ENDPOINT, ENDPOINT),
            (ENV_API_TOKEN, "terraform@pve!provider"),
            (ENV_FLEET, "Not A Fleet"),
        ];
        let diags = check(&config(&[]), &env_of(ENV), true);
        let found = found(&diags);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].1, "Invalid API token");
        assert!(
            found[0]
                .3
                .ends_with("(from the environment variable PROXMOX_VE_API_TOKEN)")
        );
        assert_eq!(found[1].1, "Invalid fleet");
        assert!(
            found[1]
                .3
                .ends_with("(from the environment variable PROXMOX_VE_FLEET)")
        );
    }

    #[test]
    fn configuration_wins_over_the_environment() {
        static ENV: &[(&str, &str)] = &[(ENV_ENDPOINT, "not a url"), (ENV_API_TOKEN, TOKEN)];
        let diags = check(
            &config(&[("endpoint", Value::string("ftp://pve1"))]),
            &env_of(ENV),
            true,
        );
        let detail = one_error_on(&diags, "endpoint");
        assert!(detail.ends_with("(attribute endpoint)"), "{detail}");
    }

    #[test]
    fn unknown_values_pass_validation_and_fail_configure_with_the_reason() {
        for name in ["endpoint", "api_token", "fleet"] {
            let mut attrs = vec![
                ("endpoint", Value::string(ENDPOINT)),
                ("api_token", Value::string(TOKEN)),
            ];
            attrs.retain(|(n, _)| *n != name);
            attrs.push((name, Value::Unknown));
            let config = config(&attrs);
            let settings = Settings::read(&config, &no_env);
            assert!(settings.check(&config, true).is_empty(), "{name}");
            let why = build(&settings, &config).expect_err(name);
            assert!(
                why.starts_with(&format!(
                    "`{name}` depends on a value known only after apply"
                )),
                "{why}"
            );
        }
    }

    #[test]
    fn insecure_from_the_environment_reads_words_and_refuses_others() {
        for (text, expected) in [("yes", true), ("1", true), ("FALSE", false), ("no", false)] {
            let lookup = move |name: &str| (name == ENV_INSECURE).then(|| text.to_owned());
            let settings = Settings::read(&config(&[]), &lookup);
            assert!(
                matches!(settings.insecure, Some(Ok(flag)) if flag == expected),
                "{text}"
            );
        }
        static ENV: &[(&str, &str)] = &[(ENV_INSECURE, "maybe")];
        let detail = one_error_on(&check(&config(&[]), &env_of(ENV), false), "insecure");
        assert_eq!(
            detail,
            "PROXMOX_VE_INSECURE=`maybe` is not a boolean; use true or false"
        );
        // The attribute wins over the variable.
        let settings = Settings::read(&config(&[("insecure", Value::Bool(false))]), &env_of(ENV));
        assert!(matches!(settings.insecure, Some(Ok(false))));
    }

    #[test]
    fn insecure_beside_a_ca_warns_that_the_ca_does_nothing() {
        let config = config(&[
            ("insecure", Value::Bool(true)),
            ("ca_cert", Value::string(CA_PEM)),
        ]);
        let found = found(&check(&config, &no_env, false));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, Severity::Warning);
        assert_eq!(found[0].1, "Both ca_cert and insecure are set");
        assert!(found[0].2.contains("insecure"));
    }

    #[test]
    fn a_ca_from_the_environment_may_be_a_path_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, CA_PEM).unwrap();
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let missing = dir.path().join("missing.pem");
        let with = |path: &std::path::Path| {
            let path = path.display().to_string();
            move |name: &str| (name == ENV_CA_CERT).then(|| path.clone())
        };
        assert!(check(&config(&[]), &with(&good), false).is_empty());
        let detail = one_error_on(&check(&config(&[]), &with(&not_pem), false), "ca_cert");
        assert!(detail.starts_with("the CA holds no `-----BEGIN CERTIFICATE-----` block"));
        assert!(detail.contains(&format!("(read from the file `{}`)", not_pem.display())));
        assert!(detail.ends_with("(from the environment variable PROXMOX_VE_CA_CERT)"));
        let detail = one_error_on(&check(&config(&[]), &with(&missing), false), "ca_cert");
        assert!(
            detail.starts_with(&format!(
                "`{}` is neither PEM text nor a readable file",
                missing.display()
            )),
            "{detail}"
        );
        assert!(detail.ends_with("(from the environment variable PROXMOX_VE_CA_CERT)"));
    }

    /// The attribute reads as the environment variable does: PEM text, or a file's path.
    #[test]
    fn a_ca_in_the_provider_block_may_be_a_path_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, CA_PEM).unwrap();
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let ca = |path: &std::path::Path| {
            config(&[("ca_cert", Value::string(path.display().to_string()))])
        };
        assert!(check(&ca(&good), &no_env, false).is_empty());
        let detail = one_error_on(&check(&ca(&not_pem), &no_env, false), "ca_cert");
        assert!(
            detail.starts_with("the CA holds no `-----BEGIN CERTIFICATE-----` block"),
            "{detail}"
        );
        assert!(detail.ends_with("(attribute ca_cert)"), "{detail}");
        let missing = ca(std::path::Path::new("/nonexistent/pve-root-ca.pem"));
        let detail = one_error_on(&check(&missing, &no_env, false), "ca_cert");
        assert!(
            detail.starts_with("`/nonexistent/pve-root-ca.pem` is neither PEM text nor a readable"),
            "{detail}"
        );
        assert!(detail.ends_with("(attribute ca_cert)"), "{detail}");
        // The configured path wins over the variable, and the client trusts the file's CA.
        static ENV: &[(&str, &str)] = &[(ENV_CA_CERT, "/nonexistent/other.pem")];
        let mut config = ca(&good);
        config.set_attr("endpoint", Value::string(ENDPOINT));
        config.set_attr("api_token", Value::string(TOKEN));
        let settings = Settings::read(&config, &env_of(ENV));
        assert!(settings.check(&config, true).is_empty());
        let configured = build(&settings, &config).unwrap();
        assert!(matches!(
            &configured.client.config().tls,
            pve::TlsTrust::CaPem(pem) if pem == CA_PEM
        ));
    }

    #[test]
    fn storages_and_the_vmid_range_point_at_their_attributes() {
        let bad_storage = config(&[("seed_storage", Value::string("has space"))]);
        let detail = one_error_on(&check(&bad_storage, &no_env, false), "seed_storage");
        assert!(!detail.is_empty());
        let bad_clone = config(&[("clone_storage", Value::string("-x"))]);
        one_error_on(&check(&bad_clone, &no_env, false), "clone_storage");

        let negative = config(&[("vmid_range_end", Value::number(-5))]);
        let detail = one_error_on(&check(&negative, &no_env, false), "vmid_range_end");
        assert_eq!(detail, "-5 is not a VMID");
        let reversed = config(&[
            ("vmid_range_start", Value::number(9000)),
            ("vmid_range_end", Value::number(8000)),
        ]);
        one_error_on(&check(&reversed, &no_env, false), "vmid_range_start");
        let fine = config(&[
            ("vmid_range_start", Value::number(8000)),
            ("vmid_range_end", Value::number(8999)),
        ]);
        assert_eq!(
            vmid_range(&fine).unwrap(),
            VmidRange::new(8000, 8999).unwrap()
        );
        assert_eq!(vmid_range(&config(&[])).unwrap(), VmidRange::default());
    }

    /// A value of type `ty`, for a configuration that sets an attribute.
    fn sample(ty: &tfplugin::Type) -> Value {
        use tfplugin::Type;
        match ty {
            Type::String | Type::Dynamic => Value::string("x"),
            Type::Number => Value::number(1),
            Type::Bool => Value::Bool(true),
            Type::List(element) => Value::List(vec![sample(element)]),
            Type::Set(element) => Value::Set(vec![sample(element)]),
            Type::Map(element) => Value::Map([("k".to_owned(), sample(element))].into()),
            Type::Tuple(elements) => Value::Tuple(elements.iter().map(sample).collect()),
            Type::Object(fields) => {
                Value::object(fields.iter().map(|(name, ty)| (name.as_str(), sample(ty))))
            }
        }
    }

    /// For each read-only attribute of `block`, at any depth below configurable ones: its path
    /// and a configuration that sets it alone.
    fn read_only_settings(block: &tfplugin::Block) -> Vec<(String, Value)> {
        use tfplugin::{AttributeKind, Nesting, read_only::is_read_only};
        let mut settings = Vec::new();
        for attribute in &block.attributes {
            let name = attribute.name.as_str();
            if is_read_only(attribute) {
                let value = sample(&attribute.value_type());
                settings.push((name.to_owned(), Value::object([(name, value)])));
                continue;
            }
            let AttributeKind::Nested(nested) = &attribute.kind else {
                continue;
            };
            let inner = tfplugin::Block {
                attributes: nested.attributes.clone(),
                ..Default::default()
            };
            for (path, object) in read_only_settings(&inner) {
                let (value, path) = match nested.nesting {
                    Nesting::Single => (object, format!("{name}.{path}")),
                    _ => (Value::List(vec![object]), format!("{name}[0].{path}")),
                };
                settings.push((path, Value::object([(name, value)])));
            }
        }
        settings
    }

    fn path_text(path: &tfplugin::AttributePath) -> String {
        path.steps()
            .iter()
            .map(|step| match step {
                tfplugin::PathStep::Attribute(name) => format!(".{name}"),
                tfplugin::PathStep::Index(index) => format!("[{index}]"),
                tfplugin::PathStep::Key(key) => format!("[{key:?}]"),
            })
            .collect::<String>()
            .trim_start_matches('.')
            .to_owned()
    }

    /// Every read-only attribute of every resource and data source, found in their schemas,
    /// is refused where a configuration sets it (by the server's check at validate,
    /// `tfplugin::read_only`), and nothing configurable is.
    #[test]
    fn every_read_only_attribute_of_every_schema_is_refused_where_it_is_set() {
        use tfplugin::read_only::{SUMMARY, refuse_read_only};
        let provider = ProxmoxProvider::new();
        let mut schemas: Vec<(String, Schema)> = provider
            .resources()
            .iter()
            .map(|r| (r.type_name().to_owned(), r.schema()))
            .collect();
        schemas.extend(
            provider
                .data_sources()
                .iter()
                .map(|d| (d.type_name().to_owned(), d.schema())),
        );
        let mut refused = Vec::new();
        for (type_name, schema) in &schemas {
            let block = &schema.block;
            for (path, config) in read_only_settings(block) {
                let diags = refuse_read_only(block, &config);
                let found: Vec<_> = diags
                    .iter()
                    .map(|d| (d.summary.as_str(), d.attribute.as_ref().map(path_text)))
                    .collect();
                assert_eq!(found, [(SUMMARY, Some(path.clone()))], "{type_name}");
                refused.push(format!("{type_name}.{path}"));
            }
            let configurable = Value::object(
                block
                    .attributes
                    .iter()
                    .filter(|a| !tfplugin::read_only::is_read_only(a))
                    .map(|a| (a.name.as_str(), sample(&a.value_type()))),
            );
            assert!(
                refuse_read_only(block, &configurable).is_empty(),
                "{type_name}"
            );
        }
        for expected in [
            "proxmox_proxy_vm.id",
            "proxmox_proxy_vm.ipv4_address",
            "proxmox_proxy_vm.seed_hash",
            "proxmox_proxy_vm.seed_volume",
            "proxmox_proxy_vm.current_node",
            "proxmox_proxy_vm.status",
            "proxmox_proxy_vms.vms",
            "proxmox_health.healthy",
        ] {
            assert!(
                refused.iter().any(|r| r == expected),
                "{expected}: {refused:?}"
            );
        }
    }

    #[test]
    fn build_takes_defaults_the_fleet_and_the_trust_asked_for() {
        static ENV: &[(&str, &str)] = &[(ENV_FLEET, "blue")];
        let config = config(&[
            ("endpoint", Value::string(ENDPOINT)),
            ("api_token", Value::string(TOKEN)),
            ("ca_cert", Value::string(CA_PEM)),
            ("clone_storage", Value::string("local-lvm")),
        ]);
        let settings = Settings::read(&config, &env_of(ENV));
        let configured = build(&settings, &config).unwrap();
        assert_eq!(configured.seed_storage, DEFAULT_SEED_STORAGE);
        assert_eq!(configured.clone_storage.as_deref(), Some("local-lvm"));
        assert_eq!(configured.fleet, "blue");
        assert!(matches!(
            configured.client.config().tls,
            pve::TlsTrust::CaPem(_)
        ));
        assert!(configured.client.config().token_refusal_is_final);

        let mut insecure = config.clone();
        insecure.set_attr("insecure", Value::Bool(true));
        insecure.set_attr("seed_storage", Value::string("proxy-seeds"));
        let configured = build(&Settings::read(&insecure, &no_env), &insecure).unwrap();
        assert!(matches!(
            configured.client.config().tls,
            pve::TlsTrust::Insecure
        ));
        assert_eq!(configured.seed_storage, "proxy-seeds");
        assert_eq!(configured.fleet, "");
    }
}
