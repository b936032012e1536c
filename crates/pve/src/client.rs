//! The HTTP client: endpoint, token, TLS trust, and the one request path every typed call
//! goes through (envelope, error classification, redaction, the per-call debug line).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use tokio::sync::MutexGuard;

use crate::error::{Error, Result, Scrubber};
use crate::pacing::{TaskTimes, TaskWait};
use crate::retry::current_attempt;
use crate::task_board::TaskBoards;
use crate::wire::{Envelope, ErrorBody, Form};

/// An API token `USER@REALM!TOKENID=SECRET`. `Debug` and `Display` never show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    id: String,
    secret: String,
}

impl ApiToken {
    /// Parses `USER@REALM!TOKENID=SECRET`, splitting on the last `=` as PVE does.
    pub fn parse(text: &str) -> Result<ApiToken> {
        let text = text.trim();
        let malformed = || Error::config("API token must look like USER@REALM!TOKENID=SECRET");
        let (id, secret) = text.rsplit_once('=').ok_or_else(malformed)?;
        let (user, token_name) = id.split_once('!').ok_or_else(malformed)?;
        let (user_name, realm) = user.split_once('@').ok_or_else(malformed)?;
        if user_name.is_empty() || realm.is_empty() || token_name.is_empty() || secret.is_empty() {
            return Err(malformed());
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(malformed());
        }
        Ok(ApiToken {
            id: id.to_owned(),
            secret: secret.to_owned(),
        })
    }

    /// The token id `USER@REALM!TOKENID` (not secret).
    pub fn id(&self) -> &str {
        &self.id
    }

    fn header_value(&self) -> String {
        format!("PVEAPIToken={}={}", self.id, self.secret)
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiToken")
            .field("id", &self.id)
            .field("secret", &crate::error::REDACTED)
            .finish()
    }
}

impl fmt::Display for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<redacted>", self.id)
    }
}

/// Which server certificates to trust.
#[derive(Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// The platform's trust store (via rustls-platform-verifier).
    SystemRoots,
    /// Only the given PEM CA certificate(s), e.g. PVE's `pve-root-ca.pem`.
    CaPem(String),
    /// No verification at all. Only when the user explicitly asked for `insecure`.
    Insecure,
}

impl fmt::Debug for TlsTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsTrust::SystemRoots => f.write_str("SystemRoots"),
            TlsTrust::CaPem(pem) => write!(f, "CaPem({} bytes)", pem.len()),
            TlsTrust::Insecure => f.write_str("Insecure"),
        }
    }
}

/// How long pveproxy keeps an idle keep-alive connection: pve-http-server
/// `src/PVE/APIServer/AnyEvent.pm` (5c9e4ea) `new` sets `$self->{timeout} = 5` when the
/// daemon gives none, and pve-manager `PVE/Service/pveproxy.pm` (14a22df3) gives none (its
/// `server_config` sets `keep_alive => 100`, `max_conn`, `max_requests`, no `timeout`);
/// `accept_connections` arms each connection's handle with it and `response` re-arms it
/// after every answer. A request sent as it fires meets a closed connection.
pub const PVEPROXY_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The client's own idle limit: a second below pveproxy's, so a connection the pool hands
/// out has at least that long before pveproxy would close it (a request's first bytes
/// reach it well within that).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Everything needed to build a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `https://host:8006` (a trailing `/api2/json` is accepted and ignored).
    pub endpoint: String,
    /// The API token.
    pub token: ApiToken,
    /// Certificate trust.
    pub tls: TlsTrust,
    /// Whole-request timeout for ordinary calls.
    pub request_timeout: Duration,
    /// Whole-request timeout for uploads (they stream the file).
    pub upload_timeout: Duration,
    /// TCP+TLS connect timeout.
    pub connect_timeout: Duration,
    /// Idle pooled connections are dropped after this; must stay below pveproxy's 5 s
    /// keep-alive ([`PVEPROXY_IDLE_TIMEOUT`]) so we never send on a connection the server is
    /// closing (bpg#3082).
    pub pool_idle_timeout: Duration,
    /// How [`Client::wait_for_task`] polls.
    pub task_wait: TaskWait,
    /// Once PVE refused the token (HTTP 401), fail every later request at once without
    /// sending it ([`Error::refused_earlier`]), and send requests one at a time until the
    /// first one came back. pveproxy delays each refusal by 3 s and logs it
    /// (pve-http-server `AnyEvent.pm` `handle_request`; pve-manager `HTTPServer.pm`
    /// `auth_handler`), so a refused token then costs one request and one wait, not one per
    /// caller. For a client that lives one run (the provider: one Terraform command); off
    /// by default, since a token can be enabled again.
    pub token_refusal_is_final: bool,
}

