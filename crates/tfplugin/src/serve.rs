//! The go-plugin server: cookie check, listener, AutoMTLS, handshake line,
//! serving, and shutdown.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::proto::{health, plugin, tfplugin6 as pb};
use crate::provider::Provider;
use crate::server::{ControllerService, HealthService, ProviderService, StdioService};
use crate::tls;

/// The environment variable go-plugin hosts set to prove they started us.
pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
/// Its value for Terraform and OpenTofu providers.
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";
/// The message printed when the binary is run by hand.
pub const NOT_A_PROGRAM_MESSAGE: &str = "This binary is a plugin. \
These are not meant to be executed directly. \
Please execute the program that consumes these plugins (Terraform or OpenTofu), \
which will load any plugins automatically.";

/// The plugin protocol major version we speak.
const APP_PROTOCOL_VERSION: u32 = 6;
/// Terraform's schemas and states can be large; its own SDK allows 256 MiB.
const MAX_MESSAGE_SIZE: usize = 256 << 20;
/// A client that connects but never finishes TLS is dropped after this.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// go-plugin kills us 2 s after Shutdown; calls still in flight (none, normally) get this long
/// to finish.
const GRACEFUL_SHUTDOWN_LIMIT: Duration = Duration::from_millis(500);

/// How [`serve`] runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The provider's source address, e.g. `registry.terraform.io/example/thing`.
    pub provider_address: String,
    /// Extra addresses printed in `--debug` mode's `TF_REATTACH_PROVIDERS`
    /// (defaults to the OpenTofu registry twin of `provider_address`).
    pub extra_reattach_addresses: Vec<String>,
    /// Command-line arguments after the program name.
    pub args: Vec<String>,
}

impl ServeOptions {
    /// Options for `provider_address`, with arguments from the process.
    pub fn new(provider_address: impl Into<String>) -> ServeOptions {
        let provider_address = provider_address.into();
        let extra_reattach_addresses = provider_address
            .strip_prefix("registry.terraform.io/")
            .map(|rest| vec![format!("registry.opentofu.org/{rest}")])
            .unwrap_or_default();
        ServeOptions {
            provider_address,
            extra_reattach_addresses,
            args: std::env::args().skip(1).collect(),
        }
    }

    /// The provider's type name (last part of the address), e.g. `thing`.
    pub fn provider_name(&self) -> &str {
        self.provider_address
            .rsplit('/')
            .next()
            .unwrap_or(&self.provider_address)
    }

    fn debug_mode(&self) -> bool {
        self.args
            .iter()
            .any(|arg| arg == "--debug" || arg == "-debug")
    }
}

/// Runs the provider as a plugin until the host shuts it down; call it from
/// `main` and return its exit code. Handles the magic cookie, `--debug`,
/// logging set-up, the handshake and shutdown.
pub fn serve(provider: Arc<dyn Provider>, options: ServeOptions) -> ExitCode {
    let debug = options.debug_mode();
    // Before anything else, as go-plugin does: a human ran us by hand.
    if !debug && std::env::var(MAGIC_COOKIE_KEY).as_deref() != Ok(MAGIC_COOKIE_VALUE) {
        eprintln!("{NOT_A_PROGRAM_MESSAGE}");
        return ExitCode::from(1);
    }
    crate::logging::init(crate::logging::level_from_env(options.provider_name()));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(run(provider, options, debug));
    // Do not wait for stuck provider work: the host is about to kill us anyway.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

async fn run(provider: Arc<dyn Provider>, options: ServeOptions, debug: bool) -> ExitCode {
    match serve_inner(provider, &options, debug).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %error, "plugin server failed");
            eprintln!("{}: {error}", options.provider_name());
            ExitCode::from(1)
        }
    }
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("cannot listen: {0}")]
    Listen(std::io::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsSetupError),
    #[error("cannot write the handshake line: {0}")]
    Handshake(std::io::Error),
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
}

