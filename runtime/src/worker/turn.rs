//! The turn of a native pool worker: service the ring and the timers, apply messages, run
//! deferred callbacks, poll the root (worker zero only) and up to [`TURN_BUDGET`] tasks,
//! taking from the global queue on every `global_queue_interval`-th poll. What a worker does
//! when a turn finds nothing is in [`super::park`].
//!
//! # A turn, step by step
//!
//! 1. **Service**: reap the ring's completions and fire due timers (their wakes run as
//!    callbacks).
//! 2. **Messages**: apply the mailbox's batches (root wakes, forwarded registrations).
//! 3. **Callbacks**: run the deferred wakes and waker drops. Every callback runs even if one
//!    panics; the first panic is kept.
//! 4. The `AfterMessages` test hook.
//! 5. **Go round again** if a message is pending or a timer deadline has passed: the next turn's
//!    service catches up with whatever was registered after step 1. A search count held is
//!    returned first.
//! 6. **Poll**: the root (worker zero only), then the local queue and, every
//!    `global_queue_interval`-th poll, the global queue. A claimed worker returns its inherited
//!    count before the first poll.
//! 7. With nothing polled: **search** the other queues (taking a count if allowed); work found
//!    goes back to a catch-up service and a poll.
//! 8. and 9. The `BeforeIdle` and `before_park` test hooks: the worker reaches them only with no
//!    callback and no runnable work left.
//! 10. **Publish** idle, then take the **last look** at the global queue and the stealable
//!     queues, withdrawing if there is work nobody else is searching for.
//! 11. **Wait**: spin for the spinner's budget, then sleep on the futex or in the ring, and come
//!     back unpublished, holding the count of the claim that woke it.
//!
//! Invariants:
//! - The worker returns any search count it holds before it runs user code: a callback, a
//!   task poll or a root poll (see [`crate::pool::idle`]).
//! - However the loop ends, unwinding included, the worker leaves the idle protocol
//!   (unpublished, no count held) before its caller destroys the root or anything else that
//!   can run user code.

use super::idle::{IdleRole, Spinner};
use super::{Local, RootWake, TURN_BUDGET, push_local, run_deferred, service};
use crate::panic::Panics;
use crate::pool::{CAPACITY, Message, Pool};
use crate::supervision::LeaveBatch;
use crate::task::{Polled, Runnable};
use crate::worker::RunnerState;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A pool worker's loop state.
pub(crate) struct Worker {
    pub(super) local: Rc<Local>,
    pub(super) shared: Arc<RunnerState>,
    pub(super) index: usize,
    /// Polls since the last look at the global queue.
    pub(super) tick: u32,
    pub(super) messages: Vec<Message>,
    pub(super) panics: Panics,
    pub(super) spinner: Spinner,
    /// Task polls since the timers were last checked.
    pub(super) polls_since_timers: usize,
    /// The last turn polled no task.
    pub(super) idle_turn: bool,
    /// Where this worker stands in the pool's idle protocol.
    pub(super) idle_role: IdleRole,
    /// Where the next search starts, so thieves spread over their victims.
    pub(super) victim: usize,
}

impl Worker {
    pub(crate) fn new(local: Rc<Local>, shared: Arc<RunnerState>, index: usize) -> Self {
        let spinner = Spinner::new(&shared.config.idle_spinner);
        Self {
            local,
            shared,
            index,
            tick: 0,
            messages: Vec::new(),
            panics: Panics::default(),
            spinner,
            polls_since_timers: 0,
            idle_turn: true,
            idle_role: IdleRole::Working,
            victim: index + 1,
        }
    }

