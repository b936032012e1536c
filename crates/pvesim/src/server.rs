//! HTTPS transport, authentication, request parsing, faults, journal and dispatch.

mod multipart;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::Request;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::call::{ApiError, Call, Reply};
use crate::cost::connection::{Activity, Connection};
use crate::cost::dispatch::route_dispatch;
use crate::cost::visit::Served;
use crate::http::{HttpResponse, MAX_BODY, error_response, plain_error, reply_response};
use crate::inspect::JournalEntry;
use crate::shared::Shared;
use crate::world::World;
use multipart::{multipart_boundary, parse_multipart};

/// pveproxy closes idle keep-alive connections after 5 s.
const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(5);
/// Uploads are streamed to disk by PVE; we keep them in memory, so cap them.
const MAX_UPLOAD: usize = 1 << 30;

/// The service error that makes hyper drop the connection without an answer.
#[derive(Debug)]
pub struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection reset by fault injection")
    }
}

impl std::error::Error for DropConnection {}

pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let acceptor = acceptor.clone();
                let shared = Arc::clone(&shared);
                connections.spawn(async move {
                    serve_connection(stream, peer, acceptor, shared).await;
                });
            }
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
) {
    let _ = stream.set_nodelay(true);
    let tls = match acceptor.accept(stream).await {
        Ok(tls) => tls,
        Err(err) => {
            tracing::debug!(%peer, %err, "TLS handshake failed");
            return;
        }
    };
    let result = match shared.cost.as_ref().map(|cost| cost.connection()) {
        Some(connection) => serve_costed(tls, shared, connection).await,
        None => {
            let service =
                hyper::service::service_fn(move |req| handle(Arc::clone(&shared), None, req));
            hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                // Armed whenever hyper waits for the next request head: an idle keep-alive
                // connection is closed after this, as pveproxy does.
                .header_read_timeout(KEEP_ALIVE_IDLE)
                .keep_alive(true)
                .serve_connection(TokioIo::new(tls), service)
                .await
        }
    };
    if let Err(err) = result {
        tracing::debug!(%peer, %err, "connection ended");
    }
}

/// A connection under the cost profile: pveproxy's inactivity timeout instead of hyper's
/// header timeout, and its way of closing (TLS close_notify, then the socket shut for
/// writing: hyper's graceful shutdown of an idle connection does both).
async fn serve_costed(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    shared: Arc<Shared>,
    connection: Arc<Connection>,
) -> hyper::Result<()> {
    let io = TokioIo::new(Activity::new(tls, Arc::clone(&connection)));
    let served = Arc::clone(&connection);
    let service = hyper::service::service_fn(move |req| {
        handle(Arc::clone(&shared), Some(Arc::clone(&served)), req)
    });
    let serving = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(serving);
    tokio::select! {
        result = serving.as_mut() => result,
        () = connection.idle_expired() => {
            serving.as_mut().graceful_shutdown();
            serving.await
        }
    }
}

/// Token auth outcome.
enum Auth {
    Ok,
    NoTicket,
    Failed,
}

fn authenticate(shared: &Shared, req: &Request<Incoming>) -> Auth {
    let cookie_ticket = req
        .headers()
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|c| c.split(';').any(|p| p.trim().starts_with("PVEAuthCookie=")));
    if cookie_ticket {
        // A ticket takes precedence over a token, and pve-sim issues no tickets.
        return Auth::Failed;
    }
    let Some(header) = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    else {
        return Auth::NoTicket;
    };
    let Some(value) = extract_token(header) else {
        return Auth::NoTicket;
    };
    match value.rsplit_once('=') {
        Some((id, secret)) if id == shared.token_id && secret == shared.token_secret => Auth::Ok,
        _ => Auth::Failed,
    }
}

