//! Module authors' path, run as they would run it, against the `pve-sim` binary:
//!
//! - the example module's own `terraform test` (examples/modules/proxy-fleet/tests/) passes
//!   when the commands of docs/guides/testing-modules.md run in its directory (pve-sim
//!   started as they say, the provider configured from the files pve-sim writes), and prints
//!   what the guide shows;
//! - the shell commands of docs/guides/installation.md, typed into a fresh shell with a fresh
//!   home directory, install the provider through a filesystem mirror and get a module of
//!   the user's own to `init` and `apply` against pve-sim;
//! - `pve-sim --help` and `--print-world` describe the world those guides rely on.

mod pve_sim_bin;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use pve_sim_bin::pve_sim_binary;
use support::{Target, Workspace, acceptance_enabled, terraform_path};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_module_passes_its_terraform_tests_against_pve_sim() {
    if !acceptance_enabled("the_example_module_passes_its_terraform_tests_against_pve_sim") {
        return;
    }
    let guide = std::fs::read_to_string(root().join("docs/guides/testing-modules.md")).unwrap();
    let section = "## A module and its tests";
    let commands = sh_blocks_under(&guide, section).join("\n");
    let shown_output = fenced_blocks_under(&guide, section, "text")
        .pop()
        .expect("the guide shows no output of terraform test");

    // The environment points at a closed port: the test files' provider blocks must be what
    // configures the provider, from the files pve-sim wrote.
    let ws = Workspace::new(Target {
        endpoint: "https://127.0.0.1:9".into(),
        token: "nobody@pve!unused=unused".into(),
        ca_pem: None,
    });
    let module = ws.work_dir();
    copy_dir(&root().join("examples/modules/proxy-fleet"), &module);
    let bin = ws.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(pve_sim_binary(), bin.join("pve-sim")).unwrap();
    std::os::unix::fs::symlink(terraform_path(), bin.join("terraform")).unwrap();

    let out = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c"])
        .arg(format!(
            "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{commands}"
        ))
        .current_dir(&module)
        .env("PATH", path_with(&bin))
        .env("TF_CLI_CONFIG_FILE", ws.dir.path().join("cli.tfrc"))
        .env("CHECKPOINT_DISABLE", "1")
        .env("PROXMOX_VE_ENDPOINT", &ws.target.endpoint)
        .env("PROXMOX_VE_API_TOKEN", &ws.target.token)
        .env_remove("PROXMOX_VE_CA_CERT")
        .env_remove("TF_LOG")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    // The words a user sees, without the colours the CLI adds.
    let stdout = without_ansi_escapes(&String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "the guide's commands failed:\n{commands}\n--- stdout\n{stdout}\n--- stderr\n{}\n--- pve-sim.log\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(module.join("pve-sim.log")).unwrap_or_default()
    );
    assert!(
        stdout.contains(&shown_output),
        "terraform test did not print what the guide shows:\n{shown_output}\n--- got\n{stdout}"
    );
}

/// The guide shows the example's files as they are.
#[test]
fn the_testing_guide_quotes_the_example_module_as_it_is() {
    let guide = std::fs::read_to_string(root().join("docs/guides/testing-modules.md")).unwrap();
    for file in ["tests/fleet.tftest.hcl", "tests/lab-world.json"] {
        let text = std::fs::read_to_string(root().join("examples/modules/proxy-fleet").join(file))
            .unwrap();
        assert!(
            guide.contains(&text),
            "docs/guides/testing-modules.md does not quote examples/modules/proxy-fleet/{file} as it is"
        );
    }
}

/// Removes `ESC [ … letter` sequences (SGR colours and the like).
fn without_ansi_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The fenced `sh` blocks of a markdown section (from `heading` to the next `## `).
fn sh_blocks_under(markdown: &str, heading: &str) -> Vec<String> {
    let blocks = fenced_blocks_under(markdown, heading, "sh");
    assert!(!blocks.is_empty(), "no sh blocks under {heading:?}");
    blocks
}

