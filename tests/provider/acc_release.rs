//! `scripts/release.sh` produces what the registries and `terraform init` accept: zips with
//! the binary at their root, the protocol-6 manifest, SHA256SUMS over both, and a binary
//! detached signature by an RSA key; the zip installs through a packed filesystem mirror.
//! Beside them, a pve-sim zip per platform for module authors, also in SHA256SUMS, whose
//! binary runs and describes its world.

use crate::pve_sim_bin;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pve_sim_bin::pve_sim_binary;
use support::{PROVIDER_VERSION, Workspace, acceptance_enabled, terraform_path};

const NAME: &str = "terraform-provider-proxmox";

fn run(cmd: &mut Command) -> Output {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        output.status.success(),
        "{cmd:?} failed:\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A throwaway signing key (`algorithm` as gpg names it) in its own GNUPGHOME; returns its
/// fingerprint.
fn throwaway_key(gnupg_home: &Path, algorithm: &str) -> String {
    run(Command::new("gpg")
        .env("GNUPGHOME", gnupg_home)
        .args(["--batch", "--passphrase", "", "--pinentry-mode", "loopback"])
        .args([
            "--quick-gen-key",
            "Release Test <release-test@example.invalid>",
            algorithm,
            "sign",
            "never",
        ]));
    let listing = run(Command::new("gpg").env("GNUPGHOME", gnupg_home).args([
        "--batch",
        "--with-colons",
        "--list-secret-keys",
    ]));
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .find_map(|line| {
            line.strip_prefix("fpr:")
                .map(|rest| rest.trim_matches(':').to_owned())
        })
        .expect("gpg listed no fingerprint")
}

/// Names of the entries in a zip's central directory.
fn zip_entry_names(zip: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut at = 0;
    while let Some(offset) = zip[at..].windows(4).position(|w| w == b"PK\x01\x02") {
        let header = at + offset;
        let field = |o: usize| u16::from_le_bytes([zip[header + o], zip[header + o + 1]]) as usize;
        let (name_len, extra_len, comment_len) = (field(28), field(30), field(32));
        names.push(String::from_utf8_lossy(&zip[header + 46..header + 46 + name_len]).into_owned());
        at = header + 46 + name_len + extra_len + comment_len;
    }
    names
}

fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}_{arch}", std::env::consts::OS)
}

