//! The committed registry docs are exactly what `tools/docgen` generates from the provider's
//! schema (as `terraform providers schema -json` reports it) and `examples/`.

use crate::support;

#[path = "../../tools/docgen/src/render.rs"]
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

/// A list inside an attribute's description must nest under that attribute's item: when it
/// escapes (as the health page's reason codes once did), its entries render as attributes
/// and the attributes after it as its entries.
#[test]
fn descriptions_keep_their_lists_inside_the_attribute_lists() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut pages = vec![docs.join("index.md")];
    for dir in render::GENERATED_DIRS {
        for entry in std::fs::read_dir(docs.join(dir)).unwrap() {
            pages.push(entry.unwrap().path());
        }
    }
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for line in render::broken_schema_list_lines(&text) {
            problems.push(format!("{}: {line}", page.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "attribute lists broken by a description (indent its continuation lines):\n  {}",
        problems.join("\n  ")
    );
}

/// Every relative link in the repository's markdown points at a file or directory that
/// exists: the guides moved once, and a link left behind fails here, not on a reader.
#[test]
fn every_relative_markdown_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = Vec::new();
    markdown_files(root, &mut pages);
    assert!(pages.len() > 10, "found only {pages:?}");
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for target in relative_link_targets(&text) {
            let path = target.split('#').next().unwrap_or_default();
            if !path.is_empty() && !page.parent().unwrap().join(path).exists() {
                broken.push(format!(
                    "{}: {target}",
                    page.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

/// A registry publishes `docs/index.md` and the directories of [`render::PUBLISHED_DIRS`]
/// alone. On a published page a relative link must stay among published pages (one out of
/// `docs/`, or into `docs/dev/`, breaks on the registry), and a link to any other file of
/// the repository is absolute: [`render::REPOSITORY_URL`], `/blob/` or `/tree/`, the branch,
/// and a path that exists.
#[test]
fn registry_pages_link_only_to_what_the_registry_or_the_repository_has() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = root.join("docs");
    let mut pages = vec![docs.join("index.md")];
    for dir in render::PUBLISHED_DIRS {
        markdown_files(&docs.join(dir), &mut pages);
    }
    let mut wrong = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let name = page.strip_prefix(root).unwrap().display().to_string();
        wrong.extend(
            registry_link_problems(&text, page.parent().unwrap(), &docs, root)
                .into_iter()
                .map(|problem| format!("{name}: {problem}")),
        );
    }
    assert!(
        wrong.is_empty(),
        "links that break on the registry (use {}/blob/{}/PATH for repository files):\n  {}",
        render::REPOSITORY_URL,
        render::REPOSITORY_BRANCH,
        wrong.join("\n  ")
    );
}

/// What is wrong with the links of one published page in `dir`.
fn registry_link_problems(markdown: &str, dir: &Path, docs: &Path, root: &Path) -> Vec<String> {
    let published = |path: &Path| {
        let Ok(inside) = path.strip_prefix(docs) else {
            return false;
        };
        inside == Path::new("index.md")
            || render::PUBLISHED_DIRS
                .iter()
                .any(|published| inside.starts_with(published))
    };
    let mut problems = Vec::new();
    for target in relative_link_targets(markdown) {
        let path = target.split('#').next().unwrap_or_default();
        if path.is_empty() {
            continue;
        }
        if !published(&normalized(&dir.join(path))) {
            problems.push(format!("{target} is not a published page"));
        }
    }
    for target in absolute_link_targets(markdown) {
        let Some(rest) = target
            .strip_prefix("https://github.com/")
            .filter(|_| target.contains("/terraform-provider-proxmox"))
        else {
            continue;
        };
        let Some(path) = target
            .strip_prefix(render::REPOSITORY_URL)
            .and_then(|tail| {
                ["blob", "tree"].iter().find_map(|kind| {
                    tail.strip_prefix(&format!("/{kind}/{}/", render::REPOSITORY_BRANCH))
                })
            })
        else {
            // Releases and the like are not files of the repository.
            if !rest.contains("/releases") {
                problems.push(format!(
                    "{target} is not {}/blob/{}/PATH",
                    render::REPOSITORY_URL,
                    render::REPOSITORY_BRANCH
                ));
            }
            continue;
        };
        let path = path.split('#').next().unwrap_or_default();
        if !root.join(path).exists() {
            problems.push(format!("{target}: no {path} in the repository"));
        }
    }
    problems
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalized(path: &Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Targets of `[text](https://…)` links outside fenced code blocks.
fn absolute_link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            if rest[..end].starts_with("https://") {
                targets.push(rest[..end].to_owned());
            }
            rest = &rest[end..];
        }
    }
    targets
}

#[test]
fn the_registry_link_check_refuses_links_out_of_the_published_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = root.join("docs");
    let guides = docs.join("guides");
    let page = format!(
        "[ok](installation.md) [ok](../resources/proxy_vm.md#import) [in](#here) \
         [out](../../crates/pvesim/README.md) [dev](../dev/benchmarks.md) \
         [repo]({url}/blob/{branch}/crates/pvesim/README.md) \
         [gone]({url}/blob/{branch}/no/such/file.md) [tag]({url}/blob/v0.1.0/README.md) \
         [release]({url}/releases/download/v0.1.0/x.zip)",
        url = render::REPOSITORY_URL,
        branch = render::REPOSITORY_BRANCH
    );
    let problems = registry_link_problems(&page, &guides, &docs, root);
    assert_eq!(problems.len(), 4, "{problems:#?}");
    for expected in [
        "../../crates/pvesim/README.md is not a published page",
        "../dev/benchmarks.md is not a published page",
        "no no/such/file.md in the repository",
        "v0.1.0/README.md is not",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expected}: {problems:#?}"
        );
    }
}

