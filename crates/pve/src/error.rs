//! One error type for every PVE call, classified into a small set of kinds that all
//! retry and lifecycle decisions use.

use std::collections::BTreeMap;
use std::fmt;

use crate::upid::Upid;

/// What went wrong, as far as a caller deciding what to do next cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The object is not there: HTTP 404, or PVE's 500/400 "does not exist" texts.
    NotFound,
    /// The object (usually a VMID) is already taken.
    AlreadyExists,
    /// A VM lock (`lock: clone`, …) or a config-file lock timeout stood in the way.
    Locked,
    /// The VM's config changed since the caller read it (a write sent with `digest` was
    /// refused): read again and decide again, never re-send unchanged.
    Conflict,
    /// Worth trying again unchanged: connect/reset/timeout, 5xx from the proxy layer,
    /// 595/596, "got no worker upid".
    Transient,
    /// 401, or 403 with the missing privilege named in the message.
    Auth,
    /// 400 "Parameter verification failed." with PVE's per-parameter `errors` map.
    Invalid,
    /// Everything else: retrying unchanged will not help.
    Permanent,
}

impl ErrorKind {
    /// A stable, machine-readable name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "NotFound",
            ErrorKind::AlreadyExists => "AlreadyExists",
            ErrorKind::Locked => "Locked",
            ErrorKind::Conflict => "Conflict",
            ErrorKind::Transient => "Transient",
            ErrorKind::Auth => "Auth",
            ErrorKind::Invalid => "Invalid",
            ErrorKind::Permanent => "Permanent",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task that ended with an error exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    /// The task.
    pub upid: Upid,
    /// PVE's exit status: the `TASK ERROR:` text without the prefix.
    pub exitstatus: String,
    /// The last lines of the task log (possibly empty if the log could not be read).
    pub log_tail: Vec<String>,
}

/// Where an error came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The request never got an HTTP response (connect, TLS, reset, timeout, body read).
    Transport {
        /// The connection could not be established, so the request was certainly not sent.
        connect: bool,
        /// The per-request timeout fired.
        timeout: bool,
    },
    /// PVE answered with an error status.
    Http {
        /// HTTP status code (including PVE's pseudo codes 595/596).
        status: u16,
        /// Whether the body was PVE's JSON envelope, i.e. an API handler produced the error.
        from_handler: bool,
    },
    /// A task was dispatched and ended in error.
    Task,
    /// The response arrived but could not be understood.
    Decode,
    /// The client could not be built or a request could not be formed (bad endpoint, CA, token).
    Config,
}

/// Why a request got no HTTP answer, as far as what a user must fix differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectFailure {
    /// The server's TLS certificate was not trusted.
    Certificate,
    /// Nothing accepted the connection at that host and port.
    Refused,
    /// The host name did not resolve.
    NameNotResolved,
    /// No answer within the request timeout.
    TimedOut,
    /// Anything else on the wire (a reset, a broken pipe).
    Other,
}

/// Why PVE refused the caller, for an [`ErrorKind::Auth`] error: the fix differs (the token
/// itself, or the role behind it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// 401: the token was not accepted (unknown, expired, revoked, wrong secret; PVE 9.1.5
    /// and later say only "Authentication failed!").
    Credentials,
    /// "Permission check failed …" (403, or a task that checked inside its worker): the
    /// token is valid but lacks what this call needs.
    Permission(MissingPermission),
    /// 403 "URI '…' not available with API token, need proper ticket.": the call needs a
    /// user session, whatever the token's privileges.
    TokenNotAllowed,
}

/// Why a guest-agent call failed ([`Error::agent_failure`]): what a caller does next
/// differs (wait, configure the VM, look again later, or give up on asking the guest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentFailure {
    /// The agent does not answer (not started yet, not installed, hung): PVE's ping
    /// failed, or the agent's channel did mid-command. Waiting may help.
    NotRunning,
    /// The VM's config has no `agent` key: PVE does not even try.
    NotConfigured,
    /// The VM itself is not running ("VM N is not running", qemu-server `QemuServer/Agent.pm`
    /// `assert_agent_available`, checked before the agent's ping): nothing answers until
    /// something starts the VM, so waiting for its agent is waiting for nothing.
    VmNotRunning,
    /// qemu-ga could not open the file: it is not there (yet).
    FileMissing,
    /// qemu-ga answered with any other error: a command its allow/block list disabled
    /// (in any release's words), a permission the guest denies, anything else.
    Refused,
}

/// Refusals whose PVE wording callers need to act on, decided here once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownRefusal {
    /// The storage does not take ISO images (`upload`/content checks: "storage 'x' does not
    /// support 'iso' content").
    StorageWithoutIso,
    /// A start of a template (qemu-server `vm_start`: "you can't start a vm if it's a
    /// template").
    StartOfTemplate,
    /// A resize below the disk's size (qemu-server `resize_vm`: "shrinking disks is not
    /// supported").
    DiskShrink,
}

/// Which lock PVE gave up waiting for ([`Error::lock_refusal`]). Each of these refusals
/// comes before the refused work did anything that outlives it, so the same work may be
/// sent again; which lock it was tells a caller what to pace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LockRefusal {
    /// A storage's allocation lock (pve-storage `Plugin.pm` `cluster_lock_storage`): a local
    /// storage's flock `/var/lock/pve-manager/pve-storage-<id>` (pve-common `Tools.pm`
    /// `lock_file_full`: "can't lock file '…' - got timeout"), or a shared storage's pmxcfs
    /// lock `storage-<id>` (pve-cluster `Cluster.pm` `$cfs_lock`:
    /// `cfs-lock 'storage-<id>' error: got lock request timeout`). Both wait 10 s.
    Storage {
        /// The storage id.
        storage: String,
        /// Whether it was the cluster-wide pmxcfs lock (a shared storage) rather than one
        /// node's flock.
        cluster: bool,
    },
    /// A VM's config lock (qemu-server `QemuConfig` `lock_config_full`,
    /// `/var/lock/qemu-server/lock-<vmid>.conf`): another task held the VM (a clone's
    /// worker waits 1 s for its source and its new VMID, a config update 10 s).
    Config {
        /// The VM whose config lock it was.
        vmid: u32,
    },
    /// Another pmxcfs lock (`cfs-lock '<id>' error: got lock request timeout`), e.g. a
    /// config file's.
    Cluster {
        /// pmxcfs' lock id.
        id: String,
    },
    /// The VM's own `lock` property ("VM is locked (backup)", `check_lock`): held as long
    /// as the operation that set it runs.
    Vm {
        /// What holds it (`backup`, `clone`, `migrate`, …).
        holder: String,
    },
}

