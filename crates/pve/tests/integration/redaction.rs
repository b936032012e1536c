//! The token never leaks, even when the server echoes it back in every place PVE puts text:
//! the status line, the JSON `message`, the `errors` map, plain-text bodies, task exit
//! statuses and task logs. A tiny HTTPS server stands in for a PVE that echoes the
//! `Authorization` header.

use std::io::Write;
use std::sync::{Arc, Mutex};

use pve::{ApiToken, Client, ClientConfig, ErrorKind, TlsTrust};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const SECRET: &str = "5e0c1b9a-4f7e-4d2b-a1c3-9f8e7d6c5b4a";
const TOKEN: &str = "terraform@pve!prov=5e0c1b9a-4f7e-4d2b-a1c3-9f8e7d6c5b4a";
const UPID: &str = "UPID:pve1:000D6BDA:041E0A54:654A5A1D:qmstart:100:terraform@pve!prov:";

struct EchoServer {
    endpoint: String,
    ca_pem: String,
    /// How many responses actually contained the secret (proves the echo happened).
    echoed: Arc<Mutex<u32>>,
}

fn tls_material() -> (String, rustls::ServerConfig) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    (ca.pem(), config)
}

/// Answers each request by path, echoing the `Authorization` value back.
fn respond(path: &str, auth: &str) -> (String, String) {
    let json = |v: serde_json::Value| v.to_string();
    if path.starts_with("/api2/json/version") {
        (
            format!("500 bad header {auth}"),
            json(serde_json::json!({"data": null, "message": format!("bad header {auth}\n")})),
        )
    } else if path.starts_with("/api2/json/nodes/pve1/status") {
        (format!("401 invalid token value! {auth}"), String::new())
    } else if path.starts_with("/api2/json/cluster/resources") {
        let encoded: String = url::form_urlencoded::byte_serialize(auth.as_bytes()).collect();
        (
            "400 Parameter verification failed.".to_owned(),
            json(serde_json::json!({
                "data": null,
                "message": "Parameter verification failed.\n",
                "errors": {"type": format!("value '{auth}' is odd"), "raw": encoded}
            })),
        )
    } else if path.starts_with("/api2/json/pools") {
        // A server-level error: plain-text body, not JSON.
        (
            "500 Internal Server Error".to_owned(),
            format!("upload failed for {auth}"),
        )
    } else if path.starts_with("/api2/json/cluster/nextid") {
        // A success envelope whose data is not a VMID: the decode error quotes it.
        (
            "200 OK".to_owned(),
            json(serde_json::json!({"data": {"weird": auth}})),
        )
    } else if path.starts_with("/api2/json/nodes/pve1/qemu/100/status/current") {
        (
            "200 OK".to_owned(),
            json(serde_json::json!({"data": {"vmid": auth, "status": "running"}})),
        )
    } else if path.contains("/tasks/") && path.contains("/status") {
        (
            "200 OK".to_owned(),
            json(serde_json::json!({"data": {
                "upid": UPID, "node": "pve1", "status": "stopped", "type": "qmstart",
                "id": "100", "user": "terraform@pve", "exitstatus": format!("start failed: {auth}")
            }})),
        )
    } else if path.contains("/tasks/") && path.contains("/log") {
        (
            "200 OK".to_owned(),
            json(
                serde_json::json!({"data": [{"n": 1, "t": format!("header was {auth}")},
                                            {"n": 2, "t": "TASK ERROR: start failed"}],
                                    "total": 2}),
            ),
        )
    } else {
        ("501 Method not implemented".to_owned(), String::new())
    }
}

async fn start_echo_server() -> EchoServer {
    let (ca_pem, config) = tls_material();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let echoed = Arc::new(Mutex::new(0));
    let counter = echoed.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let auth = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("authorization")
                            .then(|| v.trim().to_owned())
                    })
                    .unwrap_or_default();
                let (status_line, body) = respond(&path, &auth);
                if status_line.contains(SECRET)
                    || body.contains(SECRET)
                    || body.contains("5e0c1b9a")
                {
                    *counter.lock().unwrap() += 1;
                }
                let response = format!(
                    "HTTP/1.1 {status_line}\r\nContent-Type: application/json;charset=UTF-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    EchoServer {
        endpoint,
        ca_pem,
        echoed,
    }
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} leaks the secret: {text}");
    assert!(
        !text.contains("5e0c1b9a"),
        "{what} leaks part of the secret: {text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn token_never_leaks_into_errors_debug_or_logs() {
    let logs = Captured::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = start_echo_server().await;
    let token = ApiToken::parse(TOKEN).unwrap();
    assert_clean("token Debug", &format!("{token:?}"));
    let config = ClientConfig::new(
        &server.endpoint,
        token,
        TlsTrust::CaPem(server.ca_pem.clone()),
    );
    assert_clean("config Debug", &format!("{config:?}"));
    let client = Client::new(config).unwrap();
    assert_clean("client Debug", &format!("{client:?}"));

    let mut errors = Vec::new();

    let e = client.version().await.unwrap_err();
    assert_eq!(e.status(), Some(500));
    assert!(e.message().contains("<redacted>"), "{e}");
    errors.push(e);

    let e = client.node("pve1").status().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth);
    assert!(e.message().contains("<redacted>"), "status line echo: {e}");
    errors.push(e);

    let e = client.cluster().vm_resources().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.param_errors()["type"].contains("<redacted>"), "{e}");
    assert!(
        e.param_errors()["raw"].contains("<redacted>"),
        "url-encoded echo: {e}"
    );
    errors.push(e);

    let e = client.pools().await.unwrap_err();
    assert!(e.message().contains("<redacted>"), "plain-text echo: {e}");
    errors.push(e);

    let e = client.cluster().next_id(None).await.unwrap_err();
    assert_eq!(e.origin(), &pve::Origin::Decode);
    errors.push(e);
    let e = client.node("pve1").qemu(100).status().await.unwrap_err();
    assert!(
        e.message().contains("<redacted>"),
        "decode error quoting the value: {e}"
    );
    errors.push(e);

    let upid: pve::Upid = UPID.parse().unwrap();
    let e = client.wait_for_task(&upid).await.unwrap_err();
    let failure = e.task_failure().expect("a task failure");
    assert!(failure.exitstatus.contains("<redacted>"));
    assert!(failure.log_tail.iter().any(|l| l.contains("<redacted>")));
    errors.push(e);

    for e in &errors {
        assert_clean("error Display", &e.to_string());
        assert_clean("error Debug", &format!("{e:?}"));
        assert_clean("error Debug (pretty)", &format!("{e:#?}"));
    }

    let echoed = *server.echoed.lock().unwrap();
    assert!(
        echoed >= 6,
        "the server should have echoed the token back ({echoed} times)"
    );

    let log_text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        log_text.contains("PVE API call"),
        "debug lines were captured: {log_text}"
    );
    assert!(
        log_text.contains("PVE task finished"),
        "task info line was captured"
    );
    assert_clean("log output", &log_text);
}
