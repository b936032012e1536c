//! `pve-sim`: the Proxmox VE API simulator as a command.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
pve-sim: a Proxmox VE 9 REST API simulator on loopback (HTTPS, API tokens), to run
Terraform/OpenTofu configurations, `terraform test` and CI jobs without a PVE host.

USAGE:
    pve-sim --state-dir DIR [--listen ADDR] [--config FILE]
    pve-sim --print-world [--config FILE]

OPTIONS:
    --listen ADDR      address to listen on (default 127.0.0.1:8006; port 0 = a free port)
    --state-dir DIR    directory for the files below (created if missing)
    --config FILE      JSON replacing parts of the default world: version, nodes, storages,
                       vms (templates too), pools, token_id, token_secret, privileges,
                       timings, faults, mac_prefix, next_id_lower, next_id_upper,
                       cost_profile (what requests, locks and clones cost on a real node);
                       a field left out keeps its default (see crates/pvesim/README.md)
    --print-world      describe the world pve-sim would start with (the default, or the
                       one --config shapes) and the files it writes, then exit
    -V, --version      print `pve-sim VERSION` and exit
    -h, --help         this text
";

const FILES: &str = "\
FILES (in --state-dir DIR, written once pve-sim accepts connections):
    DIR/endpoint   https://127.0.0.1:PORT      provider `endpoint`, PROXMOX_VE_ENDPOINT
    DIR/token      USER@REALM!TOKENID=SECRET   provider `api_token`, PROXMOX_VE_API_TOKEN
                   (mode 0600; a new secret at every start unless token_secret is set)
    DIR/ca.pem     the CA of its certificate   provider `ca_cert` = file(\"DIR/ca.pem\"),
                                               or PROXMOX_VE_CA_CERT=DIR/ca.pem (a path)
It also prints the endpoint as one line on stdout. SIGINT or SIGTERM stop it. The world
lives in memory only: each start begins from the configured world again.
";

const TAIL: &str = "\
Logs go to stderr (level via PVE_SIM_LOG=debug|info|warn).

Try:
    pve-sim --listen 127.0.0.1:0 --state-dir /tmp/sim &
    curl --cacert /tmp/sim/ca.pem -H \"Authorization: PVEAPIToken=$(cat /tmp/sim/token)\" \\
        \"$(cat /tmp/sim/endpoint)/api2/json/version\"

Admin API (same token, outside PVE's tree): GET /_sim/state, GET /_sim/journal,
GET /_sim/volume/{node}/{storage}/{volid}, GET|PUT /_sim/faults, GET|PUT /_sim/timings,
POST /_sim/nodes/{node}/reboot|fail|recover, GET /_sim/costs, POST /_sim/costs/reset.
";

/// `--help`: the usage, a summary of the default world taken from the defaults themselves
/// (so it cannot drift from them), and the files a module's tests read.
fn help_text() -> String {
    let world = pvesim::SimConfig::default();
    let names = |items: Vec<String>| items.join(", ");
    let templates = names(
        templates(&world)
            .map(|vm| format!("{} (VMID {} on {})", vm_name(vm), vm.vmid, vm.node))
            .collect(),
    );
    let seed_storages = names(seed_storages(&world).map(|s| s.id.clone()).collect());
    format!(
        "{USAGE}\nDEFAULT WORLD (pve-sim --print-world describes all of it):\n    \
         nodes      {}\n    templates  {templates}\n    storages   {} \
         (seed_storage: {seed_storages})\n    token      {} (secret: {})\n\n{FILES}\n{TAIL}",
        names(world.nodes.iter().map(|n| n.name.clone()).collect()),
        names(world.storages.iter().map(|s| s.id.clone()).collect()),
        world.token_id,
        secret_words(&world),
    )
}

/// `--print-world`: everything a module's tests can rely on, in the words of the provider's
/// arguments where there is one.
fn describe_world(world: &pvesim::SimConfig, source: &str) -> String {
    let mut out = String::new();
    // One column for every name, wide enough for the longest.
    let w = world
        .nodes
        .iter()
        .map(|n| n.name.len())
        .chain(world.storages.iter().map(|s| s.id.len()))
        .chain(world.vms.iter().map(|vm| vm_name(vm).len()))
        .chain(world.privileges.keys().map(String::len))
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(out, "pve-sim world ({source})\n");
    let _ = writeln!(
        out,
        "PVE version {} (release {})",
        world.version.version, world.version.release
    );
    write_nodes(&mut out, world, w);
    write_storages(&mut out, world, w);
    write_vms(&mut out, world, w);
    write_pools_token_and_faults(&mut out, world, w);
    let _ = write!(out, "\n{FILES}");
    out
}

fn write_nodes(out: &mut String, world: &pvesim::SimConfig, w: usize) {
    let _ = writeln!(out, "\nNodes:");
    for node in &world.nodes {
        let _ = writeln!(
            out,
            "  {:<w$} {}, {} CPUs, {} GiB memory, bridges {}",
            node.name,
            if node.online { "online" } else { "offline" },
            node.cpus,
            node.memory_bytes >> 30,
            node.bridges.join(", ")
        );
    }
}

fn write_storages(out: &mut String, world: &pvesim::SimConfig, w: usize) {
    let _ = writeln!(out, "\nStorages:");
    for storage in &world.storages {
        let _ = writeln!(
            out,
            "  {:<w$} {}, content {}, {}, {} GiB{}{}",
            storage.id,
            storage.plugin_type,
            storage.content.join(","),
            match (&storage.nodes, storage.shared) {
                (Some(nodes), _) => format!("on {}", nodes.join(", ")),
                (None, true) => "shared by every node".to_owned(),
                (None, false) => "local to every node".to_owned(),
            },
            storage.total_bytes >> 30,
            if storage.enabled { "" } else { ", disabled" },
            if seed_storages(world).any(|s| s.id == storage.id) {
                "  <- can hold seed ISOs (seed_storage)"
            } else {
                ""
            },
        );
    }
}

/// Templates first (what the provider clones), then everyone else's VMs.
fn write_vms(out: &mut String, world: &pvesim::SimConfig, w: usize) {
    let _ = writeln!(
        out,
        "\nTemplates (proxmox_proxy_vm `template`, by name or VMID):"
    );
    let mut any = false;
    for vm in templates(world) {
        any = true;
        let disks: Vec<&str> = vm
            .config
            .iter()
            .filter(|(key, _)| is_disk_key(key))
            .map(|(_, value)| value.as_str())
            .collect();
        let _ = writeln!(
            out,
            "  {:<w$} VMID {} on {}{}, disk {}",
            vm_name(vm),
            vm.vmid,
            vm.node,
            missing_node_note(world, vm),
            disks.join("; ")
        );
    }
    if !any {
        let _ = writeln!(out, "  (none)");
    }
    let _ = writeln!(
        out,
        "\nOther VMs (not the provider's: it never touches them):"
    );
    let mut any = false;
    for vm in world.vms.iter().filter(|vm| !is_template(vm)) {
        any = true;
        let tags = vm
            .config
            .get("tags")
            .map(|t| format!(", tags {t}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<w$} VMID {} on {}{}, {}{tags}",
            vm_name(vm),
            vm.vmid,
            vm.node,
            missing_node_note(world, vm),
            if vm.running { "running" } else { "stopped" },
        );
    }
    if !any {
        let _ = writeln!(out, "  (none)");
    }
}

fn write_pools_token_and_faults(out: &mut String, world: &pvesim::SimConfig, w: usize) {
    let pools: Vec<&str> = world.pools.iter().map(|p| p.poolid.as_str()).collect();
    let _ = writeln!(
        out,
        "\nPools: {}",
        if pools.is_empty() {
            "(none)".to_owned()
        } else {
            pools.join(", ")
        }
    );
    let _ = writeln!(
        out,
        "\nAPI token: {} (secret: {})",
        world.token_id,
        secret_words(world)
    );
    let _ = writeln!(out, "Privileges of the token:");
    for (path, privileges) in &world.privileges {
        for (i, chunk) in privileges.chunks(4).enumerate() {
            let path = if i == 0 { path.as_str() } else { "" };
            let _ = writeln!(out, "  {path:<w$} {}", chunk.join(", "));
        }
    }
    let _ = writeln!(
        out,
        "\nNew VMIDs (/cluster/nextid): {}..{}; MAC prefix {}",
        world.next_id_lower, world.next_id_upper, world.mac_prefix
    );
    let faults = &world.faults;
    let no_faults = faults.latency_ms == 0
        && faults.http.is_empty()
        && faults.task_failures.is_empty()
        && faults.held_locks.is_empty()
        && faults.stalled_tasks.is_empty()
        && !faults.token_revoked
        && faults.offline_nodes.is_empty();
    let _ = writeln!(
        out,
        "Faults at start: {}",
        if no_faults {
            "none (PUT /_sim/faults injects them at runtime)".to_owned()
        } else {
            format!("{faults:?}")
        }
    );
    let _ = writeln!(
        out,
        "Cost profile: {}",
        match &world.cost_profile {
            None => "none (every request is answered at once)".to_owned(),
            Some(profile) => serde_json::to_string(profile).unwrap_or_default(),
        }
    );
}

/// A config that replaces `nodes` but keeps the default `vms` leaves them on nodes that are
/// gone; say so rather than let a module's test find out.
fn missing_node_note(world: &pvesim::SimConfig, vm: &pvesim::VmSeed) -> &'static str {
    if world.nodes.iter().any(|node| node.name == vm.node) {
        ""
    } else {
        " (not a node of this world: set `vms` too)"
    }
}

fn is_template(vm: &pvesim::VmSeed) -> bool {
    vm.config.get("template").is_some_and(|t| t == "1")
}

fn templates(world: &pvesim::SimConfig) -> impl Iterator<Item = &pvesim::VmSeed> {
    world.vms.iter().filter(|vm| is_template(vm))
}

fn vm_name(vm: &pvesim::VmSeed) -> String {
    vm.config
        .get("name")
        .cloned()
        .unwrap_or_else(|| format!("VM {}", vm.vmid))
}

/// Where a seed ISO can be uploaded: `iso` content on a storage with a path.
fn seed_storages(world: &pvesim::SimConfig) -> impl Iterator<Item = &pvesim::StorageConfig> {
    world
        .storages
        .iter()
        .filter(|s| s.enabled && s.has_path && s.content.iter().any(|c| c == "iso"))
}

fn is_disk_key(key: &str) -> bool {
    ["scsi", "virtio", "sata", "ide"].iter().any(|bus| {
        key.strip_prefix(bus)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Never the secret itself: only whether it is fixed.
fn secret_words(world: &pvesim::SimConfig) -> &'static str {
    if world.token_secret.is_some() {
        "fixed by the config's token_secret"
    } else {
        "a new random UUID at every start"
    }
}

struct Args {
    listen: SocketAddr,
    state_dir: PathBuf,
    config: Option<PathBuf>,
}

enum Command {
    Help,
    Version,
    PrintWorld(Option<PathBuf>),
    Serve(Args),
}

fn parse_args() -> Result<Command, String> {
    let mut listen: SocketAddr = "127.0.0.1:8006".parse().map_err(|e| format!("{e}"))?;
    let mut state_dir = None;
    let mut config = None;
    let mut print_world = false;
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
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--print-world" => print_world = true,
            "--listen" => {
                let text = value("--listen")?;
                listen = text.parse().map_err(|e| format!("--listen {text}: {e}"))?;
            }
            "--state-dir" => state_dir = Some(PathBuf::from(value("--state-dir")?)),
            "--config" => config = Some(PathBuf::from(value("--config")?)),
            other => return Err(format!("unknown argument '{other}' (see --help)")),
        }
    }
    if print_world {
        return Ok(Command::PrintWorld(config));
    }
    let state_dir = state_dir.ok_or("--state-dir is required (see --help)")?;
    Ok(Command::Serve(Args {
        listen,
        state_dir,
        config,
    }))
}

fn load_config(path: Option<&Path>) -> Result<pvesim::SimConfig, String> {
    let Some(path) = path else {
        return Ok(pvesim::SimConfig::default());
    };
    std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
        .map_err(|err| format!("config {}: {err}", path.display()))
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
        Ok(Command::Serve(args)) => args,
        Ok(Command::Help) => {
            print!("{}", help_text());
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("pve-sim {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Command::PrintWorld(config)) => {
            return match load_config(config.as_deref()) {
                Ok(world) => {
                    let source = match &config {
                        Some(path) => format!("the default, shaped by {}", path.display()),
                        None => "the default; --config FILE changes any part".to_owned(),
                    };
                    print!("{}", describe_world(&world, &source));
                    ExitCode::SUCCESS
                }
                Err(message) => {
                    eprintln!("pve-sim: {message}");
                    ExitCode::from(2)
                }
            };
        }
        Err(message) => {
            eprintln!("pve-sim: {message}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    let config = match load_config(args.config.as_deref()) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("pve-sim: {message}");
            return ExitCode::from(2);
        }
    };
    // Caught before the simulator announces itself (its state files, the stdout line): a
    // SIGTERM sent the moment the endpoint is known stops it cleanly. Installed after, a
    // loaded machine let such a SIGTERM through to its default action (killed by signal 15).
    let stop = StopSignals::install();
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
    stop.wait().await;
    tracing::info!("stopping");
    sim.shutdown().await;
    ExitCode::SUCCESS
}

/// SIGTERM and SIGINT, caught from the moment [`StopSignals::install`] returns.
struct StopSignals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let streams = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            StopSignals { streams }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// Returns once either signal arrived (since [`StopSignals::install`]).
    async fn wait(self) {
        #[cfg(unix)]
        if let Some((mut term, mut int)) = self.streams {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
