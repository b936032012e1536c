//! Managed resources as Terraform 1.12+ drives them: read, plan and apply carrying identity,
//! import by id or by identity, identity upgrades, and generated configuration.

use super::Violation;
use super::checks::{
    decode, diagnostics, encode, identity, identity_data, identity_known, write_only_null,
};
use super::client::{Client, grpc};
use super::schemas::ResourceSchema;
use crate::diag::{AttributePath, Diagnostics};
use crate::proto::tfplugin6 as pb;
use crate::value::Value;

/// What `ReadResource` answered.
#[derive(Clone, Debug)]
pub struct Read {
    /// The refreshed state (null: gone).
    pub new_state: Value,
    /// Private bytes.
    pub private: Vec<u8>,
    /// The identity (null when none was sent).
    pub identity: Value,
    /// The provider's diagnostics.
    pub diagnostics: Diagnostics,
}

/// A `PlanResourceChange` request.
#[derive(Clone, Debug, Default)]
pub struct PlanChange {
    /// The resource type.
    pub type_name: String,
    /// Null on create.
    pub prior_state: Value,
    /// Terraform's proposal (null: destroy).
    pub proposed_new_state: Value,
    /// The configuration (null: destroy).
    pub config: Value,
    /// Private bytes of the prior state.
    pub prior_private: Vec<u8>,
    /// The identity Terraform holds (null: none).
    pub prior_identity: Value,
    /// Replacement forced from outside (`-replace`, a tainted object).
    pub force_replace: bool,
}

/// What `PlanResourceChange` answered.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The planned state.
    pub planned_state: Value,
    /// Paths whose change replaces the object.
    pub requires_replace: Vec<AttributePath>,
    /// Private bytes for apply.
    pub planned_private: Vec<u8>,
    /// The planned identity (null when none was sent).
    pub identity: Value,
    /// Whether Terraform takes this plan for a replacement.
    pub replaces: bool,
    /// The provider's diagnostics.
    pub diagnostics: Diagnostics,
}

/// An `ApplyResourceChange` request.
#[derive(Clone, Debug, Default)]
pub struct ApplyChange {
    /// The resource type.
    pub type_name: String,
    /// Null on create.
    pub prior_state: Value,
    /// Null on delete.
    pub planned_state: Value,
    /// The configuration.
    pub config: Value,
    /// Private bytes from the plan.
    pub planned_private: Vec<u8>,
    /// The identity from the plan (null: none).
    pub planned_identity: Value,
}

/// What `ApplyResourceChange` answered.
#[derive(Clone, Debug)]
pub struct Applied {
    /// The new state.
    pub new_state: Value,
    /// Private bytes.
    pub private: Vec<u8>,
    /// The new identity (null when none was sent).
    pub identity: Value,
    /// The provider's diagnostics.
    pub diagnostics: Diagnostics,
}

/// What `ImportResourceState` answered, with its one object when there were no errors.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The imported object's type.
    pub type_name: String,
    /// Its state.
    pub state: Value,
    /// Its private bytes.
    pub private: Vec<u8>,
    /// Its identity (null when none was sent).
    pub identity: Value,
    /// The provider's diagnostics.
    pub diagnostics: Diagnostics,
}

const READ: &str = "internal/plugin6/grpc_provider.go ReadResource";
const PLAN: &str = "internal/plugin6/grpc_provider.go PlanResourceChange";
const APPLY: &str = "internal/plugin6/grpc_provider.go ApplyResourceChange";
const IMPORT: &str = "internal/plugin6/grpc_provider.go ImportResourceState";
const IMPORT_STATE: &str = "internal/terraform/node_resource_plan_instance.go importState";

