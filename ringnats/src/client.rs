//! The client: what callers publish, subscribe and request through, and the state it shares
//! with the connection's tasks (`connection.rs`).
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

use crate::Error;
use crate::connection::{self, Established, ServerInfo};
use crate::headers::Headers;
use crate::options::{Event, Options, ServerAddress};
use crate::protocol::{Encoder, Message};
use crate::subscription::{Pushed, Queue, Subscription};
use bytes::BytesMut;
use futures::channel::oneshot;
use parking_lot::{Mutex, MutexGuard};
use runtime::prelude::*;
use runtime::{Context, Handle};
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

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
    pub(crate) status: Status,
    /// Incremented whenever the connection is lost or the client closes.
    pub(crate) generation: u64,
    /// Frames waiting for the writer.
    out: BytesMut,
    writer: Option<Waker>,
    /// Publishers waiting for `out` to drain below the high-water mark.
    room: Vec<Waker>,
    /// One entry per `PING` queued or sent on this connection, answered in order by `PONG`s:
    /// a flush's sender, or `None` for a keepalive ping.
    pongs: VecDeque<Option<oneshot::Sender<Result<(), Error>>>>,
    pub(crate) pings_unanswered: usize,
    next_sid: u64,
    subscriptions: HashMap<u64, Subscriber>,
    response_sid: Option<u64>,
    next_token: u64,
    requests: HashMap<u64, PendingRequest>,
    /// Request frames in `out` queued while disconnected, in order.
    held: Vec<Held>,
    /// Publish subjects the server denied on this connection.
    denied: std::collections::HashSet<String>,
    pub(crate) info: ServerInfo,
    pub(crate) server: String,
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

/// A random 64-bit value (std's hasher keys are random per process).
pub(crate) fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// What the server's `Permissions Violation` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Publish,
    /// A publish whose reply subject the account may not use (a request's inbox).
    PublishReply,
    Subscribe,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Publish => "publish",
            Operation::PublishReply => "publish with the reply subject",
            Operation::Subscribe => "subscribe",
        }
    }
}

/// The operation and subject of a `-ERR` that reports a permissions violation, as
/// nats-server words it: `Permissions Violation for Publish to "<subject>"`, `... for Publish
/// with Reply of "<reply subject>"` or `... for Subscription to "<subject>"` (with ` using
/// queue "<group>"` after a queue subscription; the reply form is read as nats-server's
/// source words it, not seen from the 2.9 server in tests). A subject with a `"` in it is not
/// read (subjects this client sends never have one).
pub(crate) fn permission_violation(text: &str) -> Option<(Operation, &str)> {
    let text = text.trim().trim_matches('\'');
    let rest = text.strip_prefix("Permissions Violation for ")?;
    let (operation, rest) = if let Some(rest) = rest.strip_prefix("Publish to ") {
        (Operation::Publish, rest)
    } else if let Some(rest) = rest.strip_prefix("Publish with Reply of ") {
        (Operation::PublishReply, rest)
    } else {
        (Operation::Subscribe, rest.strip_prefix("Subscription to ")?)
    };
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some((operation, &rest[..end]))
}

/// What [`Client::publish_urgent`] may queue past the high-water mark.
const URGENT_RESERVE: usize = 64 * 1024;