/// `(?:^|\s)PVEAPIToken(?:=| )([^;]*)`, then URI-unescaped.
fn extract_token(header: &str) -> Option<String> {
    let mut search = 0;
    while let Some(found) = header[search..].find("PVEAPIToken") {
        let at = search + found;
        let preceded_ok = at == 0 || header[..at].ends_with(char::is_whitespace);
        let rest = &header[at + "PVEAPIToken".len()..];
        if preceded_ok
            && let Some(value) = rest.strip_prefix('=').or_else(|| rest.strip_prefix(' '))
        {
            let value = value.split(';').next().unwrap_or_default();
            return Some(
                url::form_urlencoded::parse(format!("v={}", value.replace('+', "%2B")).as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default(),
            );
        }
        search = at + 1;
    }
    None
}

/// `METHOD /path?k=v&…` with the query decoded, as a hold's `counting` text matches it.
fn request_line(method: &str, api_path: &str, query: Option<&str>) -> String {
    let pairs = query_params(query);
    if pairs.is_empty() {
        return format!("{method} {api_path}");
    }
    let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{method} {api_path}?{}", query.join("&"))
}

fn query_params(query: Option<&str>) -> Vec<(String, String)> {
    query
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn header_str<'r>(req: &'r Request<Incoming>, name: &str) -> Option<&'r str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

tokio::task_local! {
    /// When the request being handled arrived, for its journal entry.
    static RECEIVED: Instant;
}

async fn handle(
    shared: Arc<Shared>,
    connection: Option<Arc<Connection>>,
    req: Request<Incoming>,
) -> Result<HttpResponse, DropConnection> {
    RECEIVED
        .scope(Instant::now(), handle_received(shared, connection, req))
        .await
}

async fn handle_received(
    shared: Arc<Shared>,
    connection: Option<Arc<Connection>>,
    req: Request<Incoming>,
) -> Result<HttpResponse, DropConnection> {
    let path = req.uri().path().to_string();
    if let Some(admin_path) = path.strip_prefix("/_sim/") {
        let admin_path = admin_path.to_string();
        return Ok(crate::admin::handle(&shared, req, &admin_path).await);
    }
    let method = req.method().as_str().to_string();
    let Some(api_path) = path.strip_prefix("/api2/json").map(str::to_string) else {
        let mut response = plain_error(501, "no such uri");
        set_connection(&mut response, false);
        return Ok(response);
    };
    // Open until the answer is handed back: pveproxy's idle timeout is off meanwhile.
    let in_flight = connection.as_ref().map(|c| c.begin_request());
    let last_request = in_flight.as_ref().is_some_and(|(_, last)| *last);

    let gate = shared
        .hold
        .admit(|| request_line(&method, &api_path, req.uri().query()));
    let answer_held = match gate {
        crate::hold::Gate::Pass => None,
        crate::hold::Gate::HoldBefore(waiter) => {
            match shared.hold.wait(waiter, false).await {
                crate::hold::Released::Dropped => return Err(DropConnection),
                // Resumed: handled as if it arrived now.
                crate::hold::Released::Resumed => None,
            }
        }
        crate::hold::Gate::HoldAfter(waiter) => Some(waiter),
    };
    let (latency, fault) = {
        let mut world = shared.lock();
        (
            Duration::from_millis(world.faults.latency_ms),
            match_http_fault(&mut world, &method, &api_path),
        )
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match fault {
        Some(FaultAction::Reset) => {
            journal(&shared, &method, &api_path, Map::new(), 0);
            return Err(DropConnection);
        }
        Some(FaultAction::LoseAnswer) => {
            // Journalled with the status it would have had.
            handle_api(&shared, connection.as_ref(), req, &method, &api_path).await;
            return Err(DropConnection);
        }
        Some(FaultAction::Status(status)) => {
            journal(&shared, &method, &api_path, Map::new(), status);
            let error = if status == 595 || status == 596 {
                ApiError::bare(
                    status,
                    if status == 595 {
                        "Connection refused"
                    } else {
                        "Broken pipe"
                    },
                )
            } else {
                ApiError {
                    status,
                    message: format!("injected fault ({status})\n"),
                    errors: None,
                    empty_body: false,
                    delay: None,
                    flock_busy: None,
                    pending_until: None,
                }
            };
            let mut response = error_response(&error);
            set_connection(&mut response, false);
            return Ok(response);
        }
        None => {}
    }

    let is_upload = method == "POST" && is_upload_path(&api_path);
    let client_closes =
        header_str(&req, "connection").is_some_and(|c| c.to_ascii_lowercase().contains("close"));
    let mut response = handle_api(&shared, connection.as_ref(), req, &method, &api_path).await;
    if let Some(waiter) = answer_held
        && shared.hold.wait(waiter, true).await == crate::hold::Released::Dropped
    {
        return Err(DropConnection);
    }
    set_connection(&mut response, is_upload || client_closes || last_request);
    Ok(response)
}

/// `POST /nodes/{node}/storage/{storage}/upload`.
fn is_upload_path(api_path: &str) -> bool {
    let segments: Vec<&str> = api_path.trim_matches('/').split('/').collect();
    matches!(segments.as_slice(), ["nodes", _, "storage", _, "upload"])
}

/// pveproxy ends the connection after every answer >= 400, after an upload and after the
/// connection's last request (cost profile), and says so (`Connection: close`); otherwise it
/// keeps it (`Connection: Keep-Alive`) (pve-http-server `APIServer/AnyEvent.pm` `response`,
/// `authenticate_and_handle_request`).
/// hyper closes the connection once a response carrying `Connection: close` is written.
fn set_connection(response: &mut HttpResponse, closing: bool) {
    let close = closing || response.status().as_u16() >= 400;
    let value = if close { "close" } else { "Keep-Alive" };
    response
        .headers_mut()
        .insert(hyper::header::CONNECTION, HeaderValue::from_static(value));
}

enum FaultAction {
    Reset,
    LoseAnswer,
    Status(u16),
}

fn match_http_fault(world: &mut World, method: &str, api_path: &str) -> Option<FaultAction> {
    for (index, fault) in world.faults.http.iter().enumerate() {
        if fault
            .method
            .as_ref()
            .is_some_and(|m| !m.eq_ignore_ascii_case(method))
        {
            continue;
        }
        let matches = regex::Regex::new(&fault.path_regex).is_ok_and(|re| re.is_match(api_path));
        if !matches {
            continue;
        }
        let hits = world.http_fault_hits.get(index).copied().unwrap_or(0);
        if fault.count.is_some_and(|count| hits >= count) {
            continue;
        }
        if fastrand::f64() >= fault.rate {
            continue;
        }
        if let Some(slot) = world.http_fault_hits.get_mut(index) {
            *slot += 1;
        }
        return Some(if fault.reset && fault.after_handling {
            FaultAction::LoseAnswer
        } else if fault.reset {
            FaultAction::Reset
        } else {
            FaultAction::Status(fault.status.unwrap_or(500))
        });
    }
    None
}

/// The journal keeps the most recent entries only.
const JOURNAL_CAPACITY: usize = 200_000;

const SECRET_PARAMS: &[&str] = &["cipassword", "password", "new-password", "token", "secret"];

fn journal(shared: &Shared, method: &str, path: &str, mut params: Map<String, Value>, status: u16) {
    for (key, value) in params.iter_mut() {
        if SECRET_PARAMS.contains(&key.as_str()) {
            *value = json!("<redacted>");
        }
    }
    let answered = Instant::now();
    let received = RECEIVED.try_with(|at| *at).unwrap_or(answered);
    let mut world = shared.lock();
    let received_ms = crate::world::ms_between(world.epoch, received);
    let answered_ms = crate::world::ms_between(world.epoch, answered);
    if world.journal.len() >= JOURNAL_CAPACITY {
        // Long-running simulators with pollers would otherwise grow without bound.
        world.journal.drain(..JOURNAL_CAPACITY / 10);
        world.journal_dropped += JOURNAL_CAPACITY / 10;
    }
    world.journal.push(JournalEntry {
        method: method.to_string(),
        path: path.to_string(),
        params,
        status,
        received_ms,
        answered_ms,
    });
}

async fn finish(
    shared: &Shared,
    method: &str,
    api_path: &str,
    params: Map<String, Value>,
    result: Result<Reply, ApiError>,
) -> HttpResponse {
    let status = match &result {
        Ok(_) => 200,
        Err(error) => error.status,
    };
    // Method, path and status only: parameters may carry secrets.
    tracing::debug!(method, path = api_path, status, "request");
    match result {
        Ok(reply) => {
            journal(shared, method, api_path, params, 200);
            reply_response(&reply)
        }
        Err(error) => {
            journal(shared, method, api_path, params, error.status);
            if let Some(delay) = error.delay {
                tokio::time::sleep(delay).await;
            }
            error_response(&error)
        }
    }
}

/// Why a request is answered before its handler runs.
enum Refusal {
    /// Answered as PVE's API answers an error, and journalled.
    Api(ApiError),
    /// Answered as is: pve-http-server fails these before the API layer.
    Plain(HttpResponse),
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Refusal {
        Refusal::Api(error)
    }
}

/// The parameters of a request, and the file of an upload.
type Params = (Map<String, Value>, Option<Bytes>);

async fn handle_api(
    shared: &Arc<Shared>,
    connection: Option<&Arc<Connection>>,
    req: Request<Incoming>,
    method: &str,
    api_path: &str,
) -> HttpResponse {
    match answer(shared, connection, req, method, api_path).await {
        Answer::Api(params, result) => finish(shared, method, api_path, params, result).await,
        Answer::Plain(response) => response,
    }
}

/// What a request is answered with.
enum Answer {
    /// The parameters (for the journal) and the handler's result or the refusal.
    Api(Map<String, Value>, Result<Reply, ApiError>),
    /// Answered as is (pve-http-server's own errors), already journalled.
    Plain(HttpResponse),
}

/// Admits, reads, validates and runs the request. Under the cost profile the request, once
/// read (pveproxy reads requests between the handlers it runs), waits for its worker, is
/// forwarded to the worker that runs it and keeps that one for its service time; the worker
/// is free before the answer's own delay (pveproxy delays a 401 on a timer).
async fn answer(
    shared: &Arc<Shared>,
    connection: Option<&Arc<Connection>>,
    req: Request<Incoming>,
    method: &str,
    api_path: &str,
) -> Answer {
    let route = match admit(shared, &req, method, api_path) {
        Ok(route) => route,
        Err(error) => return refuse(shared, connection, method, Map::new(), error).await,
    };
    let (params, upload) = match read_params(shared, req, method, api_path, &route).await {
        Ok(read) => read,
        Err(Refusal::Api(error)) => {
            return refuse(shared, connection, method, Map::new(), error).await;
        }
        Err(Refusal::Plain(response)) => return Answer::Plain(response),
    };
    let validated = match crate::schema::validate(&route, &params) {
        Ok(validated) => validated,
        Err(errors) => {
            let error = ApiError::params(errors);
            return refuse(shared, connection, method, params, error).await;
        }
    };
    let mut visit = match &shared.cost {
        Some(cost) => Some(cost.arrive(connection).await),
        None => None,
    };
    let upload = upload.as_ref();
    if let (Some(visit), Some(dispatch)) = (&mut visit, route_dispatch(method, route.template)) {
        let node = route.path_params.get("node").map(String::as_str);
        visit
            .forward(dispatch, node, upload.map_or(0, Bytes::len))
            .await;
    }
    let mut result = run_call(shared, method, &route, &validated, upload).await;
    if let Some(visit) = &visit {
        // A handler that waited before it failed keeps its worker meanwhile: the agent's
        // ping timeout (qemu-server `QemuServer/Agent.pm` `qga_check_running`) runs in the
        // pvedaemon worker that serves the request.
        let waited = match &mut result {
            Err(error) => error.delay.take(),
            Ok(_) => None,
        };
        visit
            .serve(Served::handled(method, route.template, &result))
            .await;
        if let Some(waited) = waited {
            tokio::time::sleep(waited).await;
        }
    }
    let result = match result {
        // `background_delay`: the worker waits for the task before it answers.
        Ok(reply) if reply.wait.is_some() => wait_for_task(shared, reply).await,
        other => other,
    };
    Answer::Api(params, result)
}

/// A request refused before its handler: under the cost profile, the entry worker's time.
async fn refuse(
    shared: &Arc<Shared>,
    connection: Option<&Arc<Connection>>,
    method: &str,
    params: Map<String, Value>,
    error: ApiError,
) -> Answer {
    if let Some(cost) = &shared.cost {
        cost.arrive(connection)
            .await
            .serve(Served::refused(method))
            .await;
    }
    Answer::Api(params, Err(error))
}

/// The handler's call for a validated request.
async fn run_call(
    shared: &Arc<Shared>,
    method: &str,
    route: &crate::schema::Route,
    params: &Map<String, Value>,
    upload: Option<&Bytes>,
) -> Result<Reply, ApiError> {
    let (user, token_name) = shared
        .token_id
        .split_once('!')
        .unwrap_or((&shared.token_id, ""));
    let call = Call {
        method,
        template: route.template,
        path: &route.path_params,
        params,
        user,
        token_name,
        now: Instant::now(),
        upload,
    };
    run_handler(shared, &call).await
}

/// Everything checked before the body is read, in pve-http-server's order: the token, the
/// request's shape, the route and the addressed node.
fn admit(
    shared: &Shared,
    req: &Request<Incoming>,
    method: &str,
    api_path: &str,
) -> Result<crate::schema::Route, ApiError> {
    authorise(shared, req)?;
    check_request_shape(req, method)?;
    let route = crate::schema::route(method, api_path)
        .map_err(|_| ApiError::not_implemented(method, api_path))?;
    if let Some(node) = route.path_params.get("node") {
        check_node(&shared.lock(), node)?;
    }
    Ok(route)
}

fn authorise(shared: &Shared, req: &Request<Incoming>) -> Result<(), ApiError> {
    let (auth_delay, revoked) = {
        let world = shared.lock();
        (
            Duration::from_millis(world.timings.auth_fail_delay_ms),
            world.faults.token_revoked,
        )
    };
    let auth_error = match authenticate(shared, req) {
        Auth::Ok if !revoked => None,
        Auth::Ok | Auth::Failed => Some("Authentication failed!"),
        Auth::NoTicket => Some("No ticket"),
    };
    match auth_error {
        Some(reason) => Err(ApiError::bare(401, reason).after(auth_delay)),
        None => Ok(()),
    }
}

/// The method, chunked bodies and bodies on `GET`/`DELETE`.
fn check_request_shape(req: &Request<Incoming>, method: &str) -> Result<(), ApiError> {
    if !matches!(method, "GET" | "POST" | "PUT" | "DELETE") {
        return Err(ApiError::bare(
            501,
            &format!("method '{method}' not available"),
        ));
    }
    if header_str(req, "transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"))
    {
        return Err(ApiError::bare(
            501,
            "chunked transfer encoding not supported",
        ));
    }
    if matches!(method, "GET" | "DELETE") && content_length(req) > 0 {
        return Err(ApiError::bare(
            501,
            &format!("Unexpected content for method '{method}'"),
        ));
    }
    Ok(())
}

fn content_length(req: &Request<Incoming>) -> usize {
    header_str(req, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The proxy resolves the node name, then needs the node up.
fn check_node(world: &World, node: &str) -> Result<(), ApiError> {
    if world.node(node).is_none() {
        Err(ApiError::die(format!(
            "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or \
                service not known"
        )))
    } else if !world.node_online(node) {
        Err(ApiError::bare(595, "No route to host"))
    } else {
        Ok(())
    }
}

/// The body's and the query's parameters; query parameters override body parameters.
async fn read_params(
    shared: &Shared,
    req: Request<Incoming>,
    method: &str,
    api_path: &str,
    route: &crate::schema::Route,
) -> Result<Params, Refusal> {
    let query = query_params(req.uri().query());
    let (mut params, upload) = if route.template == "/nodes/{node}/storage/{storage}/upload" {
        read_upload(shared, req, method, api_path, route, &query).await?
    } else if matches!(method, "POST" | "PUT") {
        (read_form(req).await?, None)
    } else {
        (Map::new(), None)
    };
    for (k, v) in query {
        params.insert(k, json!(v));
    }
    Ok((params, upload))
}

/// An upload's multipart body, after the checks PVE makes before reading it.
async fn read_upload(
    shared: &Shared,
    req: Request<Incoming>,
    method: &str,
    api_path: &str,
    route: &crate::schema::Route,
    query: &[(String, String)],
) -> Result<Params, Refusal> {
    // Permission is checked before the body is read.
    let storage = route
        .path_params
        .get("storage")
        .cloned()
        .unwrap_or_default();
    let permitted = shared
        .lock()
        .has_privilege(&format!("/storage/{storage}"), "Datastore.AllocateTemplate");
    if !permitted {
        let what = format!("/storage/{storage}, Datastore.AllocateTemplate");
        return Err(ApiError::perm(what).into());
    }
    if header_str(&req, "content-length").is_none() {
        return Err(ApiError::bare(501, "missing Content-Length").into());
    }
    if query.iter().any(|(k, _)| k == "tmpfilename") {
        return Err(ApiError::param(
            "tmpfilename",
            "property is not defined in schema and the schema does not allow additional \
                properties",
        )
        .into());
    }
    let content_type = header_str(&req, "content-type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let Some(boundary) = multipart_boundary(
        &content_type,
        header_str(&req, "content-type").unwrap_or_default(),
    ) else {
        return Err(Refusal::Plain(plain_error(
            500,
            &format!("upload 'Content-Type '{content_type}' not implemented"),
        )));
    };
    let body = match Limited::new(req.into_body(), MAX_UPLOAD).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            let message = "upload failed: body too large or interrupted";
            return Err(Refusal::Plain(plain_error(500, message)));
        }
    };
    match parse_multipart(&body, &boundary) {
        Ok((fields, file)) => {
            let mut params: Map<String, Value> =
                fields.into_iter().map(|(k, v)| (k, json!(v))).collect();
            let upload = file.map(|(name, data)| {
                params.insert("filename".into(), json!(name));
                data
            });
            Ok((params, upload))
        }
        Err(message) => {
            journal(shared, method, api_path, Map::new(), 500);
            Err(Refusal::Plain(plain_error(500, &message)))
        }
    }
}

/// A `POST`/`PUT` body: form-encoded or JSON.
async fn read_form(req: Request<Incoming>) -> Result<Map<String, Value>, ApiError> {
    let content_type = header_str(&req, "content-type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    if content_length(&req) > MAX_BODY {
        return Err(ApiError::bare(501, "for data too large"));
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Err(ApiError::bare(501, "for data too large")),
    };
    let mut params = Map::new();
    if content_type.is_empty() || content_type.starts_with("application/x-www-form-urlencoded") {
        for (k, v) in url::form_urlencoded::parse(&body) {
            params.insert(k.into_owned(), json!(v.into_owned()));
        }
    } else if content_type.starts_with("application/json") {
        if !body.is_empty() {
            match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Object(map)) => params.extend(map),
                _ => return Err(ApiError::die("malformed JSON string")),
            }
        }
    } else {
        return Err(ApiError::bare(
            506,
            &format!("upload 'Content-Type '{content_type}' not implemented"),
        ));
    }
    Ok(params)
}

