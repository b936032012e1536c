//! `scripts/test.sh`, the README's test command: a header per stage, every stage run, the
//! last line the count over every test binary's `test result:` line, and a non-zero exit
//! on any failure, tests that skipped themselves counted as skipped, and a live stage that
//! starts a pve-sim process per lab (tests/live-worlds/), points the tests at it with the
//! lab's facts and fails on anything the sweeper finds left. Run in a scratch copy with a
//! stand-in `cargo` that prints what cargo's test binaries print (and stand-in pve-sim and
//! sweeper), so the script's own logic is what is tested (the real suite is what runs it).

use std::path::Path;
use std::process::Command;

/// What a run of the script saw: exit code, stdout, and the environment each of the live
/// stage's `cargo test` runs got (`ENDPOINT|TOKEN|CA|PREFIX|NODES|SEED_STORAGE`, a line per
/// lab, empty if that stage never ran the tests).
struct Run {
    code: i32,
    stdout: String,
    live_env: String,
}

/// Runs a copy of scripts/test.sh in a scratch tree, with a stand-in
/// `scripts/install-test-deps.sh` that exits with `deps`, a `cargo` that exits with `fmt`,
/// `clippy` (for `clippy` and `doc`) and `test` as given and prints `test_output` for the
/// workspace tests and `live_output` for each of the live stage's runs (recording its
/// `SKIPPED` lines in the skip log, as the test harness does), a `target/debug/pve-sim` that
/// writes its files and waits like the real one, and a sweeper that exits with `sweeper`.
fn run_test_sh(
    deps: i32,
    fmt: i32,
    clippy: i32,
    test: i32,
    test_output: &str,
    live_output: &str,
    sweeper: i32,
) -> Run {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("bin");
    let debug = root.path().join("target/debug");
    let scripts = root.path().join("scripts");
    for dir in [&bin, &debug, &scripts] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test.sh"),
        scripts.join("test.sh"),
    )
    .unwrap();
    let worlds = root.path().join("tests/live-worlds");
    std::fs::create_dir_all(&worlds).unwrap();
    for entry in
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live-worlds")).unwrap()
    {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), worlds.join(entry.file_name())).unwrap();
    }
    std::fs::write(root.path().join("test-output"), test_output).unwrap();
    std::fs::write(root.path().join("live-output"), live_output).unwrap();
    let env_file = root.path().join("live-env");
    let cargo = format!(
        r#"#!/bin/sh
case "$1" in
  fmt) exit {fmt} ;;
  clippy) exit {clippy} ;;
  doc) exit {clippy} ;;
  build) exit 0 ;;
  test)
    case "$*" in *--no-run*) exit 0 ;; esac
    echo '   Compiling x' >&2
    case "$*" in
      *--test*)
        printf '%s|%s|%s|%s|%s|%s\n' "$PROXMOX_VE_ENDPOINT" "$PROXMOX_VE_API_TOKEN" \
          "$PROXMOX_VE_CA_CERT" "$PROXMOX_VE_TEST_PREFIX" "$PROXMOX_VE_TEST_NODES" \
          "$PROXMOX_VE_TEST_SEED_STORAGE" >> '{env}'
        out='{root}/live-output' ;;
      *) out='{root}/test-output' ;;
    esac
    cat "$out"
    grep '^SKIPPED' "$out" >> "$PROXMOX_VE_TEST_SKIP_LOG"
    exit {test} ;;
esac
exit 99
"#,
        env = env_file.display(),
        root = root.path().display(),
    );
    let pve_sim = r#"#!/bin/sh