/// What a "Permission check failed (…)" names (pve-common `raise_perm_exc`;
/// pve-access-control `RPCEnvironment::check`/`check_any`): `(<path>, <priv>)`, `(<path>,
/// A|B)` for any-of checks, a text of its own (`(user != root@pam)`), or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MissingPermission {
    /// The ACL path, e.g. `/vms/100`.
    pub path: Option<String>,
    /// The privileges, any one of which would do, e.g. `["VM.GuestAgent.FileRead",
    /// "VM.GuestAgent.Unrestricted"]`.
    pub privileges: Vec<String>,
    /// Any other text inside the parentheses, e.g. `for modifying tag 'x'` or
    /// `user != root@pam`.
    pub detail: Option<String>,
}

impl MissingPermission {
    /// Reads PVE's text; `None` unless it is a permission check's.
    fn parse(message: &str) -> Option<MissingPermission> {
        let rest = message.trim().strip_prefix(PERMISSION_TEXT)?.trim();
        let Some(inner) = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) else {
            return Some(MissingPermission::default());
        };
        let Some((path, privileges)) = inner
            .split_once(", ")
            .filter(|(path, _)| path.starts_with('/'))
        else {
            return Some(MissingPermission {
                detail: Some(inner.to_owned()),
                ..MissingPermission::default()
            });
        };
        let (privileges, detail) = match privileges.split_once(' ') {
            Some((privileges, detail)) => (privileges, Some(detail.to_owned())),
            None => (privileges, None),
        };
        Some(MissingPermission {
            path: Some(path.to_owned()),
            privileges: privileges.split('|').map(str::to_owned).collect(),
            detail,
        })
    }
}

/// An error from a PVE call. Every server-provided text in it has had the API token scrubbed.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    origin: Origin,
    method: Option<Box<str>>,
    path: Option<String>,
    message: String,
    param_errors: BTreeMap<String, String>,
    task: Option<Box<TaskFailure>>,
    certificate: bool,
    /// What few errors carry, boxed so that a `Result` of this error stays small.
    rare: Option<Box<Rare>>,
}

#[derive(Debug, Clone, Default)]
struct Rare {
    /// `host:port` of the endpoint, for errors without an HTTP answer.
    server: Option<String>,
    /// For a request not sent because PVE refused the token before: the call it refused,
    /// e.g. `GET /cluster/resources`.
    refused_earlier: Option<String>,
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The classification all retry decisions use.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Where the error arose.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// HTTP status, when PVE answered.
    pub fn status(&self) -> Option<u16> {
        match self.origin {
            Origin::Http { status, .. } => Some(status),
            _ => None,
        }
    }

    /// PVE's message (or the transport error text), trimmed, secrets scrubbed.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// PVE's per-parameter error map of a 400 (empty otherwise).
    pub fn param_errors(&self) -> &BTreeMap<String, String> {
        &self.param_errors
    }

    /// The failed task, when the error is a task ending in error.
    pub fn task_failure(&self) -> Option<&TaskFailure> {
        self.task.as_deref()
    }

    /// HTTP method of the failed call, if any.
    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// API path of the failed call (below `/api2/json`), if any.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// True when a write may or may not have taken effect: the request may have reached PVE
    /// but no trustworthy answer came back. A non-idempotent call that failed like this must
    /// not be re-sent before checking state (see [`crate::retry::retry_with_check`]).
    pub fn outcome_unknown(&self) -> bool {
        match &self.origin {
            Origin::Transport { connect, .. } => !connect,
            // The handler ran and said no, except when it could not report the worker it
            // forked (the worker may still be running).
            Origin::Http {
                status,
                from_handler,
            } => {
                if *from_handler {
                    self.message.contains("got no worker upid")
                } else {
                    // 595 means pveproxy could not reach the node at all; anything else
                    // without PVE's envelope may have been cut off after dispatch.
                    *status >= 500 && *status != 595
                }
            }
            Origin::Task | Origin::Decode | Origin::Config => false,
        }
    }

    /// A 5xx that PVE's texts do not explain (an internal error, a proxy hiccup, an
    /// injected fault): worth another attempt for a read, and for a write after checking
    /// whether the first one took effect.
    pub fn is_unexplained_server_error(&self) -> bool {
        self.kind == ErrorKind::Permanent
            && matches!(self.origin, Origin::Http { status, .. } if (500..600).contains(&status))
    }

    /// The endpoint's `host:port`, for an error without an HTTP answer.
    pub fn server(&self) -> Option<&str> {
        self.rare.as_ref()?.server.as_deref()
    }

    pub(crate) fn with_server(mut self, server: String) -> Error {
        self.rare.get_or_insert_default().server = Some(server);
        self
    }

    /// For an error without an HTTP answer: why the request got none.
    pub fn connect_failure(&self) -> Option<ConnectFailure> {
        let Origin::Transport { timeout, .. } = self.origin else {
            return None;
        };
        let text = self.message.to_ascii_lowercase();
        Some(if self.certificate {
            ConnectFailure::Certificate
        } else if text.contains("connection refused") {
            ConnectFailure::Refused
        } else if text.contains("dns error")
            || text.contains("failed to lookup address")
            || text.contains("name or service not known")
            || text.contains("no address associated")
        {
            ConnectFailure::NameNotResolved
        } else if timeout || text.contains("timed out") {
            ConnectFailure::TimedOut
        } else {
            ConnectFailure::Other
        })
    }

    /// Whether the server's TLS certificate was rejected (wrong CA, expired, name mismatch):
    /// the fix is configuration (`ca_cert`), never a retry.
    pub fn is_certificate_error(&self) -> bool {
        self.certificate
    }

    /// Why PVE refused the caller, when it did ([`ErrorKind::Auth`]); `None` for any other
    /// error. The one place that reads PVE's texts for this: callers match on the result.
    pub fn auth_failure(&self) -> Option<AuthFailure> {
        if self.kind != ErrorKind::Auth {
            return None;
        }
        if self.status() == Some(401) {
            return Some(AuthFailure::Credentials);
        }
        if let Some(missing) = MissingPermission::parse(&self.message) {
            return Some(AuthFailure::Permission(missing));
        }
        if self.message.contains(TOKEN_NOT_ALLOWED_TEXT) {
            return Some(AuthFailure::TokenNotAllowed);
        }
        // Another 403: PVE refused without saying what was missing.
        Some(AuthFailure::Permission(MissingPermission::default()))
    }

    /// For a request the client did not send because PVE had refused its token on an earlier
    /// one ([`crate::ClientConfig::token_refusal_is_final`]): that call, e.g. `GET
    /// /cluster/resources`. `None` for every other error, the refusal itself included. Such an
    /// error is otherwise the refusal's: a 401 with PVE's text.
    pub fn refused_earlier(&self) -> Option<&str> {
        self.rare.as_ref()?.refused_earlier.as_deref()
    }

