//! Where each create's time went beyond its task chain, from pve-sim's journal (when each
//! request arrived and was answered) and task list (when each task started and ended): the
//! cost benchmark's second table (`acc_request_budget::bench_apply_under_costs`, #42).
//!
//! Only means are reported: a clone's task names its template, not the VM it makes, so
//! tasks are summed per kind and divided by the creates, which needs no task-to-VM match.

use std::collections::BTreeMap;

use pvesim::inspect::TaskTiming;
use serde_json::Value;

/// The means per create, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateSpans {
    pub creates: usize,
    /// From the create's clone request arriving to its last answer.
    pub span_ms: f64,
    /// The clone task, start to end (PVE's clone under the storage lock).
    pub clone_ms: f64,
    /// The create's other waited tasks: config write, resize, start.
    pub other_tasks_ms: f64,
    /// From each waited task's end to the answer that saw it (a look, or the task's own
    /// request when PVE's worker waited for it).
    pub poll_lag_ms: f64,
    /// The clone's share of `poll_lag_ms`.
    pub clone_lag_ms: f64,
    /// From the start's end seen to the agent's first address (the guest's boot and the
    /// agent polls' lag).
    pub guest_ms: f64,
}

impl CreateSpans {
    /// What is left: the seed's upload and delete, cloud-init's verdict, the requests' time
    /// in PVE's queues and workers, and the provider's and Terraform's own.
    pub fn rest_ms(&self) -> f64 {
        self.span_ms - self.clone_ms - self.other_tasks_ms - self.poll_lag_ms - self.guest_ms
    }
}

const WAITED: &[&str] = &["qmclone", "qmconfig", "resize", "qmstart"];

fn ms(entry: &Value, key: &str) -> u64 {
    entry[key].as_u64().unwrap_or_default()
}

fn path(entry: &Value) -> &str {
    entry["path"].as_str().unwrap_or_default()
}

/// The UPID a task status poll asks about.
fn polled_upid(path: &str) -> Option<&str> {
    let (_, rest) = path.split_once("/tasks/")?;
    rest.strip_suffix("/status")
}

/// The VM a request is about: the clone's `newid`, a `/qemu/{vmid}/…` path other than the
/// clone's source, or a polled task's UPID id (not a clone's, which names the template).
fn vm_of(entry: &Value, template: &str) -> Option<String> {
    let path = path(entry);
    if path.ends_with("/clone") {
        return entry["params"]["newid"].as_str().map(str::to_owned);
    }
    if let Some(upid) = polled_upid(path) {
        let fields: Vec<&str> = upid.split(':').collect();
        let (task_type, id) = (fields.get(5)?, fields.get(6)?);
        return (WAITED.contains(task_type) && *task_type != "qmclone" && !id.is_empty())
            .then(|| (*id).to_owned());
    }
    let (_, rest) = path.split_once("/qemu/")?;
    let vmid = rest.split('/').next()?;
    (vmid != template).then(|| vmid.to_owned())
}

/// The Unix second a UPID says its task started.
fn upid_start(upid: &str) -> Option<u64> {
    u64::from_str_radix(upid.split(':').nth(4)?, 16).ok()
}

/// Whether `entry` is a look at `task`: a status read of it, or a listing of its node's
/// tasks that holds it (`source=all`, `since` no later than its start), which answers every
/// wait on the node at once.
fn looks_at(entry: &Value, task: &TaskTiming) -> bool {
    let listing_node = path(entry)
        .strip_prefix("/nodes/")
        .and_then(|rest| rest.strip_suffix("/tasks"));
    entry["status"] == 200
        && (polled_upid(path(entry)) == Some(task.upid.as_str())
            || (listing_node == Some(task.node.as_str())
                && entry["params"]["source"] == "all"
                && entry["params"]["since"]
                    .as_str()
                    .and_then(|s| s.parse::<u64>().ok())
                    .or_else(|| entry["params"]["since"].as_u64())
                    .is_some_and(|since| since <= upid_start(&task.upid).unwrap_or(0))))
}

