//! [`Handle`] and the wrapper that runs a user future under supervision.
//!
//! The wrapper ([`Handle::init`]) owns the user future and a shared completion slot. It
//! guarantees, in this order:
//! 1. the user future is polled inside a panic boundary;
//! 2. when it finishes (ready or panicked) it is dropped first, with a destructor panic
//!    contained;
//! 3. the task's supervision subtree is closed;
//! 4. only then is the result published: `Ok` if the future finished and dropped cleanly,
//!    `Closed` if its destructor panicked, `Exited` if it panicked.
//!
//! An abort (the handle's or an ancestor's) publishes `Closed` at once, finishes the running
//! metric, and wakes the task so that its next poll drops the future. The handle therefore
//! resolves without any poll by the runtime.

use crate::Error;
use crate::metrics::MetricHandle;
use crate::panic::{Panicker, Panics};
use crate::supervision::{Abort, Tree};
use parking_lot::Mutex;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    result: Option<Result<T, Error>>,
    /// A result has been published (it may have been taken since).
    published: bool,
    handle: Option<Waker>,
    task: Option<Waker>,
    metric: Option<MetricHandle>,
}

/// The completion slot shared by a task's wrapper and its handle.
struct Completion<T> {
    /// Fast path for the wrapper's poll: set when an abort published `Closed`.
    aborted: AtomicBool,
    slot: Mutex<Slot<T>>,
}

impl<T> Completion<T> {
    /// Publishes `result` unless something was published first. Wakes the handle after the
    /// lock is released, and finishes the metric.
    fn publish(&self, result: Result<T, Error>) {
        let (handle, task, metric) = {
            let mut slot = self.slot.lock();
            if slot.published {
                return;
            }
            slot.published = true;
            slot.result = Some(result);
            (slot.handle.take(), slot.task.take(), slot.metric.take())
        };
        // The task's own waker goes too: the slot outlives the task while the handle lives,
        // and the waker would keep the finished cell allocated.
        drop(task);
        drop(metric);
        if let Some(handle) = handle {
            handle.wake();
        }
    }
}

impl<T: Send> Abort for Completion<T> {
    fn abort(&self) {
        let (handle, task, metric) = {
            let mut slot = self.slot.lock();
            if slot.published {
                return;
            }
            slot.published = true;
            slot.result = Some(Err(Error::Closed));
            self.aborted.store(true, Ordering::Release);
            (slot.handle.take(), slot.task.take(), slot.metric.take())
        };
        drop(metric);
        if let Some(handle) = handle {
            handle.wake();
        }
        if let Some(task) = task {
            task.wake();
        }
    }
}

/// A task's result.
///
/// Resolves to `Ok(output)`, to `Err(Error::Closed)` if the task was aborted, cancelled,
/// refused or shut down, or to `Err(Error::Exited)` if it panicked while panics are caught.
/// Dropping a handle detaches the task: it keeps running.
pub struct Handle<T> {
    completion: Arc<Completion<T>>,
    tree: Arc<Tree>,
}

impl<T: Send + 'static> Handle<T> {
    /// Wraps `future` so that it reports to a new handle, finishes `metric` exactly once,
    /// closes `tree` (the task's own node) when it ends, and routes panics by `catch_panics`.
    pub(crate) fn init<F>(
        future: F,
        metric: MetricHandle,
        panicker: Panicker,
        tree: Arc<Tree>,
        catch_panics: bool,
    ) -> (Supervised<F>, Handle<T>)
    where
        F: Future<Output = T> + Send + 'static,
    {
        let completion = Arc::new(Completion {
            aborted: AtomicBool::new(false),
            slot: Mutex::new(Slot {
                result: None,
                published: false,
                handle: None,
                task: None,
                metric: Some(metric),
            }),
        });
        if !tree.set_aborter(completion.clone()) {
            completion.abort();
        }
        let supervised = Supervised {
            future: Some(future),
            completion: completion.clone(),
            tree: tree.clone(),
            panicker,
            catch_panics,
            registered: false,
        };
        (supervised, Handle { completion, tree })
    }

    /// A handle that is already closed: what a refused spawn returns.
    pub(crate) fn closed() -> Self {
        let completion = Arc::new(Completion {
            aborted: AtomicBool::new(true),
            slot: Mutex::new(Slot {
                result: Some(Err(Error::Closed)),
                published: true,
                handle: None,
                task: None,
                metric: None,
            }),
        });
        let tree = Tree::root();
        tree.abort();
        Handle { completion, tree }
    }
}

impl<T> Handle<T> {
    /// Aborts the task and its descendants. The handle resolves to `Err(Error::Closed)` unless
    /// the task had already finished; the future is dropped by its next poll or by shutdown.
    pub fn abort(&self) {
        self.tree.abort();
    }
}

impl<T> Future for Handle<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.completion.slot.lock();
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
        f.debug_struct("Handle")
            .field("published", &self.completion.slot.lock().published)
            .finish()
    }
}

/// A user future running under supervision; the future a task cell holds.
pub(crate) struct Supervised<F: Future> {
    future: Option<F>,
    completion: Arc<Completion<F::Output>>,
    tree: Arc<Tree>,
    panicker: Panicker,
    catch_panics: bool,
    registered: bool,
}

impl<F: Future> Supervised<F> {
    /// Drops the user future, containing a destructor panic. Returns whether it dropped
    /// cleanly.
    fn dispose(&mut self) -> bool {
        let future = self.future.take();
        Panics::contain(move || drop(future)).is_some()
    }
}

impl<F> Future for Supervised<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: `future` is structurally pinned (never moved while Some, dropped in place by
        // `dispose`); the other fields are never pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if this.future.is_none() {
            return Poll::Ready(());
        }
        if !this.registered {
            // A task's waker never changes (it is the cell's own), so storing it once is
            // enough for an abort to reach the task.
            this.completion.slot.lock().task = Some(cx.waker().clone());
            this.registered = true;
        }
        if this.completion.aborted.load(Ordering::Acquire) {
            this.dispose();
            return Poll::Ready(());
        }
        let future = this.future.as_mut().expect("checked above");
        // SAFETY: see above: the future is never moved while it is Some.
        let pinned = unsafe { Pin::new_unchecked(future) };
        let outcome = catch_unwind(AssertUnwindSafe(|| pinned.poll(cx)));
        match outcome {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                let clean = this.dispose();
                this.tree.finish();
                this.completion.publish(if clean {
                    Ok(output)
                } else {
                    Err(Error::Closed)
                });
                Poll::Ready(())
            }
            Err(payload) => {
                this.dispose();
                this.tree.finish();
                this.completion.publish(Err(Error::Exited));
                if this.catch_panics {
                    crate::panic::dispose(payload);
                } else {
                    this.panicker.notify(payload);
                }
                Poll::Ready(())
            }
        }
    }
}

impl<F: Future> Drop for Supervised<F> {
    fn drop(&mut self) {
        if self.future.is_some() {
            // Cleared before it finished (teardown or a refused spawn): close the subtree and
            // the handle first, so every metric is finished before the future's destructor
            // runs. The future itself is dropped by the field's own drop, right after.
            self.tree.abort();
        }
    }
}