async fn serve_inner(
    provider: Arc<dyn Provider>,
    options: &ServeOptions,
    debug: bool,
) -> Result<(), ServeError> {
    // Handlers go in before the handshake line: from then on the host may
    // forward a terminal Ctrl-C to us at any moment.
    let signals = Signals::install();
    // Recorded before the handshake line, while the host is certainly waiting for it.
    let host = std::os::unix::process::parent_id();
    check_protocol_versions();
    let listener = PluginListener::bind().map_err(ServeError::Listen)?;

    let client_cert = std::env::var("PLUGIN_CLIENT_CERT")
        .ok()
        .filter(|pem| !pem.trim().is_empty() && !debug);
    let (acceptor, cert_field) = match client_cert {
        Some(pem) => {
            let pinned = tls::parse_client_cert(&pem)?;
            let identity = tls::generate_server_identity()?;
            let config = tls::server_config(&identity, pinned)?;
            let field = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&identity.cert);
            (Some(TlsAcceptor::from(config)), field)
        }
        None => (None, String::new()),
    };

    let (network, address) = listener.address();
    if debug {
        print_reattach_instructions(options, network, &address);
    } else {
        let line = format!("1|{APP_PROTOCOL_VERSION}|{network}|{address}|grpc|{cert_field}\n");
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(line.as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(ServeError::Handshake)?;
    }
    tracing::debug!(
        network,
        address = %address,
        tls = acceptor.is_some(),
        "plugin server listening"
    );

    let (shutdown_sender, mut shutdown) = watch::channel(false);
    tokio::spawn(signals.watch(shutdown_sender.clone(), debug));
    if !debug {
        tokio::spawn(exit_when_orphaned(host, shutdown_sender.clone()));
    }

    let (connections, incoming) = mpsc::channel::<std::io::Result<PluginConn>>(16);
    let accept_loop = tokio::spawn(accept_loop(listener, acceptor, connections));

    let provider_service = pb::provider_server::ProviderServer::new(ProviderService::new(provider))
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    let controller = plugin::grpc_controller_server::GrpcControllerServer::new(ControllerService {
        shutdown: shutdown_sender,
    });
    let stdio = plugin::grpc_stdio_server::GrpcStdioServer::new(StdioService);
    let health = health::health_server::HealthServer::new(HealthService);

    let mut shutdown_for_server = shutdown.clone();
    let server = tonic::transport::Server::builder()
        .add_service(provider_service)
        .add_service(controller)
        .add_service(stdio)
        .add_service(health)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::ReceiverStream::new(incoming),
            async move {
                let _ = shutdown_for_server.wait_for(|stop| *stop).await;
            },
        );
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => result?,
        _ = shutdown.wait_for(|stop| *stop) => {
            // Give in-flight calls (and the Shutdown reply itself) a moment.
            match tokio::time::timeout(GRACEFUL_SHUTDOWN_LIMIT, &mut server).await {
                Ok(result) => result?,
                Err(_) => tracing::warn!("in-flight calls did not finish in time; exiting anyway"),
            }
        }
    }
    accept_loop.abort();
    tracing::debug!("plugin server stopped");
    Ok(())
}

/// go-plugin picks the highest common version; we only speak 6, and a host
/// that does not offer it reports the mismatch itself when it reads our line.
fn check_protocol_versions() {
    if let Ok(offered) = std::env::var("PLUGIN_PROTOCOL_VERSIONS") {
        let speaks_ours = offered
            .split(',')
            .any(|v| v.trim() == APP_PROTOCOL_VERSION.to_string());
        if !speaks_ours {
            tracing::error!(
                offered = %offered,
                "the host does not offer plugin protocol version 6, \
                 the only one this provider speaks"
            );
        }
    }
}

/// SIGINT is ignored, as go-plugin does: a terminal Ctrl-C reaches the whole
/// process group, and Terraform cancels us with StopProvider instead. In
/// `--debug` mode (no host) SIGINT stops the server; SIGTERM always does.
struct Signals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt())
            .inspect_err(|error| tracing::warn!(%error, "cannot handle SIGINT"))
            .ok();
        let terminate = signal(SignalKind::terminate())
            .inspect_err(|error| tracing::warn!(%error, "cannot handle SIGTERM"))
            .ok();
        Signals {
            interrupt,
            terminate,
        }
    }

    async fn watch(mut self, shutdown: watch::Sender<bool>, debug: bool) {
        async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        loop {
            tokio::select! {
                () = next(&mut self.interrupt) => {
                    if debug {
                        shutdown.send_replace(true);
                        return;
                    }
                    tracing::debug!(
                        "ignoring SIGINT; the host stops us with StopProvider and Shutdown"
                    );
                }
                () = next(&mut self.terminate) => {
                    shutdown.send_replace(true);
                    return;
                }
            }
        }
    }
}

/// A host killed without closing us (SIGKILL, a broken pipe) would leave us
/// serving forever; when our parent changes, nobody can reach us any more.
async fn exit_when_orphaned(host: u32, shutdown: watch::Sender<bool>) {
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    loop {
        every_second.tick().await;
        if std::os::unix::process::parent_id() != host {
            tracing::warn!("the host process is gone; shutting down");
            shutdown.send_replace(true);
            return;
        }
    }
}

