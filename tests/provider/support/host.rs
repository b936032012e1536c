//! Live mode: the same acceptance tests against the PVE host named by the environment.
//!
//! A test written for both modes asks for a [`Host`]: with `PROXMOX_VE_ENDPOINT` and
//! `PROXMOX_VE_API_TOKEN` set it is that host, otherwise an in-process pve-sim. On a live
//! host every assertion goes through the PVE API ([`Observer`]), never through `/_sim/`;
//! every VM name the test writes starts with [`Host::prefix`] (the run's prefix plus a part
//! unique to the test), and dropping the host runs `proxmox-test-sweeper` on that prefix, so
//! a failed test leaves nothing behind either.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Map, Value, json};

use super::{SimClient, Target, real_pve_target, start_sim};

/// The run's name prefix on a live host: `PROXMOX_VE_TEST_PREFIX`, default `tfacc-`.
pub fn run_prefix() -> String {
    let prefix = std::env::var("PROXMOX_VE_TEST_PREFIX")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "tfacc-".to_owned());
    // The prefix starts VM names (DNS names) and seed file names, which keep only these.
    assert!(
        prefix.len() >= 3
            && prefix.starts_with(|c: char| c.is_ascii_lowercase())
            && prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
        "PROXMOX_VE_TEST_PREFIX `{prefix}`: use at least 3 of a-z, 0-9 and -, starting with a \
            letter"
    );
    prefix
}

/// What a test may rely on in the cluster under test. Every fact comes from the environment
/// (`PROXMOX_VE_TEST_*`) with the default of the lab docs/guides/pve-setup.md sets up; no
/// test names a node, storage, bridge, template or VMID of its own in live mode.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Nodes VMs may be created on (the template must be reachable from each: on shared
    /// storage, or a copy of the same name on each node).
    pub nodes: Vec<String>,
    /// Template name.
    pub template: String,
    /// A second template (same image or not), for the test that changes a VM's template;
    /// `None`: that step changes the user-data instead (which also replaces the VM).
    pub template_alt: Option<String>,
    /// Storage taking ISO images, on every node in `nodes`.
    pub seed_storage: String,
    pub bridge: String,
    /// VLAN tag NICs may use; `None`: untagged.
    pub vlan: Option<u32>,
    /// A second VLAN tag the NICs may move to in place; `None`: that step is skipped.
    pub vlan_alt: Option<u32>,
    /// A pool the lifecycle test puts its VMs in; `None`: no pool.
    pub pool: Option<String>,
}

impl Facts {
    /// The in-process pve-sim's default world, as the tests have always used it (the
    /// second template exists only in the worlds of the tests that ask for it).
    pub fn sim() -> Self {
        Self {
            nodes: vec!["pve1".into(), "pve2".into(), "pve3".into()],
            template: "debian-13-proxy".into(),
            template_alt: Some("debian-13-proxy-b".into()),
            seed_storage: "proxy-seeds".into(),
            bridge: "vmbr0".into(),
            vlan: Some(4),
            vlan_alt: Some(5),
            pool: None,
        }
    }

    /// `PROXMOX_VE_TEST_*`, with the defaults of a lab set up as in docs/guides/pve-setup.md
    /// (which pve-sim's default world also has).
    pub fn from_env() -> Self {
        let var = |name: &str, default: &str| {
            std::env::var(format!("PROXMOX_VE_TEST_{name}"))
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        let tag = |name: &str| {
            let text = var(name, "");
            (!text.is_empty()).then(|| {
                text.parse()
                    .unwrap_or_else(|_| panic!("PROXMOX_VE_TEST_{name} `{text}` is not a number"))
            })
        };
        let optional = |name: &str| Some(var(name, "")).filter(|v| !v.is_empty());
        Self {
            nodes: var("NODES", "pve1")
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
            template: var("TEMPLATE", "debian-13-proxy"),
            template_alt: optional("TEMPLATE_ALT"),
            seed_storage: var("SEED_STORAGE", "proxy-seeds"),
            bridge: var("BRIDGE", "vmbr0"),
            vlan: tag("VLAN"),
            vlan_alt: tag("VLAN_ALT"),
            pool: optional("POOL"),
        }
    }

    /// The node for the `i`-th VM: the nodes in turn.
    pub fn node(&self, i: usize) -> &str {
        &self.nodes[i % self.nodes.len()]
    }
}

/// Whether the environment names a live host.
pub fn live_mode() -> bool {
    real_pve_target().is_some()
}

/// The cluster a test runs against.
pub struct Host {
    sim: Option<pvesim::Sim>,
    pub target: Target,
    pub facts: Facts,
    /// Starts every VM name the test writes: empty on the in-process sim (the names the
    /// tests always had), the run prefix plus a part unique to this test on a live host.
    pub prefix: String,
    /// VMs the test made through the API itself without the mark (foreign lookalikes), which
    /// the sweeper rightly never touches: deleted by VMID when the host is dropped.
    unmarked: Mutex<Vec<(String, u32)>>,
}

static HOSTS: AtomicU32 = AtomicU32::new(0);

impl Host {
    /// The host for a test that runs in both modes; `None` (after saying why) without
    /// `TF_ACC`. `sim_config` shapes the in-process simulator and is ignored on a live host.
    pub async fn start(test: &str, sim_config: impl FnOnce() -> pvesim::SimConfig) -> Option<Self> {
        if !super::tf_acc_set() {
            super::skip(test, super::NO_TF_ACC);
            return None;
        }
        Some(match real_pve_target() {
            Some(target) => {
                let host = Self::live(target, Facts::from_env());
                eprintln!(
                    "{test}: live mode against {}, VM names start with {}",
                    host.target.endpoint, host.prefix
                );
                host
            }
            None => {
                let (sim, target) = start_sim(sim_config()).await;
                Self {
                    sim: Some(sim),
                    target,
                    facts: Facts::sim(),
                    prefix: String::new(),
                    unmarked: Mutex::new(Vec::new()),
                }
            }
        })
    }