/// The answer of the request that started `task` when PVE's worker waited for the task before
/// it answered (`background_delay`, `delay`) and the task had ended by then: that answer
/// told the provider so, with no look at all.
fn answered_ended(journal: &[Value], task: &TaskTiming) -> Option<u64> {
    let ended = task.ended_ms?;
    let on_node = format!("/nodes/{}/", task.node);
    journal
        .iter()
        .filter(|e| {
            let params = &e["params"];
            (params.get("background_delay").is_some() || params.get("delay").is_some())
                && path(e).starts_with(&on_node)
                && path(e).split('/').any(|part| part == task.id)
                && ms(e, "received_ms") <= task.started_ms
                && task.started_ms <= ms(e, "answered_ms")
        })
        .map(|e| ms(e, "answered_ms"))
        .find(|&answered| answered >= ended)
}

/// When the provider saw `task` ended: the answer of its own request when PVE waited for it
/// ([`answered_ended`]), else the first answer after its end to a look at it ([`looks_at`]).
fn end_seen(journal: &[Value], task: &TaskTiming) -> Option<u64> {
    let ended = task.ended_ms?;
    answered_ended(journal, task).or_else(|| {
        journal
            .iter()
            .filter(|e| ms(e, "received_ms") >= ended && looks_at(e, task))
            .map(|e| ms(e, "answered_ms"))
            .min()
    })
}

/// One clone, as its waits saw it: what tells a poll's lag from its cause (#42: clones that
/// ended early were seen a second late, ones that ran over were not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneLag {
    /// Its run, start to end.
    pub run_ms: u64,
    /// Looks at it answered before its end.
    pub looks_before_end: usize,
    /// The last of them, from its start.
    pub last_running_ms: Option<u64>,
    /// Its end to the answer that saw it.
    pub lag_ms: Option<u64>,
}

/// Every clone that ended, shortest run first.
pub fn clone_lags(journal: &[Value], tasks: &[TaskTiming]) -> Vec<CloneLag> {
    let mut clones: Vec<CloneLag> = tasks
        .iter()
        .filter(|t| t.task_type == "qmclone")
        .filter_map(|t| {
            let ended = t.ended_ms?;
            let before: Vec<u64> = journal
                .iter()
                .filter(|e| ms(e, "received_ms") >= t.started_ms && ms(e, "answered_ms") < ended)
                .filter(|e| looks_at(e, t))
                .map(|e| ms(e, "answered_ms"))
                .collect();
            Some(CloneLag {
                run_ms: ended - t.started_ms,
                looks_before_end: before.len(),
                last_running_ms: before.iter().max().map(|at| at - t.started_ms),
                lag_ms: end_seen(journal, t).map(|seen| seen - ended),
            })
        })
        .collect();
    clones.sort_by_key(|c| (c.run_ms, c.lag_ms));
    clones
}

/// [`clone_lags`] as a tab-separated table, for the benchmark's output directory.
pub fn clone_lags_tsv(clones: &[CloneLag]) -> String {
    let cell = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    let mut tsv = "run_ms\tlooks_before_end\tlast_running_ms\tlag_ms\n".to_owned();
    for c in clones {
        tsv.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            c.run_ms,
            c.looks_before_end,
            cell(c.last_running_ms),
            cell(c.lag_ms)
        ));
    }
    tsv
}

