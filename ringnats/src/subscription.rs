//! [`Subscription`]: a subscription's end the caller holds (its queue, `queue.rs`, and what
//! keeps its client's connection open, `owner.rs`), and [`Unsubscriber`], which ends it from
//! elsewhere. Unsubscribing goes to the subscription table (`Shared::unsubscribe`), never
//! through a [`Client`](crate::Client).

use crate::owner::Owner;
use crate::protocol::Message;
use crate::queue::Queue;
use runtime::Clock as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The messages published to a subject this client subscribed to, in the order the server
/// sent them. Dropping it unsubscribes. It keeps its client's connection alive.
///
/// When the subscriber falls behind by more than
/// [`Options::with_subscription_capacity`](crate::Options::with_subscription_capacity),
/// new messages are dropped and counted ([`dropped`](Self::dropped)) rather than holding up
/// the connection.
pub struct Subscription {
    sid: u64,
    queue: Arc<Queue>,
    owner: Arc<Owner>,
    /// Unsubscribed already (by `unsubscribe`): the drop has nothing to do.
    done: bool,
}

impl Subscription {
    pub(crate) fn new(sid: u64, queue: Arc<Queue>, owner: Arc<Owner>) -> Self {
        Self {
            sid,
            queue,
            owner,
            done: false,
        }
    }

    /// The next message; `None` once the subscription has ended (unsubscribed, its limit
    /// reached, or the client closed) and every message before that was taken.
    pub async fn next(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.queue.poll_next(cx)).await
    }

    /// The next message if one is waiting.
    pub fn try_next(&mut self) -> Option<Message> {
        let waker = Waker::noop();
        match self.queue.poll_next(&mut Context::from_waker(waker)) {
            Poll::Ready(message) => message,
            Poll::Pending => None,
        }
    }

    /// Why the subscription ended, when the server ended it: the
    /// [`Error::PermissionDenied`](crate::Error::PermissionDenied) of a subject this client
    /// may not subscribe to. `None` while it runs or after an ordinary end.
    pub fn error(&self) -> Option<crate::Error> {
        self.queue.error()
    }

    /// Messages dropped because this subscription's queue was full.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped()
    }

    /// Messages received and not yet taken.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// The subscription's id on the connection.
    pub fn sid(&self) -> u64 {
        self.sid
    }

    /// Ends the subscription after `count` more messages (counted by the server, and by the
    /// client across reconnects). Messages already queued still come out.
    pub fn unsubscribe_after(&mut self, count: u64) -> Result<(), crate::Error> {
        self.owner.shared.unsubscribe_after(self.sid, count)
    }

    /// A handle that unsubscribes this subscription from elsewhere (say, while a task owns
    /// it): its queue ends, and the `UNSUB` is queued at once.
    pub fn unsubscriber(&self) -> Unsubscriber {
        Unsubscriber {
            sid: self.sid,
            owner: self.owner.clone(),
            queue: self.queue.clone(),
        }
    }

    /// Unsubscribes now; messages already queued are dropped with the subscription.
    pub fn unsubscribe(mut self) {
        self.done = true;
        self.owner.shared.unsubscribe(self.sid);
    }
}

/// Unsubscribes a [`Subscription`] that something else owns: see
/// [`Subscription::unsubscriber`].
#[derive(Clone)]
pub struct Unsubscriber {
    sid: u64,
    owner: Arc<Owner>,
    queue: Arc<Queue>,
}

impl std::fmt::Debug for Unsubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsubscriber")
            .field("sid", &self.sid)
            .finish_non_exhaustive()
    }
}

impl Unsubscriber {
    /// Unsubscribes (nothing if it was already): the subscription's queue hands out what it
    /// holds and ends.
    pub fn unsubscribe(&self) {
        self.owner.shared.unsubscribe(self.sid);
    }

    /// Why the server ended the subscription, if it refused it: see
    /// [`Subscription::error`].
    pub fn error(&self) -> Option<crate::Error> {
        self.queue.error()
    }

    /// Unsubscribes without losing what is on its way: the `UNSUB` goes out, the subscription
    /// keeps delivering the messages the server routed to it before it saw the `UNSUB`, and
    /// once the server answered a `PING` sent after it (or the connection dropped, or the
    /// request timeout passed) its queue hands out what it holds and ends. What
    /// [`unsubscribe`](Self::unsubscribe) would drop (messages still on the wire) arrives.
    ///
    /// Cancelled (the future dropped before it finished), it ends the subscription at once,
    /// as [`unsubscribe`](Self::unsubscribe) does: a drain never leaves one open.
    pub async fn drain(&self) {
        /// Ends the subscription however the drain ends.
        struct EndOnDrop<'a>(&'a Unsubscriber);
        impl Drop for EndOnDrop<'_> {
            fn drop(&mut self) {
                self.0.unsubscribe();
            }
        }
        let _end = EndOnDrop(self);
        let shared = &self.owner.shared;
        if shared.start_drain(self.sid)
            && let Ok(answer) = shared.queue_flush()
        {
            let timeout = shared.options.request_timeout;
            let _ = self.owner.context.timeout(timeout, answer).await;
        }
    }
}

impl futures::Stream for Subscription {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.queue.poll_next(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if !self.done {
            self.owner.shared.unsubscribe(self.sid);
        }
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Subscription");
        debug.field("sid", &self.sid);
        match self.queue.try_counts() {
            Some((pending, dropped)) => debug
                .field("pending", &pending)
                .field("dropped", &dropped)
                .finish(),
            None => debug.finish_non_exhaustive(),
        }
    }
}
