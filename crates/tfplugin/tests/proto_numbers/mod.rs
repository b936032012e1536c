//! Our `proto/tfplugin6.proto` against Terraform's: every message, field and RPC we declare
//! must exist in Terraform's file with the same number, type, label and streaming. Terraform's
//! file is not part of this repository; point the test at one taken from a release tag:
//!
//! ```sh
//! git --git-dir=<terraform.git> show v1.14.9:docs/plugin-protocol/tfplugin6.proto >/tmp/t.proto
//! TERRAFORM_TFPLUGIN6_PROTO=/tmp/t.proto \
//!   cargo test -p tfplugin --test plugin -- --ignored proto_numbers --nocapture
//! ```
//!
//! It also prints what Terraform's file has and ours leaves out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost_types::{DescriptorProto, FileDescriptorSet, field_descriptor_proto::Label};

/// How a field or RPC looks on the wire, by its full name.
fn shapes(set: &FileDescriptorSet) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for file in set.file.iter().filter(|f| f.package() == "tfplugin6") {
        for message in &file.message_type {
            message_shapes(".tfplugin6", message, &mut out);
        }
        for service in &file.service {
            for method in &service.method {
                out.insert(
                    format!("rpc {}.{}", service.name(), method.name()),
                    format!(
                        "({}{}) -> ({}{})",
                        if method.client_streaming() {
                            "stream "
                        } else {
                            ""
                        },
                        method.input_type(),
                        if method.server_streaming() {
                            "stream "
                        } else {
                            ""
                        },
                        method.output_type()
                    ),
                );
            }
        }
    }
    out
}

fn message_shapes(scope: &str, message: &DescriptorProto, out: &mut BTreeMap<String, String>) {
    let name = format!("{scope}.{}", message.name());
    out.insert(format!("message {name}"), String::new());
    for field in &message.field {
        let label = match field.label() {
            Label::Repeated => "repeated ",
            _ if field.proto3_optional() => "optional ",
            _ => "",
        };
        let oneof = field
            .oneof_index
            .filter(|_| !field.proto3_optional())
            .map(|i| format!(" in oneof {}", message.oneof_decl[i as usize].name()))
            .unwrap_or_default();
        out.insert(
            format!("field {name}.{}", field.name()),
            format!(
                "{label}{:?}{} = {}{oneof}",
                field.r#type(),
                field
                    .type_name
                    .as_deref()
                    .map(|t| format!(" {t}"))
                    .unwrap_or_default(),
                field.number()
            ),
        );
    }
    for nested in &message.nested_type {
        message_shapes(&name, nested, out);
    }
    for e in &message.enum_type {
        for value in &e.value {
            out.insert(
                format!("enum value {name}.{}.{}", e.name(), value.name()),
                value.number().to_string(),
            );
        }
    }
}

fn compile(path: &Path) -> FileDescriptorSet {
    let dir = path.parent().unwrap();
    let file = path.file_name().unwrap();
    protox::compile([file], [dir]).unwrap()
}

#[test]
#[ignore = "needs TERRAFORM_TFPLUGIN6_PROTO, a tfplugin6.proto from a Terraform release tag"]
fn proto_numbers_match_terraforms() {
    let theirs = std::env::var_os("TERRAFORM_TFPLUGIN6_PROTO")
        .expect("set TERRAFORM_TFPLUGIN6_PROTO to Terraform's tfplugin6.proto");
    let ours = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto/tfplugin6.proto");
    let ours = shapes(&compile(&ours));
    let theirs = shapes(&compile(Path::new(&theirs)));
    let mut differences = Vec::new();
    for (name, shape) in &ours {
        match theirs.get(name) {
            Some(their_shape) if their_shape == shape => {}
            Some(their_shape) => {
                differences.push(format!("{name}: ours {shape}, Terraform's {their_shape}"));
            }
            None => differences.push(format!("{name}: not in Terraform's file")),
        }
    }
    let left_out: Vec<&String> = theirs.keys().filter(|n| !ours.contains_key(*n)).collect();
    println!(
        "{} declarations compared; in Terraform's file only:",
        ours.len()
    );
    for name in left_out {
        println!("  {name}");
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
