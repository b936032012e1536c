//! One task listing per node that serves every wait on that node (#42).
//!
//! A fleet's creates wait for many tasks on each node at once (clones, resizes, starts);
//! asking each task's status on its own costs one request per wait and look, and each of
//! them queues in pveproxy's few workers. PVE lists a node's tasks in one request
//! (`GET /nodes/{node}/tasks?source=all&since=…`: the running ones from its active file,
//! then the ended ones from its task index with their exit status, pve-manager
//! `PVE/API2/Tasks.pm` `node_tasks`), so while two or more waits run on a node, a wait's
//! look asks for that listing instead, and every other wait on the node reads its own task's
//! row from the same answer. A wait alone on its node asks its task's status, as directly.
//!
//! The board knows neither the client nor the pacer: [`crate::tasks`] gives it the request
//! to make and reads the rows.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// What a listing says of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// Still running (PVE's `RUNNING`, or no status).
    Running,
    /// Ended, with its exit status (`OK`, `WARNINGS: n`, or the error text).
    Ended(String),
}

impl TaskState {
    /// A listing row's `status` as PVE gives it: `RUNNING` for the active file's tasks, the
    /// exit status for the index's.
    pub fn from_listing(status: Option<&str>) -> TaskState {
        match status {
            None | Some("RUNNING") => TaskState::Running,
            Some(exit) => TaskState::Ended(exit.to_owned()),
        }
    }
}

/// One answer of a node's task listing.
#[derive(Debug)]
pub struct Listing {
    seq: u64,
    /// When the answer came (tokio's clock).
    pub answered_at: tokio::time::Instant,
    rows: HashMap<String, TaskState>,
}

impl Listing {
    /// The state of the task `upid`, if the listing has it.
    pub fn state(&self, upid: &str) -> Option<&TaskState> {
        self.rows.get(upid)
    }
}

/// The boards of a client's nodes.
#[derive(Debug, Default)]
pub struct TaskBoards {
    nodes: Mutex<HashMap<String, Arc<NodeBoard>>>,
}

#[derive(Debug)]
struct NodeBoard {
    /// Held while a listing is asked for: a look that comes meanwhile takes that answer.
    asking: tokio::sync::Mutex<()>,
    latest: watch::Sender<Option<Arc<Listing>>>,
    /// The start times (Unix seconds, from the UPIDs) of the waits on the node, counted:
    /// the listing starts at the oldest.
    waits: Mutex<BTreeMap<u64, usize>>,
    /// A listing failed: the node's waits ask their tasks' status instead, for the client's
    /// life (a proxy or an old PVE that does not serve the listing costs one request).
    failed: AtomicBool,
}

impl TaskBoards {
    /// Enters a wait for a task started at `starttime` (Unix seconds) on `node`; it leaves
    /// the board when the returned [`BoardSeat`] is dropped.
    pub fn join(&self, node: &str, starttime: u64) -> BoardSeat {
        let board = self
            .nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.to_owned())
            .or_insert_with(|| {
                Arc::new(NodeBoard {
                    asking: tokio::sync::Mutex::new(()),
                    latest: watch::Sender::new(None),
                    waits: Mutex::new(BTreeMap::new()),
                    failed: AtomicBool::new(false),
                })
            })
            .clone();
        *board.waits().entry(starttime).or_default() += 1;
        let updates = board.latest.subscribe();
        // Listings made before this wait joined may not hold its task.
        let seen = seq_of(&updates.borrow());
        BoardSeat {
            board,
            starttime,
            updates,
            seen,
        }
    }
}

fn seq_of(listing: &Option<Arc<Listing>>) -> u64 {
    listing.as_ref().map_or(0, |l| l.seq)
}

