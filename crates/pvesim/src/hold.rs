//! A test's deterministic kill point: the Nth PVE API request from the moment the hold is set
//! is accepted and answered nothing, and the world stops there (every later request waits
//! too), until the test releases it. A test kills its client while the world stands still,
//! then releases: the held requests are dropped unanswered, as if the killed client never
//! sent them. What happened before the hold is exactly requests 1 to N-1 (with
//! `after_handling`, 1 to N, the Nth one's answer lost), however loaded the machine is.
//!
//! With `counting`, only requests whose line (`METHOD /path?decoded-query`) contains that text
//! count: a test stops the world at a request of its choice (the first upload, say) and sees
//! in `held_requests` what the client sent beside it, however loaded the machine is.
//!
//! A test may instead resume the held requests: they are handled (or answered) as if they
//! had just arrived, so it can change the world at a chosen point of a client's run (a node
//! reboots just before the client's last read) and see what the client makes of it.
//!
//! Not PVE behaviour: a test facility, like the faults. PVE's own workers (tasks) go on
//! while requests are held, as they go on when a real client dies.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// What a test asks for: `PUT /_sim/hold`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct HoldRequest {
    /// The request to hold, counted from 1 over the PVE API requests that arrive after the
    /// hold is set (admin requests do not count).
    pub request: u64,
    /// Handle the Nth request first and hold only its answer (the client cannot tell
    /// whether it took effect); later requests are held unhandled.
    pub after_handling: bool,
    /// Count only requests whose line (`GET /nodes/pve1/qemu/100/config`, a query decoded
    /// after `?`) contains this text; every request after the Nth such one is held too.
    pub counting: Option<String>,
}

/// What `GET /_sim/hold` answers.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct HoldStatus {
    /// A hold is set.
    pub armed: bool,
    pub request: u64,
    pub after_handling: bool,
    pub counting: Option<String>,
    /// PVE API requests that arrived since the hold was set (the counted ones only, with
    /// `counting`).
    pub seen: u64,
    /// Requests waiting now: once this is at least 1 the world stands still.
    pub held: u64,
    /// The lines of the requests waiting, in their order of arrival.
    pub held_requests: Vec<String>,
}

#[derive(Debug)]
struct Armed {
    generation: u64,
    ask: HoldRequest,
    seen: u64,
    held: u64,
    held_requests: Vec<String>,
}

/// What a request does at the gate.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Handled as usual.
    Pass,
    /// Not handled: wait for the release, then drop the connection.
    HoldBefore(Waiter),
    /// Handled, then its answer waits for the release and is dropped.
    HoldAfter(Waiter),
}

/// How a held request's hold ended.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Released {
    /// Dropped unanswered, as if its client never sent it.
    Dropped,
    /// It goes on.
    Resumed,
}

/// A held request's ticket: ends once its hold is released.
#[derive(Debug, PartialEq, Eq)]
pub struct Waiter(u64);

/// The hold of one simulator.
#[derive(Debug)]
pub struct RequestHold {
    armed: Mutex<Option<Armed>>,
    next_generation: Mutex<u64>,
    /// The newest generation released.
    released: watch::Sender<u64>,
    /// The generations released by [`RequestHold::resume`]: their held requests go on.
    resumed: Mutex<Vec<u64>>,
}

impl Default for RequestHold {
    fn default() -> Self {
        Self {
            armed: Mutex::new(None),
            next_generation: Mutex::new(0),
            released: watch::Sender::new(0),
            resumed: Mutex::new(Vec::new()),
        }
    }
}

impl RequestHold {
    /// Sets a hold, replacing one not yet released (its held requests are released): at
    /// once, so no request passes between the two holds.
    pub fn set(&self, ask: HoldRequest) {
        let generation = {
            let mut next = lock(&self.next_generation);
            *next += 1;
            *next
        };
        let replaced = lock(&self.armed).replace(Armed {
            generation,
            ask,
            seen: 0,
            held: 0,
            held_requests: Vec::new(),
        });
        if let Some(replaced) = replaced {
            self.released.send_replace(replaced.generation);
        }
    }

    /// Releases every held request (they are dropped) and clears the hold.
    pub fn release(&self) {
        if let Some(armed) = lock(&self.armed).take() {
            self.released.send_replace(armed.generation);
        }
    }

    /// Clears the hold and lets every held request go on: handled as if it arrived now (or,
    /// held after handling, answered).
    pub fn resume(&self) {
        let mut armed = lock(&self.armed);
        if let Some(taken) = armed.take() {
            // Recorded before the waiters wake, so each sees its generation resumed.
            lock(&self.resumed).push(taken.generation);
            self.released.send_replace(taken.generation);
        }
    }

