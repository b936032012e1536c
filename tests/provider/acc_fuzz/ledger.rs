//! Which seed each VM first booted, for invariant I3, derived from the simulator's request
//! journal: a clone makes a fresh VM, config writes set or clear `ide2`, and the first start
//! after the clone boots whatever `ide2` names then.
//!
//! Needs sim support to be exact: the journal shows requests, not task outcomes, so a start
//! or config task made to fail, or a request whose connection dropped, leaves the derived
//! first boot uncertain; such VMs are not judged (counted as undecided). A simulator that
//! reports each guest's first seed in `/_sim/state` (`vms[].guest.first_seed`, pve-sim's
//! seed-life work) is read instead, checked at run time.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Clone, Debug, Default)]
struct Boot {
    ide2: Option<String>,
    booted: bool,
    /// The seed volume of the first boot (`None`: booted without one), and whether the
    /// journal shows it beyond doubt.
    first: Option<(Option<String>, bool)>,
}

#[derive(Debug, Default)]
pub struct BootLedger {
    seen: usize,
    vms: BTreeMap<u64, Boot>,
}

impl BootLedger {
    /// Reads the journal entries not seen yet. `doubtful`: the step they belong to had
    /// faults that make a request's effect uncertain (failed tasks, dropped connections).
    pub fn ingest(&mut self, journal: &[Value], doubtful: bool) {
        for entry in journal.iter().skip(self.seen) {
            self.entry(entry, doubtful);
        }
        self.seen = journal.len().max(self.seen);
    }

    fn entry(&mut self, entry: &Value, doubtful: bool) {
        let status = entry["status"].as_u64().unwrap_or(0);
        let lost = status == 0;
        if !(200..300).contains(&status) && !lost {
            return;
        }
        let method = entry["method"].as_str().unwrap_or_default();
        let path = entry["path"].as_str().unwrap_or_default();
        let params = &entry["params"];
        let certain = !doubtful && !lost;
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        // nodes/{node}/qemu/{vmid}/...
        let vmid = parts.get(3).and_then(|v| v.parse::<u64>().ok());
        match (method, &parts[..]) {
            ("POST", ["nodes", _, "qemu", _, "clone"]) => {
                // A second clone racing onto the same VMID fails in its task (PVE's "config
                // file already exists"), though its POST was answered: the first one counts.
                // A VM that booted is not being cloned: that one is gone, this is new.
                if let Some(newid) = number(&params["newid"]) {
                    let boot = self.vms.entry(newid).or_default();
                    if boot.booted {
                        *boot = Boot::default();
                    }
                }
            }
            ("POST" | "PUT", ["nodes", _, "qemu", _, "config"]) => {
                let boot = self.vms.entry(vmid.unwrap()).or_default();
                if let Some(ide2) = params["ide2"].as_str() {
                    boot.ide2 = ide2
                        .split(',')
                        .next()
                        .filter(|v| *v != "none" && !v.is_empty())
                        .map(str::to_owned);
                }
                let deleted = params["delete"].as_str().unwrap_or_default();
                if deleted.split([',', ';', ' ']).any(|k| k == "ide2") {
                    boot.ide2 = None;
                }
            }
            ("POST", ["nodes", _, "qemu", _, "status", "start"]) => {
                let boot = self.vms.entry(vmid.unwrap()).or_default();
                if !boot.booted {
                    boot.booted = true;
                    boot.first = Some((boot.ide2.clone(), certain));
                }
            }
            // Answered: PVE destroys the VM (no destroy task is made to fail here).
            ("DELETE", ["nodes", _, "qemu", _]) if !lost => {
                self.vms.remove(&vmid.unwrap());
            }
            _ => {}
        }
    }

    /// The seed the VM at `vmid` first booted: `Some((seed, certain))` once it booted.
    pub fn first_boot(&self, vmid: u64) -> Option<(Option<&str>, bool)> {
        let (seed, certain) = self.vms.get(&vmid)?.first.as_ref()?;
        Some((seed.as_deref(), *certain))
    }
}

fn number(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

#[test]
fn the_first_start_after_a_clone_boots_the_seed_ide2_names_then() {
    let entry = |method: &str, path: &str, params: Value| {
        let status = 200;
        serde_json::json!({"method": method, "path": path, "params": params, "status": status})
    };
    let journal = vec![
        entry(
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            serde_json::json!({"newid": "7"}),
        ),
        entry(
            "POST",
            "/nodes/pve1/qemu/7/config",
            serde_json::json!({"ide2": "proxy-seeds:iso/a.iso,media=cdrom"}),
        ),
        entry("POST", "/nodes/pve1/qemu/7/status/start", Value::Null),
        entry(
            "POST",
            "/nodes/pve1/qemu/7/config",
            serde_json::json!({"ide2": "proxy-seeds:iso/b.iso,media=cdrom"}),
        ),
        entry("POST", "/nodes/pve1/qemu/7/status/start", Value::Null),
    ];
    let mut ledger = BootLedger::default();
    ledger.ingest(&journal, false);
    assert_eq!(
        ledger.first_boot(7),
        Some((Some("proxy-seeds:iso/a.iso"), true))
    );
    assert_eq!(ledger.first_boot(8), None);
    // Replaced at the same VMID (destroyed during a fault, then cloned again): a new VM.
    let again = vec![
        entry("DELETE", "/nodes/pve1/qemu/7", Value::Null),
        entry(
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            serde_json::json!({"newid": "7"}),
        ),
        entry(
            "POST",
            "/nodes/pve1/qemu/7/config",
            serde_json::json!({"ide2": "proxy-seeds:iso/c.iso,media=cdrom"}),
        ),
        entry("POST", "/nodes/pve1/qemu/7/status/start", Value::Null),
    ];
    let journal: Vec<Value> = journal.into_iter().chain(again).collect();
    ledger.ingest(&journal, true);
    assert_eq!(
        ledger.first_boot(7),
        Some((Some("proxy-seeds:iso/c.iso"), false))
    );
}