impl Client {
    /// `ReadResource` with the identity Terraform holds. A returned identity must be wholly
    /// known and of the identity type (`refresh` in
    /// `internal/terraform/node_resource_abstract_instance.go`), and write-only attributes null.
    pub async fn read_resource(
        &mut self,
        type_name: &str,
        state: &Value,
        private: &[u8],
        current_identity: &Value,
    ) -> Result<Read, Violation> {
        let schemas = self.schemas().await?;
        let schema = schemas.resource(type_name, READ)?;
        let request = pb::read_resource::Request {
            type_name: type_name.to_owned(),
            current_state: encode(state, &schema.value_type, "state"),
            private: private.to_vec(),
            client_capabilities: Some(self.capabilities),
            current_identity: identity_data(schema, current_identity),
            ..Default::default()
        };
        let answer = grpc(self.grpc.read_resource(request).await, READ)?;
        let new_state = decode(
            answer.new_state.as_ref(),
            &schema.value_type,
            READ,
            "the state",
        )?;
        let identity = identity(schema, answer.new_identity.as_ref(), READ)?;
        identity_known(&identity, "ReadResource")?;
        write_only_null(schema, &new_state, "ReadResource")?;
        Ok(Read {
            new_state,
            private: answer.private,
            identity,
            diagnostics: diagnostics(&answer.diagnostics),
        })
    }

    /// `PlanResourceChange` with the prior identity. A destroy must plan null; a planned
    /// identity must be wholly known unless the plan creates or replaces the object (`plan` and
    /// `planDestroy` in `internal/terraform/node_resource_abstract_instance.go`).
    pub async fn plan_resource_change(
        &mut self,
        change: &PlanChange,
    ) -> Result<Planned, Violation> {
        let schemas = self.schemas().await?;
        let schema = schemas.resource(&change.type_name, PLAN)?;
        let ty = &schema.value_type;
        let request = pb::plan_resource_change::Request {
            type_name: change.type_name.clone(),
            prior_state: encode(&change.prior_state, ty, "prior state"),
            proposed_new_state: encode(&change.proposed_new_state, ty, "proposed state"),
            config: encode(&change.config, ty, "configuration"),
            prior_private: change.prior_private.clone(),
            client_capabilities: Some(self.capabilities),
            prior_identity: identity_data(schema, &change.prior_identity),
            ..Default::default()
        };
        let answer = grpc(self.grpc.plan_resource_change(request).await, PLAN)?;
        let planned_state = decode(answer.planned_state.as_ref(), ty, PLAN, "the plan")?;
        let identity = identity(schema, answer.planned_identity.as_ref(), PLAN)?;
        let requires_replace: Vec<AttributePath> = answer
            .requires_replace
            .iter()
            .map(AttributePath::from_proto)
            .collect();
        let replaces = change.force_replace
            || (!change.prior_state.is_null()
                && replacement(&change.prior_state, &planned_state, &requires_replace));
        check_planned(change, &planned_state, &identity, replaces)?;
        Ok(Planned {
            planned_state,
            requires_replace,
            planned_private: answer.planned_private,
            identity,
            replaces,
            diagnostics: diagnostics(&answer.diagnostics),
        })
    }

    /// `ApplyResourceChange` with the planned identity. The new state must be wholly known with
    /// write-only attributes null, and a returned identity wholly known (`apply` in
    /// `internal/terraform/node_resource_abstract_instance.go`).
    pub async fn apply_resource_change(
        &mut self,
        change: &ApplyChange,
    ) -> Result<Applied, Violation> {
        let schemas = self.schemas().await?;
        let schema = schemas.resource(&change.type_name, APPLY)?;
        let ty = &schema.value_type;
        let request = pb::apply_resource_change::Request {
            type_name: change.type_name.clone(),
            prior_state: encode(&change.prior_state, ty, "prior state"),
            planned_state: encode(&change.planned_state, ty, "planned state"),
            config: encode(&change.config, ty, "configuration"),
            planned_private: change.planned_private.clone(),
            planned_identity: identity_data(schema, &change.planned_identity),
            ..Default::default()
        };
        let answer = grpc(self.grpc.apply_resource_change(request).await, APPLY)?;
        let new_state = decode(answer.new_state.as_ref(), ty, APPLY, "the new state")?;
        let identity = identity(schema, answer.new_identity.as_ref(), APPLY)?;
        if !new_state.is_wholly_known() {
            return Err(Violation::new(
                "internal/terraform/node_resource_abstract_instance.go apply",
                "the new state has unknown values",
            ));
        }
        identity_known(&identity, "ApplyResourceChange")?;
        write_only_null(schema, &new_state, "ApplyResourceChange")?;
        Ok(Applied {
            new_state,
            private: answer.private,
            identity,
            diagnostics: diagnostics(&answer.diagnostics),
        })
    }

