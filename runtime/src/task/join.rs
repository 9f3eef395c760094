//! The join slot a task's [`Handle`](super::Handle) shares with its cell (the handle reaches it
//! through a [`JoinRef`](super::cell::JoinRef)).
//!
//! The slot lives inside the task cell (no allocation of its own) and guarantees:
//! - exactly one result is published: `Ok` if the future finished and dropped cleanly, `Closed`
//!   if it was aborted, refused, cancelled or its destructor panicked, `Exited` if it panicked;
//! - the publisher's `published` callback (the owner's, which lowers the running metric) runs
//!   exactly once, when that result is published and before the handle is woken;
//! - an abort (the handle's or an ancestor's) publishes `Closed` at once and wakes the task so
//!   that its next poll drops the future: the handle resolves without any poll by the runtime.

use crate::Error;
use crate::sync::Mutex;
use std::task::{Poll, Waker};

struct Slot<T> {
    result: Option<Result<T, Error>>,
    /// A result has been published (it may have been taken since).
    published: bool,
    /// The handle's waker, woken when the result is published.
    handle: Option<Waker>,
}

/// Where one task's result goes, until its handle takes it.
pub(crate) struct JoinSlot<T> {
    slot: Mutex<Slot<T>>,
}

impl<T> JoinSlot<T> {
    /// An empty slot.
    pub(crate) fn new() -> Self {
        Self {
            slot: Mutex::new(Slot {
                result: None,
                published: false,
                handle: None,
            }),
        }
    }

    /// Publishes `result` unless something was published first; then, with the lock released,
    /// runs `published` and wakes the handle. Returns whether it published.
    pub(crate) fn publish(&self, result: Result<T, Error>, published: impl FnOnce()) -> bool {
        let handle = {
            let mut slot = self.slot.lock();
            if slot.published {
                return false;
            }
            slot.published = true;
            slot.result = Some(result);
            slot.handle.take()
        };
        published();
        if let Some(handle) = handle {
            handle.wake();
        }
        true
    }

    /// Publishes `Closed` unless a result was published first. Returns whether it did (the
    /// caller then wakes the task so its future is dropped).
    pub(crate) fn abort(&self, published: impl FnOnce()) -> bool {
        self.publish(Err(Error::Closed), published)
    }

    /// The handle's poll: takes the result if one was published, else leaves `waker` to be
    /// woken when it is. Panics if the result was already taken.
    pub(crate) fn poll_result(&self, waker: &Waker) -> Poll<Result<T, Error>> {
        let mut slot = self.slot.lock();
        if let Some(result) = slot.result.take() {
            return Poll::Ready(result);
        }
        assert!(!slot.published, "Handle polled after it resolved");
        match &slot.handle {
            Some(registered) if registered.will_wake(waker) => {}
            _ => slot.handle = Some(waker.clone()),
        }
        Poll::Pending
    }

    /// Whether a result has been published (it may have been taken since).
    pub(crate) fn is_published(&self) -> bool {
        self.slot.lock().published
    }
}
