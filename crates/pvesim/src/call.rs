//! What a handler receives and answers: the validated call, its reply and PVE-shaped errors.
//! Every handler and the server share these, so they sit below both.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::time::Instant;

/// An error answer as PVE renders it.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    /// JSON `message` (keeps PVE's trailing newline); the status line uses its first line.
    pub message: String,
    pub errors: Option<BTreeMap<String, String>>,
    /// 401/595 have no body at all.
    pub empty_body: bool,
    /// Answer only after this long (the agent's ping timeout, PVE's auth delay).
    pub delay: Option<Duration>,
    /// The VM's config flock is held: the dispatcher retries until `lock_config`'s
    /// timeout, then answers PVE's lock timeout error.
    pub flock_busy: Option<u32>,
    /// The answer is still pending then: the dispatcher waits until that time and runs the
    /// handler once more (a ping queued for an agent that starts within the ping's timeout).
    pub pending_until: Option<Instant>,
}

impl ApiError {
    /// A plain `die "text\n"` in a handler: HTTP 500.
    pub fn die(message: impl Into<String>) -> ApiError {
        let mut message = message.into();
        if !message.ends_with('\n') {
            message.push('\n');
        }
        ApiError {
            status: 500,
            message,
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
            pending_until: None,
        }
    }

    pub fn params(errors: BTreeMap<String, String>) -> ApiError {
        ApiError {
            status: 400,
            message: "Parameter verification failed.\n".into(),
            errors: Some(errors),
            empty_body: false,
            delay: None,
            flock_busy: None,
            pending_until: None,
        }
    }

    pub fn param(key: &str, message: impl Into<String>) -> ApiError {
        ApiError::params(BTreeMap::from([(key.to_string(), message.into())]))
    }

    pub fn perm(what: impl Into<String>) -> ApiError {
        ApiError {
            status: 403,
            message: format!("Permission check failed ({})\n", what.into()),
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
            pending_until: None,
        }
    }

    /// An `or` permission check that failed names neither path nor privilege
    /// (pve-access-control `RPCEnvironment.pm` `exec_api2_perm_check`).
    pub fn perm_unnamed() -> ApiError {
        ApiError {
            status: 403,
            message: "Permission check failed\n".into(),
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
            pending_until: None,
        }
    }

    pub fn not_implemented(method: &str, path: &str) -> ApiError {
        ApiError {
            status: 501,
            message: format!("Method '{method} {path}' not implemented"),
            errors: None,
            empty_body: false,
            delay: None,
            flock_busy: None,
            pending_until: None,
        }
    }

    pub fn bare(status: u16, reason: &str) -> ApiError {
        ApiError {
            status,
            message: reason.to_string(),
            errors: None,
            empty_body: true,
            delay: None,
            flock_busy: None,
            pending_until: None,
        }
    }

    pub fn flock_busy(vmid: u32) -> ApiError {
        let mut error = ApiError::die(crate::tasks::lock_timeout_message(vmid));
        error.flock_busy = Some(vmid);
        error
    }

    pub fn after(mut self, delay: Duration) -> ApiError {
        self.delay = Some(delay);
        self
    }

    pub fn pending_until(mut self, at: Instant) -> ApiError {
        self.pending_until = Some(at);
        self
    }
}

/// What a handler asks the dispatcher to wait for before answering (`background_delay` and
/// storage delete `delay`).
#[derive(Debug, Clone)]
pub struct TaskWait {
    pub upid: String,
    pub max: Duration,
    /// Error text prefix when the task failed within the delay (`None` = answer the UPID).
    pub failure_prefix: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub data: Value,
    pub total: Option<u64>,
    pub wait: Option<TaskWait>,
}

impl Reply {
    pub fn data(data: Value) -> Reply {
        Reply {
            data,
            total: None,
            wait: None,
        }
    }
}

pub type ApiResult = Result<Reply, ApiError>;

/// The user pve-sim's own calls run as.
pub const INTERNAL_USER: &str = "root@pam";

/// One authenticated, validated request.
#[derive(Debug)]
pub struct Call<'a> {
    pub method: &'a str,
    pub template: &'a str,
    pub path: &'a BTreeMap<String, String>,
    pub params: &'a Map<String, Value>,
    /// `user@realm` of the token.
    pub user: &'a str,
    /// Token name (the part after `!`).
    pub token_name: &'a str,
    pub now: Instant,
    /// The file of an upload (`POST .../upload`), read from its multipart body.
    pub upload: Option<&'a Bytes>,
}

impl<'a> Call<'a> {
    /// A `POST` pve-sim makes itself ([`Call::is_internal`]): the HA stack's LRM, a booting
    /// node's `startall`, an operator's command through the admin API.
    pub fn internal(
        template: &'a str,
        path: &'a BTreeMap<String, String>,
        params: &'a Map<String, Value>,
    ) -> Self {
        Call {
            method: "POST",
            template,
            path,
            params,
            user: INTERNAL_USER,
            token_name: "",
            now: Instant::now(),
            upload: None,
        }
    }

    pub fn path_str(&self, key: &str) -> &str {
        self.path.get(key).map(String::as_str).unwrap_or_default()
    }

    pub fn node(&self) -> &str {
        self.path_str("node")
    }

    pub fn vmid(&self) -> u32 {
        self.path_str("vmid").parse().unwrap_or(0)
    }

    pub fn str(&self, key: &str) -> Option<String> {
        self.params.get(key).and_then(value_as_string)
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.params.get(key).and_then(value_as_bool)
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        self.params.get(key).and_then(value_as_int)
    }

    pub fn token_user(&self) -> String {
        if self.token_name.is_empty() {
            return self.user.to_string();
        }
        format!("{}!{}", self.user, self.token_name)
    }

    /// A call pve-sim makes itself, as `root@pam` without a token: the HA stack's LRM and
    /// a booting node's `startall` (PVE's rpcenv of type `ha`/`priv`). Requests over HTTP
    /// always carry the token.
    pub fn is_internal(&self) -> bool {
        self.user == INTERNAL_USER && self.token_name.is_empty()
    }
}

/// A parameter as the string PVE would store (booleans as `0`/`1`).
pub fn value_as_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(if *b { "1" } else { "0" }.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

pub fn value_as_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_i64().map(|n| n != 0),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Some(true),
            "0" | "false" | "no" | "off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

pub fn value_as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}
