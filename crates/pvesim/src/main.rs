//! `pve-sim`: the Proxmox VE API simulator as a command.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

const HELP: &str = "\
pve-sim: a Proxmox VE 9 REST API simulator on loopback (HTTPS, API tokens)

USAGE:
    pve-sim --state-dir DIR [--listen ADDR] [--config FILE]

OPTIONS:
    --listen ADDR      address to listen on (default 127.0.0.1:8006; port 0 = a free port)
    --state-dir DIR    directory for ca.pem, token and endpoint (created if missing)
    --config FILE      JSON config: world, token, privileges, timings, faults
                       (every field optional; see the crate README)
    -h, --help         this text

When ready, pve-sim writes DIR/ca.pem (the CA to trust), DIR/token
(USER@REALM!TOKENID=SECRET) and DIR/endpoint (https://127.0.0.1:PORT), and prints
the endpoint as one line on stdout. SIGINT or SIGTERM stop it. Logs go to stderr
(RUST_LOG-style level via PVE_SIM_LOG=debug|info|warn).

Try:
    curl --cacert DIR/ca.pem -H \"Authorization: PVEAPIToken=$(cat DIR/token)\" \\
        \"$(cat DIR/endpoint)/api2/json/version\"

Admin API (same token, outside PVE's tree): GET /_sim/state, GET /_sim/journal,
GET /_sim/volume/{node}/{storage}/{volid}, GET|PUT /_sim/faults, GET|PUT /_sim/timings.
";

struct Args {
    listen: SocketAddr,
    state_dir: PathBuf,
    config: Option<PathBuf>,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut listen: SocketAddr = "127.0.0.1:8006".parse().map_err(|e| format!("{e}"))?;
    let mut state_dir = None;
    let mut config = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => {
                let text = value("--listen")?;
                listen = text.parse().map_err(|e| format!("--listen {text}: {e}"))?;
            }
            "--state-dir" => state_dir = Some(PathBuf::from(value("--state-dir")?)),
            "--config" => config = Some(PathBuf::from(value("--config")?)),
            other => return Err(format!("unknown argument '{other}' (see --help)")),
        }
    }
    let state_dir = state_dir.ok_or("--state-dir is required (see --help)")?;
    Ok(Some(Args {
        listen,
        state_dir,
        config,
    }))
}

fn init_logging() {
    let level = match std::env::var("PVE_SIM_LOG").as_deref() {
        Ok("debug") => tracing::Level::DEBUG,
        Ok("warn") => tracing::Level::WARN,
        Ok("trace") => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("pve-sim: {message}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    let config = match &args.config {
        None => pvesim::SimConfig::default(),
        Some(path) => {
            let parsed = std::fs::read(path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()));
            match parsed {
                Ok(config) => config,
                Err(err) => {
                    eprintln!("pve-sim: config {}: {err}", path.display());
                    return ExitCode::from(2);
                }
            }
        }
    };
    let sim = match pvesim::Sim::start(config, args.listen, Some(&args.state_dir)).await {
        Ok(sim) => sim,
        Err(err) => {
            eprintln!("pve-sim: cannot start on {}: {err}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", sim.endpoint());
        let _ = stdout.flush();
    }
    wait_for_signal().await;
    tracing::info!("stopping");
    sim.shutdown().await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
