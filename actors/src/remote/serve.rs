//! Serving an exposed actor: messages from its NATS subscriptions into its mailbox, replies
//! back to the askers.
//!
//! Invariants:
//! - The loop never waits on the actor: each message is put in the mailbox with `try_send`,
//!   in the order NATS delivered it; when the mailbox is full a tell is dropped and counted
//!   and an ask is answered `Full` at once. So one exposed actor never holds up another, or
//!   the connection (each has its own subscription).
//! - An ask's reply is awaited beside the loop (not in it), for at most the ask's deadline:
//!   past it the asker has given up and the reply is dropped. At most `max_in_flight` asks
//!   wait at once; beyond, new ones are answered `Full`.
//! - The loop holds a ref: an exposed actor runs while exposed. When the actor ends
//!   otherwise (it stops, panics unsupervised, or its scope ends), the loop ends, the
//!   subscriptions go, and the end is announced.

use super::codec::{self, Exit, Failure};
use super::liveness::Ticket;
use super::node::NodeInner;
use super::protocol::{Protocol, Served};
use super::responder::{Responder, refused};
use crate::{Error, ExitReason, Join};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use runtime::prelude::*;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

/// The longest a served ask's reply is waited for (about 49 days, as an ask's own timeout).
const MAX_WAIT: std::time::Duration = std::time::Duration::from_millis(u32::MAX as u64);

/// A failure's reply bytes (the reply type does not matter: `Err` encodes the same).
fn failure(failure: Failure) -> Vec<u8> {
    codec::reply::<()>(Err(failure))
}