impl ClientConfig {
    /// Defaults: 30 s per request, 10 min per upload, 10 s connect, 4 s idle pool.
    pub fn new(endpoint: impl Into<String>, token: ApiToken, tls: TlsTrust) -> ClientConfig {
        ClientConfig {
            endpoint: endpoint.into(),
            token,
            tls,
            request_timeout: Duration::from_secs(30),
            upload_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            pool_idle_timeout: POOL_IDLE_TIMEOUT,
            task_wait: TaskWait::default(),
            token_refusal_is_final: false,
        }
    }
}

/// What a client with [`ClientConfig::token_refusal_is_final`] knows of its token.
#[derive(Default)]
struct TokenRefusal {
    /// Set once any request came back (answered or not): until then requests take turns.
    settled: AtomicBool,
    turn: tokio::sync::Mutex<()>,
    /// The first refusal.
    refused: OnceLock<Error>,
}

impl TokenRefusal {
    /// Waits for a turn while no request came back yet (the turn is held until this one
    /// does), or fails at once when the token was refused already.
    async fn admit(&self, method: &str, path: &str) -> Result<Option<MutexGuard<'_, ()>>> {
        let turn = if self.settled.load(Ordering::Acquire) {
            None
        } else {
            let guard = self.turn.lock().await;
            (!self.settled.load(Ordering::Acquire)).then_some(guard)
        };
        match self.refused.get() {
            Some(first) => Err(Error::not_sent_after_refusal(method, path, first)),
            None => Ok(turn),
        }
    }

    fn settle<T>(&self, outcome: &Result<T>) {
        if let Err(error) = outcome
            && error.auth_failure() == Some(crate::AuthFailure::Credentials)
        {
            let _ = self.refused.set(error.clone());
        }
        self.settled.store(true, Ordering::Release);
    }
}

struct Inner {
    http: reqwest::Client,
    /// `https://host:port/api2/json`, no trailing slash.
    base: String,
    /// `host:port`, for messages about a connection that failed.
    server: String,
    auth: HeaderValue,
    scrubber: Scrubber,
    config: ClientConfig,
    task_times: TaskTimes,
    task_boards: TaskBoards,
    token_refusal: TokenRefusal,
}

/// A Proxmox VE API client. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .field("token", &self.inner.config.token)
            .field("tls", &self.inner.config.tls)
            .finish()
    }
}

/// The body of a request.
pub(crate) enum Body {
    None,
    Form(Form),
    Multipart(reqwest::multipart::Form),
}