    /// A live host: observed through the PVE API only, swept when dropped.
    pub fn live(target: Target, facts: Facts) -> Self {
        // Unique per test and per process, so tests running side by side (and a second run)
        // never see each other's VMs.
        let n = HOSTS.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}{:04x}{n}-", run_prefix(), fastrand::u16(..));
        Self {
            sim: None,
            target,
            facts,
            prefix,
            unmarked: Mutex::new(Vec::new()),
        }
    }

    pub fn is_live(&self) -> bool {
        self.sim.is_none()
    }

    /// The in-process simulator (for assertions through `/_sim/`); `None` on a live host.
    pub fn sim(&self) -> Option<SimClient> {
        self.sim.as_ref().map(|_| SimClient::new(&self.target))
    }

    /// A VM name of this test.
    pub fn name(&self, base: &str) -> String {
        format!("{}{base}", self.prefix)
    }

    /// A typed client, for making VMs behind Terraform's back.
    pub fn client(&self) -> pve::Client {
        let token = pve::ApiToken::parse(&self.target.token).unwrap();
        let tls = match &self.target.ca_pem {
            Some(pem) => pve::TlsTrust::CaPem(pem.clone()),
            None => pve::TlsTrust::SystemRoots,
        };
        pve::Client::new(pve::ClientConfig::new(&self.target.endpoint, token, tls)).unwrap()
    }

    /// Sees the cluster the way each mode allows.
    pub fn observer(&self) -> Observer {
        Observer {
            api: SimClient::new(&self.target),
            live: self.is_live(),
            prefix: self.prefix.clone(),
            facts: self.facts.clone(),
        }
    }

    /// Remembers a VM the test made without the ownership mark, to delete it at the end.
    pub fn made_unmarked(&self, node: &str, vmid: u32) {
        self.unmarked.lock().unwrap().push((node.to_owned(), vmid));
    }

    /// Every copy of the template (by name) as (node, VMID), the cluster's order.
    pub async fn templates(&self) -> Vec<(String, u32)> {
        let copies: Vec<(String, u32)> = self
            .client()
            .cluster()
            .vm_resources()
            .await
            .unwrap()
            .into_iter()
            .filter(|vm| vm.template && vm.name.as_deref() == Some(self.facts.template.as_str()))
            .map(|vm| (vm.node, vm.vmid))
            .collect();
        assert!(
            !copies.is_empty(),
            "the template {} is not listed in /cluster/resources",
            self.facts.template
        );
        copies
    }

    /// Where to clone the template from for a VM on `node`, the way the lab allows: the copy
    /// on `node` itself (cloned without `target`), else the first copy, cloned with `target`
    /// (PVE allows that from shared storage only, as the lab's template must be then).
    pub async fn template_for(&self, node: &str) -> (String, u32) {
        let copies = self.templates().await;
        copies
            .iter()
            .find(|(at, _)| at == node)
            .unwrap_or(&copies[0])
            .clone()
    }

    /// A VM without our mark, made behind Terraform's back on the first test node: a clone of
    /// the template named `base` after the prefix, deleted when the host is dropped.
    pub async fn make_unmarked_vm(&self, base: &str) -> (u32, String) {
        let vmid = self.free_vmid().await;
        let name = self.name(base);
        let node = self.facts.node(0).to_owned();
        self.made_unmarked(&node, vmid);
        let source = self.template_for(&node).await;
        clone_template(
            &self.client(),
            (&source.0, source.1),
            vmid,
            &name,
            &node,
            None,
        )
        .await;
        (vmid, name)
    }

