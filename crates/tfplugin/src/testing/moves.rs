//! `moved` blocks across resource types, as Terraform runs them
//! (`internal/refactoring/cross_provider_move.go` at v1.14.9).

use super::Violation;
use super::checks::{decode, diagnostics, identity, identity_known, write_only_null};
use super::client::{Client, grpc};
use crate::diag::Diagnostics;
use crate::proto::tfplugin6 as pb;
use crate::value::Value;

/// A `MoveResourceState` request: the source object as Terraform stored it.
#[derive(Clone, Debug, Default)]
pub struct MoveChange {
    /// The source provider's address.
    pub source_provider_address: String,
    /// The source resource type.
    pub source_type_name: String,
    /// The source's schema version.
    pub source_schema_version: i64,
    /// The source state as stored (JSON).
    pub source_state_json: Vec<u8>,
    /// The source's private bytes.
    pub source_private: Vec<u8>,
    /// The source's identity as stored (JSON), empty when it has none.
    pub source_identity_json: Vec<u8>,
    /// The target resource type (this provider's).
    pub target_type_name: String,
}

/// What `MoveResourceState` answered.
#[derive(Clone, Debug)]
pub struct Moved {
    /// The state of the target type (null when errors were reported).
    pub target_state: Value,
    /// The target's private bytes.
    pub target_private: Vec<u8>,
    /// The target's identity (null when none was sent).
    pub target_identity: Value,
    /// The provider's diagnostics.
    pub diagnostics: Diagnostics,
}

const MOVE: &str = "internal/plugin6/grpc_provider.go MoveResourceState";
const APPLY_MOVE: &str = "internal/refactoring/cross_provider_move.go applyCrossTypeMove";

impl Client {
    /// `MoveResourceState` as Terraform sends it (no identity schema version; the identity only
    /// when there is one). Terraform asks only a provider that announced `move_resource_state`
    /// (`prepareCrossTypeMove`); the target state must decode with the target type, be wholly
    /// known with write-only attributes null, and a target identity must be wholly known
    /// (`applyCrossTypeMove`).
    pub async fn move_resource_state(&mut self, change: &MoveChange) -> Result<Moved, Violation> {
        let schemas = self.schemas().await?;
        if !schemas.capabilities.move_resource_state {
            return Err(Violation::new(
                "internal/refactoring/cross_provider_move.go prepareCrossTypeMove",
                "the provider does not support moved operations across resource types",
            ));
        }
        let target = schemas.resource(&change.target_type_name, MOVE)?;
        let raw = |json: &[u8]| pb::RawState {
            json: json.to_vec(),
            flatmap: Default::default(),
        };
        let request = pb::move_resource_state::Request {
            source_provider_address: change.source_provider_address.clone(),
            source_type_name: change.source_type_name.clone(),
            source_schema_version: change.source_schema_version,
            source_state: Some(raw(&change.source_state_json)),
            target_type_name: change.target_type_name.clone(),
            source_private: change.source_private.clone(),
            source_identity: (!change.source_identity_json.is_empty())
                .then(|| raw(&change.source_identity_json)),
            source_identity_schema_version: 0,
        };
        let answer = grpc(self.grpc.move_resource_state(request).await, MOVE)?;
        let diagnostics = diagnostics(&answer.diagnostics);
        if diagnostics.has_errors() {
            return Ok(Moved {
                target_state: Value::Null,
                target_private: Vec::new(),
                target_identity: Value::Null,
                diagnostics,
            });
        }
        let state = decode(
            answer.target_state.as_ref(),
            &target.value_type,
            MOVE,
            "the state",
        )?;
        let target_identity = identity(target, answer.target_identity.as_ref(), MOVE)?;
        write_only_null(target, &state, "MoveResourceState")?;
        identity_known(&target_identity, "MoveResourceState")
            .map_err(|v| Violation::new(APPLY_MOVE, v.detail))?;
        if !state.is_wholly_known() {
            return Err(Violation::new(
                APPLY_MOVE,
                "the moved state has unknown values",
            ));
        }
        Ok(Moved {
            target_state: state,
            target_private: answer.target_private,
            target_identity,
            diagnostics,
        })
    }
}