impl NodeBoard {
    fn waits(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        self.waits.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One wait's place on its node's board.
#[derive(Debug)]
pub struct BoardSeat {
    board: Arc<NodeBoard>,
    starttime: u64,
    updates: watch::Receiver<Option<Arc<Listing>>>,
    /// The newest listing this wait has read.
    seen: u64,
}

impl BoardSeat {
    /// Whether this wait's looks go through the node's listing: another wait is on the
    /// node, and the listing has not failed there.
    pub fn shared(&self) -> bool {
        !self.board.failed.load(Ordering::Relaxed) && self.board.waits().values().sum::<usize>() > 1
    }

    /// A look through the node's listing: a listing this wait has not read yet if there is
    /// one (another wait's look, answered or still asked, serves this one), else a new one
    /// from `fetch`, given the oldest start time of the node's waits, which returns rows of
    /// `(upid, status)`. `None` when the listing failed, now or in another wait's look: the
    /// node's waits ask their own tasks' status from then on.
    pub async fn look<F, Fut>(&mut self, fetch: F) -> Option<Arc<Listing>>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = Option<Vec<(String, Option<String>)>>>,
    {
        let board = self.board.clone();
        let _asking = board.asking.lock().await;
        if let Some(listing) = self.unread() {
            return Some(listing);
        }
        // Looks queued behind a failed one do not ask again.
        if board.failed.load(Ordering::Relaxed) {
            return None;
        }
        let since = board
            .waits()
            .keys()
            .next()
            .copied()
            .unwrap_or(self.starttime);
        let Some(rows) = fetch(since).await else {
            board.failed.store(true, Ordering::Relaxed);
            return None;
        };
        let listing = Arc::new(Listing {
            seq: seq_of(&board.latest.borrow()) + 1,
            answered_at: tokio::time::Instant::now(),
            rows: rows
                .into_iter()
                .map(|(upid, status)| (upid, TaskState::from_listing(status.as_deref())))
                .collect(),
        });
        board.latest.send_replace(Some(listing.clone()));
        self.seen = listing.seq;
        Some(listing)
    }

    /// The next listing another wait on the node made. Never ends while none comes.
    pub async fn next_listing(&mut self) -> Arc<Listing> {
        loop {
            if let Some(listing) = self.unread() {
                return listing;
            }
            if self.updates.changed().await.is_err() {
                // The board (and its sender) lives as long as this seat; unreachable, but
                // wait forever rather than spin.
                std::future::pending::<()>().await;
            }
        }
    }

    fn unread(&mut self) -> Option<Arc<Listing>> {
        let latest = self.updates.borrow_and_update().clone()?;
        (latest.seq > self.seen).then(|| {
            self.seen = latest.seq;
            latest
        })
    }
}

impl Drop for BoardSeat {
    fn drop(&mut self) {
        let mut waits = self.board.waits();
        if let Some(count) = waits.get_mut(&self.starttime) {
            *count -= 1;
            if *count == 0 {
                waits.remove(&self.starttime);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pairs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(u, s)| (u.to_string(), s.map(str::to_owned)))
            .collect()
    }

    #[tokio::test]
    async fn a_listing_serves_every_wait_on_its_node_and_starts_at_the_oldest() {
        let boards = TaskBoards::default();
        let mut a = boards.join("pve1", 200);
        assert!(
            !a.shared(),
            "alone on its node, a wait asks its task's status"
        );
        let mut b = boards.join("pve1", 100);
        let other_node = boards.join("pve2", 50);
        assert!(a.shared() && b.shared() && !other_node.shared());

        let listing = a
            .look(|since| async move {
                assert_eq!(since, 100, "from the oldest wait on the node");
                Some(rows(&[("A", Some("RUNNING")), ("B", Some("OK"))]))
            })
            .await
            .unwrap();
        assert_eq!(listing.state("A"), Some(&TaskState::Running));
        // b reads the same answer without asking, once.
        let seen_by_b = b.next_listing().await;
        assert_eq!(seen_by_b.state("B"), Some(&TaskState::Ended("OK".into())));
        let again = b
            .look(|_| async { Some(rows(&[("B", Some("boom"))])) })
            .await
            .unwrap();
        assert_eq!(again.state("B"), Some(&TaskState::Ended("boom".into())));
        // a has not read b's listing: its next look takes it without asking.
        let unread = a
            .look(|_| async { panic!("a listing it has not read serves this look") })
            .await
            .unwrap();
        assert_eq!(unread.seq, again.seq);

        drop(b);
        assert!(!a.shared(), "alone again");
    }

    #[tokio::test]
    async fn a_wait_that_joins_later_does_not_read_older_listings() {
        let boards = TaskBoards::default();
        let mut a = boards.join("pve1", 100);
        let _b = boards.join("pve1", 100);
        a.look(|_| async { Some(rows(&[])) }).await.unwrap();
        let mut c = boards.join("pve1", 300);
        let fresh = c
            .look(|since| async move {
                assert_eq!(since, 100);
                Some(rows(&[("C", None)]))
            })
            .await
            .unwrap();
        assert_eq!(fresh.state("C"), Some(&TaskState::Running));
    }

    #[tokio::test]
    async fn a_failed_listing_sends_the_nodes_waits_back_to_their_own_status() {
        let boards = TaskBoards::default();
        let mut a = boards.join("pve1", 100);
        let mut b = boards.join("pve1", 100);
        // b's look queued behind a's failing one: it does not ask again.
        let (failed, queued) = tokio::join!(
            a.look(|_| async { None }),
            b.look(|_| async { panic!("a failed listing is not asked again") })
        );
        assert!(failed.is_none() && queued.is_none());
        assert!(!a.shared() && !b.shared());
        let newcomer = boards.join("pve1", 100);
        assert!(!newcomer.shared());
    }
}
