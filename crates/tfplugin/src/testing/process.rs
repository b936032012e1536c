//! A provider binary started as Terraform starts it: the go-plugin magic cookie and protocol
//! versions in the environment, a private socket directory, one handshake line on stdout.
//! Plaintext only: no `PLUGIN_CLIENT_CERT`, as with Terraform's `TF_DISABLE_PLUGIN_TLS`.

use std::future::Future;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::Service;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

use crate::serve::{MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE};

/// A running provider process; stopped when dropped.
#[derive(Debug)]
pub struct PluginProcess {
    child: Child,
    network: String,
    address: String,
    _socket_dir: tempfile::TempDir,
}

/// How long a dropped provider gets to exit on SIGTERM before it is killed.
const GRACEFUL_STOP: Duration = Duration::from_secs(5);

impl Drop for PluginProcess {
    /// SIGTERM first, as a host stopping a provider would: a process that exits by itself runs
    /// its exit handlers (an instrumented build writes its coverage profile there); SIGKILL
    /// only if it has not exited within [`GRACEFUL_STOP`].
    fn drop(&mut self) {
        if stop_gracefully(&mut self.child, GRACEFUL_STOP) {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends SIGTERM and waits up to `bound` for the exit; true when the process has exited.
fn stop_gracefully(child: &mut Child, bound: Duration) -> bool {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !sent.is_ok_and(|status| status.success()) {
        return matches!(child.try_wait(), Ok(Some(_)));
    }
    let deadline = std::time::Instant::now() + bound;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => return false,
        }
    }
}

impl PluginProcess {
    /// Starts `binary` with Terraform's plugin environment plus `env`, and reads its handshake.
    pub fn start(binary: impl AsRef<Path>, env: &[(&str, &str)]) -> std::io::Result<PluginProcess> {
        let socket_dir = tempfile::tempdir()?;
        let mut command = Command::new(binary.as_ref());
        command
            .env(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE)
            .env("PLUGIN_PROTOCOL_VERSIONS", "5,6")
            .env("PLUGIN_UNIX_SOCKET_DIR", socket_dir.path())
            .env_remove("PLUGIN_CLIENT_CERT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn()?;
        let mut line = String::new();
        let read =
            BufReader::new(child.stdout.take().expect("stdout is piped")).read_line(&mut line);
        let fields: Vec<&str> = line.trim_end().split('|').collect();
        if read.is_err() || fields.len() < 6 || fields[..2] != ["1", "6"] || fields[4] != "grpc" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other(format!(
                "bad handshake line {line:?}"
            )));
        }
        Ok(PluginProcess {
            network: fields[2].to_owned(),
            address: fields[3].to_owned(),
            child,
            _socket_dir: socket_dir,
        })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// A gRPC channel to the provider.
    pub async fn channel(&self) -> Result<Channel, tonic::transport::Error> {
        channel(&self.network, &self.address).await
    }
}

/// A plaintext gRPC channel to `address` on `network` (`unix` or `tcp`), as a handshake line
/// names them: for a provider started by other means (`--debug`, a test's own server).
pub async fn channel(network: &str, address: &str) -> Result<Channel, tonic::transport::Error> {
    let connector = Connector {
        network: network.to_owned(),
        address: PathBuf::from(address),
    };
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(connector)
        .await
}

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Dials the address of the handshake line (a unix socket, or loopback TCP).
#[derive(Clone)]
struct Connector {
    network: String,
    address: PathBuf,
}

impl Service<Uri> for Connector {
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
                let address = this.address.to_string_lossy().into_owned();
                Box::new(tokio::net::TcpStream::connect(address).await?)
            };
            Ok(TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_exits_on_sigterm_is_stopped_gracefully() {
        let mut child = Command::new("sleep").arg("600").spawn().unwrap();
        // The bound only caps a failure; `sleep` exits on SIGTERM at once.
        assert!(stop_gracefully(&mut child, Duration::from_secs(600)));
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(15)
        );
    }

    #[test]
    fn a_process_that_ignores_sigterm_is_left_for_the_kill() {
        let mut child = Command::new("sh")
            .args(["-c", "trap '' TERM; echo ready; while :; do sleep 1; done"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The signal goes only once the shell ignores it.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        assert!(!stop_gracefully(&mut child, Duration::from_millis(200)));
        assert_eq!(
            child.try_wait().unwrap(),
            None,
            "still running after SIGTERM"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