    /// A VMID that is free now (PVE's `nextid`), for VMs a live test makes itself.
    pub async fn free_vmid(&self) -> u32 {
        self.client().cluster().next_id(None).await.unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if !self.is_live() {
            return;
        }
        let unmarked = std::mem::take(&mut *self.unmarked.lock().unwrap());
        if !unmarked.is_empty() {
            let client = self.client();
            // Drop cannot await, and may run on a runtime thread: use a thread of its own.
            let deleted = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    for (node, vmid) in unmarked {
                        let qemu = client.node(&node).qemu(vmid);
                        if let Ok(status) = qemu.status().await
                            && status.is_running()
                            && let Ok(upid) = qemu.stop().await
                        {
                            let _ = client.wait_for_task(&upid).await;
                        }
                        let options = pve::qemu::DestroyOptions {
                            purge: true,
                            destroy_unreferenced_disks: true,
                        };
                        if let Ok(upid) = qemu.destroy(options).await {
                            let _ = client.wait_for_task(&upid).await;
                        }
                    }
                })
            })
            .join();
            if deleted.is_err() {
                eprintln!("could not delete the unmarked VMs of {}", self.prefix);
            }
        }
        let mut sweeper = std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-test-sweeper"));
        sweeper
            .args(["--prefix", &self.prefix])
            .env("PROXMOX_VE_ENDPOINT", &self.target.endpoint)
            .env("PROXMOX_VE_API_TOKEN", &self.target.token);
        if let Some(pem) = &self.target.ca_pem {
            sweeper.env("PROXMOX_VE_CA_CERT", pem);
        }
        match sweeper.output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "proxmox-test-sweeper --prefix {} failed:\n{}{}",
                self.prefix,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("proxmox-test-sweeper could not start: {e}"),
        }
    }
}

/// Full-clones the template at `source` (node, VMID) onto `vmid` named `name` on `node`,
/// with `target` only when `node` is not the template's (PVE refuses `target` from local
/// storage), and waits for the task.
pub async fn clone_template(
    client: &pve::Client,
    source: (&str, u32),
    vmid: u32,
    name: &str,
    node: &str,
    description: Option<String>,
) {
    let mut clone = pve::qemu::CloneRequest::full(vmid);
    clone.name = Some(name.to_owned());
    clone.description = description;
    if node != source.0 {
        clone.target = Some(node.to_owned());
    }
    let upid = client
        .node(source.0)
        .qemu(source.1)
        .clone_to(&clone)
        .await
        .unwrap();
    client.wait_for_task(&upid).await.unwrap();
}

/// What a test sees of the cluster, in one shape for both modes: VMs as
/// `{vmid, node, status, lock, tags, config: {key: "raw value"}, pending: {key: value}}` (the
/// simulator's state shape), volumes as `{volid, storage, node}`.
pub struct Observer {
    api: SimClient,
    live: bool,
    prefix: String,
    facts: Facts,
}

