//! A task's state word and its transitions, each a named method that returns what the caller
//! must do next.
//!
//! ```text
//! IDLE (0) ──wake──▶ SCHEDULED ──start_poll──▶ RUNNING ──end_poll (Pending)──▶ IDLE
//!                                              │ wake ──▶ RUNNING|NOTIFIED ──end_poll──▶ SCHEDULED (requeued by the poller)
//!                                              │ complete (Ready) ─────────────────────▶ COMPLETE
//!                                              │ clear ──▶ RUNNING|CANCELLED ──end_poll──▶ COMPLETE (the poller drops the future)
//! IDLE or SCHEDULED ──clear──▶ COMPLETE (the clearer drops the future)
//! ```
//!
//! Invariants (the cell's safety rests on them):
//! - `SCHEDULED` is set exactly while one runnable exists. Only [`Wake::Schedule`] (a wake
//!   that moved the word out of `IDLE`) and [`EndPoll::Requeue`] (a poll that was notified)
//!   tell their caller to make or keep one.
//! - The future belongs to the thread whose transition returned [`StartPoll::Run`] until it
//!   calls [`State::end_poll`] or [`State::complete`], or to the thread whose
//!   [`State::clear`] returned [`Clear::DropFuture`], or whose [`State::end_poll`] returned
//!   [`EndPoll::Cancelled`]. These are exclusive.
//! - `COMPLETE` never clears: every later transition is a no-op that says so.
//!
//! Every transition is one compare-and-swap loop (or one store, for `complete`) with
//! acquire-release ordering: whoever takes the future over sees every write of the thread
//! that gave it up.

use crate::sync::AtomicUsize;
use std::sync::atomic::Ordering;

const SCHEDULED: usize = 1;
const RUNNING: usize = 2;
const NOTIFIED: usize = 4;
const COMPLETE: usize = 8;
const CANCELLED: usize = 16;

/// The state word of one task.
pub(super) struct State(AtomicUsize);

/// What [`State::start_poll`] found.
#[must_use]
pub(super) enum StartPoll {
    /// The word is now `RUNNING`: poll the future.
    Run,
    /// The task completed (it was cleared) since the runnable was made: release the runnable.
    Stale,
}

/// What [`State::end_poll`] found, after a poll that returned `Pending`.
#[must_use]
pub(super) enum EndPoll {
    /// The word is `IDLE`: the next wake schedules the task.
    Idle,
    /// The task was woken during the poll and is `SCHEDULED` again: the poller's runnable goes
    /// behind queued work.
    Requeue,
    /// The task was cleared during the poll and is now `COMPLETE`: the poller drops the future.
    Cancelled,
}

/// What [`State::wake`] did.
#[must_use]
pub(super) enum Wake {
    /// The word moved from `IDLE` to `SCHEDULED`: the caller makes the runnable and delivers
    /// it.
    Schedule,
    /// Nothing to do: already scheduled, already notified during a poll (or marked so now),
    /// or complete.
    Done,
}

/// What [`State::clear`] did.
#[must_use]
pub(super) enum Clear {
    /// The word moved to `COMPLETE` from a state without `RUNNING`: the caller owns the future
    /// and drops it.
    DropFuture,
    /// A poll is running; it is marked `CANCELLED` and its poller drops the future.
    LeftToPoller,
    /// The task had already completed.
    AlreadyComplete,
}

impl State {
    /// A new task's word: `SCHEDULED`, for the runnable it is born with.
    pub(super) fn scheduled() -> Self {
        State(AtomicUsize::new(SCHEDULED))
    }

    /// Moves the word from `SCHEDULED` to `RUNNING`, for the holder of the runnable.
    pub(super) fn start_poll(&self) -> StartPoll {
        let mut state = self.0.load(Ordering::Acquire);
        loop {
            if state & COMPLETE != 0 {
                return StartPoll::Stale;
            }
            debug_assert!(
                state & SCHEDULED != 0,
                "a runnable exists only while SCHEDULED"
            );
            match self.0.compare_exchange_weak(
                state,
                (state & !SCHEDULED) | RUNNING,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return StartPoll::Run,
                Err(actual) => state = actual,
            }
        }
    }

    /// Marks the task `COMPLETE` after a poll that returned `Ready`, by the poller (which has
    /// dropped the future). Overrides a wake or a clear that came during the poll.
    pub(super) fn complete(&self) {
        self.0.store(COMPLETE, Ordering::Release);
    }

    /// Leaves `RUNNING` after a poll that returned `Pending`.
    pub(super) fn end_poll(&self) -> EndPoll {
        let mut state = self.0.load(Ordering::Acquire);
        loop {
            let (next, outcome) = if state & CANCELLED != 0 {
                (COMPLETE, EndPoll::Cancelled)
            } else if state & NOTIFIED != 0 {
                (SCHEDULED, EndPoll::Requeue)
            } else {
                (0, EndPoll::Idle)
            };
            match self
                .0
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return outcome,
                Err(actual) => state = actual,
            }
        }
    }

    /// A wake: schedules an idle task, marks a running one `NOTIFIED`, ignores the rest.
    pub(super) fn wake(&self) -> Wake {
        let mut state = self.0.load(Ordering::Acquire);
        loop {
            let next = if state & (COMPLETE | SCHEDULED) != 0 {
                return Wake::Done;
            } else if state & RUNNING != 0 {
                if state & NOTIFIED != 0 {
                    return Wake::Done;
                }
                state | NOTIFIED
            } else {
                SCHEDULED
            };
            match self
                .0
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if next == SCHEDULED => return Wake::Schedule,
                Ok(_) => return Wake::Done,
                Err(actual) => state = actual,
            }
        }
    }

    /// Clears the task for teardown or refusal: completes an idle or queued one, marks a
    /// running one `CANCELLED`.
    pub(super) fn clear(&self) -> Clear {
        let mut state = self.0.load(Ordering::Acquire);
        loop {
            if state & COMPLETE != 0 {
                return Clear::AlreadyComplete;
            }
            let (next, outcome) = if state & RUNNING != 0 {
                (state | CANCELLED, Clear::LeftToPoller)
            } else {
                (COMPLETE, Clear::DropFuture)
            };
            match self
                .0
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return outcome,
                Err(actual) => state = actual,
            }
        }
    }

    /// Whether teardown or completion has cleared the task.
    #[cfg(test)]
    pub(super) fn is_cleared(&self) -> bool {
        self.0.load(Ordering::Acquire) & (COMPLETE | CANCELLED) != 0
    }
}
