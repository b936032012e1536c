//! List resources (protocol 6.10, Terraform 1.14+ `terraform query`): a `list` block names a
//! managed resource type and a `config` block; the provider streams back the objects it finds,
//! each by its identity, with a display name and, when asked, its state.
//!
//! [`ListResults`] is where a [`ListResource`] puts what it finds. It keeps the rules of
//! Terraform's client (`internal/plugin6/grpc_provider.go` `ListResource` at v1.14.9) on the
//! provider's side: every result carries a wholly known identity of the resource's identity
//! type, no more than `limit` results are sent, a state goes out only when the client asked
//! for states, and nothing follows an error.

use tokio::sync::mpsc;
use tonic::Status;

use crate::codec::encode_dynamic_value;
use crate::context::Context;
use crate::diag::{Diagnostic, Diagnostics};
use crate::proto::tfplugin6 as pb;
use crate::schema::Schema;
use crate::value::{Type, Value};

/// `ListResource` input.
#[derive(Clone, Debug)]
pub struct ListRequest {
    /// The `config` block, wholly known (Terraform refuses to list with unknowns). Terraform
    /// sends an object of nulls when the block is absent.
    pub config: Value,
    /// Whether the client wants each object's state (`include_resource = true`, or
    /// `-generate-config-out`).
    pub include_resource_object: bool,
    /// How many results the client reads (Terraform: the `limit` argument, default 100).
    pub limit: i64,
}

/// `ValidateListResourceConfig` input. Values may be unknown. Terraform 1.14 and 1.15 send
/// only the configuration; the other two are null then.
#[derive(Clone, Debug)]
pub struct ValidateListRequest {
    /// The `config` block.
    pub config: Value,
    /// The `include_resource` argument (bool), when sent.
    pub include_resource_object: Value,
    /// The `limit` argument (number), when sent.
    pub limit: Value,
}

/// One object found.
#[derive(Clone, Debug)]
pub struct ListItem {
    /// Its identity: wholly known, of the resource's identity type.
    pub identity: Value,
    /// A name for people, e.g. in `terraform query` output.
    pub display_name: String,
    /// Its state, of the resource's type (only sent when the client asked for states; see
    /// [`ListResults::include_resource_object`]). Null when not given.
    pub resource_object: Value,
    /// Warnings about this object. An error here ends the list.
    pub diagnostics: Diagnostics,
}

impl ListItem {
    /// A result without a state.
    pub fn new(identity: Value, display_name: impl Into<String>) -> ListItem {
        ListItem {
            identity,
            display_name: display_name.into(),
            resource_object: Value::Null,
            diagnostics: Diagnostics::new(),
        }
    }

    /// Adds the object's state.
    #[must_use]
    pub fn with_resource_object(mut self, state: Value) -> ListItem {
        self.resource_object = state;
        self
    }
}

/// The list has ended: the limit is reached, an error was sent, or the client stopped reading.
/// Whatever was being pushed was not sent; stop listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListClosed;

impl std::fmt::Display for ListClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the list is closed")
    }
}

impl std::error::Error for ListClosed {}

pub(crate) type EventSender = mpsc::Sender<Result<pb::list_resource::Event, Status>>;

/// Where a [`ListResource`] puts its results; the server streams them to the client.
#[derive(Debug)]
pub struct ListResults {
    sender: EventSender,
    identity_type: Type,
    resource_type: Type,
    include_resource_object: bool,
    remaining: u64,
    closed: bool,
}

impl ListResults {
    pub(crate) fn new(
        sender: EventSender,
        identity_type: Type,
        resource_type: Type,
        include_resource_object: bool,
        limit: i64,
    ) -> ListResults {
        let remaining = u64::try_from(limit).unwrap_or(0);
        ListResults {
            sender,
            identity_type,
            resource_type,
            include_resource_object,
            remaining,
            closed: remaining == 0,
        }
    }

    /// Whether the client wants states: when not, leave them out (they are dropped anyway).
    pub fn include_resource_object(&self) -> bool {
        self.include_resource_object
    }

    /// How many more results the client reads.
    pub fn remaining(&self) -> u64 {
        if self.closed { 0 } else { self.remaining }
    }

    /// Whether nothing more will be sent.
    pub fn is_closed(&self) -> bool {
        self.closed || self.sender.is_closed()
    }

