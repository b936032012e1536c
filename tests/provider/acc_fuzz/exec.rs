//! Runs one [`Op`] in a [`World`] and says what happened ([`Outcome`]): the terraform
//! commands with their exit codes and text, whether the command was killed, and what the
//! model expected of it. An op that does not apply now (a taint of a VM the state does not
//! hold, a saved plan never made) is skipped, so every subsequence of a sequence still runs.

use serde_json::json;

use super::model::{Edit, SLOTS, address, name};
use super::ops::{
    ApplyMode, ClusterAct, Family, FaultKind, HandAct, ImportHow, KillAt, KillDuring, Op,
};
use super::world::{Cluster, Held, SimVm, World, kill_group};
use crate::support::{TfOutput, Workspace};

/// What the model expected of an op's commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing in the world explains a failure: it must succeed.
    Success,
    /// Faults, a kill, another state or an operator's hand may make it fail.
    MayFail,
    /// It must be refused, before any write.
    Refusal,
}

/// One terraform command an op ran.
#[derive(Clone, Debug)]
pub struct Ran {
    pub state: usize,
    pub args: String,
    pub code: i32,
    pub text: String,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub state: Option<usize>,
    pub ran: Vec<Ran>,
    pub killed: bool,
    /// An operator moved a VM while the command ran ([`Op::MovedUnder`]).
    pub moved: bool,
    pub skipped: Option<&'static str>,
    pub expect: Expect,
    /// A full, refreshing apply of the state's current configuration succeeded: the next
    /// plan must be empty (I5).
    pub settled: bool,
    /// What the state held before a destroy that succeeded (I7: none of it may be left).
    pub destroyed: Option<Vec<Held>>,
    /// Write requests the op's commands sent (a refusal sends none).
    pub writes: usize,
    /// A kill step whose command ended before its kill point: the PVE API requests it sent
    /// (how many kill points a sweep of it has).
    pub requests: Option<u64>,
}

impl Outcome {
    fn new(state: Option<usize>, expect: Expect) -> Self {
        Self {
            state,
            ran: Vec::new(),
            killed: false,
            moved: false,
            skipped: None,
            expect,
            settled: false,
            destroyed: None,
            writes: 0,
            requests: None,
        }
    }

    fn skip(reason: &'static str) -> Self {
        let mut out = Self::new(None, Expect::MayFail);
        out.skipped = Some(reason);
        out
    }

    /// The commands of the final teardown in a state.
    pub fn teardown(state: usize) -> Self {
        Self::new(Some(state), Expect::MayFail)
    }

    pub fn push(&mut self, state: usize, args: &[&str], output: &TfOutput) {
        self.ran.push(Ran {
            state,
            args: args.join(" "),
            code: output.code(),
            text: output.all_text(),
        });
    }

    pub fn failed(&self) -> bool {
        self.killed || self.ran.iter().any(|r| r.code != 0)
    }
}

const APPLY: [&str; 4] = ["apply", "-auto-approve", "-input=false", "-no-color"];

/// Runs `op`; `armed`: a fault is in force for this step.
pub async fn run(world: &mut World, op: &Op, armed: bool) -> Outcome {
    let expect = match op.state() {
        Some(state) => expectation(world, state, armed).await,
        None => Expect::MayFail,
    };
    let before = world.journal_writes().await;
    let mut out = match op {
        Op::Apply(state, edits, mode) => apply(world, *state, edits, *mode, expect).await,
        Op::ShrinkBelowTemplate(state, slot) => shrink(world, *state, *slot).await,
        Op::Taint(state, slot) => state_cmd(world, *state, *slot, "taint", expect).await,
        Op::StateRm(state, slot) => state_cmd(world, *state, *slot, "rm", expect).await,
        Op::SavePlan(state) => save_plan(world, *state, expect).await,
        Op::ApplySaved(state) => apply_saved(world, *state).await,
        Op::ApplySavedElsewhere(state) => apply_saved_elsewhere(world, *state).await,
        Op::FreshDirectory(state) => fresh_directory(world, *state).await,
        Op::StateRmThenApply(state, slot) => {
            let mut out = state_cmd(world, *state, *slot, "rm", expect).await;
            if out.skipped.is_some() {
                return out;
            }
            // The VM the state forgot is now another state's as far as any create can tell.
            let applied = apply(world, *state, &[], ApplyMode::Plain, Expect::MayFail).await;
            out.ran.extend(applied.ran);
            out.expect = Expect::MayFail;
            out
        }
        Op::Destroy(state) => destroy(world, *state, expect).await,
        Op::Import(state, slot, how) => import(world, *state, *slot, *how, expect).await,
        Op::Race => race(world).await,
        Op::Kill(state, edits, during, after) => kill(world, *state, edits, *during, *after).await,
        Op::Fault(kind) => fault(world, *kind).await,
        Op::Hand(state, slot, act) => hand(world, *state, *slot, *act).await,
        Op::Cluster(state, slot, act) => cluster(world, *state, *slot, *act).await,
        Op::MovedUnder(state, slot, edits, at) => {
            moved_under(world, *state, *slot, edits, *at, expect).await
        }
    };
    out.writes = world.journal_writes().await - before;
    out
}