    /// `ImportResourceState` by id (`import { id = ... }`).
    pub async fn import_resource_state(
        &mut self,
        type_name: &str,
        id: &str,
    ) -> Result<Imported, Violation> {
        self.import(type_name, id, &Value::Null).await
    }

    /// `ImportResourceState` by identity (`import { identity = {...} }`, Terraform 1.12+): the
    /// attributes required for import must be set; the others may be null.
    pub async fn import_resource_state_by_identity(
        &mut self,
        type_name: &str,
        identity: &Value,
    ) -> Result<Imported, Violation> {
        assert!(!identity.is_null(), "import by identity needs an identity");
        self.import(type_name, "", identity).await
    }

    async fn import(
        &mut self,
        type_name: &str,
        id: &str,
        by: &Value,
    ) -> Result<Imported, Violation> {
        let schemas = self.schemas().await?;
        let schema = schemas.resource(type_name, IMPORT)?;
        let request = pb::import_resource_state::Request {
            type_name: type_name.to_owned(),
            id: id.to_owned(),
            client_capabilities: Some(self.capabilities),
            identity: identity_data(schema, by),
        };
        let answer = grpc(self.grpc.import_resource_state(request).await, IMPORT)?;
        let diagnostics = diagnostics(&answer.diagnostics);
        if diagnostics.has_errors() {
            return Ok(Imported {
                type_name: type_name.to_owned(),
                state: Value::Null,
                private: Vec::new(),
                identity: Value::Null,
                diagnostics,
            });
        }
        let [object] = &answer.imported_resources[..] else {
            return Err(Violation::new(
                IMPORT_STATE,
                format!(
                    "{} objects imported; exactly one is expected",
                    answer.imported_resources.len()
                ),
            ));
        };
        let imported = imported(&schemas.resources, schema, object, by.is_null())?;
        Ok(Imported {
            diagnostics,
            ..imported
        })
    }

    /// `UpgradeResourceIdentity` of a stored identity of an older version: the answer must be
    /// wholly known and of the identity type (`upgradeResourceIdentity` in
    /// `internal/terraform/upgrade_resource_state.go`). Null when errors were reported.
    pub async fn upgrade_resource_identity(
        &mut self,
        type_name: &str,
        version: i64,
        raw_identity_json: &[u8],
    ) -> Result<(Value, Diagnostics), Violation> {
        let check = "internal/terraform/upgrade_resource_state.go upgradeResourceIdentity";
        let schemas = self.schemas().await?;
        let schema = schemas.resource(type_name, check)?;
        let request = pb::upgrade_resource_identity::Request {
            type_name: type_name.to_owned(),
            version,
            raw_identity: Some(pb::RawState {
                json: raw_identity_json.to_vec(),
                flatmap: Default::default(),
            }),
        };
        let answer = grpc(self.grpc.upgrade_resource_identity(request).await, check)?;
        let upgraded = identity(schema, answer.upgraded_identity.as_ref(), check)?;
        if !upgraded.is_wholly_known() {
            return Err(Violation::new(
                check,
                "the upgraded identity has unknown values",
            ));
        }
        Ok((upgraded, diagnostics(&answer.diagnostics)))
    }

