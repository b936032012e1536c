//! What every call receives: the [`Context`] with Terraform's stop signal and what is known
//! about the client. Knows nothing of resources or the wire.

use std::sync::Arc;

use tokio::sync::watch;

/// Observes Terraform's `StopProvider` (Ctrl-C): long operations should poll
/// [`StopSignal::is_stopped`] or race their work against [`StopSignal::stopped`]
/// and return promptly with an error diagnostic.
#[derive(Clone, Debug)]
pub struct StopSignal {
    receiver: watch::Receiver<bool>,
    /// Keeps the channel open for signals that nothing will ever raise.
    _never_sender: Option<Arc<watch::Sender<bool>>>,
}

impl StopSignal {
    /// Whether Terraform asked to stop.
    pub fn is_stopped(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Completes when Terraform asks to stop (never, if it does not).
    pub async fn stopped(&self) {
        let mut receiver = self.receiver.clone();
        if receiver.wait_for(|stopped| *stopped).await.is_err() {
            // The server replaced its sender after raising this signal, so the
            // last value was already seen; nothing can raise it any more.
            std::future::pending::<()>().await;
        }
    }

    /// A signal that is never raised (for tests and tools).
    pub fn never() -> StopSignal {
        let (sender, receiver) = watch::channel(false);
        StopSignal {
            receiver,
            _never_sender: Some(Arc::new(sender)),
        }
    }
}

/// Raises [`StopSignal`]s. Each `StopProvider` stops the calls in flight; calls
/// that start afterwards get a fresh signal, as Terraform's own SDK does.
#[derive(Debug)]
pub(crate) struct StopSource {
    current: std::sync::Mutex<watch::Sender<bool>>,
}

impl StopSource {
    pub(crate) fn new() -> StopSource {
        StopSource {
            current: std::sync::Mutex::new(watch::channel(false).0),
        }
    }

    pub(crate) fn signal(&self) -> StopSignal {
        let sender = self.current.lock().unwrap_or_else(|e| e.into_inner());
        StopSignal {
            receiver: sender.subscribe(),
            _never_sender: None,
        }
    }

    pub(crate) fn stop(&self) {
        let mut sender = self.current.lock().unwrap_or_else(|e| e.into_inner());
        sender.send_replace(true);
        *sender = watch::channel(false).0;
    }
}

/// What every call receives.
#[derive(Clone, Debug)]
pub struct Context {
    /// Raised when Terraform sends `StopProvider`.
    pub stop: StopSignal,
    /// The RPC being served, e.g. `PlanResourceChange` (for logs).
    pub rpc: &'static str,
    /// What is known about the CLI that sent the request.
    pub client: Client,
}

impl Context {
    /// A context for calling trait methods outside a server (tests, tools).
    pub fn detached(rpc: &'static str) -> Context {
        Context {
            stop: StopSignal::never(),
            rpc,
            client: Client::default(),
        }
    }
}

/// What the request's client announced it can do (`ClientCapabilities`).
///
/// Clients older than the protocol minor that added a capability never send it,
/// so absent means "not allowed": e.g. `write_only_attributes_allowed` arrives
/// from Terraform >= 1.11 and OpenTofu >= 1.11 only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCapabilities {
    /// The client accepts deferred responses.
    pub deferral_allowed: bool,
    /// The client keeps write-only attributes out of plans and state.
    pub write_only_attributes_allowed: bool,
}

/// Which CLI runs the provider, as far as the protocol (and the process tree) tells.
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// This request's capabilities (all false when it carried none, and for
    /// RPCs that have no capabilities field, e.g. `ApplyResourceChange`).
    pub capabilities: ClientCapabilities,
    /// The CLI's version from `ConfigureProvider` (`terraform_version`; OpenTofu
    /// sends its own version there). `None` until the provider is configured:
    /// Terraform validates before it configures.
    pub version: Option<String>,
    /// `Terraform` or `OpenTofu` when the parent process is `terraform` or
    /// `tofu`; `None` otherwise (e.g. `--debug` reattach, tests).
    pub name: Option<&'static str>,
}

impl Client {
    /// The CLI for a user-facing sentence, e.g. `Terraform 1.9.8`, or
    /// `Terraform or OpenTofu 1.9.8` when only the version is known; `None`
    /// when nothing is.
    pub fn describe(&self) -> Option<String> {
        let version = self.version.as_deref().filter(|v| !v.is_empty());
        match (self.name, version) {
            (Some(name), Some(version)) => Some(format!("{name} {version}")),
            (Some(name), None) => Some(name.to_owned()),
            (None, Some(version)) => Some(format!("Terraform or OpenTofu {version}")),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_is_described_by_what_is_known() {
        let mut client = Client::default();
        assert_eq!(client.describe(), None);
        client.version = Some("1.9.8".into());
        assert_eq!(
            client.describe().as_deref(),
            Some("Terraform or OpenTofu 1.9.8")
        );
        client.name = Some("OpenTofu");
        assert_eq!(client.describe().as_deref(), Some("OpenTofu 1.9.8"));
        client.version = None;
        assert_eq!(client.describe().as_deref(), Some("OpenTofu"));
    }
}
