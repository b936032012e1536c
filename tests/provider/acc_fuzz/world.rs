//! One sequence's world: an in-process pve-sim (a second template added), the states
//! (working directories, each initialised on first use) with their configurations, what the
//! operator changed by hand, and how to read each side: a state's VMs and create tokens
//! from its state file, the cluster from the simulator's admin API.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

use super::model::{STATES, StateConfig, TEMPLATES};
use crate::support::{SimClient, Target, TfOutput, Workspace, start_sim, terraform_path};

/// The file a spawned terraform's output goes to, in its workspace's folder.
const SPAWNED_OUTPUT: &str = "spawned-terraform.log";

/// A VM a state file records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub address: String,
    pub name: String,
    pub vmid: u64,
    /// The create token in the instance's private data (absent for a state without one).
    pub token: Option<String>,
}

/// A VM on the cluster that carries our mark or tag.
#[derive(Clone, Debug)]
pub struct SimVm {
    pub vmid: u64,
    pub node: String,
    pub name: String,
    pub running: bool,
    pub description: String,
    pub ide2: Option<String>,
    pub protected: bool,
    /// The seed volume the guest first booted, as the simulator reports it: `None` when
    /// this simulator does not report guests (then the journal's [`super::ledger`] tells),
    /// `Some(None)` when the guest booted no seed yet.
    pub first_seed: Option<Option<String>>,
}

impl SimVm {
    /// The create token the VM's mark carries.
    pub fn token(&self) -> Option<&str> {
        mark_field(&self.description, "proxyvm-create: ")
    }

    /// The mark says the create finished (`done`).
    pub fn finished(&self) -> bool {
        mark_field(&self.description, "proxyvm-phase: ") == Some("done")
    }

    pub fn has_mark(&self) -> bool {
        mark_field(&self.description, "proxyvm-owner: ").is_some()
    }

    /// The seed volume `ide2` names, if any.
    pub fn seed(&self) -> Option<&str> {
        let volid = self.ide2.as_deref()?.split(',').next()?;
        (volid != "none" && !volid.is_empty()).then_some(volid)
    }
}

fn mark_field<'a>(description: &'a str, prefix: &str) -> Option<&'a str> {
    description
        .lines()
        .find_map(|line| line.trim_end().strip_prefix(prefix))
        .map(str::trim)
}

/// The cluster as the admin API shows it, reduced to what the checks read.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub vms: BTreeMap<u64, SimVm>,
    /// Volumes on the seed storage.
    pub seeds: BTreeSet<String>,
}

/// One state: its working directory (made on first use) and configuration.
pub struct State {
    pub ws: Option<Workspace>,
    pub config: StateConfig,
    /// The configuration the last saved plan was made from.
    pub saved: Option<StateConfig>,
    /// The operator changed the cluster since this state's last refresh.
    pub behind_back: bool,
}

pub struct World {
    _sim: pvesim::Sim,
    pub target: Target,
    pub client: SimClient,
    http: reqwest::Client,
    pub states: Vec<State>,
    /// Descriptions the operator replaced, by VMID, as they were.
    pub marks: BTreeMap<u64, String>,
    /// The VM whose destroy by the operator stands stalled through the next step.
    pub stalled: Option<u64>,
    /// VMs `state rm` took out of a state, by (state, slot); an import brings one back.
    pub forgotten: BTreeMap<(usize, usize), u64>,
    /// Names of VMs whose mark an operator edited in this sequence.
    pub edited_names: BTreeSet<String>,
    /// Families the simulator turned out not to support in this run.
    pub unsupported: BTreeSet<super::ops::Family>,
    /// A cluster act (a migration, HA, a node's reboot, failure or recovery) ran in this
    /// sequence: PVE may go on changing VMs by itself during later commands (a node's boot
    /// starting its VMs, HA recovering or moving them).
    pub cluster_acted: bool,
}

