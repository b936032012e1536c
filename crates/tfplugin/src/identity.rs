//! Resource identity (protocol 6.9, Terraform 1.12+): a small, versioned object that names the
//! remote object a resource instance manages, apart from its state. Terraform stores it beside
//! the state, imports by it (`import { identity = {...} }`) and lists by it (list resources).
//!
//! This module holds the identity schema and its upgrade; it never decides what an identity
//! is: that is the resource's [`crate::Resource::identity_of`].

use crate::codec::json_value;
use crate::diag::Diagnostics;
use crate::proto::tfplugin6 as pb;
use crate::value::{Type, Value};

/// Whether an import block must or may give an identity attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportRole {
    /// `import { identity = {...} }` must set it.
    Required,
    /// It may be left out: the provider finds it.
    Optional,
}

/// One attribute of an identity. Terraform allows only primitive types and lists here (no map,
/// set or object; `loadschemas/plugins.go` `ProviderSchema` at Terraform v1.14.9).
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityAttribute {
    /// Attribute name.
    pub name: String,
    /// Its type.
    pub ty: Type,
    /// What an import block must give.
    pub import: ImportRole,
    /// Markdown description.
    pub description: String,
}

impl IdentityAttribute {
    /// An attribute an import by identity must give.
    pub fn required(name: impl Into<String>, ty: Type) -> IdentityAttribute {
        IdentityAttribute {
            name: name.into(),
            ty,
            import: ImportRole::Required,
            description: String::new(),
        }
    }

    /// An attribute an import by identity may leave out.
    pub fn optional(name: impl Into<String>, ty: Type) -> IdentityAttribute {
        IdentityAttribute {
            import: ImportRole::Optional,
            ..IdentityAttribute::required(name, ty)
        }
    }

    /// Sets the markdown description.
    #[must_use]
    pub fn description(mut self, markdown: impl Into<String>) -> IdentityAttribute {
        self.description = markdown.into();
        self
    }

    fn to_proto(&self) -> pb::resource_identity_schema::IdentityAttribute {
        pb::resource_identity_schema::IdentityAttribute {
            name: self.name.clone(),
            r#type: self.ty.to_json().to_string().into_bytes(),
            required_for_import: self.import == ImportRole::Required,
            optional_for_import: self.import == ImportRole::Optional,
            description: self.description.clone(),
        }
    }
}

/// A resource type's identity schema. Its version is separate from the state schema's: raise it
/// when stored identities need upgrading ([`crate::Resource::upgrade_identity`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IdentitySchema {
    /// Identity schema version (0 or more).
    pub version: i64,
    /// The attributes, each with a unique name.
    pub attributes: Vec<IdentityAttribute>,
}

impl IdentitySchema {
    /// A version-0 identity schema with no attributes yet.
    pub fn new() -> IdentitySchema {
        IdentitySchema::default()
    }

    /// Sets the version.
    #[must_use]
    pub fn with_version(mut self, version: i64) -> IdentitySchema {
        self.version = version;
        self
    }

    /// Adds an attribute.
    #[must_use]
    pub fn attribute(mut self, attribute: IdentityAttribute) -> IdentitySchema {
        self.attributes.push(attribute);
        self
    }

    /// The object type of identity values.
    pub fn value_type(&self) -> Type {
        Type::object(
            self.attributes
                .iter()
                .map(|a| (a.name.clone(), a.ty.clone())),
        )
    }

    /// Why Terraform would refuse this schema, if it would: it refuses the whole provider then
    /// (`loadschemas/plugins.go` `ProviderSchema`, `configschema/internal_validate.go`
    /// `Object.InternalValidate` at Terraform v1.14.9).
    pub fn problem(&self) -> Option<String> {
        if self.version < 0 {
            return Some(format!("its version {} is negative", self.version));
        }
        let mut seen = std::collections::BTreeSet::new();
        for attribute in &self.attributes {
            if !seen.insert(attribute.name.as_str()) {
                return Some(format!("attribute {:?} is declared twice", attribute.name));
            }
            let kind = match attribute.ty {
                Type::Map(_) => "a map",
                Type::Set(_) => "a set",
                Type::Object(_) => "an object",
                _ => continue,
            };
            return Some(format!(
                "attribute {:?} is {kind}, which identities cannot hold",
                attribute.name
            ));
        }
        None
    }

    /// The protocol form.
    pub fn to_proto(&self) -> pb::ResourceIdentitySchema {
        pb::ResourceIdentitySchema {
            version: self.version,
            identity_attributes: self
                .attributes
                .iter()
                .map(IdentityAttribute::to_proto)
                .collect(),
        }
    }
}