/// Serves exposure `token` of `name` (its two subscriptions, `shared` in the name's queue
/// group and `direct` to this node) until its actor ends (`join`) or it is withdrawn, then
/// ends the exposure.
pub(crate) async fn run<S: Served>(
    node: Arc<NodeInner>,
    name: String,
    token: u64,
    served: S,
    join: Join,
    shared: nats::Subscription,
    direct: nats::Subscription,
) {
    let mut incoming = futures::stream::select(shared, direct);
    let mut in_flight = FuturesUnordered::<Pin<Box<dyn Future<Output = ()> + Send>>>::new();
    let mut join = pin!(join);
    let max_in_flight = node.options.max_in_flight;
    let node_name: Arc<str> = node.name.as_str().into();
    enum Next {
        Message(nats::Message),
        Ended(ExitReason),
        Withdrawn,
    }
    let mut withdrawn = false;
    let reason = loop {
        let next = poll_fn(|cx| {
            // Replies first: one answered just before the actor ended goes out before the
            // end is announced.
            while let Poll::Ready(Some(())) = in_flight.poll_next_unpin(cx) {}
            if let Poll::Ready(reason) = join.as_mut().poll(cx) {
                return Poll::Ready(Next::Ended(reason));
            }
            match incoming.poll_next_unpin(cx) {
                Poll::Ready(Some(message)) => Poll::Ready(Next::Message(message)),
                // Unsubscribed: withdrawn (or the client closed: the node is leaving).
                Poll::Ready(None) => Poll::Ready(Next::Withdrawn),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        let message = match next {
            Next::Message(message) => message,
            Next::Ended(reason) => break reason,
            Next::Withdrawn => {
                withdrawn = true;
                break ExitReason::Shutdown;
            }
        };
        let reply_to = message.reply;
        let answer = |bytes: Vec<u8>| {
            if let Some(reply_to) = &reply_to {
                // Never waits: a congested connection drops the answer, as it would a tell.
                let _ = node.client.try_publish(reply_to, None, bytes);
            }
        };
        let (header, wire) = match codec::decode_request::<<S::Protocol as Protocol>::Wire>(
            &message.payload,
            <S::Protocol as Protocol>::SCHEMA,
        ) {
            Ok(decoded) => decoded,
            Err(why) => {
                node.count("decode", 1);
                answer(failure(Failure::Decode(why)));
                continue;
            }
        };
        if reply_to.is_some() && in_flight.len() >= max_in_flight {
            node.count("busy", 1);
            answer(failure(Failure::Full));
            continue;
        }
        // An ask that may no longer start (its deadline passed, or it was sent while this
        // node was cut off) is answered at once and never put in the mailbox; one that is
        // put in is asked again right before its handler runs (the reply's expiry).
        let ticket = match (&reply_to, header.deadline) {
            (Some(_), Some(deadline)) => {
                let ticket = Ticket::new(deadline, header.incarnation, node.liveness.clone());
                if let Some(refusal) = ticket.refusal() {
                    node.count(refusal.reason(), 1);
                    if let Some(told) = refused(refusal, &node_name) {
                        answer(codec::reply(told));
                    }
                    continue;
                }
                Some(Arc::new(ticket))
            }
            _ => None,
        };
        // An ask without a deadline (a plain client's) waits for its reply at most the node's
        // ask timeout: nothing here waits without bound (a withdrawal waits for these).
        let local_deadline = match &ticket {
            Some(ticket) => node.liveness.local_deadline(&ticket.deadline),
            None => Instant::now() + node.options.ask_timeout.min(MAX_WAIT),
        };
        let mut responder = Responder::new(
            reply_to.is_some(),
            served.__label(),
            ticket,
            node_name.clone(),
        );
        let sent = served.__deliver(wire, &mut responder);
        match sent {
            Ok(()) => {
                if let (Some(reply_to), Some(pending)) = (reply_to, responder.into_pending()) {
                    let client = node.client.clone();
                    let context = node.context.clone();
                    in_flight.push(Box::pin(async move {
                        let left = local_deadline.saturating_duration_since(Instant::now());
                        let bytes = match context.timeout(left, pending).await {
                            Ok(Some(bytes)) => bytes,
                            // Nothing to say, or the asker has given up.
                            Ok(None) | Err(_) => return,
                        };
                        // Room in the write buffer is waited for only until the deadline.
                        let left = local_deadline.saturating_duration_since(Instant::now());
                        let published = context.timeout(left, client.publish(&reply_to, bytes));
                        if let Ok(Err(nats::Error::TooLarge { size, max_payload })) =
                            published.await
                        {
                            // Tell the asker now rather than let it wait for its deadline.
                            let why = format!(
                                "the reply of {size} bytes is larger than the server's \
                                 max_payload of {max_payload}"
                            );
                            let _ =
                                client.try_publish(&reply_to, None, failure(Failure::Decode(why)));
                        }
                    }));
                }
            }
            Err(Error::Full) => {
                node.count("full", 1);
                answer(failure(Failure::Full));
            }
            Err(_) => answer(failure(Failure::Closed)),
        }
    };
    // No more messages: the name's queue group routes to the other members from now on,
    // and the name is no longer listed here or by peers.
    drop(incoming);
    if withdrawn {
        // The actor runs on and will answer what it took: the end is announced only after
        // (a peer that reads the end first fails the asks still waiting, as `Closed`).
        while in_flight.next().await.is_some() {}
    } else {
        // Replies the actor sent before it ended are queued before its end is announced (a
        // peer that reads the end first would fail the asks they answer).
        poll_fn(|cx| {
            while let Poll::Ready(Some(())) = in_flight.poll_next_unpin(cx) {}
            Poll::Ready(())
        })
        .await;
    }
    node.exposure_ended(&name, token, &reason);
    // Replies already on their way still go out, within their deadlines.
    while in_flight.next().await.is_some() {}
}

impl NodeInner {
    /// The exposure `token` of `name` ended because its actor ended with `reason` (unless it
    /// was withdrawn and the name exposed again meanwhile): no longer listed or announced.
    pub(crate) fn exposure_ended(&self, name: &str, token: u64, reason: &ExitReason) {
        let mut state = self.state.lock();
        if state.exposed.get(name).is_none_or(|e| e.token != token) {
            return;
        }
        state.exposed.remove(name);
        self.announce_exit(&mut state, name, Exit::from(reason));
    }
}
