//! The idle set: one bit per pool worker that has published itself parked.
//!
//! Invariants:
//! - A worker sets its own bit (`publish`) before its last look at the queues, and a pusher
//!   clears a bit (`claim`) only after its push; both use `SeqCst`, so either the worker's
//!   last look sees the push or the pusher sees the bit and wakes the worker.
//! - A bit is cleared either by a claimer (who then wakes the worker) or by the worker itself
//!   (`withdraw`) when it resumes for another reason; a worker never runs a task with its bit
//!   set.

use std::sync::atomic::{AtomicU64, Ordering};

/// The set of parked pool workers.
#[derive(Default)]
pub struct Idle {
    parked: AtomicU64,
}

impl Idle {
    /// Marks worker `index` parked.
    pub(crate) fn publish(&self, index: usize) {
        self.parked.fetch_or(1 << index, Ordering::SeqCst);
    }

    /// Takes worker `index` out of the set. Returns whether it was still in it.
    pub(crate) fn withdraw(&self, index: usize) -> bool {
        self.parked.fetch_and(!(1 << index), Ordering::SeqCst) & (1 << index) != 0
    }

    /// Takes the lowest parked worker out of the set for the caller to wake.
    pub(crate) fn claim(&self) -> Option<usize> {
        let mut parked = self.parked.load(Ordering::SeqCst);
        while parked != 0 {
            let index = parked.trailing_zeros() as usize;
            match self.parked.compare_exchange_weak(
                parked,
                parked & !(1 << index),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(index),
                Err(actual) => parked = actual,
            }
        }
        None
    }

    /// Whether worker `index` is published idle.
    #[cfg(test)]
    pub fn is_idle(&self, index: usize) -> bool {
        self.parked.load(Ordering::SeqCst) & (1 << index) != 0
    }

    /// Whether no worker is published idle.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.parked.load(Ordering::SeqCst) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_take_the_lowest_parked_worker_once() {
        let idle = Idle::default();
        idle.publish(3);
        idle.publish(1);
        assert!(idle.is_idle(1) && idle.is_idle(3) && !idle.is_idle(0));
        assert_eq!(idle.claim(), Some(1));
        assert!(
            !idle.withdraw(1),
            "a claimed worker is no longer in the set"
        );
        assert!(idle.withdraw(3));
        assert_eq!(idle.claim(), None);
        assert!(idle.is_empty());
    }
}
