//! How far apart one process starts work that takes a shared storage's pmxcfs lock, learned
//! from whether that work found the lock taken ([`LockSpacer`]).
//!
//! pmxcfs' lock is no queue: a clone that finds `storage-<id>` taken sleeps a tenth of its
//! seconds left, 1 s at first, before it tries again (pve-cluster `Cluster.pm` `$cfs_lock`),
//! however soon the holder is done. Clones sent together therefore take a 150 ms allocation
//! lock about once a second, and a fleet's clones wait most of their time on a free lock.
//! Started about one allocation apart, each finds the lock free. How long an allocation
//! takes is not visible to a client, so the gap is learned: it starts at an estimate of a
//! shared storage's allocation; each start that found the lock taken (its task log says
//! "trying to acquire cfs lock") doubles it, once per round (the starts made at one gap);
//! each that did not shortens it by a sixteenth, so the gap settles a little above an
//! allocation's time. A start whose request waited longer than the gap for PVE's answer
//! (queued behind busy pvedaemon workers) reached the lock when PVE got to it, not where the
//! spacer placed it: if it found the lock taken, a wider gap would not have kept it apart, so
//! the gap does not grow for it (PVE's queue spaces such starts itself).
//!
//! A local storage's flock queues its waiters and hands the lock on at once (pve-common
//! `Tools.pm` `lock_file_full`): nothing is lost there, and its starts are not spaced.
//!
//! The spacer knows nothing of HTTP or tasks: a caller reserves a [`Slot`], waits for it,
//! starts the work, and says how it went ([`LockSpacer::ended`], [`LockSpacer::learn`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The gap before anything was learned: an estimate of one allocation on a shared storage
/// (a qcow2 created on NFS, an RBD image made), on the long side, since a start that finds
/// the lock taken loses a whole second.
pub const FIRST_GAP: Duration = Duration::from_millis(250);

/// The shortest gap a start that found the lock taken grows to.
const GAP_AFTER_TAKEN: Duration = Duration::from_millis(100);

/// How much longer than the fastest clean work a piece of work may take before it may have
/// found the lock taken: its first retry alone sleeps 1 s.
const SLOWER_THAN_CLEAN: Duration = Duration::from_millis(800);

/// The text `$cfs_lock` prints when it finds its lock taken (pve-cluster `Cluster.pm`).
const CFS_LOCK_TAKEN: &str = "trying to acquire cfs lock '";

/// See the module doc. One per process.
#[derive(Debug, Default)]
pub struct LockSpacer {
    gates: Mutex<HashMap<String, Spacing>>,
}

#[derive(Debug)]
struct Spacing {
    gap: Duration,
    /// The earliest the next start may be.
    next: Instant,
    /// Bumped when the gap grows: what started before learns nothing more.
    round: u64,
    /// The shortest work that found the lock free.
    fastest_clean: Option<Duration>,
    taken: u64,
}

/// A start reserved on a spaced lock: wait for it with [`Slot::wait`].
#[derive(Debug, Clone)]
pub struct Slot {
    key: String,
    at: Instant,
    round: u64,
    /// The gap this start was placed by.
    gap: Duration,
}

impl Slot {
    /// When the work may start.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// Waits until the work may start.
    pub async fn wait(&self) {
        tokio::time::sleep_until(self.at).await;
    }
}

/// What a [`LockSpacer`] knows of one lock, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpacingState {
    pub gap: Duration,
    /// Starts that found the lock taken.
    pub taken: u64,
}

impl LockSpacer {
    /// Reserves the next start on the lock `key` (a pmxcfs lock: see the module doc), one
    /// gap after the one reserved before it.
    pub fn reserve(&self, key: &str) -> Slot {
        let mut gates = self.lock();
        let now = Instant::now();
        let spacing = gates.entry(key.to_owned()).or_insert_with(|| Spacing {
            gap: FIRST_GAP,
            next: now,
            round: 0,
            fastest_clean: None,
            taken: 0,
        });
        let at = spacing.next.max(now);
        spacing.next = at + spacing.gap;
        Slot {
            key: key.to_owned(),
            at,
            round: spacing.round,
            gap: spacing.gap,
        }
    }

    /// The work started at `slot`, its request answered after `answered_in`, ended well
    /// after `took` (counted from the request). True when it took long enough to have found
    /// the lock taken: the caller looks (its task log, [`found_cfs_lock_taken`]) and says with
    /// [`LockSpacer::learn`]. Otherwise it found the lock free, learned here; a start answered
    /// later than its gap does not grow it (see the module doc).
    pub fn ended(&self, slot: &Slot, answered_in: Duration, took: Duration) -> bool {
        if answered_in > slot.gap {
            // Placed by PVE's queue: whatever it met, it found the gap no narrower.
            self.learn(slot, false, None);
            return false;
        }
        let slow = {
            let gates = self.lock();
            let fastest = gates.get(&slot.key).and_then(|s| s.fastest_clean);
            fastest.is_none_or(|fastest| took > fastest + SLOWER_THAN_CLEAN)
        };
        if !slow {
            self.learn(slot, false, Some(took));
        }
        slow
    }

