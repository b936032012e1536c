//! The names the docs give the provider's attributes exist, and are written as what they are:
//! `timeouts = { create }` for a nested attribute, `name { … }` only for a block. Checked
//! against the provider's own schemas (what `terraform providers schema -json` reports), so it
//! needs no terraform: the "This provider" columns of the bpg/Telmate guide's mapping tables,
//! and every name the resource's registry page quotes.

use std::collections::BTreeSet;
use std::path::Path;

use regex::Regex;
use terraform_provider_proxmox::provider::ProxmoxProvider;
use tfplugin::{AttributeKind, Block, Provider as _};

const GUIDE: &str = "docs/guides/coming-from-bpg-or-telmate.md";
const RESOURCE_PAGE: &str = "docs/resources/proxy_vm.md";

/// Words the resource page quotes that name no attribute of ours: PVE's config keys, tags,
/// NIC models, bridges and `hotplug` values, a guest's interface name, power states,
/// cloud-init's settings, Terraform's own words. A name not here and in no schema fails the
/// check, so a renamed or dropped attribute cannot linger in the prose.
const OTHER_WORDS: &[&str] = &[
    "true",
    "false",
    "net0",
    "net1",
    "net5",
    "virtio",
    "hotplug",
    "network",
    "vmbr1",
    "ens19",
    "onboot",
    "iso",
    "proxyvm",
    "running",
    "stopped",
    "paused",
    "gone",
    "deleting",
    "manual_cache_clean",
    "import",
    "create_before_destroy",
];

/// Terraform's meta-argument blocks, which a resource's page may quote as blocks.
const META_BLOCKS: &[&str] = &["lifecycle"];

/// How a quoted snippet uses a name.
#[derive(Debug, PartialEq)]
enum Use {
    /// `name`
    Bare(String),
    /// `name.inner`
    Path(Vec<String>),
    /// `name { inner, … }`: a block.
    Block(String, Vec<String>),
    /// `name = …`, with the names inside when the value is `{ … }`.
    Assigned(String, Option<Vec<String>>),
}

/// The use a snippet makes of a name, or `None` for a snippet that is no name (a value, a
/// path, a command).
fn parse(snippet: &str) -> Option<Use> {
    let ident = r"[a-z][a-z0-9_]*";
    let snippet = snippet.trim();
    let inner = |text: &str| -> Vec<String> {
        text.split(',')
            .map(|part| part.split('=').next().unwrap_or_default().trim())
            .filter(|part| !part.is_empty() && !matches!(*part, "…" | "..."))
            .map(str::to_owned)
            .collect()
    };
    let block = Regex::new(&format!(r"^({ident}) \{{(.*)\}}$")).unwrap();
    if let Some(found) = block.captures(snippet) {
        return Some(Use::Block(found[1].to_owned(), inner(&found[2])));
    }
    let object = Regex::new(&format!(r"^({ident}) = \{{(.*)\}}$")).unwrap();
    if let Some(found) = object.captures(snippet) {
        return Some(Use::Assigned(found[1].to_owned(), Some(inner(&found[2]))));
    }
    let assigned = Regex::new(&format!(r"^({ident}) = .+$")).unwrap();
    if let Some(found) = assigned.captures(snippet) {
        return Some(Use::Assigned(found[1].to_owned(), None));
    }
    if Regex::new(&format!(r"^{ident}(\.{ident})+$"))
        .unwrap()
        .is_match(snippet)
    {
        return Some(Use::Path(snippet.split('.').map(str::to_owned).collect()));
    }
    Regex::new(&format!(r"^{ident}$"))
        .unwrap()
        .is_match(snippet)
        .then(|| Use::Bare(snippet.to_owned()))
}

