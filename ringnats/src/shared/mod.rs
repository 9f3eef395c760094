//! What the client and its connection's tasks share: the one state lock, holding the frames
//! waiting for the writer, the subscription table, the requests waiting for their replies
//! and the connection's status, and the connection's life as the state sees it (installed,
//! lost, closed). The children hold the rest by job: `outgoing.rs` the write buffer,
//! `subscriptions.rs` the table, `requests.rs` the request table, `incoming.rs` what the
//! reader hands over.
//!
//! Invariants (all under the one state lock):
//! - Frames go out in the order they were queued: every frame is appended whole to one
//!   buffer (`out`), and the writer takes the whole buffer at once, so frames queued while a
//!   send is in flight go out together in the next (writes coalesce).
//! - While connected, a publisher waits (or a `try_` call fails) once `out` holds the
//!   high-water mark; control frames (`SUB`, `UNSUB`, `PING`, `PONG`) never wait.
//! - When the connection drops, what `out` holds is dropped with it (at most once: the bytes
//!   a dead socket had not sent are lost the same way), and everything waiting for the
//!   server's answer (flushes, requests) fails at once with [`Error::Disconnected`]. So every
//!   waiting flush's `PING` is in `out` or was sent on the current connection, and `PONG`s
//!   answer the waiting flushes in order.
//! - While disconnected, publishes and flushes queue in `out` up to the reconnect buffer;
//!   `SUB` and `UNSUB` only change the subscription table, which a new connection replays
//!   (with each subscription's remaining message limit) before what `out` holds.
//! - A request is never sent after it resolved: one queued while disconnected has its
//!   frame's place in `out` recorded (`held`), and a new connection cuts out the frames of
//!   requests that resolved meanwhile (timed out, dropped, failed), so a caller that gave up
//!   on a request never has it delivered later from the reconnect buffer.
//! - A `Permissions Violation` the server reports fails what it concerns at once: requests
//!   to the denied publish subject (and later publishes to it, until the next connection),
//!   or, for a denied subscription, the subscription (ended) and, when it is the request
//!   inbox, every waiting request.
//! - A writer serves one connection: each connection has a generation, and a writer of an
//!   older one never takes frames meant for the next.
//! - Nothing outside the client runs under its lock: events, wakes of other tasks' futures
//!   and request replies are sent after it is released. So callers may hold locks of their
//!   own while they call in (the remote-actor node queues heartbeats under its state lock).
//!   The one exception is waking a waker under the lock where it only queues a task.

mod incoming;
mod outgoing;
mod requests;
mod subscriptions;

use crate::Error;
use crate::handshake::{Established, ServerInfo};
use crate::options::{Event, Options, ServerAddress};
use crate::protocol::{Encoder, Message};
use crate::queue::Queue;
use crate::random::random_u64;
use bytes::BytesMut;
use futures::channel::oneshot;
use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::task::Waker;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Connected,
    Reconnecting,
    Closed,
}

/// Where a subscription's messages go.
enum Delivery {
    Queue(Arc<Queue>),
    /// The client's own wildcard subscription for request replies.
    Responses,
}

struct Subscriber {
    subject: String,
    queue_group: Option<String>,
    delivery: Delivery,
    /// Messages after which the subscription ends, counted since it started.
    max: Option<u64>,
    delivered: u64,
    /// Messages delivered on the current connection (the server's count for `UNSUB` limits).
    delivered_here: u64,
    /// Its `UNSUB` went out and it delivers only what the server routed before it: not
    /// replayed on a new connection (which ends it instead).
    draining: bool,
}

struct PendingRequest {
    subject: String,
    reply: oneshot::Sender<Result<Message, Error>>,
}

/// A request's frame queued in `out` while disconnected: `out[start..end]`, cut out by the
/// next connection if request `token` resolved meanwhile.
struct Held {
    start: usize,
    end: usize,
    token: u64,
}

/// Publish subjects the server denied on this connection, remembered (up to this many) so
/// that later publishes to them fail at once.
const DENIED_SUBJECTS: usize = 256;