#[tokio::test(flavor = "multi_thread")]
async fn release_artifacts_verify_and_install_through_a_mirror() {
    let test = "release_artifacts_verify_and_install_through_a_mirror";
    if !acceptance_enabled(test) {
        return;
    }
    support::require_tools(test, &["gpg", "bsdtar"]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::Builder::new()
        .prefix("release-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let gnupg_home = private_dir(&scratch.path().join("gnupg"));
    let fingerprint = throwaway_key(&gnupg_home, "rsa3072");

    // The binary cargo built for this test run is packaged for the host platform (a nested
    // `cargo build` would wait on the lock this test run holds).
    let dist = scratch.path().join("dist");
    run(Command::new(root.join("scripts/release.sh"))
        .arg(PROVIDER_VERSION)
        .args(["--gpg-key", &fingerprint])
        .arg("--out")
        .arg(&dist)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_terraform-provider-proxmox"))
        .arg("--sim-binary")
        .arg(pve_sim_binary())
        .env("GNUPGHOME", &gnupg_home));

    let prefix = format!("{NAME}_{PROVIDER_VERSION}");
    let zip_name = format!("{prefix}_{}.zip", platform());
    let manifest_name = format!("{prefix}_manifest.json");
    let sums_name = format!("{prefix}_SHA256SUMS");
    let sig_name = format!("{sums_name}.sig");
    let sim_zip_name = format!(
        "pve-sim_{PROVIDER_VERSION}_{}.zip",
        platform().replace('_', "-")
    );
    for file in [
        &zip_name,
        &manifest_name,
        &sums_name,
        &sig_name,
        &sim_zip_name,
    ] {
        assert!(dist.join(file).is_file(), "release.sh did not write {file}");
    }

    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dist.join(&manifest_name)).unwrap()).unwrap();
    assert_eq!(
        manifest,
        serde_json::json!({"version": 1, "metadata": {"protocol_versions": ["6.0"]}})
    );

    let sums = std::fs::read_to_string(dist.join(&sums_name)).unwrap();
    let listed: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(_, f)| f))
        .collect();
    assert!(listed.contains(&zip_name.as_str()), "{sums}");
    assert!(
        listed.contains(&manifest_name.as_str()),
        "the manifest must be in SHA256SUMS:\n{sums}"
    );
    assert!(
        listed.contains(&sim_zip_name.as_str()),
        "the pve-sim zip must be in SHA256SUMS (one signature covers it):\n{sums}"
    );
    assert_eq!(listed.len(), 3, "{sums}");
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(listed, sorted, "SHA256SUMS is not sorted by file name");
    run(Command::new("sha256sum")
        .arg("-c")
        .arg(&sums_name)
        .current_dir(&dist));

    let signature = std::fs::read(dist.join(&sig_name)).unwrap();
    assert!(
        !signature.starts_with(b"-----BEGIN"),
        "the signature must be binary, not ASCII-armored"
    );
    let verify = run(Command::new("gpg")
        .env("GNUPGHOME", &gnupg_home)
        .args(["--batch", "--verify"])
        .arg(dist.join(&sig_name))
        .arg(dist.join(&sums_name)));
    assert!(String::from_utf8_lossy(&verify.stderr).contains("using RSA key"));

    // A tampered SHA256SUMS must not verify: the check above is not vacuous.
    let tampered = scratch.path().join("tampered");
    std::fs::write(&tampered, sums.replace(&zip_name, "other.zip")).unwrap();
    let refused = Command::new("gpg")
        .env("GNUPGHOME", &gnupg_home)
        .args(["--batch", "--verify"])
        .arg(dist.join(&sig_name))
        .arg(&tampered)
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "gpg accepted a tampered SHA256SUMS"
    );

    let zip = std::fs::read(dist.join(&zip_name)).unwrap();
    let entries = zip_entry_names(&zip);
    let binary_entry = format!("{NAME}_v{PROVIDER_VERSION}");
    assert!(
        entries.contains(&binary_entry),
        "{zip_name} holds {entries:?}"
    );
    assert!(
        entries.iter().all(|e| !e.contains('/')),
        "entries must sit at the zip's root: {entries:?}"
    );

    check_pve_sim_zip(&dist.join(&sim_zip_name), scratch.path());

    // Install exactly as a user of a packed mirror would.
    let mirror = scratch
        .path()
        .join("mirror/registry.terraform.io/proxyvm/proxmox");
    std::fs::create_dir_all(&mirror).unwrap();
    std::fs::copy(dist.join(&zip_name), mirror.join(&zip_name)).unwrap();
    let cli_config = scratch.path().join("cli.tfrc");
    std::fs::write(
        &cli_config,
        format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = \
                [\"registry.terraform.io/proxyvm/proxmox\"]\n  }}\n}}\n",
            scratch.path().join("mirror").display()
        ),
    )
    .unwrap();
    let work: PathBuf = scratch.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(
        work.join("main.tf"),
        format!("{}\nprovider \"proxmox\" {{}}\n", Workspace::preamble()),
    )
    .unwrap();
    let terraform = |args: &[&str]| {
        run(Command::new(terraform_path())
            .args(args)
            .current_dir(&work)
            .env("TF_CLI_CONFIG_FILE", &cli_config)
            .env("CHECKPOINT_DISABLE", "1")
            .env_remove("TF_LOG"))
    };
    let init = terraform(&["init", "-input=false", "-no-color"]);
    let init_text = String::from_utf8_lossy(&init.stdout);
    assert!(
        init_text.contains(&format!("Installed proxyvm/proxmox v{PROVIDER_VERSION}")),
        "{init_text}"
    );
    let lock = std::fs::read_to_string(work.join(".terraform.lock.hcl")).unwrap();
    assert!(lock.contains("\"h1:"), "no h1: hash recorded:\n{lock}");
    let installed = work
        .join(".terraform/providers/registry.terraform.io/proxyvm/proxmox")
        .join(PROVIDER_VERSION)
        .join(platform())
        .join(&binary_entry);
    assert!(
        installed.is_file(),
        "init did not unpack {}",
        installed.display()
    );
    // The unpacked binary is a working plugin: terraform gets its schema over the protocol.
    let schema = terraform(&["providers", "schema", "-json"]);
    let schema: serde_json::Value = serde_json::from_slice(&schema.stdout).unwrap();
    assert!(
        schema["provider_schemas"]["registry.terraform.io/proxyvm/proxmox"]["provider"].is_object(),
        "{schema}"
    );
}

