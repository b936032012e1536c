//! Time to build one typical seed image (meta-data, a 2 KiB cloud-config,
//! network-config, the guest-agent vendor-data), from `Seed` to ISO bytes.
//!
//! `cargo bench -p nocloud --bench build`; prints the median and spread of
//! many timed batches. Results are recorded in `crates/nocloud/BENCH.md`.

use std::hint::black_box;
use std::time::{Duration, Instant};

const BATCHES: usize = 200;
const BUILDS_PER_BATCH: u32 = 50;

fn typical_user_data() -> String {
    let mut text =
        String::from("#cloud-config\npackages:\n  - haproxy\n  - nftables\nwrite_files:\n");
    while text.len() < 2048 {
        text.push_str("  - path: /etc/haproxy/conf.d/backend.cfg\n    content: |\n      server app 10.0.0.10:8080 check\n");
    }
    text
}

fn main() {
    let user_data = typical_user_data();
    let network_config = "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n";
    let build = || {
        nocloud::Seed::new(black_box("edge-0"), black_box("pve1/101"))
            .user_data(black_box(user_data.as_str()))
            .network_config(black_box(network_config))
            .build()
            .expect("a small seed fits")
    };
    let size = build().bytes.len();

    // Warm up caches and the allocator before timing.
    for _ in 0..1000 {
        black_box(build());
    }
    let mut per_build: Vec<Duration> = (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BUILDS_PER_BATCH {
                black_box(build());
            }
            start.elapsed() / BUILDS_PER_BATCH
        })
        .collect();
    per_build.sort();
    let at = |q: f64| per_build[((per_build.len() - 1) as f64 * q).round() as usize];
    println!(
        "seed build ({size} bytes image, {} bytes user-data): median {:?}, p10 {:?}, p90 {:?} ({} batches x {} builds)",
        user_data.len(),
        at(0.5),
        at(0.1),
        at(0.9),
        BATCHES,
        BUILDS_PER_BATCH
    );
}
