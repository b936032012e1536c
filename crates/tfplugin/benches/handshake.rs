//! Handshake latency of the plugin binary, as Terraform experiences it on
//! every provider launch (3 or more per `terraform plan`):
//! exec → handshake line on stdout; then connect + TLS + first RPC; then
//! Shutdown → process exit.
//!
//! Run: `cargo bench -p tfplugin --bench handshake` (optionally `-- 100` for the run count).

// The benchmark starts the plugin and connects; the rest of the tests' helpers go unused.
#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{Plugin, terraform_like_client_identity};
use tfplugin::proto::plugin::grpc_controller_client::GrpcControllerClient;
use tfplugin::proto::tfplugin6 as pb;
use tfplugin::proto::tfplugin6::provider_client::ProviderClient;

struct Sample {
    exec_to_line: Duration,
    first_rpc: Duration,
    shutdown_to_exit: Duration,
}

fn run_once(runtime: &tokio::runtime::Runtime, mtls: bool) -> Sample {
    let identity = mtls.then(terraform_like_client_identity);
    let started = Instant::now();
    let mut plugin = Plugin::start(identity.as_ref().map(|i| i.pem.as_str()));
    let exec_to_line = started.elapsed();
    let (first_rpc, shutdown_to_exit) = runtime.block_on(async {
        let started = Instant::now();
        let channel = plugin.channel(identity.as_ref()).await.expect("connect");
        ProviderClient::new(channel.clone())
            .get_metadata(pb::get_metadata::Request {})
            .await
            .expect("GetMetadata");
        let first_rpc = started.elapsed();
        GrpcControllerClient::new(channel)
            .shutdown(tfplugin::proto::plugin::Empty {})
            .await
            .expect("Shutdown");
        // Like go-plugin: the client closes its connection right after Shutdown;
        // keep the runtime turning so that close actually happens.
        let shutdown_sent = Instant::now();
        while plugin.child.try_wait().expect("wait").is_none() {
            assert!(
                shutdown_sent.elapsed() < Duration::from_secs(5),
                "plugin did not exit after Shutdown"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        (first_rpc, shutdown_sent.elapsed())
    });
    Sample {
        exec_to_line,
        first_rpc,
        shutdown_to_exit,
    }
}

fn percentile(values: &mut [Duration], fraction: f64) -> Duration {
    values.sort();
    let index = ((values.len() - 1) as f64 * fraction).round() as usize;
    values[index]
}

fn report(name: &str, mut values: Vec<Duration>) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let min = *values.iter().min().unwrap();
    let median = percentile(&mut values, 0.5);
    let p90 = percentile(&mut values, 0.9);
    println!(
        "| {name} | {:.2} ms | {:.2} ms | {:.2} ms |",
        ms(median),
        ms(p90),
        ms(min)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a bare number sets the run count.
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(50);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("tfplugin handshake benchmark: {runs} runs per variant (tfplugin-echo, release)");
    println!();
    println!("| measurement | median | p90 | min |");
    println!("|---|---|---|---|");
    for mtls in [true, false] {
        let label = if mtls { "AutoMTLS" } else { "plaintext" };
        // One warm-up run so the binary is in the page cache.
        run_once(&runtime, mtls);
        let samples: Vec<Sample> = (0..runs).map(|_| run_once(&runtime, mtls)).collect();
        report(
            &format!("exec → handshake line ({label})"),
            samples.iter().map(|s| s.exec_to_line).collect(),
        );
        report(
            &format!("connect + first RPC ({label})"),
            samples.iter().map(|s| s.first_rpc).collect(),
        );
        report(
            &format!("Shutdown → exit ({label})"),
            samples.iter().map(|s| s.shutdown_to_exit).collect(),
        );
    }
}
