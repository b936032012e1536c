//! When to look again while waiting for something of PVE's: the task-polling schedule
//! ([`TaskWait`]), what a client learns of how long each kind of task takes ([`TaskTimes`]),
//! and the pacer that follows both ([`Pacer`]).
//!
//! These are the types the [`Client`](crate::Client) holds and the task waiter in
//! [`tasks`](crate::tasks) uses; they know neither, so neither module imports the other.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OnceCell};

/// How [`Client::wait_for_task`](crate::Client::wait_for_task) polls. The caller owns the
/// deadline (wrap the call in `tokio::time::timeout`).
///
/// The schedule learns: every wait records, per task type, when the task was seen running
/// last and when it was seen stopped, and later waits of that type poll once near the
/// learned run time instead of climbing a geometric ladder (see [`TaskTimes`]); a wait whose
/// looks are shared with others looks first where the shortest recent run ended. A waiter
/// that knows nothing yet climbs the ladder, and wakes early when a task of its type started
/// beside it ends. `docs/dev/benchmarks.md` has the figures.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskWait {
    /// Delay before the first status request of a task type nothing is known of yet: short
    /// tasks (a config write) end within tens of milliseconds.
    pub first_poll: Duration,
    /// While nothing is known, each later delay is the previous one times this factor…
    pub backoff: f64,
    /// …up to this ceiling.
    pub max_interval: Duration,
    /// …or this one while the wait's looks are shared with others on its node (a task
    /// listing answers them all and sets their next look together, so one wide gap is every
    /// wait's gap) and nothing is learned yet: a fleet's first wave (#42).
    pub shared_max_interval: Duration,
    /// How long a UPID may stay invisible ("no such task") after dispatch before that counts
    /// as an error: the task list on another node can lag behind the dispatch.
    pub unknown_grace: Duration,
    /// Log lines fetched into a failure (and scanned for warnings).
    pub log_tail_lines: u32,
    /// Poll near the run time learned from earlier tasks of the same type.
    pub learn: bool,
}

impl Default for TaskWait {
    fn default() -> Self {
        TaskWait {
            first_poll: Duration::from_millis(25),
            backoff: 4.0,
            max_interval: Duration::from_secs(2),
            shared_max_interval: Duration::from_millis(500),
            unknown_grace: Duration::from_secs(10),
            log_tail_lines: 20,
            learn: true,
        }
    }
}

/// How many of a kind's latest run times [`TaskTimes::shortest_recent`] looks at: a few
/// waves of a fleet's creates, so what a storage lock's queue did lately, not long ago.
const RECENT_RUNS: usize = 16;

/// What one client has learned of how long things take, per kind (a task type such as
/// `qmclone`, or another wait such as a guest's first address): an estimate of the run time
/// from the brackets earlier waits saw, and a signal to wake waiters of that kind when one
/// ends (tasks sent together by parallel creates tend to end together).
#[derive(Debug, Default)]
pub struct TaskTimes {
    kinds: Mutex<HashMap<String, Learned>>,
    /// Per source of starting estimates (a node's task archive): set once it was asked
    /// ([`TaskTimes::seed_once`]).
    seeded: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
}

#[derive(Debug, Default)]
struct Learned {
    estimate: Option<Duration>,
    /// The run times the latest waits saw, best guesses from their brackets: the shortest
    /// is where a wait whose looks are cheap looks first (see [`Pacer::looks_are_shared`]).
    recent: VecDeque<Duration>,
    ended: Arc<Notify>,
    /// Waits of this kind started so far: spreads their ladders (see [`Pacer::new`]).
    started: u64,
    /// Per group (a node), the waits that take turns looking while nothing is learned (see
    /// [`Pacer::take_turns`]).
    turns: HashMap<String, Turns>,
}

/// The waits of one kind and group that take turns looking, the one whose turn it is first.
#[derive(Debug, Default)]
struct Turns {
    queue: VecDeque<u64>,
    /// When the first one's turn began.
    since: Option<tokio::time::Instant>,
}

impl TaskTimes {
    /// The learned run time of `kind`, if any wait of that kind ended yet.
    pub fn estimate(&self, kind: &str) -> Option<Duration> {
        self.lock().get(kind).and_then(|l| l.estimate)
    }

    /// The shortest run time among the latest waits of `kind` (the last 16).
    pub fn shortest_recent(&self, kind: &str) -> Option<Duration> {
        self.lock()
            .get(kind)
            .and_then(|l| l.recent.iter().min().copied())
    }

