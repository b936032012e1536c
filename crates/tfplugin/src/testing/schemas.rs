//! What a provider's schemas tell a client: the types it encodes and decodes values with, and
//! the checks Terraform runs on schemas before anything else (a provider failing them fails
//! every command).

use std::collections::BTreeMap;

use super::Violation;
use crate::proto::tfplugin6 as pb;
use crate::value::Type;

/// A managed resource type as the client knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceSchema {
    /// Schema version.
    pub version: i64,
    /// The type of its states.
    pub value_type: Type,
    /// Its top-level write-only attributes.
    pub write_only: Vec<String>,
    /// Its identity, when it has one.
    pub identity: Option<IdentityTypes>,
}

/// A resource type's identity as the client knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityTypes {
    /// Identity schema version.
    pub version: i64,
    /// The type of identity values.
    pub value_type: Type,
    /// The attributes an import block must give.
    pub required_for_import: Vec<String>,
}

/// A list resource type as the client knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ListSchema {
    /// The type of its `config` block.
    pub config_type: Type,
    /// Whether a `list` block must have a `config` block (some attribute is required).
    pub config_required: bool,
}

/// Everything `GetProviderSchema` and `GetResourceIdentitySchemas` said.
#[derive(Clone, Debug, PartialEq)]
pub struct Schemas {
    /// The provider block's type.
    pub provider: Type,
    /// Managed resource types.
    pub resources: BTreeMap<String, ResourceSchema>,
    /// Data source types, by the type of their values.
    pub data_sources: BTreeMap<String, Type>,
    /// List resource types.
    pub list_resources: BTreeMap<String, ListSchema>,
    /// Action types, by the type of their `config` block.
    pub actions: BTreeMap<String, Type>,
    /// The server's capabilities.
    pub capabilities: pb::ServerCapabilities,
}

const LOAD_SCHEMAS: &str = "internal/schemarepo/loadschemas/plugins.go ProviderSchema";
const GET_SCHEMA: &str = "internal/plugin6/grpc_provider.go GetProviderSchema";

impl Schemas {
    /// Reads both answers as Terraform does, refusing what Terraform refuses.
    pub(crate) fn from_answers(
        schema: &pb::get_provider_schema::Response,
        identities: &pb::get_resource_identity_schemas::Response,
    ) -> Result<Schemas, Violation> {
        no_errors(&schema.diagnostics, GET_SCHEMA)?;
        no_errors(&identities.diagnostics, GET_SCHEMA)?;
        let provider = schema
            .provider
            .as_ref()
            .ok_or_else(|| Violation::new(GET_SCHEMA, "missing provider schema"))?;
        let mut resources = BTreeMap::new();
        for (name, resource) in &schema.resource_schemas {
            let identity = identities.identity_schemas.get(name);
            resources.insert(name.clone(), resource_schema(name, resource, identity)?);
        }
        let mut list_resources = BTreeMap::new();
        for (name, list) in &schema.list_resource_schemas {
            list_resources.insert(name.clone(), list_schema(name, list)?);
        }
        let mut actions = BTreeMap::new();
        for (name, action) in &schema.action_schemas {
            actions.insert(name.clone(), action_type(name, action)?);
        }
        let mut data_sources = BTreeMap::new();
        for (name, data) in &schema.data_source_schemas {
            data_sources.insert(name.clone(), checked_block(name, data)?);
        }
        if provider.version < 0 {
            return Err(Violation::new(
                LOAD_SCHEMAS,
                "negative provider schema version",
            ));
        }
        Ok(Schemas {
            provider: unchecked_block("provider", provider)?,
            resources,
            data_sources,
            list_resources,
            actions,
            capabilities: schema.server_capabilities.unwrap_or_default(),
        })
    }

    /// The schema of a managed resource type, or what Terraform says when it has none.
    pub(crate) fn resource(
        &self,
        type_name: &str,
        check: &'static str,
    ) -> Result<&ResourceSchema, Violation> {
        self.resources
            .get(type_name)
            .ok_or_else(|| Violation::new(check, format!("unknown resource type {type_name:?}")))
    }
}

