//! Acceptance: Terraform installs, validates and configures the provider offline, points
//! diagnostics at the attribute at fault, and shows our log lines at their levels. Every test
//! here also runs in live mode (see `tests/provider/support/host.rs`).

use crate::support;

use support::{Host, Workspace};

fn provider_block(extra: &str) -> String {
    format!(
        "{}\nprovider \"proxmox\" {{\n{extra}\n}}\n",
        Workspace::preamble()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn init_validate_and_schema_work_offline() {
    let Some(host) = Host::start(
        "init_validate_and_schema_work_offline",
        pvesim::SimConfig::default,
    )
    .await
    else {
        return;
    };
    let target = host.target.clone();
    let ws = Workspace::new(target);
    ws.write_main_tf(&provider_block(""));
    ws.init().await;
    ws.terraform(&["validate", "-no-color"]).await.success();

    let schema = ws
        .terraform(&["providers", "schema", "-json"])
        .await
        .success();
    let json: serde_json::Value = serde_json::from_str(&schema.stdout()).unwrap();
    let schemas = &json["provider_schemas"]["registry.terraform.io/proxyvm/proxmox"];
    let provider = &schemas["provider"]["block"]["attributes"];
    assert_eq!(provider["api_token"]["sensitive"], true, "{provider}");
    for name in [
        "endpoint",
        "ca_cert",
        "insecure",
        "seed_storage",
        "vmid_range_start",
        "vmid_range_end",
    ] {
        assert!(
            provider[name].is_object(),
            "provider schema lacks {name}: {provider}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_token_and_endpoint_point_at_their_attributes() {
    let Some(host) = Host::start(
        "bad_token_and_endpoint_point_at_their_attributes",
        pvesim::SimConfig::default,
    )
    .await
    else {
        return;
    };
    let target = host.target.clone();
    let ws = Workspace::new(target);
    // Terraform prunes a provider no resource or data source uses, so one is declared.
    ws.write_main_tf(&format!(
        "{}\ndata \"proxmox_proxy_vms\" \"all\" {{}}\n",
        provider_block(
            "  api_token = \"terraform@pve-no-token-name=supersecret\"\n  endpoint = \
                \"http://pve1:8006\"",
        )
    ));
    ws.init().await;
    let out = ws.terraform(&["validate", "-no-color"]).await.failure();
    let text = out.all_text();
    assert!(text.contains("Invalid API token"), "{text}");
    assert!(
        text.contains("api_token = "),
        "diagnostic does not point at api_token:\n{text}"
    );
    assert!(text.contains("Invalid PVE endpoint"), "{text}");
    assert!(
        text.contains("endpoint = "),
        "diagnostic does not point at endpoint:\n{text}"
    );
    // Terraform quotes the configuration line itself (`NN:   api_token = …`); our own
    // summaries and details must never repeat the secret.
    let ours: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.trim_start()
                .split_once(':')
                .is_none_or(|(n, _)| n.parse::<u32>().is_err())
        })
        .collect();
    assert!(
        !ours.join("\n").contains("supersecret"),
        "the secret leaked into a diagnostic:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_environment_token_is_named_at_plan() {
    let Some(host) = Host::start(
        "bad_environment_token_is_named_at_plan",
        pvesim::SimConfig::default,
    )
    .await
    else {
        return;
    };
    let mut target = host.target.clone();
    target.token = "not-a-token".into();
    let ws = Workspace::new(target);
    ws.write_main_tf(&format!(
        "{}\ndata \"proxmox_proxy_vms\" \"all\" {{}}\n",
        provider_block("")
    ));
    ws.init().await;
    let out = ws
        .terraform(&["plan", "-input=false", "-no-color"])
        .await
        .failure();
    let text = out.all_text();
    assert!(text.contains("Invalid API token"), "{text}");
    assert!(
        text.contains("PROXMOX_VE_API_TOKEN"),
        "the error does not name the variable:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn debug_log_shows_provider_lines_at_their_levels() {
    let Some(host) = Host::start(
        "debug_log_shows_provider_lines_at_their_levels",
        pvesim::SimConfig::default,
    )
    .await
    else {
        return;
    };
    let target = host.target.clone();
    let mut ws = Workspace::new(target);
    ws.write_main_tf(&format!(
        "{}\ndata \"proxmox_proxy_vms\" \"all\" {{}}\n",
        provider_block("")
    ));
    ws.init().await;
    ws.set_env("TF_LOG", "debug");
    let out = ws
        .terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();
    let log = out.stderr();
    // Terraform re-emits parsed hclog lines as "[LEVEL] provider.terraform-provider-proxmox…:
    // message".
    let ours: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("provider.terraform-provider-proxmox"))
        .collect();
    assert!(
        ours.iter()
            .any(|l| l.contains("[DEBUG]") && l.contains("/cluster/resources")),
        "no DEBUG line about the API call:\n{}",
        ours.join("\n")
    );
    assert!(
        !log.contains(&ws.target.token.rsplit_once('=').unwrap().1.to_owned()),
        "the token secret appears in the debug log"
    );
}

/// `ca_cert` in the provider block takes the path of a PEM file as well as PEM text, as
/// `PROXMOX_VE_CA_CERT` does; a path that is not a readable PEM file is named at validate.
#[tokio::test(flavor = "multi_thread")]
async fn ca_cert_takes_a_file_path_in_the_provider_block() {
    let test = "ca_cert_takes_a_file_path_in_the_provider_block";
    let Some(host) = Host::start(test, pvesim::SimConfig::default).await else {
        return;
    };
    let mut target = host.target.clone();
    let Some(pem) = target.ca_pem.take() else {
        support::skip_part(
            test,
            "all",
            "the host's certificate chains to a system root",
        );
        return;
    };
    // The variable is unset (`ca_pem` taken): only the attribute can make the CA trusted.
    let ws = Workspace::new(target);
    let ca_path = ws.dir.path().join("pve-root-ca.pem");
    std::fs::write(&ca_path, pem).unwrap();
    let with_ca = |path: &str| {
        format!(
            "{}\ndata \"proxmox_proxy_vms\" \"all\" {{}}\n",
            provider_block(&format!("  ca_cert = \"{path}\""))
        )
    };
    ws.write_main_tf(&with_ca(&ca_path.display().to_string()));
    ws.init().await;
    ws.terraform(&["plan", "-input=false", "-no-color"])
        .await
        .success();

    let missing = ws.dir.path().join("missing.pem").display().to_string();
    ws.write_main_tf(&with_ca(&missing));
    let out = ws.terraform(&["validate", "-no-color"]).await.failure();
    let text = support::flat(&out.all_text());
    assert!(text.contains("Invalid CA certificate"), "{text}");
    assert!(
        text.contains(&format!(
            "`{missing}` is neither PEM text nor a readable file"
        )),
        "{text}"
    );
    assert!(
        text.contains("ca_cert = "),
        "not pointed at ca_cert:\n{text}"
    );
}
