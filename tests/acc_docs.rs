//! The committed registry docs are exactly what `tools/docgen` generates from the provider's
//! schema (as `terraform providers schema -json` reports it) and `examples/`.

mod support;

#[path = "../tools/docgen/src/render.rs"]
mod render;

use std::path::Path;

use support::{Target, Workspace, acceptance_enabled};

#[tokio::test(flavor = "multi_thread")]
async fn committed_docs_equal_the_generated_docs() {
    if !acceptance_enabled("committed_docs_equal_the_generated_docs") {
        return;
    }
    // The schema needs no cluster: nothing is configured, so nothing is contacted.
    let ws = Workspace::new(Target {
        endpoint: "https://127.0.0.1:9".into(),
        token: "docs@pve!schema=unused".into(),
        ca_pem: None,
    });
    ws.write_main_tf(&Workspace::preamble());
    ws.init().await;
    let out = ws
        .terraform(&["providers", "schema", "-json"])
        .await
        .success();
    let schema: serde_json::Value =
        serde_json::from_str(&out.stdout()).expect("providers schema -json printed no JSON");

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = render::render_all(&schema, "proxyvm/proxmox", root).expect("docs render");
    let names: Vec<String> = pages.iter().map(|p| p.path.display().to_string()).collect();
    for expected in [
        "index.md",
        "resources/proxy_vm.md",
        "data-sources/health.md",
        "data-sources/proxy_vms.md",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "no page {expected} generated; got {names:?}"
        );
    }

    let problems = render::differences(&pages, &root.join("docs"));
    if !problems.is_empty() {
        // Leave the generated tree where a developer can diff it.
        let generated = ws.dir.path().join("generated-docs");
        render::write_pages(&pages, &generated).unwrap();
        let kept = generated.display().to_string();
        std::mem::forget(ws);
        panic!(
            "the committed docs differ from what tools/docgen generates:\n  {}\n\
             Run `scripts/docs.sh` and commit docs/ (or: diff -r docs {kept}).",
            problems.join("\n  ")
        );
    }
}

#[test]
fn every_generated_page_is_in_the_registry_layout() {
    // Independent of terraform: the shape tfplugindocs' `validate` checks, on the committed files.
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for page in [
        "index.md",
        "resources/proxy_vm.md",
        "data-sources/health.md",
        "data-sources/proxy_vms.md",
    ] {
        let text =
            std::fs::read_to_string(docs.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        let front = text
            .strip_prefix("---\n")
            .and_then(|rest| rest.split_once("\n---\n"))
            .map(|(front, _)| front)
            .unwrap_or_else(|| panic!("{page} has no frontmatter"));
        assert!(front.contains("page_title: "), "{page}: no page_title");
        assert!(front.contains("description: "), "{page}: no description");
        for forbidden in ["layout:", "sidebar_current:"] {
            assert!(
                !front.contains(forbidden),
                "{page}: registry docs must not set {forbidden}"
            );
        }
        assert_eq!(
            page == "index.md",
            !front.contains("subcategory:"),
            "{page}: subcategory only off the index"
        );
        assert!(
            text.len() < 500_000,
            "{page} is over the registry's 500 KB limit"
        );
        assert!(text.contains("\n## Schema\n"), "{page}: no schema section");
    }
}