    /// Why a guest-agent call failed, when the agent (or its absence) is the reason; `None`
    /// for anything else, a transient answer included (595, a 5xx from the proxy layer, a
    /// reset). The one place that reads the agent's texts: callers match on the result.
    ///
    /// qemu-server (`src/PVE/QemuServer/Agent.pm`, 9.2.6): `assert_agent_available` dies
    /// "No QEMU guest agent configured" or, when the ping fails, "QEMU guest agent is not
    /// running"; every error qemu-ga answers comes back as the command's result
    /// (`QMPClient.pm` `cmd`, since 1928c201 "return error from guest-agent") and
    /// `check_agent_error` dies `Agent error: <desc>`. Only the agent's channel failing is
    /// worded `VM N qga command '…' failed - <why>` (`cmd`: "got timeout", a socket that
    /// cannot be opened, a connection closed). qemu-ga's `guest-file-open` words a missing
    /// file `failed to open file '<path>' (mode: '<mode>'): No such file or directory`
    /// (`qga/commands-posix.c` `safe_open_or_create`, `error_setg_errno`).
    pub fn agent_failure(&self) -> Option<AgentFailure> {
        if !matches!(self.origin, Origin::Http { status: 500, .. }) {
            return None;
        }
        let message = self.message.trim();
        if let Some(desc) = message.strip_prefix(AGENT_ERROR_PREFIX) {
            let desc = desc.trim_start();
            let missing =
                desc.starts_with("failed to open file '") && desc.ends_with(NO_SUCH_FILE_SUFFIX);
            return Some(if missing {
                AgentFailure::FileMissing
            } else {
                AgentFailure::Refused
            });
        }
        if message == NO_AGENT_CONFIGURED_TEXT {
            Some(AgentFailure::NotConfigured)
        } else if is_vm_not_running(message) {
            Some(AgentFailure::VmNotRunning)
        } else if message == AGENT_NOT_RUNNING_TEXT || is_qga_channel_failure(message) {
            Some(AgentFailure::NotRunning)
        } else {
            None
        }
    }

    /// Whether pveproxy could not reach the node the request was for (its pseudo statuses
    /// 595 "No route to host" / "Connection refused" and 596 "Broken pipe", with no body,
    /// pve-http-server `AnyEvent.pm` `proxy_request`): the node is down or cut off. The kind
    /// is [`ErrorKind::Transient`] (a moment's hiccup passes), but a node that is down stays
    /// down, which callers that must not wait for it tell by this.
    pub fn node_unreachable(&self) -> bool {
        matches!(self.status(), Some(595 | 596))
    }

    /// A refusal PVE words in a way only this crate reads (see [`KnownRefusal`]).
    pub fn known_refusal(&self) -> Option<KnownRefusal> {
        let message = self.message.as_str();
        if message.contains("does not support 'iso' content")
            || message.contains("does not support iso")
        {
            Some(KnownRefusal::StorageWithoutIso)
        } else if message.contains("you can't start a vm if it's a template") {
            Some(KnownRefusal::StartOfTemplate)
        } else if message.contains("shrinking disks is not supported") {
            Some(KnownRefusal::DiskShrink)
        } else {
            None
        }
    }

    /// Whether PVE refused to destroy a VM because it runs: qemu-server `API2/Qemu.pm`,
    /// `destroy_vm`'s early checks: "VM N is running - destroy failed".
    pub fn is_destroy_of_running_vm(&self) -> bool {
        self.message.contains("is running - destroy failed")
    }

    /// Which lock PVE refused to wait longer for, when this is such a refusal (an HTTP
    /// answer or a task's exit status, e.g. a clone's "clone failed: cfs-lock
    /// 'storage-vmdata' error: got lock request timeout"); `None` for anything else. The one
    /// place that reads the lock texts: callers match on the result.
    ///
    /// qemu-server `API2/Qemu.pm` `clone_vm` takes its locks before it writes anything and,
    /// when its worker fails after its temporary config (a storage lock while allocating),
    /// frees what it allocated and unlinks that config before it dies "clone failed: …":
    /// a clone refused so left nothing, and may be sent again.
    pub fn lock_refusal(&self) -> Option<LockRefusal> {
        if self.kind != ErrorKind::Locked {
            return None;
        }
        parse_lock_refusal(&self.message)
    }

    pub(crate) fn http(
        method: &str,
        path: &str,
        status: u16,
        from_handler: bool,
        message: String,
        param_errors: BTreeMap<String, String>,
    ) -> Error {
        let kind = classify_http(status, &message, &param_errors);
        Error {
            kind,
            origin: Origin::Http {
                status,
                from_handler,
            },
            method: Some(method.into()),
            path: Some(path.to_owned()),
            message,
            param_errors,
            task: None,
            certificate: false,
            rare: None,
        }
    }

    pub(crate) fn transport(
        method: &str,
        path: &str,
        connect: bool,
        timeout: bool,
        message: String,
    ) -> Error {
        let certificate = looks_like_certificate_failure(&message);
        Error {
            // A rejected certificate stays rejected; everything else on the wire may pass.
            kind: if certificate {
                ErrorKind::Permanent
            } else {
                ErrorKind::Transient
            },
            origin: Origin::Transport { connect, timeout },
            method: Some(method.into()),
            path: Some(path.to_owned()),
            message,
            param_errors: BTreeMap::new(),
            task: None,
            certificate,
            rare: None,
        }
    }

    pub(crate) fn decode(method: &str, path: &str, message: String) -> Error {
        Error {
            kind: ErrorKind::Permanent,
            origin: Origin::Decode,
            method: Some(method.into()),
            path: Some(path.to_owned()),
            message,
            param_errors: BTreeMap::new(),
            task: None,
            certificate: false,
            rare: None,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Invalid,
            origin: Origin::Config,
            method: None,
            path: None,
            message: message.into(),
            param_errors: BTreeMap::new(),
            task: None,
            certificate: false,
            rare: None,
        }
    }

    /// The error of a request the client did not send because PVE refused its token on an
    /// earlier one (`first`, a 401): still a 401 to every caller, saying which call PVE
    /// refused.
    pub(crate) fn not_sent_after_refusal(method: &str, path: &str, first: &Error) -> Error {
        let first_call = match (first.method(), first.path()) {
            (Some(method), Some(path)) => format!("{method} {path}"),
            _ => "an earlier request".to_owned(),
        };
        let mut error = Error {
            method: Some(method.into()),
            path: Some(path.to_owned()),
            ..first.clone()
        };
        error.rare.get_or_insert_default().refused_earlier = Some(first_call);
        error
    }

    pub(crate) fn task(failure: TaskFailure) -> Error {
        Error {
            kind: classify_task_exit(&failure.exitstatus),
            origin: Origin::Task,
            method: None,
            path: None,
            message: failure.exitstatus.clone(),
            param_errors: BTreeMap::new(),
            task: Some(Box::new(failure)),
            certificate: false,
            rare: None,
        }
    }