pub(crate) struct State {
    status: Status,
    /// Incremented whenever the connection is lost or the client closes.
    generation: u64,
    /// Frames waiting for the writer.
    out: BytesMut,
    writer: Option<Waker>,
    /// Publishers waiting for `out` to drain below the high-water mark.
    room: Vec<Waker>,
    /// One entry per `PING` queued or sent on this connection, answered in order by `PONG`s:
    /// a flush's sender, or `None` for a keepalive ping.
    pongs: VecDeque<Option<oneshot::Sender<Result<(), Error>>>>,
    pings_unanswered: usize,
    next_sid: u64,
    subscriptions: HashMap<u64, Subscriber>,
    response_sid: Option<u64>,
    next_token: u64,
    requests: HashMap<u64, PendingRequest>,
    /// Request frames in `out` queued while disconnected, in order.
    held: Vec<Held>,
    /// Publish subjects the server denied on this connection.
    denied: std::collections::HashSet<String>,
    info: ServerInfo,
    server: String,
}

/// Everything waiting on a connection that ended, taken under the lock (which also drops
/// what `out` held) and failed after it is released.
struct Waiting {
    flushes: Vec<oneshot::Sender<Result<(), Error>>>,
    requests: Vec<PendingRequest>,
    wakers: Vec<Waker>,
}

impl Waiting {
    fn take(state: &mut State) -> Self {
        state.out.clear();
        state.held.clear();
        state.pings_unanswered = 0;
        let mut wakers: Vec<Waker> = state.room.drain(..).collect();
        wakers.extend(state.writer.take());
        Waiting {
            flushes: state.pongs.drain(..).flatten().collect(),
            requests: state.requests.drain().map(|(_, request)| request).collect(),
            wakers,
        }
    }

    fn fail(self, error: impl Fn() -> Error) {
        for flush in self.flushes {
            let _ = flush.send(Err(error()));
        }
        for request in self.requests {
            let _ = request.reply.send(Err(error()));
        }
        for waker in self.wakers {
            waker.wake();
        }
    }
}

/// What the client and its connection's tasks share.
pub(crate) struct Shared {
    pub(crate) options: Options,
    state: Mutex<State>,
    /// `_INBOX.<random>`: request replies come to `<inbox_prefix>.<token>`.
    inbox_prefix: String,
    /// The servers to reconnect to: those of the options, then those the cluster announced.
    pub(crate) servers: Mutex<Vec<ServerAddress>>,
}

