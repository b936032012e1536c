//! `proxmox-test-sweeper`: deletes what acceptance-test runs left on a PVE host, like
//! HashiCorp's test sweepers, and nothing else.
//!
//! A VM is deleted only when all of these hold: its name starts with the prefix, its
//! description carries the provider's ownership mark, and the mark's owner starts with the
//! prefix too. A seed ISO is deleted only when its file name is the provider's seed name for
//! a VM name with that prefix (`seed-<name>-<8 hex>.iso`, or `…-<8 hex>-<8 hex>.iso` for a
//! seed named for its create attempt) and no remaining VM refers to it.
//! It fails closed: when any VM's config cannot be read, nobody can say which seeds that VM
//! uses, so no seed is deleted in that run (the output says so).
//! Templates, VMs without the mark, VMs and files without the prefix are never touched.
//!
//! Credentials come from the provider's variables: `PROXMOX_VE_ENDPOINT`,
//! `PROXMOX_VE_API_TOKEN`, `PROXMOX_VE_CA_CERT` (PEM text or a path; unset = system roots).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use pve::qemu::{DestroyOptions, VmConfig};
use pve::{ApiToken, Client, ClientConfig, TlsTrust};
use terraform_provider_proxmox::ownership::Mark;

const USAGE: &str = "\
proxmox-test-sweeper: delete leftover acceptance-test VMs and seed ISOs on a PVE host

USAGE:
    proxmox-test-sweeper --prefix PREFIX [--check] [--wait SECONDS]

    --prefix PREFIX   name prefix of the run(s) to sweep (the tests' PROXMOX_VE_TEST_PREFIX,
                      default there `tfacc-`); at least 3 characters
    --check           delete nothing; list what is left and exit 1 if anything is
    --wait SECONDS    how long to wait for a locked VM of the run to be unlocked (default 120)

ENVIRONMENT:
    PROXMOX_VE_ENDPOINT, PROXMOX_VE_API_TOKEN, PROXMOX_VE_CA_CERT (PEM text or a file path)

A VM is swept only if its name and its ownership mark's owner both start with PREFIX; a seed
ISO only if it is named seed-PREFIX…-XXXXXXXX.iso and no remaining VM uses it. When any
VM's config cannot be read, no seed ISO is deleted in that run.
";

struct Args {
    prefix: String,
    check: bool,
    wait: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut prefix = None;
    let mut check = false;
    let mut wait = Duration::from_secs(120);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--prefix" => prefix = args.next(),
            "--check" => check = true,
            "--wait" => {
                let secs = args.next().and_then(|s| s.parse().ok());
                wait = Duration::from_secs(secs.ok_or("--wait needs a number of seconds")?);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let prefix = prefix.ok_or("--prefix is required")?;
    // A short prefix could match what a person named by hand; the mark is still required,
    // but a sweep should never be one typo away from a whole fleet.
    if prefix.len() < 3 {
        return Err(format!(
            "the prefix `{prefix}` is too short: use the run's prefix, e.g. `tfacc-`"
        ));
    }
    Ok(Args {
        prefix,
        check,
        wait,
    })
}

fn client_from_env() -> Result<Client, String> {
    let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let endpoint = var("PROXMOX_VE_ENDPOINT")?;
    let token = ApiToken::parse(&var("PROXMOX_VE_API_TOKEN")?)
        .map_err(|e| format!("PROXMOX_VE_API_TOKEN: {e}"))?;
    let tls = match std::env::var("PROXMOX_VE_CA_CERT") {
        Ok(pem) if pem.contains("-----BEGIN") => TlsTrust::CaPem(pem),
        Ok(path) if !path.is_empty() => TlsTrust::CaPem(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("PROXMOX_VE_CA_CERT: cannot read {path}: {e}"))?,
        ),
        _ => TlsTrust::SystemRoots,
    };
    Client::new(ClientConfig::new(endpoint, token, tls)).map_err(|e| e.to_string())
}

/// The file-name part the provider's seed names start with for a VM name of this prefix
/// (the seed name lower-cases the VM name and turns other characters into `-`).
fn seed_file_prefix(prefix: &str) -> String {
    let safe: String = prefix
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .collect();
    format!("seed-{safe}")
}