/// Markdown files of the repository (not build output, not VCS metadata).
fn markdown_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "dist" {
                markdown_files(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// Targets of `[text](target)` links that are neither URLs nor in-page anchors, outside
/// fenced code blocks.
fn relative_link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with('#') && !target.starts_with("mailto:")
            {
                targets.push(target.to_owned());
            }
            rest = &rest[end..];
        }
    }
    targets
}

#[test]
fn the_link_check_sees_relative_links_only() {
    let text = "[a](guides/x.md#y) [b](https://e.x/z) [c](#here)\n```\n[d](nope.md)\n```\n";
    assert_eq!(relative_link_targets(text), ["guides/x.md#y"]);
}

/// ARCHITECTURE.md writes its invariants as absences; this keeps the ones a file scan can
/// prove true, so the document cannot drift from the code.
#[test]
fn architecture_invariants_written_as_absences_hold() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    for claim in [
        "tfplugin never names Proxmox",
        "pve never imports tfplugin",
        "pvesim never imports pve",
        "nocloud does no I/O",
    ] {
        assert!(
            architecture.contains(claim),
            "ARCHITECTURE.md no longer says \"{claim}\""
        );
    }

    let tfplugin = crate_dependencies(root, "tfplugin");
    for forbidden in ["pve", "pvesim", "nocloud", "terraform-provider-proxmox"] {
        assert!(
            !tfplugin.contains(&forbidden.to_owned()),
            "tfplugin depends on {forbidden}"
        );
    }
    for (file, text) in sources(&root.join("crates/tfplugin")) {
        assert!(
            !text.to_lowercase().contains("proxmox"),
            "{file} names Proxmox"
        );
    }
    assert!(
        !crate_dependencies(root, "pve").contains(&"tfplugin".to_owned()),
        "pve depends on tfplugin"
    );
    assert!(
        !crate_dependencies(root, "pvesim").contains(&"pve".to_owned()),
        "pvesim depends on pve"
    );
    for (file, text) in sources(&root.join("crates/pvesim/src")) {
        assert!(
            !text.contains("use pve::") && !text.contains("pve::Client"),
            "{file} uses the pve crate"
        );
    }
    let nocloud = crate_dependencies(root, "nocloud");
    for forbidden in ["tokio", "reqwest", "hyper", "pve"] {
        assert!(
            !nocloud.contains(&forbidden.to_owned()),
            "nocloud depends on {forbidden}"
        );
    }
    for (file, text) in sources(&root.join("crates/nocloud/src")) {
        for io in [
            "std::fs",
            "std::net",
            "std::process",
            "std::env",
            "SystemTime",
            "Instant::now",
        ] {
            assert!(!text.contains(io), "{file} uses {io}: nocloud does no I/O");
        }
    }
}

/// Names of every dependency (normal, dev and build) in a member crate's Cargo.toml.
fn crate_dependencies(root: &Path, krate: &str) -> Vec<String> {
    let manifest =
        std::fs::read_to_string(root.join("crates").join(krate).join("Cargo.toml")).unwrap();
    let mut in_dependencies = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line.trim_matches(['[', ']']).ends_with("dependencies");
            continue;
        }
        if in_dependencies && let Some((key, _)) = line.split_once('=') {
            let name = key
                .trim()
                .split('.')
                .next()
                .unwrap_or_default()
                .trim_matches('"');
            if !name.is_empty() && !name.starts_with('#') {
                names.push(name.to_owned());
            }
        }
    }
    assert!(
        !names.is_empty(),
        "found no dependencies in crates/{krate}/Cargo.toml"
    );
    names
}

/// `(path, text)` of every `.rs` and `.toml` file below `dir`.
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "toml") {
                found.push((
                    path.display().to_string(),
                    std::fs::read_to_string(&path).unwrap(),
                ));
            }
        }
    }
    found
}