while [ $# -gt 0 ]; do
  [ "$1" = --state-dir ] && dir="$2"
  shift
done
mkdir -p "$dir"
echo 'terraform@pve!provider=secret' > "$dir/token"
echo 'PEM' > "$dir/ca.pem"
echo 'https://127.0.0.1:1' > "$dir/endpoint"
echo 'https://127.0.0.1:1'
exec sleep 600
"#;
    let deps = format!("#!/bin/sh\necho 'stand-in install-test-deps.sh'\nexit {deps}\n");
    for (path, text) in [
        (scripts.join("install-test-deps.sh"), deps),
        (bin.join("cargo"), cargo),
        (debug.join("pve-sim"), pve_sim.to_owned()),
        (
            debug.join("proxmox-test-sweeper"),
            format!("#!/bin/sh\nexit {sweeper}\n"),
        ),
    ] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new(scripts.join("test.sh"));
    command.env("PATH", path).env_remove("TF_ACC");
    let out = run_written_script(&mut command);
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        live_env: std::fs::read_to_string(env_file).unwrap_or_default(),
    }
}

/// Runs a script this process has just written. Another test thread that forks at that
/// moment holds the file open for writing until its child execs, and the kernel then refuses
/// to execute the file (ETXTBSY): try again a few times.
fn run_written_script(command: &mut Command) -> std::process::Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match command.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{command:?} stayed busy"
                );
                std::thread::yield_now();
            }
            other => return other.unwrap(),
        }
    }
}

const LIVE_PASSING: &str = "\
running 9 tests
SKIPPED: failed_start_taints_then_replaces_and_destroys_cleanly (simulator-only: \
    needs the in-process pve-sim's fault injection)
SKIPPED PART: fleet_lifecycle: the in-place VLAN change (set PROXMOX_VE_TEST_VLAN_ALT)
test result: ok. 9 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 40.0s
";

const PASSING: &str = "\
running 12 tests
test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

running 3 tests
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 2 filtered out; finished in 1.20s

   Doc-tests pve
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";

/// Three labs, 9 tests each of which one skipped itself: 16 + 3 × 8 passed, 1 + 3 skipped.
#[test]
fn the_last_line_counts_every_test_binary_of_both_test_stages() {
    let run = run_test_sh(0, 0, 0, 0, PASSING, LIVE_PASSING, 0);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(
        run.stdout.lines().last(),
        Some("40 passed, 0 failed, 4 skipped")
    );
    for header in [
        "==> [1/4] cargo fmt --check",
        "==> [2/4] cargo clippy and cargo doc, -D warnings",
        "==> [3/4] cargo test --workspace (TF_ACC=1)",
        "==> [4/4] live mode against three labs (pve-sim as a separate process each), then the \
            sweeper",
    ] {
        assert!(
            run.stdout.contains(header),
            "no {header:?}:\n{}",
            run.stdout
        );
    }
}

#[test]
fn the_live_stage_points_the_tests_at_each_lab_it_started() {
    let run = run_test_sh(0, 0, 0, 0, PASSING, LIVE_PASSING, 0);
    let labs: Vec<Vec<&str>> = run
        .live_env
        .lines()
        .map(|line| line.split('|').collect())
        .collect();
    assert_eq!(labs.len(), 3, "{:?}\n{}", run.live_env, run.stdout);
    for fields in &labs {
        assert_eq!(fields.len(), 6, "{fields:?}");
        assert_eq!(fields[0], "https://127.0.0.1:1");
        assert_eq!(fields[1], "terraform@pve!provider=secret");
        assert!(fields[2].ends_with("/state/ca.pem"), "{}", fields[2]);
        assert!(fields[3].starts_with("tfacc-ci"), "{}", fields[3]);
    }
    // Each lab's own facts, and nothing of the lab before: the guide's lab leaves the seed
    // storage to the tests' default.
    let facts: Vec<(&str, &str)> = labs.iter().map(|f| (f[4], f[5])).collect();
    assert_eq!(
        facts,
        [
            ("hv-a,hv-b", "isos"),
            ("pve1,pve2,pve3", ""),
            ("pve1,pve2", "")
        ]
    );
    // The skip lines are shown, and listed before the count with their reasons.
    assert!(run.stdout.contains(
        "3 test: failed_start_taints_then_replaces_and_destroys_cleanly (simulator-only"
    ));
    assert!(run.stdout.contains(
        "3 part: fleet_lifecycle: the in-place VLAN change (set PROXMOX_VE_TEST_VLAN_ALT)"
    ));
    assert!(
        run.stdout
            .contains("live stage wall time per lab: renamed ")
    );
}

#[test]
fn a_failing_test_counts_and_fails_the_script() {
    let output = format!(
        "{PASSING}test result: FAILED. 4 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; \
            finished in 0.3s\n"
    );
    let run = run_test_sh(0, 0, 0, 101, &output, LIVE_PASSING, 0);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.last(), Some(&"44 passed, 2 failed, 4 skipped"));
    assert_eq!(lines[lines.len() - 2], "failed stages: test live");
}