impl Client {
    /// Builds a client. Fails on a malformed endpoint or CA certificate.
    pub fn new(config: ClientConfig) -> Result<Client> {
        let endpoint = config.endpoint.trim().trim_end_matches('/');
        let endpoint = endpoint.strip_suffix("/api2/json").unwrap_or(endpoint);
        let url = url::Url::parse(endpoint)
            .map_err(|e| Error::config(format!("invalid endpoint {endpoint:?}: {e}")))?;
        if url.scheme() != "https" {
            // The token travels in a header on every request; never send it in clear.
            return Err(Error::config(format!(
                "endpoint must use https, got {:?}",
                url.scheme()
            )));
        }
        if url.host_str().is_none() || url.query().is_some() {
            return Err(Error::config(format!("invalid endpoint {endpoint:?}")));
        }
        let mut builder = reqwest::Client::builder()
            .http1_only()
            .pool_idle_timeout(config.pool_idle_timeout)
            .timeout(config.request_timeout)
            .connect_timeout(config.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!(
                "terraform-provider-proxmox/",
                env!("CARGO_PKG_VERSION")
            ));
        builder = match &config.tls {
            TlsTrust::SystemRoots => builder,
            TlsTrust::CaPem(pem) => {
                let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                    .map_err(|e| Error::config(format!("invalid CA certificate PEM: {e}")))?;
                if certs.is_empty() {
                    return Err(Error::config("CA certificate PEM holds no certificate"));
                }
                builder.tls_certs_only(certs)
            }
            TlsTrust::Insecure => builder.tls_danger_accept_invalid_certs(true),
        };
        let http = builder
            .build()
            .map_err(|e| Error::config(format!("cannot build HTTP client: {e}")))?;
        let header = config.token.header_value();
        let mut auth = HeaderValue::from_str(&header)
            .map_err(|_| Error::config("API token contains characters not allowed in a header"))?;
        auth.set_sensitive(true);
        let scrubber = Scrubber::new(&[&header, &config.token.secret]);
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base: format!("{}/api2/json", url.as_str().trim_end_matches('/')),
                server: format!(
                    "{}:{}",
                    url.host_str().unwrap_or_default(),
                    url.port_or_known_default().unwrap_or(443)
                ),
                auth,
                scrubber,
                config,
                task_times: TaskTimes::default(),
                task_boards: TaskBoards::default(),
                token_refusal: TokenRefusal::default(),
            }),
        })
    }

    /// The configuration the client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// How long tasks and other waits took so far, shared by every wait of this client.
    pub fn task_times(&self) -> &TaskTimes {
        &self.inner.task_times
    }

    /// Each node's task listing, shared by the waits on that node.
    pub(crate) fn task_boards(&self) -> &TaskBoards {
        &self.inner.task_boards
    }

    /// Removes the token from a text (for callers that log server-provided texts themselves).
    pub fn scrub(&self, text: &str) -> String {
        self.inner.scrubber.scrub(text)
    }

    /// GET an API path below `/api2/json` and return `data`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str, query: &Form) -> Result<T> {
        self.call(Method::GET, path, query, Body::None).await
    }

    /// POST form fields to an API path and return `data`.
    pub async fn post<T: DeserializeOwned>(&self, path: &str, form: &Form) -> Result<T> {
        self.call(Method::POST, path, &Form::new(), Body::Form(form.clone()))
            .await
    }

    /// PUT form fields to an API path and return `data`.
    pub async fn put<T: DeserializeOwned>(&self, path: &str, form: &Form) -> Result<T> {
        self.call(Method::PUT, path, &Form::new(), Body::Form(form.clone()))
            .await
    }

    /// DELETE an API path with parameters in the query string (PVE rejects DELETE bodies).
    pub async fn delete<T: DeserializeOwned>(&self, path: &str, query: &Form) -> Result<T> {
        self.call(Method::DELETE, path, query, Body::None).await
    }

    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &Form,
        body: Body,
    ) -> Result<T> {
        Ok(self.call_envelope(method, path, query, body).await?.data)
    }

    /// One API call: one HTTP request, one debug line, errors classified and scrubbed; with
    /// [`ClientConfig::token_refusal_is_final`], none after PVE refused the token.
    pub(crate) async fn call_envelope<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &Form,
        body: Body,
    ) -> Result<Envelope<T>> {
        if !self.inner.config.token_refusal_is_final {
            return self.send(method, path, query, body).await;
        }
        let refusal = &self.inner.token_refusal;
        let turn = refusal
            .admit(method.as_str(), path)
            .await
            .inspect_err(|_| {
                tracing::debug!(
                    method = method.as_str(),
                    path,
                    status = "not-sent",
                    "PVE API call: the token was refused earlier"
                );
            })?;
        let outcome = self.send(method, path, query, body).await;
        refusal.settle(&outcome);
        drop(turn);
        outcome
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &Form,
        body: Body,
    ) -> Result<Envelope<T>> {
        let inner = &self.inner;
        let mut url = format!("{}{}", inner.base, path);
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.encode());
        }
        let mut req = inner
            .http
            .request(method.clone(), &url)
            .header(AUTHORIZATION, inner.auth.clone());
        req = match body {
            Body::None => req,
            Body::Form(form) => req
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form.encode()),
            Body::Multipart(form) => req.multipart(form).timeout(inner.config.upload_timeout),
        };
        let attempt = current_attempt();
        let started = Instant::now();
        let outcome = Self::exchange(req).await;
        let elapsed = started.elapsed();
        let method_str = method.as_str();
        match outcome {
            Err(e) => {
                tracing::debug!(
                    method = method_str,
                    path,
                    status = "transport-error",
                    duration_ms = elapsed.as_millis() as u64,
                    attempt,
                    "PVE API call"
                );
                Err(Error::transport(
                    method_str,
                    path,
                    e.is_connect(),
                    e.is_timeout(),
                    inner.scrubber.scrub(&error_chain(&e)),
                )
                .with_server(inner.server.clone()))
            }
            Ok((status, reason, bytes)) => {
                tracing::debug!(
                    method = method_str,
                    path,
                    status = status.as_u16(),
                    duration_ms = elapsed.as_millis() as u64,
                    attempt,
                    "PVE API call"
                );
                if status.is_success() {
                    serde_json::from_slice::<Envelope<T>>(&bytes).map_err(|e| {
                        // serde quotes offending values, which may be echoed server text.
                        let detail = inner.scrubber.scrub(&e.to_string());
                        Error::decode(
                            method_str,
                            path,
                            format!("cannot decode response: {detail}"),
                        )
                    })
                } else {
                    Err(self.http_error(method_str, path, status, reason, &bytes))
                }
            }
        }
    }

    async fn exchange(
        req: reqwest::RequestBuilder,
    ) -> std::result::Result<(StatusCode, Option<String>, bytes::Bytes), reqwest::Error> {
        let resp = req.send().await?;
        let status = resp.status();
        // PVE puts the error text (first line) in the status line; 401/595/596 have no body.
        let reason = resp
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
        let bytes = resp.bytes().await?;
        Ok((status, reason, bytes))
    }

    fn http_error(
        &self,
        method: &str,
        path: &str,
        status: StatusCode,
        reason: Option<String>,
        bytes: &[u8],
    ) -> Error {
        let scrub = |t: &str| self.inner.scrubber.scrub(t);
        let parsed: Option<ErrorBody> = serde_json::from_slice(bytes).ok();
        let from_handler = parsed.is_some();
        let body = parsed.unwrap_or_default();
        let text = String::from_utf8_lossy(bytes);
        let message = body
            .message
            .filter(|m| !m.trim().is_empty())
            .or_else(|| (!from_handler && !text.trim().is_empty()).then(|| truncate(&text, 2000)))
            .or(reason)
            .or_else(|| status.canonical_reason().map(str::to_owned))
            .unwrap_or_default();
        let param_errors = body
            .errors
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                (scrub(&k), scrub(v.trim_end()))
            })
            .collect();
        Error::http(
            method,
            path,
            status.as_u16(),
            from_handler,
            scrub(message.trim_end()),
            param_errors,
        )
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// reqwest's top-level message is terse ("error sending request"); the cause says why.
fn error_chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Percent-encodes one path segment (keeps `:@!$&'()*+,;=` which PVE UPIDs and volids use).
pub(crate) fn seg(text: &str) -> String {
    encode_path(text, false)
}

