//! The task set: every accepted task from registration until its final poll returns, or until
//! teardown clears it.
//!
//! Invariants:
//! - Once [`Tasks::close`] has run, `insert` refuses everything, so teardown's
//!   [`Tasks::drain`] sees every task that will ever exist.
//! - A task's slot index is written under the lock before its first runnable is delivered, and
//!   removal checks the entry is still that task, so a late removal never evicts another task.
//! - No future is dropped under the lock: `drain` hands the tasks out and the caller clears
//!   them with the lock released, because destructors run user code.

use super::cell::{Runnable, Task, TaskRef};
#[cfg(test)]
use crate::pool::Pool;
use crate::slab::Slab;
use parking_lot::Mutex;
#[cfg(test)]
use std::future::Future;
#[cfg(test)]
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Default)]
struct Entries {
    tasks: Slab<Task>,
    closed: bool,
}

/// The set of live tasks.
#[derive(Default)]
pub struct Tasks {
    entries: Mutex<Entries>,
    closed: AtomicBool,
}

impl Tasks {
    /// Creates an unsupervised task for `future`, inserts it and delivers its first runnable
    /// (to the current worker's queue on a worker of `pool`, to the global queue otherwise). A
    /// refused future is dropped here, on the caller's thread.
    #[cfg(test)]
    pub(crate) fn register<F>(&self, future: F, pool: Weak<Pool>) -> Result<(), ()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (task, runnable) = Task::new(future, pool);
        self.admit(task, runnable, Runnable::spawn)
    }

    /// Inserts `task` and delivers its first `runnable` with `deliver`. A refused task is
    /// cleared here, on the caller's thread: its handle closes and its future is dropped.
    pub(crate) fn admit(
        &self,
        task: Task,
        runnable: Runnable,
        deliver: impl FnOnce(Runnable),
    ) -> Result<(), ()> {
        if let Err(task) = self.insert(task) {
            drop(runnable);
            task.clear();
            return Err(());
        }
        #[cfg(test)]
        tests::run_after_insert();
        deliver(runnable);
        Ok(())
    }

    /// Adds `task` unless the set is closed, in which case it is handed back.
    pub(crate) fn insert(&self, task: Task) -> Result<(), Task> {
        let mut entries = self.entries.lock();
        if entries.closed {
            return Err(task);
        }
        let index = entries.tasks.insert(task);
        if let Some(task) = entries.tasks.get(index) {
            task.0.header_ref().slot.store(index, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes the task behind `runnable`'s cell after its final poll.
    pub(crate) fn remove(&self, task: &TaskRef) {
        let index = task.header_ref().slot.load(Ordering::Relaxed);
        let removed = self
            .entries
            .lock()
            .tasks
            .remove_if(index, |entry| entry.0.same(task));
        // The set's reference is released outside the lock.
        drop(removed);
    }

    /// Number of tasks in the set.
    pub fn live(&self) -> usize {
        self.entries.lock().tasks.len()
    }

    /// Refuses every later insert.
    pub(crate) fn close(&self) {
        self.entries.lock().closed = true;
        self.closed.store(true, Ordering::Release);
    }

    /// Whether the set refuses inserts.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Takes every task out of a closed set, for teardown.
    pub(crate) fn drain(&self) -> Vec<Task> {
        let mut entries = self.entries.lock();
        debug_assert!(entries.closed, "drain only a closed set");
        entries.tasks.drain().collect()
    }
}

/// Whether `runnable`'s task is still a member (it has not been drained or removed).
#[cfg(test)]
pub(crate) fn contains(tasks: &Tasks, runnable: &Runnable) -> bool {
    let task = runnable.task_ref();
    let index = task.header_ref().slot.load(Ordering::Relaxed);
    tasks
        .entries
        .lock()
        .tasks
        .get(index)
        .is_some_and(|entry| entry.0.same(task))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Runs on the registering thread after the insert and before the first runnable is
        /// delivered.
        pub(crate) static AFTER_INSERT: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
    }

    pub(crate) fn run_after_insert() {
        if let Some(hook) = AFTER_INSERT.with(Cell::take) {
            hook();
        }
    }

    #[test]
    fn a_closed_set_refuses_and_drops_the_future_on_the_caller() {
        let tasks = Tasks::default();
        tasks.close();
        let dropped_on = std::sync::Arc::new(parking_lot::Mutex::new(None));
        struct Probe(std::sync::Arc<parking_lot::Mutex<Option<std::thread::ThreadId>>>);
        impl Drop for Probe {
            fn drop(&mut self) {
                *self.0.lock() = Some(std::thread::current().id());
            }
        }
        let probe = Probe(dropped_on.clone());
        assert!(
            tasks
                .register(
                    async move {
                        let _probe = probe;
                    },
                    Weak::new()
                )
                .is_err()
        );
        assert_eq!(*dropped_on.lock(), Some(std::thread::current().id()));
        assert_eq!(tasks.live(), 0);
    }

    #[test]
    fn removal_frees_the_slot_and_ignores_strangers() {
        let tasks = Tasks::default();
        let (first, runnable) = Task::new(async {}, Weak::new());
        tasks.insert(first.clone()).ok().unwrap();
        assert!(contains(&tasks, &runnable));
        let (stranger, _) = Task::new(async {}, Weak::new());
        stranger.0.header_ref().slot.store(0, Ordering::Relaxed);
        tasks.remove(&stranger.0);
        assert_eq!(
            tasks.live(),
            1,
            "a task that is not the entry removes nothing"
        );
        tasks.remove(&first.0);
        assert_eq!(tasks.live(), 0);
        assert!(!contains(&tasks, &runnable));
    }
}