/// What may explain a failure of a command in `state` now: faults, an operator's hand on
/// one of its VMs, one of its VMs on a node that is down, or a VM of its names that another
/// state holds or a `state rm` left.
async fn expectation(world: &World, state: usize, armed: bool) -> Expect {
    if armed {
        return Expect::MayFail;
    }
    let cluster = world.cluster().await;
    let held = world.held(state);
    let tampered = held.iter().any(|h| match cluster.vms.get(&h.vmid) {
        Some(vm) => vm.protected || !vm.has_mark() || vm.token() != h.token.as_deref(),
        None => false,
    });
    if tampered || held.iter().any(|h| world.marks.contains_key(&h.vmid)) {
        return Expect::MayFail;
    }
    // A VM on a node that is down can be neither changed nor destroyed (seed 7018).
    let offline = world.offline_nodes().await;
    let unreachable = held.iter().any(|h| {
        cluster
            .vms
            .get(&h.vmid)
            .is_some_and(|vm| offline.contains(&vm.node))
    });
    if unreachable {
        return Expect::MayFail;
    }
    if contested(world, state, &cluster, &held) {
        return Expect::MayFail;
    }
    Expect::Success
}

/// A VM of one of the state's names exists that this state neither holds nor made (its
/// token is not in this directory's journal): another state's, or one `state rm` left.
fn contested(world: &World, state: usize, cluster: &Cluster, held: &[Held]) -> bool {
    let names: Vec<String> = (0..SLOTS).map(name).collect();
    cluster.vms.values().any(|vm| {
        let ours = held
            .iter()
            .any(|h| h.vmid == vm.vmid && h.token.as_deref() == vm.token());
        let journaled = vm.token().is_some_and(|t| world.journal_mentions(state, t));
        // A VM `state rm` (or a lost directory) left is another state's from then on, even
        // though this directory's journal made it: the apply refuses it (#38, seed 38008).
        let forgotten = world
            .forgotten
            .iter()
            .any(|((s, _), vmid)| *s == state && *vmid == vm.vmid);
        // Another state holds it (say, imported it after this one forgot it: seed 38263).
        let held_elsewhere = (0..world.states.len())
            .filter(|other| *other != state)
            .any(|other| world.held(other).iter().any(|h| h.vmid == vm.vmid));
        names.contains(&vm.name) && !ours && (!journaled || forgotten || held_elsewhere)
    })
}

async fn command(world: &mut World, state: usize, args: &[&str], out: &mut Outcome) -> bool {
    let output = world.terraform(state, args).await;
    out.push(state, args, &output);
    output.code() == 0
}