/// The pve-sim zip holds `pve-sim` and its README at its root, its name cannot pass for a
/// provider package, and the binary it holds runs: it describes the default world.
fn check_pve_sim_zip(zip_path: &Path, scratch: &Path) {
    let name = zip_path.file_name().unwrap().to_str().unwrap();
    assert!(
        !looks_like_a_provider_package(name),
        "{name} would be indexed as a provider package"
    );
    let mut entries = zip_entry_names(&std::fs::read(zip_path).unwrap());
    entries.sort();
    assert_eq!(
        entries,
        ["README.md", "pve-sim"],
        "{name} holds {entries:?}"
    );

    let unpacked = scratch.join("pve-sim-unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    run(Command::new("bsdtar")
        .arg("-xf")
        .arg(zip_path)
        .arg("-C")
        .arg(&unpacked));
    let world = run(Command::new(unpacked.join("pve-sim")).arg("--print-world"));
    let world = String::from_utf8_lossy(&world.stdout);
    for expected in ["pve1", "debian-13-proxy", "proxy-seeds", "DIR/endpoint"] {
        assert!(
            world.contains(expected),
            "--print-world lacks {expected}:\n{world}"
        );
    }
}

/// The OpenTofu registry's indexer takes every release asset whose name matches
/// `.*_OS_ARCH.zip` (OS and ARCH alphanumeric, unanchored) for a provider package.
fn looks_like_a_provider_package(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".zip") else {
        return false;
    };
    let alnum = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
    // The names release.sh writes end in `.zip` and have no other `_x_y` run, so the last two
    // `_`-separated parts are where the pattern would match.
    let parts: Vec<&str> = stem.split('_').collect();
    parts.len() >= 3 && alnum(parts[parts.len() - 1]) && alnum(parts[parts.len() - 2])
}

#[test]
fn the_registry_pattern_check_matches_provider_zips_only() {
    assert!(looks_like_a_provider_package(
        "terraform-provider-proxmox_0.1.0_linux_amd64.zip"
    ));
    assert!(!looks_like_a_provider_package(
        "pve-sim_0.1.0_linux-amd64.zip"
    ));
    assert!(!looks_like_a_provider_package(
        "terraform-provider-proxmox_0.1.0_manifest.json"
    ));
}

/// gpg refuses a GNUPGHOME others can read.
fn private_dir(path: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
    path.to_owned()
}

#[test]
fn release_script_refuses_an_ecc_signing_key() {
    if !acceptance_enabled("release_script_refuses_an_ecc_signing_key") {
        return;
    }
    support::require_tools("release_script_refuses_an_ecc_signing_key", &["gpg"]);
    let scratch = tempfile::Builder::new()
        .prefix("release-ecc-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let gnupg_home = private_dir(&scratch.path().join("gnupg"));
    let fingerprint = throwaway_key(&gnupg_home, "ed25519");
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/release.sh"))
        .arg(PROVIDER_VERSION)
        .args(["--gpg-key", &fingerprint])
        .arg("--out")
        .arg(scratch.path().join("dist"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_terraform-provider-proxmox"))
        .arg("--sim-binary")
        .arg(pve_sim_binary())
        .env("GNUPGHOME", &gnupg_home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "release.sh signed with an ECC key:\n{stderr}"
    );
    assert!(stderr.contains("RSA or DSA"), "{stderr}");
}

#[test]
fn release_script_refuses_a_version_with_a_leading_v() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/release.sh"))
        .arg("v1.0.0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("without a leading v"));
}
