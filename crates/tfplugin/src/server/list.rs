//! `ListResource` and `ValidateListResourceConfig` (protocol 6.10).
//!
//! Terraform lists only types that are also managed resource types with an identity schema
//! (`internal/plugin6/grpc_provider.go` `ListResource` at v1.14.9); a list request for any
//! other type is answered with one error event. Results are streamed as the list resource
//! pushes them ([`ListResults`] holds the per-result rules); its final diagnostics follow.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tonic::codegen::BoxStream;
use tonic::{Request, Response};
use tracing::Instrument as _;

use super::{ProviderService, RpcResult, Served, decode, log_result};
use crate::context::Context;
use crate::diag::{Diagnostic, Diagnostics};
use crate::list::{EventSender, ListRequest, ListResource, ListResults, ValidateListRequest};
use crate::proto::tfplugin6 as pb;
use crate::value::Type;

/// Results buffered ahead of a slow reader; the list resource waits beyond that.
const BUFFERED_EVENTS: usize = 16;

/// A list ready to run.
struct Listing {
    list: Arc<dyn ListResource>,
    ctx: Context,
    request: ListRequest,
    results: ListResults,
}

fn error_stream(diagnostics: Diagnostics) -> BoxStream<pb::list_resource::Event> {
    let event = pb::list_resource::Event {
        diagnostic: diagnostics.to_proto(),
        ..Default::default()
    };
    Box::pin(tokio_stream::iter([Ok(event)]))
}

impl ProviderService {
    pub(super) async fn list(
        &self,
        request: Request<pb::list_resource::Request>,
    ) -> RpcResult<BoxStream<pb::list_resource::Event>> {
        let request = request.into_inner();
        let rpc = "ListResource";
        let span = self.span(rpc, &request.type_name);
        let (sender, receiver) = mpsc::channel(BUFFERED_EVENTS);
        let started = Instant::now();
        let listing = match self.prepare_list(request, sender) {
            Ok(listing) => listing,
            Err(diagnostics) => {
                span.in_scope(|| log_result(started, &diagnostics));
                return Ok(Response::new(error_stream(diagnostics)));
            }
        };
        if !listing.results.is_closed() {
            let run = async move {
                let Listing {
                    list,
                    ctx,
                    request,
                    mut results,
                } = listing;
                let diagnostics = list.list(&ctx, request, &mut results).await;
                log_result(started, &diagnostics);
                // Not sent when the client already stopped reading (limit reached).
                let _ = results.diagnostics(diagnostics).await;
            };
            tokio::spawn(run.instrument(span));
        }
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        )))
    }

    fn prepare_list(
        &self,
        request: pb::list_resource::Request,
        sender: EventSender,
    ) -> Result<Listing, Diagnostics> {
        let registry = self.registry();
        let type_name = &request.type_name;
        let Some(list) = registry.list_resources.get(type_name) else {
            return Err(Diagnostic::error(
                "Unknown list resource type",
                format!("This provider has no list resource type {type_name:?}."),
            )
            .into());
        };
        let (Ok(resource), Some(identity)) = (self.resource(type_name), self.identity(type_name))
        else {
            return Err(Diagnostic::error(
                "List resource without identity",
                format!(
                    "Identity schema not found for resource type {type_name}. This is a bug \
                     in the provider."
                ),
            )
            .into());
        };
        let config = decode(
            request.config.as_ref(),
            &list.value_type,
            "list configuration",
        )?;
        let results = ListResults::new(
            sender,
            identity.value_type.clone(),
            resource.value_type.clone(),
            request.include_resource_object,
            request.limit,
        );
        Ok(Listing {
            list: list.implementation.clone(),
            ctx: self.context("ListResource", None),
            request: ListRequest {
                config,
                include_resource_object: request.include_resource_object,
                limit: request.limit,
            },
            results,
        })
    }

    pub(super) async fn validate_list(
        &self,
        request: Request<pb::validate_list_resource_config::Request>,
    ) -> RpcResult<pb::validate_list_resource_config::Response> {
        let request = request.into_inner();
        let rpc = "ValidateListResourceConfig";
        self.serve_rpc(rpc, &request.type_name, async {
            let Some(list) = self.registry().list_resources.get(&request.type_name) else {
                return Err(Diagnostic::error(
                    "Unknown list resource type",
                    format!(
                        "This provider has no list resource type {:?}.",
                        request.type_name
                    ),
                )
                .into());
            };
            let validate = ValidateListRequest {
                config: decode(
                    request.config.as_ref(),
                    &list.value_type,
                    "list configuration",
                )?,
                include_resource_object: decode(
                    request.include_resource_object.as_ref(),
                    &Type::Bool,
                    "include_resource",
                )?,
                limit: decode(request.limit.as_ref(), &Type::Number, "limit")?,
            };
            let ctx = self.context(rpc, None);
            let diagnostics = list.implementation.validate(&ctx, validate).await;
            Served::Ok((Default::default(), diagnostics))
        })
        .await
    }
}