async fn apply(
    world: &mut World,
    state: usize,
    edits: &[Edit],
    mode: ApplyMode,
    expect: Expect,
) -> Outcome {
    let slot_present = |world: &World, slot: usize| world.states[state].config.slots[slot].present;
    match mode {
        ApplyMode::ReplaceSlot(slot) if !held_slot(world, state, slot) => {
            return Outcome::skip("-replace of a VM the state does not hold");
        }
        ApplyMode::TargetSlot(slot) if !slot_present(world, slot) => {
            return Outcome::skip("-target of a resource not configured");
        }
        _ => {}
    }
    for edit in edits {
        world.states[state].config.apply(*edit);
    }
    // Without a refresh, the replacement of a tainted VM under create_before_destroy cannot
    // be told from a create meeting another state's VM of the name (Terraform plans it with
    // no prior state and no private data): the create refuses, saying so and what to do, as
    // documented (seed 12096).
    let blind =
        mode == ApplyMode::NoRefresh && world.states[state].config.cbd && world.has_tainted(state);
    // Without a refresh, the plan changes a VM the state holds that is gone (an operator's
    // delete, or a killed destroy PVE finished): the update can only fail, and says so
    // (seed 9313).
    let stale = mode == ApplyMode::NoRefresh && {
        let cluster = world.cluster().await;
        let held = world.held(state);
        held.iter().any(|h| !cluster.vms.contains_key(&h.vmid))
    };
    let expect = if blind || stale {
        Expect::MayFail
    } else {
        expect
    };
    world.write_config(state, "").await;
    let flag = match mode {
        ApplyMode::Plain => String::new(),
        ApplyMode::ReplaceSlot(slot) => format!("-replace={}", address(slot)),
        ApplyMode::TargetSlot(slot) => format!("-target={}", address(slot)),
        ApplyMode::NoRefresh => "-refresh=false".to_owned(),
    };
    let mut args = APPLY.to_vec();
    if !flag.is_empty() {
        args.push(&flag);
    }
    let mut out = Outcome::new(Some(state), expect);
    let ok = command(world, state, &args, &mut out).await;
    let refreshing = matches!(mode, ApplyMode::Plain | ApplyMode::ReplaceSlot(_));
    out.settled = ok && refreshing;
    if mode != ApplyMode::NoRefresh {
        world.states[state].behind_back = false;
    }
    out
}

fn held_slot(world: &World, state: usize, slot: usize) -> bool {
    world.held(state).iter().any(|h| h.address == address(slot))
}

async fn shrink(world: &mut World, state: usize, slot: usize) -> Outcome {
    let shrunk = world.states[state].config.with_shrunk_disk(slot);
    world
        .ws(state)
        .await
        .write_main_tf(&shrunk.render(state, ""));
    let mut out = Outcome::new(Some(state), Expect::Refusal);
    command(world, state, &APPLY, &mut out).await;
    world.write_config(state, "").await;
    out
}

async fn state_cmd(
    world: &mut World,
    state: usize,
    slot: usize,
    which: &str,
    expect: Expect,
) -> Outcome {
    let Some(held) = world
        .held(state)
        .into_iter()
        .find(|h| h.address == address(slot))
    else {
        return Outcome::skip("the state does not hold the VM");
    };
    let mut out = Outcome::new(Some(state), expect);
    let target = address(slot);
    let args: Vec<&str> = match which {
        "taint" => vec!["taint", "-no-color", &target],
        _ => vec!["state", "rm", "-no-color", &target],
    };
    if command(world, state, &args, &mut out).await && which == "rm" {
        world.forgotten.insert((state, slot), held.vmid);
    }
    out
}

async fn save_plan(world: &mut World, state: usize, expect: Expect) -> Outcome {
    let mut out = Outcome::new(Some(state), expect);
    world.write_config(state, "").await;
    let args = ["plan", "-input=false", "-no-color", "-out=saved.tfplan"];
    // A plan stores no refresh: what the operator did stays behind the state's back until an
    // apply or a destroy writes the state (seed 12006 read a VM deleted by hand, still in
    // the state after a plan that noted the deletion, as I1).
    if command(world, state, &args, &mut out).await {
        world.states[state].saved = Some(world.states[state].config.clone());
    }
    out
}

async fn apply_saved(world: &mut World, state: usize) -> Outcome {
    let Some(saved) = world.states[state].saved.take() else {
        return Outcome::skip("no saved plan");
    };
    // A saved plan is stale once the state changed since: Terraform refuses it then.
    let mut out = Outcome::new(Some(state), Expect::MayFail);
    let args = ["apply", "-input=false", "-no-color", "saved.tfplan"];
    let ok = command(world, state, &args, &mut out).await;
    out.settled = settles(world, state, &saved, ok);
    out
}

/// Whether a saved plan's successful apply leaves nothing to plan: it was made from the
/// configuration as it is, and the operator changed nothing since the state's last refresh
/// (a saved plan applies what it planned, without a refresh: seed 33023, a VM deleted by
/// hand after the plan was saved is planned again by the next plan).
fn settles(world: &World, state: usize, saved: &super::model::StateConfig, ok: bool) -> bool {
    ok && *saved == world.states[state].config && !world.states[state].behind_back
}

