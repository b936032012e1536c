//! Test support (cargo feature `testing`): a simulator started for one test with fast
//! timings, and [`Admin`], a typed client for the admin API under `/_sim/`.
//!
//! ```no_run
//! # async fn example() {
//! use pvesim::testing::{Admin, fast_config, start};
//!
//! let sim = start(fast_config()).await;
//! let admin = Admin::new(&sim);
//! admin.set_task_ms("qmclone", 200).await;
//! // ... drive the PVE API at sim.endpoint() with sim.token() ...
//! assert_eq!(admin.journal_count("POST", "/nodes/pve1/qemu/9000/clone").await, 0);
//! sim.shutdown().await;
//! # }
//! ```
//!
//! The helpers are for tests: a failed request or an answer other than 2xx panics with
//! what the simulator said.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::hold::{HoldRequest, HoldStatus};
use crate::inspect::{
    CostStats, GuestState, HaRebalance, HaServiceState, JournalEntry, SeedBoot, SimState,
};
use crate::{Faults, Sim, SimConfig, Timings};

/// The default world with every task taking 5 ms, the agent up 50 ms after boot, its
/// ping timing out after 1 ms, `/cluster/resources` current at once, the HA manager acting
/// 20 ms after a request, a node reboot taking 20 ms and a startup second 1 ms. A test that must
/// see a task running raises that task's time ([`Admin::set_task_ms`]).
pub fn fast_config() -> SimConfig {
    let mut config = SimConfig::default();
    for ms in config.timings.task_ms.values_mut() {
        *ms = 5;
    }
    config.timings.agent_boot_ms = 50;
    config.timings.agent_ping_timeout_ms = 1;
    config.timings.cluster_resources_lag_ms = 0;
    config.timings.ha_delay_ms = 20;
    config.timings.node_reboot_ms = 20;
    config.timings.startup_second_ms = 1;
    config
}

/// Starts a simulator on a free loopback port; panics when it cannot.
pub async fn start(config: SimConfig) -> Sim {
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    Sim::start(config, loopback, None)
        .await
        .expect("pve-sim starts")
}

/// A client for one simulator's admin API (`/_sim/…`), authenticated with its token.
#[derive(Debug, Clone)]
pub struct Admin {
    http: reqwest::Client,
    endpoint: String,
    authorization: String,
}

impl Admin {
    /// For a simulator this process started.
    pub fn new(sim: &Sim) -> Admin {
        Admin::connect(sim.endpoint(), sim.token(), sim.ca_pem())
    }

    /// For any simulator: its `endpoint` (`https://127.0.0.1:PORT`), its token
    /// (`USER@REALM!TOKENID=SECRET`) and the CA that signed its certificate (PEM), as a
    /// `pve-sim --state-dir` writes them.
    pub fn connect(endpoint: &str, token: &str, ca_pem: &str) -> Admin {
        let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA parses");
        // pve-sim closes a connection idle for 5 s, as pveproxy does: the client drops its
        // idle connections well before, so no request is sent on one being closed.
        let http = reqwest::Client::builder()
            .tls_certs_only([ca])
            .pool_idle_timeout(std::time::Duration::from_secs(2))
            .build()
            .expect("client builds");
        Admin {
            http,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            authorization: format!("PVEAPIToken={token}"),
        }
    }

    /// `GET /_sim/state`: nodes, VMs and volumes as they are now.
    pub async fn state(&self) -> SimState {
        self.get("state").await
    }

    /// One VM's guest (seeds it booted, cloud-init's state, files written through the
    /// agent); `None` when no VM has that VMID.
    pub async fn guest(&self, vmid: u32) -> Option<GuestState> {
        let state = self.state().await;
        state
            .vms
            .into_iter()
            .find(|v| v.vmid == vmid)
            .map(|v| v.guest)
    }

    /// The seed each VM booted first (its first instance-id), for every VM that booted one:
    /// what a test checks to show no VM first booted a seed that was not its own.
    pub async fn first_seeds(&self) -> BTreeMap<u32, SeedBoot> {
        let state = self.state().await;
        state
            .vms
            .into_iter()
            .filter_map(|v| v.guest.first_seed.map(|seed| (v.vmid, seed)))
            .collect()
    }

    /// Sets `cloud_init_ms` (for boots from now on); other timings keep their values.
    pub async fn set_cloud_init_ms(&self, ms: u64) {
        let mut timings = self.timings().await;
        timings.cloud_init_ms = ms;
        self.set_timings(&timings).await;
    }

    /// `GET /_sim/journal`: every PVE API request answered so far, oldest first.
    pub async fn journal(&self) -> Vec<JournalEntry> {
        self.get("journal").await
    }

    /// `GET /_sim/journal?since=N`: the requests answered after the first `since`.
    pub async fn journal_since(&self, since: usize) -> Vec<JournalEntry> {
        self.get(&format!("journal?since={since}")).await
    }

