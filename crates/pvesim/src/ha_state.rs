//! What the simulated HA stack knows: `ha/resources.cfg` (the resources and their requested
//! state), `ha/rules.cfg` (`ha_rules`), the CRM's service status (`ha/manager_status`),
//! queued CRM commands (`ha/crm_commands`) and which nodes are down. Plain data: the manager
//! (`ha_manager`) acts on it, the API (`ha_api`, `ha_rules_api`) and the guest endpoints read
//! and queue into it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

use crate::ha_rules::RulesConfig;

/// One section of `ha/resources.cfg` (pve-ha-manager `HA/Resources.pm` options); `None`
/// means unset, so PVE's default applies.
#[derive(Debug, Clone)]
pub struct HaResource {
    pub state: Option<String>,
    pub group: Option<String>,
    pub failback: Option<bool>,
    pub max_restart: Option<i64>,
    pub max_relocate: Option<i64>,
    pub comment: Option<String>,
    /// When the section last changed: the CRM sees a change on its next round only.
    pub changed_at: Instant,
}

impl HaResource {
    /// `read_and_check_resources_config`: unset means `started`, `enabled` is `started`.
    pub fn requested(&self) -> &str {
        match self.state.as_deref() {
            None | Some("enabled") => "started",
            Some(state) => state,
        }
    }

    pub fn max_relocate(&self) -> usize {
        self.max_relocate.unwrap_or(1).max(0) as usize
    }

    /// `max_restart`, default 1 (`read_and_check_resources_config`).
    pub fn max_restart(&self) -> i64 {
        self.max_restart.unwrap_or(1)
    }

    /// `failback`, default on.
    pub fn failback(&self) -> bool {
        self.failback.unwrap_or(true)
    }
}

/// The CRM's status of one service (`manager_status.service_status.<sid>`).
#[derive(Debug, Clone)]
pub struct Service {
    /// `request_start`, `started`, `request_stop`, `stopped`, `migrate`, `relocate`, `fence`,
    /// `recovery`, `error`.
    pub state: String,
    pub node: String,
    pub target: Option<String>,
    /// A queued CRM command: `["migrate", node]`, `["relocate", node]`, `["stop", timeout]`.
    pub cmd: Option<Vec<String>>,
    pub failed_nodes: Vec<String>,
    /// The LRM reported a successful start (only meaningful while `started`).
    pub running: bool,
    /// The LRM task acting on the service now; the CRM waits for its result.
    pub busy: Option<String>,
    /// For `request_stop`: the shutdown timeout (0 = hard stop).
    pub timeout: Option<i64>,
}

impl Service {
    pub fn new(state: &str, node: &str) -> Service {
        Service {
            state: state.to_string(),
            node: node.to_string(),
            target: None,
            cmd: None,
            failed_nodes: Vec::new(),
            running: false,
            busy: None,
            timeout: None,
        }
    }
}

/// A line of `ha/crm_commands`, with when it was queued.
#[derive(Debug, Clone)]
pub struct CrmCommand {
    pub text: String,
    pub queued_at: Instant,
}

/// A node that went down: failed (fenced after the delay) or rebooting (its services are
/// frozen, as the LRM's `conditional` shutdown policy does on a reboot).
#[derive(Debug, Clone)]
pub struct NodeDown {
    pub since: Instant,
    pub rebooting: bool,
}

#[derive(Debug)]
pub struct HaState {
    /// sid (`vm:100`) -> its section.
    pub resources: BTreeMap<String, HaResource>,
    /// sid -> the CRM's view; services not yet seen by the CRM are absent.
    pub services: BTreeMap<String, Service>,
    pub commands: Vec<CrmCommand>,
    pub nodes_down: BTreeMap<String, NodeDown>,
    /// Bumped on every write of `resources.cfg` (its digest).
    pub generation: u64,
    pub rules: RulesConfig,
    /// The nodes of `manager_status`'s `node_status`: none until the CRM's first round,
    /// then every cluster node. The rules API checks feasibility against these.
    pub crm_nodes: Vec<String>,
    /// The LRM's `restart_tries` per service (`max_restart`).
    pub restart_tries: BTreeMap<String, i64>,
    /// The rules generation the CRM compiled last (it logs dropped rules on a change).
    pub rules_compiled: Option<u64>,
    /// When the CRM has a round to run.
    pub wakeups: BTreeSet<Instant>,
    /// Wakes the manager's loop when a round is scheduled.
    pub wake: Arc<Notify>,
    /// When the CRM last ran a round (its `timestamp`), as Unix seconds.
    pub last_round: u64,
    /// The CRM's log (`pve-ha-crm` syslog lines), newest last.
    pub log: Vec<String>,
    /// datacenter.cfg `crs: ha-rebalance-on-start` (`Manager.pm`
    /// `rebalance_on_request_start`).
    pub rebalance_on_start: bool,
}

impl Default for HaState {
    fn default() -> Self {
        HaState {
            resources: BTreeMap::new(),
            services: BTreeMap::new(),
            commands: Vec::new(),
            nodes_down: BTreeMap::new(),
            generation: 0,
            rules: RulesConfig::default(),
            crm_nodes: Vec::new(),
            restart_tries: BTreeMap::new(),
            rules_compiled: None,
            wakeups: BTreeSet::new(),
            wake: Arc::new(Notify::new()),
            last_round: 0,
            log: Vec::new(),
            rebalance_on_start: false,
        }
    }
}

pub fn vm_sid(vmid: u32) -> String {
    format!("vm:{vmid}")
}

impl HaState {
    /// `service_is_configured`: any section, `ignored` ones too.
    pub fn is_configured(&self, vmid: u32) -> bool {
        self.resources.contains_key(&vm_sid(vmid))
    }

    /// `vm_is_ha_managed`: configured and not `ignored`.
    pub fn is_managed(&self, vmid: u32) -> bool {
        self.is_managed_sid(&vm_sid(vmid))
    }

    /// `$service_check_ha_state` without a state: configured and not `ignored`.
    pub fn is_managed_sid(&self, sid: &str) -> bool {
        self.resources
            .get(sid)
            .is_some_and(|r| r.requested() != "ignored")
    }

    /// The digest of `resources.cfg`: 40 hex characters that change with every write.
    pub fn digest(&self) -> String {
        format!("{:040x}", 0x5eed_0000_u64 + self.generation)
    }

    /// Schedules a CRM round `delay` from now.
    pub fn schedule(&mut self, delay: Duration) {
        self.wakeups.insert(Instant::now() + delay);
        self.wake.notify_one();
    }

    /// `PVE::API2::HA::Resources::check_service_state`: a service in `error` takes no new
    /// request but `disabled`.
    pub fn check_service_state(&self, sid: &str, requested: Option<&str>) -> Result<(), String> {
        let managed = self
            .resources
            .get(sid)
            .is_some_and(|r| r.requested() != "ignored");
        let in_error = self.services.get(sid).is_some_and(|s| s.state == "error");
        if managed && in_error && requested != Some("disabled") {
            return Err(format!(
                "service '{sid}' in error state, must be disabled and fixed first"
            ));
        }
        Ok(())
    }

    /// `queue_crm_commands`, and a CRM round once the delay has passed.
    pub fn queue_command(&mut self, text: String, delay: Duration) {
        self.commands.push(CrmCommand {
            text,
            queued_at: Instant::now(),
        });
        self.schedule(delay);
    }

    pub fn log(&mut self, line: impl Into<String>) {
        const KEEP: usize = 1000;
        if self.log.len() >= KEEP {
            self.log.drain(..KEEP / 10);
        }
        self.log.push(line.into());
    }
}
