//! The pool: the workers' run queues and mailboxes, the global queue and the idle set, and a
//! task's [`Home`] (this pool, or a dedicated worker's inbox). It knows nothing of io_uring:
//! workers park through [`wake::WakeState`].
//!
//! Invariants:
//! - Every runnable of a task of this pool is in exactly one place: a run queue, the global
//!   queue, a batch in transit between them, or the hands of the worker polling it.
//! - Once [`Pool::close`] has run, the global queue refuses pushes and discards them, and every
//!   worker has been woken so it sees the closure and leaves its loop.
//! - A push into the global queue claims a parked worker while the queue holds more runnables
//!   than there are searching workers, so work that arrives while every worker sleeps is never
//!   stranded, and two quick pushes wake two workers.
//! - A push that makes a run queue stealable claims a parked worker only when nobody searches:
//!   a searching worker is expected to find that backlog, a parked one re-checks for it in its
//!   last look, and the last searcher to stop replays the suppressed kicks
//!   ([`Pool::kick_for_leftover_work`]), since it may have found other work instead.

pub(crate) mod global;
pub(crate) mod idle;
pub(crate) mod mailbox;
pub(crate) mod queue;
pub(crate) mod wake;

use crate::task::Runnable;
use global::GlobalQueue;
use idle::Idle;
use mailbox::Mailbox;
use queue::RunQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

#[cfg(test)]
pub use mailbox::BATCH_SIZE;
pub use mailbox::Message;
pub use queue::CAPACITY;

/// Where a task's runnables are delivered.
pub(crate) enum Home {
    /// A pool: to the waking worker's queue or the pool's global queue. Weak, so that a leaked
    /// waker does not keep a finished runner's pool alive.
    Pool(Weak<Pool>),
    /// A dedicated worker's inbox.
    Dedicated(Arc<dyn Inbox>),
}

/// The single-task inbox of a dedicated worker.
pub(crate) trait Inbox: Send + Sync {
    /// Takes the runnable and wakes the worker.
    fn deliver(&self, runnable: Runnable);
}

struct Slot {
    queue: RunQueue,
    mailbox: Mailbox,
}

/// The shared scheduling state of a runner's pool workers.
pub struct Pool {
    slots: Box<[Slot]>,
    global: GlobalQueue,
    idle: Idle,
    closed: AtomicBool,
    global_queue_interval: u32,
}

impl Pool {
    pub(crate) fn new(workers: usize, global_queue_interval: u32) -> std::io::Result<Self> {
        let slots = (0..workers)
            .map(|_| {
                Ok(Slot {
                    queue: RunQueue::default(),
                    mailbox: Mailbox::new()?,
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self {
            slots: slots.into_boxed_slice(),
            global: GlobalQueue::default(),
            idle: Idle::default(),
            closed: AtomicBool::new(false),
            global_queue_interval,
        })
    }

    /// Number of pool workers, worker zero included.
    pub fn workers(&self) -> usize {
        self.slots.len()
    }

    /// Worker `index`'s run queue.
    pub fn queue(&self, index: usize) -> &RunQueue {
        &self.slots[index].queue
    }

    /// Worker `index`'s mailbox.
    pub fn mailbox(&self, index: usize) -> &Mailbox {
        &self.slots[index].mailbox
    }

    /// The idle set.
    pub fn idle(&self) -> &Idle {
        &self.idle
    }

    /// The global queue.
    pub(crate) fn global(&self) -> &GlobalQueue {
        &self.global
    }

    /// Every how many polls a busy worker takes from the global queue first.
    pub(crate) fn global_queue_interval(&self) -> u32 {
        self.global_queue_interval
    }

    /// Whether shutdown has closed the pool.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Delivers `runnable` through the global queue and wakes a parked worker. A closed queue
    /// discards it.
    pub(crate) fn push_global(&self, runnable: Runnable) {
        match self.global.push(runnable) {
            Ok(()) => self.kick_for_global(),
            Err(refused) => drop(refused),
        }
    }

    /// Delivers an overflow batch through the global queue. A closed queue discards it.
    pub(crate) fn push_overflow(&self, batch: Vec<Runnable>) {
        match self.global.push_batch(batch) {
            Ok(()) => self.kick_for_global(),
            Err(refused) => drop(refused),
        }
    }

    /// Claims a parked worker for the global queue while it holds more runnables than there
    /// are searching workers to take them.
    fn kick_for_global(&self) {
        self.claim_and_wake(|searching| self.global.len() > searching);
    }

    /// Claims a parked worker for a stealable run-queue backlog, unless a worker is searching
    /// already (it will find the backlog).
    pub(crate) fn kick_for_backlog(&self) {
        self.claim_and_wake(|searching| searching == 0);
    }

    /// Claims the lowest parked worker if `allow(search_count)`, and wakes it.
    fn claim_and_wake(&self, allow: impl Fn(usize) -> bool) {
        if let Some(index) = self.idle.claim_if(allow) {
            self.slots[index].mailbox.waker.wake();
        }
    }

    /// Replays the kicks a search count suppressed, for the last searcher to stop: a global
    /// queue with runnables, or a stealable run queue, claims a parked worker.
    pub(crate) fn kick_for_leftover_work(&self) {
        if !self.global.is_empty() {
            self.kick_for_global();
        } else if self.slots.iter().any(|slot| slot.queue.is_stealable()) {
            self.kick_for_backlog();
        }
    }

    /// Whether the pool is closed and every worker has left the idle set with its counts
    /// returned.
    #[cfg(test)]
    pub(crate) fn is_clean(&self) -> bool {
        self.is_closed() && self.idle.is_clear()
    }

    /// Closes the pool: the global queue refuses and discards, and every worker is woken to
    /// see it.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let discarded = self.global.close();
        drop(discarded);
        for slot in self.slots.iter() {
            slot.mailbox.waker.wake();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Every worker withdraws and returns its counts before it stops, unwinding included;
        // a pool dropped otherwise means a worker left the protocol half done.
        if !std::thread::panicking() {
            assert!(
                self.idle.is_clear(),
                "a pool dropped with a worker still idle or searching"
            );
        }
    }
}