    pub fn status(&self) -> HoldStatus {
        match lock(&self.armed).as_ref() {
            Some(armed) => HoldStatus {
                armed: true,
                request: armed.ask.request,
                after_handling: armed.ask.after_handling,
                counting: armed.ask.counting.clone(),
                seen: armed.seen,
                held: armed.held,
                held_requests: armed.held_requests.clone(),
            },
            None => HoldStatus::default(),
        }
    }

    /// Counts an arriving PVE API request (`line` gives `METHOD /path?decoded-query`, built
    /// only while a hold is set: every request passes here) and says what it does.
    pub fn admit(&self, line: impl FnOnce() -> String) -> Gate {
        let mut armed = lock(&self.armed);
        let Some(armed) = armed.as_mut() else {
            return Gate::Pass;
        };
        let line = line();
        let line = line.as_str();
        let waiter = Waiter(armed.generation);
        let reached = armed.ask.request > 0 && armed.seen >= armed.ask.request;
        let counted = match &armed.ask.counting {
            Some(text) => line.contains(text.as_str()),
            None => true,
        };
        if !reached {
            if !counted {
                return Gate::Pass;
            }
            armed.seen += 1;
            if armed.seen < armed.ask.request {
                return Gate::Pass;
            }
            if armed.ask.after_handling {
                armed.held_requests.push(line.to_owned());
                return Gate::HoldAfter(waiter);
            }
        } else if counted {
            armed.seen += 1;
        }
        armed.held += 1;
        armed.held_requests.push(line.to_owned());
        Gate::HoldBefore(waiter)
    }

    /// Waits until `waiter`'s hold is released, and says whether it was resumed (the
    /// request goes on) rather than released (it is dropped). A request handled before it
    /// waits (`after_handling`) counts as held from here.
    pub async fn wait(&self, waiter: Waiter, handled_first: bool) -> Released {
        let mut released = self.released.subscribe();
        if handled_first {
            match lock(&self.armed).as_mut() {
                Some(armed) if armed.generation == waiter.0 => armed.held += 1,
                // Released while it was handled.
                _ => return self.how_released(&waiter),
            }
        }
        // An error means the sender is gone with the simulator: nothing is left to wait for.
        let _ = released
            .wait_for(|generation| *generation >= waiter.0)
            .await;
        self.how_released(&waiter)
    }

