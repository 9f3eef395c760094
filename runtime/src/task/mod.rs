//! Tasks: where one runs ([`Execution`]), the cell and its state machine ([`cell`]), what the
//! cell needs from the layers above ([`Owner`], below), the join slot a task shares with its
//! [`Handle`] ([`join`], [`handle`]), and the set of live tasks ([`set`]).

pub(crate) mod cell;
mod execution;
pub(crate) mod handle;
pub(crate) mod join;
pub(crate) mod set;
mod state;

pub(crate) use cell::{Polled, Runnable, Task, TaskPtr, TaskRef};
pub use execution::Execution;
pub(crate) use execution::Placement;
pub use handle::Handle;
pub use set::Tasks;

use crate::panic::Payload;

/// What a task cell needs from the layers above it: the cell is generic over its owner, so it
/// names no pool, worker, supervision tree or label path (tokio's `Schedule` trait is the
/// model).
///
/// The owner is a value the spawning layer keeps in the cell, right after its header (no
/// allocation of its own): for the runtime, the task's node in the supervision tree, its home
/// (where its runnables are delivered) and its placement. The cell calls it at the points of a
/// task's life: a wake that schedules it, a poll that finds it aborted, its end, an abort, its
/// published result, a panic. The spawning layer reads it back with [`TaskRef::owner`] or
/// [`Runnable::owner`]. One type per runtime (the supervision tree's task node); the cell's
/// unit tests use their own.
///
/// The cell calls the hooks with nothing of its own locked, from the thread that wakes, polls,
/// aborts or tears the task down, and always while holding a count on the cell, so `&self`
/// outlives every call. [`Owner::schedule`] is the exception that shapes its signature: it
/// gives the runnable (and with it the count that keeps the cell, and the owner inside, alive)
/// away, so it takes no `&self` and must not keep a borrow of the owner past that point.
pub(crate) trait Owner: Send + Sync + Sized + 'static {
    /// Delivers a runnable that a wake created, on whatever thread the wake ran, to be polled.
    /// The owner is `runnable.owner::<Self>()`; no borrow of it may outlive the moment the
    /// runnable is passed on (another thread may then run the task to its end and free it).
    fn schedule(runnable: Runnable);

    /// Whether the task was aborted: its next poll drops the future instead of polling it.
    fn is_aborted(&self) -> bool;

    /// The task will not be polled again: close what it spawned and leave its parent. Runs
    /// once. On a finish or a panic the future is dropped first and the result published
    /// after; after an abort (a poll that found it aborted, a clear, a factory that panicked)
    /// `Closed` is published by whoever aborted it, which may be still under way on another
    /// thread; a clear drops the future right after.
    fn end(&self, task: &TaskRef);

    /// Aborts the task and everything it spawned. The owner must close what the task spawned
    /// and then cancel the task itself ([`TaskRef::cancel`]: its handle resolves to `Closed`
    /// unless a result was published, and its next poll, or teardown, drops its future), so a
    /// task's descendants are closed before its handle resolves. The cell relies on this to
    /// publish `Closed` when a task is cleared or its factory panics. An owner that finds the
    /// task already closed leaves it to whoever closed it, which cancels it in turn.
    fn abort(&self, task: &TaskRef);

    /// The task's result was published; runs once, before its handle is woken.
    fn published(&self);

    /// A poll of the task panicked; runs after its result (`Exited`) was published.
    fn panicked(&self, payload: Payload);
}

/// The owner of the bare cells of unit tests: no home (a runnable a wake makes is dropped, as
/// it is for a pool that is gone) and no tree. Such cells are unsupervised, so the cell calls
/// none of the other hooks.
#[cfg(test)]
impl Owner for () {
    fn schedule(runnable: Runnable) {
        drop(runnable);
    }

    fn is_aborted(&self) -> bool {
        false
    }

    fn end(&self, _task: &TaskRef) {}

    fn abort(&self, _task: &TaskRef) {}

    fn published(&self) {}

    fn panicked(&self, payload: Payload) {
        crate::panic::dispose(payload);
    }
}