/// Whether `volid` (`storage:iso/file`) is a seed ISO the provider named for a VM of the run.
fn is_run_seed(volid: &str, prefix: &str) -> bool {
    let Some((_, path)) = volid.split_once(':') else {
        return false;
    };
    let Some(file) = path.strip_prefix("iso/") else {
        return false;
    };
    let Some(stem) = file.strip_suffix(".iso") else {
        return false;
    };
    let Some((_, hash)) = stem.rsplit_once('-') else {
        return false;
    };
    stem.starts_with(&seed_file_prefix(prefix))
        && hash.len() == 8
        && hash.chars().all(|c| c.is_ascii_hexdigit())
}

/// Whether a VM belongs to the run: name and mark owner both carry the prefix.
fn is_run_vm(config: &VmConfig, prefix: &str) -> bool {
    let named = config.name().is_some_and(|n| n.starts_with(prefix));
    let marked = config
        .description()
        .and_then(|d| Mark::parse(&d))
        .is_some_and(|mark| mark.owner.starts_with(prefix));
    named && marked && !config.is_template()
}

/// Every config value that names a volume, so a seed still in use is never deleted.
fn referenced_volumes(config: &VmConfig) -> Vec<String> {
    config
        .raw()
        .values()
        .filter_map(|v| v.as_str())
        .filter_map(|v| v.split(',').next())
        .map(str::to_owned)
        .collect()
}

#[derive(Default)]
struct Report {
    vms: Vec<String>,
    seeds: Vec<String>,
    errors: Vec<String>,
}