/// The means over every create the journal shows (a successful clone request).
pub fn create_spans(journal: &[Value], tasks: &[TaskTiming]) -> CreateSpans {
    let clones: Vec<&Value> = journal
        .iter()
        .filter(|e| e["method"] == "POST" && path(e).ends_with("/clone") && e["status"] == 200)
        .collect();
    let Some(template) = clones.first().and_then(|e| path(e).split('/').nth(4)) else {
        return CreateSpans::default();
    };
    let mut by_vm: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for entry in journal {
        if let Some(vm) = vm_of(entry, template) {
            by_vm.entry(vm).or_default().push(entry);
        }
    }
    let seen: BTreeMap<&str, u64> = tasks
        .iter()
        .filter_map(|t| Some((t.upid.as_str(), end_seen(journal, t)?)))
        .collect();
    let creates = clones.len();
    let mut spans = CreateSpans {
        creates,
        ..CreateSpans::default()
    };
    for task in tasks
        .iter()
        .filter(|t| WAITED.contains(&t.task_type.as_str()))
    {
        let Some(ended) = task.ended_ms else { continue };
        let took = ended.saturating_sub(task.started_ms) as f64;
        match task.task_type.as_str() {
            "qmclone" => spans.clone_ms += took,
            _ => spans.other_tasks_ms += took,
        }
        if let Some(&at) = seen.get(task.upid.as_str()) {
            let lag = at.saturating_sub(ended) as f64;
            spans.poll_lag_ms += lag;
            if task.task_type == "qmclone" {
                spans.clone_lag_ms += lag;
            }
        }
    }
    for clone in &clones {
        let vm = clone["params"]["newid"].as_str().unwrap_or_default();
        let own = by_vm.get(vm).map(Vec::as_slice).unwrap_or_default();
        let last = own.iter().map(|e| ms(e, "answered_ms")).max();
        spans.span_ms += last
            .unwrap_or_default()
            .saturating_sub(ms(clone, "received_ms")) as f64;
        let start_seen = tasks
            .iter()
            .filter(|t| t.task_type == "qmstart" && t.id == vm)
            .filter_map(|t| seen.get(t.upid.as_str()))
            .max();
        let address = own
            .iter()
            .filter(|e| path(e).ends_with("/agent/network-get-interfaces") && e["status"] == 200)
            .map(|e| ms(e, "answered_ms"))
            .min();
        if let (Some(&started), Some(address)) = (start_seen, address) {
            spans.guest_ms += address.saturating_sub(started) as f64;
        }
    }
    let n = creates as f64;
    for total in [
        &mut spans.span_ms,
        &mut spans.clone_ms,
        &mut spans.other_tasks_ms,
        &mut spans.poll_lag_ms,
        &mut spans.clone_lag_ms,
        &mut spans.guest_ms,
    ] {
        *total /= n;
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upid(task_type: &str, id: &str) -> String {
        format!("UPID:pve1:0000AAAA:0000BBBB:6B000000:{task_type}:{id}:t@pve!p:")
    }

    fn entry(method: &str, path: &str, params: Value, at: (u64, u64), status: u16) -> Value {
        json!({"method": method, "path": path, "params": params, "status": status,
               "received_ms": at.0, "answered_ms": at.1})
    }

    fn task(upid: &str, task_type: &str, id: &str, started: u64, ended: u64) -> TaskTiming {
        TaskTiming {
            upid: upid.to_owned(),
            node: "pve1".into(),
            task_type: task_type.into(),
            id: id.into(),
            started_ms: started,
            ended_ms: Some(ended),
            exitstatus: Some("OK".into()),
        }
    }

    fn poll(upid: &str, at: u64) -> Value {
        let path = format!("/nodes/pve1/tasks/{upid}/status");
        entry("GET", &path, json!({}), (at, at + 10), 200)
    }

    /// One create, by hand: the clone (1,000 ms, seen 300 ms late), the start (500 ms,
    /// seen 100 ms late), the address 2,000 ms after the start was seen, and its last
    /// request answered at 5,000 ms.
    #[test]
    fn one_create_is_taken_apart() {
        let (clone, start) = (upid("qmclone", "9000"), upid("qmstart", "101"));
        let journal = vec![
            entry(
                "POST",
                "/nodes/pve1/qemu/9000/clone",
                json!({"newid": "101"}),
                (0, 20),
                200,
            ),
            poll(&clone, 500),
            poll(&clone, 1290),
            entry(
                "POST",
                "/nodes/pve1/qemu/101/status/start",
                json!({}),
                (1400, 1410),
                200,
            ),
            poll(&start, 2000),
            entry(
                "GET",
                "/nodes/pve1/qemu/101/agent/network-get-interfaces",
                json!({}),
                (3000, 3010),
                500,
            ),
            entry(
                "GET",
                "/nodes/pve1/qemu/101/agent/network-get-interfaces",
                json!({}),
                (4000, 4010),
                200,
            ),
            entry(
                "PUT",
                "/nodes/pve1/qemu/101/config",
                json!({}),
                (4900, 5000),
                200,
            ),
            // The template's own read is nobody's create.
            entry(
                "GET",
                "/nodes/pve1/qemu/9000/config",
                json!({}),
                (6000, 6010),
                200,
            ),
        ];
        let tasks = vec![
            task(&clone, "qmclone", "9000", 0, 1000),
            task(&start, "qmstart", "101", 1410, 1910),
        ];
        let spans = create_spans(&journal, &tasks);
        assert_eq!(
            spans,
            CreateSpans {
                creates: 1,
                span_ms: 5000.0,
                clone_ms: 1000.0,
                other_tasks_ms: 500.0,
                poll_lag_ms: 300.0 + 100.0,
                clone_lag_ms: 300.0,
                guest_ms: 4010.0 - 2010.0,
            }
        );
        assert_eq!(spans.rest_ms(), 5000.0 - 1000.0 - 500.0 - 400.0 - 2000.0);
    }

    /// A task seen ended by a listing of its node's tasks another wait made: its lag ends
    /// at that listing's answer, not at a status read of its own.
    #[test]
    fn an_end_seen_in_the_nodes_listing_counts_from_that_listing() {
        let (clone, start) = (upid("qmclone", "9000"), upid("qmstart", "101"));
        let listing = |since: u64, at: u64| {
            let params = json!({"source": "all", "since": since.to_string()});
            entry("GET", "/nodes/pve1/tasks", params, (at, at + 10), 200)
        };
        let start_secs = 0x6B00_0000;
        let journal = vec![
            entry(
                "POST",
                "/nodes/pve1/qemu/9000/clone",
                json!({"newid": "101"}),
                (0, 20),
                200,
            ),
            listing(start_secs, 900),
            // Too late a start to hold the clone.
            listing(start_secs + 1, 1050),
            listing(start_secs, 1200),
            poll(&clone, 1500),
            entry(
                "POST",
                "/nodes/pve1/qemu/101/status/start",
                json!({}),
                (1400, 1410),
                200,
            ),
            poll(&start, 2000),
        ];
        let tasks = vec![
            task(&clone, "qmclone", "9000", 0, 1000),
            task(&start, "qmstart", "101", 1410, 1910),
        ];
        let spans = create_spans(&journal, &tasks);
        assert_eq!(spans.poll_lag_ms, (1210.0 - 1000.0) + (2010.0 - 1910.0));
    }

    /// A config write PVE's worker waited for (`background_delay`) was seen ended by that
    /// request's answer: a listing another wait made later says nothing of the provider's
    /// lag. A write still running at the answer is polled as any task.
    #[test]
    fn a_task_answered_by_its_own_request_was_seen_at_that_answer() {
        let (quick, slow) = (upid("qmconfig", "101"), upid("qmconfig", "102"));
        let write = |vmid: &str, at: (u64, u64)| {
            let path = format!("/nodes/pve1/qemu/{vmid}/config");
            entry("POST", &path, json!({"background_delay": "2"}), at, 200)
        };
        let listing = |at: u64| {
            let params = json!({"source": "all", "since": "0"});
            entry("GET", "/nodes/pve1/tasks", params, (at, at + 10), 200)
        };
        let journal = vec![
            write("101", (100, 230)),
            write("102", (100, 2110)),
            listing(900),
            listing(3000),
        ];
        let tasks = [
            task(&quick, "qmconfig", "101", 110, 200),
            task(&slow, "qmconfig", "102", 110, 2500),
        ];
        let seen: Vec<_> = tasks.iter().map(|t| end_seen(&journal, t)).collect();
        assert_eq!(seen, [Some(230), Some(3010)]);
    }

    /// Per clone: the looks that found it running, the last of them, and its lag; the
    /// shortest run first, and a clone not seen ended yet has no lag.
    #[test]
    fn each_clone_is_listed_with_the_looks_that_saw_it_running() {
        let (early, late) = (upid("qmclone", "9000"), upid("qmclone", "9001"));
        let journal = vec![
            poll(&early, 400),
            poll(&early, 900),
            poll(&early, 2000),
            poll(&late, 1000),
        ];
        let tasks = vec![
            task(&late, "qmclone", "9001", 0, 3000),
            task(&early, "qmclone", "9000", 0, 1500),
            // Not a clone: not listed.
            task(&upid("qmstart", "101"), "qmstart", "101", 0, 100),
        ];
        let clones = clone_lags(&journal, &tasks);
        assert_eq!(
            clones,
            [
                CloneLag {
                    run_ms: 1500,
                    looks_before_end: 2,
                    last_running_ms: Some(910),
                    lag_ms: Some(510),
                },
                CloneLag {
                    run_ms: 3000,
                    looks_before_end: 1,
                    last_running_ms: Some(1010),
                    lag_ms: None,
                },
            ]
        );
        assert_eq!(
            clone_lags_tsv(&clones),
            "run_ms\tlooks_before_end\tlast_running_ms\tlag_ms\n\
             1500\t2\t910\t510\n\
             3000\t1\t1010\t-\n"
        );
    }

    #[test]
    fn a_journal_without_a_clone_has_no_creates() {
        assert_eq!(create_spans(&[], &[]), CreateSpans::default());
    }
}
