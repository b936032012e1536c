//! Every example under `examples/` is formatted and passes `terraform validate` against the
//! provider built from this checkout, offline.

use crate::support;

use std::path::{Path, PathBuf};

use support::{Target, Workspace, acceptance_enabled, terraform_path};

/// The provider other Proxmox providers are shown beside, and the local name ours takes there.
const OTHER_PROVIDER: &str = "bpg/proxmox";
const OUR_LOCAL_NAME_BESIDE_IT: &str = "proxyvm";

fn examples_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Every directory below `examples/` that holds `.tf` files.
fn example_dirs(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    if entries
        .iter()
        .any(|p| p.extension().is_some_and(|e| e == "tf"))
    {
        found.push(dir.to_owned());
    }
    for entry in entries.iter().filter(|p| p.is_dir()) {
        example_dirs(entry, found);
    }
}

fn offline_target() -> Target {
    // validate configures no provider, so nothing is ever contacted.
    Target {
        endpoint: "https://127.0.0.1:9".into(),
        token: "examples@pve!validate=unused".into(),
        ca_pem: None,
    }
}

#[test]
fn the_registry_layout_examples_exist() {
    let root = examples_root();
    for file in [
        "provider/provider.tf",
        "resources/proxmox_proxy_vm/resource.tf",
        "resources/proxmox_proxy_vm/import.sh",
        "data-sources/proxmox_health/data-source.tf",
        "data-sources/proxmox_proxy_vms/data-source.tf",
        "quickstart/main.tf",
        "health-gated/main.tf",
        "beside-another-provider/main.tf",
        "modules/proxy-fleet/main.tf",
        "modules/proxy-fleet/tests/fleet.tftest.hcl",
        "modules/proxy-fleet/tests/lab.tftest.hcl",
        "modules/proxy-fleet/tests/lab-world.json",
    ] {
        assert!(root.join(file).is_file(), "examples/{file} is missing");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_example_is_formatted_and_validates() {
    if !acceptance_enabled("every_example_is_formatted_and_validates") {
        return;
    }
    let fmt = std::process::Command::new(terraform_path())
        .args(["fmt", "-check", "-recursive", "-diff", "-no-color"])
        .arg(examples_root())
        .env("CHECKPOINT_DISABLE", "1")
        .output()
        .unwrap();
    assert!(
        fmt.status.success(),
        "examples are not `terraform fmt`-formatted:\n{}",
        String::from_utf8_lossy(&fmt.stdout)
    );

    let mut dirs = Vec::new();
    example_dirs(&examples_root(), &mut dirs);
    assert!(
        dirs.len() >= 8,
        "expected at least 8 example directories, found {dirs:?}"
    );
    let mut failures = Vec::new();
    for dir in &dirs {
        let name = dir
            .strip_prefix(examples_root())
            .unwrap()
            .display()
            .to_string();
        if let Err(why) = validate_example(dir).await {
            failures.push(format!("examples/{name}:\n{why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} example(s) do not validate:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

async fn validate_example(dir: &Path) -> Result<(), String> {
    let ws = Workspace::new(offline_target());
    let mut config = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tf") {
            let text = std::fs::read_to_string(&path).unwrap();
            config.push_str(&text);
            std::fs::copy(&path, ws.work_dir().join(path.file_name().unwrap())).unwrap();
        }
    }
    // Registry snippets (resource.tf, data-source.tf) leave out the terraform block, as
    // tfplugindocs' conventions do; a user pastes them beside their own.
    if !config.contains("required_providers") {
        std::fs::write(ws.work_dir().join("versions.tf"), Workspace::preamble()).unwrap();
    }
    if config.contains(&format!("\"{OTHER_PROVIDER}\"")) {
        install_other_provider_stand_in(&ws);
        check_provider_meta_arguments(&config)?;
    }
    let init = ws
        .terraform(&["init", "-input=false", "-no-color", "-backend=false"])
        .await;
    if init.code() != 0 {
        return Err(format!("init failed:\n{}", init.all_text()));
    }
    let validate = ws.terraform(&["validate", "-no-color"]).await;
    if validate.code() != 0 {
        return Err(validate.all_text());
    }
    Ok(())
}

/// The other provider cannot be downloaded offline. Its configuration in the example only
/// uses `endpoint` and `insecure`, which our provider block also has, so our binary stands
/// in for it at init and validate. That proves the wiring (two local names, the
/// `provider =` meta-arguments, our resources' arguments); what it cannot prove, that
/// each of our blocks names our provider, `check_provider_meta_arguments` checks.
fn install_other_provider_stand_in(ws: &Workspace) {
    let mirror = ws.dir.path().join("mirror");
    let ours = mirror.join("registry.terraform.io/proxyvm/proxmox");
    let version_dir = std::fs::read_dir(&ours)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let platform_dir = std::fs::read_dir(&version_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let binary = std::fs::read_dir(&platform_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let stand_in = mirror
        .join("registry.terraform.io")
        .join(OTHER_PROVIDER)
        .join("0.0.1")
        .join(platform_dir.file_name().unwrap());
    std::fs::create_dir_all(&stand_in).unwrap();
    std::fs::copy(&binary, stand_in.join("terraform-provider-proxmox_v0.0.1")).unwrap();
    let cli_config = format!(
        "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = \
            [\"registry.terraform.io/proxyvm/proxmox\", \
            \"registry.terraform.io/{OTHER_PROVIDER}\"]\n  }}\n}}\n",
        mirror.display()
    );
    std::fs::write(ws.dir.path().join("cli.tfrc"), cli_config).unwrap();
}

/// Every block of one of our types (`proxmox_proxy_vm`, `proxmox_health`, `proxmox_proxy_vms`)
/// must say `provider = proxyvm`; otherwise Terraform would give it to the other provider.
fn check_provider_meta_arguments(config: &str) -> Result<(), String> {
    let ours = [
        "\"proxmox_proxy_vm\"",
        "\"proxmox_health\"",
        "\"proxmox_proxy_vms\"",
    ];
    let mut problems = Vec::new();
    let mut current: Option<(String, bool)> = None;
    for line in config.lines() {
        let trimmed = line.trim();
        if (line.starts_with("resource ") || line.starts_with("data "))
            && ours.iter().any(|t| line.contains(t))
        {
            current = Some((trimmed.trim_end_matches('{').trim().to_owned(), false));
        } else if let Some((_, named)) = current.as_mut() {
            let compact: String = trimmed.chars().filter(|c| !c.is_whitespace()).collect();
            if compact == format!("provider={OUR_LOCAL_NAME_BESIDE_IT}") {
                *named = true;
            }
            if line.starts_with('}') {
                let (block, named) = current.take().unwrap();
                if !named {
                    problems.push(format!(
                        "{block} lacks `provider = {OUR_LOCAL_NAME_BESIDE_IT}`"
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn a_block_without_the_provider_meta_argument_is_caught() {
    let bad = "resource \"proxmox_proxy_vm\" \"x\" {\n  name = \"a\"\n}\n";
    assert!(
        check_provider_meta_arguments(bad)
            .unwrap_err()
            .contains("lacks")
    );
    let good = "data \"proxmox_health\" \"h\" {\n  provider  = proxyvm\n}\n";
    assert!(check_provider_meta_arguments(good).is_ok());
}
