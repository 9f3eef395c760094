//! One client connection: a task that decodes the client's commands, hands the store
//! operations of the commands it has whole to the store as one message (a pipeline of 16
//! `SET`s is one message, one reply and one place in a group commit), goes on reading
//! without waiting for the reply, and writes the replies in order, as many as are ready in
//! one send.
//!
//! Invariants:
//! - **Commands take effect in the order sent**: each batch is queued in the store's
//!   mailbox (`Ask::queued`) before the next is made, the store runs a batch in order, and
//!   one mailbox is handled in order.
//! - **A read waits for no write it does not depend on**: a read the view serves (`GET`,
//!   `MGET`, `EXISTS`, `STRLEN`, `TYPE`; see [`super::view`]) is answered from it on this
//!   connection's thread when nothing of this connection is waiting for the store (no batch
//!   unanswered, none being gathered). Every write of this connection is then answered, so
//!   published, and the read sees it (read-your-writes); what it sees is acknowledged (with
//!   `always`, durable). A read behind an unanswered batch goes to the store in order
//!   behind it, as every command used to.
//! - **Replies go in the order of their commands**, whenever each is ready; at most
//!   `MAX_IN_FLIGHT` wait, past which the connection stops reading (TCP holds the client
//!   back) until the oldest is answered.
//! - **Bounded in memory**: the commands whose replies wait weigh at most
//!   `MAX_IN_FLIGHT_BYTES`, and a reply does not copy the values it carries: they are the
//!   store's own bytes, shared, and a large one goes to the socket from there. A client that
//!   asks for one 4 MiB value a thousand times (or in one `MGET`) makes the connection hold a
//!   thousand references, not a thousand copies.
//! - **Every whole command is answered**: after the client's end of stream nothing more is
//!   read, but what it sent whole is still run and answered before the connection closes.
//! - **Bounded in time**: quiet past the idle timeout, or a command begun and not whole
//!   within the request deadline, and the client is told so and closed; a client that does
//!   not read its replies meets the runtime's write timeout. A malformed frame is answered
//!   (after every reply before it) and closes this connection alone.

use super::commands::{Planned, Render, failed};
use super::session::Session;
use super::store::StoreRef;
use super::store::{Op, Outcome};
use super::view::View;
use crate::limits::setting;
use crate::resp::{Decoder, Encoded, Reply};
use futures::FutureExt as _;
use futures::future::{Either, select};
use runtime::net::{Sink, Stream};
use runtime::prelude::*;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Replies a connection may wait for at once.
const MAX_IN_FLIGHT: usize = 1024;

/// The most one receive takes.
const RECEIVE_CHUNK: usize = 64 * 1024;

/// Bytes of commands whose replies a connection may wait for at once.
const MAX_IN_FLIGHT_BYTES: usize = 16 << 20;

/// Commands in one batch at most.
const MAX_BATCH_COMMANDS: usize = 256;

/// Replies gathered before they are sent even if more are ready.
const MAX_BATCH: usize = 256 * 1024;

/// How long a connection may stay quiet: `KV_IDLE_TIMEOUT_MS`, five minutes by default.
fn idle_timeout() -> Duration {
    crate::lines::idle_timeout("KV_IDLE_TIMEOUT_MS")
}

/// How long a command may take to arrive whole once begun: `KV_REQUEST_DEADLINE_MS`, 30 s
/// by default.
fn request_deadline() -> Duration {
    Duration::from_millis(setting("KV_REQUEST_DEADLINE_MS", 30_000))
}

/// The connection actor: supervised (a temporary child of the service's connections), it
/// runs the connection's task in its scope and stops when the task ends.
#[actors::actor(name = "kv_connection")]
pub(super) struct Connection {
    pub(super) sink: Option<Sink>,
    pub(super) stream: Option<Stream>,
    pub(super) store: StoreRef,
    pub(super) view: std::sync::Arc<View>,
    /// Counts the connection among the service's until the actor is dropped.
    pub(super) _slot: crate::limits::Slot,
}

#[actors::actor]
impl Connection {
    fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        // A strong ref: the actor lives as long as its task (it has no other).
        let connection = ctx.actor_ref();
        let sink = self.sink.take().expect("set by the acceptor");
        let stream = self.stream.take().expect("set by the acceptor");
        let store = self.store.clone();
        let view = self.view.clone();
        drop(ctx.runtime().clone().spawn(move |clock| async move {
            let mut session = Session::new();
            serve(&clock, &store, &view, &mut session, sink, stream).await;
            // The keys it watched are forgotten with it.
            if let Some(op) = session.leaving() {
                let _ = store.run(vec![op]).await;
            }
            let _ = connection.tell_quit().await;
        }));
    }

    fn quit(&mut self, ctx: &mut actors::Context<Self>) {
        ctx.stop();
    }
}

/// Replies in the order of their commands: given, or to come from the store for a batch;
/// each with the weight of its commands in bytes.
enum Pending<'s> {
    Given(Reply, usize),
    Batch(BatchReply<'s>, Vec<Render>, usize),
}

type BatchReply<'s> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<Outcome>, actors::Error>> + Send + 's>,
>;

