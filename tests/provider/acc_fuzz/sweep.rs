//! Every kill point swept (#38): a command killed at each request index of its run, one
//! run from scratch per index, then the repair steps (`apply`, `destroy`), with every
//! invariant checked after each step and at the final teardown (I2: no second VM of a name;
//! I3: every VM first booted its holder's seed; I7: no VM and no seed left). The kill lands
//! where pve-sim holds the command's Nth request (`/_sim/hold`), so index N is the same cut
//! of the run whatever the machine's load.

use std::time::{Duration, Instant};

use super::checks::Violation;
use super::exec;
use super::ops::{KillAt, Op};
use super::runner::{Stats, run_sequence, rust};
use super::world::World;

/// A swept scenario: `setup` brings the world to where the command starts, `kill(at)` is the
/// command killed at a point, `repair` what a user does next.
pub struct Sweep {
    pub name: &'static str,
    pub setup: Vec<Op>,
    pub kill: fn(KillAt) -> Op,
    pub repair: Vec<Op>,
}

/// What a sweep found.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// The requests the command sends when nothing kills it: each is a kill point before its
    /// handling and one after (its answer lost).
    pub points: u16,
    pub runs: u64,
    /// Runs that broke I2 (a second VM of a name), I7 (a VM or seed left) or anything else.
    pub duplicates: u64,
    pub leaks: u64,
    pub other: u64,
    /// Each failing kill point, the step it failed after and what broke.
    pub failures: Vec<(KillAt, usize, Violation)>,
    pub wall: Duration,
}

impl SweepReport {
    pub fn line(&self, name: &str) -> String {
        format!(
            "sweep {name}: {} kill points, {} runs, {} duplicates, {} leaks, {} other failures, \
             {:.0} s",
            self.points,
            self.runs,
            self.duplicates,
            self.leaks,
            self.other,
            self.wall.as_secs_f64()
        )
    }
}

impl Sweep {
    /// The whole sequence for kill point `at`.
    pub fn sequence(&self, at: KillAt) -> Vec<Op> {
        let mut ops = self.setup.clone();
        ops.push((self.kill)(at));
        ops.extend(self.repair.iter().cloned());
        ops
    }

    /// How many requests the command sends when nothing kills it (measured in a world of
    /// its own: the setup, then the command with a kill point it never reaches).
    pub async fn points(&self) -> u16 {
        let mut world = World::start().await;
        for op in &self.setup {
            exec::run(&mut world, op, false).await;
        }
        let never = (self.kill)(KillAt::Request(u16::MAX));
        let out = exec::run(&mut world, &never, false).await;
        let seen = out
            .requests
            .unwrap_or_else(|| panic!("{}: the unkilled command did not end", self.name));
        u16::try_from(seen).expect("a command sends fewer than 65,535 requests")
    }

    /// Kills the command at every point in `at` (all of its kill points, before and after
    /// each request, when `None`), `parallel` runs at a time, each from scratch.
    pub async fn run(&self, at: Option<Vec<KillAt>>, parallel: usize) -> SweepReport {
        let started = Instant::now();
        let points = self.points().await;
        let indexes = at.unwrap_or_else(|| {
            (1..=points)
                .flat_map(|n| [KillAt::Request(n), KillAt::Answer(n)])
                .collect()
        });
        let mut report = SweepReport {
            points,
            ..SweepReport::default()
        };
        for chunk in indexes.chunks(parallel.max(1)) {
            let runs = chunk.iter().map(|n| {
                let sequence = self.sequence(*n);
                async move {
                    let mut stats = Stats::default();
                    (*n, run_sequence(&sequence, &mut stats).await)
                }
            });
            for (n, failed) in futures_join_all(runs).await {
                report.runs += 1;
                let Some((step, violation)) = failed else {
                    continue;
                };
                eprintln!(
                    "sweep {}: kill point {n:?} broke {} after step {step}: {}\n  sequence: \
                     vec![{}]",
                    self.name,
                    violation.invariant,
                    violation.detail,
                    self.sequence(n)
                        .iter()
                        .map(rust)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                match violation.invariant {
                    "I2" => report.duplicates += 1,
                    "I7" => report.leaks += 1,
                    _ => report.other += 1,
                }
                report.failures.push((n, step, violation));
            }
        }
        report.wall = started.elapsed();
        eprintln!("{}", report.line(self.name));
        report
    }
}

/// Runs the futures concurrently on this task and returns their outputs in order.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in pinned.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future ended"))
        .collect()
}