    /// The middle of the latest run times of `kind` (the last 16; the lower
    /// of the two middles of an even count).
    pub fn middle_recent(&self, kind: &str) -> Option<Duration> {
        let kinds = self.lock();
        let mut recent: Vec<Duration> = kinds.get(kind)?.recent.iter().copied().collect();
        recent.sort_unstable();
        recent.get(recent.len().checked_sub(1)? / 2).copied()
    }

    /// Asks `fetch` once per `source` (a node), for the whole client, for starting estimates
    /// (what PVE's task archive says tasks of each type took there), and keeps each for a
    /// kind no wait has learned yet. Waits that start meanwhile wait for that answer instead
    /// of polling, so the first wave of a process does not climb the ladder blind (#42).
    pub async fn seed_once<F, Fut>(&self, source: &str, fetch: F)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Vec<(String, Duration)>>,
    {
        let seeded = self
            .seeded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(source.to_owned())
            .or_default()
            .clone();
        seeded
            .get_or_init(|| async {
                let estimates = fetch().await;
                let mut kinds = self.lock();
                for (kind, estimate) in estimates {
                    kinds
                        .entry(kind)
                        .or_default()
                        .estimate
                        .get_or_insert(estimate);
                }
            })
            .await;
    }

    /// The number of this wait among the waits of its kind.
    fn next_waiter(&self, kind: &str) -> u64 {
        let mut kinds = self.lock();
        let learned = kinds.entry(kind.to_owned()).or_default();
        learned.started += 1;
        learned.started - 1
    }

    fn join_turns(&self, kind: &str, group: &str, ticket: u64) {
        let mut kinds = self.lock();
        let learned = kinds.entry(kind.to_owned()).or_default();
        let turns = learned.turns.entry(group.to_owned()).or_default();
        turns.queue.push_back(ticket);
    }