    fn how_released(&self, waiter: &Waiter) -> Released {
        match lock(&self.resumed).contains(&waiter.0) {
            true => Released::Resumed,
            false => Released::Dropped,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_nth_request_and_every_later_one_wait_until_the_release() {
        let hold = RequestHold::default();
        assert_eq!(
            hold.admit(|| "GET /version".to_owned()),
            Gate::Pass,
            "no hold set"
        );
        hold.set(HoldRequest {
            request: 3,
            ..HoldRequest::default()
        });
        assert_eq!(hold.admit(|| "GET /version".to_owned()), Gate::Pass);
        assert_eq!(hold.admit(|| "GET /version".to_owned()), Gate::Pass);
        let Gate::HoldBefore(third) = hold.admit(|| "GET /version".to_owned()) else {
            panic!("the third request is held")
        };
        let Gate::HoldBefore(fourth) = hold.admit(|| "GET /version".to_owned()) else {
            panic!("a later request is held too")
        };
        let status = hold.status();
        assert_eq!((status.seen, status.held), (4, 2));
        let waiting = tokio::spawn(async move {
            let hold = std::sync::Arc::new(hold);
            let inner = hold.clone();
            let both = tokio::spawn(async move {
                inner.wait(third, false).await;
                inner.wait(fourth, false).await;
            });
            tokio::task::yield_now().await;
            assert!(!both.is_finished(), "nothing is released yet");
            hold.release();
            both.await.unwrap();
            assert_eq!(hold.status(), HoldStatus::default());
            assert_eq!(
                hold.admit(|| "GET /version".to_owned()),
                Gate::Pass,
                "the release cleared the hold"
            );
        });
        waiting.await.unwrap();
    }

    #[tokio::test]
    async fn after_handling_holds_the_nth_answer_and_later_requests_unhandled() {
        let hold = RequestHold::default();
        hold.set(HoldRequest {
            request: 1,
            after_handling: true,
            ..HoldRequest::default()
        });
        let Gate::HoldAfter(first) = hold.admit(|| "GET /version".to_owned()) else {
            panic!("the first request is handled, then held")
        };
        assert!(matches!(
            hold.admit(|| "GET /version".to_owned()),
            Gate::HoldBefore(_)
        ));
        let hold = std::sync::Arc::new(hold);
        let inner = hold.clone();
        let answer = tokio::spawn(async move { inner.wait(first, true).await });
        while hold.status().held < 2 {
            tokio::task::yield_now().await;
        }
        hold.release();
        answer.await.unwrap();
    }

    #[test]
    fn a_counting_hold_waits_for_the_nth_request_it_names_and_holds_all_after_it() {
        let hold = RequestHold::default();
        hold.set(HoldRequest {
            request: 2,
            counting: Some("/upload".to_owned()),
            ..HoldRequest::default()
        });
        let upload = "POST /nodes/pve1/storage/local/upload";
        assert_eq!(
            hold.admit(|| "GET /nodes/pve1/qemu/100/config".to_owned()),
            Gate::Pass
        );
        assert_eq!(
            hold.admit(|| upload.to_owned()),
            Gate::Pass,
            "the first upload passes"
        );
        assert_eq!(
            hold.admit(|| "GET /cluster/resources?type=vm".to_owned()),
            Gate::Pass
        );
        assert!(matches!(
            hold.admit(|| upload.to_owned()),
            Gate::HoldBefore(_)
        ));
        let config = "GET /nodes/pve1/qemu/100/config";
        assert!(
            matches!(hold.admit(|| config.to_owned()), Gate::HoldBefore(_)),
            "every request after it waits, counted or not"
        );
        let status = hold.status();
        assert_eq!((status.seen, status.held), (2, 2));
        assert_eq!(status.held_requests, [upload, config]);
    }

    #[tokio::test]
    async fn a_new_hold_releases_the_old_one_and_lets_no_request_pass_between() {
        let hold = std::sync::Arc::new(RequestHold::default());
        hold.set(HoldRequest {
            request: 1,
            ..HoldRequest::default()
        });
        let Gate::HoldBefore(first) = hold.admit(|| "GET /version".to_owned()) else {
            panic!("held")
        };
        let inner = hold.clone();
        let released = tokio::spawn(async move { inner.wait(first, false).await });
        hold.set(HoldRequest {
            request: 1,
            counting: Some("/pending".to_owned()),
            ..HoldRequest::default()
        });
        assert_eq!(
            released.await.unwrap(),
            Released::Dropped,
            "the replaced hold's request is dropped"
        );
        let status = hold.status();
        assert_eq!(
            (status.seen, status.held),
            (0, 0),
            "the new hold starts afresh"
        );
        assert_eq!(hold.admit(|| "GET /version".to_owned()), Gate::Pass);
        assert!(matches!(
            hold.admit(|| "GET /nodes/pve1/qemu/100/pending".to_owned()),
            Gate::HoldBefore(_)
        ));
    }

    #[tokio::test]
    async fn a_resumed_hold_lets_its_held_requests_go_on_and_a_released_one_drops_them() {
        let hold = std::sync::Arc::new(RequestHold::default());
        hold.set(HoldRequest {
            request: 1,
            counting: Some("/pending".to_owned()),
            ..HoldRequest::default()
        });
        let Gate::HoldBefore(pending) =
            hold.admit(|| "GET /nodes/pve1/qemu/100/pending".to_owned())
        else {
            panic!("held")
        };
        let Gate::HoldBefore(beside) = hold.admit(|| "GET /version".to_owned()) else {
            panic!("a later request is held too")
        };
        let inner = hold.clone();
        let waiting = tokio::spawn(async move {
            (
                inner.wait(pending, false).await,
                inner.wait(beside, false).await,
            )
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "nothing is resumed yet");
        hold.resume();
        assert_eq!(
            waiting.await.unwrap(),
            (Released::Resumed, Released::Resumed)
        );
        assert_eq!(hold.status(), HoldStatus::default(), "the hold is cleared");
        assert_eq!(hold.admit(|| "GET /version".to_owned()), Gate::Pass);

        // A later hold released, not resumed, still drops what it held.
        hold.set(HoldRequest {
            request: 1,
            ..HoldRequest::default()
        });
        let Gate::HoldBefore(dropped) = hold.admit(|| "GET /version".to_owned()) else {
            panic!("held")
        };
        hold.release();
        assert_eq!(hold.wait(dropped, false).await, Released::Dropped);
    }
}