#[test]
fn a_lint_failure_still_runs_the_tests_and_fails_the_script() {
    let run = run_test_sh(0, 1, 101, 0, PASSING, LIVE_PASSING, 0);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.last(), Some(&"40 passed, 0 failed, 4 skipped"));
    // The stand-in's rustdoc fails with its clippy.
    assert_eq!(lines[lines.len() - 2], "failed stages: fmt clippy doc");
}

#[test]
fn leftovers_of_the_live_run_fail_the_script() {
    let run = run_test_sh(0, 0, 0, 0, PASSING, LIVE_PASSING, 1);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("the live run left VMs or seed ISOs behind")
    );
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[lines.len() - 2], "failed stages: live");
}

/// A machine that lacks the tests' tools and cannot install them stops before any stage, with
/// what install-test-deps.sh said (the command to run), instead of failing deep inside a test.
#[test]
fn missing_tools_stop_the_script_before_any_stage() {
    let run = run_test_sh(1, 0, 0, 0, PASSING, LIVE_PASSING, 0);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        run.stdout.contains("stand-in install-test-deps.sh"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("==> [1/4]"), "{}", run.stdout);
    let ok = run_test_sh(0, 0, 0, 0, PASSING, LIVE_PASSING, 0);
    let first_stage = ok.stdout.find("==> [1/4]").unwrap();
    assert!(ok.stdout[..first_stage].contains("stand-in install-test-deps.sh"));
}

/// scripts/install-test-deps.sh itself, for a user who is not root and has no sudo, with none
/// of the tools: it stops at once and names the one command to run as root (it never tries
/// apt-get, which is not on this PATH either).
#[test]
fn install_test_deps_names_the_command_when_it_cannot_install() {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let id = bin.path().join("id");
    std::fs::write(&id, "#!/bin/sh\necho 1000\n").unwrap();
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-test-deps.sh");
    let out = Command::new("/bin/bash")
        .arg(&script)
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "the tests need xorriso genisoimage libarchive-tools util-linux cloud-init python3 \
             gpg (Debian packages)"
        ),
        "{stderr}"
    );
    let command = stderr.lines().last().unwrap();
    assert_eq!(command.trim(), script.display().to_string(), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing installed");
}

/// The packages the acceptance tests name for a missing tool are the ones the script installs.
#[test]
fn the_tests_name_the_packages_install_test_deps_installs() {
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-test-deps.sh"),
    )
    .unwrap();
    for (tool, package) in crate::support::TOOL_PACKAGES {
        assert!(
            script.contains(&format!("\nneed {tool} {package}\n")),
            "{tool}"
        );
    }
}

/// Every lab of the live stage is a world pve-sim accepts, with an env file of
/// `PROXMOX_VE_TEST_*` assignments only.
#[test]
fn every_live_lab_is_a_valid_world_with_its_facts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live-worlds");
    for lab in ["renamed", "guide-acls", "local-copies"] {
        let world = std::fs::read_to_string(dir.join(format!("{lab}.json"))).unwrap();
        let world: pvesim::SimConfig =
            serde_json::from_str(&world).unwrap_or_else(|e| panic!("{lab}.json: {e}"));
        assert!(!world.vms.is_empty(), "{lab}");
        let env = std::fs::read_to_string(dir.join(format!("{lab}.env"))).unwrap();
        for line in env.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            assert!(
                line.starts_with("PROXMOX_VE_TEST_") && line.contains('='),
                "{lab}.env: {line}"
            );
        }
    }
}
