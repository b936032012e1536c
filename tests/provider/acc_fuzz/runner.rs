//! Sequences: drawn from a seed, run from scratch in a world of their own with the
//! invariants checked after every step, shrunk when one fails (delta debugging: drop steps,
//! run again from scratch, keep what still fails the same invariant), and reported as a
//! seed, a sequence and the shortest failing sequence written as a regression test.

use std::time::{Duration, Instant};

use super::checks::{Checker, Violation};
use super::exec;
use super::ops::{Family, FaultKind, Gen, HandAct, Op};
use super::world::World;

/// What a run did, for the summary line.
#[derive(Debug, Default)]
pub struct Stats {
    pub sequences: u64,
    pub steps: u64,
    pub skipped_steps: u64,
    /// Commands killed (SIGKILL) before they ended.
    pub kills: u64,
    /// VMs an operator moved while a command ran.
    pub moves: u64,
    pub checks: u64,
    pub undecided: u64,
    pub shrink_runs: u64,
}

/// A sequence that broke an invariant, and the shortest one found that breaks it too.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub sequence: Vec<Op>,
    pub step: usize,
    pub violation: Violation,
    pub shortest: Vec<Op>,
}

/// The sequence of `steps` ops a seed stands for, drawn from the enabled families.
pub fn generate(seed: u64, steps: usize, enabled: &dyn Fn(Family) -> bool) -> Vec<Op> {
    let mut generator = Gen {
        rng: fastrand::Rng::with_seed(seed),
        enabled,
    };
    (0..steps).map(|_| generator.op()).collect()
}

/// An operator's stalled destroy ([`HandAct::DeleteVmStalled`]) stands through the step
/// after it: kept by its own step (put back if lifting that step's armed fault took it),
/// lifted after the next, unless that one installed faults of its own, which replaced it.
async fn end_or_keep_stall(world: &mut World, op: &Op, done: bool, was_armed: bool) {
    let stalling = matches!(op, Op::Hand(_, _, HandAct::DeleteVmStalled));
    match world.stalled {
        Some(vmid) if stalling && done && was_armed => {
            let stall = serde_json::json!({"stalled_tasks": [
                {"task_type": "qmdestroy", "vmid": vmid}]});
            world.client.set_faults(stall).await;
        }
        Some(_) if stalling && done => {}
        Some(_) => {
            // A fault step that ran installed faults of its own, which replaced the stall.
            let replaced = matches!(op, Op::Fault(_)) && done;
            if !replaced {
                world.client.set_faults(serde_json::json!({})).await;
            }
            world.stalled = None;
        }
        None => {}
    }
}

/// Runs a sequence from scratch; the first violation and the step it came after
/// (`ops.len()` for the final teardown).
pub async fn run_sequence(ops: &[Op], stats: &mut Stats) -> Option<(usize, Violation)> {
    let mut world = World::start().await;
    let mut checker = Checker::default();
    let mut armed: Option<FaultKind> = None;
    let verbose = std::env::var_os("FUZZ_VERBOSE").is_some();
    // What each step did, printed when the run fails: a failure seen once in hundreds of
    // runs (a kill sweep) is diagnosed from its own run, not from a rerun.
    let mut story = Vec::new();
    let mut result = None;
    for (index, op) in ops.iter().enumerate() {
        let before = world.cluster().await;
        let out = exec::run(&mut world, op, armed.is_some()).await;
        let faulted = armed.is_some_and(|kind| {
            matches!(
                kind,
                FaultKind::TaskFail(_) | FaultKind::Reset(..) | FaultKind::LostAnswer(..)
            )
        });
        let was_armed = armed.is_some();
        armed = match op {
            Op::Fault(kind) if out.skipped.is_none() => Some(*kind),
            _ => {
                if was_armed {
                    world.client.set_faults(serde_json::json!({})).await;
                }
                None
            }
        };
        end_or_keep_stall(&mut world, op, out.skipped.is_none(), was_armed).await;
        stats.steps += 1;
        if out.skipped.is_some() {
            stats.skipped_steps += 1;
        }
        stats.kills += u64::from(out.killed);
        stats.moves += u64::from(out.moved);
        let told = tell_step(&mut world, index, op, &out).await;
        if verbose {
            eprintln!("{told}");
        }
        story.push(told);
        let found = checker
            .after_step(&mut world, &out, &before, faulted || was_armed)
            .await;
        if let Some(first) = found.into_iter().next() {
            result = Some((index, first));
            break;
        }
    }
    if result.is_none() {
        if world.stalled.take().is_some() {
            world.client.set_faults(serde_json::json!({})).await;
        }
        let found = checker.teardown(&mut world).await;
        result = found.into_iter().next().map(|v| (ops.len(), v));
    }
    if let Some((step, violation)) = &result {
        let requests = requests_about(&world, &violation.detail).await;
        eprintln!(
            "the run that broke {} after step {step}:\n{}\n  its requests about the VMs \
             named:\n{}",
            violation.invariant,
            story.join("\n"),
            requests.join("\n")
        );
    }
    stats.sequences += 1;
    stats.checks += checker.checks;
    stats.undecided += checker.undecided;
    result
}

