//! The cost profile (`cost_profile`): what a request, a lock and a clone cost on a real node.
//! Each test names the PVE source it reproduces (repository `path` `function`, at the tags
//! read: pve-manager 9.2 (14a22df), pve-http-server 5c9e4ea, qemu-server 9.2.6,
//! pve-guest-common 4a8f6cb, pve-storage 9.1.7, pve-common 9.2.1, pve-cluster 9.1.6).
//!
//! The tests run on tokio's paused clock with auto-advance held off (a blocking task
//! inhibits it), so simulated time moves only when a test advances it, in steps after which
//! the simulator settles: nothing depends on the machine's speed. Network I/O still flows
//! while the clock stands still; what a test waits for it polls through the admin API with
//! a real-time deadline.

use std::future::Future;
use std::time::Duration;

use pvesim::inspect::{CostStats, PoolStats, SimState};
use pvesim::{CostProfile, ServiceTimes, SimConfig, StorageCost};
use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use crate::common::{self, skipped};

/// How long a test may take in real time: it waits only for what needs no simulated time.
const REAL_DEADLINE: Duration = Duration::from_secs(60);

/// A simulator with a cost profile, on a clock only the test moves.
struct Clocked {
    sim: pvesim::Sim,
    /// A new connection per request: no request ever meets a connection the idle timeout
    /// closed while the test moved the clock.
    client: reqwest::Client,
    auth: String,
    /// Held until the test ends: while a blocking task runs, tokio's paused clock does not
    /// advance by itself.
    _frozen: std::sync::mpsc::Sender<()>,
    /// Turns true once the test has run for [`REAL_DEADLINE`] of real time.
    expired: tokio::sync::watch::Receiver<bool>,
}

/// Call first in a `#[tokio::test(start_paused = true)]` test: from here on, simulated time
/// moves only by [`advance`].
fn freeze() -> std::sync::mpsc::Sender<()> {
    let (hold, held) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = held.recv();
    });
    hold
}

/// The default world with clones that take no time of their own (only the profile's disk
/// work), and `profile`.
fn config(profile: CostProfile) -> SimConfig {
    let mut config = SimConfig::default();
    config.timings.clone_config_ms = 0;
    for ms in config.timings.task_ms.values_mut() {
        *ms = 0;
    }
    config.timings.cluster_resources_lag_ms = 0;
    config.cost_profile = Some(profile);
    config
}

/// A profile whose requests cost nothing: only locks and disks take time.
fn free_requests() -> CostProfile {
    CostProfile {
        service_ms: ServiceTimes {
            read: 0,
            write: 0,
            task_start: 0,
            proxy: 0,
            upload_per_mib: 0,
        },
        ..CostProfile::default()
    }
}

async fn start(config: SimConfig) -> Clocked {
    let frozen = freeze();
    let sim = pvesim::testing::start(config).await;
    let ca = reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).expect("CA parses");
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .http1_only()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client builds");
    let auth = format!("PVEAPIToken={}", sim.token());
    let (expire, expired) = tokio::sync::watch::channel(false);
    std::thread::spawn(move || {
        std::thread::sleep(REAL_DEADLINE);
        let _ = expire.send(true);
    });
    Clocked {
        sim,
        client,
        auth,
        _frozen: frozen,
        expired,
    }
}

/// Moves simulated time by `ms` in steps of `step` ms, letting the simulator act on each
/// step before the next (a chain of timers keeps its exact times).
async fn advance(ms: u64, step: u64) {
    let mut moved = 0;
    while moved < ms {
        let by = step.min(ms - moved);
        tokio::time::advance(Duration::from_millis(by)).await;
        settle().await;
        moved += by;
    }
}

/// Lets every task the last step woke run until none is ready.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

type Pending = JoinHandle<(StatusCode, String)>;

impl Clocked {
    /// `future`, or a panic naming `what` once the test ran out of real time.
    async fn within<F: Future>(&self, what: &str, future: F) -> F::Output {
        let mut expired = self.expired.clone();
        tokio::select! {
            output = future => output,
            _ = expired.wait_for(|expired| *expired) => {
                panic!("{what}: the test ran for {REAL_DEADLINE:?} of real time")
            }
        }
    }

    /// The answer to a request sent in the background.
    async fn reply(&self, what: &str, pending: Pending) -> (StatusCode, String) {
        self.within(what, pending)
            .await
            .expect("the request's task")
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api2/json{path}", self.sim.endpoint())
    }

    /// Sends a request in the background: it may need simulated time to be answered.
    fn send(&self, request: reqwest::RequestBuilder) -> Pending {
        let request = request.header("Authorization", &self.auth);
        tokio::spawn(async move {
            let response = request.send().await.expect("request answered");
            let status = response.status();
            (status, response.text().await.expect("body read"))
        })
    }

    fn get(&self, path: &str) -> Pending {
        self.send(self.client.get(self.url(path)))
    }

    fn post(&self, path: &str, form: &[(&str, &str)]) -> Pending {
        self.send(self.client.post(self.url(path)).form(form))
    }

    fn put(&self, path: &str, form: &[(&str, &str)]) -> Pending {
        self.send(self.client.put(self.url(path)).form(form))
    }