    /// A task that could not be found on its node long after it was dispatched.
    pub(crate) fn task_vanished(upid: &Upid, last: Error) -> Error {
        Error {
            message: format!("task {upid} is not visible on node {}", upid.node()),
            ..last
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(task) = &self.task {
            write!(
                f,
                "task {} ({}) on node {} failed: {}",
                task.upid.task_type(),
                task.upid,
                task.upid.node(),
                task.exitstatus
            )?;
        } else {
            if let (Some(m), Some(p)) = (&self.method, &self.path) {
                write!(f, "{m} {p}: ")?;
            }
            if let Some(first_call) = self.refused_earlier() {
                return write!(
                    f,
                    "not sent: PVE refused the API token earlier in this run (HTTP 401 on \
                     {first_call}: {})",
                    self.message
                );
            }
            match self.origin {
                Origin::Http { status, .. } => write!(f, "HTTP {status}: {}", self.message)?,
                Origin::Transport { timeout: true, .. } => {
                    write!(f, "request timed out: {}", self.message)?
                }
                Origin::Transport { .. } => write!(f, "connection error: {}", self.message)?,
                Origin::Decode => write!(f, "unexpected response: {}", self.message)?,
                Origin::Config | Origin::Task => f.write_str(&self.message)?,
            }
        }
        for (param, msg) in &self.param_errors {
            write!(f, "; {param}: {msg}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// rustls's texts for a rejected server certificate, as they surface in reqwest's error chain.
fn looks_like_certificate_failure(chain: &str) -> bool {
    contains_any(
        chain,
        &[
            "invalid peer certificate",
            "UnknownIssuer",
            "NotValidForName",
            "certificate verify failed",
        ],
    )
}

fn contains_any(haystack: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| haystack.contains(n))
}

/// PVE texts meaning "the thing is not there".
const NOT_FOUND_TEXTS: &[&str] = &[
    "does not exist",
    "unable to find configuration file",
    "no such task",
    "No such storage",
];

const ALREADY_EXISTS_TEXTS: &[&str] = &["already exists", "File exists"];

/// qemu-server `check_lock` ("VM is locked (backup)"); pve-common `Tools.pm`
/// `lock_file_full` ("can't lock file '<path>' - got timeout", a flock: a VM's config, a
/// local storage's allocations); pve-cluster `Cluster.pm` `$cfs_lock` ("cfs-lock '<id>'
/// error: got lock request timeout", pmxcfs: a shared storage's allocations, config files).
const LOCKED_TEXTS: &[&str] = &["VM is locked (", "can't lock file", CFS_LOCK_TIMEOUT_TEXT];

/// pve-cluster `Cluster.pm` `$cfs_lock`: the lock id and this, after `cfs-lock '<id>'`.
const CFS_LOCK_TIMEOUT_TEXT: &str = "error: got lock request timeout";

/// Reads which lock a lock text names (see [`Error::lock_refusal`]).
fn parse_lock_refusal(message: &str) -> Option<LockRefusal> {
    let quoted = |after: &str| -> Option<&str> {
        let rest = &message[message.find(after)? + after.len()..];
        rest.split_once('\'').map(|(inside, _)| inside)
    };
    if message.contains(CFS_LOCK_TIMEOUT_TEXT) {
        let id = quoted("cfs-lock '")?;
        return Some(match id.strip_prefix("storage-") {
            Some(storage) => LockRefusal::Storage {
                storage: storage.to_owned(),
                cluster: true,
            },
            None => LockRefusal::Cluster { id: id.to_owned() },
        });
    }
    if let Some(path) = quoted("can't lock file '") {
        let file = path.rsplit('/').next().unwrap_or(path);
        if let Some(storage) = file.strip_prefix("pve-storage-") {
            return Some(LockRefusal::Storage {
                storage: storage.to_owned(),
                cluster: false,
            });
        }
        let vmid = file.strip_prefix("lock-")?.strip_suffix(".conf")?;
        return vmid.parse().ok().map(|vmid| LockRefusal::Config { vmid });
    }
    let rest = &message[message.find("VM is locked (")? + "VM is locked (".len()..];
    let holder = rest.split_once(')')?.0;
    Some(LockRefusal::Vm {
        holder: holder.to_owned(),
    })
}

/// PVE's digest refusals: `checksum mismatch (file change by other user?)` (update_vm_api)
/// and PVE::Tools::assert_if_modified's `detected modified configuration`.
const CONFLICT_TEXTS: &[&str] = &["checksum mismatch", "detected modified configuration"];

/// pve-common `PVE::Exception::raise_perm_exc`; a worker that checks a privilege fails its
/// task with the same text.
const PERMISSION_TEXT: &str = "Permission check failed";

/// pve-manager `PVE/HTTPServer.pm` (`rest_handler`) for calls a token may not make.
const TOKEN_NOT_ALLOWED_TEXT: &str = "not available with API token";

/// pve-ha-manager `src/PVE/API2/HA/Resources.pm`: `api_copy_config` ("no such resource
/// 'vm:100'") and `delete` ("cannot delete service 'vm:100', not HA managed!").
const HA_NOT_FOUND_TEXTS: &[&str] = &["no such resource '", "not HA managed!"];

/// pve-ha-manager `Resources.pm` `create`: "resource ID 'vm:100' already defined".
const HA_ALREADY_EXISTS_TEXTS: &[&str] = &["' already defined"];

/// qemu-server `QemuServer/Agent.pm` `check_agent_error`: every error qemu-ga answered.
/// (Its detail may be empty: the prefix alone is the agent's answer.)
const AGENT_ERROR_PREFIX: &str = "Agent error:";
/// `Agent.pm` `assert_agent_available`, in its order.
const NO_AGENT_CONFIGURED_TEXT: &str = "No QEMU guest agent configured";
const AGENT_NOT_RUNNING_TEXT: &str = "QEMU guest agent is not running";
/// glibc's `strerror(ENOENT)` after qemu-ga's `failed to open file '…' (mode: '…')`.
const NO_SUCH_FILE_SUFFIX: &str = "): No such file or directory";

/// `QMPClient.pm` `cmd`: "VM N qga command 'guest-…' failed - <why>", the agent's channel
/// failing (a timeout, its socket), never an answer of qemu-ga's.
/// qemu-server `QemuServer/Agent.pm` `assert_agent_available`: "VM <vmid> is not running".
fn is_vm_not_running(message: &str) -> bool {
    message
        .strip_prefix("VM ")
        .and_then(|rest| rest.strip_suffix(" is not running"))
        .is_some_and(|vmid| !vmid.is_empty() && vmid.bytes().all(|b| b.is_ascii_digit()))
}

fn is_qga_channel_failure(message: &str) -> bool {
    message.starts_with("VM ")
        && message
            .split_once(" qga command '")
            .is_some_and(|(_, rest)| rest.contains("' failed - "))
}

const TRANSIENT_TEXTS: &[&str] = &[
    "got no worker upid",
    "QEMU guest agent is not running",
    "got timeout",
    "Connection refused",
    "No route to host",
    "Broken pipe",
];

/// Classify an HTTP error response from PVE's status and texts.
pub(crate) fn classify_http(
    status: u16,
    message: &str,
    param_errors: &BTreeMap<String, String>,
) -> ErrorKind {
    let all_params = || param_errors.values().map(String::as_str);
    match status {
        401 | 403 => ErrorKind::Auth,
        404 => ErrorKind::NotFound,
        400 => {
            if all_params().any(|m| contains_any(m, NOT_FOUND_TEXTS)) {
                ErrorKind::NotFound
            } else if all_params().any(|m| contains_any(m, ALREADY_EXISTS_TEXTS)) {
                ErrorKind::AlreadyExists
            } else {
                ErrorKind::Invalid
            }
        }
        // PVE's proxy pseudo codes: the target node could not be reached or the proxied
        // connection broke.
        595 | 596 | 599 | 502 | 503 | 504 => ErrorKind::Transient,
        500 => classify_text(message).unwrap_or(ErrorKind::Permanent),
        _ => ErrorKind::Permanent,
    }
}

/// Classify by the message text alone, order matters: a lock-timeout text also says "got
/// timeout" but is a lock problem.
fn classify_text(message: &str) -> Option<ErrorKind> {
    if message.trim_start().starts_with(AGENT_ERROR_PREFIX) {
        // qemu-ga's own answer (its texts may name paths that read like PVE's): retrying
        // it unchanged gets the same; `Error::agent_failure` says which it is.
        Some(ErrorKind::Permanent)
    } else if message.trim_start().starts_with(PERMISSION_TEXT) {
        Some(ErrorKind::Auth)
    } else if contains_any(message, LOCKED_TEXTS) {
        Some(ErrorKind::Locked)
    } else if contains_any(message, CONFLICT_TEXTS) {
        Some(ErrorKind::Conflict)
    } else if contains_any(message, ALREADY_EXISTS_TEXTS)
        || contains_any(message, HA_ALREADY_EXISTS_TEXTS)
    {
        Some(ErrorKind::AlreadyExists)
    } else if contains_any(message, NOT_FOUND_TEXTS) || contains_any(message, HA_NOT_FOUND_TEXTS) {
        Some(ErrorKind::NotFound)
    } else if contains_any(message, TRANSIENT_TEXTS) {
        Some(ErrorKind::Transient)
    } else {
        None
    }
}

/// Classify a failed task's exit status.
pub(crate) fn classify_task_exit(exitstatus: &str) -> ErrorKind {
    classify_text(exitstatus).unwrap_or(ErrorKind::Permanent)
}

/// Removes secrets from texts that came from the server before they enter an [`Error`].
#[derive(Clone)]
pub(crate) struct Scrubber {
    needles: Vec<String>,
}

pub(crate) const REDACTED: &str = "<redacted>";

impl Scrubber {
    pub(crate) fn new(secrets: &[&str]) -> Scrubber {
        let mut needles: Vec<String> = Vec::new();
        for s in secrets.iter().filter(|s| !s.is_empty()) {
            needles.push((*s).to_owned());
            // PVE URI-unescapes the header value and may echo either form.
            let encoded: String = url::form_urlencoded::byte_serialize(s.as_bytes()).collect();
            if encoded != *s {
                needles.push(encoded);
            }
        }
        // Longest first so a secret inside a longer needle is not half-replaced.
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        Scrubber { needles }
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for n in &self.needles {
            if out.contains(n.as_str()) {
                out = out.replace(n.as_str(), REDACTED);
            }
        }
        out
    }
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scrubber")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn http(status: u16, msg: &str) -> ErrorKind {
        classify_http(status, msg, &BTreeMap::new())
    }

    #[test]
    fn a_node_pveproxy_cannot_reach_is_told_apart_and_known_refusals_are_read_here() {
        let error = |status: u16, message: &str| {
            Error::http("GET", "/x", status, false, message.into(), BTreeMap::new())
        };
        assert!(error(595, "No route to host").node_unreachable());
        assert!(error(596, "Broken pipe").node_unreachable());
        assert!(!error(503, "busy").node_unreachable());
        let refusal = |message: &str| error(500, message).known_refusal();
        assert_eq!(
            refusal("storage 'local-lvm' does not support 'iso' content\n"),
            Some(KnownRefusal::StorageWithoutIso)
        );
        assert_eq!(
            refusal("you can't start a vm if it's a template\n"),
            Some(KnownRefusal::StartOfTemplate)
        );
        assert_eq!(
            refusal("shrinking disks is not supported\n"),
            Some(KnownRefusal::DiskShrink)
        );
        assert_eq!(refusal("something else"), None);
    }

    #[test]
    fn not_found_texts_from_facts() {
        assert_eq!(
            http(
                500,
                "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist\n"
            ),
            ErrorKind::NotFound
        );
        assert_eq!(
            http(
                500,
                "unable to find configuration file for VM 100 on node 'pve1'\n"
            ),
            ErrorKind::NotFound
        );
        assert_eq!(
            http(500, "storage 'nope' does not exist\n"),
            ErrorKind::NotFound
        );
        assert_eq!(http(500, "pool 'x' does not exist\n"), ErrorKind::NotFound);
        assert_eq!(http(404, ""), ErrorKind::NotFound);
        assert_eq!(
            classify_http(
                400,
                "Parameter verification failed.\n",
                &params(&[("upid", "no such task")])
            ),
            ErrorKind::NotFound
        );
        assert_eq!(
            classify_http(
                400,
                "Parameter verification failed.\n",
                &params(&[("storage", "No such storage.")])
            ),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn already_exists_texts_from_facts() {
        assert_eq!(
            classify_http(
                400,
                "Parameter verification failed.\n",
                &params(&[("vmid", "VM 100 already exists")])
            ),
            ErrorKind::AlreadyExists
        );
        assert_eq!(
            http(
                500,
                "unable to create VM 100 - VM 100 already exists on node 'pve2'\n"
            ),
            ErrorKind::AlreadyExists
        );
        assert_eq!(
            classify_task_exit(
                "clone failed: close (rename) atomic file \
                 '/etc/pve/nodes/pve1/qemu-server/101.conf' failed: File exists"
            ),
            ErrorKind::AlreadyExists
        );
    }

    #[test]
    fn locked_texts_from_facts() {
        assert_eq!(http(500, "VM is locked (clone)\n"), ErrorKind::Locked);
        assert_eq!(
            http(500, "checksum mismatch (file change by other user?)\n"),
            ErrorKind::Conflict
        );
        assert_eq!(
            classify_task_exit("checksum mismatch (file change by other user?)"),
            ErrorKind::Conflict
        );
        assert_eq!(
            http(
                500,
                "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout\n"
            ),
            ErrorKind::Locked
        );
        assert_eq!(
            classify_task_exit("VM is locked (backup)"),
            ErrorKind::Locked
        );
        assert_eq!(
            classify_task_exit(
                "clone failed: can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout"
            ),
            ErrorKind::Locked
        );
    }

    /// The storage lock refusals parallel clones meet, as PVE words them: pve-storage
    /// `Plugin.pm` `cluster_lock_storage` (0c56bad) takes pve-common `Tools.pm`
    /// `lock_file_full` for a local storage ("can't lock file '<path>' - $@", `$@` being
    /// `run_with_timeout`'s "got timeout"; CAPMOX#389) and pve-cluster `Cluster.pm`
    /// `$cfs_lock` (7091d92) for a shared one ("cfs-lock '$lockid' error: $err" around "got
    /// lock request timeout"; linstor-proxmox#73); qemu-server `API2/Qemu.pm` `clone_vm`
    /// (e6352be6) prefixes its worker's error with "clone failed: ".
    #[test]
    fn lock_refusals_name_their_lock() {
        let task = |exit: &str| {
            let upid = "UPID:pve1:0000A1B2:0001C3D4:6700AABB:qmclone:9000:t@pve!x:"
                .parse()
                .unwrap();
            Error::task(TaskFailure {
                upid,
                exitstatus: exit.into(),
                log_tail: Vec::new(),
            })
        };
        let flock = task(
            "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got \
             timeout",
        );
        assert_eq!(flock.kind(), ErrorKind::Locked);
        assert_eq!(
            flock.lock_refusal(),
            Some(LockRefusal::Storage {
                storage: "local-lvm".into(),
                cluster: false
            })
        );
        let cfs = task("clone failed: cfs-lock 'storage-vmdata' error: got lock request timeout");
        assert_eq!(cfs.kind(), ErrorKind::Locked, "not a permanent failure");
        assert_eq!(
            cfs.lock_refusal(),
            Some(LockRefusal::Storage {
                storage: "vmdata".into(),
                cluster: true
            })
        );
        // The same texts as an HTTP answer (a synchronous API call that allocates).
        let http_cfs = Error::http(
            "POST",
            "/x",
            500,
            true,
            "cfs-lock 'storage-ceph-vm' error: got lock request timeout\n".into(),
            BTreeMap::new(),
        );
        assert_eq!(
            http_cfs.lock_refusal(),
            Some(LockRefusal::Storage {
                storage: "ceph-vm".into(),
                cluster: true
            })
        );
        // pmxcfs' other locks, e.g. a config file's (`cfs_lock_file`: "file-" and the name
        // with '.' and '/' as '_').
        assert_eq!(
            task("cfs-lock 'file-user_cfg' error: got lock request timeout").lock_refusal(),
            Some(LockRefusal::Cluster {
                id: "file-user_cfg".into()
            })
        );
        // A clone's source or new VMID held by another task (`lock_config_full`, 1 s).
        assert_eq!(
            task("can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout")
                .lock_refusal(),
            Some(LockRefusal::Config { vmid: 9000 })
        );
        assert_eq!(
            task("VM is locked (backup)").lock_refusal(),
            Some(LockRefusal::Vm {
                holder: "backup".into()
            })
        );
        // pmxcfs failures that are no lock contention stay what they are.
        let offline = task("cfs-lock 'storage-vmdata' error: pve cluster filesystem not online.");
        assert_eq!(offline.kind(), ErrorKind::Permanent);
        assert_eq!(offline.lock_refusal(), None);
        let quorum = task("cfs-lock 'storage-vmdata' error: no quorum!");
        assert_eq!(quorum.lock_refusal(), None);
        // A lock-shaped text in another kind of error is not read as one.
        assert_eq!(task("VM 100 not running").lock_refusal(), None);
        assert_eq!(
            Error::transport("GET", "/x", false, true, "got timeout".into()).lock_refusal(),
            None
        );
    }

    #[test]
    fn transient_statuses_and_texts() {
        assert_eq!(http(595, "No route to host"), ErrorKind::Transient);
        assert_eq!(http(595, "Connection refused"), ErrorKind::Transient);
        assert_eq!(http(596, "Broken pipe"), ErrorKind::Transient);
        assert_eq!(http(503, ""), ErrorKind::Transient);
        assert_eq!(http(500, "got no worker upid\n"), ErrorKind::Transient);
        assert_eq!(
            http(500, "QEMU guest agent is not running\n"),
            ErrorKind::Transient
        );
        assert_eq!(
            http(
                500,
                "VM 100 qga command 'guest-network-get-interfaces' failed - got timeout\n"
            ),
            ErrorKind::Transient
        );
    }

    #[test]
    fn auth_and_invalid() {
        assert_eq!(http(401, "Authentication failed!"), ErrorKind::Auth);
        assert_eq!(http(401, "No ticket"), ErrorKind::Auth);
        assert_eq!(
            http(403, "Permission check failed (/vms/100, VM.Audit)\n"),
            ErrorKind::Auth
        );
        assert_eq!(
            classify_http(
                400,
                "Parameter verification failed.\n",
                &params(&[("ide2", "explicit 'media=cdrom' is required for iso images")])
            ),
            ErrorKind::Invalid
        );
        assert_eq!(
            classify_http(
                400,
                "Parameter verification failed.\n",
                &params(&[("filename", "wrong file extension")])
            ),
            ErrorKind::Invalid
        );
    }

    #[test]
    fn permanent_defaults() {
        assert_eq!(http(500, "VM 100 not running\n"), ErrorKind::Permanent);
        assert_eq!(
            http(500, "No QEMU guest agent configured\n"),
            ErrorKind::Permanent
        );
        assert_eq!(
            http(500, "can't remove VM 100 - protection mode enabled\n"),
            ErrorKind::Permanent
        );
        assert_eq!(
            http(501, "Method 'GET /foo' not implemented"),
            ErrorKind::Permanent
        );
        assert_eq!(
            classify_task_exit("shrinking disks is not supported"),
            ErrorKind::Permanent
        );
        assert_eq!(
            classify_task_exit("you can't start a vm if it's a template"),
            ErrorKind::Permanent
        );
        assert_eq!(
            http(500, "storage 'local' does not support 'iso' content\n"),
            ErrorKind::Permanent
        );
    }

    #[test]
    fn outcome_unknown_rules() {
        let handler_die = Error::http(
            "POST",
            "/x",
            500,
            true,
            "VM 1 not running".into(),
            BTreeMap::new(),
        );
        assert!(!handler_die.outcome_unknown());
        let no_upid = Error::http(
            "POST",
            "/x",
            500,
            true,
            "got no worker upid".into(),
            BTreeMap::new(),
        );
        assert!(no_upid.outcome_unknown());
        let proxy_broke = Error::http(
            "POST",
            "/x",
            596,
            false,
            "Broken pipe".into(),
            BTreeMap::new(),
        );
        assert!(proxy_broke.outcome_unknown());
        let node_down = Error::http(
            "POST",
            "/x",
            595,
            false,
            "No route to host".into(),
            BTreeMap::new(),
        );
        assert!(!node_down.outcome_unknown());
        assert!(!Error::transport("POST", "/x", true, false, "refused".into()).outcome_unknown());
        let failure = |connect, timeout, text: &str| {
            Error::transport("GET", "/version", connect, timeout, text.into()).connect_failure()
        };
        assert_eq!(
            failure(
                true,
                false,
                "client error (Connect): tcp connect error: Connection refused (os error 111)"
            ),
            Some(ConnectFailure::Refused)
        );
        assert_eq!(
            failure(
                true,
                false,
                "client error (Connect): dns error: \
                 failed to lookup address information: Name or service not known"
            ),
            Some(ConnectFailure::NameNotResolved)
        );
        assert_eq!(
            failure(true, false, "invalid peer certificate: UnknownIssuer"),
            Some(ConnectFailure::Certificate)
        );
        assert_eq!(
            failure(false, true, "operation timed out"),
            Some(ConnectFailure::TimedOut)
        );
        assert_eq!(
            failure(false, false, "connection reset"),
            Some(ConnectFailure::Other)
        );
        assert!(Error::transport("POST", "/x", false, true, "timeout".into()).outcome_unknown());
    }

    #[test]
    fn auth_failures_are_read_once() {
        let http = |status: u16, msg: &str| {
            Error::http("GET", "/x", status, true, msg.into(), BTreeMap::new())
        };
        assert_eq!(
            http(401, "Authentication failed!\n").auth_failure(),
            Some(AuthFailure::Credentials)
        );
        assert_eq!(
            http(401, "invalid token value!").auth_failure(),
            Some(AuthFailure::Credentials)
        );
        let missing = |e: Error| match e.auth_failure() {
            Some(AuthFailure::Permission(m)) => m,
            other => panic!("{other:?}"),
        };
        let m = missing(http(403, "Permission check failed (/vms/100, VM.Audit)\n"));
        assert_eq!(m.path.as_deref(), Some("/vms/100"));
        assert_eq!(m.privileges, ["VM.Audit"]);
        assert_eq!(m.detail, None);
        // Agent.pm's file-read: any of two.
        let m = missing(http(
            403,
            "Permission check failed \
             (/vms/100, VM.GuestAgent.FileRead|VM.GuestAgent.Unrestricted)\n",
        ));
        assert_eq!(
            m.privileges,
            ["VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"]
        );
        let m = missing(http(
            403,
            "Permission check failed (/, Sys.Modify for modifying tag 'x')\n",
        ));
        assert_eq!(m.path.as_deref(), Some("/"));
        assert_eq!(m.privileges, ["Sys.Modify"]);
        assert_eq!(m.detail.as_deref(), Some("for modifying tag 'x'"));
        let m = missing(http(403, "Permission check failed (user != root@pam)\n"));
        assert_eq!(
            (m.path, m.detail.as_deref()),
            (None, Some("user != root@pam"))
        );
        assert_eq!(
            missing(http(403, "Permission check failed\n")),
            MissingPermission::default()
        );
        assert_eq!(
            http(
                403,
                "URI '/nodes/pve1/termproxy' not available with API token, need proper ticket.\n"
            )
            .auth_failure(),
            Some(AuthFailure::TokenNotAllowed)
        );
        // A worker's own check fails the task with the same text.
        let task = classify_task_exit("Permission check failed (/vms/300, VM.Config.CDROM)");
        assert_eq!(task, ErrorKind::Auth);
        assert_eq!(http(500, "VM 100 not running\n").auth_failure(), None);
        assert_eq!(http(404, "").auth_failure(), None);
    }

    #[test]
    fn guest_file_refusals() {
        let http = |msg: &str| Error::http("GET", "/x", 500, true, msg.into(), BTreeMap::new());
        // Agent.pm `check_agent_error` relays qemu-ga's desc (QMPClient hands it back as the
        // result): "Agent error: <desc>".
        let missing = http(
            "Agent error: failed to open file '/run/cloud-init/result.json' (mode: 'r'): No \
             such file or directory\n",
        );
        assert_eq!(missing.agent_failure(), Some(AgentFailure::FileMissing));
        // Not the VM gone: a missing guest file must never read as NotFound.
        assert_eq!(missing.kind(), ErrorKind::Permanent);
        for blocked in [
            "Agent error: Command guest-file-open has been disabled\n",
            "Agent error: The command guest-file-open has been disabled for this instance\n",
            "Agent error: Command guest-file-open has been disabled: the command is not \
             allowed\n",
        ] {
            let blocked = http(blocked);
            assert_eq!(blocked.agent_failure(), Some(AgentFailure::Refused));
        }
        let denied =
            http("Agent error: failed to open file '/etc/shadow' (mode: 'r'): Permission denied\n");
        assert_eq!(denied.agent_failure(), Some(AgentFailure::Refused));
        let not_running = http("QEMU guest agent is not running\n").agent_failure();
        assert_eq!(not_running, Some(AgentFailure::NotRunning));
    }

    /// Every wording the guest profiles of pve-sim answer with, judged once.
    #[test]
    fn agent_failures_are_judged_by_kind() {
        let http = |status: u16, msg: &str| {
            Error::http("GET", "/x", status, true, msg.into(), BTreeMap::new())
        };
        let judged = |msg: &str| http(500, msg).agent_failure();
        use AgentFailure::*;
        let cases = [
            // An agent error with no detail is still the agent's answer (found by the
            // property test below in a README run of 2026-12-03).
            ("Agent error: \n", Some(Refused)),
            ("No QEMU guest agent configured\n", Some(NotConfigured)),
            ("QEMU guest agent is not running\n", Some(NotRunning)),
            (
                "VM 100 qga command 'guest-file-read' failed - got timeout\n",
                Some(NotRunning),
            ),
            (
                "VM 100 qga command 'guest-ping' failed - unable to connect to VM 100 qga \
                 socket - timeout after 31 retries\n",
                Some(NotRunning),
            ),
            (
                "Agent error: failed to open file '/run/cloud-init/status.json' (mode: 'r'): \
                 No such file or directory\n",
                Some(FileMissing),
            ),
            // debian-12 (qemu-ga 7.2, a block-list entry has no reason).
            (
                "Agent error: Command guest-file-open has been disabled\n",
                Some(Refused),
            ),
            // rhel-9 (an allow-list), debian-13 (qemu-ga 9.1 on, either list).
            (
                "Agent error: Command guest-file-open has been disabled: the command is not \
                 allowed\n",
                Some(Refused),
            ),
            // old-qemu-agent (before QEMU 6.0).
            (
                "Agent error: The command guest-file-open has been disabled for this \
                 instance\n",
                Some(Refused),
            ),
            // rhel-9-selinux.
            (
                "Agent error: failed to open file '/run/cloud-init/status.json' (mode: 'r'): \
                 Permission denied\n",
                Some(Refused),
            ),
            // A file whose name reads like a missing one is still judged by its errno.
            (
                "Agent error: failed to open file '/tmp/No such file or directory' (mode: \
                 'r'): Permission denied\n",
                Some(Refused),
            ),
            (
                "Agent error: Base64 data contains invalid characters\n",
                Some(Refused),
            ),
            ("Agent error: can't open file\n", Some(Refused)),
            ("VM 100 is not running\n", Some(VmNotRunning)),
            ("VM 100 is not running yet, maybe\n", None),
            ("VM is locked (backup)\n", None),
        ];
        for (message, expected) in cases {
            assert_eq!(judged(message), expected, "{message:?}");
        }
        // A transient answer is never the agent's: the proxy's codes, or a reset.
        assert_eq!(http(595, "No route to host").agent_failure(), None);
        assert_eq!(
            http(503, "QEMU guest agent is not running").agent_failure(),
            None
        );
        let reset = Error::transport("GET", "/x", false, false, "connection reset".into());
        assert_eq!(reset.agent_failure(), None);
        // qemu-ga's texts never make a PVE kind: not NotFound, not Locked.
        assert_eq!(
            http(
                500,
                "Agent error: failed to open file '/srv/does not exist' (mode: 'r'): No such \
                 file or directory\n"
            )
            .kind(),
            ErrorKind::Permanent
        );
        assert_eq!(
            http(500, "QEMU guest agent is not running\n").kind(),
            ErrorKind::Transient
        );
    }

    #[test]
    fn a_destroy_refused_because_the_vm_runs() {
        let http = |msg: &str| Error::http("DELETE", "/x", 500, true, msg.into(), BTreeMap::new());
        // qemu-server API2/Qemu.pm, destroy_vm's early checks.
        assert!(http("VM 190246 is running - destroy failed\n").is_destroy_of_running_vm());
        assert!(
            !http("can't remove VM 100 - protection mode enabled\n").is_destroy_of_running_vm()
        );
    }

    #[test]
    fn ha_resource_texts() {
        // pve-ha-manager src/PVE/API2/HA/Resources.pm (die texts, HTTP 500).
        assert_eq!(
            http(500, "no such resource 'vm:100'\n"),
            ErrorKind::NotFound
        );
        assert_eq!(
            http(500, "cannot delete service 'vm:100', not HA managed!\n"),
            ErrorKind::NotFound
        );
        assert_eq!(
            http(
                500,
                "create resource failed: resource ID 'vm:100' already defined\n"
            ),
            ErrorKind::AlreadyExists
        );
        // The 400 of a duplicate parameter stays Invalid.
        assert_eq!(
            classify_http(
                400,
                "Parameter verification failed.\n",
                &params(&[(
                    "sid",
                    "duplicate parameter (already defined in URI) with conflicting values!"
                )])
            ),
            ErrorKind::Invalid
        );
        assert_eq!(
            http(
                500,
                "service 'vm:100' in error state, must be disabled and fixed first\n"
            ),
            ErrorKind::Permanent
        );
    }

    /// Every text we classify on is one PVE really prints: each must occur in the shared
    /// fact files (skipped where the checkout has no `shared/` beside it).
    #[test]
    fn classification_texts_come_from_the_facts() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared");
        let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}"));
        let (Ok(facts), Ok(providers), Ok(turn5)) = (
            read("pve/facts.md"),
            read("reference/other-providers.md"),
            read("reference/facts-turn5.md"),
        ) else {
            println!("skipped: no shared/ fact files at {dir}");
            return;
        };
        for needle in NOT_FOUND_TEXTS
            .iter()
            .chain(ALREADY_EXISTS_TEXTS)
            .chain(LOCKED_TEXTS)
            .chain(TRANSIENT_TEXTS)
            .chain(&[PERMISSION_TEXT, TOKEN_NOT_ALLOWED_TEXT])
        {
            assert!(
                facts.contains(needle) || providers.contains(needle) || turn5.contains(needle),
                "{needle:?} is not a text from the facts"
            );
        }
    }

    #[test]
    fn scrubber_removes_plain_and_encoded_secret() {
        let s = Scrubber::new(&["root@pam!tf=ab cd", "ab cd"]);
        assert_eq!(s.scrub("x ab cd y"), "x <redacted> y");
        assert_eq!(s.scrub("x ab+cd y"), "x <redacted> y");
        assert_eq!(
            s.scrub("PVEAPIToken=root@pam!tf=ab cd"),
            "PVEAPIToken=<redacted>"
        );
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever PVE says: an agent failure is judged only from a 500; "no such file"
            /// only from qemu-ga's own open failure; any other "Agent error:" is a refusal;
            /// a node is unreachable exactly on pveproxy's 595/596; nothing panics.
            #[test]
            fn errors_are_classified_by_kind_for_every_text(
                status in prop_oneof![Just(400u16), Just(403), Just(500), Just(503), Just(595),
                    Just(596), 200u16..600],
                desc in prop_oneof![
                    "[ -~]{0,60}",
                    ("[a-z/._-]{1,30}", prop_oneof![
                        Just("No such file or directory"),
                        Just("Permission denied"),
                        Just("Is a directory"),
                    ])
                        .prop_map(|(path, errno)| {
                            format!("failed to open file '/{path}' (mode: 'r'): {errno}")
                        }),
                ],
                agent in any::<bool>(),
            ) {
                let message = if agent { format!("Agent error: {desc}\n") } else { desc.clone() };
                let error = Error::http("GET", "/x", status, true, message, BTreeMap::new());
                let _ = (error.kind(), error.auth_failure(), error.known_refusal());
                prop_assert_eq!(error.node_unreachable(), status == 595 || status == 596);
                let judged = error.agent_failure();
                if status != 500 {
                    prop_assert_eq!(judged, None);
                } else if agent {
                    let missing = desc.starts_with("failed to open file '")
                        && desc.trim_end().ends_with("): No such file or directory");
                    prop_assert_eq!(
                        judged,
                        Some(if missing {
                            AgentFailure::FileMissing
                        } else {
                            AgentFailure::Refused
                        })
                    );
                }
            }
        }
    }
}