/// A CI job's apply of a saved plan: a new directory gets the configuration, the state and
/// the plan file (not `.terraform/`, so no journal), is initialised, and applies the plan.
async fn apply_saved_elsewhere(world: &mut World, state: usize) -> Outcome {
    let Some(saved) = world.states[state].saved.take() else {
        return Outcome::skip("no saved plan");
    };
    let from = world.ws(state).await.work_dir();
    let copy = Workspace::new(world.target.clone());
    for file in [
        "main.tf",
        "terraform.tfstate",
        "saved.tfplan",
        ".terraform.lock.hcl",
    ] {
        if from.join(file).exists() {
            std::fs::copy(from.join(file), copy.work_dir().join(file)).unwrap();
        }
    }
    copy.init().await;
    world.states[state].ws = Some(copy);
    // Stale, or a replacement whose journal stayed behind: it may be refused.
    let mut out = Outcome::new(Some(state), Expect::MayFail);
    let args = ["apply", "-input=false", "-no-color", "saved.tfplan"];
    let ok = command(world, state, &args, &mut out).await;
    out.settled = settles(world, state, &saved, ok);
    out
}

/// The state's directory is lost (its VMs live on with no state: like `state rm`, an import
/// takes each back), and the configuration is applied from a fresh directory.
async fn fresh_directory(world: &mut World, state: usize) -> Outcome {
    for held in world.held(state) {
        let slot = (0..SLOTS).find(|slot| address(*slot) == held.address);
        if let Some(slot) = slot {
            world.forgotten.insert((state, slot), held.vmid);
        }
    }
    for (slot, vmid) in stranded_creates(world, state).await {
        world.forgotten.entry((state, slot)).or_insert(vmid);
    }
    world.states[state].ws = None;
    world.states[state].saved = None;
    // Every VM of its names is another state's now: each is refused with the import hint.
    apply(world, state, &[], ApplyMode::Plain, Expect::MayFail).await
}

/// The finished VMs that `state`'s journal made and no state holds: creates killed after they
/// finished on PVE and before Terraform stored them (seed 31013). Without the directory they
/// are stranded like the VMs it held: refused with the import hint, and a user takes them
/// back by importing them. By slot.
async fn stranded_creates(world: &World, state: usize) -> Vec<(usize, u64)> {
    let Some(ws) = world.states[state].ws.as_ref() else {
        return Vec::new();
    };
    let journal: String = super::world::files_under(ws.work_dir().join(".terraform/proxyvm"))
        .iter()
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .collect();
    let held: Vec<u64> = (0..world.states.len())
        .flat_map(|s| world.held(s))
        .map(|h| h.vmid)
        .collect();
    let cluster = world.cluster().await;
    cluster
        .vms
        .values()
        .filter(|vm| vm.finished() && !held.contains(&vm.vmid))
        .filter(|vm| vm.token().is_some_and(|token| journal.contains(token)))
        .filter_map(|vm| Some(((0..SLOTS).find(|slot| name(*slot) == vm.name)?, vm.vmid)))
        .collect()
}

async fn destroy(world: &mut World, state: usize, expect: Expect) -> Outcome {
    let held = world.held(state);
    let mut out = Outcome::new(Some(state), expect);
    world.write_config(state, "").await;
    if command(
        world,
        state,
        &["destroy", "-auto-approve", "-input=false", "-no-color"],
        &mut out,
    )
    .await
    {
        out.destroyed = Some(held);
        world.states[state].behind_back = false;
    }
    out
}

pub async fn import(
    world: &mut World,
    state: usize,
    slot: usize,
    how: ImportHow,
    expect: Expect,
) -> Outcome {
    let cluster = world.cluster().await;
    let held_anywhere = |world: &World, vmid: u64| {
        (0..world.states.len()).any(|s| world.held(s).iter().any(|h| h.vmid == vmid))
    };
    let found = world
        .forgotten
        .iter()
        .filter(|((_, s), _)| *s == slot)
        .map(|(key, vmid)| (*key, *vmid))
        .find(|(_, vmid)| cluster.vms.contains_key(vmid) && !held_anywhere(world, *vmid));
    let present = world.states[state].config.slots[slot].present;
    let (Some((key, vmid)), true, false) = (found, present, held_slot(world, state, slot)) else {
        return Outcome::skip("no forgotten VM of the slot to import here");
    };
    let id = format!("{}/{vmid}", cluster.vms[&vmid].node);
    let mut out = Outcome::new(Some(state), expect);
    let ok = match how {
        ImportHow::Cli => {
            let args = ["import", "-input=false", "-no-color", &address(slot), &id];
            command(world, state, &args, &mut out).await
        }
        ImportHow::Block => {
            let block = format!(
                "\nimport {{\n  to = {}\n  id = \"{id}\"\n}}\n",
                address(slot)
            );
            world.write_config(state, &block).await;
            let ok = command(world, state, &APPLY, &mut out).await;
            world.write_config(state, "").await;
            ok
        }
    };
    if ok {
        world.forgotten.remove(&key);
    }
    out
}

