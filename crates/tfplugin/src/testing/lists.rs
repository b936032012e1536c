//! List resources as `terraform query` (Terraform 1.14+) drives them, read exactly as
//! `ListResource` in `internal/plugin6/grpc_provider.go` reads the stream.

use super::Violation;
use super::checks::{decode, diagnostics, encode};
use super::client::{Client, grpc};
use crate::diag::{Diagnostics, Severity};
use crate::proto::tfplugin6 as pb;
use crate::value::{Type, Value};

/// One result as Terraform keeps it.
#[derive(Clone, Debug)]
pub struct ListedObject {
    /// The display name.
    pub display_name: String,
    /// The identity, of the resource's identity type.
    pub identity: Value,
    /// The state, when asked for and sent; null otherwise.
    pub state: Value,
}

/// What a list returned, as far as Terraform reads it.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The results kept.
    pub results: Vec<ListedObject>,
    /// Every event's diagnostics.
    pub diagnostics: Diagnostics,
    /// Whether the provider ended the stream before Terraform stopped reading (at `limit`,
    /// or at an error).
    pub ended_by_provider: bool,
}

const LIST: &str = "internal/plugin6/grpc_provider.go ListResource";

impl Client {
    /// `ListResource`: `config` is the `config` block's value (null: Terraform sends an object
    /// of nulls, `listResourceExecute` in
    /// `internal/terraform/node_resource_plan_instance_query.go`); `limit` is the `limit`
    /// argument (Terraform's default is 100, and it refuses negative values). Read as Terraform
    /// reads it: only a managed resource type with an identity schema can be listed; reading
    /// stops at `limit` results or at the first error; an event without identity is an error
    /// unless a warning came before; identities and states must decode.
    pub async fn list_resource(
        &mut self,
        type_name: &str,
        config: &Value,
        include_resource_object: bool,
        limit: i64,
    ) -> Result<Listed, Violation> {
        assert!(limit >= 0, "Terraform refuses a negative limit");
        let schemas = self.schemas().await?;
        let list = schemas.list_resources.get(type_name).ok_or_else(|| {
            Violation::new(LIST, format!("unknown list resource type {type_name:?}"))
        })?;
        let (resource_type, identity_type) = match schemas.resources.get(type_name) {
            Some(resource) => match &resource.identity {
                Some(identity) => (&resource.value_type, &identity.value_type),
                None => return Err(no_identity(type_name)),
            },
            None => return Err(no_identity(type_name)),
        };
        let config = if config.is_null() {
            nulls(&list.config_type)
        } else {
            config.clone()
        };
        let request = pb::list_resource::Request {
            type_name: type_name.to_owned(),
            config: encode(&config, &list.config_type, "list configuration"),
            include_resource_object,
            limit,
        };
        let mut stream = grpc(self.grpc.list_resource(request).await, LIST)?;
        let mut listed = Listed {
            results: Vec::new(),
            diagnostics: Diagnostics::new(),
            ended_by_provider: false,
        };
        let types = (identity_type, resource_type);
        while (listed.results.len() as i64) < limit {
            let Some(event) = stream
                .message()
                .await
                .map_err(|status| Violation::new(LIST, format!("the stream failed: {status}")))?
            else {
                listed.ended_by_provider = true;
                break;
            };
            if !listed.read_event(&event, types, include_resource_object)? {
                break;
            }
        }
        Ok(listed)
    }

    /// `ValidateListResourceConfig`, with the `config` block only, as Terraform 1.14 to 1.16
    /// send it (`ValidateListResourceConfig` in `internal/plugin6/grpc_provider.go`).
    pub async fn validate_list_resource_config(
        &mut self,
        type_name: &str,
        config: &Value,
    ) -> Result<Diagnostics, Violation> {
        let check = "internal/plugin6/grpc_provider.go ValidateListResourceConfig";
        let schemas = self.schemas().await?;
        let list = schemas.list_resources.get(type_name).ok_or_else(|| {
            Violation::new(check, format!("unknown list resource type {type_name:?}"))
        })?;
        let request = pb::validate_list_resource_config::Request {
            type_name: type_name.to_owned(),
            config: encode(config, &list.config_type, "list configuration"),
            ..Default::default()
        };
        let answer = grpc(
            self.grpc.validate_list_resource_config(request).await,
            check,
        )?;
        Ok(diagnostics(&answer.diagnostics))
    }
}

fn no_identity(type_name: &str) -> Violation {
    Violation::new(
        LIST,
        format!("Identity schema not found for resource type {type_name}"),
    )
}

/// An object of nulls for an object type (`Block.EmptyValue` of a block without nested
/// blocks).
fn nulls(ty: &Type) -> Value {
    match ty {
        Type::Object(fields) => {
            Value::object(fields.keys().map(|name| (name.clone(), Value::Null)))
        }
        _ => Value::Null,
    }
}

impl Listed {
    /// Takes one event; `false` when Terraform stops reading after it.
    fn read_event(
        &mut self,
        event: &pb::list_resource::Event,
        (identity_type, resource_type): (&Type, &Type),
        include_resource_object: bool,
    ) -> Result<bool, Violation> {
        self.diagnostics.extend(diagnostics(&event.diagnostic));
        if self.diagnostics.has_errors() {
            return Ok(false);
        }
        let identity = event
            .identity
            .as_ref()
            .and_then(|i| i.identity_data.as_ref());
        let warned = self
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Warning);
        let Some(identity) = identity else {
            if warned {
                return Ok(true);
            }
            return Err(Violation::new(
                LIST,
                "missing identity data in ListResource event",
            ));
        };
        let identity = decode(Some(identity), identity_type, LIST, "the identity")?;
        let state = match &event.resource_object {
            Some(object) if include_resource_object => {
                decode(Some(object), resource_type, LIST, "the resource object")?
            }
            _ => Value::Null,
        };
        self.results.push(ListedObject {
            display_name: event.display_name.clone(),
            identity,
            state,
        });
        Ok(true)
    }
}
