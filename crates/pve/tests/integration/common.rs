//! Shared helpers for the integration tests against `pvesim`.

use std::time::Duration;

use pve::{ApiToken, Client, ClientConfig, TlsTrust};
use pvesim::testing::Admin;
use pvesim::{Faults, Sim, SimConfig};
use serde_json::Value;

/// A running simulator, a `pve` client for it and its admin API.
pub struct Env {
    pub sim: Sim,
    pub client: Client,
    pub admin: Admin,
}

pub async fn start() -> Env {
    start_with(SimConfig::default(), |_| {}).await
}

/// A simulator with `config`, and a client configured as the provider would, then `tweak`ed.
pub async fn start_with(config: SimConfig, tweak: impl FnOnce(&mut ClientConfig)) -> Env {
    let sim = pvesim::testing::start(config).await;
    let mut client_config = ClientConfig::new(
        sim.endpoint(),
        ApiToken::parse(sim.token()).unwrap(),
        TlsTrust::CaPem(sim.ca_pem().to_owned()),
    );
    tweak(&mut client_config);
    let client = Client::new(client_config).unwrap();
    let admin = Admin::new(&sim);
    Env { sim, client, admin }
}

impl Env {
    pub async fn shutdown(self) {
        self.sim.shutdown().await;
    }
}

/// Faults written as the JSON `PUT /_sim/faults` takes.
pub fn faults(json: Value) -> Faults {
    serde_json::from_value(json).expect("faults as /_sim/faults takes them")
}

/// Polls `probe` until it yields `Some`, failing after `deadline`. The probe's own requests
/// pace the loop; the short pause only keeps it from spinning.
pub async fn poll_until<T, F, Fut>(what: &str, deadline: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A minimal ISO9660 image (volume `label`, root files by 8.3-style name) — enough for the
/// simulator's seed reader; the real seed builder lives in the `nocloud` crate.
pub fn tiny_iso(label: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    const SECTOR: usize = 2048;
    let root_sector = 18usize;
    let first_file_sector = root_sector + 1;
    let mut file_sectors = Vec::new();
    let mut next = first_file_sector;
    for (_, data) in files {
        file_sectors.push(next);
        next += data.len().div_ceil(SECTOR).max(1);
    }
    let total_sectors = next;
    let mut image = vec![0u8; total_sectors * SECTOR];

    fn both_u32(buf: &mut [u8], at: usize, v: u32) {
        buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
        buf[at + 4..at + 8].copy_from_slice(&v.to_be_bytes());
    }
    fn both_u16(buf: &mut [u8], at: usize, v: u16) {
        buf[at..at + 2].copy_from_slice(&v.to_le_bytes());
        buf[at + 2..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    fn record(name: &[u8], extent: usize, len: usize, dir: bool) -> Vec<u8> {
        let mut r = vec![0u8; 33 + name.len() + usize::from(name.len().is_multiple_of(2))];
        r[0] = r.len() as u8;
        both_u32(&mut r, 2, extent as u32);
        both_u32(&mut r, 10, len as u32);
        r[25] = if dir { 2 } else { 0 };
        both_u16(&mut r, 28, 1);
        r[32] = name.len() as u8;
        r[33..33 + name.len()].copy_from_slice(name);
        r
    }

    let root = record(&[0], root_sector, SECTOR, true);
    let pvd = &mut image[16 * SECTOR..17 * SECTOR];
    pvd[0] = 1;
    pvd[1..6].copy_from_slice(b"CD001");
    pvd[6] = 1;
    pvd[40..72].fill(b' ');
    pvd[40..40 + label.len()].copy_from_slice(label.as_bytes());
    both_u32(pvd, 80, total_sectors as u32);
    both_u16(pvd, 120, 1);
    both_u16(pvd, 124, 1);
    both_u16(pvd, 128, SECTOR as u16);
    pvd[156..156 + root.len()].copy_from_slice(&root);
    let term = &mut image[17 * SECTOR..18 * SECTOR];
    term[0] = 255;
    term[1..6].copy_from_slice(b"CD001");
    term[6] = 1;

    let mut dir = Vec::new();
    dir.extend(record(&[0], root_sector, SECTOR, true));
    dir.extend(record(&[1], root_sector, SECTOR, true));
    for ((name, data), sector) in files.iter().zip(&file_sectors) {
        let iso_name = format!("{};1", name.to_ascii_uppercase());
        dir.extend(record(iso_name.as_bytes(), *sector, data.len(), false));
    }
    image[root_sector * SECTOR..root_sector * SECTOR + dir.len()].copy_from_slice(&dir);
    for ((_, data), sector) in files.iter().zip(&file_sectors) {
        image[sector * SECTOR..sector * SECTOR + data.len()].copy_from_slice(data);
    }
    image
}

/// A NoCloud seed whose user-data installs and starts the guest agent.
pub fn agent_seed(hostname: &str) -> Vec<u8> {
    let user_data =
        "#!/bin/sh\napt-get install -y qemu-guest-agent\nsystemctl enable --now qemu-guest-agent\n";
    let meta_data = format!("instance-id: {hostname}\nlocal-hostname: {hostname}\n");
    tiny_iso(
        "cidata",
        &[
            ("user-data", user_data.as_bytes()),
            ("meta-data", meta_data.as_bytes()),
        ],
    )
}