    /// Sends one result. A result that breaks the protocol (no identity, unknown values, values
    /// of the wrong type) is sent as an error instead, which ends the list.
    pub async fn push(&mut self, item: ListItem) -> Result<(), ListClosed> {
        if self.is_closed() {
            return Err(ListClosed);
        }
        let event = match self.encode(&item) {
            Ok(event) => event,
            Err(problem) => return self.send_error(problem).await,
        };
        let ends_list = item.diagnostics.has_errors();
        self.send(event).await?;
        self.remaining -= 1;
        if ends_list || self.remaining == 0 {
            self.closed = true;
        }
        Ok(())
    }

    /// Sends diagnostics that belong to no result (Terraform shows them and reads on). Errors
    /// end the list.
    pub async fn diagnostics(&mut self, diagnostics: Diagnostics) -> Result<(), ListClosed> {
        if diagnostics.is_empty() {
            return Ok(());
        }
        if self.is_closed() {
            return Err(ListClosed);
        }
        let ends_list = diagnostics.has_errors();
        self.send(pb::list_resource::Event {
            diagnostic: diagnostics.to_proto(),
            ..Default::default()
        })
        .await?;
        self.closed = ends_list;
        Ok(())
    }

    async fn send_error(&mut self, problem: Diagnostic) -> Result<(), ListClosed> {
        // The error itself is sent even when the limit was the last thing left.
        let event = pb::list_resource::Event {
            diagnostic: vec![problem.to_proto()],
            ..Default::default()
        };
        let sent = self.send(event).await;
        self.closed = true;
        sent.and(Err(ListClosed))
    }

    async fn send(&mut self, event: pb::list_resource::Event) -> Result<(), ListClosed> {
        if self.sender.send(Ok(event)).await.is_err() {
            self.closed = true;
            return Err(ListClosed);
        }
        Ok(())
    }

    fn encode(&self, item: &ListItem) -> Result<pb::list_resource::Event, Diagnostic> {
        let invalid = |detail: String| {
            Diagnostic::error(
                "Provider produced an invalid list result",
                format!("{detail} This is a bug in the provider."),
            )
        };
        if item.identity.is_null() {
            return Err(invalid(format!(
                "The result {:?} has no identity.",
                item.display_name
            )));
        }
        if !item.identity.is_wholly_known() {
            return Err(invalid(format!(
                "The identity of {:?} has unknown values.",
                item.display_name
            )));
        }
        let identity = encode_dynamic_value(&item.identity, &self.identity_type)
            .map_err(|e| invalid(format!("The identity of {:?}: {e}.", item.display_name)))?;
        let resource_object = if self.include_resource_object && !item.resource_object.is_null() {
            if !item.resource_object.is_wholly_known() {
                return Err(invalid(format!(
                    "The state of {:?} has unknown values.",
                    item.display_name
                )));
            }
            let state = encode_dynamic_value(&item.resource_object, &self.resource_type)
                .map_err(|e| invalid(format!("The state of {:?}: {e}.", item.display_name)))?;
            Some(state)
        } else {
            None
        };
        Ok(pb::list_resource::Event {
            identity: Some(pb::ResourceIdentityData {
                identity_data: Some(identity),
            }),
            display_name: item.display_name.clone(),
            resource_object,
            diagnostic: item.diagnostics.to_proto(),
        })
    }
}