/// What is wrong with `usage` in `block`; `deprecated_ok` accepts a deprecated attribute.
fn problem(block: &Block, usage: &Use, deprecated_ok: bool) -> Option<String> {
    let attribute = |name: &str| {
        let found = block.get_attribute(name);
        match found {
            Some(a) if a.deprecated && !deprecated_ok => {
                Err(format!("`{name}` is deprecated: name what replaces it"))
            }
            Some(a) => Ok(Some(a)),
            None if block.blocks.iter().any(|b| b.type_name == name) => Ok(None),
            None => Err(format!("`{name}` is no attribute of the schema")),
        }
    };
    let nested_names = |name: &str, names: &[String]| -> Option<String> {
        let Ok(Some(found)) = attribute(name) else {
            return None;
        };
        let AttributeKind::Nested(nested) = &found.kind else {
            return Some(format!("`{name}` holds no attributes"));
        };
        names
            .iter()
            .find(|inner| !nested.attributes.iter().any(|a| &a.name == *inner))
            .map(|inner| format!("`{name}` has no attribute `{inner}`"))
    };
    match usage {
        Use::Bare(name) => attribute(name).err(),
        Use::Path(path) => nested_names(&path[0], &path[1..path.len().min(2)])
            .or_else(|| attribute(&path[0]).err()),
        Use::Block(name, names) => match attribute(name) {
            Err(why) => Some(why),
            Ok(Some(found)) => Some(match found.kind {
                AttributeKind::Nested(_) => format!(
                    "`{name}` is an attribute, not a block: write `{name} = {{ {} }}`",
                    names.join(", ")
                ),
                AttributeKind::Type(_) => format!("`{name}` is an attribute, not a block"),
            }),
            Ok(None) => None,
        },
        Use::Assigned(name, names) => match attribute(name) {
            Err(why) => Some(why),
            Ok(None) => Some(format!("`{name}` is a block: write `{name} {{ … }}`")),
            Ok(Some(_)) => names.as_ref().and_then(|names| nested_names(name, names)),
        },
    }
}

/// The inline code of a markdown text, outside fenced blocks (examples, which `terraform
/// validate` checks).
fn quoted(markdown: &str) -> Vec<String> {
    let mut outside = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            outside.push_str(line);
            outside.push('\n');
        }
    }
    Regex::new(r"`([^`\n]+)`")
        .unwrap()
        .captures_iter(&outside)
        .map(|found| found[1].to_owned())
        .collect()
}

/// The first cell of each row of the table under `heading`, without its parenthesised notes.
fn first_cells(markdown: &str, heading: &str) -> Vec<String> {
    let notes = Regex::new(r"\([^)]*\)").unwrap();
    let section = markdown
        .split_once(heading)
        .unwrap_or_else(|| panic!("no section {heading:?}"))
        .1;
    let rows: Vec<String> = section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .filter_map(|row| row.split('|').nth(1))
        .map(|cell| notes.replace_all(cell, "").into_owned())
        .collect();
    assert!(!rows.is_empty(), "no table under {heading:?}");
    rows
}

/// Every attribute and block name of `block`, at every depth.
fn all_names(block: &Block, names: &mut BTreeSet<String>) {
    for attribute in &block.attributes {
        names.insert(attribute.name.clone());
        if let AttributeKind::Nested(nested) = &attribute.kind {
            for inner in &nested.attributes {
                names.insert(inner.name.clone());
            }
        }
    }
    for nested in &block.blocks {
        names.insert(nested.type_name.clone());
        all_names(&nested.block, names);
    }
}

