//! Time to build one typical seed image (meta-data, a 2 KiB cloud-config,
//! network-config, the guest-agent vendor-data), from `Seed` to ISO bytes;
//! and, for scale, the ISO writer alone and the user-data check.
//!
//! `cargo bench -p nocloud --bench build`; prints the median and spread of
//! many timed batches. Results are recorded in `crates/nocloud/BENCH.md`.

use std::hint::black_box;
use std::time::{Duration, Instant};

const BATCHES: usize = 200;
const RUNS_PER_BATCH: u32 = 50;
const WARM_UP_RUNS: usize = 1000;

fn typical_user_data() -> String {
    let mut text =
        String::from("#cloud-config\npackages:\n  - haproxy\n  - nftables\nwrite_files:\n");
    while text.len() < 2048 {
        text.push_str(
            "  - path: /etc/haproxy/conf.d/backend.cfg\n    content: |\n      server app \
                10.0.0.10:8080 check\n",
        );
    }
    text
}

/// Median, 10th and 90th percentile of the per-run time over many batches.
fn measure<T>(what: &str, mut run: impl FnMut() -> T) {
    for _ in 0..WARM_UP_RUNS {
        black_box(run());
    }
    let mut per_run: Vec<Duration> = (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..RUNS_PER_BATCH {
                black_box(run());
            }
            start.elapsed() / RUNS_PER_BATCH
        })
        .collect();
    per_run.sort();
    let at = |q: f64| per_run[((per_run.len() - 1) as f64 * q).round() as usize];
    println!(
        "{what}: median {:?}, p10 {:?}, p90 {:?} ({BATCHES} batches x {RUNS_PER_BATCH} runs)",
        at(0.5),
        at(0.1),
        at(0.9),
    );
}

fn main() {
    let user_data = typical_user_data();
    let network_config = "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n";
    let seed = || {
        nocloud::Seed::new(black_box("edge-0"), black_box("pve1/101"))
            .user_data(black_box(user_data.as_str()))
            .network_config(black_box(network_config))
    };
    let built = seed().build().expect("a small seed fits");
    println!(
        "typical seed: {} bytes image, {} bytes user-data",
        built.bytes.len(),
        user_data.len()
    );
    measure("Seed::build (render + ISO)", || {
        seed().build().expect("a small seed fits")
    });
    let (files, _) = seed().files();
    measure("iso::write alone", || {
        nocloud::iso::write(black_box(&files)).expect("fits")
    });
    measure("user_data::validate (2 KiB cloud-config)", || {
        nocloud::user_data::validate(black_box(&user_data)).expect("valid")
    });
}