/// One step of a run as told: the op, its commands' exit codes and errors, and the VMs and
/// seeds after it.
async fn tell_step(world: &mut World, index: usize, op: &Op, out: &exec::Outcome) -> String {
    let codes: Vec<i32> = out.ran.iter().map(|r| r.code).collect();
    let mut lines = vec![format!(
        "fuzz step {index}: {op:?} -> exit {codes:?} killed {} moved {} skipped {:?}",
        out.killed, out.moved, out.skipped
    )];
    for ran in out.ran.iter().filter(|r| r.code != 0) {
        let text = crate::support::flat(&ran.text);
        let error = text.find("Error:").map_or("", |at| &text[at..]);
        let error: String = error.chars().take(300).collect();
        lines.push(format!("    {}: {error}", ran.args));
    }
    let cluster = world.cluster().await;
    for vm in cluster.vms.values() {
        let seed = vm.seed().unwrap_or("-");
        let token = vm.token().unwrap_or("-");
        lines.push(format!(
            "    VM {} {} on {} running {} seed {seed} token {token}",
            vm.vmid, vm.name, vm.node, vm.running
        ));
    }
    lines.push(format!("    seeds {:?}", cluster.seeds));
    lines.join("\n")
}

/// Every request of the run (index, method, path, status, the mark it wrote) that names a
/// VMID the violation's text names.
async fn requests_about(world: &World, detail: &str) -> Vec<String> {
    let vmids: Vec<String> = detail
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| n.len() >= 3)
        .map(|n| format!("/{n}"))
        .collect();
    let journal = world.client.journal().await;
    journal
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            let path = e["path"].as_str().unwrap_or_default();
            vmids
                .iter()
                .any(|v| path.ends_with(v.as_str()) || path.contains(&format!("{v}/")))
        })
        .map(|(i, e)| {
            let mark = e["params"]["description"].as_str().unwrap_or_default();
            let mark: String = mark.chars().take(160).collect();
            format!(
                "    #{i} {} {} -> {} {mark}",
                e["method"].as_str().unwrap_or_default(),
                e["path"].as_str().unwrap_or_default(),
                e["status"]
            )
        })
        .collect()
}