impl Observer {
    /// The VMs carrying our tag or mark: all of them on the in-process sim (read from its
    /// state, as before), those named with this test's prefix on a live host (read through
    /// `/cluster/resources`, config, status and pending).
    pub async fn our_vms(&self) -> Vec<Value> {
        if !self.live {
            return self.api.our_vms().await;
        }
        let mut out = Vec::new();
        for vm in self.listing().await {
            let tagged = vm["tags"]
                .as_str()
                .is_some_and(|t| t.split([';', ',', ' ']).any(|t| t == "proxyvm"));
            if !tagged {
                continue;
            }
            if let Some(vm) = self.vm(&vm).await
                && vm["config"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&self.prefix))
            {
                out.push(vm);
            }
        }
        out.sort_by_key(|vm| vm["vmid"].as_u64());
        out
    }

    /// Our VMs whose mark names `name` (the whole name, prefix included).
    pub async fn ours_named(&self, name: &str) -> Vec<Value> {
        let owner = format!("proxyvm-owner: {name}");
        if !self.live {
            let state = self.api.state().await;
            return state["vms"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|vm| {
                    vm["config"]["description"]
                        .as_str()
                        .is_some_and(|d| d.lines().any(|l| l.trim_end() == owner))
                })
                .cloned()
                .collect();
        }
        let mut out = Vec::new();
        for vm in self.listing().await {
            if let Some(vm) = self.vm(&vm).await
                && vm["config"]["description"]
                    .as_str()
                    .is_some_and(|d| d.lines().any(|l| l.trim_end() == owner))
            {
                out.push(vm);
            }
        }
        out
    }

    /// The VM at a VMID, if any.
    pub async fn vm_at(&self, vmid: u64) -> Option<Value> {
        if !self.live {
            let state = self.api.state().await;
            return state["vms"]
                .as_array()
                .unwrap()
                .iter()
                .find(|vm| vm["vmid"].as_u64() == Some(vmid))
                .cloned();
        }
        let row = self
            .listing()
            .await
            .into_iter()
            .find(|vm| vm["vmid"].as_u64() == Some(vmid))?;
        self.vm(&row).await
    }

    /// The VMs at these VMIDs that exist now, in the simulator's state shape.
    pub async fn vms_among(&self, vmids: &[u64]) -> Vec<Value> {
        if !self.live {
            let state = self.api.state().await;
            return state["vms"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|vm| vm["vmid"].as_u64().is_some_and(|v| vmids.contains(&v)))
                .cloned()
                .collect();
        }
        let mut out = Vec::new();
        for row in self.listing().await {
            if row["vmid"].as_u64().is_some_and(|v| vmids.contains(&v))
                && let Some(vm) = self.vm(&row).await
            {
                out.push(vm);
            }
        }
        out
    }

    /// Every VMID in the cluster now.
    pub async fn vmids(&self) -> Vec<u64> {
        if !self.live {
            let state = self.api.state().await;
            return state["vms"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|vm| vm["vmid"].as_u64())
                .collect();
        }
        self.listing()
            .await
            .iter()
            .filter_map(|vm| vm["vmid"].as_u64())
            .collect()
    }

    /// Volumes on a storage: all of them on the in-process sim, this test's seed ISOs on a
    /// live host (listed through every test node's storage content).
    pub async fn volumes_on(&self, storage: &str) -> Vec<Value> {
        if !self.live {
            return self.api.volumes_on(storage).await;
        }
        let seed_prefix = format!("{storage}:iso/seed-{}", self.prefix);
        let mut out: Vec<Value> = Vec::new();
        for node in &self.facts.nodes {
            let content = self
                .api
                .api(
                    "GET",
                    &format!("/nodes/{node}/storage/{storage}/content"),
                    &[("content", "iso")],
                )
                .await;
            for item in content.as_array().cloned().unwrap_or_default() {
                let volid = item["volid"].as_str().unwrap_or_default();
                // The same VM name always makes the same seed name: on a shared storage every
                // node lists the one file, so a volid counts once.
                if volid.starts_with(&seed_prefix) && !out.iter().any(|v| v["volid"] == volid) {
                    out.push(json!({"volid": volid, "storage": storage, "node": node}));
                }
            }
        }
        out
    }

    /// A PVE API call (see [`SimClient::api`]).
    pub async fn api(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
        self.api.api(method, path, form).await
    }

    pub async fn wait_task(&self, upid: &Value) {
        self.api.wait_task(upid).await
    }

    /// `/cluster/resources?type=vm`, QEMU rows only.
    async fn listing(&self) -> Vec<Value> {
        self.api
            .api("GET", "/cluster/resources", &[("type", "vm")])
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|vm| vm["type"] == "qemu")
            .collect()
    }

    /// One VM in the simulator's state shape, from config, status and pending; `None` when
    /// it went away meanwhile.
    async fn vm(&self, row: &Value) -> Option<Value> {
        let vmid = row["vmid"].as_u64()?;
        let node = row["node"].as_str()?;
        let base = format!("/nodes/{node}/qemu/{vmid}");
        let config = self
            .api
            .try_api("GET", &format!("{base}/config"), &[])
            .await?;
        let status = self
            .api
            .try_api("GET", &format!("{base}/status/current"), &[])
            .await?;
        let pending = self
            .api
            .try_api("GET", &format!("{base}/pending"), &[])
            .await?;
        // The simulator keeps raw config-file text; PVE's JSON turns some of it into numbers.
        let raw: Map<String, Value> = config
            .as_object()?
            .iter()
            .filter(|(key, _)| key.as_str() != "digest")
            .map(|(key, value)| {
                let text = value
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| value.to_string());
                (key.clone(), Value::String(text))
            })
            .collect();
        let pending: Map<String, Value> = pending
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|item| {
                let key = item["key"].as_str()?.to_owned();
                if item["delete"].as_u64().unwrap_or(0) > 0 {
                    return Some((key, Value::Null));
                }
                let value = item.get("pending")?.clone();
                Some((key, value))
            })
            .collect();
        Some(json!({
            "vmid": vmid,
            "node": node,
            "status": status["status"],
            "lock": config.get("lock").cloned().unwrap_or(Value::Null),
            "tags": config.get("tags").cloned().unwrap_or(Value::Null),
            "config": raw,
            "pending": pending,
        }))
    }
}