async fn sweep(client: &Client, args: &Args) -> Report {
    let mut report = Report::default();
    let deadline = Instant::now() + args.wait;
    // Each pass deletes what it can; a VM of the run that is still locked (its clone task
    // still running after the test was killed) is looked at again until the deadline.
    let mut in_use: Vec<String> = Vec::new();
    // Any VM whose config could not be read may use any seed: fail closed.
    let mut unreadable = false;
    loop {
        let vms = match client.cluster().vm_resources().await {
            Ok(vms) => vms,
            Err(e) => {
                report.errors.push(format!("listing VMs: {e}"));
                return report;
            }
        };
        in_use.clear();
        let mut locked = Vec::new();
        for vm in vms.iter().filter(|vm| vm.guest_type == "qemu") {
            let qemu = client.node(&vm.node).qemu(vm.vmid);
            let config = match qemu.config().await {
                Ok(config) => config,
                // Gone since the listing (another sweeper, a test's own destroy).
                Err(e) if e.kind() == pve::ErrorKind::NotFound => continue,
                Err(e) => {
                    unreadable = true;
                    report
                        .errors
                        .push(format!("reading VM {} on {}: {e}", vm.vmid, vm.node));
                    continue;
                }
            };
            if !is_run_vm(&config, &args.prefix) {
                in_use.extend(referenced_volumes(&config));
                continue;
            }
            let label = format!(
                "VM {} {} on {}",
                vm.vmid,
                config.name().unwrap_or_default(),
                vm.node
            );
            // A run VM's own seed goes with it, so --check counts both.
            if args.check {
                report.vms.push(label);
                continue;
            }
            if let Some(lock) = config.lock() {
                locked.push(format!("{label} (lock: {lock})"));
                in_use.extend(referenced_volumes(&config));
                continue;
            }
            match destroy_vm(client, &vm.node, vm.vmid).await {
                Ok(()) => report.vms.push(label),
                Err(e) => {
                    in_use.extend(referenced_volumes(&config));
                    report.errors.push(format!("deleting {label}: {e}"))
                }
            }
        }
        if locked.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            report
                .errors
                .extend(locked.into_iter().map(|l| format!("still locked: {l}")));
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if unreadable {
        report.errors.push(
            "no seed ISO was deleted in this run: a VM's config could not be read, so the seeds it \
                uses are unknown; run the sweeper again".to_owned(),
        );
        return report;
    }
    sweep_seeds(client, args, &in_use, &mut report).await;
    report
}

async fn destroy_vm(client: &Client, node: &str, vmid: u32) -> pve::Result<()> {
    let qemu = client.node(node).qemu(vmid);
    if qemu.status().await?.is_running() {
        client.wait_for_task(&qemu.stop().await?).await?;
    }
    let upid = qemu
        .destroy(DestroyOptions {
            purge: true,
            destroy_unreferenced_disks: true,
        })
        .await?;
    client.wait_for_task(&upid).await?;
    Ok(())
}

async fn sweep_seeds(client: &Client, args: &Args, in_use: &[String], report: &mut Report) {
    let nodes = match client.nodes().await {
        Ok(nodes) => nodes,
        Err(e) => {
            report.errors.push(format!("listing nodes: {e}"));
            return;
        }
    };
    let mut seen: Vec<String> = Vec::new();
    for node in nodes.iter().filter(|n| n.is_online()) {
        let storages = match client.node(&node.node).storages(Some("iso")).await {
            Ok(storages) => storages,
            Err(e) => {
                report
                    .errors
                    .push(format!("listing storages on {}: {e}", node.node));
                continue;
            }
        };
        for storage in storages.iter().filter(|s| s.active) {
            let handle = client.node(&node.node).storage(&storage.storage);
            let content = match handle.content(Some("iso")).await {
                Ok(content) => content,
                Err(e) => {
                    report
                        .errors
                        .push(format!("listing {} on {}: {e}", storage.storage, node.node));
                    continue;
                }
            };
            for item in content {
                if !is_run_seed(&item.volid, &args.prefix) || in_use.contains(&item.volid) {
                    continue;
                }
                // A shared storage lists the same file on every node: one delete is enough.
                let key = if storage.shared {
                    item.volid.clone()
                } else {
                    format!("{}/{}", node.node, item.volid)
                };
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key);
                let label = format!("seed ISO {} on {}", item.volid, node.node);
                if args.check {
                    report.seeds.push(label);
                    continue;
                }
                let deleted = match handle.delete_volume(&item.volid).await {
                    Ok(upid) => client.wait_for_task(&upid).await.map(|_| ()),
                    Err(e) => Err(e),
                };
                match deleted {
                    Ok(()) => report.seeds.push(label),
                    Err(e) => report.errors.push(format!("deleting {label}: {e}")),
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(why) => {
            if !why.is_empty() {
                eprintln!("proxmox-test-sweeper: {why}\n");
            }
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let client = match client_from_env() {
        Ok(client) => client,
        Err(why) => {
            eprintln!("proxmox-test-sweeper: {why}");
            return ExitCode::from(2);
        }
    };
    let report = sweep(&client, &args).await;
    let verb = if args.check { "left" } else { "deleted" };
    for line in report.vms.iter().chain(&report.seeds) {
        println!("{verb} {line}");
    }
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    println!(
        "prefix {}: {} VMs and {} seed ISOs {verb}, {} errors",
        args.prefix,
        report.vms.len(),
        report.seeds.len(),
        report.errors.len()
    );
    let left = args.check && !(report.vms.is_empty() && report.seeds.is_empty());
    if left || !report.errors.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_names_match_only_the_providers_names_for_the_prefix() {
        assert!(is_run_seed(
            "local:iso/seed-tfacc-1a2b-edge-0-0123abcd.iso",
            "tfacc-"
        ));
        // Upper case in the prefix: the seed name is lower-cased.
        assert!(is_run_seed("local:iso/seed-ci-7-edge-0123abcd.iso", "CI_7"));
        // A seed named for its create attempt (the last part).
        assert!(is_run_seed(
            "local:iso/seed-tfacc-1a2b-edge-0-0123abcd-89abcdef.iso",
            "tfacc-"
        ));
        assert!(!is_run_seed("local:iso/seed-edge-0-0123abcd.iso", "tfacc-"));
        assert!(!is_run_seed("local:iso/tfacc-edge-0123abcd.iso", "tfacc-"));
        assert!(!is_run_seed(
            "local:iso/seed-tfacc-edge-notahash.iso",
            "tfacc-"
        ));
        assert!(!is_run_seed(
            "local:iso/seed-tfacc-edge-0123abcd.img",
            "tfacc-"
        ));
        assert!(!is_run_seed(
            "local:vztmpl/seed-tfacc-x-0123abcd.iso",
            "tfacc-"
        ));
    }
}