/// `UpgradeResourceIdentity` input. Terraform sends it only when the stored identity's version
/// is older than the schema's (`upgrade_resource_state.go` `upgradeResourceIdentity`).
#[derive(Clone)]
pub struct UpgradeIdentityRequest {
    /// Identity schema version the identity was stored with.
    pub version: i64,
    /// The stored identity as JSON, in that version's shape.
    pub raw_identity_json: Vec<u8>,
}

impl std::fmt::Debug for UpgradeIdentityRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpgradeIdentityRequest")
            .field("version", &self.version)
            .field("raw_identity_json_len", &self.raw_identity_json.len())
            .finish()
    }
}

/// `UpgradeResourceIdentity` output.
#[derive(Clone, Debug, Default)]
pub struct UpgradeIdentityResponse {
    /// The identity in the current identity schema, wholly known.
    pub upgraded_identity: Value,
    /// Problems found.
    pub diagnostics: Diagnostics,
}

/// The default identity upgrade: decode the stored JSON with the current identity schema
/// (attributes no longer in it are dropped, new ones are null). A newer version is refused.
pub fn upgrade_identity_with_current_schema(
    schema: &IdentitySchema,
    request: &UpgradeIdentityRequest,
) -> UpgradeIdentityResponse {
    let mut response = UpgradeIdentityResponse::default();
    if request.version > schema.version {
        response.diagnostics.error(
            "Identity is from a newer provider",
            format!(
                "The stored identity has version {}, but this provider only knows versions \
                 up to {}. Upgrade the provider.",
                request.version, schema.version
            ),
        );
        return response;
    }
    let parsed = serde_json::from_slice::<serde_json::Value>(&request.raw_identity_json)
        .map_err(|e| e.to_string())
        .and_then(|json| json_value(&json, &schema.value_type()).map_err(|e| e.to_string()));
    match parsed {
        Ok(identity) => response.upgraded_identity = identity,
        Err(error) => response
            .diagnostics
            .error("Stored identity cannot be read", error),
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> IdentitySchema {
        IdentitySchema::new()
            .with_version(1)
            .attribute(IdentityAttribute::required("id", Type::Number))
            .attribute(IdentityAttribute::optional("zone", Type::String).description("Where."))
    }

    #[test]
    fn the_proto_form_sets_exactly_one_import_flag_per_attribute() {
        let proto = schema().to_proto();
        assert_eq!(proto.version, 1);
        let [id, zone] = &proto.identity_attributes[..] else {
            panic!("{proto:?}")
        };
        assert_eq!(id.r#type, br#""number""#);
        assert!(id.required_for_import && !id.optional_for_import);
        assert!(zone.optional_for_import && !zone.required_for_import);
        assert_eq!(zone.description, "Where.");
        assert_eq!(
            schema().value_type(),
            Type::object([("id", Type::Number), ("zone", Type::String)])
        );
    }

    #[test]
    fn schemas_terraform_refuses_are_named() {
        assert_eq!(schema().problem(), None);
        let listed = schema().attribute(IdentityAttribute::optional(
            "tags",
            Type::list(Type::String),
        ));
        assert_eq!(listed.problem(), None);
        for ty in [
            Type::map(Type::String),
            Type::set(Type::String),
            Type::object([("a", Type::String)]),
        ] {
            let bad = schema().attribute(IdentityAttribute::optional("x", ty));
            assert!(bad.problem().unwrap().contains("\"x\""), "{bad:?}");
        }
        assert!(schema().with_version(-1).problem().is_some());
        let twice = schema().attribute(IdentityAttribute::optional("id", Type::String));
        assert!(twice.problem().unwrap().contains("twice"));
    }

    #[test]
    fn the_default_upgrade_reads_older_identities_and_refuses_newer_ones() {
        let request = |version, json: &str| UpgradeIdentityRequest {
            version,
            raw_identity_json: json.as_bytes().to_vec(),
        };
        let upgraded = upgrade_identity_with_current_schema(&schema(), &request(0, r#"{"id":7}"#));
        assert!(
            upgraded.diagnostics.is_empty(),
            "{:?}",
            upgraded.diagnostics
        );
        assert_eq!(upgraded.upgraded_identity.get_attr("id").as_i64(), Some(7));
        assert!(upgraded.upgraded_identity.get_attr("zone").is_null());
        let newer = upgrade_identity_with_current_schema(&schema(), &request(2, "{}"));
        assert!(newer.diagnostics.has_errors());
        let broken = upgrade_identity_with_current_schema(&schema(), &request(0, "{"));
        assert!(broken.diagnostics.has_errors());
    }
}
