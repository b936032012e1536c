//! Module authors' path, run as they would run it, against the `pve-sim` binary:
//!
//! - the example module's own `terraform test` (examples/modules/proxy-fleet/tests/) passes
//!   when the commands of docs/guides/testing-modules.md run in its directory (pve-sim
//!   started as they say, the provider configured from the files pve-sim writes), and prints
//!   what the guide shows;
//! - the shell commands of docs/guides/installation.md, typed into a fresh shell with a fresh
//!   home directory, install the provider through a filesystem mirror and get a module of
//!   the user's own to `init` and `apply` against pve-sim;
//! - `pve-sim --help` and `--print-world` describe the world those guides rely on;
//! - every command block of the guides is run against pve-sim by one of these tests or says
//!   why it cannot be (`GUIDE_BLOCKS`), and the testing guide's CI job runs step by step.

use crate::pve_sim_bin;
use crate::support;

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
        "the guide's commands failed:\n{commands}\n--- stdout\n{stdout}\n--- stderr\n{}\n--- \
            pve-sim.log\n{}",
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
            "docs/guides/testing-modules.md does not quote examples/modules/proxy-fleet/{file} as \
                it is"
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
        "README mentions init (byte {first_init}) before it links the installation guide (byte \
            {link})"
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
    // The cleanup comes last: first the other guides' commands that need a running
    // simulator and the module the user just applied (see `GUIDE_BLOCKS`).
    let cleanup = commands.pop().expect("the guide cleans up");
    assert!(cleanup.contains("kill \"$sim_pid\""), "{cleanup}");
    let guide_block = |file: &str, first_line: &str| {
        shell_blocks(&std::fs::read_to_string(root().join("docs/guides").join(file)).unwrap())
            .into_iter()
            .find(|block| block.first_line() == first_line)
            .unwrap_or_else(|| panic!("docs/guides/{file} has no block starting {first_line:?}"))
            .code
    };
    commands.push(guide_block("troubleshooting.md", DEBUG_LOG_BLOCK));
    commands.push(guide_block("pve-setup.md", SWEEPER_BLOCK));
    // A Telmate user's variables, turned into ours as the migration guide says, reach the
    // same cluster: the module's plan is empty with them alone.
    commands.push(format!(
        "(\nexport PM_API_URL=\"$PROXMOX_VE_ENDPOINT/api2/json\" \
            PM_API_TOKEN_ID=\"${{PROXMOX_VE_API_TOKEN%%=*}}\" \
            PM_API_TOKEN_SECRET=\"${{PROXMOX_VE_API_TOKEN#*=}}\"\nunset PROXMOX_VE_ENDPOINT \
            PROXMOX_VE_API_TOKEN\n{}terraform plan -detailed-exitcode -no-color\necho \"telmate \
            variables: plan empty\"\n)\n",
        guide_block("coming-from-bpg-or-telmate.md", TELMATE_BLOCK)
    ));
    let shell = FreshShell::new();
    // In the clone again, as the testing guide says: pve-sim by name after a source build.
    commands.push(format!(
        "(\ncd '{}'\n{}command -v pve-sim\n)\n",
        shell.clone_dir().display(),
        guide_block("testing-modules.md", PVE_SIM_ON_PATH_BLOCK)
    ));
    commands.push(cleanup);

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
        // troubleshooting's debug apply, on the applied module: nothing to do, logs on stderr.
        "No changes. Your infrastructure matches the configuration.",
        // pve-setup's sweeper: nothing of a test run, and the user's VM untouched.
        "prefix tfacc-: 0 VMs and 0 seed ISOs left, 0 errors",
        "prefix tfacc-: 0 VMs and 0 seed ISOs deleted, 0 errors",
        "telmate variables: plan empty",
        "Destroy complete! Resources: 1 destroyed.",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
    let on_path = format!("{}/target/release/pve-sim", shell.clone_dir().display());
    assert!(stdout.contains(&on_path), "no {on_path:?} in:\n{stdout}");
    assert!(
        stderr.contains("[DEBUG]") || stderr.contains("@level\":\"debug"),
        "TF_LOG_PROVIDER=debug printed no provider log:\n{stderr}"
    );
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
printf '%s\n' 'terraform {' '  required_providers {' \
  '    proxmox = { source = "proxyvm/proxmox" }' '  }' '}' \
  'data "proxmox_proxy_vms" "all" {}' >main.tf
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
            "#!/bin/sh\nset -eu\ncase \"$*\" in\n  \"build --release --locked --workspace \
                --bins\")\n    mkdir -p target/release\n    ln -sf '{provider}' \
                target/release/terraform-provider-proxmox\n    ln -sf '{sim}' \
                target/release/pve-sim ;;\n  \"build --locked --bin \
                terraform-provider-proxmox\")\n    mkdir -p target/debug\n    ln -sf '{provider}' \
                target/debug/terraform-provider-proxmox ;;\n  \"run --bin proxmox-test-sweeper -- \
                \"*)\n    shift 4\n    exec '{sweeper}' \"$@\" ;;\n  *)\n    echo \"the guide ran \
                cargo $*, which this test does not stand in for\" >&2\n    exit 1 ;;\nesac\n",
            provider = env!("CARGO_BIN_EXE_terraform-provider-proxmox"),
            sim = pve_sim_binary().display(),
            sweeper = env!("CARGO_BIN_EXE_proxmox-test-sweeper"),
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