/// The replies a connection waits for, in order, with their count and weight bounded.
#[derive(Default)]
struct Replies<'s> {
    pending: VecDeque<Pending<'s>>,
    /// Replies held.
    count: usize,
    /// Bytes of the commands they answer.
    weight: usize,
    /// Batches among them, waiting for the store.
    batches: usize,
}

impl<'s> Replies<'s> {
    /// Room for more commands.
    fn has_room(&self, planned: usize, weight: usize) -> bool {
        self.count + planned < MAX_IN_FLIGHT && self.weight + weight < MAX_IN_FLIGHT_BYTES
    }

    fn full(&self) -> bool {
        !self.has_room(0, 0)
    }

    fn give(&mut self, reply: Reply, weight: usize) {
        self.count += 1;
        self.weight += weight;
        self.pending.push_back(Pending::Given(reply, weight));
    }

    /// Queues `ops` as one batch, behind everything issued before: its replies to come,
    /// or the error for each at once.
    async fn issue(
        &mut self,
        store: &'s StoreRef,
        ops: Vec<Op>,
        renders: Vec<Render>,
        weight: usize,
    ) {
        match store.run(ops).queued().await {
            Ok(ask) => {
                self.count += renders.len();
                self.weight += weight;
                self.batches += 1;
                self.pending
                    .push_back(Pending::Batch(Box::pin(ask), renders, weight));
            }
            Err(error) => {
                let each = weight / renders.len().max(1);
                for _ in renders {
                    self.give(failed(error.clone()), each);
                }
            }
        }
    }

    /// Writes the front's replies into `out`, given the batch's outcomes if it is one.
    fn write_front(
        &mut self,
        outcomes: Option<Result<Vec<Outcome>, actors::Error>>,
        out: &mut Encoded,
    ) {
        match self.pending.pop_front() {
            Some(Pending::Given(reply, weight)) => {
                self.count -= 1;
                self.weight -= weight;
                reply.encode_shared(out);
            }
            Some(Pending::Batch(_, renders, weight)) => {
                self.batches -= 1;
                self.count -= renders.len();
                self.weight -= weight;
                match outcomes.expect("a batch is written with its outcomes") {
                    Ok(outcomes) => {
                        for (render, outcome) in renders.iter().zip(outcomes) {
                            render.reply(outcome).encode_shared(out);
                        }
                    }
                    Err(error) => {
                        for _ in renders {
                            failed(error.clone()).encode_shared(out);
                        }
                    }
                }
            }
            None => {}
        }
    }

    /// Writes every reply ready at the front into `out`, up to `MAX_BATCH` bytes; whether
    /// more are ready past that.
    fn write_ready(&mut self, out: &mut Encoded) -> bool {
        loop {
            let outcomes = match self.pending.front_mut() {
                None => return false,
                Some(Pending::Given(..)) => None,
                Some(Pending::Batch(reply, ..)) => match reply.now_or_never() {
                    Some(outcomes) => Some(outcomes),
                    None => return false,
                },
            };
            if out.len() >= MAX_BATCH && outcomes.is_none() {
                return true;
            }
            self.write_front(outcomes, out);
            if out.len() >= MAX_BATCH {
                return !self.pending.is_empty();
            }
        }
    }
}

/// The bytes a command weighs while it waits: its arguments, and a little for each.
fn weight(command: &[Vec<u8>]) -> usize {
    command.iter().map(|argument| argument.len() + 16).sum()
}

/// A receive that outlives the looks that lose to a reply: started once, it stays in flight
/// until it delivers, and the next look takes it up. (A dropped receive is cancelled on the
/// ring, and starting another would cost a round trip per reply of a pipelining client.)
enum Receiver {
    /// No receive in flight.
    Idle(Stream),
    /// A receive in flight, holding the stream, which it hands back with what it got.
    Receiving(std::pin::Pin<Box<dyn Future<Output = (Stream, Received)> + Send>>),
    /// Only while the state changes.
    Moving,
}

type Received = Result<runtime::IoBufs, runtime::Error>;

impl Receiver {
    /// What the receive in flight brings (one is started if none is): whatever has come, up to
    /// [`RECEIVE_CHUNK`] bytes.
    fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Received> {
        if let Receiver::Idle(_) = self {
            let Receiver::Idle(mut stream) = std::mem::replace(self, Receiver::Moving) else {
                unreachable!("matched above");
            };
            *self = Receiver::Receiving(Box::pin(async move {
                let received = stream.recv_some(RECEIVE_CHUNK).await;
                (stream, received)
            }));
        }
        let Receiver::Receiving(receive) = self else {
            unreachable!("a receive is in flight");
        };
        let (stream, received) = std::task::ready!(receive.as_mut().poll(cx));
        *self = Receiver::Idle(stream);
        std::task::Poll::Ready(received)
    }
}

