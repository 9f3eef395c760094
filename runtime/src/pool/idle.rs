//! The idle set and the search count, in one atomic word.
//!
//! The low [`MAX_WORKERS`] bits say which pool workers are published idle (parked or about to
//! be); the high bits count the workers entitled to look for work ("searching"). A worker
//! holds a count either because it took one to search, or because a claim took one on its
//! behalf when it woke it. Keeping both in one word lets a claim move a worker from "parked"
//! to "searching" in one step, so no observer ever sees a claimed worker that is neither.
//!
//! Invariants:
//! - A worker sets its own bit ([`Idle::publish`]) before its last look at the queues, and a
//!   pusher claims only after its push; both are read-modify-writes of this word, so one
//!   reads the other's write: either the pusher sees the bit and wakes the worker, or the
//!   publish synchronizes with the claim attempt and the last look sees the push.
//! - A bit is cleared exactly once: by a claimer, which then wakes the worker and leaves it
//!   the count it took, or by the worker itself ([`Idle::withdraw`]) when it resumes for
//!   another reason. A worker that finds its bit already cleared holds the claim's count.
//! - Publishing returns the publisher's count in the same step, so a worker never waits
//!   holding a count and never appears idle and searching at once.
//! - A worker returns every count it holds before it runs user code (a poll or a callback) and
//!   before it stops; after the pool stops, the word is zero.

use crate::sync::AtomicU64;
use std::sync::atomic::Ordering;

/// The most workers one idle word tracks; the rest of the word is the search count.
pub(crate) const MAX_WORKERS: usize = 56;
const ONE_SEARCHER: u64 = 1 << MAX_WORKERS;
const PARKED: u64 = ONE_SEARCHER - 1;

fn bit(index: usize) -> u64 {
    debug_assert!(index < MAX_WORKERS);
    1 << index
}

fn searchers(word: u64) -> usize {
    (word >> MAX_WORKERS) as usize
}

/// The set of parked pool workers and the number of searching ones.
pub struct Idle {
    word: AtomicU64,
}

impl Default for Idle {
    fn default() -> Self {
        Self {
            word: AtomicU64::new(0),
        }
    }
}

impl Idle {
    /// Marks worker `index` idle, returning the count it holds (if `holding`) in the same step.
    pub(crate) fn publish(&self, index: usize, holding: bool) {
        let returned = if holding { ONE_SEARCHER } else { 0 };
        let previous = self
            .word
            .fetch_add(bit(index).wrapping_sub(returned), Ordering::SeqCst);
        debug_assert!(previous & bit(index) == 0, "a worker published twice");
    }

    /// Takes worker `index` out of the set. Returns whether it was still in it; `false` means
    /// a claim took it out, and the worker now holds the count that claim took for it.
    pub(crate) fn withdraw(&self, index: usize) -> bool {
        self.word.fetch_and(!bit(index), Ordering::SeqCst) & bit(index) != 0
    }

    /// Claims the lowest parked worker if `allow(search_count)`: clears its bit and takes a
    /// count on its behalf, in one step. The caller must wake the returned worker.
    pub(crate) fn claim_if(&self, allow: impl Fn(usize) -> bool) -> Option<usize> {
        // A read-modify-write, not a load: the caller has just pushed work with a plain
        // `Release` store, and a load could be ordered before that store (a store buffer
        // allows it), missing a worker that publishes and then misses the push in its last
        // look. An RMW reads the latest word, and if that is older than a publish, the
        // publish reads ours and its last look sees the push.
        let mut word = self.word.fetch_add(0, Ordering::SeqCst);
        loop {
            if word & PARKED == 0 || !allow(searchers(word)) {
                return None;
            }
            let index = word.trailing_zeros() as usize;
            let claimed = (word & !bit(index)) + ONE_SEARCHER;
            match self
                .word
                .compare_exchange(word, claimed, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(index),
                Err(actual) => word = actual,
            }
        }
    }

    /// Takes a search count if `allow(search_count)`. Returns whether it did.
    pub(crate) fn take_count_if(&self, allow: impl Fn(usize) -> bool) -> bool {
        let mut word = self.word.load(Ordering::SeqCst);
        loop {
            if !allow(searchers(word)) {
                return false;
            }
            match self.word.compare_exchange(
                word,
                word + ONE_SEARCHER,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(actual) => word = actual,
            }
        }
    }

