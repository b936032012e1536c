//! One client connection as pveproxy keeps it: which worker accepted it, how many requests
//! it may still carry, and when it has been idle too long. pve-http-server
//! `APIServer/AnyEvent.pm`: the connection's handle has an inactivity `timeout` (any read or
//! write restarts it; it is off while a request is being handled, `handle_request`, and on
//! again in `response`); when it fires, `client_do_disconnect` ends TLS (`stoptls`: a
//! close_notify) and shuts the socket down for writing, and the handle's socket is closed.
//! A client that sends on the connection after that gets no answer.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::inspect::ConnectionStats;

/// What happened to connections, for `GET /_sim/costs`.
#[derive(Debug, Default)]
pub struct Counters {
    opened: AtomicU64,
    idle_closed: AtomicU64,
    request_limit_closed: AtomicU64,
}

impl Counters {
    pub fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            opened: self.opened.load(Ordering::Relaxed),
            idle_closed: self.idle_closed.load(Ordering::Relaxed),
            request_limit_closed: self.request_limit_closed.load(Ordering::Relaxed),
        }
    }

    pub fn reset(&self) {
        self.opened.store(0, Ordering::Relaxed);
        self.idle_closed.store(0, Ordering::Relaxed);
        self.request_limit_closed.store(0, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct State {
    last_activity: Instant,
    in_flight: usize,
    requests: u32,
    worker: Option<usize>,
}

/// One accepted connection.
#[derive(Debug)]
pub struct Connection {
    idle: Duration,
    request_limit: u32,
    counters: Arc<Counters>,
    state: Mutex<State>,
    request_ended: Notify,
}

impl Connection {
    pub fn new(idle: Duration, request_limit: u32, counters: Arc<Counters>) -> Arc<Connection> {
        Arc::new(Connection {
            idle,
            request_limit,
            counters,
            state: Mutex::new(State {
                last_activity: Instant::now(),
                in_flight: 0,
                requests: 0,
                worker: None,
            }),
            request_ended: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self) {
        self.state().last_activity = Instant::now();
    }

    /// The pveproxy worker that accepted this connection (it took the first request).
    pub fn worker(&self) -> Option<usize> {
        self.state().worker
    }

    pub fn bind(&self, worker: usize) {
        self.state().worker.get_or_insert(worker);
    }

    /// A request arrived: the idle timeout is off until it is answered. Whether its answer
    /// is the connection's last (`keep_alive` counted down to 0).
    pub fn begin_request(self: &Arc<Self>) -> (InFlight, bool) {
        let mut state = self.state();
        state.in_flight += 1;
        state.requests = state.requests.saturating_add(1);
        if state.requests == 1 {
            self.counters.opened.fetch_add(1, Ordering::Relaxed);
        }
        let last = state.requests >= self.request_limit;
        if last {
            self.counters
                .request_limit_closed
                .fetch_add(1, Ordering::Relaxed);
        }
        (
            InFlight {
                connection: Arc::clone(self),
            },
            last,
        )
    }

    /// Resolves once the connection has seen no read or write for the idle timeout while no
    /// request was in flight; counts the close that follows.
    pub async fn idle_expired(&self) {
        loop {
            let ended = self.request_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let (deadline, busy) = {
                let state = self.state();
                (state.last_activity + self.idle, state.in_flight > 0)
            };
            if busy {
                ended.await;
                continue;
            }
            if Instant::now() >= deadline {
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = ended => {}
            }
        }
    }
}

/// A request being handled; dropped once its answer is handed to the connection.
#[derive(Debug)]
pub struct InFlight {
    connection: Arc<Connection>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        {
            let mut state = self.connection.state();
            state.in_flight = state.in_flight.saturating_sub(1);
            state.last_activity = Instant::now();
        }
        self.connection.request_ended.notify_waiters();
    }
}

/// The connection's byte stream, noting every read and write as activity.
#[derive(Debug)]
pub struct Activity<T> {
    inner: T,
    connection: Arc<Connection>,
}

impl<T> Activity<T> {
    pub fn new(inner: T, connection: Arc<Connection>) -> Activity<T> {
        Activity { inner, connection }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Activity<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.connection.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Activity<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.connection.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.connection.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