/// Like [`seg`] but keeps `/`, for `{volume}` which PVE matches with slashes in it.
pub(crate) fn seg_with_slash(text: &str) -> String {
    encode_path(text, true)
}

fn encode_path(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || b"-._~:@!$&'()*+,;=".contains(&b)
            || (keep_slash && b == b'/');
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "terraform@pve!prov=1b6e1f0c-7c1a-4b1e-9d55-0a4c3c2e8f11";

    #[test]
    fn token_parses_on_last_equals_and_hides_secret() {
        let t = ApiToken::parse(TOKEN).unwrap();
        assert_eq!(t.id(), "terraform@pve!prov");
        assert!(!format!("{t:?}").contains("1b6e1f0c"));
        assert!(!t.to_string().contains("1b6e1f0c"));
        let weird = ApiToken::parse("a@b!c=d=secret").unwrap();
        assert_eq!(weird.id(), "a@b!c=d");
        for bad in [
            "",
            "root@pam",
            "root@pam!tf",
            "root!tf=x",
            "@pam!tf=x",
            "root@pam!=x",
            "root@pam!tf=",
            "a@b!c=d e",
        ] {
            assert!(ApiToken::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn client_debug_and_errors_hide_secret() {
        let token = ApiToken::parse(TOKEN).unwrap();
        let client = Client::new(ClientConfig::new(
            "https://pve1.example:8006/api2/json/",
            token,
            TlsTrust::Insecure,
        ))
        .unwrap();
        let dbg = format!("{client:?}");
        assert!(!dbg.contains("1b6e1f0c"), "{dbg}");
        assert!(dbg.contains("https://pve1.example:8006/api2/json"));
        let e = client.http_error(
            "GET",
            "/version",
            StatusCode::UNAUTHORIZED,
            Some(format!("invalid token value! PVEAPIToken={TOKEN}")),
            b"",
        );
        assert_eq!(e.kind(), crate::ErrorKind::Auth);
        assert!(!e.to_string().contains("1b6e1f0c"), "{e}");
        assert!(!format!("{e:?}").contains("1b6e1f0c"));
    }

    #[test]
    fn defaults_close_idle_connections_before_pveproxy_does() {
        let config = ClientConfig::new(
            "https://h:8006",
            ApiToken::parse(TOKEN).unwrap(),
            TlsTrust::SystemRoots,
        );
        // pveproxy drops idle keep-alive connections after 5 s (see `PVEPROXY_IDLE_TIMEOUT`
        // for the source); the pool lets go of them a second earlier.
        assert_eq!(PVEPROXY_IDLE_TIMEOUT, Duration::from_secs(5));
        assert_eq!(config.pool_idle_timeout, POOL_IDLE_TIMEOUT);
        assert!(
            PVEPROXY_IDLE_TIMEOUT - config.pool_idle_timeout >= Duration::from_secs(1),
            "a margin for the request's way to pveproxy"
        );
        assert!(config.request_timeout > Duration::ZERO);
        assert!(!format!("{config:?}").contains("1b6e1f0c"));
    }

    #[test]
    fn rejects_plain_http_and_bad_ca() {
        let token = ApiToken::parse(TOKEN).unwrap();
        let http = Client::new(ClientConfig::new(
            "http://h:8006",
            token.clone(),
            TlsTrust::SystemRoots,
        ));
        assert!(http.is_err());
        let bad_ca = Client::new(ClientConfig::new(
            "https://h:8006",
            token,
            TlsTrust::CaPem("not a pem".into()),
        ));
        assert!(bad_ca.is_err());
    }

    #[test]
    fn error_body_parsing_and_status_line_fallback() {
        let client = Client::new(ClientConfig::new(
            "https://h:8006",
            ApiToken::parse(TOKEN).unwrap(),
            TlsTrust::Insecure,
        ))
        .unwrap();
        let e = client.http_error(
            "POST",
            "/nodes/pve1/qemu/100/config",
            StatusCode::BAD_REQUEST,
            Some("Parameter verification failed.".into()),
            concat!(
                r#"{"data":null,"#,
                r#""errors":{"ide2":"explicit 'media=cdrom' is required for iso images"},"#,
                r#""message":"Parameter verification failed.\n"}"#
            )
            .as_bytes(),
        );
        assert_eq!(e.kind(), crate::ErrorKind::Invalid);
        assert_eq!(e.message(), "Parameter verification failed.");
        assert_eq!(
            e.param_errors().get("ide2").map(String::as_str),
            Some("explicit 'media=cdrom' is required for iso images")
        );
        let e = client.http_error(
            "GET",
            "/nodes/pve2/status",
            StatusCode::from_u16(595).unwrap(),
            Some("No route to host".into()),
            b"",
        );
        assert_eq!(e.kind(), crate::ErrorKind::Transient);
        assert_eq!(e.message(), "No route to host");
        let plain = client.http_error(
            "POST",
            "/nodes/pve1/storage/s/upload",
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            b"proxy loop detected",
        );
        assert_eq!(plain.message(), "proxy loop detected");
        assert!(plain.outcome_unknown());
    }

    #[test]
    fn path_segments() {
        assert_eq!(
            seg("UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:terraform@pve!prov:"),
            "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmclone:9000:terraform@pve!prov:"
        );
        assert_eq!(seg("a/b c"), "a%2Fb%20c");
        assert_eq!(seg_with_slash("iso/edge 0.iso"), "iso/edge%200.iso");
    }
}
