//! What a pool worker does when a turn found nothing to poll: go round again for pending
//! messages, callbacks or deadlines; search the other run queues and the global queue; then
//! park: publish itself idle, take a last look (searching a backlog nobody else searches),
//! spin within the [`Spinner`](super::idle::Spinner) budget and sleep on its futex or in its ring until a claim, a
//! message, a root wake, a timer or the pool's closing wakes it.
//!
//! Invariants (the protocol of [`crate::pool::idle`], seen from the worker):
//! - The worker's [`IdleRole`] is `Searching` exactly while it holds a search count, and
//!   `Published` while its idle bit is (or was, until a claim cleared it) set. Publishing
//!   returns the count in the same step, and a worker whose bit a claim cleared inherits the
//!   claim's count.
//! - A failed search keeps its count until the worker publishes, so kicks for backlogs are
//!   suppressed only while someone is actually looking.
//! - The last look runs after publishing: a push that missed the idle bit is seen there, and a
//!   push that saw it claims the worker.

use super::idle::IdleRole;
use super::{RootWake, Worker, wait};
use crate::driver::Driver;
use std::sync::Arc;
use std::time::Instant;

impl Worker {
    /// Steps 5 and 7 to 11 of a turn (listed in [`super::turn`]): with nothing polled this turn, go round again if something is
    /// pending, otherwise search the other queues, and park if that finds nothing.
    pub(super) fn idle(&mut self, root: Option<&Arc<RootWake>>) {
        if self.has_work(root) || self.deadline_passed() {
            // The next turn is the catch-up service; it returns the count before its callbacks.
            return;
        }
        if self.search() {
            return;
        }
        park_point!(self, BeforeIdle);
        test_hook!(before_park());
        self.park(root);
    }

    /// Whether something this worker must handle has arrived: a message, a root wake, a
    /// callback, local or global work, or the pool's closing.
    fn has_work(&self, root: Option<&Arc<RootWake>>) -> bool {
        let pool = self.pool();
        pool.is_closed()
            || pool.mailbox(self.index).has_pending()
            || root.is_some_and(|root| root.is_woken())
            || !pool.queue(self.index).is_empty()
            || !pool.global().is_empty()
            || !self.local.state.borrow().deferred.is_empty()
    }

    fn deadline_passed(&self) -> bool {
        self.local
            .state
            .borrow_mut()
            .next_deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
    }

    /// Looks for work in the other run queues and the global queue, holding a search count
    /// (taken here, unless a claim left one; at most half the workers search at once).
    /// Returns whether work was moved into the local queue. A failed search keeps the count:
    /// publishing returns it.
    fn search(&mut self) -> bool {
        let workers = self.pool().workers();
        if workers == 1 {
            return false;
        }
        debug_assert!(
            self.idle_role != IdleRole::Published,
            "a published worker searches"
        );
        if self.idle_role != IdleRole::Searching {
            if !self
                .pool()
                .idle()
                .take_count_if(|searching| 2 * searching < workers)
            {
                return false;
            }
            self.idle_role = IdleRole::Searching;
        }
        self.steal()
    }

    /// Steals half of another worker's backlog, or takes a share of the global queue, into
    /// the local queue. Returns whether anything moved.
    fn steal(&mut self) -> bool {
        let pool = &self.shared.pool;
        let workers = pool.workers();
        let mine = pool.queue(self.index);
        for offset in 0..workers {
            let victim = (self.victim + offset) % workers;
            if victim == self.index {
                continue;
            }
            // SAFETY: this thread owns `mine`, and `victim != self.index`.
            if unsafe { pool.queue(victim).steal_into(mine) } > 0 {
                self.victim = victim;
                return true;
            }
        }
        self.victim = self.victim.wrapping_add(1);
        let share = self.pushable_share();
        if share == 0 {
            return false;
        }
        pool.global().take_into(share, |runnable| {
            // SAFETY: as in `take_global`.
            unsafe { mine.push_back(runnable, |_| unreachable!("the share leaves room")) };
        }) > 0
    }

    /// Returns the search count this worker holds, if any. Kicks were suppressed while it
    /// was held, and this worker may stop without having looked at that work (it found other
    /// work, or it returns a claim's count to run callbacks), so the last searcher to stop
    /// replays them.
    pub(super) fn return_count(&mut self) {
        if self.idle_role != IdleRole::Searching {
            return;
        }
        self.idle_role = IdleRole::Working;
        let pool = self.pool();
        if pool.idle().return_count() == 0 {
            pool.kick_for_leftover_work();
        }
    }

    /// Publishes this worker idle, returning its count in the same step.
    fn publish(&mut self) {
        debug_assert!(
            self.idle_role != IdleRole::Published,
            "a worker published twice"
        );
        let searching = self.idle_role == IdleRole::Searching;
        self.pool().idle().publish(self.index, searching);
        self.idle_role = IdleRole::Published;
    }

    /// Takes this worker out of the idle set. If a claim took it out first, the worker now
    /// holds the count the claim took for it.
    fn unpublish(&mut self) {
        if self.idle_role != IdleRole::Published {
            return;
        }
        self.idle_role = if self.pool().idle().withdraw(self.index) {
            IdleRole::Working
        } else {
            IdleRole::Searching
        };
    }

    /// Leaves the idle protocol entirely: unpublished, no count held.
    pub(super) fn leave_idle(&mut self) {
        self.unpublish();
        self.return_count();
    }

    /// Steps 10 and 11 of a turn: publish, take the last look, wait, and come back unpublished.
    fn park(&mut self, root: Option<&Arc<RootWake>>) {
        loop {
            self.publish();
            if self.has_work(root) {
                self.unpublish();
                return;
            }
            if self.pool().idle().search_count() != 0 || !self.backlog_elsewhere() {
                break;
            }
            // A backlog nobody searches for (its kick may have found a count held): search it
            // ourselves, with a count of our own.
            self.unpublish();
            if self.idle_role != IdleRole::Searching {
                if !self.pool().idle().take_count_if(|searching| searching == 0) {
                    // Somebody started searching meanwhile; the backlog is theirs.
                    continue;
                }
                self.idle_role = IdleRole::Searching;
            }
            park_point!(self, BeforeParkSearch);
            if self.steal() {
                return;
            }
            // Found nothing: publish again, returning the count, and look once more.
        }
        park_point!(self, BeforeWait);
        let waker = &self.shared.pool.mailbox(self.index).waker;
        let deadline = self.local.state.borrow_mut().next_deadline();
        // A completion of this worker's ring ends the spin too: nobody signals it, and it
        // would otherwise wait for the budget to run out.
        let ring_ready = || {
            let mut state = self.local.state.borrow_mut();
            state.driver.as_mut().is_some_and(Driver::has_completions)
        };
        if !self.spinner.spin(waker, deadline, ring_ready) {
            let slept = Instant::now();
            wait(&self.local, waker);
            self.spinner.adapt(slept.elapsed());
        }
        self.unpublish();
    }

    /// Whether another worker's run queue is stealable.
    fn backlog_elsewhere(&self) -> bool {
        let pool = self.pool();
        (0..pool.workers()).any(|victim| victim != self.index && pool.queue(victim).is_stealable())
    }
}
