//! The join slot a task's [`Handle`](super::Handle) shares with its cell (the handle reaches it
//! through a [`JoinRef`](super::cell::JoinRef)).
//!
//! The slot lives inside the task cell (no allocation of its own) and guarantees:
//! - exactly one result is published: `Ok` if the future finished and dropped cleanly, `Closed`
//!   if it was aborted, refused, cancelled or its destructor panicked, `Exited` if it panicked;
//! - the running metric is finished exactly once, when that result is published;
//! - an abort (the handle's or an ancestor's) publishes `Closed` at once and wakes the task so
//!   that its next poll drops the future: the handle resolves without any poll by the runtime.

use super::Execution;
use crate::Error;
use crate::context::LabelPath;
use crate::sync::Mutex;
use std::task::{Poll, Waker};

struct Slot<T> {
    result: Option<Result<T, Error>>,
    /// A result has been published (it may have been taken since).
    published: bool,
    /// The handle's waker, woken when the result is published.
    handle: Option<Waker>,
}

/// Where one task's result goes, until its handle takes it. The running metric and the
/// panic policy come from the task's label path ([`LabelPath`]), passed in by the cell.
pub(crate) struct JoinSlot<T> {
    slot: Mutex<Slot<T>>,
    execution: Execution,
}

impl<T> JoinSlot<T> {
    /// A slot for a task whose running metric (of `execution` in its scope) is already raised.
    pub(crate) fn new(execution: Execution) -> Self {
        Self {
            slot: Mutex::new(Slot {
                result: None,
                published: false,
                handle: None,
            }),
            execution,
        }
    }

    /// Publishes `result` unless something was published first; finishes the running metric
    /// and wakes the handle after the lock is released. Returns whether it published.
    pub(crate) fn publish(&self, result: Result<T, Error>, scope: &LabelPath) -> bool {
        let handle = {
            let mut slot = self.slot.lock();
            if slot.published {
                return false;
            }
            slot.published = true;
            slot.result = Some(result);
            slot.handle.take()
        };
        scope.finish_running(self.execution);
        if let Some(handle) = handle {
            handle.wake();
        }
        true
    }

    /// Publishes `Closed` unless a result was published first. Returns whether it did (the
    /// caller then wakes the task so its future is dropped).
    pub(crate) fn abort(&self, scope: &LabelPath) -> bool {
        self.publish(Err(Error::Closed), scope)
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