/// Serves one client until it leaves, quits, errs or times out.
async fn serve(
    clock: &runtime::Context,
    store: &StoreRef,
    view: &View,
    session: &mut Session,
    mut sink: Sink,
    stream: Stream,
) {
    let (idle, deadline) = (idle_timeout(), request_deadline());
    let mut receiver = Receiver::Idle(stream);
    let mut decoder = Decoder::default();
    let mut replies = Replies::default();
    let mut out = Encoded::default();
    // When the command not yet whole began.
    let mut begun: Option<Instant> = None;
    // After `QUIT`, a malformed frame or a timeout: nothing more is planned; what is
    // pending is answered, then the connection closes.
    let mut closing = false;
    // After the client's end of stream (or a failed receive): nothing more is read, but
    // every whole command already received is still run and answered, then it closes.
    let mut ended = false;
    loop {
        // Plan what is whole, in order; consecutive store operations go as one batch.
        let (mut ops, mut renders, mut batch_weight) = (Vec::new(), Vec::new(), 0);
        // Whether the decoder was found to hold no whole command.
        let mut drained = false;
        while !closing
            && replies.has_room(ops.len(), batch_weight)
            && ops.len() < MAX_BATCH_COMMANDS
        {
            let (now, now_weight) = match decoder.next_command() {
                Ok(Some(command)) => {
                    begun = None;
                    let command_weight = weight(&command);
                    match session.plan(command) {
                        // Nothing of this connection waits for the store: a read the view
                        // serves is answered here (see the module's invariants).
                        Planned::Store(op, render)
                            if ops.is_empty()
                                && replies.batches == 0
                                && let Some(outcome) = view.read(&op) =>
                        {
                            (render.reply(outcome), command_weight)
                        }
                        Planned::Store(op, render) => {
                            ops.push(op);
                            renders.push(render);
                            batch_weight += command_weight;
                            continue;
                        }
                        Planned::Now(reply, quit) => {
                            closing = quit;
                            (reply, command_weight)
                        }
                    }
                }
                Ok(None) => {
                    drained = true;
                    break;
                }
                Err(error) => {
                    closing = true;
                    (Reply::error(error), 0)
                }
            };
            if !ops.is_empty() {
                let batch = (std::mem::take(&mut ops), std::mem::take(&mut renders));
                replies.issue(store, batch.0, batch.1, batch_weight).await;
                batch_weight = 0;
            }
            replies.give(now, now_weight);
        }
        if !ops.is_empty() {
            replies.issue(store, ops, renders, batch_weight).await;
        }
        // Every reply ready at the front, in sends of up to `MAX_BATCH` bytes.
        loop {
            let more = replies.write_ready(&mut out);
            if !out.is_empty() && sink.send(out.take()).await.is_err() {
                return;
            }
            if !more {
                break;
            }
        }
        if (closing || ended && drained) && replies.pending.is_empty() {
            return;
        }
        if (closing || ended || replies.full())
            && let Some(Pending::Batch(reply, ..)) = replies.pending.front_mut()
        {
            // Nothing more is read until the oldest replies are given.
            let outcomes = reply.await;
            replies.write_front(Some(outcomes), &mut out);
            continue;
        }
        if ended || !drained {
            // Whole commands are left, and room for them now (or the front batch is awaited
            // above once the replies waiting are at their bound): plan them before reading.
            continue;
        }
        // Read more (whatever has come, up to a chunk: the decoder keeps what it cannot use
        // yet, and is fed no more once the replies waiting are at their bound), or give the
        // oldest reply as soon as it comes, whichever is first.
        let received = match replies.pending.front_mut() {
            Some(Pending::Batch(reply, ..)) => {
                let receive = std::pin::pin!(std::future::poll_fn(|cx| receiver.poll_next(cx)));
                match select(reply, receive).await {
                    Either::Left((outcomes, _)) => {
                        // The receive stays in flight with the receiver, for the next look.
                        replies.write_front(Some(outcomes), &mut out);
                        continue;
                    }
                    Either::Right((received, _)) => Ok(received),
                }
            }
            _ => {
                // Waiting on the client alone: bounded by the idle timeout, or by the
                // request deadline once a command has begun, however it trickles.
                let (limit, why, bound) = if decoder.is_partial() {
                    let since = *begun.get_or_insert_with(runtime::clock::now);
                    (
                        deadline.saturating_sub(runtime::clock::now() - since),
                        "a request must arrive whole within",
                        deadline,
                    )
                } else {
                    (idle, "idle for", idle)
                };
                clock
                    .timeout(limit, std::future::poll_fn(|cx| receiver.poll_next(cx)))
                    .await
                    .map_err(|_| format!("{why} {} ms; closing", bound.as_millis()))
            }
        };
        match received {
            Ok(Ok(bytes)) => decoder.feed(&bytes.coalesce()),
            // The runtime's read timeout: a quiet client is not a gone one.
            Ok(Err(runtime::Error::RecvFailed(error)))
                if error.kind() == std::io::ErrorKind::TimedOut => {}
            // The client's end of stream (or a failure): every whole command it sent is
            // still run and answered, as far as the connection lets it (a client that only
            // shut its writing side reads them), then the connection closes.
            Ok(Err(_)) => ended = true,
            Err(timed_out) => {
                replies.give(Reply::error(timed_out), 0);
                closing = true;
            }
        }
    }
}
