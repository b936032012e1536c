//! pve-sim: a Proxmox VE 9 REST API simulator on loopback.
//!
//! [`Sim::start`] runs one in-process (tests); the `pve-sim` binary wraps it. See the crate
//! README for the default world, the admin API under `/_sim/` and fault injection.

pub mod inspect;
pub mod iso;
pub mod schema;
#[cfg(feature = "testing")]
pub mod testing;

mod admin;
mod agent;
mod api;
mod call;
mod clock;
mod cloud_init;
mod cluster;
pub mod config;
mod cost;
mod guest;
mod guest_files;
mod guest_power;
mod guest_power_due;
mod guest_profile;
mod guest_volumes;
mod ha_admin;
mod ha_api;
mod ha_groups;
mod ha_manager;
mod ha_motion;
mod ha_placement;
mod ha_request;
mod ha_rules;
mod ha_rules_api;
mod ha_state;
pub mod hold;
mod hotplug;
mod http;
mod migrate;
mod migrate_task;
mod node_events;
mod operator_migrate;
mod qemu;
mod server;
mod shared;
mod storage;
mod tasks;
mod tls;
mod world;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

pub use config::{
    AgentBlockedCommands, CloudInitErrors, CostProfile, Faults, GuestProfileChoice, HeldLock,
    HttpFault, NodeConfig, PoolConfig, ServiceTimes, SimConfig, StorageConfig, StorageCost,
    TaskFailure, Timings, VersionInfo, VmSeed,
};
pub use cost::dispatch::{Dispatch, route_dispatch};
pub use guest_profile::GuestProfile;

/// A running simulator. Dropping it without [`Sim::shutdown`] leaves the server task running
/// until the runtime ends.
pub struct Sim {
    endpoint: String,
    ca_pem: String,
    token: String,
    shutdown: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a credential: never printed.
        f.debug_struct("Sim")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// Starts serving HTTPS on `listen` (`127.0.0.1:0` = a free port). With `state_dir`,
    /// writes `ca.pem`, `token` and `endpoint` there once ready.
    pub async fn start(
        config: SimConfig,
        listen: SocketAddr,
        state_dir: Option<&Path>,
    ) -> std::io::Result<Sim> {
        if let Some(entry) = config
            .cost_profile
            .as_ref()
            .and_then(|p| p.entry_node.as_ref())
            && !config.nodes.iter().any(|node| &node.name == entry)
        {
            let message = format!("cost_profile.entry_node '{entry}' is not a node of the world");
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                message,
            ));
        }
        let identity = tls::Identity::generate()?;
        let acceptor = identity.acceptor()?;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let local = listener.local_addr()?;
        let host = match local.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            std::net::IpAddr::V4(ip) => ip.to_string(),
        };
        let endpoint = format!("https://{host}:{}", local.port());
        let token_secret = config.token_secret.clone().unwrap_or_else(random_uuid);
        let token = format!("{}={token_secret}", config.token_id);
        let faults = config.faults.clone();
        let shared = Arc::new(shared::Shared {
            world: Mutex::new(world::World::new(&config)),
            token_id: config.token_id.clone(),
            token_secret,
            hold: hold::RequestHold::default(),
            cost: config.cost_profile.clone().map(|profile| {
                let nodes: Vec<&str> = config.nodes.iter().map(|n| n.name.as_str()).collect();
                cost::CostModel::new(profile, &nodes)
            }),
        });
        admin::install_faults(&shared, faults);
        if let Some(dir) = state_dir {
            std::fs::create_dir_all(dir)?;
            write_private(&dir.join("token"), &token)?;
            std::fs::write(dir.join("ca.pem"), &identity.ca_pem)?;
            std::fs::write(dir.join("endpoint"), &endpoint)?;
        }
        let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(ha_manager::run(Arc::clone(&shared), shutdown_rx.clone()));
        let server = tokio::spawn(server::serve(listener, acceptor, shared, shutdown_rx));
        tracing::info!(%endpoint, "pve-sim listening");
        Ok(Sim {
            endpoint,
            ca_pem: identity.ca_pem,
            token,
            shutdown,
            server,
        })
    }

    /// `https://127.0.0.1:PORT`
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The CA certificate (PEM) that signed the server certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A valid API token, `USER@REALM!TOKENID=SECRET`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Stops accepting, closes open connections and waits for the server task.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.server.await;
    }
}

fn random_uuid() -> String {
    let hex: String = (0..32)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
        .collect();
    format!(
        "{}-{}-4{}-{}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        ['8', '9', 'a', 'b'][fastrand::usize(0..4)],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The token file is a credential: owner-only where the platform allows.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(contents.as_bytes())
    }
    #[cfg(not(unix))]
    {
        std::fs::write(path, contents)
    }
}