    async fn admin<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        leaf: &str,
    ) -> T {
        let url = format!("{}/_sim/{leaf}", self.sim.endpoint());
        let request = self
            .client
            .request(method, url)
            .header("Authorization", &self.auth);
        let response = request.send().await.expect("admin answers");
        assert!(
            response.status().is_success(),
            "admin {leaf}: {}",
            response.status()
        );
        response.json().await.expect("admin JSON")
    }

    async fn costs(&self) -> CostStats {
        self.admin(reqwest::Method::GET, "costs").await
    }

    async fn state(&self) -> SimState {
        self.admin(reqwest::Method::GET, "state").await
    }

    /// Polls `GET /_sim/costs` until `check` holds.
    async fn costs_until(&self, what: &str, check: impl Fn(&CostStats) -> bool) -> CostStats {
        let started = std::time::Instant::now();
        loop {
            let costs = self.costs().await;
            if check(&costs) {
                return costs;
            }
            assert!(
                started.elapsed() < REAL_DEADLINE,
                "{what} never held: {costs:#?}"
            );
            tokio::task::yield_now().await;
        }
    }

    /// A task's status (`GET .../tasks/{upid}/status`), on a profile where reads are free.
    async fn task(&self, upid: &str) -> Value {
        let node = upid.split(':').nth(1).expect("UPID names its node");
        let path = format!("/nodes/{node}/tasks/{}/status", common::encode(upid));
        data(self.reply("task status", self.get(&path)).await)
    }

    /// The task's exit status once it stopped, else `None`.
    async fn exit(&self, upid: &str) -> Option<String> {
        let status = self.task(upid).await;
        (status["status"] == "stopped").then(|| status["exitstatus"].as_str().unwrap().into())
    }

    /// The task's log lines.
    async fn log(&self, upid: &str) -> Vec<String> {
        let node = upid.split(':').nth(1).expect("UPID names its node");
        let path = format!(
            "/nodes/{node}/tasks/{}/log?limit=1000",
            common::encode(upid)
        );
        let lines = data(self.reply("task log", self.get(&path)).await);
        let lines = lines.as_array().expect("log lines").iter();
        lines
            .map(|l| l["t"].as_str().unwrap().to_string())
            .collect()
    }

    /// Starts a clone of `vmid` on pve1 as `newid` and returns its UPID (on a profile where
    /// requests are free).
    async fn clone_vm(&self, vmid: u32, newid: u32, extra: &[(&str, &str)]) -> String {
        let newid = newid.to_string();
        let mut form = vec![("newid", newid.as_str())];
        form.extend_from_slice(extra);
        let path = format!("/nodes/pve1/qemu/{vmid}/clone");
        let answer = self.reply("clone", self.post(&path, &form)).await;
        data(answer).as_str().expect("a UPID").to_string()
    }
}

/// The `data` of a 200 answer.
fn data((status, body): (StatusCode, String)) -> Value {
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str::<Value>(&body).expect("JSON")["data"].clone()
}

fn pool<'c>(costs: &'c CostStats, node: &str, daemon: &str) -> &'c PoolStats {
    let found = costs
        .pools
        .iter()
        .find(|p| p.node == node && p.daemon == daemon);
    found.unwrap_or_else(|| panic!("no {daemon} on {node}: {costs:#?}"))
}

fn busy_workers(pool: &PoolStats) -> usize {
    pool.workers.iter().filter(|w| w.busy).count()
}

fn served(pool: &PoolStats) -> u64 {
    pool.workers.iter().map(|w| w.requests).sum()
}

fn busy_ms(pool: &PoolStats) -> Vec<u64> {
    pool.workers.iter().map(|w| w.busy_ms).collect()
}