/// Wakes the waker, if any. A wake only queues the task, so it may happen under the state
/// lock; the senders of oneshot channels, which run no code either, are still fired after
/// it is released where they come in bulk (`Waiting`).
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl Shared {
    pub(crate) fn new(options: Options) -> Self {
        let servers = options.servers.clone();
        Self {
            options,
            state: Mutex::new(State {
                status: Status::Reconnecting,
                generation: 0,
                out: BytesMut::with_capacity(64 * 1024),
                writer: None,
                room: Vec::new(),
                pongs: VecDeque::new(),
                pings_unanswered: 0,
                next_sid: 1,
                subscriptions: HashMap::new(),
                response_sid: None,
                next_token: 0,
                requests: HashMap::new(),
                held: Vec::new(),
                denied: std::collections::HashSet::new(),
                info: ServerInfo::default(),
                server: String::new(),
            }),
            inbox_prefix: format!("_INBOX.{:016x}", random_u64()),
            servers: Mutex::new(servers),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    pub(crate) fn emit(&self, event: Event) {
        if let Some(handler) = &self.options.event_handler {
            handler(event);
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().status == Status::Closed
    }

    /// Queues a control frame written by `encode` and wakes the writer (control frames never
    /// Whether the client is connected now.
    pub(crate) fn is_connected(&self) -> bool {
        self.lock().status == Status::Connected
    }

    /// The connection's status and the server it is (or was last) connected to, or `None` if
    /// the lock is held: for `Debug`, which never waits (nor deadlocks on a lock its own
    /// thread holds).
    pub(crate) fn try_status_and_server(&self) -> Option<(Status, String)> {
        let state = self.state.try_lock()?;
        Some((state.status, state.server.clone()))
    }

    /// The server connected to, if connected.
    pub(crate) fn server(&self) -> Option<String> {
        let state = self.lock();
        (state.status == Status::Connected).then(|| state.server.clone())
    }

    /// The largest message (headers and payload) the current server accepts.
    pub(crate) fn max_payload(&self) -> usize {
        self.lock().info.max_payload
    }

    /// The current connection's generation (see the module's invariants).
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// The server sent a new `INFO` on the current connection: what the client keeps of it.
    pub(crate) fn update_info(&self, info: &ServerInfo) {
        let mut state = self.lock();
        state.info.max_payload = info.max_payload;
        state.info.headers = info.headers;
    }

    /// A new connection: replays the subscriptions ahead of what was queued meanwhile.
    pub(crate) fn install(&self, established: &Established) {
        let server = established.server.to_string();
        let mut ended = Vec::new();
        {
            let mut state = self.lock();
            if state.status == Status::Closed {
                return;
            }
            state.status = Status::Connected;
            state.info = established.info.clone();
            state.server = server.clone();
            state.pings_unanswered = 0;
            let mut fresh = BytesMut::with_capacity(state.out.len() + 4096);
            // A draining subscription is over for the server of a new connection: it ends.
            let drained: Vec<u64> = state
                .subscriptions
                .iter()
                .filter(|(_, subscriber)| subscriber.draining)
                .map(|(sid, _)| *sid)
                .collect();
            for sid in drained {
                if let Some(Subscriber {
                    delivery: Delivery::Queue(queue),
                    ..
                }) = state.subscriptions.remove(&sid)
                {
                    ended.push(queue);
                }
            }
            let mut sids: Vec<u64> = state.subscriptions.keys().copied().collect();
            sids.sort_unstable();
            for sid in sids {
                let subscriber = state.subscriptions.get_mut(&sid).expect("listed");
                subscriber.delivered_here = 0;
                let mut encoder = Encoder::new(&mut fresh);
                // Checked when the subscription was made.
                let _ =
                    encoder.subscribe(&subscriber.subject, subscriber.queue_group.as_deref(), sid);
                if let Some(max) = subscriber.max {
                    encoder.unsubscribe(sid, Some(max - subscriber.delivered));
                }
            }
            // What was queued meanwhile, but not the requests that resolved since.
            let mut from = 0;
            for held in std::mem::take(&mut state.held) {
                if !state.requests.contains_key(&held.token) {
                    fresh.extend_from_slice(&state.out[from..held.start]);
                    from = held.end;
                }
            }
            fresh.extend_from_slice(&state.out[from..]);
            state.out = fresh;
            state.denied.clear();
            wake(state.writer.take());
        }
        for queue in ended {
            queue.close();
        }
        self.learn_servers(&established.server, &established.info.connect_urls);
        self.emit(Event::Connected { server });
    }

    /// Adds the servers a cluster announced (`connect_urls`) to the reconnect list, with the
    /// credentials of the server that announced them.
    pub(crate) fn learn_servers(&self, via: &ServerAddress, urls: &[String]) {
        let mut servers = self.servers.lock();
        for url in urls {
            let Ok(mut address) = ServerAddress::parse(url) else {
                continue;
            };
            if servers
                .iter()
                .any(|known| known.host == address.host && known.port == address.port)
            {
                continue;
            }
            address.user.clone_from(&via.user);
            address.password.clone_from(&via.password);
            address.token.clone_from(&via.token);
            servers.push(address);
        }
    }

    /// The connection dropped: drops what it had not sent, fails what waited for its
    /// answers, and keeps what comes next for the next connection.
    pub(crate) fn lost(&self, reason: &str) {
        let (server, waiting) = {
            let mut state = self.lock();
            if state.status == Status::Closed {
                return;
            }
            state.status = Status::Reconnecting;
            state.generation += 1;
            (std::mem::take(&mut state.server), Waiting::take(&mut state))
        };
        waiting.fail(|| Error::Disconnected);
        self.emit(Event::Disconnected {
            server,
            reason: reason.to_string(),
        });
    }

    /// Ends everything: waiting calls fail with `Closed` and subscriptions end.
    pub(crate) fn close(&self) {
        let (queues, waiting) = {
            let mut state = self.lock();
            if state.status == Status::Closed {
                return;
            }
            state.status = Status::Closed;
            state.generation += 1;
            state.response_sid = None;
            let queues = state
                .subscriptions
                .drain()
                .filter_map(|(_, subscriber)| match subscriber.delivery {
                    Delivery::Queue(queue) => Some(queue),
                    Delivery::Responses => None,
                })
                .collect::<Vec<_>>();
            (queues, Waiting::take(&mut state))
        };
        waiting.fail(|| Error::Closed);
        for queue in queues {
            queue.close();
        }
    }
}

/// Closes the client when dropped: held by the connection task.
pub(crate) struct CloseOnDrop(pub(crate) Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
        // Not while unwinding: the handler itself may be what panicked, and a second panic
        // in a destructor aborts the process.
        if !std::thread::panicking() {
            self.0.emit(Event::Closed);
        }
    }
}