/// Registers a publisher waiting for room, once.
fn wait_for_room(state: &mut State, waker: &Waker) {
    if !state.room.iter().any(|known| known.will_wake(waker)) {
        state.room.push(waker.clone());
    }
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
    fn new(options: Options) -> Self {
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
    /// wait for room).
    pub(crate) fn queue_control(&self, encode: impl FnOnce(&mut Encoder<'_>)) {
        let mut state = self.lock();
        if state.status == Status::Closed {
            return;
        }
        encode(&mut Encoder::new(&mut state.out));
        wake(state.writer.take());
    }

    /// Queues a keepalive `PING` unless `max_out` are unanswered already (then false: the
    /// connection is stale).
    pub(crate) fn keepalive(&self, max_out: usize) -> bool {
        let mut state = self.lock();
        if state.pings_unanswered >= max_out {
            return false;
        }
        state.pings_unanswered += 1;
        state.pongs.push_back(None);
        Encoder::new(&mut state.out).ping();
        wake(state.writer.take());
        true
    }

    /// A `PONG` arrived: it answers the oldest `PING`.
    pub(crate) fn pong(&self) {
        let flush = {
            let mut state = self.lock();
            state.pings_unanswered = 0;
            state.pongs.pop_front().flatten()
        };
        if let Some(flush) = flush {
            let _ = flush.send(Ok(()));
        }
    }

    /// The writer's next batch: everything queued, swapped with `spare` (an empty buffer
    /// with capacity) so the next frames need no allocation. `None` once the connection of
    /// `generation` is gone.
    pub(crate) fn poll_batch(
        &self,
        cx: &mut std::task::Context<'_>,
        generation: u64,
        spare: &mut BytesMut,
    ) -> Poll<Option<BytesMut>> {
        let mut state = self.lock();
        if state.generation != generation || state.status != Status::Connected {
            return Poll::Ready(None);
        }
        if state.out.is_empty() {
            state.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        std::mem::swap(&mut state.out, spare);
        let room = std::mem::take(&mut state.room);
        drop(state);
        for waker in room {
            waker.wake();
        }
        Poll::Ready(Some(std::mem::take(spare)))
    }

    /// A new connection: replays the subscriptions ahead of what was queued meanwhile.
    pub(crate) fn install(&self, established: &Established) {
        let server = established.server.to_string();
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

    /// The server denied `operation` on `subject` (its `Permissions Violation`): fails what
    /// it concerns (see the module's invariants). Subjects are compared as written: a denied
    /// wildcard subscription names its own pattern.
    pub(crate) fn permission_denied(&self, operation: Operation, subject: &str) {
        let denied = || Error::PermissionDenied {
            operation: operation.as_str().into(),
            subject: subject.to_string(),
        };
        let (requests, queues) = {
            let mut state = self.lock();
            match operation {
                Operation::Publish => {
                    if state.denied.len() < DENIED_SUBJECTS {
                        state.denied.insert(subject.to_string());
                    }
                    let tokens: Vec<u64> = state
                        .requests
                        .iter()
                        .filter(|(_, request)| request.subject == subject)
                        .map(|(token, _)| *token)
                        .collect();
                    let requests: Vec<_> = tokens
                        .into_iter()
                        .filter_map(|token| state.requests.remove(&token))
                        .collect();
                    (requests, Vec::new())
                }
                Operation::PublishReply => {
                    let token = subject
                        .strip_prefix(self.inbox_prefix.as_str())
                        .and_then(|rest| rest.strip_prefix('.'))
                        .and_then(|token| token.parse::<u64>().ok());
                    let request = token.and_then(|token| state.requests.remove(&token));
                    (request.into_iter().collect(), Vec::new())
                }
                Operation::Subscribe => {
                    let sids: Vec<u64> = state
                        .subscriptions
                        .iter()
                        .filter(|(_, subscriber)| subscriber.subject == subject)
                        .map(|(sid, _)| *sid)
                        .collect();
                    let mut requests = Vec::new();
                    let mut queues = Vec::new();
                    for sid in sids {
                        let subscriber = state.subscriptions.remove(&sid).expect("listed");
                        match subscriber.delivery {
                            Delivery::Queue(queue) => queues.push(queue),
                            Delivery::Responses => {
                                // No reply can come: the requests fail, and the next
                                // request subscribes the inbox again.
                                state.response_sid = None;
                                requests.extend(state.requests.drain().map(|(_, r)| r));
                            }
                        }
                    }
                    (requests, queues)
                }
            }
        };
        for request in requests {
            let _ = request.reply.send(Err(denied()));
        }
        for queue in queues {
            queue.close_denied(denied());
        }
    }

    /// Hands a message to its subscription (or to the request waiting for it).
    pub(crate) fn dispatch(&self, message: Message) {
        let mut state = self.lock();
        let Some(subscriber) = state.subscriptions.get_mut(&message.sid) else {
            // A message that crossed an UNSUB on the wire.
            return;
        };
        let queue = match &subscriber.delivery {
            Delivery::Responses => {
                let token = message
                    .subject
                    .strip_prefix(self.inbox_prefix.as_str())
                    .and_then(|rest| rest.strip_prefix('.'))
                    .and_then(|token| token.parse::<u64>().ok());
                if let Some(request) = token.and_then(|token| state.requests.remove(&token)) {
                    drop(state);
                    let no_responders = message
                        .headers
                        .as_ref()
                        .is_some_and(|h| h.starts_with(b"NATS/1.0 503"));
                    let _ = request.reply.send(if no_responders {
                        Err(Error::NoResponders {
                            subject: request.subject,
                        })
                    } else {
                        Ok(message)
                    });
                }
                return;
            }
            Delivery::Queue(queue) => queue.clone(),
        };
        subscriber.delivered += 1;
        subscriber.delivered_here += 1;
        let ended = subscriber
            .max
            .is_some_and(|max| subscriber.delivered >= max);
        if ended {
            // The server ended it too (it was told the same limit).
            state.subscriptions.remove(&message.sid);
        }
        drop(state);
        let sid = message.sid;
        let pushed = queue.push(
            message,
            self.options.subscription_capacity,
            self.options.subscription_bytes,
        );
        if ended {
            queue.close();
        }
        if pushed == (Pushed::Dropped { first: true }) {
            // Rare: the subject is looked up again rather than copied for every message.
            let subject = self
                .lock()
                .subscriptions
                .get(&sid)
                .map(|s| s.subject.clone());
            self.emit(Event::SlowConsumer {
                subject: subject.unwrap_or_default(),
                sid,
            });
        }
    }
}

/// A connection to a NATS server (or to the first of a list that answers), which reconnects
/// by itself. Cheap to clone; the connection closes when the last clone and the last
/// [`Subscription`] are dropped, or at [`close`](Self::close).
///
/// Its tasks run in a child scope of the context given to [`connect`](Self::connect):
/// when that context's task ends, the connection ends with it.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    context: Context,
    task: Handle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.close();
        self.task.abort();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.shared.lock();
        f.debug_struct("Client")
            .field("status", &state.status)
            .field("server", &state.server)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the first server of `options` that answers and completes the handshake
    /// (`INFO`, `CONNECT`, `PING`/`PONG`, so a refused credential is reported here as
    /// [`Error::Authorization`]). From then on the client reconnects by itself.
    pub async fn connect(context: &Context, options: Options) -> Result<Client, Error> {
        options.validate()?;
        let shared = Arc::new(Shared::new(options));
        let established = connection::first(&shared, context).await?;
        shared.install(&established);
        let task = {
            // Closes the client however the connection task ends: returned, aborted (its
            // scope ended), panicked, or never started (a refused spawn drops it).
            let guard = CloseOnDrop(shared.clone());
            context
                .child("nats")
                .spawn(move |context| connection::run(guard, context, established))
        };
        if shared.is_closed() {
            return Err(Error::Closed);
        }
        Ok(Client {
            inner: Arc::new(Inner {
                shared,
                context: context.clone(),
                task,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Whether the client is connected now (it reconnects by itself when not).
    pub fn is_connected(&self) -> bool {
        self.shared().lock().status == Status::Connected
    }

    /// The largest message (headers and payload) the current server accepts.
    pub fn max_payload(&self) -> usize {
        self.shared().lock().info.max_payload
    }

    /// The server the client is connected to, if any.
    pub fn server(&self) -> Option<String> {
        let state = self.shared().lock();
        (state.status == Status::Connected).then(|| state.server.clone())
    }

    /// A fresh subject under this client's inbox, for replies.
    pub fn new_inbox(&self) -> String {
        format!("_INBOX.{:016x}{:016x}", random_u64(), random_u64())
    }

    /// Queues one message, or says why it cannot. `Err(WouldBlock)` only when connected and
    /// above the high-water mark.
    fn enqueue(
        &self,
        state: &mut State,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<(), Error> {
        self.enqueue_within(state, subject, reply, headers, payload, true)
    }

    /// [`enqueue`](Self::enqueue), ignoring the high-water mark unless `bounded`.
    fn enqueue_within(
        &self,
        state: &mut State,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
        bounded: bool,
    ) -> Result<(), Error> {
        let size = headers.map_or(0, <[u8]>::len) + payload.len();
        match state.status {
            Status::Closed => return Err(Error::Closed),
            Status::Connected
                if state.out.len()
                    >= self.shared().options.write_high_water
                        + if bounded { 0 } else { URGENT_RESERVE } =>
            {
                return Err(Error::WouldBlock);
            }
            Status::Connected => {}
            Status::Reconnecting => {
                let limit = self.shared().options.reconnect_buffer;
                if state.out.len() + size > limit {
                    return Err(Error::ReconnectBufferFull { limit });
                }
            }
        }
        let max_payload = state.info.max_payload;
        if size > max_payload {
            return Err(Error::TooLarge { size, max_payload });
        }
        if !state.denied.is_empty() && state.denied.contains(subject) {
            return Err(Error::PermissionDenied {
                operation: "publish".into(),
                subject: subject.to_string(),
            });
        }
        if headers.is_some() && !state.info.headers {
            return Err(Error::Invalid(
                "the server does not support headers (it predates NATS 2.2)".into(),
            ));
        }
        Encoder::new(&mut state.out).publish(subject, reply, headers, payload, max_payload)?;
        Ok(())
    }

    /// Queues a message, waiting while the write buffer is above its high-water mark.
    async fn send(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<(), Error> {
        poll_fn(|cx| {
            let mut state = self.shared().lock();
            match self.enqueue(&mut state, subject, reply, headers, payload) {
                Err(Error::WouldBlock) => {
                    wait_for_room(&mut state, cx.waker());
                    Poll::Pending
                }
                result => {
                    if result.is_ok() {
                        wake(state.writer.take());
                    }
                    Poll::Ready(result)
                }
            }
        })
        .await
    }

    /// Publishes `payload` to `subject`. It resolves once the message is queued for the
    /// server (waiting only while the write buffer is above its high-water mark); delivery
    /// is at most once. A message above the server's `max_payload` is refused with
    /// [`Error::TooLarge`] and nothing is sent.
    pub async fn publish(&self, subject: &str, payload: impl AsRef<[u8]>) -> Result<(), Error> {
        self.send(subject, None, None, payload.as_ref()).await
    }

    /// Publishes with a reply subject, for a responder to answer to.
    pub async fn publish_with_reply(
        &self,
        subject: &str,
        reply: &str,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        self.send(subject, Some(reply), None, payload.as_ref())
            .await
    }

    /// Publishes with headers (and a reply subject if given).
    pub async fn publish_with_headers(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: &Headers,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        let block = headers.encode()?;
        self.send(subject, reply, Some(&block), payload.as_ref())
            .await
    }

    /// Publishes without waiting: [`Error::WouldBlock`] when the write buffer is above its
    /// high-water mark.
    pub fn try_publish(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        let mut state = self.shared().lock();
        self.enqueue(&mut state, subject, reply, None, payload.as_ref())?;
        wake(state.writer.take());
        Ok(())
    }

    /// Publishes at once, into a reserve of 64 KiB past the write buffer's high-water mark
    /// ([`Error::WouldBlock`] beyond it; the reconnect buffer's limit still applies): for
    /// small messages that must not be refused behind a burst, such as heartbeats.
    /// Everything queued before it still goes out first.
    pub fn publish_urgent(&self, subject: &str, payload: impl AsRef<[u8]>) -> Result<(), Error> {
        let mut state = self.shared().lock();
        self.enqueue_within(&mut state, subject, None, None, payload.as_ref(), false)?;
        wake(state.writer.take());
        Ok(())
    }

    /// Subscribes to `subject` (wildcards `*` and `>` allowed).
    pub fn subscribe(&self, subject: &str) -> Result<Subscription, Error> {
        self.add_subscription(subject, None)
    }

    /// Subscribes to `subject` in `queue_group`: each message goes to one member of the
    /// group (across every client subscribed with the same group).
    pub fn queue_subscribe(&self, subject: &str, queue_group: &str) -> Result<Subscription, Error> {
        self.add_subscription(subject, Some(queue_group))
    }

    fn add_subscription(
        &self,
        subject: &str,
        queue_group: Option<&str>,
    ) -> Result<Subscription, Error> {
        let queue = Arc::new(Queue::default());
        let mut state = self.shared().lock();
        if state.status == Status::Closed {
            return Err(Error::Closed);
        }
        let sid = state.next_sid;
        // Checked (and written only if valid) before the table changes.
        let mut frame = BytesMut::new();
        Encoder::new(&mut frame).subscribe(subject, queue_group, sid)?;
        state.next_sid += 1;
        state.subscriptions.insert(
            sid,
            Subscriber {
                subject: subject.to_string(),
                queue_group: queue_group.map(str::to_string),
                delivery: Delivery::Queue(queue.clone()),
                max: None,
                delivered: 0,
                delivered_here: 0,
            },
        );
        if state.status == Status::Connected {
            state.out.extend_from_slice(&frame);
            wake(state.writer.take());
        }
        drop(state);
        Ok(Subscription::new(sid, queue, self.clone()))
    }

    pub(crate) fn unsubscribe(&self, sid: u64) {
        let mut state = self.shared().lock();
        let Some(subscriber) = state.subscriptions.remove(&sid) else {
            return;
        };
        if state.status == Status::Connected {
            Encoder::new(&mut state.out).unsubscribe(sid, None);
            wake(state.writer.take());
        }
        drop(state);
        if let Delivery::Queue(queue) = subscriber.delivery {
            queue.close();
        }
    }

    pub(crate) fn unsubscribe_after(&self, sid: u64, count: u64) -> Result<(), Error> {
        let mut state = self.shared().lock();
        let connected = state.status == Status::Connected;
        let Some(subscriber) = state.subscriptions.get_mut(&sid) else {
            return Err(Error::Closed);
        };
        if count == 0 {
            drop(state);
            self.unsubscribe(sid);
            return Ok(());
        }
        subscriber.max = Some(subscriber.delivered.saturating_add(count));
        // The server counts this connection's deliveries.
        let limit = subscriber.delivered_here.saturating_add(count);
        if connected {
            Encoder::new(&mut state.out).unsubscribe(sid, Some(limit));
            wake(state.writer.take());
        }
        Ok(())
    }

    /// Resolves once the server has processed everything queued before it (a `PING` answered
    /// by its `PONG`). Fails with [`Error::Disconnected`] if the connection drops first, and
    /// with [`Error::Timeout`] after the request timeout.
    pub async fn flush(&self) -> Result<(), Error> {
        let answer = {
            let mut state = self.shared().lock();
            if state.status == Status::Closed {
                return Err(Error::Closed);
            }
            let (sender, answer) = oneshot::channel();
            state.pongs.push_back(Some(sender));
            Encoder::new(&mut state.out).ping();
            wake(state.writer.take());
            answer
        };
        let timeout = self.shared().options.request_timeout;
        match self.inner.context.timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    /// Sends a request and waits for the first reply, within the request timeout (default
    /// 5 s). Fails at once with [`Error::NoResponders`] when nobody subscribes to `subject`,
    /// and with [`Error::Disconnected`] when the connection drops before the reply.
    pub async fn request(
        &self,
        subject: &str,
        payload: impl AsRef<[u8]>,
    ) -> Result<Message, Error> {
        let timeout = self.shared().options.request_timeout;
        self.request_with_timeout(subject, payload, timeout).await
    }

    /// [`request`](Self::request) with its own timeout, which covers the wait for room in
    /// the write buffer too.
    pub async fn request_with_timeout(
        &self,
        subject: &str,
        payload: impl AsRef<[u8]>,
        timeout: Duration,
    ) -> Result<Message, Error> {
        let request = self.request_within(subject, payload.as_ref());
        match self.inner.context.timeout(timeout, request).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    async fn request_within(&self, subject: &str, payload: &[u8]) -> Result<Message, Error> {
        let mut waiting = None;
        poll_fn(|cx| {
            let mut state = self.shared().lock();
            self.ensure_responses(&mut state);
            let token = state.next_token;
            let reply = format!("{}.{token}", self.inner.shared.inbox_prefix);
            let start = state.out.len();
            match self.enqueue(&mut state, subject, Some(&reply), None, payload) {
                Err(Error::WouldBlock) => {
                    wait_for_room(&mut state, cx.waker());
                    Poll::Pending
                }
                Err(error) => Poll::Ready(Err(error)),
                Ok(()) => {
                    if state.status == Status::Reconnecting {
                        let end = state.out.len();
                        state.held.push(Held { start, end, token });
                    }
                    state.next_token += 1;
                    let (sender, answer) = oneshot::channel();
                    state.requests.insert(
                        token,
                        PendingRequest {
                            subject: subject.to_string(),
                            reply: sender,
                        },
                    );
                    waiting = Some((token, answer));
                    wake(state.writer.take());
                    Poll::Ready(Ok(()))
                }
            }
        })
        .await?;
        let (token, answer) = waiting.expect("queued");
        // However this future ends (answered, timed out, dropped), the entry goes.
        let mut forget = ForgetRequest {
            shared: self.shared(),
            token,
            answered: false,
        };
        let answer = answer.await;
        forget.answered = true;
        answer.unwrap_or(Err(Error::Closed))
    }

    /// Requests waiting for their reply now (for tests that check nothing leaks).
    #[doc(hidden)]
    pub fn __pending_requests(&self) -> usize {
        self.shared().lock().requests.len()
    }

    /// Subscribes the client's reply inbox once.
    fn ensure_responses(&self, state: &mut State) {
        if state.response_sid.is_some() || state.status == Status::Closed {
            return;
        }
        let sid = state.next_sid;
        state.next_sid += 1;
        state.response_sid = Some(sid);
        let subject = format!("{}.*", self.inner.shared.inbox_prefix);
        if state.status == Status::Connected {
            let _ = Encoder::new(&mut state.out).subscribe(&subject, None, sid);
        }
        state.subscriptions.insert(
            sid,
            Subscriber {
                subject,
                queue_group: None,
                delivery: Delivery::Responses,
                max: None,
                delivered: 0,
                delivered_here: 0,
            },
        );
    }

    /// Flushes what is queued (within the request timeout) if connected, then closes:
    /// subscriptions end, and waiting calls fail with [`Error::Closed`].
    pub async fn close(&self) {
        // While disconnected there is no server to confirm anything: close at once.
        if self.is_connected() {
            let _ = self.flush().await;
        }
        self.shared().close();
        self.inner.task.abort();
    }
}

/// Removes a request's entry when its future ends without the answer (timed out, dropped).
struct ForgetRequest<'a> {
    shared: &'a Shared,
    token: u64,
    answered: bool,
}

impl Drop for ForgetRequest<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.shared.lock().requests.remove(&self.token);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permissions_violation_is_read_as_its_operation_and_subject() {
        assert_eq!(
            permission_violation("'Permissions Violation for Publish to \"a.b\"'"),
            Some((Operation::Publish, "a.b"))
        );
        assert_eq!(
            permission_violation(
                "Permissions Violation for Subscription to \"x.>\" using queue \"q\""
            ),
            Some((Operation::Subscribe, "x.>"))
        );
        assert_eq!(
            permission_violation("Permissions Violation for Publish with Reply of \"_INBOX.x.1\""),
            Some((Operation::PublishReply, "_INBOX.x.1"))
        );
        assert_eq!(permission_violation("Slow Consumer"), None);
        assert_eq!(
            permission_violation("Permissions Violation for Publish to \"unterminated"),
            None
        );
    }
}