/// pve-manager `PVE/Service/pveproxy.pm`: `max_workers => 3`; pve-http-server
/// `APIServer/AnyEvent.pm` `handle_api2_request`: a worker runs an unprotected handler
/// itself, so a fourth request waits until one of the three is done. Six reads of 100 ms at
/// once: three are served at 100 ms, three wait 100 ms and are served at 200 ms.
#[tokio::test(start_paused = true)]
async fn worker_pool_queues_requests_beyond_its_workers() {
    let mut profile = CostProfile::default();
    profile.service_ms.read = 100;
    let sim = start(config(profile)).await;
    let pending: Vec<Pending> = (0..6).map(|_| sim.get("/version")).collect();
    sim.costs_until("three served, three queued", |c| {
        let proxy = pool(c, "pve1", "pveproxy");
        busy_workers(proxy) == 3 && proxy.queued == 3
    })
    .await;
    advance(100, 100).await;
    let costs = sim.costs().await;
    let proxy = pool(&costs, "pve1", "pveproxy");
    assert_eq!(
        (served(proxy), busy_workers(proxy), proxy.queued),
        (3, 3, 0)
    );
    advance(100, 100).await;
    for answer in pending {
        let (status, body) = sim.reply("a read", answer).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let costs = sim.costs().await;
    let proxy = pool(&costs, "pve1", "pveproxy");
    assert_eq!(busy_ms(proxy), vec![200, 200, 200]);
    assert_eq!(served(proxy), 6);
    assert_eq!(
        (proxy.waits, proxy.wait_ms, proxy.max_wait_ms),
        (3, 300, 100)
    );
    assert_eq!(proxy.max_queue, 3);
    assert_eq!(costs.now_ms, 200);
    // Nothing was forwarded: pvedaemon never worked.
    assert_eq!(served(pool(&costs, "pve1", "pvedaemon")), 0);
    sim.sim.shutdown().await;
}

/// A raw keep-alive connection to the simulator.
type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// Sends `GET path` on `tls` and reads the whole answer (head and `Content-Length` body).
async fn raw_get(tls: &mut Tls, auth: &str, path: &str) -> String {
    let request =
        format!("GET /api2/json{path} HTTP/1.1\r\nHost: sim\r\nAuthorization: {auth}\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| l.strip_prefix("content-length: ")?.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
        let read = tls.read(&mut buffer).await.unwrap();
        assert!(read > 0, "connection closed mid-answer: {text}");
        received.extend_from_slice(&buffer[..read]);
    }
}

/// Whether an answer's head says `Connection: Keep-Alive` (hyper writes the name in lower
/// case).
fn keeps_alive(answer: &str) -> bool {
    answer
        .to_ascii_lowercase()
        .contains("\r\nconnection: keep-alive\r\n")
}

/// Reads until the server ends the connection; what it sent meanwhile.
async fn read_to_close(tls: &mut Tls) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match tls.read(&mut buffer).await {
            Ok(0) | Err(_) => return received,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

/// pve-http-server `APIServer/AnyEvent.pm`: a worker serves the connections it accepted
/// (`accept_connections`) and runs each request itself (`handle_api2_request`), so a
/// request on a kept-alive connection waits for *its* worker even while another is idle.
#[tokio::test(start_paused = true)]
async fn a_connection_waits_for_the_worker_that_accepted_it() {
    let mut profile = CostProfile {
        pveproxy_workers: 2,
        ..CostProfile::default()
    };
    profile.service_ms.read = 100;
    let sim = start(config(profile)).await;
    let mut kept = sim.within("connect", common::raw_tls(&sim.sim)).await;
    let auth = sim.auth.clone();
    // The kept connection's first request is taken by the first idle worker, 0.
    let first = tokio::spawn(async move {
        let answer = raw_get(&mut kept, &auth, "/version").await;
        (kept, answer)
    });
    sim.costs_until("worker 0 busy", |c| {
        pool(c, "pve1", "pveproxy").workers[0].busy
    })
    .await;
    advance(100, 100).await;
    let (mut kept, answer) = sim.within("first answer", first).await.unwrap();
    assert!(keeps_alive(&answer), "{answer}");
    // A new connection takes worker 0 again (both are idle); the kept connection's next
    // request then waits for worker 0 while worker 1 stays idle.
    let other = sim.get("/version");
    sim.costs_until("worker 0 serving the new connection", |c| {
        let proxy = pool(c, "pve1", "pveproxy");
        proxy.workers[0].busy && served(proxy) == 1
    })
    .await;
    let auth = sim.auth.clone();
    let second = tokio::spawn(async move { raw_get(&mut kept, &auth, "/version").await });
    sim.costs_until("the kept connection queued", |c| {
        pool(c, "pve1", "pveproxy").queued == 1
    })
    .await;
    advance(100, 100).await;
    let costs = sim
        .costs_until("worker 0 serving the kept connection", |c| {
            let proxy = pool(c, "pve1", "pveproxy");
            proxy.workers[0].busy && proxy.queued == 0
        })
        .await;
    assert!(!pool(&costs, "pve1", "pveproxy").workers[1].busy);
    advance(100, 100).await;
    assert_eq!(sim.reply("new connection", other).await.0, StatusCode::OK);
    let answer = sim.within("second answer", second).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let costs = sim.costs().await;
    let proxy = pool(&costs, "pve1", "pveproxy");
    assert_eq!(busy_ms(proxy), vec![300, 0]);
    assert_eq!((proxy.waits, proxy.wait_ms), (1, 100));
    sim.sim.shutdown().await;
}

/// pve-http-server `APIServer/AnyEvent.pm`: the connection's handle has an inactivity
/// `timeout` of 5 s (`new`; pveproxy sets none), restarted by every read and write
/// (`response` resets it); when it fires, `client_do_disconnect` ends TLS (`stoptls`) and
/// shuts the socket down. A request sent 4.999 s after an answer is served; 5 s of silence
/// after that, the server closes the connection on its own, and a client that sends on it
/// then gets no answer: the race a client pool with a longer idle time meets (bpg#3082).
#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_pveproxys_timeout() {
    let sim = start(config(free_requests())).await;
    let mut tls = sim.within("connect", common::raw_tls(&sim.sim)).await;
    let answer = sim
        .within("first", raw_get(&mut tls, &sim.auth, "/version"))
        .await;
    assert!(keeps_alive(&answer), "{answer}");
    advance(4999, 4999).await;
    let answer = sim
        .within("at 4.999 s", raw_get(&mut tls, &sim.auth, "/version"))
        .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    advance(5000, 5000).await;
    let costs = sim
        .costs_until("the idle close", |c| c.connections.idle_closed == 1)
        .await;
    assert_eq!(costs.connections.opened, 1);
    // The close is TLS's close_notify and then the end of the stream: a clean EOF.
    let after = sim.within("the close", read_to_close(&mut tls)).await;
    assert!(after.is_empty(), "{}", String::from_utf8_lossy(&after));
    // A request sent now finds nobody: no answer, whatever the client's pool believed.
    let request = format!(
        "GET /api2/json/version HTTP/1.1\r\nHost: sim\r\nAuthorization: {}\r\n\r\n",
        sim.auth
    );
    let _ = tls.write_all(request.as_bytes()).await;
    let late = sim
        .within("the late request", read_to_close(&mut tls))
        .await;
    assert!(late.is_empty(), "{}", String::from_utf8_lossy(&late));
    sim.sim.shutdown().await;
}

/// A request being served is not idle time: pveproxy turns the timeout off while it
/// handles a request (`AnyEvent.pm` `handle_request`: `$reqstate->{hdl}->timeout(0)`) and on
/// again when it answers. A read of 6 s on a kept connection is answered, and the 5 s count
/// starts from that answer.
#[tokio::test(start_paused = true)]
async fn a_slow_answer_does_not_count_as_idle_time() {
    let mut profile = CostProfile::default();
    profile.service_ms.read = 6000;
    let sim = start(config(profile)).await;
    let mut tls = sim.within("connect", common::raw_tls(&sim.sim)).await;
    let auth = sim.auth.clone();
    let slow = tokio::spawn(async move {
        let answer = raw_get(&mut tls, &auth, "/version").await;
        (tls, answer)
    });
    sim.costs_until("the read in service", |c| {
        busy_workers(pool(c, "pve1", "pveproxy")) == 1
    })
    .await;
    advance(6000, 1000).await;
    let (mut tls, answer) = sim.within("the slow answer", slow).await.unwrap();
    assert!(keeps_alive(&answer), "{answer}");
    advance(4000, 1000).await;
    assert_eq!(sim.costs().await.connections.idle_closed, 0);
    advance(1000, 1000).await;
    sim.costs_until("the idle close", |c| c.connections.idle_closed == 1)
        .await;
    assert!(
        sim.within("the close", read_to_close(&mut tls))
            .await
            .is_empty()
    );
    sim.sim.shutdown().await;
}

/// pve-manager `PVE/Service/pveproxy.pm`: `keep_alive => 100`, counted down for every
/// request (`AnyEvent.pm` `push_request_header`); the answer that brings it to 0 says
/// `Connection: close` (`response`) and the connection ends after it.
#[tokio::test(start_paused = true)]
async fn a_connection_carries_at_most_a_hundred_requests() {
    let sim = start(config(free_requests())).await;
    let mut tls = sim.within("connect", common::raw_tls(&sim.sim)).await;
    for n in 1..=99 {
        let answer = sim
            .within("a request", raw_get(&mut tls, &sim.auth, "/version"))
            .await;
        assert!(keeps_alive(&answer), "request {n}: {answer}");
    }
    let answer = sim
        .within("the last", raw_get(&mut tls, &sim.auth, "/version"))
        .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(!keeps_alive(&answer), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n")
    );
    assert!(
        sim.within("the close", read_to_close(&mut tls))
            .await
            .is_empty()
    );
    let costs = sim.costs().await;
    assert_eq!(costs.connections.request_limit_closed, 1);
    assert_eq!(costs.connections.idle_closed, 0);
    sim.sim.shutdown().await;
}

/// A profile whose requests cost nothing and whose clones cost only on `storage`:
/// `alloc_ms` under its lock, then a copy at `copy_mib_per_s`.
fn clone_costs(storage: &str, alloc_ms: u64, copy_mib_per_s: u64) -> CostProfile {
    let mut profile = free_requests();
    let cost = StorageCost {
        alloc_ms,
        linked_clone_ms: alloc_ms,
        copy_mib_per_s,
    };
    profile.storage.insert(storage.to_string(), cost);
    profile
}

/// qemu-server `src/PVE/API2/Qemu.pm` `clone_vm`: the worker takes the source's config lock
/// shared when the source is stopped (`lock_config_shared($vmid, 1, …)`), so clones of one
/// template run side by side; the new VMID's lock is exclusive. Eight full clones of the
/// template at once all hold their locks at once, wait for none, and all succeed; only
/// their allocations on the one storage take turns (see the next test).
#[tokio::test(start_paused = true)]
async fn parallel_clones_of_a_stopped_template_all_proceed() {
    let sim = start(config(clone_costs("local-lvm", 100, 1024))).await;
    let mut upids = Vec::new();
    for newid in 9101..=9108 {
        upids.push(
            sim.clone_vm(9000, newid, &[("full", "1"), ("storage", "local-lvm")])
                .await,
        );
    }
    settle().await;
    let state = sim.state().await;
    let cloning = state
        .vms
        .iter()
        .filter(|vm| vm.lock.as_deref() == Some("clone"));
    assert_eq!(
        cloning.count(),
        8,
        "every clone holds its locks and made its VM"
    );
    // Allocations take turns (8 × 100 ms), then each copies 4 GiB at 1 GiB/s.
    advance(4800, 100).await;
    for upid in &upids {
        assert_eq!(sim.exit(upid).await.as_deref(), Some("OK"), "{upid}");
    }
    let costs = sim.costs().await;
    assert_eq!(costs.config_locks.waits, 0, "{costs:#?}");
    assert_eq!(costs.config_locks.timeouts, 0);
    let storage = &costs.storage_locks[0];
    assert_eq!(
        (storage.storage.as_str(), storage.node.as_deref()),
        ("local-lvm", Some("pve1"))
    );
    assert_eq!((storage.allocations, storage.held_ms), (8, 800));
    assert_eq!((storage.waits, storage.wait_ms), (7, 2800));
    sim.sim.shutdown().await;
}

/// `clone_vm` holds the template's shared lock for the whole clone; an operation that needs
/// the template's lock exclusively waits for it: a config update takes it through
/// `lock_config` (pve-guest-common `src/PVE/AbstractConfig.pm`: `lock_config_full($vmid,
/// 10, …)`), and pve-common `src/PVE/Tools.pm` `lock_file_full` gives up after those 10 s
/// with "can't lock file '…' - got timeout". The update holds its pvedaemon worker while it
/// waits, and fails; the clone goes on.
#[tokio::test(start_paused = true)]
async fn an_exclusive_lock_on_the_template_waits_out_a_clone_and_fails() {
    // The clone copies 4 GiB at 64 MiB/s: 64 s.
    let sim = start(config(clone_costs("local-lvm", 0, 64))).await;
    let clone = sim
        .clone_vm(9000, 9101, &[("full", "1"), ("storage", "local-lvm")])
        .await;
    settle().await;
    let update = sim.put("/nodes/pve1/qemu/9000/config", &[("description", "new")]);
    sim.costs_until("the update waiting in pvedaemon", |c| {
        busy_workers(pool(c, "pve1", "pvedaemon")) == 1
    })
    .await;
    advance(9900, 100).await;
    assert!(!update.is_finished());
    advance(100, 100).await;
    let (status, body) = sim.reply("the update", update).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let message = serde_json::from_str::<Value>(&body).unwrap()["message"].clone();
    assert_eq!(
        message,
        "can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout\n"
    );
    let costs = sim.costs().await;
    assert_eq!(costs.config_locks.timeouts, 1);
    let timeout = &costs.lock_timeouts[0];
    assert_eq!(timeout.lock, "/var/lock/qemu-server/lock-9000.conf");
    assert_eq!(timeout.at_ms, 10_000);
    assert_eq!(
        busy_ms(pool(&costs, "pve1", "pvedaemon"))
            .iter()
            .sum::<u64>(),
        10_000
    );
    assert_eq!(sim.exit(&clone).await, None, "the clone goes on");
    advance(54_000, 1000).await;
    assert_eq!(sim.exit(&clone).await.as_deref(), Some("OK"));
    sim.sim.shutdown().await;
}

/// `clone_vm`: a running source is locked exclusively (`lock_config_full($vmid, 1, …)`),
/// with a 1 s timeout: a second clone of a running VM fails in its worker after 1 s, while
/// the first copies.
#[tokio::test(start_paused = true)]
async fn a_second_clone_of_a_running_vm_fails_after_one_second() {
    // VM 100 (running) has a 32 GiB disk on local-lvm; copying it takes 128 s.
    let sim = start(config(clone_costs("local-lvm", 0, 256))).await;
    let first = sim.clone_vm(100, 9101, &[]).await;
    settle().await;
    let second = sim.clone_vm(100, 9102, &[]).await;
    advance(900, 100).await;
    assert_eq!(sim.exit(&second).await, None);
    advance(100, 100).await;
    assert_eq!(
        sim.exit(&second).await.as_deref(),
        Some("can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout")
    );
    assert_eq!(sim.exit(&first).await, None);
    let costs = sim.costs().await;
    assert_eq!(
        (costs.config_locks.timeouts, costs.lock_timeouts[0].at_ms),
        (1, 1000)
    );
    sim.sim.shutdown().await;
}

/// pve-storage `src/PVE/Storage.pm` `vdisk_alloc` runs under `cluster_lock_storage`
/// (`src/PVE/Storage/Plugin.pm`): for a local storage a flock on
/// `/var/lock/pve-manager/pve-storage-<id>` through pve-common `src/PVE/Tools.pm`
/// `lock_file` with no timeout, which `lock_file_full` makes 10 s. Twelve full clones to
/// local-lvm whose allocation takes 1.1 s: ten allocate in turn (the tenth at 9.9 s); the
/// eleventh and twelfth are still waiting at 10 s and fail as `clone_vm` fails, after its
/// `sleep 1`, with "clone failed: can't lock file '…' - got timeout" (CAPMOX#389).
#[tokio::test(start_paused = true)]
async fn allocations_on_one_storage_serialise_and_the_eleventh_times_out() {
    let sim = start(config(clone_costs("local-lvm", 1100, 1_048_576))).await;
    let mut upids = Vec::new();
    for newid in 9101..=9112 {
        upids.push(
            sim.clone_vm(9000, newid, &[("full", "1"), ("storage", "local-lvm")])
                .await,
        );
    }
    advance(10_000, 100).await;
    let costs = sim.costs().await;
    let storage = &costs.storage_locks[0];
    assert_eq!(storage.lock, "/var/lock/pve-manager/pve-storage-local-lvm");
    assert_eq!(
        (storage.allocations, storage.timeouts),
        (9, 2),
        "{costs:#?}"
    );
    assert!(storage.held, "the tenth allocates from 9.9 s to 11 s");
    let message = "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout";
    for timeout in &costs.lock_timeouts {
        assert_eq!((timeout.at_ms, timeout.message.as_str()), (10_000, message));
    }
    advance(1100, 100).await;
    let mut exits = Vec::new();
    for upid in &upids {
        exits.push(sim.exit(upid).await.expect("every clone ended by 11.1 s"));
    }
    let failed = format!("clone failed: {message}");
    assert_eq!(exits.iter().filter(|e| *e == "OK").count(), 10, "{exits:?}");
    assert_eq!(
        exits.iter().filter(|e| **e == failed).count(),
        2,
        "{exits:?}"
    );
    // The failed clones waited in their logs, and left no VM behind.
    let state = sim.state().await;
    for ((upid, exit), newid) in upids.iter().zip(&exits).zip(9101..) {
        let exists = state.vms.iter().any(|vm| vm.vmid == newid);
        assert_eq!(exists, *exit == "OK", "VM {newid}: {exit}");
        if *exit == failed {
            let log = sim.log(upid).await;
            assert!(
                log.contains(&"trying to acquire lock...".to_string()),
                "{log:?}"
            );
        }
    }
    let costs = sim.costs().await;
    let storage = &costs.storage_locks[0];
    assert_eq!((storage.allocations, storage.held_ms), (10, 11_000));
    assert_eq!(storage.max_wait_ms, 9900);
    sim.sim.shutdown().await;
}

/// For a shared storage the lock is pmxcfs' (pve-cluster `src/PVE/Cluster.pm`
/// `cfs_lock_storage`, `$cfs_lock`): `mkdir` of the lock directory, retried after sleeping
/// a tenth of the seconds left (at most 1 s: 1.0, 0.9, 0.9, 0.8 … 0.1 s), printing "trying to
/// acquire cfs lock 'storage-<id>' ..." at most once a second, until the next sleep would
/// reach 10 s: it gives up at 9.9 s with "cfs-lock 'storage-<id>' error: got lock request
/// timeout" (LINBIT/linstor-proxmox#73). A waiter takes the lock only when it tries again,
/// so a lock freed at 0.5 s is taken at 1.0 s.
#[tokio::test(start_paused = true)]
async fn shared_storage_allocations_poll_the_cluster_lock() {
    // Linked clones of the template on vmdata (NFS, shared): `vdisk_clone` under the lock.
    let sim = start(config(clone_costs("vmdata", 500, 1024))).await;
    let first = sim.clone_vm(9000, 9101, &[("full", "0")]).await;
    let second = sim.clone_vm(9000, 9102, &[("full", "0")]).await;
    advance(1500, 100).await;
    assert_eq!(sim.exit(&first).await.as_deref(), Some("OK"));
    assert_eq!(sim.exit(&second).await.as_deref(), Some("OK"));
    let costs = sim.costs().await;
    let storage = &costs.storage_locks[0];
    assert_eq!(
        (storage.lock.as_str(), storage.node.as_deref()),
        ("storage-vmdata", None)
    );
    // One take waited (the second's); the first found the lock free.
    assert_eq!(
        (
            storage.allocations,
            storage.held_ms,
            storage.waits,
            storage.wait_ms
        ),
        (2, 1000, 1, 1000)
    );
    let log = sim.log(&second).await;
    let waiting = "trying to acquire cfs lock 'storage-vmdata' ...".to_string();
    assert_eq!(log.iter().filter(|l| **l == waiting).count(), 1, "{log:?}");

    // A clone that holds the lock for 15 s: the next one gives up at 9.9 s, having said so
    // once for each second it waited.
    let mut profile = clone_costs("vmdata", 15_000, 1024);
    profile.storage.get_mut("vmdata").unwrap().linked_clone_ms = 15_000;
    let sim = start(config(profile)).await;
    let holder = sim.clone_vm(9000, 9101, &[("full", "0")]).await;
    let waiter = sim.clone_vm(9000, 9102, &[("full", "0")]).await;
    advance(9800, 100).await;
    assert!(sim.costs().await.lock_timeouts.is_empty());
    advance(100, 100).await;
    let costs = sim.costs().await;
    let message = "cfs-lock 'storage-vmdata' error: got lock request timeout";
    assert_eq!(costs.lock_timeouts[0].message, message);
    assert_eq!(costs.lock_timeouts[0].at_ms, 9900);
    advance(1000, 100).await;
    let failed = format!("clone failed: {message}");
    assert_eq!(sim.exit(&waiter).await, Some(failed));
    let log = sim.log(&waiter).await;
    assert_eq!(log.iter().filter(|l| **l == waiting).count(), 9, "{log:?}");
    assert_eq!(sim.exit(&holder).await, None);
    sim.sim.shutdown().await;
}

/// qemu-server `src/PVE/QemuServer.pm` `clone_disk`: a full clone allocates
/// (`vdisk_alloc`) and then copies the whole disk (`qemu-img convert`), so its time grows
/// with the disk's size and with the storage's speed; a linked clone (`vdisk_clone`) copies
/// nothing. Times from the profile's storage costs.
#[tokio::test(start_paused = true)]
async fn a_clone_takes_longer_for_a_bigger_disk_and_a_slower_storage() {
    let mut profile = clone_costs("local-lvm", 500, 1024);
    let slow = StorageCost {
        alloc_ms: 100,
        linked_clone_ms: 300,
        copy_mib_per_s: 512,
    };
    profile.storage.insert("dir".into(), slow.clone());
    profile.storage.insert("vmdata".into(), slow);
    let mut config = config(profile);
    let mut big = config.vms[0].clone();
    big.vmid = 9001;
    big.config.insert("name".into(), "big-template".into());
    let scsi0 = "local-lvm:base-9001-disk-0,iothread=1,size=8G";
    big.config.insert("scsi0".into(), scsi0.into());
    config.vms.push(big);
    let sim = start(config).await;
    let cases = [
        (9000, 9101, "local-lvm", "1", 4500), // 4 GiB at 1 GiB/s, after 0.5 s
        (9000, 9102, "local", "1", 8100),     // 4 GiB at 512 MiB/s (dir), after 0.1 s
        (9001, 9103, "local-lvm", "1", 8500), // 8 GiB at 1 GiB/s, after 0.5 s
        (9000, 9104, "", "0", 300),           // linked on vmdata: 0.3 s, nothing copied
    ];
    for (vmid, newid, storage, full, expected_ms) in cases {
        let mut form = vec![("full", full)];
        if !storage.is_empty() {
            form.push(("storage", storage));
        }
        let upid = sim.clone_vm(vmid, newid, &form).await;
        let mut elapsed = 0;
        while sim.exit(&upid).await.is_none() {
            assert!(elapsed < 20_000, "clone {newid} never ended");
            advance(100, 100).await;
            elapsed += 100;
        }
        assert_eq!(sim.exit(&upid).await.as_deref(), Some("OK"));
        assert_eq!(
            elapsed, expected_ms,
            "clone {vmid} -> {newid} to {storage:?}"
        );
    }
    sim.sim.shutdown().await;
}

/// Where each request's time is spent (pve-manager `src/PVE/HTTPServer.pm` `rest_handler`,
/// pve-http-server `APIServer/AnyEvent.pm` `handle_api2_request`, `proxy_request`): an
/// unprotected method for the node the client talks to runs in that node's pveproxy; a
/// `protected` one is forwarded to its pvedaemon (one `proxy` hop); one with `proxyto =>
/// 'node'` for another node goes to that node's pveproxy first. Each kind of request keeps
/// its worker for its own time; an upload's body costs the entry worker per MiB.
#[tokio::test(start_paused = true)]
async fn each_request_costs_its_kind_on_the_daemon_that_runs_it() {
    let mut profile = CostProfile {
        service_ms: ServiceTimes {
            read: 10,
            write: 20,
            task_start: 40,
            proxy: 5,
            upload_per_mib: 100,
        },
        ..CostProfile::default()
    };
    profile.route_ms.insert("GET /cluster/resources".into(), 70);
    let sim = start(config(profile)).await;
    // (request, its total time, then busy ms per daemon: pve1 pveproxy, pve1 pvedaemon,
    // pve2 pveproxy, pve2 pvedaemon)
    type Send<'s> = Box<dyn Fn() -> Pending + 's>;
    let cases: Vec<(&str, Send, u64, [u64; 4])> = vec![
        (
            "GET /version",
            Box::new(|| sim.get("/version")),
            10,
            [10, 0, 0, 0],
        ),
        (
            "GET /cluster/resources",
            Box::new(|| sim.get("/cluster/resources")),
            70,
            [70, 0, 0, 0],
        ),
        (
            "GET config of a VM on pve2",
            Box::new(|| sim.get("/nodes/pve2/qemu/101/config")),
            15,
            [5, 0, 10, 0],
        ),
        (
            "GET status/current (protected) on pve1",
            Box::new(|| sim.get("/nodes/pve1/qemu/100/status/current")),
            15,
            [5, 10, 0, 0],
        ),
        (
            "GET status/current (protected) on pve2",
            Box::new(|| sim.get("/nodes/pve2/qemu/101/status/current")),
            20,
            [5, 0, 5, 10],
        ),
        (
            "PUT config (synchronous)",
            Box::new(|| sim.put("/nodes/pve1/qemu/100/config", &[("description", "x")])),
            25,
            [5, 20, 0, 0],
        ),
        (
            "POST config (a task)",
            Box::new(|| sim.post("/nodes/pve1/qemu/100/config", &[("description", "y")])),
            45,
            [5, 40, 0, 0],
        ),
    ];
    for (what, send, total, busy) in cases {
        sim.admin::<Value>(reqwest::Method::POST, "costs/reset")
            .await;
        let pending = send();
        sim.costs_until(what, |c| c.pools.iter().any(|p| busy_workers(p) > 0))
            .await;
        advance(total - 1, 1).await;
        assert!(!pending.is_finished(), "{what} answered early");
        advance(1, 1).await;
        let (status, body) = sim.reply(what, pending).await;
        assert_eq!(status, StatusCode::OK, "{what}: {body}");
        let costs = sim.costs().await;
        let spent = [
            ("pve1", "pveproxy"),
            ("pve1", "pvedaemon"),
            ("pve2", "pveproxy"),
            ("pve2", "pvedaemon"),
        ]
        .map(|(node, daemon)| busy_ms(pool(&costs, node, daemon)).iter().sum::<u64>());
        assert_eq!(spent, busy, "{what}");
    }
    // An upload's body of 1 MiB: 100 ms on the entry worker, then its task's start.
    sim.admin::<Value>(reqwest::Method::POST, "costs/reset")
        .await;
    let form = reqwest::multipart::Form::new().text("content", "iso").part(
        "filename",
        reqwest::multipart::Part::bytes(vec![0u8; 1 << 20]).file_name("costs.iso"),
    );
    let url = sim.url("/nodes/pve1/storage/local/upload");
    let upload = sim.send(sim.client.post(url).multipart(form));
    sim.costs_until("the upload", |c| {
        busy_workers(pool(c, "pve1", "pveproxy")) > 0
    })
    .await;
    advance(144, 1).await;
    assert!(!upload.is_finished(), "the upload answered early");
    advance(1, 1).await;
    let (status, body) = sim.reply("upload", upload).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let costs = sim.costs().await;
    assert_eq!(
        busy_ms(pool(&costs, "pve1", "pveproxy"))[0],
        105,
        "{costs:#?}"
    );
    assert_eq!(busy_ms(pool(&costs, "pve1", "pvedaemon"))[0], 40);
    sim.sim.shutdown().await;
}

/// qemu-server `src/PVE/API2/Qemu/Agent.pm` `register_command`: every agent command is
/// `protected => 1, proxyto => 'node'`, so it runs in its node's pvedaemon, and
/// `src/PVE/QemuServer/Agent.pm` `qga_check_running` first pings the agent with `timeout =>
/// 3`. A look at a VM whose agent is not up yet holds a pvedaemon worker for those 3 s
/// before "QEMU guest agent is not running": three such looks take pve1's three workers,
/// and a config write sent after them waits the 3 s.
#[tokio::test(start_paused = true)]
async fn a_look_at_a_silent_agent_holds_a_pvedaemon_worker_for_the_ping_timeout() {
    let mut config = config(free_requests());
    config.timings.agent_ping_timeout_ms = 3000;
    config.vms.push(pvesim::VmSeed {
        vmid: 160,
        node: "pve1".into(),
        running: true,
        config: [("name", "booting"), ("agent", "1")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
    });
    let sim = start(config).await;
    let path = "/nodes/pve1/qemu/160/agent/network-get-interfaces";
    let looks: Vec<Pending> = (0..3).map(|_| sim.get(path)).collect();
    sim.costs_until("three looks hold pve1's pvedaemon", |c| {
        busy_workers(pool(c, "pve1", "pvedaemon")) == 3
    })
    .await;
    let write = sim.put("/nodes/pve1/qemu/160/config", &[("description", "x")]);
    sim.costs_until("the write queued", |c| {
        pool(c, "pve1", "pvedaemon").queued == 1
    })
    .await;
    advance(2999, 100).await;
    assert!(
        !write.is_finished(),
        "the write was served within the pings"
    );
    advance(1, 1).await;
    for look in looks {
        let (status, body) = sim.reply("a look", look).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(body.contains("QEMU guest agent is not running"), "{body}");
    }
    let (status, body) = sim.reply("the write", write).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let costs = sim.costs().await;
    let daemon = pool(&costs, "pve1", "pvedaemon");
    assert_eq!(busy_ms(daemon), vec![3000, 3000, 3000]);
    assert_eq!((daemon.waits, daemon.max_wait_ms), (1, 3000));
    sim.sim.shutdown().await;
}

/// A ping waits in the agent's socket until qemu-ga opens its port, so a look sent less than
/// the ping timeout before the agent starts is answered when it starts:
/// - qemu-server 9.2.6 `src/PVE/QMPClient.pm` `$check_queue` writes `guest-sync-delimited`
///   and the command to the qga socket at once, then waits up to the timeout for the answer;
/// - qemu `hw/char/virtio-console.c` `chr_can_read` asks `virtio_serial_guest_ready`
///   (`hw/char/virtio-serial-bus.c`), which is 0 while the guest has not opened the port
///   (`!port->guest_connected` on a multiport device), so QEMU leaves the bytes unread in
///   the socket until qemu-ga opens it, then reads them and qemu-ga answers.
///
/// With the agent 5 s after the start: a look at the start fails after the 3 s ping, one
/// sent then is answered at 5 s, and each held its pvedaemon worker while it waited.
#[tokio::test(start_paused = true)]
async fn a_look_sent_before_the_agent_starts_is_answered_when_it_starts() {
    let mut config = config(free_requests());
    config.timings.agent_ping_timeout_ms = 3000;
    config.timings.agent_boot_ms = 5000;
    config.vms.push(pvesim::VmSeed {
        vmid: 160,
        node: "pve1".into(),
        running: false,
        config: [
            ("name", "booting"),
            ("agent", "1"),
            ("ide2", "local:iso/booting.iso,media=cdrom"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    });
    let sim = start(config).await;
    let iso = common::seed("booting", common::GOOD_USER_DATA);
    let form = reqwest::multipart::Form::new().text("content", "iso").part(
        "filename",
        reqwest::multipart::Part::bytes(iso).file_name("booting.iso"),
    );
    let url = sim.url("/nodes/pve1/storage/local/upload");
    let upload = data(
        sim.reply("upload", sim.send(sim.client.post(url).multipart(form)))
            .await,
    );
    assert_eq!(
        sim.exit(upload.as_str().unwrap()).await.as_deref(),
        Some("OK")
    );
    let started = sim.post("/nodes/pve1/qemu/160/status/start", &[]);
    let started = data(sim.reply("start", started).await);
    assert_eq!(
        sim.exit(started.as_str().unwrap()).await.as_deref(),
        Some("OK")
    );
    let path = "/nodes/pve1/qemu/160/agent/network-get-interfaces";
    let early = sim.get(path);
    sim.costs_until("the early look holds a worker", |c| {
        busy_workers(pool(c, "pve1", "pvedaemon")) == 1
    })
    .await;
    advance(3000, 100).await;
    let (status, body) = sim.reply("the early look", early).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(body.contains("QEMU guest agent is not running"), "{body}");
    let late = sim.get(path);
    sim.costs_until("the late look holds a worker", |c| {
        busy_workers(pool(c, "pve1", "pvedaemon")) == 1
    })
    .await;
    advance(1999, 100).await;
    assert!(!late.is_finished(), "answered before the agent started");
    advance(1, 1).await;
    let (status, body) = sim.reply("the late look", late).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let costs = sim.costs().await;
    let held: u64 = busy_ms(pool(&costs, "pve1", "pvedaemon")).iter().sum();
    assert_eq!(held, 3000 + 2000, "{costs:#?}");
    sim.sim.shutdown().await;
}

/// Every route pve-sim serves has a dispatch, and where PVE's API schema dump is at hand it
/// is the schema's: `protected` and `proxyto => 'node'` as each method declares them.
#[test]
fn dispatch_follows_the_api_schema() {
    for endpoint in pvesim::schema::endpoints() {
        assert!(
            pvesim::route_dispatch(endpoint.method, endpoint.template).is_some(),
            "{} {} has no dispatch",
            endpoint.method,
            endpoint.template
        );
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/pve/api-schema-full.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        skipped("../shared/pve/api-schema-full.json not present (user machine)");
        return;
    };
    let tree: Value = serde_json::from_str(&text).expect("the schema dump is JSON");
    let mut checked = 0;
    let mut stack = vec![&tree];
    while let Some(node) = stack.pop() {
        if let Some(items) = node.as_array() {
            stack.extend(items);
            continue;
        }
        for (method, info) in node["info"].as_object().into_iter().flatten() {
            let template = node["path"].as_str().unwrap_or_default();
            let Some(ours) = pvesim::route_dispatch(method, template) else {
                continue;
            };
            let protected = info["protected"].as_u64().unwrap_or(0) == 1;
            let proxyto_node = info["proxyto"].as_str() == Some("node");
            assert_eq!(
                (ours.protected, ours.proxyto_node),
                (protected, proxyto_node),
                "{method} {template}"
            );
            checked += 1;
        }
        if let Some(children) = node.get("children") {
            stack.push(children);
        }
    }
    assert_eq!(checked, pvesim::schema::endpoints().len());
}

/// Without `cost_profile` nothing costs anything and `GET /_sim/costs` says so.
#[tokio::test]
async fn without_a_profile_there_are_no_costs() {
    let h = common::start(pvesim::testing::fast_config()).await;
    let response = h
        .client
        .get(format!("{}/_sim/costs", h.sim.endpoint()))
        .header("Authorization", h.auth())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    h.sim.shutdown().await;
}

/// `scripts/pve-profile.sh` only reads: against a simulator it sends nothing but GETs, and
/// what it prints is a config pve-sim takes, holding the profile it measured.
#[tokio::test]
async fn the_profile_script_only_reads_and_prints_a_config() {
    let tools = tokio::process::Command::new("bash")
        .args(["-c", "command -v curl && command -v jq"])
        .output()
        .await;
    if !tools.is_ok_and(|t| t.status.success()) {
        skipped("bash, curl or jq is missing");
        return;
    }
    let mut config = pvesim::testing::fast_config();
    config.cost_profile = Some(CostProfile::default());
    let h = common::start(config).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pve-profile.sh");
    let output = tokio::process::Command::new("bash")
        .arg(script)
        .env("PROXMOX_VE_ENDPOINT", h.sim.endpoint())
        .env("PROXMOX_VE_API_TOKEN", h.sim.token())
        .env("PROXMOX_VE_CA_CERT", h.sim.ca_pem())
        .env("PVE_PROFILE_SAMPLES", "3")
        .output()
        .await
        .expect("the script runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let printed: SimConfig = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not a pve-sim config ({e}): {stderr}"));
    let profile = printed.cost_profile.expect("a cost profile");
    let routes: Vec<&str> = profile.route_ms.keys().map(String::as_str).collect();
    assert_eq!(
        routes,
        [
            "GET /cluster/resources",
            "GET /nodes",
            "GET /nodes/{node}/qemu/{vmid}/config",
            "GET /version"
        ]
    );
    assert!(stderr.contains("entry node pve1"), "{stderr}");
    let journal = h.admin.journal().await;
    assert!(journal.len() > 20, "{journal:?}");
    let writes: Vec<_> = journal.iter().filter(|e| e.method != "GET").collect();
    assert!(writes.is_empty(), "{writes:?}");
    h.sim.shutdown().await;
}

/// The README's "Cost profile" examples are what pve-sim takes and answers: the config
/// parses as a config, the `/_sim/costs` answer as `CostStats`.
#[test]
fn the_readmes_examples_parse() {
    let readme = include_str!("../../README.md");
    let section = readme
        .split("\n## Cost profile\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Cost profile section");
    let blocks: Vec<&str> = section
        .split("```json\n")
        .skip(1)
        .filter_map(|block| block.split("\n```").next())
        .collect();
    assert_eq!(blocks.len(), 2, "{section}");
    let config: SimConfig = serde_json::from_str(blocks[0]).expect("the config example");
    let profile = config.cost_profile.expect("a profile");
    assert_eq!(profile.service_ms, ServiceTimes::default());
    assert_eq!(
        profile.storage_cost("local-lvm", "lvmthin"),
        StorageCost::for_plugin("lvmthin")
    );
    let costs: CostStats = serde_json::from_str(blocks[1]).expect("the /_sim/costs example");
    assert_eq!(costs.storage_locks[0].timeouts, 2);
}

/// What a fleet's clones cost under the default profile (crates/pvesim/BENCH.md): `count`
/// clones of the template, all requested at once on their own connections, `extra` their
/// parameters. Returns (when the last UPID was answered, when the last clone ended, clones
/// that failed on their storage lock), in ms of simulated time.
async fn fleet(count: u32, extra: &[(&str, &str)]) -> (u64, u64, usize) {
    let mut config = config(CostProfile::default());
    config.timings = SimConfig::default().timings;
    let sim = start(config).await;
    let pending: Vec<Pending> = (0..count)
        .map(|i| {
            let newid = (9101 + i).to_string();
            let mut form = vec![("newid", newid.as_str())];
            form.extend_from_slice(extra);
            sim.post("/nodes/pve1/qemu/9000/clone", &form)
        })
        .collect();
    sim.costs_until("every clone request read", |c| {
        let proxy = pool(c, "pve1", "pveproxy");
        busy_workers(proxy) + proxy.queued == count as usize
    })
    .await;
    let (mut answered, mut elapsed) = (0, 0);
    let mut pending: Vec<Option<Pending>> = pending.into_iter().map(Some).collect();
    loop {
        assert!(elapsed < 120_000, "the fleet never finished");
        advance(50, 50).await;
        elapsed += 50;
        for slot in pending.iter_mut() {
            if slot.as_ref().is_some_and(|p| p.is_finished()) {
                let (status, body) = sim.reply("clone", slot.take().unwrap()).await;
                assert_eq!(status, StatusCode::OK, "{body}");
                answered = elapsed;
            }
        }
        let state = sim.state().await;
        let cloning = state
            .vms
            .iter()
            .any(|vm| vm.vmid > 9100 && vm.lock.is_some());
        if pending.iter().all(Option::is_none) && !cloning {
            let failed = sim.costs().await.lock_timeouts.len();
            sim.sim.shutdown().await;
            return (answered, elapsed, failed);
        }
    }
}

/// The figures of crates/pvesim/BENCH.md ("What a fleet's clones cost"): the default
/// profile and timings, the clones requested at once. pvedaemon's three workers answer the
/// requests 150 ms apart per three; a local storage's allocations take turns (400 ms each on
/// LVM-thin, then 8.2 s of copying 4 GiB at 500 MiB/s), and the thirtieth waits past 10 s;
/// on the shared NFS storage the copies take 37 s at 110 MiB/s, and linked clones, which
/// only allocate, spend most of their time between the cluster lock's tries.
#[tokio::test(start_paused = true)]
async fn fleet_figures_of_bench_md() {
    let full_lvm: &[(&str, &str)] = &[("full", "1"), ("storage", "local-lvm")];
    assert_eq!(fleet(20, full_lvm).await, (1100, 16_500, 0));
    assert_eq!(fleet(30, full_lvm).await, (1550, 20_100, 1));
    assert_eq!(fleet(20, &[("full", "1")]).await, (1100, 43_700, 0));
    assert_eq!(fleet(20, &[("full", "0")]).await, (1100, 6450, 0));
    assert_eq!(fleet(40, &[("full", "0")]).await, (2150, 10_150, 0));
}

/// A profile's `entry_node` is the node whose pveproxy takes the connections; it must be a
/// node of the world: pve-sim refuses to start otherwise.
#[tokio::test]
async fn the_entry_node_takes_the_connections() {
    let mut config = config(CostProfile {
        entry_node: Some("pve9".into()),
        ..CostProfile::default()
    });
    let loopback = ([127, 0, 0, 1], 0).into();
    let refused = pvesim::Sim::start(config.clone(), loopback, None).await;
    let error = refused.expect_err("pve9 is no node");
    assert_eq!(
        error.to_string(),
        "cost_profile.entry_node 'pve9' is not a node of the world"
    );
    config.cost_profile.as_mut().unwrap().entry_node = Some("pve2".into());
    let sim = pvesim::Sim::start(config, loopback, None)
        .await
        .expect("pve2 is");
    sim.shutdown().await;
}