    /// `GET /_sim/tasks`: every task's type and times, oldest first.
    pub async fn tasks(&self) -> Vec<crate::inspect::TaskTiming> {
        self.get("tasks").await
    }

    /// `GET /_sim/journal/len`: how many requests were answered so far.
    pub async fn journal_len(&self) -> usize {
        self.get("journal/len").await
    }

    /// How many journal entries are `method` on exactly `path` (after `/api2/json`).
    pub async fn journal_count(&self, method: &str, path: &str) -> usize {
        self.journal()
            .await
            .iter()
            .filter(|e| e.method == method && e.path == path)
            .count()
    }

    /// `GET /_sim/faults`: the faults in force.
    pub async fn faults(&self) -> Faults {
        self.get("faults").await
    }

    /// `PUT /_sim/faults`: replaces every fault (counts start again); returns them as
    /// installed.
    pub async fn set_faults(&self, faults: &Faults) -> Faults {
        self.put("faults", faults).await
    }

    /// Removes every fault.
    pub async fn clear_faults(&self) {
        self.set_faults(&Faults::default()).await;
    }

    /// `PUT /_sim/hold`: holds the `request`th PVE API request from now (and every later
    /// one) unanswered until [`Admin::release_hold`]; with `after_handling`, the request is
    /// handled and only its answer held.
    pub async fn hold_request(&self, request: u64, after_handling: bool) -> HoldStatus {
        let ask = HoldRequest {
            request,
            after_handling,
            counting: None,
        };
        self.put("hold", &ask).await
    }

    /// `PUT /_sim/hold` counting only requests whose line contains `counting`: the world
    /// stands still at the `request`th of them (replacing a hold set before, whose held
    /// requests are dropped).
    pub async fn hold_counting(&self, request: u64, counting: &str) -> HoldStatus {
        let ask = HoldRequest {
            request,
            after_handling: false,
            counting: Some(counting.to_owned()),
        };
        self.put("hold", &ask).await
    }

    /// `PUT /_sim/hold` counting only requests whose line contains `counting`: the
    /// `request`th of them is handled and its answer held, and every later request waits.
    pub async fn hold_answer_counting(&self, request: u64, counting: &str) -> HoldStatus {
        let ask = HoldRequest {
            request,
            after_handling: true,
            counting: Some(counting.to_owned()),
        };
        self.put("hold", &ask).await
    }

    /// `GET /_sim/hold`: whether the world stands still at the held request.
    pub async fn hold_status(&self) -> HoldStatus {
        self.get("hold").await
    }

    /// `DELETE /_sim/hold`: the held requests are dropped unanswered and the hold cleared.
    pub async fn release_hold(&self) {
        let request = self.request(reqwest::Method::DELETE, "hold");
        let _: HoldStatus = answer("hold", request).await;
    }

    /// `POST /_sim/hold/resume`: the held requests go on, handled as if they arrived now,
    /// and the hold is cleared.
    pub async fn resume_hold(&self) {
        let request = self.request(reqwest::Method::POST, "hold/resume");
        let _: HoldStatus = answer("hold/resume", request).await;
    }

    /// Waits until the hold holds a request (`true`) or `gone` says the client it waits
    /// for ended first (`false`), polling the admin API: what happened before the held
    /// request does not depend on how long this takes, since the world stands still.
    pub async fn until_held(&self, mut gone: impl FnMut() -> bool) -> bool {
        // A client that neither reaches the hold nor ends is a hung test: said, not waited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the client neither reached the held request nor ended"
            );
            if self.hold_status().await.held > 0 {
                return true;
            }
            if gone() {
                // It may have reached the hold just before it ended.
                return self.hold_status().await.held > 0;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// `GET /_sim/timings`.
    pub async fn timings(&self) -> Timings {
        self.get("timings").await
    }

    /// `PUT /_sim/timings`: replaces every timing; returns them as installed.
    pub async fn set_timings(&self, timings: &Timings) -> Timings {
        self.put("timings", timings).await
    }

    /// Sets one task type's run time (`qmclone`, `qmstart`, …); other timings keep their
    /// values.
    pub async fn set_task_ms(&self, task_type: &str, ms: u64) {
        let mut timings = self.timings().await;
        timings.task_ms.insert(task_type.to_owned(), ms);
        self.set_timings(&timings).await;
    }

    /// `GET /_sim/costs`: what the cost profile's requests, locks and clones spent so far
    /// (the simulator was started with a `cost_profile`).
    pub async fn costs(&self) -> CostStats {
        self.get("costs").await
    }

    /// `POST /_sim/costs/reset`: the accounts start afresh (a benchmark's phase); returns
    /// them.
    pub async fn reset_costs(&self) -> CostStats {
        let leaf = "costs/reset";
        answer(leaf, self.request(reqwest::Method::POST, leaf)).await
    }

    /// `GET /_sim/volume/{node}/{storage}/{volume}`: the bytes uploaded into a volume
    /// (`volume` with or without its `storage:` prefix), `None` when there are none.
    pub async fn volume(&self, node: &str, storage: &str, volume: &str) -> Option<Vec<u8>> {
        let response = self
            .request(
                reqwest::Method::GET,
                &format!("volume/{node}/{storage}/{volume}"),
            )
            .send()
            .await
            .expect("the admin API answers");
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return None;
        }
        assert!(
            response.status().is_success(),
            "admin volume: {}",
            response.status()
        );
        Some(response.bytes().await.expect("volume read").to_vec())
    }

