//! One request's way through the daemons: the worker of pveproxy that accepted its
//! connection reads it (pve-http-server `APIServer/AnyEvent.pm`: each worker serves the
//! connections it accepted, one request at a time, since `handle_api2_request` runs the
//! handler in the worker); a protected method or one for another node is forwarded
//! (`proxy_request`, asynchronous: the worker is free again once it sent it on) to that
//! node's pveproxy and pvedaemon, whose workers are taken the same way.

use std::sync::Arc;
use std::time::Duration;

use super::CostModel;
use super::connection::Connection;
use super::dispatch::Dispatch;
use super::pool::{Busy, Want};
use crate::call::{ApiError, Reply};

/// The daemon a worker belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Daemon {
    Pveproxy,
    Pvedaemon,
}

impl Daemon {
    pub fn name(self) -> &'static str {
        match self {
            Daemon::Pveproxy => "pveproxy",
            Daemon::Pvedaemon => "pvedaemon",
        }
    }
}

/// A request on its way; the worker it holds is freed when it is dropped.
#[derive(Debug)]
pub struct Visit<'m> {
    model: &'m CostModel,
    worker: Option<Busy>,
}

/// What the handler answered, as far as its cost goes.
#[derive(Debug, Clone, Copy)]
pub struct Served<'r> {
    pub method: &'r str,
    /// The route's template; `None` when the request was refused before its route was known.
    pub template: Option<&'r str>,
    /// The answer is a task's UPID.
    pub started_task: bool,
}

impl<'r> Served<'r> {
    /// Refused before its handler ran (authentication, route, parameters).
    pub fn refused(method: &'r str) -> Served<'r> {
        Served {
            method,
            template: None,
            started_task: false,
        }
    }

    /// Answered by the handler of `template` with `result`.
    pub fn handled(
        method: &'r str,
        template: &'r str,
        result: &Result<Reply, ApiError>,
    ) -> Served<'r> {
        let started_task = matches!(result, Ok(reply)
            if reply.data.as_str().is_some_and(|data| data.starts_with("UPID:")));
        Served {
            method,
            template: Some(template),
            started_task,
        }
    }
}

impl CostModel {
    /// Waits for the entry node's pveproxy worker that serves `connection` (the first free
    /// one for its first request, which then keeps the connection).
    pub async fn arrive(&self, connection: Option<&Arc<Connection>>) -> Visit<'_> {
        let want = connection
            .and_then(|c| c.worker())
            .map_or(Want::Any, Want::Worker);
        let worker = match self.pool(&self.entry, Daemon::Pveproxy) {
            Some(pool) => Some(pool.acquire(want).await),
            None => None,
        };
        if let (Some(connection), Some(worker)) = (connection, &worker) {
            connection.bind(worker.worker);
        }
        Visit {
            model: self,
            worker,
        }
    }
}

impl Visit<'_> {
    /// Moves the request to the worker that runs its handler: for `dispatch` on `node` (the
    /// path's, if any); an upload of `upload_bytes` is read by the entry worker first.
    pub async fn forward(&mut self, dispatch: Dispatch, node: Option<&str>, upload_bytes: usize) {
        let model = self.model;
        let times = &model.profile.service_ms;
        let upload = per_mib(times.upload_per_mib, upload_bytes);
        let target = match node {
            Some(node) if dispatch.proxyto_node => node,
            _ => model.entry.as_str(),
        };
        let remote = target != model.entry;
        if !remote && !dispatch.protected {
            sleep(upload).await;
            return;
        }
        sleep(upload + Duration::from_millis(times.proxy)).await;
        self.worker = None;
        if remote {
            self.worker = model.take(target, Daemon::Pveproxy).await;
            if !dispatch.protected {
                return;
            }
            sleep(Duration::from_millis(times.proxy)).await;
            self.worker = None;
        }
        self.worker = model.take(target, Daemon::Pvedaemon).await;
    }

    /// Keeps the worker busy for the request's service time.
    pub async fn serve(&self, served: Served<'_>) {
        sleep(self.model.service_time(served)).await;
    }
}

impl CostModel {
    async fn take(&self, node: &str, daemon: Daemon) -> Option<Busy> {
        match self.pool(node, daemon) {
            Some(pool) => Some(pool.acquire(Want::Any).await),
            None => None,
        }
    }

    /// A route's own time, else its kind's: a task start, a read, a write.
    fn service_time(&self, served: Served<'_>) -> Duration {
        let times = &self.profile.service_ms;
        let route = served
            .template
            .and_then(|t| self.profile.route_ms.get(&format!("{} {t}", served.method)));
        let ms = match route {
            Some(ms) => *ms,
            None if served.started_task => times.task_start,
            None if served.method == "GET" => times.read,
            None => times.write,
        };
        Duration::from_millis(ms)
    }
}

/// `ms` per MiB of `bytes`.
fn per_mib(ms: u64, bytes: usize) -> Duration {
    let micros = u128::from(ms) * 1000 * bytes as u128 / (1 << 20);
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

async fn sleep(duration: Duration) {
    if !duration.is_zero() {
        tokio::time::sleep(duration).await;
    }
}