/// A list resource: finds existing objects of one managed resource type, which must have an
/// identity schema ([`crate::Resource::identity_schema`]).
#[tonic::async_trait]
pub trait ListResource: Send + Sync + 'static {
    /// The managed resource type it lists, e.g. `example_thing` (`list "example_thing" "x"`).
    fn type_name(&self) -> &str;

    /// The schema of the list block's `config` block. Terraform requires the block when any of
    /// its attributes is required.
    fn schema(&self) -> Schema;

    /// Checks the configuration without side effects. Values may be unknown. Diagnostic paths
    /// are relative to the `config` block, as Terraform means them to be; through 1.16 it adds
    /// the `config` step to list results' and actions' diagnostics but not to these (commit
    /// f079a2158b), so their paths find no attribute there.
    async fn validate(&self, _ctx: &Context, _request: ValidateListRequest) -> Diagnostics {
        Diagnostics::new()
    }

    /// Finds the objects and pushes each to `results`, stopping when a push fails. The returned
    /// diagnostics are sent after the last result. Diagnostic paths are relative to the
    /// `config` block (Terraform 1.16 prefixes them with `config`; 1.14 and 1.15 do not).
    async fn list(
        &self,
        ctx: &Context,
        request: ListRequest,
        results: &mut ListResults,
    ) -> Diagnostics;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(id: i64) -> Value {
        Value::object([("id", Value::from(id))])
    }

    fn results(include: bool, limit: i64) -> (ListResults, mpsc::Receiver<EventResult>) {
        let (sender, receiver) = mpsc::channel(8);
        let identity_type = Type::object([("id", Type::Number)]);
        let resource_type = Type::object([("name", Type::String)]);
        let results = ListResults::new(sender, identity_type, resource_type, include, limit);
        (results, receiver)
    }

    type EventResult = Result<pb::list_resource::Event, Status>;

    fn drain(receiver: &mut mpsc::Receiver<EventResult>) -> Vec<pb::list_resource::Event> {
        let mut events = Vec::new();
        while let Ok(event) = receiver.try_recv() {
            events.push(event.unwrap());
        }
        events
    }

    #[tokio::test]
    async fn no_more_than_the_limit_is_sent() {
        let (mut results, mut receiver) = results(false, 2);
        assert!(
            results
                .push(ListItem::new(identity(1), "one"))
                .await
                .is_ok()
        );
        assert_eq!(results.remaining(), 1);
        assert!(
            results
                .push(ListItem::new(identity(2), "two"))
                .await
                .is_ok()
        );
        assert!(results.is_closed());
        assert_eq!(
            results.push(ListItem::new(identity(3), "three")).await,
            Err(ListClosed)
        );
        let events = drain(&mut receiver);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].display_name, "two");
    }

    #[tokio::test]
    async fn a_limit_of_zero_sends_nothing() {
        let (mut results, mut receiver) = results(false, 0);
        assert!(results.is_closed());
        assert_eq!(
            results.push(ListItem::new(identity(1), "one")).await,
            Err(ListClosed)
        );
        assert!(drain(&mut receiver).is_empty());
    }

    #[tokio::test]
    async fn states_go_out_only_when_asked_for() {
        let state = Value::object([("name", Value::from("a"))]);
        for include in [false, true] {
            let (mut results, mut receiver) = results(include, 5);
            let item = ListItem::new(identity(1), "a").with_resource_object(state.clone());
            results.push(item).await.unwrap();
            let event = drain(&mut receiver).remove(0);
            assert_eq!(event.resource_object.is_some(), include);
            assert!(event.identity.unwrap().identity_data.is_some());
        }
    }

    #[tokio::test]
    async fn a_result_without_a_known_identity_becomes_an_error_that_ends_the_list() {
        for bad in [
            Value::Null,
            Value::object([("id", Value::Unknown)]),
            Value::object([("id", Value::from("not a number"))]),
        ] {
            let (mut results, mut receiver) = results(false, 5);
            assert_eq!(results.push(ListItem::new(bad, "x")).await, Err(ListClosed));
            assert!(results.is_closed());
            let events = drain(&mut receiver);
            assert_eq!(events.len(), 1);
            assert!(events[0].identity.is_none());
            assert_eq!(events[0].diagnostic[0].severity, 1);
        }
    }

    #[tokio::test]
    async fn warnings_keep_the_list_open_and_errors_close_it() {
        let (mut results, mut receiver) = results(false, 5);
        let mut warned = Diagnostics::new();
        warned.warning("slow", "");
        results.diagnostics(warned).await.unwrap();
        assert!(!results.is_closed());
        let mut failed = Diagnostics::new();
        failed.error("broken", "");
        results.diagnostics(failed).await.unwrap();
        assert!(results.is_closed());
        assert_eq!(drain(&mut receiver).len(), 2);
    }

    #[tokio::test]
    async fn a_client_that_stopped_reading_closes_the_list() {
        let (mut results, receiver) = results(false, 5);
        drop(receiver);
        assert_eq!(
            results.push(ListItem::new(identity(1), "one")).await,
            Err(ListClosed)
        );
        assert!(results.is_closed());
    }
}