/// Runs the handler; a synchronous writer waits for the config flock like `lock_config`
/// does, retrying until its timeout.
async fn run_handler(shared: &Arc<Shared>, call: &Call<'_>) -> Result<Reply, ApiError> {
    let since = Instant::now();
    let lock_deadline = since + crate::tasks::CONFIG_LOCK_TIMEOUT;
    // Set once the handler's answer was pending: it runs once more, after that wait.
    let mut pending_since = None;
    loop {
        let result = {
            let mut world = shared.lock();
            let call = Call {
                now: Instant::now(),
                ..*call
            };
            crate::guest_power_due::settle(&mut world, call.now);
            routes::dispatch(shared, &mut world, &call)
        };
        match result {
            Err(ApiError {
                flock_busy: Some(_),
                ..
            }) if Instant::now() < lock_deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(ApiError {
                pending_until: Some(at),
                ..
            }) if pending_since.is_none() => {
                pending_since = Some(Instant::now());
                tokio::time::sleep_until(at).await;
            }
            Err(mut error) => {
                if let (Some(cost), Some(vmid)) = (&shared.cost, error.flock_busy) {
                    cost.config_lock_timed_out(vmid, error.message.trim_end());
                }
                error.flock_busy = None;
                error.pending_until = None;
                // A wait the answer already spent pending counts against its own delay.
                if let (Some(delay), Some(pending_since)) = (error.delay, pending_since) {
                    error.delay = Some(delay.saturating_sub(pending_since.elapsed()));
                }
                return Err(error);
            }
            done => {
                if let Some(cost) = &shared.cost {
                    cost.config_lock_waited(Instant::now() - since);
                }
                return done;
            }
        }
    }
}

