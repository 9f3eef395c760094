//! The task set: every accepted task from registration until its final poll returns, or until
//! teardown clears it.
//!
//! The set is split into [`SHARDS`] independently locked shards, each on its own cache line:
//! a spawn inserts into the shard its thread rotates to, and a completion removes from the
//! shard the task records, so spawners and completing workers rarely meet on one lock.
//!
//! Invariants:
//! - Once [`Tasks::close`] has run, `insert` refuses everything: `close` marks every shard
//!   closed under that shard's lock, and `insert` checks the mark under the same lock, so
//!   teardown's [`Tasks::drain`] sees every task that will ever exist.
//! - A task's position (shard and slot) is written under the shard's lock before its first
//!   runnable is delivered, and removal checks the entry is still that task, so a late
//!   removal never evicts another task.
//! - No future is dropped under a lock: `drain` hands the tasks out and the caller clears
//!   them with the locks released, because destructors run user code.

use super::cell::{Runnable, Task, TaskRef};
use crate::slab::Slab;
use crate::sync::Mutex;
use std::cell::Cell;
#[cfg(test)]
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

/// Number of shards (a power of two).
const SHARDS: usize = 16;

#[derive(Default)]
struct Entries {
    tasks: Slab<Task>,
    closed: bool,
}

/// One shard, alone on its cache lines so neighbouring locks do not share them.
#[derive(Default)]
#[repr(align(128))]
struct Shard(Mutex<Entries>);

thread_local! {
    /// The shard this thread inserts into next; each insert moves on by one.
    static NEXT_SHARD: Cell<usize> = const { Cell::new(0) };
}

/// Encodes a task's position: the shard in the low bits, the slot above.
fn position(shard: usize, slot: usize) -> usize {
    slot * SHARDS + shard
}

/// The set of live tasks.
pub struct Tasks {
    shards: Box<[Shard]>,
    closed: AtomicBool,
}

impl Default for Tasks {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            closed: AtomicBool::new(false),
        }
    }
}

impl Tasks {
    /// Creates an unsupervised task for `future` with no home, inserts it and hands its first
    /// runnable to that home, which drops it: the task is never polled. A refused future is
    /// dropped here, on the caller's thread.
    #[cfg(test)]
    pub(crate) fn register<F>(&self, future: F) -> Result<(), ()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (task, runnable) = Task::new(future, ());
        self.admit(task, runnable, Runnable::spawn)
    }

    /// Inserts `task` and delivers its first `runnable` with `deliver`. A refused task is
    /// cleared here, on the caller's thread: its handle closes and its future is dropped.
    #[inline]
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
        let shard = NEXT_SHARD
            .try_with(|next| {
                let shard = next.get();
                next.set((shard + 1) % SHARDS);
                shard
            })
            .unwrap_or(0);
        let mut entries = self.shards[shard].0.lock();
        if entries.closed {
            return Err(task);
        }
        let slot = entries.tasks.insert(task);
        if let Some(task) = entries.tasks.get(slot) {
            task.0
                .header_ref()
                .slot
                .store(position(shard, slot), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes the task behind `runnable`'s cell after its final poll.
    pub(crate) fn remove(&self, task: &TaskRef) {
        let position = task.header_ref().slot.load(Ordering::Relaxed);
        let removed = self.shards[position % SHARDS]
            .0
            .lock()
            .tasks
            .remove_if(position / SHARDS, |entry| entry.0.same(task));
        // The set's reference is released outside the lock.
        drop(removed);
    }

    /// Number of tasks in the set (a snapshot: shards are counted one after another).
    pub fn live(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.0.lock().tasks.len())
            .sum()
    }

    /// Refuses every later insert.
    pub(crate) fn close(&self) {
        for shard in self.shards.iter() {
            shard.0.lock().closed = true;
        }
        self.closed.store(true, Ordering::Release);
    }

    /// Whether the set refuses inserts.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Takes every task out of a closed set, for teardown.
    pub(crate) fn drain(&self) -> Vec<Task> {
        let mut drained = Vec::new();
        for shard in self.shards.iter() {
            let mut entries = shard.0.lock();
            debug_assert!(entries.closed, "drain only a closed set");
            drained.extend(entries.tasks.drain());
        }
        drained
    }
}

/// Whether `runnable`'s task is still a member (it has not been drained or removed).
#[cfg(test)]
pub(crate) fn contains(tasks: &Tasks, runnable: &Runnable) -> bool {
    let task = runnable.task_ref();
    let position = task.header_ref().slot.load(Ordering::Relaxed);
    tasks.shards[position % SHARDS]
        .0
        .lock()
        .tasks
        .get(position / SHARDS)
        .is_some_and(|entry| entry.0.same(task))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
        let dropped_on = std::sync::Arc::new(crate::sync::Mutex::new(None));
        struct Probe(std::sync::Arc<crate::sync::Mutex<Option<std::thread::ThreadId>>>);
        impl Drop for Probe {
            fn drop(&mut self) {
                *self.0.lock() = Some(std::thread::current().id());
            }
        }
        let probe = Probe(dropped_on.clone());
        assert!(
            tasks
                .register(async move {
                    let _probe = probe;
                })
                .is_err()
        );
        assert_eq!(*dropped_on.lock(), Some(std::thread::current().id()));
        assert_eq!(tasks.live(), 0);
    }

    #[test]
    fn removal_frees_the_slot_and_ignores_strangers() {
        let tasks = Tasks::default();
        let (first, runnable) = Task::new(async {}, ());
        tasks.insert(first.clone()).ok().unwrap();
        assert!(contains(&tasks, &runnable));
        let (stranger, _) = Task::new(async {}, ());
        let first_position = first.0.header_ref().slot.load(Ordering::Relaxed);
        stranger
            .0
            .header_ref()
            .slot
            .store(first_position, Ordering::Relaxed);
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

#[cfg(test)]
mod sharding {
    use super::*;

    /// Inserts spread over every shard, and each task is found again and removed from the
    /// shard it recorded; a closed set refuses on every shard.
    #[test]
    fn tasks_spread_over_the_shards_and_leave_from_their_own() {
        let tasks = Tasks::default();
        let inserted: Vec<_> = (0..3 * SHARDS)
            .map(|_| {
                let (task, runnable) = Task::new(async {}, ());
                tasks.insert(task.clone()).ok().unwrap();
                (task, runnable)
            })
            .collect();
        assert_eq!(tasks.live(), 3 * SHARDS);
        assert!(
            tasks
                .shards
                .iter()
                .all(|shard| shard.0.lock().tasks.len() == 3),
            "a thread's inserts rotate over the shards"
        );
        for (task, runnable) in &inserted {
            assert!(contains(&tasks, runnable));
            tasks.remove(&task.0);
            assert!(!contains(&tasks, runnable));
        }
        assert_eq!(tasks.live(), 0);
        tasks.close();
        for _ in 0..SHARDS {
            let (task, _) = Task::new(async {}, ());
            assert!(tasks.insert(task).is_err());
        }
    }
}