fn resource_block() -> Block {
    let provider = ProxmoxProvider::new();
    let resources = provider.resources();
    assert_eq!(resources.len(), 1, "the guide maps one resource");
    resources[0].schema().block
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The environment variables `src/provider.rs` reads: its `PROXMOX_VE_*` constants.
fn provider_variables() -> Vec<String> {
    let source = read("src/provider.rs");
    terraform_provider_proxmox::schema_table::declared_names(&source)
        .into_iter()
        .filter(|value| value.starts_with("PROXMOX_VE_"))
        .map(str::to_owned)
        .collect()
}

/// What is wrong with the "This provider" cells of the guide's two mapping tables.
fn mapping_problems(guide: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let resource = resource_block();
    for cell in first_cells(guide, "## The resource, attribute by attribute") {
        for snippet in quoted(&cell) {
            match parse(&snippet) {
                None => problems.push(format!("`{snippet}` names no attribute")),
                Some(usage) => problems.extend(problem(&resource, &usage, false)),
            }
        }
    }
    let provider = ProxmoxProvider::new().schema().block;
    let variables = provider_variables();
    for cell in first_cells(guide, "## The provider block and its environment variables") {
        for snippet in quoted(&cell) {
            if snippet.starts_with("PROXMOX_VE_") {
                if !variables.contains(&snippet) {
                    problems.push(format!("the provider reads no variable `{snippet}`"));
                }
                continue;
            }
            match parse(&snippet) {
                None => problems.push(format!("`{snippet}` names no provider attribute")),
                Some(usage) => problems.extend(problem(&provider, &usage, false)),
            }
        }
    }
    problems
}

#[test]
fn the_bpg_and_telmate_mapping_names_attributes_as_the_schema_has_them() {
    let problems = mapping_problems(&read(GUIDE));
    assert!(problems.is_empty(), "{GUIDE}:\n  {}", problems.join("\n  "));
}

#[test]
fn the_mapping_check_refuses_blocks_unknown_and_deprecated_names() {
    let resource =
        "## The resource, attribute by attribute\n\n| This provider | bpg |\n|---|---|\n";
    let provider = "## The provider block and its environment variables\n\n| This provider \
                    |\n|---|\n| `endpoint` / `PROXMOX_VE_ENDPOINT` (`https://host:8006`) |\n";
    let guide = |row: &str| format!("{resource}| {row} | x |\n\n{provider}");
    assert!(mapping_problems(&guide("`name` (default `x`)")).is_empty());
    assert!(mapping_problems(&guide("`timeouts = { create, update, … }`")).is_empty());
    for (row, expected) in [
        (
            "`timeouts { create, update }`",
            "`timeouts` is an attribute, not a block: write `timeouts = { create, update }`",
        ),
        ("`node_name`", "`node_name` is no attribute of the schema"),
        (
            "`wait_for_address`",
            "`wait_for_address` is no attribute of the schema",
        ),
        (
            "`timeouts = { create, boot }`",
            "`timeouts` has no attribute `boot`",
        ),
        ("`timeouts.boot`", "`timeouts` has no attribute `boot`"),
        ("`cores { count }`", "`cores` is an attribute, not a block"),
        ("`cores = { count }`", "`cores` holds no attributes"),
    ] {
        assert_eq!(mapping_problems(&guide(row)), [expected], "{row}");
    }
    let env = format!(
        "{resource}| `name` | x |\n\n{}",
        provider.replace("ENDPOINT`", "URL`")
    );
    assert_eq!(
        mapping_problems(&env),
        ["the provider reads no variable `PROXMOX_VE_URL`"]
    );
}

/// Every name the resource's page quotes is an attribute of some schema of the provider (or
/// a word of [`OTHER_WORDS`]), and a quoted `name { … }` or `name = …` is written as the
/// schema declares it.
#[test]
fn the_resource_page_quotes_only_names_the_schemas_have() {
    let provider = ProxmoxProvider::new();
    let resource = resource_block();
    let mut known: BTreeSet<String> = OTHER_WORDS.iter().map(|w| w.to_string()).collect();
    all_names(&provider.schema().block, &mut known);
    for resource in provider.resources() {
        known.insert(resource.type_name().to_owned());
        all_names(&resource.schema().block, &mut known);
    }
    for data_source in provider.data_sources() {
        known.insert(data_source.type_name().to_owned());
        all_names(&data_source.schema().block, &mut known);
    }
    let mut problems = Vec::new();
    for snippet in quoted(&read(RESOURCE_PAGE)) {
        let found = match parse(&snippet) {
            None => None,
            Some(Use::Bare(name)) => (!known.contains(&name))
                .then(|| format!("`{name}` is no attribute of any schema, nor a known word")),
            Some(Use::Block(name, _)) if META_BLOCKS.contains(&name.as_str()) => None,
            Some(usage) => problem(&resource, &usage, true),
        };
        problems.extend(found.map(|why| format!("`{snippet}`: {why}")));
    }
    assert!(
        problems.is_empty(),
        "{RESOURCE_PAGE}:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn a_deprecated_attribute_is_refused_in_the_mapping_and_allowed_on_the_page() {
    let block = Block::new().attribute(
        tfplugin::Attribute::new("old", tfplugin::Type::Bool)
            .optional()
            .deprecated(),
    );
    let old = Use::Bare("old".into());
    assert_eq!(
        problem(&block, &old, false).as_deref(),
        Some("`old` is deprecated: name what replaces it")
    );
    assert_eq!(problem(&block, &old, true), None);
}

#[test]
fn snippets_parse_as_the_names_they_use() {
    let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(parse("tags"), Some(Use::Bare("tags".into())));
    assert_eq!(
        parse("timeouts.create"),
        Some(Use::Path(names(&["timeouts", "create"])))
    );
    assert_eq!(
        parse("timeouts { create, … }"),
        Some(Use::Block("timeouts".into(), names(&["create"])))
    );
    assert_eq!(
        parse("timeouts = { create = \"20m\" }"),
        Some(Use::Assigned("timeouts".into(), Some(names(&["create"]))))
    );
    assert_eq!(
        parse("wait_for = \"none\""),
        Some(Use::Assigned("wait_for".into(), None))
    );
    for not_a_name in [
        "\"cloud-init\"",
        "15m",
        "ide2: none",
        "-refresh=false",
        "#!",
    ] {
        assert_eq!(parse(not_a_name), None, "{not_a_name}");
    }
}