/// `background_delay` / `delay`: answer `null` when the task finished OK in time.
async fn wait_for_task(shared: &Shared, reply: Reply) -> Result<Reply, ApiError> {
    let Some(wait) = reply.wait.clone() else {
        return Ok(reply);
    };
    let deadline = Instant::now() + wait.max;
    loop {
        let exit = shared
            .lock()
            .tasks
            .get(&wait.upid)
            .and_then(|t| t.exitstatus.clone());
        match exit {
            Some(exit) if crate::tasks::exit_ok(&exit) => return Ok(Reply::data(Value::Null)),
            Some(exit) => {
                return match wait.failure_prefix {
                    Some(prefix) => Err(ApiError::die(format!("{prefix}{exit}"))),
                    None => Ok(reply),
                };
            }
            None if Instant::now() >= deadline => return Ok(reply),
            None => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_header_forms() {
        assert_eq!(
            extract_token("PVEAPIToken=a@pve!t=s-1").as_deref(),
            Some("a@pve!t=s-1")
        );
        assert_eq!(
            extract_token("PVEAPIToken a@pve!t=s").as_deref(),
            Some("a@pve!t=s")
        );
        assert_eq!(extract_token("Bearer x"), None);
        assert_eq!(extract_token("xPVEAPIToken=a"), None);
    }
}
