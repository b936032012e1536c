//! Task-wait latency against pvesim: how long after a task ends does `wait_for_task` notice,
//! and how many status requests per second does one waiting task cost.
//!
//! Run: `cargo bench -p pve --bench task_wait` (add `-- --quick` for a shorter run).
//!
//! Method: the simulator runs every `imgdel` task for exactly R ms from dispatch. For each
//! task we take t_sent (before the DELETE is sent), t_answered (the UPID came back) and
//! t_noticed (`wait_for_task` returned). The task ended somewhere in
//! [t_sent + R, t_answered + R], so the notice latency lies in
//! [t_noticed − t_answered − R, t_noticed − t_sent − R]; we report the upper bound (the
//! pessimistic figure) and the bracket width. R is swept over 0..2 s so task ends fall on
//! every phase of the polling schedule, with several tasks waited on concurrently. The
//! default schedule learns task lengths per client, so it is measured three ways: a length the
//! client saw before (a fleet's later tasks), a first task of its kind (a fleet's first wave),
//! and lengths that change with every round.

use std::time::{Duration, Instant};

use pve::{ApiToken, Client, ClientConfig, TaskWait, TlsTrust};
use pvesim::{Sim, SimConfig};

struct Sample {
    latency_upper: Duration,
    bracket: Duration,
    polls: u32,
    waited: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

async fn set_imgdel_ms(admin: &reqwest::Client, sim: &Sim, ms: u64) {
    let url = format!("{}/_sim/timings", sim.endpoint());
    let auth = format!("PVEAPIToken={}", sim.token());
    let mut timings: serde_json::Value = admin
        .get(&url)
        .header("Authorization", &auth)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    timings["task_ms"]["imgdel"] = ms.into();
    let resp = admin
        .put(&url)
        .header("Authorization", &auth)
        .json(&timings)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
}

async fn one_task(client: &Client, run_ms: u64, wait: &TaskWait, volume: &str) -> Sample {
    let storage = client.node("pve1").storage("proxy-seeds");
    let sent = Instant::now();
    let upid = storage.delete_volume(volume).await.unwrap();
    let answered = Instant::now();
    let outcome = client.wait_for_task_with(&upid, wait).await.unwrap();
    let noticed = Instant::now();
    let run = Duration::from_millis(run_ms);
    Sample {
        latency_upper: noticed.saturating_duration_since(sent + run),
        bracket: answered - sent,
        polls: outcome.polls,
        waited: outcome.waited,
    }
}

/// Waits on `concurrent` tasks of each run time. `fresh_client` gives each run time a client
/// that has learned nothing; `warmup` rounds per run time are waited on but not reported (the
/// client learns from them), then `rounds` are.
#[allow(clippy::too_many_arguments)]
async fn run_schedule(
    sim: &Sim,
    admin: &reqwest::Client,
    wait: &TaskWait,
    run_times: &[u64],
    concurrent: usize,
    fresh_client: bool,
    warmup: usize,
    rounds: usize,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut client = new_client(sim);
    for &run_ms in run_times {
        if fresh_client {
            client = new_client(sim);
        }
        set_imgdel_ms(admin, sim, run_ms).await;
        for round in 0..warmup + rounds {
            let client = &client;
            let tasks = (0..concurrent).map(|i| {
                let volume = format!("iso/bench-{i}.iso");
                async move { one_task(client, run_ms, wait, &volume).await }
            });
            let done = futures_util::future::join_all(tasks).await;
            if round >= warmup {
                samples.extend(done);
            }
        }
    }
    samples
}

fn new_client(sim: &Sim) -> Client {
    Client::new(ClientConfig::new(
        sim.endpoint(),
        ApiToken::parse(sim.token()).unwrap(),
        TlsTrust::CaPem(sim.ca_pem().to_owned()),
    ))
    .unwrap()
}

fn report(name: &str, samples: &[Sample]) {
    let mut lat: Vec<Duration> = samples.iter().map(|s| s.latency_upper).collect();
    lat.sort();
    let mut brackets: Vec<Duration> = samples.iter().map(|s| s.bracket).collect();
    brackets.sort();
    let polls: u64 = samples.iter().map(|s| u64::from(s.polls)).sum();
    let waited: f64 = samples.iter().map(|s| s.waited.as_secs_f64()).sum();
    println!(
        "{name:<38} n={:<4} median={:>7.1} ms  p95={:>7.1} ms  max={:>7.1} ms  \
         (bracket median {:.1} ms)  polls per task={:.2}  req/s per waiting task={:.2}",
        samples.len(),
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.95).as_secs_f64() * 1e3,
        lat.last().unwrap().as_secs_f64() * 1e3,
        percentile(&brackets, 0.5).as_secs_f64() * 1e3,
        polls as f64 / samples.len() as f64,
        polls as f64 / waited,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sim = Sim::start(SimConfig::default(), "127.0.0.1:0".parse().unwrap(), None)
            .await
            .unwrap();
        let admin = reqwest::Client::builder()
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(sim.ca_pem().as_bytes()).unwrap())
            .build()
            .unwrap();

        let steps: u64 = if quick { 8 } else { 20 };
        let concurrent = if quick { 4 } else { 10 };
        // Task run times spread evenly over 0..2 s, offset so they are not all round numbers.
        let sweep: Vec<u64> = (0..steps).map(|i| 7 + i * 2000 / steps).collect();

        let default_wait = TaskWait::default();
        let no_learning = TaskWait {
            learn: false,
            ..TaskWait::default()
        };
        let fixed = |first_ms: u64, backoff: f64, ceiling_ms: u64| TaskWait {
            first_poll: Duration::from_millis(first_ms),
            backoff,
            max_interval: Duration::from_millis(ceiling_ms),
            learn: false,
            ..TaskWait::default()
        };
        let scenarios: Vec<(&str, TaskWait, bool, usize, usize)> = vec![
            // A fleet's later tasks: the same length was seen before by this client.
            (
                "default, length seen before",
                default_wait.clone(),
                true,
                1,
                2,
            ),
            // A fleet's first wave: nothing learned, tasks sent together.
            (
                "default, first of its kind",
                default_wait.clone(),
                true,
                0,
                1,
            ),
            // One client through the whole sweep: every length differs from the last.
            (
                "default, length drifting",
                default_wait.clone(),
                false,
                0,
                1,
            ),
            ("no learning (25 ms, x4, 2 s)", no_learning, true, 0, 1),
            (
                "previous default (5 ms, x1.25, 1 s)",
                fixed(5, 1.25, 1000),
                true,
                0,
                1,
            ),
            (
                "baseline: fixed 1 s polling",
                fixed(1000, 1.0, 1000),
                true,
                0,
                1,
            ),
        ];
        for (name, wait, fresh, warmup, rounds) in scenarios {
            let samples = run_schedule(
                &sim, &admin, &wait, &sweep, concurrent, fresh, warmup, rounds,
            )
            .await;
            report(name, &samples);
        }

        // Steady-state cost of one long wait: the poll rate at the ceiling.
        let long_ms = if quick { 4000 } else { 10_000 };
        let samples = run_schedule(&sim, &admin, &default_wait, &[long_ms], 1, true, 0, 1).await;
        report(&format!("default, one {} s task", long_ms / 1000), &samples);

        sim.shutdown().await;
    });
}
