//! Starts the `tfplugin-echo` plugin as Terraform would and talks to it:
//! shared by the integration tests and the handshake benchmark.
#![allow(missing_debug_implementations)]

use std::future::Future;
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use base64::Engine as _;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tonic::codegen::Service;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

pub const COOKIE: &str = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";

pub fn plugin_binary() -> &'static str {
    env!("CARGO_BIN_EXE_tfplugin-echo")
}

/// A client identity like Terraform's: self-signed ECDSA P-521/SHA-512, CA:TRUE.
pub struct ClientIdentity {
    pub pem: String,
    pub der: CertificateDer<'static>,
    pub key: PrivatePkcs8KeyDer<'static>,
}

pub fn terraform_like_client_identity() -> ClientIdentity {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, PKCS_ECDSA_P521_SHA512,
    };
    let key = KeyPair::generate_for(&PKCS_ECDSA_P521_SHA512).unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "HashiCorp");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyAgreement,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::ServerAuth,
    ];
    let cert = params.self_signed(&key).unwrap();
    ClientIdentity {
        pem: cert.pem(),
        der: cert.der().clone(),
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
    }
}

/// The parsed handshake line.
#[derive(Debug, Clone)]
pub struct Handshake {
    pub line: String,
    pub network: String,
    pub address: String,
    pub server_cert: Option<CertificateDer<'static>>,
}

pub fn parse_handshake(line: &str) -> Handshake {
    let fields: Vec<&str> = line.trim_end().split('|').collect();
    assert_eq!(fields.len(), 6, "handshake line {line:?}");
    assert_eq!(fields[0], "1", "core protocol version");
    assert_eq!(fields[1], "6", "app protocol version");
    assert_eq!(fields[4], "grpc");
    let server_cert = (!fields[5].is_empty()).then(|| {
        assert!(
            !fields[5].ends_with('='),
            "go-plugin wants no base64 padding"
        );
        CertificateDer::from(
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(fields[5])
                .expect("certificate field is unpadded base64"),
        )
    });
    Handshake {
        line: line.to_owned(),
        network: fields[2].to_owned(),
        address: fields[3].to_owned(),
        server_cert,
    }
}

/// A running plugin; killed on drop.
pub struct Plugin {
    pub child: Child,
    pub handshake: Handshake,
    pub socket_dir: tempfile::TempDir,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Plugin {
    /// Starts the plugin with Terraform's environment; `client_cert_pem` turns on AutoMTLS.
    pub fn start(client_cert_pem: Option<&str>) -> Plugin {
        Plugin::start_with(client_cert_pem, &[])
    }

    pub fn start_with(client_cert_pem: Option<&str>, extra_env: &[(&str, &str)]) -> Plugin {
        Plugin::spawn(client_cert_pem, extra_env, Stdio::null())
    }

    /// Like [`Plugin::start_with`], with stderr piped into `child.stderr`.
    pub fn start_capturing_stderr(extra_env: &[(&str, &str)]) -> Plugin {
        Plugin::spawn(None, extra_env, Stdio::piped())
    }

    fn spawn(client_cert_pem: Option<&str>, extra_env: &[(&str, &str)], stderr: Stdio) -> Plugin {
        let socket_dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(plugin_binary());
        command
            .env("TF_PLUGIN_MAGIC_COOKIE", COOKIE)
            .env("PLUGIN_PROTOCOL_VERSIONS", "5,6")
            .env("PLUGIN_MIN_PORT", "10000")
            .env("PLUGIN_MAX_PORT", "25000")
            .env("PLUGIN_UNIX_SOCKET_DIR", socket_dir.path())
            .env_remove("PLUGIN_CLIENT_CERT")
            .env_remove("TF_LOG")
            .env_remove("TF_LOG_PROVIDER")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        if let Some(pem) = client_cert_pem {
            command.env("PLUGIN_CLIENT_CERT", pem);
        }
        for (key, value) in extra_env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        Plugin {
            child,
            handshake: parse_handshake(&line),
            socket_dir,
            stdout,
        }
    }

    /// Whatever the plugin wrote to stdout after the handshake line, up to EOF.
    pub fn rest_of_stdout(&mut self) -> String {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        rest
    }

    /// Waits (polling, bounded by `deadline`) for the process to exit.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() > deadline {
                return None;
            }
            // Poll interval, not a wait for an expected duration.
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub async fn channel(
        &self,
        identity: Option<&ClientIdentity>,
    ) -> Result<Channel, tonic::transport::Error> {
        connect(&self.handshake, identity).await
    }
}

/// Accepts exactly the certificate from the handshake line, as go-plugin's client does.
#[derive(Debug)]
struct PinnedServer {
    expected: CertificateDer<'static>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.expected.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "unexpected server certificate".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

pub fn client_tls_config(
    server_cert: &CertificateDer<'static>,
    identity: Option<&ClientIdentity>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedServer {
            expected: server_cert.clone(),
            algorithms: provider.signature_verification_algorithms,
        }));
    let mut config = match identity {
        Some(identity) => builder
            .with_client_auth_cert(
                vec![identity.der.clone()],
                PrivateKeyDer::Pkcs8(identity.key.clone_key()),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Dials the plugin's socket, with TLS when the handshake carried a certificate.
#[derive(Clone)]
struct PluginConnector {
    network: String,
    address: PathBuf,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Service<Uri> for PluginConnector {
    type Response = TokioIo<Box<dyn Io>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let stream: Box<dyn Io> = if this.network == "unix" {
                Box::new(tokio::net::UnixStream::connect(&this.address).await?)
            } else {
                Box::new(tokio::net::TcpStream::connect(this.address.to_str().unwrap()).await?)
            };
            let stream: Box<dyn Io> = match this.tls {
                None => stream,
                Some(config) => {
                    let connector = tokio_rustls::TlsConnector::from(config);
                    let name = ServerName::try_from("localhost").unwrap();
                    Box::new(connector.connect(name, stream).await?)
                }
            };
            Ok(TokioIo::new(stream))
        })
    }
}

pub async fn connect(
    handshake: &Handshake,
    identity: Option<&ClientIdentity>,
) -> Result<Channel, tonic::transport::Error> {
    connect_with_versions(
        handshake,
        identity,
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    )
    .await
}

pub async fn connect_with_versions(
    handshake: &Handshake,
    identity: Option<&ClientIdentity>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<Channel, tonic::transport::Error> {
    let connector = PluginConnector {
        network: handshake.network.clone(),
        address: PathBuf::from(&handshake.address),
        tls: handshake
            .server_cert
            .as_ref()
            .map(|cert| client_tls_config(cert, identity, versions)),
    };
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(connector)
        .await
}