async fn race(world: &mut World) -> Outcome {
    for state in 0..world.states.len() {
        world.write_config(state, "").await;
    }
    let (a, b) = (
        world.states[0].ws.as_ref().unwrap(),
        world.states[1].ws.as_ref().unwrap(),
    );
    let (out_a, out_b) = tokio::join!(a.apply(), b.apply());
    let mut out = Outcome::new(None, Expect::MayFail);
    for (state, output) in [(0, out_a), (1, out_b)] {
        out.ran.push(Ran {
            state,
            args: "apply (racing the other state)".to_owned(),
            code: output.code(),
            text: output.all_text(),
        });
    }
    out
}

async fn kill(
    world: &mut World,
    state: usize,
    edits: &[Edit],
    during: KillDuring,
    at: KillAt,
) -> Outcome {
    for edit in edits {
        world.states[state].config.apply(*edit);
    }
    world.write_config(state, "").await;
    let args: &[&str] = match during {
        KillDuring::DuringApply => &APPLY,
        KillDuring::DuringDestroy => &["destroy", "-auto-approve", "-input=false", "-no-color"],
    };
    // The world stands still at the `at`th request from here: the kill lands exactly after
    // requests 1 to at-1, however loaded the machine is (#38).
    let (index, after_handling) = match at {
        KillAt::Request(n) => (n, false),
        KillAt::Answer(n) => (n, true),
    };
    world
        .client
        .hold_request(u64::from(index.max(1)), after_handling)
        .await;
    let held_before = world.held(state);
    let mut child = world.spawn(state, args).await;
    let mut out = Outcome::new(Some(state), Expect::MayFail);
    let held = world
        .client
        .until_held(|| child.try_wait().unwrap().is_some())
        .await;
    if held {
        kill_group(&mut child);
        out.killed = true;
        world.client.release_hold().await;
        if world.state_file_emptied(state) {
            // Killed while Terraform wrote its state (the three-VM roll's sweep, #38): the
            // state's VMs live on with no state, as after `state rm`.
            for held in held_before {
                if let Some(slot) = (0..SLOTS).find(|slot| address(*slot) == held.address) {
                    world.forgotten.insert((state, slot), held.vmid);
                }
            }
        }
        return out;
    }
    out.requests = Some(world.client.hold_status().await.seen);
    world.client.release_hold().await;
    let status = child.wait().unwrap();
    // Its warnings count as any command's (seed 13317: a lost mark's warning was not read,
    // so I1 found the state's VM unexplained).
    let text = world.spawned_output(state).await;
    out.ran.push(Ran {
        state,
        args: format!("{} (exited before the kill point)", args.join(" ")),
        code: status.code().unwrap_or(-1),
        text,
    });
    out
}

async fn fault(world: &mut World, kind: FaultKind) -> Outcome {
    let faults = match kind {
        FaultKind::Http5xx(endpoint, status, count) => {
            let (method, path) = endpoint.matcher();
            json!({"http": [{"method": method, "path_regex": path, "status": status,
                "count": count}]})
        }
        FaultKind::Reset(endpoint, count) | FaultKind::LostAnswer(endpoint, count) => {
            let (method, path) = endpoint.matcher();
            let lost = matches!(kind, FaultKind::LostAnswer(..));
            json!({"http": [{"method": method, "path_regex": path, "reset": true,
                "after_handling": lost, "count": count}]})
        }
        FaultKind::HeldLock(state, slot, tenths) => {
            let Some(held) = world
                .held(state)
                .into_iter()
                .find(|h| h.address == address(slot))
            else {
                return Outcome::skip("no VM to lock");
            };
            json!({"held_locks": [{"vmid": held.vmid, "lock": "backup",
                "seconds": f64::from(tenths) / 10.0}]})
        }
        FaultKind::TaskFail(task) => json!({"task_failures": [{"task_type": task, "nth": 1}]}),
        FaultKind::DeafGuests => json!({
            "agent_blocked_commands": [{"vm_name_regex": ".", "commands": ["guest-shutdown"]}],
            "acpi_ignored": ["."],
        }),
    };
    world.client.set_faults(faults).await;
    Outcome::new(None, Expect::MayFail)
}

