//! Moves across resource types (protocol 6.5, with identity since 6.9): a `moved` block whose
//! `from` is another resource type, of this provider or another, hands the stored object to
//! the target type, which turns it into a state of its own (`MoveResourceState`). Terraform
//! asks only providers that announce the capability
//! (`internal/refactoring/cross_provider_move.go` at v1.14.9).

use crate::diag::Diagnostics;
use crate::value::Value;

/// `MoveResourceState` input: the source object as Terraform stored it.
#[derive(Clone)]
pub struct MoveRequest {
    /// The source provider's address, e.g. `registry.terraform.io/example/old`.
    pub source_provider_address: String,
    /// The source resource type.
    pub source_type_name: String,
    /// The source's schema version.
    pub source_schema_version: i64,
    /// The source state as stored (JSON of that schema version).
    pub source_state_json: Vec<u8>,
    /// The source's private bytes.
    pub source_private: Vec<u8>,
    /// The source's identity as stored (JSON), empty when it has none.
    pub source_identity_json: Vec<u8>,
    /// The source identity's schema version (Terraform up to 1.16 does not send it: 0).
    pub source_identity_schema_version: i64,
}

impl std::fmt::Debug for MoveRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Stored state may hold secrets: sizes only.
        f.debug_struct("MoveRequest")
            .field("source_provider_address", &self.source_provider_address)
            .field("source_type_name", &self.source_type_name)
            .field("source_schema_version", &self.source_schema_version)
            .field("source_state_json_len", &self.source_state_json.len())
            .field("source_identity_json_len", &self.source_identity_json.len())
            .finish()
    }
}

/// `MoveResourceState` output.
#[derive(Clone, Debug, Default)]
pub struct MoveResponse {
    /// The state of the target type, wholly known, write-only attributes null.
    pub target_state: Value,
    /// The target's private bytes.
    pub target_private: Vec<u8>,
    /// The target's identity. `None`: [`crate::Resource::identity_of`] the target state.
    pub target_identity: Option<Value>,
    /// Problems found.
    pub diagnostics: Diagnostics,
}
