//! The global queue: runnables from outside the pool, overflow batches, and spawns a busy
//! worker hands out.
//!
//! Invariants:
//! - Once closed it refuses every push; the refused runnables are handed back so the caller
//!   drops them outside the lock (dropping a runnable can free a cell, which drops its future).
//! - `len` mirrors the queue's length and is written under the lock with `SeqCst`, so a worker
//!   that publishes itself idle and then reads `len` cannot miss a push whose pusher reads the
//!   idle set after pushing (the two `SeqCst` pairs order each other).

use crate::sync::Mutex;
use crate::task::Runnable;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Default)]
struct Inner {
    queue: VecDeque<Runnable>,
    closed: bool,
}

/// The pool's shared, closable MPMC queue.
#[derive(Default)]
pub struct GlobalQueue {
    inner: Mutex<Inner>,
    len: AtomicUsize,
}

impl GlobalQueue {
    /// Appends one runnable, or hands it back if the queue is closed.
    pub(crate) fn push(&self, runnable: Runnable) -> Result<(), Runnable> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(runnable);
        }
        inner.queue.push_back(runnable);
        self.len.store(inner.queue.len(), Ordering::SeqCst);
        Ok(())
    }

    /// Appends a batch in one step, or hands it back if the queue is closed.
    pub(crate) fn push_batch(&self, batch: Vec<Runnable>) -> Result<(), Vec<Runnable>> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(batch);
        }
        inner.queue.extend(batch);
        self.len.store(inner.queue.len(), Ordering::SeqCst);
        Ok(())
    }

    /// Takes up to `max` runnables (at least one if any), oldest first: the first is returned,
    /// the rest are given to `rest` in order.
    pub(crate) fn take(&self, max: usize, mut rest: impl FnMut(Runnable)) -> Option<Runnable> {
        let mut first = None;
        self.take_into(max, |runnable| match first {
            None => first = Some(runnable),
            Some(_) => rest(runnable),
        });
        first
    }

    /// Takes up to `max` runnables (at least one if any), oldest first, handing each to `each`
    /// in order. Returns how many it took.
    pub(crate) fn take_into(&self, max: usize, each: impl FnMut(Runnable)) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut inner = self.inner.lock();
        let count = max.max(1).min(inner.queue.len());
        inner.queue.drain(..count).for_each(each);
        self.len.store(inner.queue.len(), Ordering::SeqCst);
        count
    }

    /// Number of queued runnables.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::SeqCst)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the queue and returns what it held, for the caller to drop.
    pub(crate) fn close(&self) -> VecDeque<Runnable> {
        let mut inner = self.inner.lock();
        inner.closed = true;
        self.len.store(0, Ordering::SeqCst);
        std::mem::take(&mut inner.queue)
    }
}
