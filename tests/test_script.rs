//! `scripts/test.sh`, the README's test command: a header per stage, every stage run, the
//! last line the count over every test binary's `test result:` line, and a non-zero exit
//! on any failure. Run with a stand-in `cargo` that prints what cargo's test binaries print,
//! so the script's own logic is what is tested (the real suite is what runs it).

use std::path::Path;
use std::process::Command;

/// Runs scripts/test.sh with a `cargo` that exits with `fmt`, `clippy` and `test` as given
/// and prints `test_output` for `cargo test`. Returns (exit code, stdout).
fn run_test_sh(fmt: i32, clippy: i32, test: i32, test_output: &str) -> (i32, String) {
    let bin = tempfile::tempdir().unwrap();
    let output_file = bin.path().join("test-output");
    std::fs::write(&output_file, test_output).unwrap();
    let cargo = format!(
        "#!/bin/sh\ncase \"$1\" in\n  fmt) exit {fmt} ;;\n  clippy) exit {clippy} ;;\n  test) echo '   Compiling x' >&2; cat '{}'; exit {test} ;;\nesac\nexit 99\n",
        output_file.display()
    );
    let cargo_path = bin.path().join("cargo");
    std::fs::write(&cargo_path, cargo).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cargo_path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test.sh"))
        .env("PATH", path)
        .env_remove("TF_ACC")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

const PASSING: &str = "\
running 12 tests
test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

running 3 tests
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 2 filtered out; finished in 1.20s

   Doc-tests pve
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";

#[test]
fn the_last_line_counts_every_test_binary() {
    let (code, stdout) = run_test_sh(0, 0, 0, PASSING);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("16 passed, 0 failed, 1 skipped")
    );
    for header in [
        "==> [1/3] cargo fmt --check",
        "==> [2/3] cargo clippy -D warnings",
        "==> [3/3] cargo test --workspace (TF_ACC=1)",
    ] {
        assert!(stdout.contains(header), "no {header:?}:\n{stdout}");
    }
}

#[test]
fn a_failing_test_counts_and_fails_the_script() {
    let output = format!(
        "{PASSING}test result: FAILED. 4 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.3s\n"
    );
    let (code, stdout) = run_test_sh(0, 0, 101, &output);
    assert_ne!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.last(), Some(&"20 passed, 2 failed, 1 skipped"));
    assert_eq!(lines[lines.len() - 2], "failed stages: test");
}

#[test]
fn a_lint_failure_still_runs_the_tests_and_fails_the_script() {
    let (code, stdout) = run_test_sh(1, 101, 0, PASSING);
    assert_ne!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.last(), Some(&"16 passed, 0 failed, 1 skipped"));
    assert_eq!(lines[lines.len() - 2], "failed stages: fmt clippy");
}
