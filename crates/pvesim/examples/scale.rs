//! Scale check: a world of 5,000 VMs, timing `GET /cluster/resources` over HTTPS.
//!
//! Run: `cargo run --release -p pvesim --example scale [-- VMS ROUNDS]`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pvesim::{Sim, SimConfig, VmSeed};

fn seeded_world(vms: u32) -> SimConfig {
    let mut config = SimConfig::default();
    let nodes = ["pve1", "pve2", "pve3"];
    for i in 0..vms {
        let vmid = 10_000 + i;
        let config_map = BTreeMap::from([
            ("name".to_string(), format!("edge-{i}")),
            ("cores".to_string(), "2".to_string()),
            ("memory".to_string(), "2048".to_string()),
            ("agent".to_string(), "1".to_string()),
            ("tags".to_string(), "proxy".to_string()),
            (
                "description".to_string(),
                format!("managed-by=terraform name=edge-{i}"),
            ),
            (
                "scsi0".to_string(),
                format!("vmdata:{vmid}/vm-{vmid}-disk-0.qcow2,size=20G"),
            ),
            (
                "net0".to_string(),
                format!(
                    "virtio=BC:24:11:{:02X}:{:02X}:{:02X},bridge=vmbr0,tag=4",
                    i >> 16 & 0xff,
                    i >> 8 & 0xff,
                    i & 0xff
                ),
            ),
        ]);
        config.vms.push(VmSeed {
            vmid,
            node: nodes[(i % 3) as usize].to_string(),
            running: i % 2 == 0,
            config: config_map,
        });
    }
    config
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let vms: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);

    let load_started = Instant::now();
    let sim = Sim::start(seeded_world(vms), "127.0.0.1:0".parse().unwrap(), None)
        .await
        .expect("sim starts");
    let load_time = load_started.elapsed();

    let ca = reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .http1_only()
        .build()
        .unwrap();
    let url = format!("{}/api2/json/cluster/resources?type=vm", sim.endpoint());
    let auth = format!("PVEAPIToken={}", sim.token());

    let mut samples = Vec::with_capacity(rounds);
    let mut body_len = 0;
    let mut rows = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        let response = client
            .get(&url)
            .header("Authorization", &auth)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
        let body = response.bytes().await.unwrap();
        samples.push(started.elapsed());
        body_len = body.len();
        let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
        rows = parsed["data"].as_array().map(Vec::len).unwrap_or(0);
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = samples[samples.len() / 2];
    let p95 = samples[(samples.len() * 95 / 100).min(samples.len() - 1)];
    println!(
        "world: {vms} seeded VMs (+ default world), loaded in {:.1} ms",
        ms(load_time)
    );
    println!("GET /cluster/resources?type=vm: {rows} rows, {body_len} bytes, {rounds} rounds");
    println!(
        "latency ms: min {:.1}  median {:.1}  p95 {:.1}  max {:.1}",
        ms(samples[0]),
        ms(median),
        ms(p95),
        ms(samples[samples.len() - 1])
    );
    sim.shutdown().await;
}