/// The operator's destroy of `vm`, its worker held once it freed the disks and left the
/// config `lock: destroyed` (the runner lifts the stall after the next step).
async fn delete_stalled(world: &mut World, vm: &SimVm, base: &str) -> Result<(), (u16, String)> {
    let _ = world
        .call_task("POST", &format!("{base}/status/stop"), &[])
        .await;
    world.settle_power(vm.vmid, false).await;
    world
        .client
        .set_faults(json!({"stalled_tasks": [{"task_type": "qmdestroy", "vmid": vm.vmid}]}))
        .await;
    let purge = [("purge", "1"), ("destroy-unreferenced-disks", "1")];
    if let Err(refused) = world.call("DELETE", base, &purge).await {
        world.client.set_faults(json!({})).await;
        return Err(refused);
    }
    world.marks.remove(&vm.vmid);
    world.stalled = Some(vm.vmid);
    if world.client.until_destroy_locked(&vm.node, vm.vmid).await {
        return Ok(());
    }
    Err((
        0,
        format!("VM {}'s destroy never reached its lock", vm.vmid),
    ))
}

/// The VM the state holds at `slot`, as the simulator has it now.
async fn held_vm(world: &World, state: usize, slot: usize) -> Option<SimVm> {
    let cluster = world.cluster().await;
    world
        .held(state)
        .into_iter()
        .find(|h| h.address == address(slot))
        .and_then(|h| cluster.vms.get(&h.vmid).cloned())
}

async fn hand(world: &mut World, state: usize, slot: usize, act: HandAct) -> Outcome {
    let Some(vm) = held_vm(world, state, slot).await else {
        return Outcome::skip("the state holds no VM there");
    };
    let base = format!("/nodes/{}/qemu/{}", vm.node, vm.vmid);
    let result = match act {
        // Under HA the task only queues a request (qemu-server `vm_stop`/`vm_start`: `ha
        // stop`/`ha start` for the CRM), and the VM changes later: wait for it, so that a
        // stop HA carries out during the next command is not taken for that command's.
        HandAct::StopVm => {
            let stopped = world
                .call_task("POST", &format!("{base}/status/stop"), &[])
                .await;
            world.settle_power(vm.vmid, false).await;
            stopped
        }
        HandAct::StartVm if !vm.running => {
            let started = world
                .call_task("POST", &format!("{base}/status/start"), &[])
                .await;
            world.settle_power(vm.vmid, true).await;
            started
        }
        HandAct::StartVm => Ok(()),
        HandAct::DeleteVm => {
            let _ = world
                .call_task("POST", &format!("{base}/status/stop"), &[])
                .await;
            // Under HA as for StopVm: else PVE refuses the delete of the running VM, and HA
            // stops it during the next command (seed 12226).
            world.settle_power(vm.vmid, false).await;
            let purge = [("purge", "1"), ("destroy-unreferenced-disks", "1")];
            let deleted = world.call_task("DELETE", &base, &purge).await;
            if deleted.is_ok() {
                // A mark the operator replaced went with the VM: a VM made at its VMID later
                // is another (seed 12120 wrote the old mark onto the new VM).
                world.marks.remove(&vm.vmid);
            }
            deleted
        }
        HandAct::DeleteVmStalled => delete_stalled(world, &vm, &base).await,
        HandAct::ProtectOn | HandAct::ProtectOff => {
            let on = if act == HandAct::ProtectOn { "1" } else { "0" };
            world
                .call("PUT", &format!("{base}/config"), &[("protection", on)])
                .await
                .map(drop)
        }
        HandAct::EditMark => {
            world.marks.entry(vm.vmid).or_insert(vm.description.clone());
            // A VM of the name without its mark looks foreign to every create: a second VM
            // of the name may be made beside it, legitimately (I2 exempts the name).
            world.edited_names.insert(vm.name.clone());
            let notes = [("description", "edge proxy, see the runbook")];
            world
                .call("PUT", &format!("{base}/config"), &notes)
                .await
                .map(drop)
        }
        HandAct::RestoreMark => match world.marks.remove(&vm.vmid) {
            Some(mark) => {
                let form = [("description", mark.as_str())];
                world
                    .call("PUT", &format!("{base}/config"), &form)
                    .await
                    .map(drop)
            }
            None => Ok(()),
        },
    };
    for state in &mut world.states {
        state.behind_back = true;
    }
    match result {
        // PVE may refuse the operator too (a protected VM cannot be deleted): not ours.
        Err(_) => Outcome::skip("PVE refused the operator"),
        Ok(()) => Outcome::new(None, Expect::MayFail),
    }
}