    pub(super) fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    /// Runs the loop with `root` until it completes. Worker zero only.
    ///
    /// However it ends, the worker leaves the idle set, returns its count and leaves the pool
    /// before this returns or unwinds: the caller then destroys the root, whose destructor may
    /// wake or spawn tasks, and those must reach a worker that still polls (through the global
    /// queue and a claim), not this one's queue, which nobody drains any more.
    pub(crate) fn block_on<F: Future>(
        &mut self,
        root: Pin<&mut F>,
        wake: &Arc<RootWake>,
    ) -> F::Output {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.drive_root(root, wake)));
        self.leave_idle();
        self.local.leave_pool();
        outcome.unwrap_or_else(|payload| std::panic::resume_unwind(payload))
    }

    fn drive_root<F: Future>(&mut self, mut root: Pin<&mut F>, wake: &Arc<RootWake>) -> F::Output {
        let waker = Waker::from(wake.clone());
        let mut cx = Context::from_waker(&waker);
        self.shared.panicker.set_root_waker(Some(waker.clone()));
        loop {
            self.service_and_callbacks(Some(wake));
            // Tasks first: on the first turn this runs the service task, so a quiet worker
            // zero has an empty queue when the root first spawns, and keeps that spawn.
            let mut polled = self.run_tasks();
            if wake.take() {
                polled += 1;
                // The interrupt check: a failure published by a task or another worker ends the
                // root before any more of its code runs.
                if self.shared.panicker.has_failure()
                    && let Some(payload) = self.shared.panicker.take()
                {
                    std::panic::resume_unwind(payload);
                }
                self.return_count();
                if let Poll::Ready(output) = root.as_mut().poll(&mut cx) {
                    return output;
                }
            }
            if polled == 0 {
                self.idle(Some(wake));
            }
        }
    }

    /// Runs the loop until the pool closes. Pool workers other than zero. Leaves the idle set
    /// and returns its count however it ends, as [`Worker::block_on`] does.
    pub(crate) fn run(&mut self) {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while !self.pool().is_closed() {
                self.service_and_callbacks(None);
                if self.run_tasks() == 0 {
                    self.idle(None);
                }
            }
        }));
        self.leave_idle();
        self.local.leave_pool();
        if let Err(payload) = outcome {
            std::panic::resume_unwind(payload);
        }
        self.discard_queue();
    }

    /// Shutdown: what is left in this worker's queue is discarded; the task set drops the
    /// futures.
    pub(crate) fn discard_queue(&mut self) {
        // SAFETY: this thread is the queue's worker.
        while let Some(runnable) = unsafe { self.pool().queue(self.index).pop() } {
            drop(runnable);
        }
    }

    /// Steps 1 to 4 of a turn (the module's list): ring and timers, messages, deferred callbacks, and the
    /// `AfterMessages` point.
    fn service_and_callbacks(&mut self, root: Option<&Arc<RootWake>>) {
        // Timers are checked after a turn that found nothing to poll (the worker may be about
        // to park) and otherwise once per TURN_BUDGET polls: reading the clock every turn
        // would cost more than the timers it serves on a busy worker.
        let check_timers = self.idle_turn || self.polls_since_timers >= TURN_BUDGET;
        if check_timers {
            self.polls_since_timers = 0;
        }
        service(&self.local, check_timers);
        let mailbox = self.shared.pool.mailbox(self.index);
        if mailbox.has_pending() {
            mailbox.take(&mut self.messages);
            for message in self.messages.drain(..) {
                match message {
                    Message::WakeRoot => {
                        if let Some(root) = root {
                            root.set();
                        }
                    }
                }
            }
        }
        if !self.local.state.borrow().deferred.is_empty() {
            // Callbacks are user code: a count held across them could suppress the kick for
            // work they push, while they wait for that work to run.
            self.return_count();
            run_deferred(&self.local, &mut self.panics);
            if let Some(payload) = self.panics.take() {
                std::panic::resume_unwind(payload);
            }
        }
        park_point!(self, AfterMessages);
    }

    /// Polls up to [`TURN_BUDGET`] tasks. Returns how many were polled.
    fn run_tasks(&mut self) -> usize {
        let polled = self.poll_tasks();
        self.polls_since_timers += polled;
        self.idle_turn = polled == 0;
        polled
    }

    fn poll_tasks(&mut self) -> usize {
        // Tasks that end in this batch leave their parents when it ends, one lock a parent.
        // Opened at the first task: a turn that polls none pays nothing for it.
        let mut leaves = None;
        let mut polled = 0;
        while polled < TURN_BUDGET && !self.pool().is_closed() {
            let Some(runnable) = self.next_runnable() else {
                break;
            };
            leaves.get_or_insert_with(LeaveBatch::begin);
            polled += 1;
            self.return_count();
            match runnable.run() {
                Polled::Done(task) => self.shared.tasks.remove(&task),
                Polled::Requeue(runnable) => push_local(self.pool(), self.index, runnable),
                Polled::Idle | Polled::Stale => {}
            }
        }
        polled
    }

    /// The next runnable: from the global queue on every `global_queue_interval`-th poll,
    /// otherwise from the local queue, falling back to the global queue.
    fn next_runnable(&mut self) -> Option<Runnable> {
        self.tick = self.tick.wrapping_add(1);
        if self
            .tick
            .is_multiple_of(self.shared.pool.global_queue_interval())
            && let Some(runnable) = self.take_global()
        {
            return Some(runnable);
        }
        // SAFETY: this thread is the queue's worker.
        if let Some(runnable) = unsafe { self.shared.pool.queue(self.index).pop() } {
            return Some(runnable);
        }
        self.take_global()
    }

    /// How many runnables one take moves from the global queue: exactly one when the local
    /// queue is at least half full, otherwise a fair share (its length over the number of
    /// workers), capped by the room left below half of the local queue.
    fn global_share(&self) -> usize {
        let pool = self.pool();
        let queued = pool.queue(self.index).len();
        if queued >= CAPACITY / 2 {
            1
        } else {
            (pool.global().len() / pool.workers())
                .max(1)
                .min(CAPACITY / 2 - queued)
        }
    }

    /// How many runnables a take may push into the local queue: the share, capped by the
    /// queue's room (a thief copying out a claimed range still holds its slots). The room
    /// only grows until this worker pushes, so pushes under the global queue's lock never
    /// overflow (an overflow would take that lock again).
    pub(super) fn pushable_share(&self) -> usize {
        self.global_share()
            .min(self.pool().queue(self.index).room())
    }

    /// Takes a share from the global queue: the oldest is returned, the rest join the local
    /// queue.
    fn take_global(&mut self) -> Option<Runnable> {
        let pool = &self.shared.pool;
        if pool.global().is_empty() {
            return None;
        }
        let queue = pool.queue(self.index);
        // The first runnable is returned, not pushed: the rest must fit the room (see
        // `pushable_share`).
        let max = self.global_share().min(queue.room() + 1);
        let first = pool.global().take(max, |runnable| {
            // SAFETY: this thread is the queue's worker; the share leaves room, so this never
            // overflows (which would take the global queue's lock, held here).
            unsafe { queue.push_back(runnable, |_| unreachable!("the share leaves room")) };
        });
        if queue.is_stealable() {
            pool.kick_for_backlog();
        }
        first
    }
}