    /// The work started at `slot` found its lock taken, or not (`took` when known).
    pub fn learn(&self, slot: &Slot, found_taken: bool, took: Option<Duration>) {
        let mut gates = self.lock();
        let Some(spacing) = gates.get_mut(&slot.key) else {
            return;
        };
        if found_taken {
            spacing.taken += 1;
            if slot.round == spacing.round {
                spacing.gap = (spacing.gap * 2).max(GAP_AFTER_TAKEN);
                spacing.round += 1;
                // Starts already reserved keep their times; the next is a new gap after
                // the last of them.
                tracing::info!(
                    gate = slot.key,
                    gap_ms = spacing.gap.as_millis() as u64,
                    "a clone found its storage's cluster lock taken: spacing the next ones more"
                );
            }
            return;
        }
        if let Some(took) = took {
            spacing.fastest_clean = Some(spacing.fastest_clean.map_or(took, |f| f.min(took)));
        }
        if slot.round == spacing.round {
            spacing.gap -= spacing.gap / 16;
        }
    }

    /// What this spacer knows of the lock `key`.
    pub fn state(&self, key: &str) -> Option<SpacingState> {
        self.lock().get(key).map(|s| SpacingState {
            gap: s.gap,
            taken: s.taken,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Spacing>> {
        self.gates.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether a task's log lines say it found a pmxcfs lock taken.
pub fn found_cfs_lock_taken(lines: &[String]) -> bool {
    lines.iter().any(|line| line.starts_with(CFS_LOCK_TAKEN))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "storage/vmdata";
    /// A clone request answered at once.
    const PROMPT: Duration = Duration::from_millis(20);

    #[tokio::test(start_paused = true)]
    async fn starts_are_one_gap_apart_and_never_in_the_past() {
        let spacer = LockSpacer::default();
        let t0 = Instant::now();
        let slots: Vec<Slot> = (0..4).map(|_| spacer.reserve(KEY)).collect();
        let offsets: Vec<Duration> = slots.iter().map(|s| s.at() - t0).collect();
        assert_eq!(
            offsets,
            [0, 250, 500, 750].map(Duration::from_millis).to_vec()
        );
        slots[3].wait().await;
        assert_eq!(Instant::now() - t0, Duration::from_millis(750));
        // Long after the last reserved start, the next one starts at once.
        tokio::time::advance(Duration::from_secs(5)).await;
        let later = spacer.reserve(KEY);
        assert_eq!(later.at(), Instant::now());
        // Another lock has its own spacing.
        assert_eq!(spacer.reserve("storage/other").at(), Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn a_taken_lock_doubles_the_gap_once_per_round() {
        let spacer = LockSpacer::default();
        let slots: Vec<Slot> = (0..3).map(|_| spacer.reserve(KEY)).collect();
        // All three found the lock taken: only the first of their round grows the gap.
        for slot in &slots {
            spacer.learn(slot, true, None);
        }
        let state = spacer.state(KEY).unwrap();
        assert_eq!(state.gap, Duration::from_millis(500));
        assert_eq!(state.taken, 3);
        // The next start is a new gap after the last one reserved.
        let next = spacer.reserve(KEY);
        assert_eq!(next.at() - slots[2].at(), Duration::from_millis(250));
        let after = spacer.reserve(KEY);
        assert_eq!(after.at() - next.at(), Duration::from_millis(500));
        // Of the new round, one more taken doubles again.
        spacer.learn(&after, true, None);
        assert_eq!(spacer.state(KEY).unwrap().gap, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn clean_starts_shorten_the_gap_and_fast_ones_need_no_look() {
        let spacer = LockSpacer::default();
        let first = spacer.reserve(KEY);
        // Nothing known yet: the caller must look.
        assert!(spacer.ended(&first, PROMPT, Duration::from_millis(2400)));
        spacer.learn(&first, false, Some(Duration::from_millis(2400)));
        let once = FIRST_GAP - FIRST_GAP / 16;
        assert_eq!(spacer.state(KEY).unwrap().gap, once);
        // Within 0.8 s of the fastest clean one: learned clean without a look.
        let second = spacer.reserve(KEY);
        assert!(!spacer.ended(&second, PROMPT, Duration::from_millis(3000)));
        assert_eq!(spacer.state(KEY).unwrap().gap, once - once / 16);
        // Over it: look.
        let third = spacer.reserve(KEY);
        assert!(spacer.ended(&third, PROMPT, Duration::from_millis(3300)));
        // Answered later than its gap: PVE's queue placed it, not the spacer; however slow,
        // nothing to look at, and the gap does not grow.
        let gap = spacer.state(KEY).unwrap().gap;
        let queued = spacer.reserve(KEY);
        assert!(!spacer.ended(
            &queued,
            gap + Duration::from_millis(1),
            Duration::from_secs(9)
        ));
        assert_eq!(spacer.state(KEY).unwrap().gap, gap - gap / 16);
        // A gap shrunk to nothing grows back to a useful one when the lock is found taken.
        for _ in 0..200 {
            let slot = spacer.reserve(KEY);
            spacer.learn(&slot, false, None);
        }
        assert!(spacer.state(KEY).unwrap().gap < Duration::from_millis(1));
        let slot = spacer.reserve(KEY);
        spacer.learn(&slot, true, None);
        assert_eq!(spacer.state(KEY).unwrap().gap, GAP_AFTER_TAKEN);
    }

    #[test]
    fn the_cfs_lock_text_is_what_cluster_pm_prints() {
        let log = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        assert!(found_cfs_lock_taken(&log(&[
            "create full clone of drive scsi0 (vmdata:9000/base-9000-disk-0.qcow2)",
            "trying to acquire cfs lock 'storage-vmdata' ...",
            "allocated target volume 'vmdata:101/vm-101-disk-0.qcow2'",
        ])));
        // A local storage's flock prints other words, and is not spaced.
        assert!(!found_cfs_lock_taken(&log(&["trying to acquire lock..."])));
        assert_eq!(spacer_unknown(), None);
    }

    fn spacer_unknown() -> Option<SpacingState> {
        LockSpacer::default().state(KEY)
    }
}