    /// `POST /_sim/nodes/{node}/reboot`: every VM on the node stops, the node is offline
    /// for `node_reboot_ms`, then its `onboot` VMs start again in `startup` order (the
    /// HA-managed ones through the HA manager).
    pub async fn reboot_node(&self, node: &str) {
        self.node_event(node, "reboot").await;
    }

    /// `POST /_sim/nodes/{node}/fail`: the node goes offline and its VMs stop; the HA
    /// manager fences it after `ha_delay_ms` and recovers its HA-managed VMs elsewhere.
    pub async fn fail_node(&self, node: &str) {
        self.node_event(node, "fail").await;
    }

    /// `POST /_sim/nodes/{node}/recover`: a failed (or configured offline) node is online
    /// again and boots: its `onboot` VMs start.
    pub async fn recover_node(&self, node: &str) {
        self.node_event(node, "recover").await;
    }

    /// `GET /_sim/ha/log`: the CRM's log (`pve-ha-crm`'s lines), oldest first.
    pub async fn ha_log(&self) -> Vec<String> {
        self.get("ha/log").await
    }

    /// `POST /_sim/ha/rebalance`: the CRM's automatic rebalancing moves the bundle of `sid`
    /// to `target` through its normal migration path. `Err` with the simulator's reason
    /// when the rebalancer would not make that move (a motion under way, a bundle that is
    /// not started on one node, a target the rules rule out).
    pub async fn ha_rebalance(&self, sid: &str, target: &str) -> Result<HaRebalance, String> {
        let body = serde_json::json!({ "sid": sid, "target": target });
        self.post_refusable("ha/rebalance", &body).await
    }

    /// `POST /_sim/vms/{vmid}/migrate`: an operator's `qm migrate` of VM `vmid` to `target`
    /// (online when it runs), answered once its task ended: `{upid, exitstatus, node}` (the
    /// node the VM is on then). `Err` with the refusal: an HA-managed VM, a task of the VM
    /// running, or what PVE's `migrate_vm` refuses. Admin requests are never held, so a test
    /// moves a VM while a client's requests are.
    pub async fn migrate(&self, vmid: u32, target: &str) -> Result<serde_json::Value, String> {
        let body = serde_json::json!({ "target": target });
        self.post_refusable(&format!("vms/{vmid}/migrate"), &body)
            .await
    }

    /// `POST /_sim/{leaf}` with a JSON body: the answer, or `Err` with the reason of a
    /// `409` (what the simulator would not do).
    async fn post_refusable<T: DeserializeOwned>(
        &self,
        leaf: &str,
        body: &serde_json::Value,
    ) -> Result<T, String> {
        let request = self.request(reqwest::Method::POST, leaf).json(body);
        let response = request.send().await.expect("the admin API answers");
        let status = response.status();
        let text = response.text().await.expect("admin answer read");
        if status.as_u16() == 409 {
            return Err(text);
        }
        assert!(status.is_success(), "admin {leaf}: {status} {text}");
        Ok(serde_json::from_str(&text).expect("an admin answer"))
    }

    /// `PUT /_sim/ha/services/{sid}` with `{"state": "error"}`: the service is in `error`,
    /// as after a failure PVE cannot recover from (the VM is left as it is).
    pub async fn ha_service_error(&self, sid: &str) -> HaServiceState {
        let leaf = format!("ha/services/{sid}");
        self.put(&leaf, &serde_json::json!({ "state": "error" }))
            .await
    }

    async fn node_event(&self, node: &str, event: &str) {
        let leaf = format!("nodes/{node}/{event}");
        let _: serde_json::Value = answer(&leaf, self.request(reqwest::Method::POST, &leaf)).await;
    }

    fn request(&self, method: reqwest::Method, leaf: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}/_sim/{leaf}", self.endpoint))
            .header("Authorization", &self.authorization)
    }

    async fn get<T: DeserializeOwned>(&self, leaf: &str) -> T {
        answer(leaf, self.request(reqwest::Method::GET, leaf)).await
    }

    async fn put<T: DeserializeOwned>(&self, leaf: &str, body: &impl Serialize) -> T {
        answer(leaf, self.request(reqwest::Method::PUT, leaf).json(body)).await
    }
}

async fn answer<T: DeserializeOwned>(leaf: &str, request: reqwest::RequestBuilder) -> T {
    let response = request.send().await.expect("the admin API answers");
    let status = response.status();
    let text = response.text().await.expect("admin answer read");
    assert!(status.is_success(), "admin {leaf}: {status} {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("admin {leaf} ({e}): {text}"))
}
