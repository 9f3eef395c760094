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
//! - **Replies go in the order of their commands**, whenever each is ready; at most
//!   `MAX_IN_FLIGHT` wait, past which the connection stops reading (TCP holds the client
//!   back) until the oldest is answered.
//! - **Bounded in time**: quiet past the idle timeout, or a command begun and not whole
//!   within the request deadline, and the client is told so and closed; a client that does
//!   not read its replies meets the runtime's write timeout. A malformed frame is answered
//!   (after every reply before it) and closes this connection alone.

use super::commands::{Planned, Render, failed, plan};
use super::store::StoreRef;
use super::store::{Op, Outcome};
use crate::limits::setting;
use crate::resp::{Decoder, Reply};
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
}

#[actors::actor]
impl Connection {
    fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        // A strong ref: the actor lives as long as its task (it has no other).
        let connection = ctx.actor_ref();
        let sink = self.sink.take().expect("set by the acceptor");
        let stream = self.stream.take().expect("set by the acceptor");
        let store = self.store.clone();
        drop(ctx.runtime().clone().spawn(move |clock| async move {
            serve(&clock, &store, sink, stream).await;
            let _ = connection.tell_quit().await;
        }));
    }

    fn quit(&mut self, ctx: &mut actors::Context<Self>) {
        ctx.stop();
    }
}

/// Replies in the order of their commands: given, or to come from the store for a batch.
enum Pending<'s> {
    Given(Reply),
    Batch(BatchReply<'s>, Vec<Render>),
}

type BatchReply<'s> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<Outcome>, actors::Error>> + Send + 's>,
>;

/// Queues `ops` as one batch, behind everything issued before: its replies to come, or the
/// error for each at once.
async fn issue<'s>(
    store: &'s StoreRef,
    ops: Vec<Op>,
    renders: Vec<Render>,
    pending: &mut VecDeque<Pending<'s>>,
) {
    match store.run(ops).queued().await {
        Ok(ask) => pending.push_back(Pending::Batch(Box::pin(ask), renders)),
        Err(error) => {
            for _ in renders {
                pending.push_back(Pending::Given(failed(error.clone())));
            }
        }
    }
}

/// Writes a batch's replies.
fn render(outcomes: Result<Vec<Outcome>, actors::Error>, renders: Vec<Render>, out: &mut Vec<u8>) {
    match outcomes {
        Ok(outcomes) => {
            for (render, outcome) in renders.iter().zip(outcomes) {
                render.reply(outcome).encode(out);
            }
        }
        Err(error) => {
            for _ in renders {
                failed(error.clone()).encode(out);
            }
        }
    }
}

/// Serves one client until it leaves, quits, errs or times out.
async fn serve(clock: &runtime::Context, store: &StoreRef, mut sink: Sink, mut stream: Stream) {
    let (idle, deadline) = (idle_timeout(), request_deadline());
    let mut decoder = Decoder::default();
    let mut pending: VecDeque<Pending<'_>> = VecDeque::new();
    // Replies held in `pending`.
    let mut waiting = 0;
    let mut out = Vec::new();
    // When the command not yet whole began.
    let mut begun: Option<Instant> = None;
    // After `QUIT` or a malformed frame: answer what is pending, then close.
    let mut closing = false;
    loop {
        // Plan what is whole, in order; consecutive store operations go as one batch.
        let (mut ops, mut renders) = (Vec::new(), Vec::new());
        while !closing && waiting + ops.len() < MAX_IN_FLIGHT && ops.len() < MAX_BATCH_COMMANDS {
            let now = match decoder.next_command() {
                Ok(Some(command)) => {
                    begun = None;
                    match plan(command) {
                        Planned::Store(op, render) => {
                            ops.push(op);
                            renders.push(render);
                            continue;
                        }
                        Planned::Now(reply, quit) => {
                            closing = quit;
                            reply
                        }
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    closing = true;
                    Reply::error(error)
                }
            };
            if !ops.is_empty() {
                waiting += ops.len();
                issue(
                    store,
                    std::mem::take(&mut ops),
                    std::mem::take(&mut renders),
                    &mut pending,
                )
                .await;
            }
            waiting += 1;
            pending.push_back(Pending::Given(now));
        }
        if !ops.is_empty() {
            waiting += ops.len();
            issue(store, ops, renders, &mut pending).await;
        }
        // Every reply ready at the front, in one send.
        while out.len() < MAX_BATCH {
            match pending.front_mut() {
                Some(Pending::Given(_)) => {}
                Some(Pending::Batch(reply, _)) => match reply.now_or_never() {
                    Some(outcomes) => {
                        let Some(Pending::Batch(_, renders)) = pending.pop_front() else {
                            unreachable!("the front is a batch");
                        };
                        waiting -= renders.len();
                        render(outcomes, renders, &mut out);
                        continue;
                    }
                    None => break,
                },
                None => break,
            }
            if let Some(Pending::Given(reply)) = pending.pop_front() {
                waiting -= 1;
                reply.encode(&mut out);
            }
        }
        if !out.is_empty() && sink.send(std::mem::take(&mut out)).await.is_err() {
            return;
        }
        if closing && pending.is_empty() {
            return;
        }
        if (closing || waiting >= MAX_IN_FLIGHT)
            && let Some(Pending::Batch(reply, _)) = pending.front_mut()
        {
            // Nothing more is read until the oldest replies are given.
            let outcomes = reply.await;
            let Some(Pending::Batch(_, renders)) = pending.pop_front() else {
                unreachable!("the front is a batch");
            };
            waiting -= renders.len();
            render(outcomes, renders, &mut out);
            continue;
        }
        // Read more (whatever has come, up to a chunk: the decoder keeps what it cannot use
        // yet, and stops being fed once `MAX_IN_FLIGHT` replies wait), or give the oldest
        // reply as soon as it comes, whichever is first.
        let wanted = RECEIVE_CHUNK;
        let received = match pending.front_mut() {
            Some(Pending::Batch(reply, _)) => {
                match select(reply, std::pin::pin!(stream.recv_some(wanted))).await {
                    Either::Left((outcomes, _)) => {
                        // The receive is dropped: what it read is kept for the next one.
                        let Some(Pending::Batch(_, renders)) = pending.pop_front() else {
                            unreachable!("the front is a batch");
                        };
                        waiting -= renders.len();
                        render(outcomes, renders, &mut out);
                        continue;
                    }
                    Either::Right((received, _)) => Ok(received),
                }
            }
            _ => {
                // Waiting on the client alone: bounded by the idle timeout, or by the
                // request deadline once a command has begun, however it trickles.
                let (limit, why, bound) = if decoder.is_partial() {
                    let since = *begun.get_or_insert_with(Instant::now);
                    (
                        deadline.saturating_sub(since.elapsed()),
                        "a request must arrive whole within",
                        deadline,
                    )
                } else {
                    (idle, "idle for", idle)
                };
                clock
                    .timeout(limit, stream.recv_some(wanted))
                    .await
                    .map_err(|_| format!("{why} {} ms; closing", bound.as_millis()))
            }
        };
        match received {
            Ok(Ok(bytes)) => decoder.feed(&bytes.coalesce()),
            // The runtime's read timeout: a quiet client is not a gone one.
            Ok(Err(runtime::Error::RecvFailed(error)))
                if error.kind() == std::io::ErrorKind::TimedOut => {}
            // Gone: nobody to answer.
            Ok(Err(_)) => return,
            Err(timed_out) => {
                waiting += 1;
                pending.push_back(Pending::Given(Reply::error(timed_out)));
                closing = true;
            }
        }
    }
}