impl World {
    pub async fn start() -> World {
        let (sim, target) = start_sim(sim_config()).await;
        let client = SimClient::new(&target);
        let pem = target
            .ca_pem
            .as_deref()
            .expect("the in-process simulator has a CA");
        let http = reqwest::Client::builder()
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(pem.as_bytes()).unwrap())
            .build()
            .unwrap();
        let states = (0..STATES)
            .map(|_| State {
                ws: None,
                config: StateConfig::default(),
                saved: None,
                behind_back: false,
            })
            .collect();
        World {
            _sim: sim,
            target,
            client,
            http,
            states,
            marks: BTreeMap::new(),
            stalled: None,
            forgotten: BTreeMap::new(),
            edited_names: BTreeSet::new(),
            unsupported: BTreeSet::new(),
            cluster_acted: false,
        }
    }

    /// The state's working directory, initialised with its configuration on first use.
    pub async fn ws(&mut self, state: usize) -> &Workspace {
        if self.states[state].ws.is_none() {
            let ws = Workspace::new(self.target.clone());
            ws.init_with(&self.states[state].config.render(state, ""))
                .await;
            self.states[state].ws = Some(ws);
        }
        self.states[state].ws.as_ref().unwrap()
    }

    /// Writes the state's configuration (with `extra` appended).
    pub async fn write_config(&mut self, state: usize, extra: &str) {
        let hcl = self.states[state].config.render(state, extra);
        self.ws(state).await.write_main_tf(&hcl);
    }

    pub async fn terraform(&mut self, state: usize, args: &[&str]) -> TfOutput {
        self.ws(state).await.terraform(args).await
    }

    /// The VMs the state file records (none before the state's first command).
    /// Whether the state holds a tainted instance (Terraform replaces it at the next apply).
    pub fn has_tainted(&self, state: usize) -> bool {
        let file = self.state_file(state);
        let instances = file["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["instances"].as_array().into_iter().flatten());
        instances.into_iter().any(|i| i["status"] == "tainted")
    }

    /// The state's `terraform.tfstate`, `Null` when there is none yet.
    fn state_file(&self, state: usize) -> Value {
        let Some(ws) = &self.states[state].ws else {
            return Value::Null;
        };
        let path = ws.work_dir().join("terraform.tfstate");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// The state's file is there and empty: Terraform's local backend truncates it before
    /// it writes it (`statemgr.Filesystem.writeState`), so a kill in between loses the state,
    /// which Terraform then reads as none.
    pub fn state_file_emptied(&self, state: usize) -> bool {
        self.states[state].ws.as_ref().is_some_and(|ws| {
            let path = ws.work_dir().join("terraform.tfstate");
            std::fs::metadata(path).is_ok_and(|meta| meta.len() == 0)
        })
    }

    pub fn held(&self, state: usize) -> Vec<Held> {
        let file = self.state_file(state);
        let mut out = Vec::new();
        for resource in file["resources"].as_array().into_iter().flatten() {
            if resource["mode"] != "managed" {
                continue;
            }
            for instance in resource["instances"].as_array().into_iter().flatten() {
                let Some(vmid) = instance["attributes"]["vmid"].as_u64() else {
                    continue;
                };
                let token = instance["private"]
                    .as_str()
                    .and_then(base64_decode)
                    .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
                    .and_then(|p| p["create_token"].as_str().map(str::to_owned));
                out.push(Held {
                    address: format!("proxmox_proxy_vm.{}", resource["name"].as_str().unwrap()),
                    name: instance["attributes"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    vmid,
                    token,
                });
            }
        }
        out
    }

    /// Whether this state's working directory mentions the token (its journal of creates
    /// Terraform has not stored yet, under `.terraform/proxyvm/`).
    pub fn journal_mentions(&self, state: usize, token: &str) -> bool {
        let Some(ws) = &self.states[state].ws else {
            return false;
        };
        files_under(ws.work_dir().join(".terraform/proxyvm"))
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains(token)))
    }

    /// Our VMs (by mark or tag) and the seed volumes, as the simulator has them now.
    pub async fn cluster(&self) -> Cluster {
        let state = self.client.state().await;
        let mut cluster = Cluster::default();
        for vm in state["vms"].as_array().into_iter().flatten() {
            let config = &vm["config"];
            let text = |key: &str| config[key].as_str().map(str::to_owned);
            let description = text("description").unwrap_or_default();
            let tagged = text("tags").is_some_and(|t| t.split(';').any(|t| t == "proxyvm"));
            if !tagged && !description.contains("proxyvm-owner:") {
                continue;
            }
            let vmid = vm["vmid"].as_u64().unwrap();
            cluster.vms.insert(
                vmid,
                SimVm {
                    vmid,
                    node: vm["node"].as_str().unwrap_or_default().to_owned(),
                    name: text("name").unwrap_or_default(),
                    running: vm["status"] == "running",
                    description,
                    ide2: text("ide2"),
                    protected: text("protection").is_some_and(|p| p == "1"),
                    first_seed: vm
                        .get("guest")
                        .map(|guest| guest["first_seed"]["volid"].as_str().map(str::to_owned)),
                },
            );
        }
        for volume in state["volumes"].as_array().into_iter().flatten() {
            if volume["storage"] == "proxy-seeds" {
                cluster
                    .seeds
                    .insert(volume["volid"].as_str().unwrap().to_owned());
            }
        }
        cluster
    }

    /// Waits (at most 30 s) until VM `vmid` runs (`running`) or not, or is gone.
    pub async fn settle_power(&self, vmid: u64, running: bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            match self.cluster().await.vms.get(&vmid) {
                Some(vm) if vm.running != running => {}
                _ => return,
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The nodes PVE lists as not online (`GET /nodes`, `status`).
    pub async fn offline_nodes(&self) -> Vec<String> {
        let Ok(nodes) = self.call("GET", "/nodes", &[]).await else {
            return Vec::new();
        };
        nodes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["status"] != "online")
            .filter_map(|n| n["node"].as_str().map(str::to_owned))
            .collect()
    }

    /// A request as an operator (or the simulator's admin) makes it: `path` under
    /// `/api2/json`, or starting with `/_sim/`. Returns `data`, or the status and text.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        form: &[(&str, &str)],
    ) -> Result<Value, (u16, String)> {
        let url = if path.starts_with("/_sim/") {
            format!("{}{path}", self.target.endpoint)
        } else {
            format!("{}/api2/json{path}", self.target.endpoint)
        };
        let request = match method {
            "GET" => self.http.get(url).query(form),
            "DELETE" => self.http.delete(url).query(form),
            "POST" => self.http.post(url).form(form),
            _ => self.http.put(url).form(form),
        };
        let response = request
            .header(
                "Authorization",
                format!("PVEAPIToken={}", self.target.token),
            )
            .send()
            .await
            .map_err(|e| (0, e.to_string()))?;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        if !(200..300).contains(&status) {
            return Err((status, text));
        }
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(body["data"].clone())
    }

    /// [`World::call`], then waits for the task it started (if it answered a UPID).
    pub async fn call_task(
        &self,
        method: &str,
        path: &str,
        form: &[(&str, &str)],
    ) -> Result<(), (u16, String)> {
        let data = self.call(method, path, form).await?;
        let Some(upid) = data.as_str().filter(|u| u.starts_with("UPID:")) else {
            return Ok(());
        };
        let node = upid.split(':').nth(1).unwrap_or_default().to_owned();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let status = self
                .call("GET", &format!("/nodes/{node}/tasks/{upid}/status"), &[])
                .await?;
            if status["status"] == "stopped" {
                return match status["exitstatus"].as_str() {
                    Some("OK") => Ok(()),
                    other => Err((200, format!("task failed: {other:?}"))),
                };
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Err((0, format!("task {upid} did not end")))
    }

    /// How many write requests (POST, PUT, DELETE) the simulator answered so far.
    pub async fn journal_writes(&self) -> usize {
        let journal = self.client.journal().await;
        journal
            .iter()
            .filter(|e| matches!(e["method"].as_str(), Some("POST" | "PUT" | "DELETE")))
            .count()
    }

    /// Starts a terraform command in its own process group (killed with it), with the
    /// environment the harness gives every command.
    /// Starts terraform in `state`'s directory, its output going to [`World::spawned_output`]'s
    /// file, read when it ends on its own.
    pub async fn spawn(&mut self, state: usize, args: &[&str]) -> std::process::Child {
        let ws = self.ws(state).await;
        let output = std::fs::File::create(ws.dir.path().join(SPAWNED_OUTPUT))
            .expect("the spawned terraform's output file");
        let errors = output.try_clone().expect("the output file, twice");
        let mut cmd = std::process::Command::new(terraform_path());
        cmd.args(args)
            .current_dir(ws.work_dir())
            .env("TF_CLI_CONFIG_FILE", ws.dir.path().join("cli.tfrc"))
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("PROXMOX_VE_ENDPOINT", &ws.target.endpoint)
            .env("PROXMOX_VE_API_TOKEN", &ws.target.token)
            .env(
                "PROXMOX_VE_CA_CERT",
                ws.target.ca_pem.as_deref().unwrap_or(""),
            )
            .env_remove("TF_LOG")
            .stdout(output)
            .stderr(errors);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.spawn().expect("terraform could not be started")
    }

    /// What the last terraform [`World::spawn`] started in `state` printed.
    pub async fn spawned_output(&mut self, state: usize) -> String {
        let ws = self.ws(state).await;
        std::fs::read_to_string(ws.dir.path().join(SPAWNED_OUTPUT)).unwrap_or_default()
    }
}

/// SIGKILL to a spawned command's process group (terraform and the provider it started).
pub fn kill_group(child: &mut std::process::Child) {
    let group = format!("-{}", child.id());
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &group])
        .status();
    let _ = child.wait();
}

