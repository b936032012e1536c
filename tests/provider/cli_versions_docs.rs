//! The CLI versions the provider supports are stated in several places a user reads first:
//! the version table in docs/index.md (from templates/index.md.tmpl), the README's
//! prerequisites, scripts/demo.sh's messages and the CHANGELOG. They must say the same.

use std::path::Path;

/// Everything but the write-only arguments.
const TERRAFORM_MIN: &str = "1.5";
const OPENTOFU_MIN: &str = "1.6";
/// Write-only arguments (`user_data`, `network_config`), in both CLIs.
const WRITE_ONLY_MIN: &str = "1.11";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[track_caller]
fn assert_says(path: &str, text: &str, expected: &str) {
    assert!(
        text.contains(expected),
        "{path} should say {expected:?} (the version table in docs/index.md)"
    );
}

#[test]
fn readme_demo_and_changelog_agree_with_the_version_table() {
    let index = read("docs/index.md");
    assert_says(
        "docs/index.md",
        &index,
        &format!("works with Terraform ≥ {TERRAFORM_MIN} and OpenTofu ≥ {OPENTOFU_MIN}"),
    );
    let write_only_row = index
        .lines()
        .find(|line| line.starts_with("| Write-only `user_data`"))
        .expect("the table has a write-only row");
    assert!(
        write_only_row.ends_with(&format!("| ≥ {WRITE_ONLY_MIN} | ≥ {WRITE_ONLY_MIN} |")),
        "{write_only_row}"
    );

    let readme = read("README.md");
    assert_says(
        "README.md",
        &readme,
        &format!("Terraform ≥ {WRITE_ONLY_MIN} or OpenTofu ≥ {WRITE_ONLY_MIN} for the demo"),
    );
    assert_says(
        "README.md",
        &readme,
        &format!("from Terraform {TERRAFORM_MIN} and OpenTofu {OPENTOFU_MIN}"),
    );

    let demo = read("scripts/demo.sh");
    assert_says(
        "scripts/demo.sh",
        &demo,
        &format!("Terraform >= {WRITE_ONLY_MIN} or OpenTofu >= {WRITE_ONLY_MIN}"),
    );
    assert_says(
        "scripts/demo.sh",
        &demo,
        &format!("from Terraform {TERRAFORM_MIN} and OpenTofu {OPENTOFU_MIN}"),
    );

    let changelog = read("CHANGELOG.md");
    assert_says(
        "CHANGELOG.md",
        &changelog,
        &format!("Terraform ≥ {TERRAFORM_MIN}, OpenTofu ≥ {OPENTOFU_MIN}"),
    );
}