fn print_reattach_instructions(options: &ServeOptions, network: &str, address: &str) {
    let entry = serde_json::json!({
        "Protocol": "grpc",
        "ProtocolVersion": APP_PROTOCOL_VERSION,
        "Pid": std::process::id(),
        "Test": true,
        "Addr": { "Network": network, "String": address },
    });
    let mut providers = serde_json::Map::new();
    providers.insert(options.provider_address.clone(), entry.clone());
    for address in &options.extra_reattach_addresses {
        providers.insert(address.clone(), entry.clone());
    }
    let value = serde_json::Value::Object(providers);
    // Debug mode is run by a person, not by Terraform, so stdout is free here.
    println!(
        "Provider started. To attach Terraform or OpenTofu, set TF_REATTACH_PROVIDERS:\n\n\
         \tTF_REATTACH_PROVIDERS='{value}'\n"
    );
    let _ = std::io::stdout().flush();
}

/// A unix socket in a private directory (as go-plugin listens on Linux), or
/// loopback TCP when no unix socket can be made.
enum PluginListener {
    Unix {
        listener: UnixListener,
        path: PathBuf,
        // Removed (with the socket) when the server ends.
        _dir: tempfile::TempDir,
    },
    Tcp(TcpListener),
}

impl PluginListener {
    fn bind() -> std::io::Result<PluginListener> {
        match Self::bind_unix() {
            Ok(listener) => Ok(listener),
            Err(error) => {
                tracing::warn!(%error, "cannot listen on a unix socket; using loopback TCP");
                Self::bind_tcp()
            }
        }
    }

    fn bind_unix() -> std::io::Result<PluginListener> {
        let parent = std::env::var_os("PLUGIN_UNIX_SOCKET_DIR")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        // Mode 0700 from creation on: only our user can reach the socket.
        let dir = tempfile::Builder::new()
            .prefix("plugin")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)?;
        let path = dir.path().join("plugin.sock");
        let listener = UnixListener::bind(&path)?;
        Ok(PluginListener::Unix {
            listener,
            path,
            _dir: dir,
        })
    }

    fn bind_tcp() -> std::io::Result<PluginListener> {
        let port = |name: &str, default: u16| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<u16>().ok())
                .unwrap_or(default)
        };
        let (min, max) = (
            port("PLUGIN_MIN_PORT", 10000),
            port("PLUGIN_MAX_PORT", 25000),
        );
        for candidate in min..=max {
            if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", candidate)) {
                listener.set_nonblocking(true)?;
                return Ok(PluginListener::Tcp(TcpListener::from_std(listener)?));
            }
        }
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        Ok(PluginListener::Tcp(TcpListener::from_std(listener)?))
    }

    fn address(&self) -> (&'static str, String) {
        match self {
            PluginListener::Unix { path, .. } => ("unix", path.display().to_string()),
            PluginListener::Tcp(listener) => (
                "tcp",
                listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default(),
            ),
        }
    }

    async fn accept(&self) -> std::io::Result<PluginConn> {
        match self {
            PluginListener::Unix { listener, .. } => {
                let (stream, _) = listener.accept().await?;
                Ok(PluginConn(Box::new(stream)))
            }
            PluginListener::Tcp(listener) => {
                let (stream, _) = listener.accept().await?;
                // Without it, Nagle + delayed ACK stall each RPC by ~40 ms.
                stream.set_nodelay(true)?;
                Ok(PluginConn(Box::new(stream)))
            }
        }
    }
}

/// Accepts connections; with TLS, each handshake runs in its own task with a
/// timeout and only completed, verified streams reach the gRPC server.
async fn accept_loop(
    listener: PluginListener,
    acceptor: Option<TlsAcceptor>,
    connections: mpsc::Sender<std::io::Result<PluginConn>>,
) {
    loop {
        let conn = match listener.accept().await {
            Ok(conn) => conn,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                continue;
            }
        };
        match &acceptor {
            None => {
                if connections.send(Ok(conn)).await.is_err() {
                    return;
                }
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let connections = connections.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(conn)).await {
                        Ok(Ok(stream)) => {
                            let _ = connections.send(Ok(PluginConn(Box::new(stream)))).await;
                        }
                        Ok(Err(error)) => {
                            tracing::warn!(
                                %error,
                                "TLS handshake refused; dropping the connection"
                            );
                        }
                        Err(_) => {
                            tracing::warn!("TLS handshake timed out; dropping the connection")
                        }
                    }
                });
            }
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// One accepted connection, plain or TLS, over unix or TCP.
struct PluginConn(Box<dyn Io>);

impl tonic::transport::server::Connected for PluginConn {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for PluginConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PluginConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_derive_name_and_opentofu_twin() {
        let options = ServeOptions::new("registry.terraform.io/example/thing");
        assert_eq!(options.provider_name(), "thing");
        assert_eq!(
            options.extra_reattach_addresses,
            vec!["registry.opentofu.org/example/thing".to_owned()]
        );
        let custom = ServeOptions::new("example.local/lab/thing");
        assert!(custom.extra_reattach_addresses.is_empty());
    }
}