    /// Returns one search count. Returns how many remain held.
    pub(crate) fn return_count(&self) -> usize {
        let previous = self.word.fetch_sub(ONE_SEARCHER, Ordering::SeqCst);
        debug_assert!(searchers(previous) > 0, "a search count returned twice");
        searchers(previous) - 1
    }

    /// Number of workers holding a search count.
    pub fn search_count(&self) -> usize {
        searchers(self.word.load(Ordering::SeqCst))
    }

    /// Whether worker `index` is published idle.
    #[cfg(test)]
    pub fn is_idle(&self, index: usize) -> bool {
        self.word.load(Ordering::SeqCst) & bit(index) != 0
    }

    /// Whether no worker is published idle and no count is held.
    pub(crate) fn is_clear(&self) -> bool {
        self.word.load(Ordering::SeqCst) == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn claims_take_the_lowest_parked_worker_once_with_a_count() {
        let idle = Idle::default();
        idle.publish(3, false);
        idle.publish(1, false);
        assert!(idle.is_idle(1) && idle.is_idle(3) && !idle.is_idle(0));
        assert_eq!(idle.claim_if(|_| true), Some(1));
        assert_eq!(
            idle.search_count(),
            1,
            "the claim took a count for worker 1"
        );
        assert!(
            !idle.withdraw(1),
            "a claimed worker is no longer in the set"
        );
        assert_eq!(idle.claim_if(|searching| searching == 0), None);
        assert_eq!(idle.return_count(), 0);
        assert!(idle.withdraw(3));
        assert_eq!(idle.claim_if(|_| true), None);
        assert!(idle.is_clear());
    }

    #[test]
    fn publishing_returns_the_count_in_the_same_step() {
        let idle = Idle::default();
        assert!(idle.take_count_if(|searching| searching == 0));
        assert!(!idle.take_count_if(|searching| searching == 0));
        idle.publish(MAX_WORKERS - 1, true);
        assert_eq!(idle.search_count(), 0);
        assert!(idle.is_idle(MAX_WORKERS - 1));
        assert!(idle.withdraw(MAX_WORKERS - 1));
        assert!(idle.is_clear());
    }
}

#[cfg(all(test, loom))]
mod models {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    /// A worker parking races a pusher: either the worker's last look sees the work, or the
    /// pusher's claim takes the worker out of the set (and the worker inherits the count).
    /// Either way nobody is left parked with work pending, and every count comes back.
    #[test]
    fn a_push_racing_a_park_is_never_missed() {
        crate::sync::model(|| {
            let idle = Arc::new(Idle::default());
            let work = Arc::new(AtomicBool::new(false));
            let pusher = {
                let (idle, work) = (idle.clone(), work.clone());
                thread::spawn(move || {
                    // A queue publishes a push with a `Release` store of its tail.
                    work.store(true, Ordering::Release);
                    idle.claim_if(|searching| searching == 0)
                })
            };
            idle.publish(0, false);
            let saw_work = work.load(Ordering::Acquire);
            let claimed = pusher.join().unwrap();
            let still_published = idle.withdraw(0);
            assert!(saw_work || claimed == Some(0), "the push was missed");
            assert_eq!(claimed.is_some(), !still_published);
            if claimed.is_some() {
                idle.return_count();
            }
            assert!(idle.is_clear());
        });
    }

    /// Two claimers and a publishing worker: a worker is claimed at most once, and the counts
    /// match the claims.
    #[test]
    fn a_worker_is_claimed_at_most_once() {
        crate::sync::model(|| {
            let idle = Arc::new(Idle::default());
            idle.publish(1, false);
            let claimers: Vec<_> = (0..2)
                .map(|_| {
                    let idle = idle.clone();
                    thread::spawn(move || idle.claim_if(|_| true))
                })
                .collect();
            let withdrew = idle.withdraw(1);
            let claims: Vec<_> = claimers
                .into_iter()
                .filter_map(|claimer| claimer.join().unwrap())
                .collect();
            assert_eq!(claims.len() + usize::from(withdrew), 1);
            assert_eq!(idle.search_count(), claims.len());
        });
    }
}
