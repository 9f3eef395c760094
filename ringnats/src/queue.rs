//! A subscription's messages: a bounded queue the connection's reader fills and the
//! subscriber drains.
//!
//! Invariants:
//! - The reader never waits on a subscriber: a queue that holds its message or byte limit
//!   drops what arrives, counts it, and reports the episode once (the reader raises
//!   [`Event::SlowConsumer`](crate::Event::SlowConsumer)); the episode ends when the queue is
//!   empty again. A slow subscriber never holds up the connection or other subscriptions.
//! - Messages come out in the order the server delivered them.
//! - Once closed (unsubscribed, the subscription's limit reached, the client closed, or the
//!   server denied the subscription), the queue hands out what it holds and then ends; a
//!   denial is kept as the subscription's error.

use crate::protocol::Message;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

/// What [`Queue::push`] did with a message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    Queued,
    /// Dropped: the queue is full. `first` is true for the first drop of an episode.
    Dropped {
        first: bool,
    },
    /// Dropped: the queue is closed.
    Closed,
}

#[derive(Default)]
struct State {
    messages: VecDeque<Message>,
    bytes: usize,
    waker: Option<Waker>,
    closed: bool,
    /// Why the server ended the subscription, if it refused it.
    error: Option<crate::Error>,
    dropped: u64,
    /// A drop was reported and the queue has not been empty since.
    slow: bool,
}

/// The messages of one subscription, between the reader and the subscriber.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
}

fn message_bytes(message: &Message) -> usize {
    message.payload.len() + message.headers.as_ref().map_or(0, |h| h.len())
}

impl Queue {
    /// Queues `message` unless the queue holds `max_messages` or would exceed `max_bytes`
    /// (a message larger than `max_bytes` is taken when the queue is empty, so that it is
    /// not dropped forever).
    pub(crate) fn push(&self, message: Message, max_messages: usize, max_bytes: usize) -> Pushed {
        let size = message_bytes(&message);
        let mut state = self.state.lock();
        if state.closed {
            return Pushed::Closed;
        }
        let full = state.messages.len() >= max_messages
            || (!state.messages.is_empty() && state.bytes + size > max_bytes);
        if full {
            state.dropped += 1;
            let first = !state.slow;
            state.slow = true;
            return Pushed::Dropped { first };
        }
        state.bytes += size;
        state.messages.push_back(message);
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
        Pushed::Queued
    }

    /// Ends the queue: what it holds still comes out, then `None`.
    pub(crate) fn close(&self) {
        let waker = {
            let mut state = self.state.lock();
            state.closed = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Ends the queue because the server refused the subscription with `error`.
    pub(crate) fn close_denied(&self, error: crate::Error) {
        self.state.lock().error = Some(error);
        self.close();
    }

    pub(crate) fn error(&self) -> Option<crate::Error> {
        self.state.lock().error.clone()
    }

    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let mut state = self.state.lock();
        if let Some(message) = state.messages.pop_front() {
            state.bytes -= message_bytes(&message);
            if state.messages.is_empty() {
                state.slow = false;
            }
            return Poll::Ready(Some(message));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.state.lock().dropped
    }

    pub(crate) fn len(&self) -> usize {
        self.state.lock().messages.len()
    }

    /// The length and the drop count, or `None` if the lock is held: for `Debug`, which
    /// never waits (nor deadlocks on a lock its own thread holds).
    pub(crate) fn try_counts(&self) -> Option<(usize, u64)> {
        let state = self.state.try_lock()?;
        Some((state.messages.len(), state.dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(payload: &'static [u8]) -> Message {
        Message {
            subject: "s".into(),
            sid: 1,
            reply: None,
            headers: None,
            payload: Bytes::from_static(payload),
        }
    }

    fn next(queue: &Queue) -> Poll<Option<Message>> {
        queue.poll_next(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_full_queue_drops_counts_and_reports_once_per_episode() {
        let queue = Queue::default();
        assert_eq!(queue.push(message(b"a"), 2, 100), Pushed::Queued);
        assert_eq!(queue.push(message(b"b"), 2, 100), Pushed::Queued);
        assert_eq!(
            queue.push(message(b"c"), 2, 100),
            Pushed::Dropped { first: true }
        );
        assert_eq!(
            queue.push(message(b"d"), 2, 100),
            Pushed::Dropped { first: false }
        );
        assert_eq!(queue.dropped(), 2);
        // Room again, but the episode lasts until the queue is empty.
        assert!(matches!(next(&queue), Poll::Ready(Some(m)) if m.payload == "a"));
        assert_eq!(queue.push(message(b"e"), 2, 100), Pushed::Queued);
        assert_eq!(
            queue.push(message(b"f"), 2, 100),
            Pushed::Dropped { first: false }
        );
        assert!(matches!(next(&queue), Poll::Ready(Some(m)) if m.payload == "b"));
        assert!(matches!(next(&queue), Poll::Ready(Some(m)) if m.payload == "e"));
        assert_eq!(queue.push(message(b"g"), 2, 100), Pushed::Queued);
        assert_eq!(queue.push(message(b"h"), 2, 100), Pushed::Queued);
        assert_eq!(
            queue.push(message(b"i"), 2, 100),
            Pushed::Dropped { first: true }
        );
    }

    #[test]
    fn the_byte_limit_drops_too_but_an_empty_queue_takes_a_large_message() {
        let queue = Queue::default();
        assert_eq!(queue.push(message(b"0123456789"), 10, 4), Pushed::Queued);
        assert_eq!(
            queue.push(message(b"x"), 10, 4),
            Pushed::Dropped { first: true }
        );
        assert!(matches!(next(&queue), Poll::Ready(Some(_))));
        assert_eq!(queue.push(message(b"abcd"), 10, 4), Pushed::Queued);
    }

    #[test]
    fn a_closed_queue_hands_out_what_it_holds_then_ends() {
        let queue = Queue::default();
        queue.push(message(b"a"), 2, 100);
        assert!(matches!(next(&queue), Poll::Ready(Some(_))));
        queue.push(message(b"b"), 2, 100);
        queue.close();
        assert_eq!(queue.push(message(b"c"), 2, 100), Pushed::Closed);
        assert!(matches!(next(&queue), Poll::Ready(Some(m)) if m.payload == "b"));
        assert!(matches!(next(&queue), Poll::Ready(None)));
    }
}