/// Error diagnostics end the schema read (`GetProviderSchema`).
fn no_errors(diagnostics: &[pb::Diagnostic], check: &'static str) -> Result<(), Violation> {
    match diagnostics
        .iter()
        .find(|d| d.severity != pb::diagnostic::Severity::Warning as i32)
    {
        Some(error) => Err(Violation::new(
            check,
            format!("error diagnostic {:?}", error.summary),
        )),
        None => Ok(()),
    }
}

fn resource_schema(
    name: &str,
    schema: &pb::Schema,
    identity: Option<&pb::ResourceIdentitySchema>,
) -> Result<ResourceSchema, Violation> {
    if schema.version < 0 {
        return Err(Violation::new(
            LOAD_SCHEMAS,
            format!("{name}: negative schema version"),
        ));
    }
    let write_only = schema
        .block
        .iter()
        .flat_map(|block| &block.attributes)
        .filter(|a| a.write_only)
        .map(|a| a.name.clone())
        .collect();
    Ok(ResourceSchema {
        version: schema.version,
        value_type: checked_block(name, schema)?,
        write_only,
        identity: identity.map(|i| identity_types(name, i)).transpose()?,
    })
}

/// The identity schema rules: every attribute's type parses (`ProtoToIdentitySchema` in
/// `internal/plugin6/convert/schema.go` panics otherwise), sets exactly one of
/// `required_for_import` and `optional_for_import` (`Object.InternalValidate` in
/// `internal/configs/configschema/internal_validate.go`), is no map, set or object, and the
/// version is not negative (`ProviderSchema` in `internal/schemarepo/loadschemas/plugins.go`).
fn identity_types(
    name: &str,
    identity: &pb::ResourceIdentitySchema,
) -> Result<IdentityTypes, Violation> {
    let refuse =
        |detail: String| Violation::new(LOAD_SCHEMAS, format!("{name} identity: {detail}"));
    if identity.version < 0 {
        return Err(refuse("negative identity version".into()));
    }
    let mut attributes = BTreeMap::new();
    let mut required_for_import = Vec::new();
    for attribute in &identity.identity_attributes {
        let ty = parse_type(&attribute.r#type)
            .map_err(|e| refuse(format!("attribute {:?}: {e}", attribute.name)))?;
        if attribute.required_for_import == attribute.optional_for_import {
            return Err(refuse(format!(
                "attribute {:?} must be exactly one of required_for_import and \
                 optional_for_import",
                attribute.name
            )));
        }
        if matches!(ty, Type::Map(_) | Type::Set(_) | Type::Object(_)) {
            return Err(refuse(format!(
                "attribute {:?} is a map, set or object",
                attribute.name
            )));
        }
        if attribute.required_for_import {
            required_for_import.push(attribute.name.clone());
        }
        attributes.insert(attribute.name.clone(), ty);
    }
    Ok(IdentityTypes {
        version: identity.version,
        value_type: Type::Object(attributes),
        required_for_import,
    })
}

/// Terraform wraps a list schema in a block with a `config` block that is required when any
/// attribute is required or any block has a minimum (`ProtoToListSchema` in
/// `internal/plugin6/convert/schema.go`), and validates the result like any schema.
fn list_schema(name: &str, schema: &pb::Schema) -> Result<ListSchema, Violation> {
    let block = schema.block.clone().unwrap_or_default();
    let config_required = block.attributes.iter().any(|a| a.required)
        || block.block_types.iter().any(|b| b.min_items > 0);
    Ok(ListSchema {
        config_type: checked_block(name, schema)?,
        config_required,
    })
}

/// An action schema without its schema or block crashes the client (`ProtoToActionSchema` in
/// `internal/plugin6/convert/schema.go` dereferences both).
fn action_type(name: &str, action: &pb::ActionSchema) -> Result<Type, Violation> {
    match &action.schema {
        Some(schema) if schema.block.is_some() => unchecked_block(name, schema),
        _ => Err(Violation::new(
            "internal/plugin6/convert/schema.go ProtoToActionSchema",
            format!("action {name} has no schema block"),
        )),
    }
}

/// The type of a schema Terraform validates when it loads it (resources, data sources, list
/// resources: `ProviderSchema` in `internal/schemarepo/loadschemas/plugins.go`).
fn checked_block(name: &str, schema: &pb::Schema) -> Result<Type, Violation> {
    let mut problems = Vec::new();
    if let Some(block) = &schema.block {
        validate_block(block, &format!("{name}: "), &mut problems);
    }
    if let Some(problem) = problems.into_iter().next() {
        return Err(Violation::new(
            "internal/configs/configschema/internal_validate.go Block.InternalValidate",
            problem,
        ));
    }
    unchecked_block(name, schema)
}

/// The type of a schema Terraform loads without validating it (the provider block, actions).
fn unchecked_block(name: &str, schema: &pb::Schema) -> Result<Type, Violation> {
    let block = schema.block.clone().unwrap_or_default();
    block_type(&block).map_err(|e| Violation::new(GET_SCHEMA, format!("{name}: {e}")))
}

fn parse_type(json: &[u8]) -> Result<Type, String> {
    let json: serde_json::Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    Type::from_json(&json).map_err(|e| e.to_string())
}

fn block_type(block: &pb::schema::Block) -> Result<Type, String> {
    let mut fields = BTreeMap::new();
    for attribute in &block.attributes {
        fields.insert(attribute.name.clone(), attribute_type(attribute)?);
    }
    for nested in &block.block_types {
        use pb::schema::nested_block::NestingMode;
        let object = block_type(nested.block.as_ref().ok_or("a nested block has no block")?)?;
        let ty = match NestingMode::try_from(nested.nesting) {
            Ok(NestingMode::List) => Type::list(object),
            Ok(NestingMode::Set) => Type::set(object),
            Ok(NestingMode::Map) => Type::map(object),
            _ => object,
        };
        fields.insert(nested.type_name.clone(), ty);
    }
    Ok(Type::Object(fields))
}

fn attribute_type(attribute: &pb::schema::Attribute) -> Result<Type, String> {
    let Some(nested) = &attribute.nested_type else {
        return parse_type(&attribute.r#type);
    };
    use pb::schema::object::NestingMode;
    let mut fields = BTreeMap::new();
    for inner in &nested.attributes {
        fields.insert(inner.name.clone(), attribute_type(inner)?);
    }
    let object = Type::Object(fields);
    Ok(match NestingMode::try_from(nested.nesting) {
        Ok(NestingMode::List) => Type::list(object),
        Ok(NestingMode::Set) => Type::set(object),
        Ok(NestingMode::Map) => Type::map(object),
        _ => object,
    })
}

/// The attribute and block rules of `Block.InternalValidate`
/// (`internal/configs/configschema/internal_validate.go`), run on every schema Terraform loads.
fn validate_block(block: &pb::schema::Block, prefix: &str, problems: &mut Vec<String>) {
    for a in &block.attributes {
        let name = format!("{prefix}{}", a.name);
        if !a.optional && !a.required && !a.computed {
            problems.push(format!("{name}: must set Optional, Required or Computed"));
        }
        if a.optional && a.required {
            problems.push(format!("{name}: cannot set both Optional and Required"));
        }
        if a.computed && a.required {
            problems.push(format!("{name}: cannot set both Computed and Required"));
        }
        if a.r#type.is_empty() == a.nested_type.is_none() {
            problems.push(format!(
                "{name}: exactly one of Type and NestedType must be set"
            ));
        }
    }
    for nested in &block.block_types {
        use pb::schema::nested_block::NestingMode;
        let name = format!("{prefix}{}", nested.type_name);
        let valid_name = !nested.type_name.is_empty()
            && nested
                .type_name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_name {
            problems.push(format!(
                "{name}: name may contain only lowercase letters, digits and underscores"
            ));
        }
        let (min, max) = (nested.min_items, nested.max_items);
        let bounds_ok = match NestingMode::try_from(nested.nesting) {
            Ok(NestingMode::Single) => min == max && (0..=1).contains(&min),
            Ok(NestingMode::Group | NestingMode::Map) => min == 0 && max == 0,
            Ok(NestingMode::List | NestingMode::Set) => {
                min >= 0 && max >= 0 && (min <= max || max == 0)
            }
            _ => false,
        };
        if !bounds_ok {
            problems.push(format!("{name}: invalid nesting mode or MinItems/MaxItems"));
        }
        if let Some(inner) = &nested.block {
            validate_block(inner, &format!("{name}."), problems);
        }
    }
}