/// An apply during which an operator migrates the VM of `slot`'s name: pve-sim holds the
/// apply at its `at`th request while the VM moves (admin requests are never held), then lets
/// it go on. It must end as the apply would without the move: a command follows a VM that
/// moves under it (#40). A VM PVE will not move there and then (HA-managed, a task of it
/// running, a local seed attached) stays, and the apply is a plain one.
async fn moved_under(
    world: &mut World,
    state: usize,
    slot: usize,
    edits: &[Edit],
    at: u16,
    expect: Expect,
) -> Outcome {
    for edit in edits {
        world.states[state].config.apply(*edit);
    }
    world.write_config(state, "").await;
    world.client.hold_request(u64::from(at.max(1)), false).await;
    let mut child = world.spawn(state, &APPLY).await;
    let mut out = Outcome::new(Some(state), expect);
    let held = world
        .client
        .until_held(|| child.try_wait().unwrap().is_some())
        .await;
    if held {
        let cluster = world.cluster().await;
        // A VM of the name (the highest VMID of several): the state's, or the one this apply
        // is making.
        let named = cluster.vms.values().rev().find(|vm| vm.name == name(slot));
        if let Some(vm) = named.cloned() {
            let moved = world.client.migrate_now(vm.vmid, next_node(&vm.node)).await;
            if moved.is_ok_and(|answer| answer["node"] != vm.node.as_str()) {
                world.cluster_acted = true;
                out.moved = true;
            }
        }
        world.client.resume_hold().await;
    } else {
        world.client.release_hold().await;
    }
    let status = child.wait().unwrap();
    let text = world.spawned_output(state).await;
    out.ran.push(Ran {
        state,
        args: APPLY.join(" "),
        code: status.code().unwrap_or(-1),
        text,
    });
    out.settled = status.success();
    world.states[state].behind_back = false;
    out
}

/// The node after `node`, round the cluster.
fn next_node(node: &str) -> &'static str {
    match node {
        "pve1" => "pve2",
        "pve2" => "pve3",
        _ => "pve1",
    }
}

async fn cluster(world: &mut World, state: usize, slot: usize, act: ClusterAct) -> Outcome {
    let Some(vm) = held_vm(world, state, slot).await else {
        return Outcome::skip("the state holds no VM there");
    };
    let next = next_node(&vm.node);
    let sid = format!("vm:{}", vm.vmid);
    let online = if vm.running { "1" } else { "0" };
    let result = match act {
        ClusterAct::Migrate => {
            let path = format!("/nodes/{}/qemu/{}/migrate", vm.node, vm.vmid);
            let form = [("target", next), ("online", online)];
            world.call_task("POST", &path, &form).await
        }
        ClusterAct::HaAdd => world
            .call("POST", "/cluster/ha/resources", &[("sid", sid.as_str())])
            .await
            .map(drop),
        ClusterAct::NodeReboot | ClusterAct::NodeFail | ClusterAct::NodeRecover => {
            let verb = match act {
                ClusterAct::NodeReboot => "reboot",
                ClusterAct::NodeFail => "fail",
                _ => "recover",
            };
            let path = format!("/_sim/nodes/{}/{verb}", vm.node);
            world.call("POST", &path, &[]).await.map(drop)
        }
    };
    world.cluster_acted = true;
    for state in &mut world.states {
        state.behind_back = true;
    }
    match result {
        // pve-sim answers a path it does not serve with 501 (PVE's API) or 404 (admin).
        Err((404 | 501, _)) => {
            world.unsupported.insert(Family::Cluster);
            Outcome::skip("the simulator does not offer this yet")
        }
        Err(_) => Outcome::skip("PVE refused the operator"),
        Ok(()) => Outcome::new(None, Expect::MayFail),
    }
}