pub fn files_under(dir: PathBuf) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Fast tasks (every step of a sequence is a terraform command, so the simulator should not
/// be what it waits for), a second template, a copy of the first, to replace VMs onto, and
/// HA's `ha-rebalance-on-start`: an HA VM the provider or an operator starts may start on
/// another node (a stopped VM whose seed is detached or on shared storage is moved first),
/// so the commands meet VMs that moved under them.
fn sim_config() -> pvesim::SimConfig {
    let mut config = pvesim::testing::fast_config();
    config.ha_rebalance_on_start = true;
    let first = config
        .vms
        .iter()
        .find(|vm| vm.config.get("name").map(String::as_str) == Some(TEMPLATES[0]))
        .expect("the default world has the template")
        .clone();
    let mut second = first.clone();
    second.vmid = first.vmid + 1;
    second.config.insert("name".into(), TEMPLATES[1].into());
    let from = format!("{0}/base-{0}-", first.vmid);
    let to = format!("{0}/base-{0}-", second.vmid);
    for value in second.config.values_mut() {
        *value = value.replace(&from, &to);
    }
    config.vms.push(second);
    config
}

/// Standard base64 (Terraform's encoding of an instance's private bytes).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let (mut out, mut bits, mut acc) = (Vec::new(), 0u32, 0u32);
    for c in text.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[test]
fn base64_decodes_terraform_private_bytes() {
    assert_eq!(base64_decode("eyJhIjoxfQ==").unwrap(), b"{\"a\":1}");
    assert_eq!(base64_decode("").unwrap(), b"");
}