/// The fenced blocks of one language in a markdown section.
fn fenced_blocks_under(markdown: &str, heading: &str, language: &str) -> Vec<String> {
    let mut lines = markdown.lines().skip_while(|line| *line != heading);
    assert!(lines.next().is_some(), "no section {heading:?}");
    let opening = format!("```{language}");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    let mut in_other_block = false;
    for line in lines {
        match current.as_mut() {
            None if in_other_block => in_other_block = line != "```",
            None if line.starts_with("## ") => break,
            None if line == opening => current = Some(String::new()),
            None if line.starts_with("```") => in_other_block = true,
            None => {}
            Some(_) if line == "```" => blocks.push(current.take().unwrap()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

/// A user reading README top to bottom meets the installation guide before any `init`.
#[test]
fn readme_links_the_installation_guide_before_any_init() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let link = readme
        .find("(docs/guides/installation.md)")
        .expect("README does not link docs/guides/installation.md");
    // The command, not words like cloud-init.
    let first_init = ["`init`", "terraform init", "tofu init"]
        .iter()
        .filter_map(|command| readme.find(command))
        .min()
        .expect("README never mentions init");
    assert!(
        link < first_init,
        "README mentions init (byte {first_init}) before it links the installation guide (byte {link})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_installation_guide_typed_into_a_fresh_shell_applies_a_users_module() {
    if !acceptance_enabled("the_installation_guide_typed_into_a_fresh_shell_applies_a_users_module")
    {
        return;
    }
    let guide = std::fs::read_to_string(root().join("docs/guides/installation.md")).unwrap();
    let mut commands = Vec::new();
    for heading in [
        "## A local build through a filesystem mirror",
        "## Check it: a module of your own against pve-sim",
    ] {
        commands.extend(sh_blocks_under(&guide, heading));
    }

    let shell = FreshShell::new();
    let (success, stdout, stderr) = shell.run(&commands.join("\n")).await;
    assert!(
        success,
        "the guide's commands failed:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    for expected in [
        "Installed proxyvm/proxmox v",
        "(unauthenticated)",
        "Apply complete! Resources: 1 added, 0 changed, 0 destroyed.",
        "address = \"10.",
        "Destroy complete! Resources: 1 destroyed.",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
    // The mirror sits where the guide says it does.
    let installed: PathBuf = shell
        .home()
        .join(".terraform.d/proxyvm-mirror/registry.terraform.io/proxyvm/proxmox")
        .join(support::PROVIDER_VERSION);
    assert!(installed.is_dir(), "{} is missing", installed.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_installation_guides_dev_overrides_need_no_init() {
    if !acceptance_enabled("the_installation_guides_dev_overrides_need_no_init") {
        return;
    }
    let guide = std::fs::read_to_string(root().join("docs/guides/installation.md")).unwrap();
    let commands = sh_blocks_under(&guide, "## `dev_overrides` while developing the provider");
    // Then, as the guide says, straight to a command that needs the provider: no init.
    let check = r#"
mkdir -p "$HOME/dev-check" && cd "$HOME/dev-check"
printf '%s\n' 'terraform {' '  required_providers {' '    proxmox = { source = "proxyvm/proxmox" }' '  }' '}' 'data "proxmox_proxy_vms" "all" {}' >main.tf
terraform validate -no-color
"#;
    let shell = FreshShell::new();
    let (success, stdout, stderr) = shell
        .run(&format!("{}\n{check}", commands.join("\n")))
        .await;
    assert!(success, "--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let all = format!("{stdout}{stderr}");
    for expected in [
        "Provider development overrides are in effect",
        "The configuration is valid",
    ] {
        assert!(all.contains(expected), "no {expected:?} in:\n{all}");
    }
}

/// A shell as a new user has it: an empty home directory, a clone of this repository as
/// the working directory, the system's tools, and nothing of ours in the environment.
struct FreshShell {
    scratch: tempfile::TempDir,
}

impl FreshShell {
    fn new() -> Self {
        let scratch = tempfile::Builder::new()
            .prefix("fresh-shell-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        for dir in ["home", "clone", "bin"] {
            std::fs::create_dir(scratch.path().join(dir)).unwrap();
        }
        let shell = Self { scratch };
        // The clone: what the guides' commands read from it.
        std::fs::copy(
            root().join("Cargo.toml"),
            shell.clone_dir().join("Cargo.toml"),
        )
        .unwrap();
        // The guides' builds stand in for the binaries cargo built for this test run: a
        // nested cargo build would wait on the lock this run holds. Any other cargo command
        // fails the test.
        let shim = format!(
            "#!/bin/sh\nset -eu\ncase \"$*\" in\n  \"build --release --locked --workspace --bins\")\n    mkdir -p target/release\n    ln -sf '{provider}' target/release/terraform-provider-proxmox\n    ln -sf '{sim}' target/release/pve-sim ;;\n  \"build --locked --bin terraform-provider-proxmox\")\n    mkdir -p target/debug\n    ln -sf '{provider}' target/debug/terraform-provider-proxmox ;;\n  *)\n    echo \"the guide ran cargo $*, which this test does not stand in for\" >&2\n    exit 1 ;;\nesac\n",
            provider = env!("CARGO_BIN_EXE_terraform-provider-proxmox"),
            sim = pve_sim_binary().display()
        );
        let bin = shell.scratch.path().join("bin");
        write_executable(&bin.join("cargo"), &shim);
        std::os::unix::fs::symlink(terraform_path(), bin.join("terraform")).unwrap();
        shell
    }

    fn home(&self) -> PathBuf {
        self.scratch.path().join("home")
    }

    fn clone_dir(&self) -> PathBuf {
        self.scratch.path().join("clone")
    }

    /// Runs `script` with `bash -euo pipefail` in the clone: (success, stdout, stderr).
    async fn run(&self, script: &str) -> (bool, String, String) {
        // A background pve-sim the script started must not outlive a failed step.
        let script = format!("trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}");
        let out = tokio::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(self.clone_dir())
            .env_clear()
            .env("HOME", self.home())
            .env("PATH", path_with(&self.scratch.path().join("bin")))
            // Offline: no version check against checkpoint-api.hashicorp.com.
            .env("CHECKPOINT_DISABLE", "1")
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        // The words a user sees, without the colours the CLI adds.
        (
            out.status.success(),
            without_ansi_escapes(&String::from_utf8_lossy(&out.stdout)),
            without_ansi_escapes(&String::from_utf8_lossy(&out.stderr)),
        )
    }
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn pve_sim_describes_the_world_the_guides_rely_on() {
    if !acceptance_enabled("pve_sim_describes_the_world_the_guides_rely_on") {
        return;
    }
    let run = |args: &[&str]| {
        let out = Command::new(pve_sim_binary())
            .args(args)
            .current_dir(root())
            .output()
            .unwrap();
        assert!(out.status.success(), "pve-sim {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let help = run(&["--help"]);
    let world = run(&["--print-world"]);
    for text in [&help, &world] {
        for expected in [
            "pve1",
            "pve3",
            "debian-13-proxy",
            "proxy-seeds",
            "terraform@pve!provider",
            "DIR/endpoint",
            "DIR/token",
            "DIR/ca.pem",
            "PROXMOX_VE_CA_CERT",
        ] {
            assert!(text.contains(expected), "no {expected:?} in:\n{text}");
        }
    }
    assert!(help.contains("--print-world"), "{help}");
    assert!(world.contains("VMID 9000 on pve1"), "{world}");

    let lab = run(&[
        "--print-world",
        "--config",
        "examples/modules/proxy-fleet/tests/lab-world.json",
    ]);
    for expected in ["hv1", "offline", "ubuntu-2404-haproxy", "isos"] {
        assert!(lab.contains(expected), "no {expected:?} in:\n{lab}");
    }
    assert!(
        !lab.contains("pve1"),
        "the lab world replaces the nodes:\n{lab}"
    );

    let refused = Command::new(pve_sim_binary())
        .args(["--print-world", "--config", "Cargo.toml"])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}
