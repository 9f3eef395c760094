//! A worker's run queue: bounded, FIFO, one producer (its worker), lock-free.
//!
//! The layout follows tokio's `multi_thread/queue.rs`: a ring buffer of `CAPACITY` slots, a
//! `tail` only the owner writes, and a `head` word packing two indices, `steal` and `real`,
//! so that a thief (added with the pool's stealing) can claim a range and copy it out while the
//! owner keeps pushing and popping.
//!
//! Invariants:
//! - Slots in `[real, tail)` hold initialized runnables owned by the queue; every other slot is
//!   uninitialized. Only the owner writes slots and `tail`; it writes a slot before it
//!   publishes the new `tail` with `Release`.
//! - `tail - steal <= CAPACITY`: the owner never overwrites a slot a thief may still read.
//! - Overflow takes the **newest** half back from the tail, and only when no steal is in
//!   progress (`steal == real`) and the queue is full. A thief claims at most half of what it
//!   saw, counted from `head`, so the two ranges never meet.

use crate::task::Runnable;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Slots in each worker's run queue.
pub const CAPACITY: usize = 256;
const MASK: u32 = CAPACITY as u32 - 1;

fn pack(steal: u32, real: u32) -> u64 {
    (u64::from(steal) << 32) | u64::from(real)
}

fn unpack(head: u64) -> (u32, u32) {
    ((head >> 32) as u32, head as u32)
}

/// A bounded single-producer run queue.
pub struct RunQueue {
    /// `(steal, real)`: the next slot a thief copies from and the next slot to pop.
    head: AtomicU64,
    /// One past the newest runnable. Written by the owner only.
    tail: AtomicU32,
    buffer: Box<[UnsafeCell<MaybeUninit<Runnable>>]>,
}

// SAFETY: slots are accessed only under the index protocol described in the module invariants;
// runnables are `Send`.
unsafe impl Sync for RunQueue {}
// SAFETY: as above.
unsafe impl Send for RunQueue {}

impl Default for RunQueue {
    fn default() -> Self {
        Self {
            head: AtomicU64::new(0),
            tail: AtomicU32::new(0),
            buffer: (0..CAPACITY)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
        }
    }
}

impl RunQueue {
    /// Number of runnables queued (a snapshot when read by anyone but the owner).
    pub fn len(&self) -> usize {
        let (_, real) = unpack(self.head.load(Ordering::Acquire));
        let tail = self.tail.load(Ordering::Acquire);
        tail.wrapping_sub(real) as usize
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a thief may take from this queue: a lone runnable is never stolen.
    #[cfg(test)]
    pub fn is_stealable(&self) -> bool {
        self.len() >= 2
    }

    /// Appends `runnable`. When the queue is full, the newest half (with `runnable`) is handed
    /// to `overflow` as one batch for the global queue.
    ///
    /// # Safety
    /// Only the queue's owning worker may call this (single producer).
    pub(crate) unsafe fn push_back(
        &self,
        runnable: Runnable,
        overflow: impl FnOnce(Vec<Runnable>),
    ) {
        let tail = self.tail.load(Ordering::Relaxed);
        let (steal, real) = unpack(self.head.load(Ordering::Acquire));
        if tail.wrapping_sub(steal) < CAPACITY as u32 {
            // SAFETY: `tail - steal < CAPACITY`, so this slot is outside every range a thief
            // or the owner reads; only the owner (us) writes it.
            unsafe { (*self.buffer[(tail & MASK) as usize].get()).write(runnable) };
            self.tail.store(tail.wrapping_add(1), Ordering::Release);
            return;
        }
        if steal != real {
            // A thief is copying out a range and will free room soon; the runnable goes
            // straight to the global queue instead.
            overflow(vec![runnable]);
            return;
        }
        // Full and no steal in progress: take the newest half back from the tail.
        let half = CAPACITY as u32 / 2;
        let start = tail.wrapping_sub(half);
        self.tail.store(start, Ordering::Release);
        // Re-check that no thief claimed into the range between our head load and the tail
        // store; thieves claim at most half of what they saw from `head`, so `real` can move
        // at most to `start`.
        let mut batch = Vec::with_capacity(half as usize + 1);
        for index in 0..half {
            let slot = start.wrapping_add(index) & MASK;
            // SAFETY: slots `[start, tail)` were initialized by us and are past every thief's
            // claim (module invariants); lowering `tail` gave them back to the owner.
            batch.push(unsafe { (*self.buffer[slot as usize].get()).assume_init_read() });
        }
        batch.push(runnable);
        overflow(batch);
    }

    /// Takes the oldest runnable.
    ///
    /// # Safety
    /// Only the queue's owning worker may call this.
    pub(crate) unsafe fn pop(&self) -> Option<Runnable> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let (steal, real) = unpack(head);
            let tail = self.tail.load(Ordering::Relaxed);
            if real == tail {
                return None;
            }
            let next_real = real.wrapping_add(1);
            // While a steal is in progress, `steal` stays where the thief started.
            let next = if steal == real {
                pack(next_real, next_real)
            } else {
                pack(steal, next_real)
            };
            match self
                .head
                .compare_exchange(head, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    // SAFETY: the CAS claimed slot `real` for us alone; it is initialized.
                    return Some(unsafe {
                        (*self.buffer[(real & MASK) as usize].get()).assume_init_read()
                    });
                }
                Err(actual) => head = actual,
            }
        }
    }
}

impl Drop for RunQueue {
    fn drop(&mut self) {
        // Exclusive access: release every queued runnable (their tasks are owned by the set).
        // SAFETY: `&mut self` makes us the owner, with no thief left.
        while let Some(runnable) = unsafe { self.pop() } {
            drop(runnable);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::cell::Task;
    use std::sync::Weak;

    fn runnable() -> Runnable {
        Task::new(async {}, Weak::new()).1
    }

    #[test]
    fn fifo_order_and_stealability() {
        let queue = RunQueue::default();
        let (first_task, first) = Task::new(async {}, Weak::new());
        // SAFETY: this test thread is the only producer.
        unsafe {
            queue.push_back(first, |_| panic!("no overflow"));
            assert!(!queue.is_stealable(), "a lone runnable is not stealable");
            queue.push_back(runnable(), |_| panic!("no overflow"));
            assert!(queue.is_stealable());
            let popped = queue.pop().unwrap();
            assert!(popped.task_ref().same(&first_task.0), "oldest first");
        }
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn overflow_hands_over_the_newest_half_with_the_new_runnable() {
        let queue = RunQueue::default();
        let mut tasks = Vec::new();
        // SAFETY: this test thread is the only producer.
        unsafe {
            for _ in 0..CAPACITY {
                let (task, runnable) = Task::new(async {}, Weak::new());
                tasks.push(task);
                queue.push_back(runnable, |_| panic!("not full yet"));
            }
            let mut batch = None;
            queue.push_back(runnable(), |overflowed| batch = Some(overflowed));
            let batch = batch.expect("the push into a full queue overflows");
            assert_eq!(batch.len(), CAPACITY / 2 + 1);
            assert!(batch[0].task_ref().same(&tasks[CAPACITY / 2].0));
            assert_eq!(queue.len(), CAPACITY / 2);
            let oldest = queue.pop().unwrap();
            assert!(oldest.task_ref().same(&tasks[0].0), "the oldest half stays");
        }
    }
}
