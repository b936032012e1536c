//! A typed Proxmox VE 9 REST client that waits on tasks and classifies every error.
//!
//! It knows nothing of Terraform: the provider layer calls it, and `pvesim` stands in for a
//! real PVE host in tests.
//!
//! # Module map (mirrors the REST tree below `/api2/json`)
//!
//! - [`client`] (transport): [`Client::new`], [`ClientConfig`], [`ApiToken`], [`TlsTrust`],
//!   raw [`Client::get`]/`post`/`put`/`delete`.
//! - [`version`] (`/version`): [`Client::version`].
//! - [`nodes`] (`/nodes`, `/nodes/{node}/status`, `/nodes/{node}/network`): [`Client::nodes`],
//!   [`Client::node`] → [`nodes::Node::status`], [`nodes::Node::network`].
//! - [`cluster`] (`/cluster/resources?type=vm`, `/cluster/nextid`): [`Client::cluster`] →
//!   `vm_resources`, `locate_vm`, `next_id`; [`cluster::ha`] (`/cluster/ha/resources[/{sid}]`,
//!   `/cluster/ha/status/current`): `client.cluster().ha()` → `resources`, `resource`,
//!   `add_resource`, `update_resource`, `delete_resource`, `status_current`.
//! - [`qemu`] (`/nodes/{node}/qemu[/{vmid}/…]`): `client.node(n).qemu_list(full)`;
//!   `client.node(n).qemu(vmid)` → `clone_to`, `config`, `config_current`, `update_config`
//!   (PUT), `update_config_async` (POST), `pending`, `resize`, `status`, `start`, `stop`,
//!   `shutdown`, `destroy`, `migrate_preconditions` (GET) and `migrate` (POST, in
//!   `qemu/migrate.rs`), `agent()` → `ping`, `network_get_interfaces`, `get_host_name`,
//!   `file_read`, `file_read_range`, `file_write` (in `qemu/agent_files.rs`).
//! - [`storage`] (`/nodes/{node}/storage/…`): `client.node(n).storages(..)`, `.storage(id)` →
//!   `status`, `content`, `volume`, `delete_volume`, `upload`.
//! - [`tasks`] (`/nodes/{node}/tasks/{upid}/…`): [`Client::task_status`],
//!   [`Client::task_log_tail`], [`Client::wait_for_task`], [`Client::run_task`].
//! - [`access`] (`/access/permissions`): [`Client::permissions`], [`access::has_privilege`].
//! - [`pools`] (`/pools`): [`Client::pools`], [`Client::pool`].
//!
//! Beside the REST tree:
//!
//! - [`pacing`]: [`TaskWait`], [`TaskTimes`], [`Pacer`]: when a wait looks again.
//! - [`lock_pacing`]: [`LockPacer`], [`Pass`]: how much work waits on one PVE lock at once,
//!   learned from the lock's refusals ([`Error::lock_refusal`]).
//! - [`retry`]: [`retry::RetryPolicy`], [`retry::retry_idempotent`],
//!   [`retry::retry_with_check`], [`retry::Backoff`], [`retry::wait_out_locks`].
//! - [`wire`]: [`wire::Form`] (0/1 booleans), [`wire::de`] (int-or-string),
//!   [`wire::Envelope`], [`wire::NetConfig`], [`wire::CdromDrive`] (an ISO, or `none` once
//!   detached), [`wire::DiskDrive`], [`wire::ByteSize`], [`wire::Startup`].
//! - [`upid`]: [`Upid`] (parse, display verbatim, `node()`).
//!
//! # Example
//!
//! ```no_run
//! use pve::qemu::{CloneRequest, ConfigUpdate};
//! use pve::{ApiToken, Client, ClientConfig, ErrorKind, RetryPolicy, TlsTrust};
//!
//! # async fn demo(ca_pem: String) -> pve::Result<()> {
//! let token = ApiToken::parse("terraform@pve!provider=00000000-0000-0000-0000-000000000000")?;
//! let config = ClientConfig::new("https://pve1:8006", token, TlsTrust::CaPem(ca_pem));
//! let client = Client::new(config)?;
//! let policy = RetryPolicy::default();
//!
//! // Clone is not idempotent: if an attempt's outcome is unknown, look before re-sending.
//! let template = client.node("pve1").qemu(9000);
//! let mut request = CloneRequest::full(123);
//! request.name = Some("edge-0".into());
//! let upid = pve::retry_with_check(
//!     &policy,
//!     || async { template.clone_to(&request).await.map(Some) },
//!     || async {
//!         match client.node("pve1").qemu(123).status().await {
//!             Ok(_) => Ok(Some(None)), // the clone did happen: nothing to wait for
//!             Err(e) if e.kind() == ErrorKind::NotFound => Ok(None), // safe to send again
//!             Err(e) => Err(e),
//!         }
//!     },
//! )
//! .await?;
//! if let Some(upid) = upid {
//!     // The caller owns the deadline.
//!     let deadline = std::time::Duration::from_secs(600);
//!     match tokio::time::timeout(deadline, client.wait_for_task(&upid)).await {
//!         Ok(outcome) => drop(outcome?),
//!         Err(_) => panic!("clone still running after {deadline:?}"),
//!     }
//! }
//!
//! // Reads and config writes may be repeated freely.
//! let vm = client.node("pve1").qemu(123);
//! let update = ConfigUpdate::new().cores(2).memory_mib(2048).agent(true);
//! pve::retry_idempotent(&policy.clone().with_locked(), || vm.update_config(&update)).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Transport
//!
//! reqwest on rustls (aws-lc-rs), HTTP/1.1 only, idle pooled connections dropped after 4 s
//! (pveproxy closes idle keep-alive connections after 5 s, and a request racing that close
//! fails), a timeout per request, redirects and proxies off, and
//! `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET` on every request. Trust is either a
//! PEM CA, the platform roots, or — only when asked — nothing ([`TlsTrust::Insecure`]).
//! Plain `http://` endpoints are refused.
//!
//! # Errors
//!
//! Every failure is an [`Error`] whose [`Error::kind`] is one of:
//!
//! - `NotFound`: 404; 500 "… does not exist", "unable to find configuration file …"; 400
//!   `errors.upid = "no such task"`, `errors.storage = "No such storage."`; HA's "no such
//!   resource '…'" and "… not HA managed!".
//! - `AlreadyExists`: 400 `errors.vmid = "VM N already exists"`; 500 "… already exists on
//!   node …"; task "… File exists"; HA's "resource ID '…' already defined".
//! - `Locked`: "VM is locked (…)", "can't lock file '…' - got timeout", "cfs-lock '…' error:
//!   got lock request timeout" (HTTP or task exit status); [`Error::lock_refusal`] says which
//!   lock ([`LockRefusal`]: a storage's, a VM config's, another pmxcfs lock, the VM's own).
//! - `Transient`: connect/reset/timeout; 502/503/504/595/596/599; "got no worker upid"; "QEMU
//!   guest agent is not running"; other "got timeout".
//! - `Auth`: 401 ("Authentication failed!", "No ticket"), 403 ("Permission check failed
//!   (/path, Priv)"), and a task that failed its own permission check (same text).
//!   [`Error::auth_failure`] says which ([`AuthFailure`]: the token, or the privileges
//!   [`MissingPermission`] names), so callers never read the text themselves.
//!   With [`ClientConfig::token_refusal_is_final`], the first 401 ends the client's requests:
//!   later ones fail unsent with the same 401 ([`Error::refused_earlier`] names the call PVE
//!   refused).
//! - `Invalid`: other 400 "Parameter verification failed." with the per-parameter map in
//!   [`Error::param_errors`]; bad client configuration.
//! - `Permanent`: a rejected TLS certificate ([`Error::is_certificate_error`]); everything else
//!   (e.g. "VM 100 not running", "shrinking disks is not supported").
//!
//! A failed task is an `Error` too, classified from its exit status, carrying the exit status
//! and a log tail ([`Error::task_failure`]). `WARNINGS: n` is success
//! ([`tasks::TaskExit::Warnings`]).
//!
//! # Secrets
//!
//! The token secret never appears in `Debug` output of any type here, in any log line, or in
//! any error: every server-provided text (message, parameter errors, status line, task exit
//! status and log) is scrubbed of the secret and of the full header value before it is stored.
//!
//! # Retry rules
//!
//! Typed calls make exactly one HTTP request. Retrying is the caller's explicit choice:
//! - [`retry::retry_idempotent`] for calls safe to repeat (reads, PUT config, overwriting
//!   uploads, deletes);
//! - [`retry::retry_with_check`] for calls that must not happen twice (clone, start,
//!   POST config): when an attempt's outcome is unknown ([`Error::outcome_unknown`]), the
//!   caller's state check decides whether it already took effect before anything is re-sent.
//!
//! Both retry `Transient` and a 5xx that says nothing more
//! ([`Error::is_unexplained_server_error`]), plus `Locked` with
//! [`retry::RetryPolicy::with_locked`], with jittered exponential backoff and a bounded number
//! of attempts; with [`retry::RetryPolicy::with_locked_until`] a lock is waited out until the
//! caller's deadline however many attempts that takes.
//!
//! A lock that ends a *task* (PVE's worker checks it again) needs the whole task sent again:
//! [`retry::wait_out_locks`] runs an attempt until it ends in anything but a lock, pausing on
//! a [`retry::Backoff`] (200 ms doubling to 5 s, [`retry::Backoff::for_locks`]) until the
//! caller's deadline, and [`Client::run_task`] is that loop for a task that may be repeated.
//! `Backoff` is the one schedule: the retry helpers pause on it too, and so do a task wait's
//! status reads and polls bounded by a deadline. Each pause is drawn from the upper half of
//! its step, so callers that failed together do not all come back at once. Auth, not found
//! and invalid are never retried or waited on.
//!
//! # Waiting for tasks
//!
//! [`Client::wait_for_task`] polls `GET /nodes/{upid node}/tasks/{upid}/status`. The client
//! learns each task type's length ([`TaskTimes`]): a task of a type seen before is polled once
//! near its expected end. Before its first wait on a node, the client reads that node's task
//! archive once (`GET /nodes/{node}/tasks?limit=100`) and starts each type from the median run
//! time of its latest tasks there that ended OK, when that is a second or more; otherwise the
//! first poll comes after 25–100 ms, then on a ×4 ladder up to 2 s, and a waiter wakes when a
//! task of its type started beside it ends (see `docs/dev/benchmarks.md`). While two or more
//! waits run on one node, each look there is one listing of the node's tasks (`GET
//! /nodes/{node}/tasks?source=all&since=…`, the running ones and the ended ones with their exit
//! status) that answers for every wait on the node ([`task_board`]); such a wait, whose looks
//! cost little, looks first where the shortest of its task type's latest runs ended, then at
//! the expected end; while nothing is learned of its type, its ladder stops at 500 ms, not 2 s
//! (one listing answers every wait there, so one gap is every wait's gap). A wait alone on its
//! node, or on a node whose listing failed, asks its task's status. "no such task" right after
//! dispatch is retried for a grace period; transient polling errors are retried. The caller
//! owns the deadline: wrap the call in `tokio::time::timeout`.
//!
//! A wait whose looks are costly while the thing is not ready (a guest agent's ping keeps a
//! pvedaemon worker for 3 s) can take turns with the waits of its kind on its node
//! ([`Pacer::take_turns`]): while nothing is learned of the kind, one of them looks at a time,
//! the first started first, each for a bounded turn. One whose looks PVE holds until the
//! thing is ready ([`Pacer::looks_are_held`]) looks just before the middle of the recent
//! runs, and another wait's end never brings it forward: an early look keeps a worker.
//!
//! # Observability
//!
//! One `tracing::debug!` per API call (method, path, status, duration_ms, attempt) and one
//! `tracing::info!` per waited task (task_type, node, id, outcome, duration_ms, polls). Query
//! strings and bodies are never logged.

pub mod access;
pub mod client;
pub mod cluster;
pub mod error;
pub mod lock_pacing;
pub mod nodes;
pub mod pacing;
pub mod pools;
pub mod qemu;
pub mod retry;
#[cfg(test)]
mod schema_contract;
pub mod storage;
pub mod task_board;
pub mod tasks;
pub mod upid;
pub mod version;
pub mod wire;

pub use client::{ApiToken, Client, ClientConfig, TlsTrust};
pub use error::{
    AgentFailure, AuthFailure, ConnectFailure, Error, ErrorKind, KnownRefusal, LockRefusal,
    MissingPermission, Origin, Result, TaskFailure,
};
pub use lock_pacing::{GateState, LockPacer, Pass};
pub use pacing::{Pacer, TaskTimes, TaskWait};
pub use retry::{
    Backoff, MaybeLocked, RetryPolicy, retry_idempotent, retry_with_check, wait_out_locks,
};
pub use tasks::{TaskExit, TaskOutcome};
pub use upid::Upid;