    /// Whether wait `ticket` of `kind` may look now in `group`, else when the current turn
    /// ends. Once anything of the kind is learned, every wait may. A turn that lasted `turn`
    /// passes to the next wait, and the one that had it goes last.
    fn may_look(
        &self,
        kind: &str,
        group: &str,
        ticket: u64,
        turn: Duration,
    ) -> Result<(), tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        let mut kinds = self.lock();
        let learned = kinds.entry(kind.to_owned()).or_default();
        if learned.estimate.is_some() {
            return Ok(());
        }
        let turns = learned.turns.entry(group.to_owned()).or_default();
        let since = *turns.since.get_or_insert(now);
        let ends = if turns.queue.len() > 1 && now >= since + turn {
            turns.queue.rotate_left(1);
            turns.since = Some(now);
            now + turn
        } else {
            since + turn
        };
        match turns.queue.front() {
            Some(first) if *first != ticket => Err(ends),
            _ => Ok(()),
        }
    }

    /// Wait `ticket` ended: if it had the turn, the next one has it from now.
    fn leave_turns(&self, kind: &str, group: &str, ticket: u64) {
        let signal = {
            let mut kinds = self.lock();
            let Some(learned) = kinds.get_mut(kind) else {
                return;
            };
            let Some(turns) = learned.turns.get_mut(group) else {
                return;
            };
            let had_turn = turns.queue.front() == Some(&ticket);
            turns.queue.retain(|t| *t != ticket);
            if !had_turn || learned.estimate.is_some() {
                return;
            }
            turns.since = Some(tokio::time::Instant::now());
            learned.ended.clone()
        };
        signal.notify_waiters();
    }

    fn signal(&self, kind: &str) -> Arc<Notify> {
        self.lock()
            .entry(kind.to_owned())
            .or_default()
            .ended
            .clone()
    }

    /// Records a wait that saw `kind` still running at `running_at` (if it looked before the
    /// end) and ended at `ended_at`, and wakes the other waiters of that kind.
    pub fn record(&self, kind: &str, running_at: Option<Duration>, ended_at: Duration) {
        let signal = {
            let mut kinds = self.lock();
            let learned = kinds.entry(kind.to_owned()).or_default();
            if learned.recent.len() == RECENT_RUNS {
                learned.recent.pop_front();
            }
            let tight = running_at.is_some_and(|lo| ended_at - lo <= ended_at / 8);
            // Where this run most likely ended, from what its wait saw.
            let guess = match running_at {
                // Ended by the first look: no earlier than that look says.
                None => ended_at,
                // Seen running, then stopped a short step later: late in that step, so the
                // next one of its kind ends at its first look most of the time.
                Some(lo) if tight => ended_at - (ended_at - lo) / 4,
                Some(lo) => (lo + ended_at) / 2,
            };
            learned.recent.push_back(guess);
            learned.estimate = Some(match (learned.estimate, running_at) {
                // Ended by the first look near the estimate: the estimate may be too long
                // now, so probe a little shorter next time (once per round: parallel waiters
                // that all ended at their first look shorten it once, not once each).
                (Some(old), None) => old.min(ended_at.mul_f64(0.98)),
                // A wide bracket (a ladder's rung, a look made when another wait ended) that
                // agrees with the estimate leaves it; waits woken together by the first end
                // of a wave thereby raise it only while one of them saw its task still running
                // later than the estimate.
                (Some(old), Some(lo)) if !tight && old > lo && old <= ended_at => old,
                _ => guess,
            });
            learned.ended.clone()
        };
        signal.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Learned>> {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// When to look next while waiting for one thing of a kind, following [`TaskWait`] and
/// what [`TaskTimes`] learned.
#[derive(Debug)]
pub struct Pacer<'a> {
    times: &'a TaskTimes,
    kind: String,
    opts: TaskWait,
    // tokio's clock, so tests can run a wait on paused time.
    started: tokio::time::Instant,
    step: Duration,
    running_at: Option<Duration>,
    looks: u32,
    past_estimate: bool,
    /// This look was made because another wait of the kind ended.
    woken_by_peer: bool,
    /// Looks cost little: one answers other waits too (a node's shared task listing).
    looks_shared: bool,
    /// A look made at another wait's end found this one still running: the waits of this
    /// kind end one by one (queued behind a lock or PVE's workers), not together, so later
    /// ends do not wake this one again; each would cost a status request for every wait
    /// still queued (#42).
    deaf_to_peers: bool,
    /// This wait's number among the waits of its kind.
    ticket: u64,
    /// The group this wait takes turns in, and how long a turn lasts.
    turns: Option<(String, Duration)>,
    /// PVE holds each look until the thing is ready (see [`Pacer::looks_are_held`]).
    looks_held: bool,
}

impl<'a> Pacer<'a> {
    /// Starts pacing a wait for `kind`, from now.
    pub fn new(times: &'a TaskTimes, kind: &str, opts: &TaskWait) -> Pacer<'a> {
        // Waiters started together spread their looks evenly over one rung of the ladder
        // (in log scale, by the golden ratio's sequence), so together they notice the first
        // end soon after it and wake the others (see `TaskTimes`). The first waits at
        // `first_poll`.
        let rung = opts.backoff.clamp(1.0, 4.0);
        let ticket = times.next_waiter(kind);
        let phase = (ticket as f64 * 0.618_033_988_7).fract();
        let spread = rung.powf(phase);
        Pacer {
            times,
            kind: kind.to_owned(),
            opts: opts.clone(),
            started: tokio::time::Instant::now(),
            step: opts.first_poll.mul_f64(spread),
            running_at: None,
            looks: 0,
            past_estimate: false,
            woken_by_peer: false,
            looks_shared: false,
            deaf_to_peers: false,
            ticket,
            turns: None,
            looks_held: false,
        }
    }

    /// PVE holds each look until the thing is ready, for a while (a look at a guest agent
    /// that is not up waits for qemu-server's 3 s ping, and is answered when the agent
    /// starts), and keeps a worker for it meanwhile. So a look that comes early costs PVE the
    /// time it is early, and one that comes late costs this wait the time it is late: this
    /// wait looks at the middle of the recent runs, 2% early, and another wait's end never
    /// makes it look before that (#42).
    pub fn looks_are_held(&mut self) {
        self.looks_held = true;
    }

    /// Whether this wait is near enough its expected end for another wait's end to make it
    /// look now: from 80% of it, or only at it for a wait whose looks are held.
    fn near_expected_end(&self, expected: Duration) -> bool {
        match self.looks_held {
            true => self.elapsed() >= expected,
            false => self.elapsed() >= expected.mul_f64(0.8),
        }
    }

    /// While nothing is learned of the kind, this wait looks only in its turn among the
    /// waits of `group` (a node) that take turns: the first started first, each for at most
    /// `turn`, then the next, so a look that keeps a PVE worker for as long as the thing is
    /// not ready (a guest agent's ping, #42) is made by one wait per group at a time; the
    /// first end teaches the others when to look. The bound keeps a wait whose thing never
    /// ends from holding the turn.
    pub fn take_turns(&mut self, group: &str, turn: Duration) {
        if self.turns.is_none() {
            self.times.join_turns(&self.kind, group, self.ticket);
            self.turns = Some((group.to_owned(), turn));
        }
    }

    /// Whether this wait's looks are shared with other waits (a node's task listing answers
    /// every wait there), so one more look costs little: then the first look comes where the
    /// shortest recent run of the kind ended, before the expected end. Tasks of a kind queued
    /// behind one lock end spread by its retry sleeps (a clone takes 2.4, 3.4 or 4.3 s by
    /// how often pmxcfs' lock was taken, #42); a look only at the estimate, which the
    /// latest, longest ones set, sees the early ones a second late.
    pub fn looks_are_shared(&mut self, shared: bool) {
        self.looks_shared = shared;
    }

    /// How long this wait has run.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Looks made so far.
    pub fn looks(&self) -> u32 {
        self.looks
    }

    /// Sleeps until the next look: near the learned run time when there is one, else the next
    /// step of the ladder; earlier when another wait of this kind ends meanwhile.
    pub async fn pause(&mut self) {
        let signal = self.times.signal(&self.kind);
        self.woken_by_peer = false;
        loop {
            let notified = signal.notified();
            if let Some((group, turn)) = &self.turns
                && let Err(turn_ends) = self.times.may_look(&self.kind, group, self.ticket, *turn)
            {
                // Not this wait's turn: until it is, or until an end teaches when to look.
                tokio::select! {
                    () = tokio::time::sleep_until(turn_ends) => {}
                    () = notified => {}
                }
                continue;
            }
            let wake = self.next_look();
            if wake <= tokio::time::Instant::now() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(wake) => break,
                () = notified, if !self.deaf_to_peers => {
                    // Another wait of this kind ended. Ours, started about as long ago, may
                    // have ended too: look now if the new estimate says so.
                    if let Some(expected) = self.expected()
                        && self.near_expected_end(expected)
                    {
                        self.woken_by_peer = true;
                        break;
                    }
                }
            }
        }
        self.looks += 1;
    }

    fn learned(&self) -> Option<Duration> {
        if self.opts.learn {
            self.times.estimate(&self.kind)
        } else {
            None
        }
    }

    /// Where this wait expects its thing to end, from its start. The learned estimate probes
    /// shorter after each end seen at a first look, so it follows the quickest recent run. A
    /// held look (see [`Pacer::looks_are_held`]) is answered at the end even when it comes
    /// early, so it never shows the estimate too long, and looks aimed at the quickest run
    /// would come early and keep PVE's workers meanwhile. Such a wait aims at the middle of
    /// the recent runs instead, 2% early: each run it records is the answer to its look, the
    /// end itself when the look came early, later when it came late, so the 2% is what keeps
    /// the middle from creeping later round after round.
    fn expected(&self) -> Option<Duration> {
        let estimate = self.learned()?;
        match self.looks_held {
            true => Some(
                self.times
                    .middle_recent(&self.kind)
                    .map_or(estimate, |middle| middle.mul_f64(0.98)),
            ),
            false => Some(estimate),
        }
    }

    fn next_look(&mut self) -> tokio::time::Instant {
        let last = self.running_at.map_or(self.started, |at| self.started + at);
        if let Some(estimate) = self.expected() {
            if self.looks_shared
                && !self.past_estimate
                && let Some(shortest) = self.times.shortest_recent(&self.kind)
                && shortest < estimate.mul_f64(0.9)
            {
                let early = self.started + shortest;
                if early > last + self.opts.first_poll / 2 {
                    return early;
                }
            }
            let expected = self.started + estimate;
            // Not there yet: one look at the expected end.
            if expected > last + self.opts.first_poll / 2 {
                return expected;
            }
            // Past it: short steps from a tenth of the estimate, growing.
            if !self.past_estimate {
                self.past_estimate = true;
                self.step = (estimate / 10).max(self.opts.first_poll / 2);
            }
        }
        last + self.step
    }

    /// The thing was seen not finished yet at this look.
    pub fn still_running(&mut self) {
        self.still_running_at(tokio::time::Instant::now());
    }

    /// The thing was seen not finished yet at `at`: by this wait's look, or by another
    /// wait's that answered for it too (a node's task listing); either is a rung climbed.
    pub fn still_running_at(&mut self, at: tokio::time::Instant) {
        let at = at.saturating_duration_since(self.started);
        if self.running_at.is_some_and(|seen| seen >= at) {
            return;
        }
        self.running_at = Some(at);
        self.deaf_to_peers |= self.woken_by_peer;
        // Past a learned estimate the end is near: grow gently.
        let (factor, ceiling) = if self.learned().is_some() {
            (1.5, self.opts.max_interval)
        } else if self.looks_shared {
            let shared = self.opts.shared_max_interval.min(self.opts.max_interval);
            (self.opts.backoff.max(1.0), shared)
        } else {
            (self.opts.backoff.max(1.0), self.opts.max_interval)
        };
        self.step = self
            .step
            .mul_f64(factor)
            .min(ceiling)
            .max(self.opts.first_poll);
    }

    /// The thing was seen finished at this look: teaches the client's [`TaskTimes`].
    pub fn finished(&self) {
        self.finished_at(tokio::time::Instant::now());
    }

    /// The thing was seen finished at `at` (see [`Pacer::still_running_at`]).
    pub fn finished_at(&self, at: tokio::time::Instant) {
        let ended_at = at.saturating_duration_since(self.started);
        // A held look that came before the end was answered at the end, so the run is the
        // answer, not somewhere after an earlier look that saw the thing not ready.
        let running_at = match self.looks_held {
            true => None,
            false => self.running_at.filter(|seen| *seen <= ended_at),
        };
        self.times.record(&self.kind, running_at, ended_at);
    }
}

impl Drop for Pacer<'_> {
    fn drop(&mut self) {
        if let Some((group, _)) = &self.turns {
            self.times.leave_turns(&self.kind, group, self.ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_all(times: &TaskTimes, rounds: &[(Option<u64>, u64)]) -> Duration {
        for (lo, hi) in rounds {
            times.record(
                "qmclone",
                lo.map(Duration::from_millis),
                Duration::from_millis(*hi),
            );
        }
        times.estimate("qmclone").unwrap()
    }

    #[test]
    fn the_estimate_follows_what_was_seen_and_shortens_once_per_round() {
        let times = TaskTimes::default();
        assert_eq!(times.estimate("qmclone"), None);
        // Seen running at 1.5 s, stopped at 2.5 s: it ended around 2 s.
        assert_eq!(
            record_all(&times, &[(Some(1500), 2500)]),
            Duration::from_millis(2000)
        );
        // Ten parallel waits all stopped at their first look, at 2 s: shorten once, by 2 %.
        let rounds = vec![(None, 2000); 10];
        assert_eq!(record_all(&times, &rounds), Duration::from_millis(1960));
        // Seen running at 1.96 s and stopped at 2.08 s: look at 2.05 s next time.
        assert_eq!(
            record_all(&times, &[(Some(1960), 2080)]),
            Duration::from_millis(2050)
        );
        // Running at 1 s, stopped at 3 s (woken by another wait): agrees, nothing learned.
        assert_eq!(
            record_all(&times, &[(Some(1000), 3000)]),
            Duration::from_millis(2050)
        );
        // Running at 2.5 s, stopped at 3 s: later than thought, somewhere in between.
        assert_eq!(
            record_all(&times, &[(Some(2500), 3000)]),
            Duration::from_millis(2750)
        );
        // Nothing known, a ladder's rung from 0.8 s to 2.4 s: its middle.
        let fresh = TaskTimes::default();
        fresh.record(
            "qmclone",
            Some(Duration::from_millis(800)),
            Duration::from_millis(2400),
        );
        assert_eq!(fresh.estimate("qmclone"), Some(Duration::from_millis(1600)));
        assert_eq!(times.estimate("qmconfig"), None, "kinds are apart");
    }

    #[tokio::test(start_paused = true)]
    async fn a_learned_wait_looks_once_at_the_expected_end() {
        let times = TaskTimes::default();
        let opts = TaskWait::default();
        // Nothing known: the first look comes within tens of milliseconds.
        let mut pacer = Pacer::new(&times, "qmstart", &opts);
        pacer.pause().await;
        let first = pacer.elapsed();
        assert!(first <= Duration::from_millis(60), "{first:?}");
        pacer.still_running();
        pacer.pause().await;
        assert!(pacer.elapsed() >= first * 3, "the ladder climbs");
        pacer.finished();
        assert!(times.estimate("qmstart").is_some());
        // Known: one look, at the learned end.
        times.record(
            "qmclone",
            Some(Duration::from_millis(1900)),
            Duration::from_millis(2100),
        );
        let learned = times.estimate("qmclone").unwrap();
        let mut pacer = Pacer::new(&times, "qmclone", &opts);
        pacer.pause().await;
        assert_eq!(pacer.elapsed(), learned);
        assert_eq!(pacer.looks(), 1);
        // Not over yet: the next look follows shortly, not a ladder's step later.
        pacer.still_running();
        pacer.pause().await;
        assert!(pacer.elapsed() - learned <= learned / 8);
    }

    /// Clones queued behind pmxcfs' lock take 2.4 s, or a retry sleep or two longer (#42):
    /// the estimate follows the latest, long ones; a wait whose looks are shared looks first
    /// where the shortest recent one ended, then at the estimate; a wait alone only there.
    #[tokio::test(start_paused = true)]
    async fn a_shared_wait_looks_first_where_the_shortest_recent_run_ended() {
        let times = TaskTimes::default();
        let opts = TaskWait::default();
        let ms = Duration::from_millis;
        // Seen running at 2.3 s and stopped at 2.4 s; the next at 4.2 s and 4.3 s.
        times.record("qmclone", Some(ms(2300)), ms(2400));
        times.record("qmclone", Some(ms(4200)), ms(4300));
        let estimate = times.estimate("qmclone").unwrap();
        assert_eq!(estimate, ms(4275));
        assert_eq!(times.shortest_recent("qmclone"), Some(ms(2375)));

        let mut shared = Pacer::new(&times, "qmclone", &opts);
        shared.looks_are_shared(true);
        shared.pause().await;
        assert_eq!(
            shared.elapsed(),
            ms(2375),
            "first look where the short one ended"
        );
        shared.still_running();
        shared.pause().await;
        assert_eq!(shared.elapsed(), estimate, "then at the expected end");
        assert_eq!(shared.looks(), 2);

        let mut alone = Pacer::new(&times, "qmclone", &opts);
        alone.pause().await;
        assert_eq!(
            alone.elapsed(),
            estimate,
            "a wait alone looks once, at the estimate"
        );

        // Runs alike: no look before the estimate.
        let even = TaskTimes::default();
        even.record("qmstart", Some(ms(900)), ms(1000));
        even.record("qmstart", Some(ms(950)), ms(1050));
        let mut shared = Pacer::new(&even, "qmstart", &opts);
        shared.looks_are_shared(true);
        shared.pause().await;
        assert_eq!(shared.elapsed(), even.estimate("qmstart").unwrap());
    }

    /// The widest gap between looks of a wait for a task that runs 8 s, nothing learned.
    async fn widest_gap_knowing_nothing(shared: bool) -> Duration {
        let times = TaskTimes::default();
        let mut pacer = Pacer::new(&times, "qmclone", &TaskWait::default());
        pacer.looks_are_shared(shared);
        let (mut last, mut widest) = (Duration::ZERO, Duration::ZERO);
        while pacer.elapsed() < Duration::from_secs(8) {
            pacer.pause().await;
            widest = widest.max(pacer.elapsed() - last);
            last = pacer.elapsed();
            pacer.still_running();
        }
        widest
    }

    /// A first wave's waits on one node look together (each listing answers them all and
    /// sets their next look), so one ceiling-wide gap is every wait's gap: in #42's 20-VM
    /// apply, four of the first wave's 2.4 s clones were last seen running at 1.3 to 1.8 s
    /// and seen ended 1.0 to 1.4 s after their end.
    /// Shared, the ladder stops at a shorter ceiling; a wait alone keeps the long one.
    #[tokio::test(start_paused = true)]
    async fn a_shared_wait_that_knows_nothing_yet_climbs_to_a_shorter_ceiling() {
        let opts = TaskWait::default();
        assert_eq!(widest_gap_knowing_nothing(false).await, opts.max_interval);
        assert_eq!(
            widest_gap_knowing_nothing(true).await,
            opts.shared_max_interval
        );
    }

    /// Only the latest runs count: a short run long ago does not pull every look early.
    #[test]
    fn the_shortest_recent_run_forgets_old_runs() {
        let times = TaskTimes::default();
        let ms = Duration::from_millis;
        times.record("qmclone", None, ms(1000));
        for _ in 0..RECENT_RUNS - 1 {
            times.record("qmclone", Some(ms(2900)), ms(3000));
        }
        assert_eq!(times.shortest_recent("qmclone"), Some(ms(1000)));
        times.record("qmclone", Some(ms(2900)), ms(3000));
        assert_eq!(times.shortest_recent("qmclone"), Some(ms(2975)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_wakes_when_a_task_started_beside_it_ends() {
        let times = Arc::new(TaskTimes::default());
        let opts = TaskWait::default();
        let mut pacer = Pacer::new(&times, "qmclone", &opts);
        // Climb the ladder well past 1 s without any estimate.
        while pacer.elapsed() < Duration::from_millis(1000) {
            pacer.pause().await;
            pacer.still_running();
        }
        let seen = pacer.elapsed();
        let beside = times.clone();
        let peer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            beside.record("qmclone", Some(Duration::from_millis(900)), seen);
        });
        pacer.pause().await;
        peer.await.unwrap();
        assert!(
            pacer.elapsed() <= seen + Duration::from_millis(60),
            "woke at {:?}, peer ended at {:?}",
            pacer.elapsed(),
            seen + Duration::from_millis(50)
        );
    }

    /// Looks a wait for `qmclone` (learned: about 2 s) makes until 12 s, its task running all
    /// along; with `peers`, waits of its kind queued beside it end one by one, every 900 ms
    /// from 2.5 s.
    async fn looks_of_a_queued_wait(peers: bool) -> u32 {
        let times = Arc::new(TaskTimes::default());
        times.record(
            "qmclone",
            Some(Duration::from_millis(1900)),
            Duration::from_millis(2100),
        );
        let beside = times.clone();
        let peer = tokio::spawn(async move {
            if !peers {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2500)).await;
            for n in 0..10u64 {
                let ended = Duration::from_millis(2500 + 900 * n);
                beside.record("qmclone", Some(Duration::from_millis(1000)), ended);
                tokio::time::sleep(Duration::from_millis(900)).await;
            }
        });
        let opts = TaskWait::default();
        let mut pacer = Pacer::new(&times, "qmclone", &opts);
        while pacer.elapsed() < Duration::from_secs(12) {
            pacer.pause().await;
            pacer.still_running();
        }
        peer.await.unwrap();
        pacer.looks()
    }

    /// Waits queued behind one lock end one by one (#42: clones on one storage): a wait
    /// that looked at a peer's end and found its task still running follows its own
    /// schedule from then on, instead of a status request at every later end.
    #[tokio::test(start_paused = true)]
    async fn a_queued_wait_looks_at_one_peer_end_at_most() {
        let alone = looks_of_a_queued_wait(false).await;
        let queued = looks_of_a_queued_wait(true).await;
        assert!(
            queued <= alone + 1,
            "{queued} looks beside ending peers, {alone} alone"
        );
    }

    /// The archive's answer is asked once per source, however many waits start together,
    /// and never overrides what a wait of a kind has already learned.
    #[tokio::test(start_paused = true)]
    async fn a_source_is_asked_once_and_seeds_only_what_nothing_was_learned_of() {
        let times = TaskTimes::default();
        let asked = std::sync::atomic::AtomicU32::new(0);
        let ask = |answer: &'static [(&'static str, u64)]| {
            let asked = &asked;
            move || async move {
                asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(40)).await;
                answer
                    .iter()
                    .map(|(kind, secs)| ((*kind).to_owned(), Duration::from_secs(*secs)))
                    .collect()
            }
        };
        // A wait that ended before the archive answered keeps what it saw.
        times.record("qmresize", None, Duration::from_millis(700));
        tokio::join!(
            times.seed_once("pve1", ask(&[("qmclone", 3), ("qmresize", 5)])),
            times.seed_once("pve1", ask(&[("qmclone", 9)])),
            times.seed_once("pve1", ask(&[("qmclone", 9)])),
        );
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(times.estimate("qmclone"), Some(Duration::from_secs(3)));
        assert_eq!(times.estimate("qmresize"), Some(Duration::from_millis(700)));

        // Another node is another archive; one with nothing to say leaves the ladder.
        times.seed_once("pve2", ask(&[])).await;
        times.seed_once("pve2", ask(&[("qmstart", 1)])).await;
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(times.estimate("qmstart"), None);
    }

    /// A guest agent not up yet keeps a pvedaemon worker for PVE's 3 s ping on every look,
    /// and a first wave of 50 creates on 3 nodes, looking blind, spent 426 of pvedaemon's
    /// 602 busy seconds on such looks (docs/dev/benchmarks.md, "A guest that boots for
    /// 30 s", #42). Taking turns, one wait per node looks until one ends, another node's
    /// wait looks beside it, and the first end lets every wait look.
    #[tokio::test(start_paused = true)]
    async fn blind_waits_of_a_node_take_turns_until_one_ends() {
        let times = TaskTimes::default();
        let opts = TaskWait {
            first_poll: Duration::from_millis(300),
            backoff: 2.0,
            ..TaskWait::default()
        };
        let turn = Duration::from_secs(10);
        let waits: Vec<Pacer> = ["pve1", "pve1", "pve2"]
            .iter()
            .map(|node| {
                let mut pacer = Pacer::new(&times, "guest-address", &opts);
                pacer.take_turns(node, turn);
                pacer
            })
            .collect();
        let [mut first, mut second, mut beside] = <[Pacer; 3]>::try_from(waits).unwrap();
        first.pause().await;
        beside.pause().await;
        assert!(
            beside.elapsed() < Duration::from_secs(1),
            "another node looks"
        );
        first.still_running();
        let held = tokio::time::timeout(Duration::from_secs(6), second.pause()).await;
        assert!(held.is_err(), "the second looked in the first one's turn");
        // The first one's wait ends: the second, started with it, looks at once.
        first.finished();
        let ended = first.elapsed();
        second.pause().await;
        assert_eq!(second.elapsed(), ended);
        assert_eq!(second.looks(), 1);
    }

    /// A wait whose thing never ends (an image without the agent) holds the turn for one
    /// turn's length only; a wait that stops (its VM gone, its deadline passed) hands it on
    /// at once.
    #[tokio::test(start_paused = true)]
    async fn a_turn_is_bounded_and_passes_on_when_its_wait_stops() {
        let times = TaskTimes::default();
        let opts = TaskWait::default();
        let turn = Duration::from_secs(10);
        let mut waits: Vec<Pacer> = (0..3)
            .map(|_| {
                let mut pacer = Pacer::new(&times, "guest-address", &opts);
                pacer.take_turns("pve1", turn);
                pacer
            })
            .collect();
        waits[0].pause().await;
        waits[0].still_running();
        waits[1].pause().await;
        assert_eq!(
            waits[1].elapsed(),
            turn,
            "the second's turn came after one turn"
        );
        waits[1].still_running();
        tokio::time::sleep(Duration::from_secs(2)).await;
        waits.remove(1);
        waits[1].pause().await;
        assert_eq!(
            waits[1].elapsed(),
            turn + Duration::from_secs(2),
            "the third's turn came when the second stopped"
        );
        // The first, whose turn passed, waits for its next one, after the third's.
        let held = tokio::time::timeout(turn - Duration::from_millis(1), waits[0].pause()).await;
        assert!(held.is_err(), "the first looked in the third's turn");
        waits[0].pause().await;
        assert_eq!(waits[0].elapsed(), turn * 2 + Duration::from_secs(2));
    }

    /// With a 30 s boot, the address waits of a fleet's second wave that another wait's end
    /// woke at 0.8 of the estimate looked 3 to 6 s before their agent started and failed; with
    /// a 3 s boot, woken at 0.8, they came 0.5 s early and each kept a pvedaemon worker that
    /// long (docs/dev/benchmarks.md, #42). A wait whose looks are held is never woken by a
    /// peer before its expected end.
    #[tokio::test(start_paused = true)]
    async fn a_held_look_is_not_woken_by_a_peer_before_its_expected_end() {
        let millis = Duration::from_millis;
        for (held, woken_at) in [(false, millis(25_000)), (true, millis(29_400))] {
            let times = TaskTimes::default();
            times.record("guest-address", None, millis(30_000));
            let mut pacer = Pacer::new(&times, "guest-address", &TaskWait::default());
            if held {
                pacer.looks_are_held();
            }
            let started = pacer.started;
            let peers = async {
                // The held wait expects its end at 29.4 s (2% before the runs' middle).
                for at in [25_000, 29_000] {
                    tokio::time::sleep_until(started + millis(at)).await;
                    times.record("guest-address", None, millis(30_000));
                }
            };
            let (woke, ()) = tokio::join!(
                async {
                    pacer.pause().await;
                    pacer.elapsed()
                },
                peers
            );
            assert_eq!(woke, woken_at, "held {held}");
        }
    }

    /// A held look is answered at the end however early it came, so the runs it records never
    /// show the estimate too long: such a wait looks 2% before the middle of the recent runs,
    /// not at the quickest, where an early look would keep a PVE worker; and its run is the
    /// answer to its last look, not the middle of a bracket.
    #[tokio::test(start_paused = true)]
    async fn a_held_look_aims_at_the_middle_of_the_recent_runs() {
        let millis = Duration::from_millis;
        let times = TaskTimes::default();
        for ended in [3300, 2000, 3100, 3000, 3200] {
            times.record("guest-address", None, millis(ended));
        }
        assert_eq!(times.estimate("guest-address"), Some(millis(1960)));
        assert_eq!(times.middle_recent("guest-address"), Some(millis(3100)));
        for (held, first_look) in [(false, millis(1960)), (true, millis(3038))] {
            let mut pacer = Pacer::new(&times, "guest-address", &TaskWait::default());
            if held {
                pacer.looks_are_held();
            }
            pacer.pause().await;
            assert_eq!(pacer.elapsed(), first_look, "held {held}");
        }
        assert_eq!(TaskTimes::default().middle_recent("guest-address"), None);
        // Seen not ready at 1 s, answered at 3 s: a held look ran until the end.
        for (held, recorded) in [(false, millis(2000)), (true, millis(3000))] {
            let times = TaskTimes::default();
            let mut pacer = Pacer::new(&times, "guest-address", &TaskWait::default());
            if held {
                pacer.looks_are_held();
            }
            tokio::time::advance(millis(1000)).await;
            pacer.still_running();
            tokio::time::advance(millis(2000)).await;
            pacer.finished();
            assert_eq!(
                times.middle_recent("guest-address"),
                Some(recorded),
                "held {held}"
            );
        }
    }
}
