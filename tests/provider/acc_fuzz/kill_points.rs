//! The kill sweeps (#38): each scenario's command killed at every request index, then
//! repaired. The single-VM create and destroy run in CI; the longer ones are ignored here
//! and run by `scripts/fuzz.sh sweep` (figures in docs/dev/reliability.md).

use super::model::Edit::*;
use super::ops::ApplyMode::*;
use super::ops::ClusterAct::*;
use super::ops::HandAct::*;
use super::ops::KillDuring::*;
use super::ops::Op::*;
use super::sweep::Sweep;
use crate::support::acceptance_enabled;

/// How many kill points run at once (each in a world of its own).
fn parallel() -> usize {
    super::runner::env_u64("SWEEP_PARALLEL").map_or(2, |n| n.max(1) as usize)
}

async fn sweep_clean(test: &str, sweep: Sweep) {
    if !acceptance_enabled(test) {
        return;
    }
    let report = sweep.run(None, parallel()).await;
    assert!(
        report.failures.is_empty(),
        "{}: {:?}",
        report.line(sweep.name),
        report.failures
    );
}

/// Seed 11165's sequence with its kill swept over every index of state 1's apply.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a sweep of seed 11165's kill: scripts/fuzz.sh sweep"]
async fn sweep_seed_11165() {
    sweep_clean(
        "sweep_seed_11165",
        Sweep {
            name: "seed-11165",
            setup: vec![
                Race,
                Apply(0, vec![Disk(0, 8), UserData(0, 1)], Plain),
                Cluster(0, 0, NodeReboot),
                SavePlan(0),
                Hand(0, 1, DeleteVm),
                Apply(0, vec![Tags(0, false)], Plain),
                Apply(0, vec![Present(0, false)], Plain),
            ],
            kill: |at| Kill(1, vec![Cores(1, 2), Memory(0, 768)], DuringApply, at),
            repair: vec![Apply(0, vec![], ReplaceSlot(1)), Taint(0, 1)],
        },
    )
    .await;
}
