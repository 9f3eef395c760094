//! [`Handle`] and the supervision slot it shares with its task's cell.
//!
//! The slot lives inside the task cell (no allocation of its own) and guarantees:
//! - exactly one result is published: `Ok` if the future finished and dropped cleanly, `Closed`
//!   if it was aborted, refused, cancelled or its destructor panicked, `Exited` if it panicked;
//! - the running metric is finished exactly once, when that result is published;
//! - an abort (the handle's or an ancestor's) publishes `Closed` at once and wakes the task so
//!   that its next poll drops the future: the handle resolves without any poll by the runtime.

use super::cell::TaskRef;
use crate::Error;
use crate::context::{Execution, Scope};
use crate::supervision::NodeRef;
use crate::sync::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    result: Option<Result<T, Error>>,
    /// A result has been published (it may have been taken since).
    published: bool,
    handle: Option<Waker>,
}

/// The supervision state of one task: where its result goes. The running metric and the
/// panic policy come from the task's label path ([`Scope`]), passed in by the cell.
pub(crate) struct Supervision<T> {
    slot: Mutex<Slot<T>>,
    execution: Execution,
}

impl<T> Supervision<T> {
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
    pub(crate) fn publish(&self, result: Result<T, Error>, scope: &Scope) -> bool {
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
    pub(crate) fn abort(&self, scope: &Scope) -> bool {
        self.publish(Err(Error::Closed), scope)
    }
}

/// A task's result.
///
/// Resolves to `Ok(output)`, to `Err(Error::Closed)` if the task was aborted, cancelled,
/// refused or shut down, or to `Err(Error::Exited)` if it panicked while panics are caught.
/// Dropping a handle detaches the task: it keeps running.
pub struct Handle<T> {
    /// `None` for a spawn refused before a cell existed.
    task: Option<TaskRef>,
    supervision: Option<NonNull<Supervision<T>>>,
    /// A refused handle's result, until taken.
    refused: bool,
}

// SAFETY: the handle only reaches the supervision slot, which is `Sync` for `T: Send` (a lock
// around the result), through a pointer kept alive by its `TaskRef`.
unsafe impl<T: Send> Send for Handle<T> {}
// SAFETY: as above; `&Handle` only allows `abort`, which goes through the tree.
unsafe impl<T: Send> Sync for Handle<T> {}

impl<T> Handle<T> {
    /// # Safety
    /// `supervision` points into the cell `task` references.
    pub(crate) unsafe fn new(task: TaskRef, supervision: NonNull<Supervision<T>>) -> Self {
        Self {
            task: Some(task),
            supervision: Some(supervision),
            refused: false,
        }
    }

    /// A handle that is already closed: what a refused spawn returns.
    pub(crate) fn closed() -> Self {
        Self {
            task: None,
            supervision: None,
            refused: true,
        }
    }

    fn supervision(&self) -> Option<&Supervision<T>> {
        // SAFETY: the pointer targets the cell our `TaskRef` keeps alive.
        self.supervision.map(|pointer| unsafe { pointer.as_ref() })
    }

    /// Aborts the task and its descendants. The handle resolves to `Err(Error::Closed)` unless
    /// the task had already finished; the future is dropped by its next poll or by shutdown.
    pub fn abort(&self) {
        if let Some(task) = &self.task {
            NodeRef::Task(task.clone()).abort();
        }
    }
}

impl<T> Future for Handle<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(supervision) = self.supervision() else {
            assert!(self.refused, "Handle polled after it resolved");
            self.refused = false;
            return Poll::Ready(Err(Error::Closed));
        };
        let mut slot = supervision.slot.lock();
        if let Some(result) = slot.result.take() {
            return Poll::Ready(result);
        }
        assert!(!slot.published, "Handle polled after it resolved");
        match &slot.handle {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => slot.handle = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Unpin for Handle<T> {}

impl<T> std::fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let published = self
            .supervision()
            .is_none_or(|supervision| supervision.slot.lock().published);
        f.debug_struct("Handle")
            .field("published", &published)
            .field("attached", &self.task.is_some())
            .finish()
    }
}