/// A fenced block of a guide, its fence's indentation taken off.
struct Block {
    file: String,
    language: String,
    code: String,
}

impl Block {
    fn first_line(&self) -> &str {
        self.code.lines().next().unwrap_or_default().trim_end()
    }
}

/// The fenced blocks of a markdown text (indented ones too, as in list items), with their
/// language.
fn shell_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, Block)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match current.as_mut() {
            None => {
                if let Some(language) = trimmed.strip_prefix("```") {
                    current = Some((
                        indent,
                        Block {
                            file: String::new(),
                            language: language.trim().to_owned(),
                            code: String::new(),
                        },
                    ));
                }
            }
            Some(_) if trimmed == "```" => blocks.push(current.take().unwrap().1),
            Some((fence, block)) => {
                block.code.push_str(line.get(*fence..).unwrap_or(trimmed));
                block.code.push('\n');
            }
        }
    }
    blocks
}

/// The fenced command blocks of every published guide: `sh`, `bash`, `shell`, and `yaml`
/// (the CI job).
fn guide_command_blocks() -> Vec<Block> {
    let mut found = Vec::new();
    let dir = root().join("docs/guides");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        for mut block in shell_blocks(&std::fs::read_to_string(&path).unwrap()) {
            if ["sh", "bash", "shell", "console", "yaml"].contains(&block.language.as_str()) {
                block.file = file.clone();
                found.push(block);
            }
        }
    }
    found
}