/// Delta debugging: the shortest sequence found (within `budget`) that still fails in the
/// same shape ([`Violation::shape`]).
pub async fn shrink(mut ops: Vec<Op>, shape: &str, budget: Duration, stats: &mut Stats) -> Vec<Op> {
    let deadline = Instant::now() + budget;
    let mut chunks = 2usize;
    while ops.len() > 1 && Instant::now() < deadline {
        let size = ops.len().div_ceil(chunks);
        let mut reduced = false;
        for start in (0..ops.len()).step_by(size) {
            if Instant::now() >= deadline {
                break;
            }
            let mut candidate = ops.clone();
            candidate.drain(start..(start + size).min(ops.len()));
            stats.shrink_runs += 1;
            let mut scratch = Stats::default();
            let failed = run_sequence(&candidate, &mut scratch).await;
            if let Some((step, v)) = failed.filter(|(_, v)| v.shape() == shape) {
                eprintln!(
                    "fuzz shrink: {} -> {} steps still break {}",
                    ops.len(),
                    candidate.len(),
                    v.invariant
                );
                candidate.truncate(step + 1);
                ops = candidate;
                chunks = (chunks - 1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if size == 1 {
                break;
            }
            chunks = (chunks * 2).min(ops.len());
        }
    }
    ops
}

/// Runs the sequence of each seed and shrinks what fails.
pub async fn run_seeds(
    seeds: impl Iterator<Item = u64>,
    steps: usize,
    enabled: &dyn Fn(Family) -> bool,
    until: Option<Instant>,
    shrink_budget: Duration,
    stats: &mut Stats,
) -> Vec<Failure> {
    let mut failures: Vec<Failure> = Vec::new();
    for seed in seeds {
        if until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let sequence = generate(seed, steps, enabled);
        let Some((step, violation)) = run_sequence(&sequence, stats).await else {
            continue;
        };
        eprintln!("{}", report_head(seed, &sequence, step, &violation));
        let mut first = sequence.clone();
        first.truncate(step + 1);
        // The same invariant broken by the same kind of step as an earlier failure of this
        // run is most likely the same bug: reported, not shrunk again.
        let seen = failures
            .iter()
            .any(|f| signature(f) == signature_of(&first, &violation));
        let shortest = if seen {
            eprintln!("fuzz: like an earlier failure of this run; not shrunk");
            first
        } else {
            shrink(first, &violation.shape(), shrink_budget, stats).await
        };
        let failure = Failure {
            seed,
            sequence,
            step,
            violation,
            shortest,
        };
        eprintln!("{}", regression_text(&failure));
        failures.push(failure);
    }
    failures
}

fn signature(failure: &Failure) -> (String, String) {
    let mut first = failure.sequence.clone();
    first.truncate(failure.step + 1);
    signature_of(&first, &failure.violation)
}

/// The families of the step that broke an invariant, and the failure's shape.
fn signature_of(first: &[Op], violation: &Violation) -> (String, String) {
    let last = first
        .last()
        .map(|op| format!("{:?}", op.families()))
        .unwrap_or_default();
    (last, violation.shape())
}

fn report_head(seed: u64, sequence: &[Op], step: usize, violation: &Violation) -> String {
    let steps: Vec<String> = sequence
        .iter()
        .enumerate()
        .map(|(i, op)| format!("  {i:>3}: {op:?}"))
        .collect();
    format!(
        "FUZZ FAILURE seed {seed}: {} after step {step}\n{}\nsequence:\n{}",
        violation.invariant,
        violation.detail,
        steps.join("\n")
    )
}

/// The shortest failing sequence as a test to paste into `acc_fuzz::regressions`.
pub fn regression_text(failure: &Failure) -> String {
    let ops: Vec<String> = failure
        .shortest
        .iter()
        .map(|op| format!("            {},", rust(op)))
        .collect();
    format!(
        "shortest sequence breaking {} (seed {}, {} of {} steps), for acc_fuzz/regressions.rs:\n\
         #[tokio::test(flavor = \"multi_thread\")]\n\
         async fn fuzz_seed_{}_{}() {{\n    \
             regression(\n        \"fuzz_seed_{}_{}\",\n        vec![\n{}\n        ],\n    \
             )\n    .await;\n}}",
        failure.violation.invariant,
        failure.seed,
        failure.shortest.len(),
        failure.sequence.len(),
        failure.seed,
        failure.violation.invariant.to_lowercase(),
        failure.seed,
        failure.violation.invariant.to_lowercase(),
        ops.join("\n"),
    )
}

/// An op as Rust source: its `Debug` form, with the one list an op holds as a `vec!`.
pub fn rust(op: &Op) -> String {
    format!("{op:?}").replace('[', "vec![")
}

pub fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().and_then(|v| v.trim().parse().ok())
}