    /// `GenerateResourceConfig`, which Terraform calls only when the provider announced
    /// `generate_resource_config` (`generateResourceConfig` in
    /// `internal/terraform/node_resource_plan_instance.go`). The answer is decoded with the
    /// resource's type and written into HCL value by value, which needs known values
    /// (`writeConfigAttributesFromExisting` in `internal/genconfig/generate_config.go`).
    pub async fn generate_resource_config(
        &mut self,
        type_name: &str,
        state: &Value,
    ) -> Result<(Value, Diagnostics), Violation> {
        let check = "internal/plugin6/grpc_provider.go GenerateResourceConfig";
        let schemas = self.schemas().await?;
        let schema = schemas.resource(type_name, check)?;
        let request = pb::generate_resource_config::Request {
            type_name: type_name.to_owned(),
            state: encode(state, &schema.value_type, "state"),
        };
        let answer = grpc(self.grpc.generate_resource_config(request).await, check)?;
        let config = decode(
            answer.config.as_ref(),
            &schema.value_type,
            check,
            "the configuration",
        )?;
        if !config.is_wholly_known() {
            return Err(Violation::new(
                "internal/genconfig/generate_config.go writeConfigAttributesFromExisting",
                "the generated configuration has unknown values",
            ));
        }
        Ok((config, diagnostics(&answer.diagnostics)))
    }
}

/// Whether Terraform replaces: a `requires_replace` path whose value changes or is unknown
/// (`getRequiredReplaces` and `getAction` in
/// `internal/terraform/node_resource_abstract_instance.go`).
fn replacement(prior: &Value, planned: &Value, paths: &[AttributePath]) -> bool {
    paths.iter().any(|path| {
        let after = planned.get_path(path);
        !after.is_wholly_known() || !prior.get_path(path).same_as(after)
    })
}

fn check_planned(
    change: &PlanChange,
    planned_state: &Value,
    identity: &Value,
    replaces: bool,
) -> Result<(), Violation> {
    if change.proposed_new_state.is_null() {
        if !planned_state.is_null() {
            return Err(Violation::new(
                "internal/terraform/node_resource_abstract_instance.go planDestroy",
                "a destroy planned a non-null value",
            ));
        }
        return identity_known(identity, "a destroy plan");
    }
    if !change.prior_state.is_null() && !replaces {
        return identity_known(identity, "an update plan");
    }
    Ok(())
}

/// The one imported object: its type is set, write-only attributes are null, an
/// import by id returned a state and an import by identity returned an identity (`importState`
/// in `internal/terraform/node_resource_plan_instance.go`); values decode with the imported
/// type's schemas (`ImportResourceState` in `internal/plugin6/grpc_provider.go`).
fn imported(
    resources: &std::collections::BTreeMap<String, ResourceSchema>,
    requested: &ResourceSchema,
    object: &pb::import_resource_state::ImportedResource,
    by_id: bool,
) -> Result<Imported, Violation> {
    if object.type_name.is_empty() {
        return Err(Violation::new(
            IMPORT_STATE,
            "the imported object has no type",
        ));
    }
    let target = resources.get(&object.type_name).unwrap_or(requested);
    let state = decode(
        object.state.as_ref(),
        &requested.value_type,
        IMPORT,
        "the state",
    )?;
    let identity = identity(target, object.identity.as_ref(), IMPORT)?;
    write_only_null(requested, &state, "ImportResourceState")?;
    if by_id && state.is_null() {
        return Err(Violation::new(
            IMPORT_STATE,
            "an import by id returned a null state",
        ));
    }
    if !by_id && identity.is_null() {
        return Err(Violation::new(
            IMPORT_STATE,
            "an import by identity returned no identity",
        ));
    }
    Ok(Imported {
        type_name: object.type_name.clone(),
        state,
        private: object.private.clone(),
        identity,
        diagnostics: Diagnostics::new(),
    })
}