/// What becomes of one command block of a guide.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// Run as written against pve-sim by this test of this file.
    RunBy(&'static str),
    /// Not runnable against pve-sim, and why.
    Not(&'static str),
    /// Its commands run, on that test's own configuration (the guide shows fragments of
    /// one), in this test of tests/provider/acc_workflows.rs.
    WorkflowTest(&'static str),
}

const INSTALLATION_TEST: &str =
    "the_installation_guide_typed_into_a_fresh_shell_applies_a_users_module";
const DEV_OVERRIDES_TEST: &str = "the_installation_guides_dev_overrides_need_no_init";
const MODULE_TEST: &str = "the_example_module_passes_its_terraform_tests_against_pve_sim";
const CI_TEST: &str = "the_testing_guides_ci_job_runs_as_written";
const ON_A_PVE_NODE: &str = "runs in a PVE node's shell: it sets up a real cluster";
const PLACEHOLDERS: &str = "names a real cluster's endpoint, token or CA (example values)";

const DEBUG_LOG_BLOCK: &str = "TF_LOG_PROVIDER=debug terraform apply";
const SWEEPER_BLOCK: &str =
    "cargo run --bin proxmox-test-sweeper -- --prefix tfacc- --check   # list what is left";
const TELMATE_BLOCK: &str = "export PROXMOX_VE_ENDPOINT=\"${PM_API_URL%/api2/json}\"";
const PVE_SIM_ON_PATH_BLOCK: &str = "export PATH=\"$PWD/target/release:$PATH\"";

/// Every command block of the published guides, by file and first line, and what becomes
/// of it. A block missing here, or an entry whose block is gone, fails
/// `every_command_block_of_the_guides_runs_or_says_why_not`: a new block is either run
/// against pve-sim by a test, or says why it cannot be.
const GUIDE_BLOCKS: &[(&str, &str, Verdict)] = &[
    (
        "coming-from-bpg-or-telmate.md",
        TELMATE_BLOCK,
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "installation.md",
        "cargo build --release --locked --workspace --bins",
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "installation.md",
        "version=\"$(sed -n '/^version = \"/{s/^version = \"\\(.*\\)\"$/\\1/p;q;}' Cargo.toml)\"",
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "installation.md",
        "cat >\"$HOME/.terraform.d/proxyvm.tfrc\" <<EOF",
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "installation.md",
        "sim_dir=\"$HOME/pve-sim\"",
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "installation.md",
        "mkdir -p \"$HOME/my-proxies\" && cd \"$HOME/my-proxies\"",
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "installation.md",
        "terraform destroy -auto-approve",
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "installation.md",
        "cargo build --locked --bin terraform-provider-proxmox",
        Verdict::RunBy(DEV_OVERRIDES_TEST),
    ),
    (
        "pve-setup.md",
        "pvesm add dir proxy-seeds --path /var/lib/proxy-seeds --content iso",
        Verdict::Not(ON_A_PVE_NODE),
    ),
    (
        "pve-setup.md",
        "pvesm add nfs vmdata --server nfs.example --export /srv/vmdata --content images",
        Verdict::Not(ON_A_PVE_NODE),
    ),
    (
        "pve-setup.md",
        "wget \
            https://cloud.debian.org/images/cloud/trixie/latest/debian-13-genericcloud-amd64.qcow2",
        Verdict::Not(ON_A_PVE_NODE),
    ),
    (
        "pve-setup.md",
        "pveum role add ProxyVMProvisioner -privs \"\\",
        Verdict::Not(ON_A_PVE_NODE),
    ),
    (
        "pve-setup.md",
        "pveum pool add proxies --comment \"proxy VMs\"",
        Verdict::Not(ON_A_PVE_NODE),
    ),
    (
        "pve-setup.md",
        "pveum user token add terraform@pve provider --privsep 1 --comment \"terraform\"",
        Verdict::Not(ON_A_PVE_NODE),
    ),
    (
        "pve-setup.md",
        "export PROXMOX_VE_API_TOKEN='terraform@pve!provider=aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee'",
        Verdict::Not(PLACEHOLDERS),
    ),
    (
        "pve-setup.md",
        "export PROXMOX_VE_ENDPOINT=https://pve1.example:8006     # without /api2/json",
        Verdict::Not(PLACEHOLDERS),
    ),
    (
        "pve-setup.md",
        "scp root@pve1.example:/etc/pve/pve-root-ca.pem .",
        Verdict::Not(PLACEHOLDERS),
    ),
    (
        "pve-setup.md",
        "export PROXMOX_VE_ENDPOINT=https://pve1.example:8006",
        Verdict::Not(
            "the live acceptance tests against a real cluster; scripts/test.sh stage 4 runs the \
                same suite against a pve-sim process",
        ),
    ),
    (
        "pve-setup.md",
        SWEEPER_BLOCK,
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "testing-modules.md",
        PVE_SIM_ON_PATH_BLOCK,
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "testing-modules.md",
        "rm -rf .pve-sim .pve-sim-lab # a stale endpoint file would look ready",
        Verdict::RunBy(MODULE_TEST),
    ),
    ("testing-modules.md", "jobs:", Verdict::RunBy(CI_TEST)),
    (
        "troubleshooting.md",
        DEBUG_LOG_BLOCK,
        Verdict::RunBy(INSTALLATION_TEST),
    ),
    (
        "troubleshooting.md",
        "TF_LOG_PROVIDER=info terraform apply 2>&1 | grep -E 'retrying|waiting out|lock'",
        Verdict::Not(
            "prints only what a misbehaving cluster makes the provider wait out; acc_failure_paths \
                checks those retries under injected faults",
        ),
    ),
    (
        "troubleshooting.md",
        "terraform import 'proxmox_proxy_vm.edge[\"edge-0\"]' pve1/191913",
        Verdict::Not(
            "the example VMID of an error message; acc_ownership and acc_proxy_vm import VMs that \
                exist",
        ),
    ),
    (
        "finding-and-importing.md",
        "terraform query",
        Verdict::Not(
            "needs Terraform 1.14 (`terraform query`), newer than the 1.11.4 these tests run; \
                contract_harness drives the same list, generated configuration and import by \
                identity through the plugin protocol, as Terraform does",
        ),
    ),
    (
        "finding-and-importing.md",
        "terraform plan -generate-config-out=generated.tf",
        Verdict::Not(
            "runs on import blocks naming the reader's own VMIDs; acc_proxy_vm's \
                import_through_generated_config_keeps_the_seed_of_user_data runs it on its own",
        ),
    ),
    (
        "workflows.md",
        "terraform destroy",
        Verdict::WorkflowTest("destroy_runs_when_a_create_fails_plan_time_checks"),
    ),
    (
        "workflows.md",
        "terraform plan -out=change.tfplan",
        Verdict::WorkflowTest("a_saved_plan_with_placement_is_applied_by_another_process"),
    ),
    (
        "workflows.md",
        "terraform apply -target='proxmox_proxy_vm.edge[0]'",
        Verdict::WorkflowTest("target_replace_and_refresh_only_do_what_they_say"),
    ),
    (
        "workflows.md",
        "terraform workspace new blue && terraform apply",
        Verdict::WorkflowTest("workspaces_with_their_own_fleet_share_names"),
    ),
];

/// The inventory above and the guides agree, and every test it names exists in this file.
#[test]
fn every_command_block_of_the_guides_runs_or_says_why_not() {
    let blocks = guide_command_blocks();
    assert!(blocks.len() > 15, "found only {} blocks", blocks.len());
    let this_file = std::fs::read_to_string(root().join("tests/provider/acc_modules.rs")).unwrap();
    let workflows =
        std::fs::read_to_string(root().join("tests/provider/acc_workflows.rs")).unwrap();
    let mut problems = Vec::new();
    for block in &blocks {
        let entries: Vec<_> = GUIDE_BLOCKS
            .iter()
            .filter(|(file, first, _)| *file == block.file && *first == block.first_line())
            .collect();
        if entries.len() != 1 {
            problems.push(format!(
                "docs/guides/{}: the block starting {:?} has {} entries in GUIDE_BLOCKS (add one: \
                    run it against pve-sim in a test, or say why it cannot run)",
                block.file,
                block.first_line(),
                entries.len()
            ));
        }
    }
    for (file, first, verdict) in GUIDE_BLOCKS {
        let matching = blocks
            .iter()
            .filter(|b| b.file == *file && b.first_line() == *first)
            .count();
        if matching != 1 {
            problems.push(format!(
                "GUIDE_BLOCKS names {file}'s block starting {first:?}, which the guide has \
                    {matching} times"
            ));
        }
        match verdict {
            Verdict::RunBy(test) if !this_file.contains(&format!("async fn {test}(")) => {
                problems.push(format!("no test {test} in tests/provider/acc_modules.rs"));
            }
            Verdict::WorkflowTest(test) if !workflows.contains(&format!("async fn {test}(")) => {
                problems.push(format!("no test {test} in tests/provider/acc_workflows.rs"));
            }
            Verdict::Not(why) if why.split_whitespace().count() < 5 => {
                problems.push(format!("{file}: say why {first:?} cannot run, not {why:?}"));
            }
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// One step of a GitHub Actions job, as far as the testing guide's job uses them.
#[derive(Debug, Default)]
struct CiStep {
    uses: Option<String>,
    path: Option<String>,
    working_directory: Option<String>,
    condition: Option<String>,
    run: Option<String>,
}

/// The steps of the one job in a workflow YAML: `uses` (with `path`), `if`,
/// `working-directory` and `run` (a literal block or one line).
fn ci_steps(yaml: &str) -> Vec<CiStep> {
    let mut steps: Vec<CiStep> = Vec::new();
    let mut lines = yaml
        .lines()
        .skip_while(|l| l.trim() != "steps:")
        .skip(1)
        .peekable();
    let step_indent = lines
        .peek()
        .map(|l| l.len() - l.trim_start().len())
        .expect("the job has steps");
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let entry = if indent == step_indent && trimmed.starts_with("- ") {
            steps.push(CiStep::default());
            &trimmed[2..]
        } else {
            trimmed
        };
        let step = steps.last_mut().expect("a step first");
        let Some((key, value)) = entry.split_once(':') else {
            continue;
        };
        let value = value.trim().to_owned();
        match key.trim() {
            "uses" => step.uses = Some(value),
            "path" => step.path = Some(value),
            "working-directory" => step.working_directory = Some(value),
            "if" => step.condition = Some(value),
            "run" if value == "|" => {
                let block_indent = lines
                    .peek()
                    .map(|l| l.len() - l.trim_start().len())
                    .unwrap_or(0);
                let mut script = String::new();
                while let Some(next) = lines.peek() {
                    let next_indent = next.len() - next.trim_start().len();
                    if !next.trim().is_empty() && next_indent < block_indent {
                        break;
                    }
                    script.push_str(next.get(block_indent..).unwrap_or(""));
                    script.push('\n');
                    lines.next();
                }
                step.run = Some(script);
            }
            "run" => step.run = Some(format!("{value}\n")),
            _ => {}
        }
    }
    steps
}

/// The testing guide's CI job, run step by step as a GitHub runner would: the module
/// checked out (the example module), the provider's repository checked out beside it (a
/// clone whose build stands in for cargo's, as in the installation test), terraform set up,
/// and every `run` step in order with `RUNNER_TEMP`, `GITHUB_ENV` and `GITHUB_PATH`.
#[tokio::test(flavor = "multi_thread")]
async fn the_testing_guides_ci_job_runs_as_written() {
    if !acceptance_enabled(CI_TEST) {
        return;
    }
    let guide = std::fs::read_to_string(root().join("docs/guides/testing-modules.md")).unwrap();
    let yaml = fenced_blocks_under(&guide, "## In CI", "yaml")
        .pop()
        .expect("the guide shows a CI job");
    let steps = ci_steps(&yaml);
    assert!(
        steps.iter().filter(|s| s.run.is_some()).count() >= 2,
        "{steps:?}"
    );

    let shell = FreshShell::new();
    let workspace = shell.scratch.path().join("workspace");
    let runner_temp = shell.scratch.path().join("runner-temp");
    std::fs::create_dir_all(&runner_temp).unwrap();
    let github_env = shell.scratch.path().join("github-env");
    let github_path = shell.scratch.path().join("github-path");
    std::fs::write(&github_env, "").unwrap();
    std::fs::write(&github_path, "").unwrap();
    let mut env: Vec<(String, String)> = vec![
        ("HOME".into(), shell.home().display().to_string()),
        ("CHECKPOINT_DISABLE".into(), "1".into()),
        ("RUNNER_TEMP".into(), runner_temp.display().to_string()),
        ("GITHUB_ENV".into(), github_env.display().to_string()),
        ("GITHUB_PATH".into(), github_path.display().to_string()),
    ];
    let mut path = vec![shell.scratch.path().join("bin")];
    let mut transcript = String::new();
    let mut failed = false;
    for step in &steps {
        match (step.uses.as_deref(), &step.run) {
            (Some(uses), _) if uses.starts_with("actions/checkout@") => match &step.path {
                None => copy_dir(&root().join("examples/modules/proxy-fleet"), &workspace),
                Some(dir) => {
                    let clone = workspace.join(dir);
                    std::fs::create_dir_all(&clone).unwrap();
                    std::fs::copy(root().join("Cargo.toml"), clone.join("Cargo.toml")).unwrap();
                }
            },
            // terraform is on the shell's PATH already.
            (Some(uses), _) if uses.starts_with("hashicorp/setup-terraform@") => {}
            (Some(uses), _) => panic!("the job uses {uses}, which this test does not stand in for"),
            (None, Some(script)) => {
                let wanted = step.condition.as_deref().unwrap_or("success()");
                if (wanted == "failure()") != failed {
                    continue;
                }
                let dir = workspace.join(step.working_directory.as_deref().unwrap_or("."));
                let search_path = path
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":");
                let out = tokio::process::Command::new("bash")
                    .args(["--noprofile", "--norc", "-eo", "pipefail", "-c"])
                    .arg(format!(
                        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}"
                    ))
                    .current_dir(&dir)
                    .env_clear()
                    .envs(env.iter().cloned())
                    .env(
                        "PATH",
                        format!(
                            "{search_path}:{}",
                            std::env::var("PATH").unwrap_or_default()
                        ),
                    )
                    .kill_on_drop(true)
                    .output()
                    .await
                    .unwrap();
                transcript.push_str(&format!(
                    "--- step in {}:\n{script}--- stdout\n{}\n--- stderr\n{}\n",
                    dir.display(),
                    without_ansi_escapes(&String::from_utf8_lossy(&out.stdout)),
                    without_ansi_escapes(&String::from_utf8_lossy(&out.stderr)),
                ));
                failed |= !out.status.success();
                // What a step hands on to the next ones.
                for line in std::fs::read_to_string(&github_env).unwrap().lines() {
                    if let Some((key, value)) = line.split_once('=') {
                        env.retain(|(k, _)| k != key);
                        env.push((key.to_owned(), value.to_owned()));
                    }
                }
                for line in std::fs::read_to_string(&github_path).unwrap().lines().rev() {
                    let dir = PathBuf::from(line);
                    if !path.contains(&dir) {
                        path.insert(0, dir);
                    }
                }
            }
            (None, None) => {}
        }
    }
    assert!(!failed, "the CI job failed:\n{transcript}");
    assert!(
        transcript.contains("Success! 4 passed, 0 failed."),
        "terraform test did not pass all four runs:\n{transcript}"
    );
}

#[test]
fn ci_steps_are_read_as_a_runner_reads_them() {
    let yaml = "jobs:\n  t:\n    steps:\n      - uses: \
        actions/checkout@v4\n        with:\n          path: x\n      - name: \
        build\n        working-directory: x\n        run: |\n          echo a\n            echo \
        b\n\n          echo c\n      - if: failure()\n        run: cat log\n";
    let steps = ci_steps(yaml);
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(steps[0].path.as_deref(), Some("x"));
    assert_eq!(steps[1].working_directory.as_deref(), Some("x"));
    assert_eq!(
        steps[1].run.as_deref(),
        Some("echo a\n  echo b\n\necho c\n")
    );
    assert_eq!(steps[2].condition.as_deref(), Some("failure()"));
    assert_eq!(steps[2].run.as_deref(), Some("cat log\n"));
}
