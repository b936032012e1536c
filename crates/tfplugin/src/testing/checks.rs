//! Checks Terraform makes on more than one kind of answer. Each names the Terraform source it
//! mirrors (tag v1.14.9 unless said otherwise).

use super::Violation;
use super::schemas::ResourceSchema;
use crate::codec::decode_dynamic_value;
use crate::diag::Diagnostics;
use crate::proto::tfplugin6 as pb;
use crate::value::{Type, Value};

/// Every value the provider sends is decoded with the type the schema implies, msgpack first,
/// then JSON; an absent value is null (`decodeDynamicValue` in
/// `internal/plugin6/grpc_provider.go`). A value that does not decode is an error there.
pub(super) fn decode(
    value: Option<&pb::DynamicValue>,
    ty: &Type,
    check: &'static str,
    what: &str,
) -> Result<Value, Violation> {
    match value {
        None => Ok(Value::Null),
        Some(value) => decode_dynamic_value(value, ty)
            .map_err(|e| Violation::new(check, format!("{what} does not decode: {e}"))),
    }
}

/// An identity in an answer is decoded with the resource's identity type; a resource without
/// identity schema that answers with an identity is refused ("unknown identity type" or
/// "identity type not found" in `ReadResource`, `PlanResourceChange`, `ApplyResourceChange`,
/// `ImportResourceState` of `internal/plugin6/grpc_provider.go`). Absent means null.
pub(super) fn identity(
    schema: &ResourceSchema,
    data: Option<&pb::ResourceIdentityData>,
    check: &'static str,
) -> Result<Value, Violation> {
    let Some(value) = data.and_then(|d| d.identity_data.as_ref()) else {
        return Ok(Value::Null);
    };
    let Some(identity) = &schema.identity else {
        return Err(Violation::new(
            check,
            "an identity for a resource without identity schema",
        ));
    };
    decode(Some(value), &identity.value_type, check, "the identity")
}

/// An identity the provider returns from a read, an apply, an import, a destroy plan or an
/// update plan must be wholly known (`validateIdentityKnown` in
/// `internal/terraform/node_resource_abstract_instance.go`).
pub(super) fn identity_known(identity: &Value, answer: &str) -> Result<(), Violation> {
    if identity.is_wholly_known() {
        return Ok(());
    }
    Err(Violation::new(
        "internal/terraform/node_resource_abstract_instance.go validateIdentityKnown",
        format!("{answer} returned an identity with unknown values"),
    ))
}

/// The request value Terraform sends for a type, encoded as Terraform does (msgpack).
pub(super) fn encode(value: &Value, ty: &Type, what: &str) -> Option<pb::DynamicValue> {
    let encoded = crate::codec::encode_dynamic_value(value, ty)
        .unwrap_or_else(|e| panic!("the test's {what} does not fit its schema: {e}"));
    Some(encoded)
}

/// An identity the client sends, if any.
pub(super) fn identity_data(
    schema: &ResourceSchema,
    identity: &Value,
) -> Option<pb::ResourceIdentityData> {
    if identity.is_null() {
        return None;
    }
    let types = schema
        .identity
        .as_ref()
        .expect("the test sends an identity for a resource without identity schema");
    Some(pb::ResourceIdentityData {
        identity_data: encode(identity, &types.value_type, "identity"),
    })
}

/// Write-only attributes are null in every object a provider returns: imports, moves, reads
/// and applies (`ValidateWriteOnlyAttributes` in `internal/lang/ephemeral/validate.go`, called
/// from `importState` in `internal/terraform/node_resource_plan_instance.go` among others).
pub(super) fn write_only_null(
    schema: &ResourceSchema,
    state: &Value,
    answer: &str,
) -> Result<(), Violation> {
    match schema
        .write_only
        .iter()
        .find(|name| !state.is_null() && !state.get_attr(name).is_null())
    {
        Some(name) => Err(Violation::new(
            "internal/lang/ephemeral/validate.go ValidateWriteOnlyAttributes",
            format!("{answer} returned a value for the write-only attribute {name:?}"),
        )),
        None => Ok(()),
    }
}

pub(super) fn diagnostics(diagnostics: &[pb::Diagnostic]) -> Diagnostics {
    Diagnostics::from_proto(diagnostics)
}
