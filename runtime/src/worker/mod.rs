//! Native workers: the loop every worker runs ([`Worker`]), the per-thread state ([`Local`]),
//! where a woken or spawned runnable goes ([`schedule`]), and the registry of dedicated and
//! blocking workers ([`registry`]).
//!
//! Each turn of the loop: service the ring and the timers, apply mailbox messages, run
//! deferred callbacks, poll the root (worker zero only), poll up to [`TURN_BUDGET`] tasks, and
//! park only when none of those found anything.
//!
//! Invariants:
//! - User code (polls, wakes, destructors) never runs while `Local::state` is borrowed.
//! - A worker parks only after publishing itself idle and taking a last look at its mailbox,
//!   its root flag, its run queue and the global queue (see [`crate::pool::idle`]).
//! - A callback panic or a ring failure is a failure of the worker itself: it unwinds out of
//!   the loop and fails the runner, whatever `catch_panics` says.

pub(crate) mod dedicated;
pub(crate) mod local;
pub(crate) mod registry;

use crate::panic::Panics;
use crate::pool::{CAPACITY, Message, Pool};
use crate::runner::Shared;
use crate::task::{Home, Polled, Runnable};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

pub use local::Local;
pub(crate) use local::{Seat, run_deferred};

/// The most tasks a worker polls between two services of its ring and timers.
pub(crate) const TURN_BUDGET: usize = 61;

/// How a runnable arrives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// A wake: on a worker of the same pool it joins that worker's queue.
    Wake,
    /// A new task: it stays on the spawning worker only if that worker's queue is empty or the
    /// pool has one worker; otherwise it goes to the global queue for another worker.
    Spawn,
}

/// Delivers a runnable woken on this thread (see [`Arrival::Wake`]).
pub(crate) fn schedule(runnable: Runnable) {
    deliver(runnable, Arrival::Wake);
}

/// Delivers `runnable`: locally on a running worker of its own pool, through the global queue
/// from anywhere else (a foreign thread, a dedicated worker, another runtime's worker, a
/// closing worker).
pub(crate) fn deliver(runnable: Runnable, arrival: Arrival) {
    let pool = match runnable.home() {
        Home::Pool(pool) => pool.as_ptr(),
        Home::Dedicated(inbox) => {
            let inbox = inbox.clone();
            inbox.deliver(runnable);
            return;
        }
    };
    let mut runnable = Some(runnable);
    Local::with_current(|local| {
        let Some(seat) = local.seat() else { return };
        if local.is_closing()
            || seat.pool.is_closed()
            || !std::ptr::eq(pool, Arc::as_ptr(&seat.pool))
        {
            return;
        }
        let queue = seat.pool.queue(seat.index);
        if arrival == Arrival::Spawn && seat.pool.workers() > 1 && !queue.is_empty() {
            return;
        }
        let runnable = runnable.take().expect("not taken yet");
        // SAFETY: `seat` belongs to the worker installed on this thread, which is the only
        // producer of its queue.
        unsafe { queue.push_back(runnable, |batch| seat.pool.push_overflow(batch)) };
    });
    if let Some(runnable) = runnable
        && let Home::Pool(pool) = runnable.home()
        && let Some(pool) = pool.upgrade()
    {
        pool.push_global(runnable);
    }
}

/// The root's waker: a flag worker zero checks every turn, and a wake of worker zero when set
/// from another thread.
pub(crate) struct RootWake {
    woken: AtomicBool,
    pool: std::sync::Weak<Pool>,
}

impl RootWake {
    pub(crate) fn new(pool: &Arc<Pool>) -> Arc<Self> {
        Arc::new(Self {
            woken: AtomicBool::new(true),
            pool: Arc::downgrade(pool),
        })
    }

    fn take(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }

    fn is_woken(&self) -> bool {
        self.woken.load(Ordering::SeqCst)
    }

    fn set(&self) {
        self.woken.store(true, Ordering::SeqCst);
    }
}

impl Wake for RootWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        let on_worker_zero = Local::with_current(|local| {
            local.seat().is_some_and(|seat| {
                seat.index == 0 && std::ptr::eq(self.pool.as_ptr(), Arc::as_ptr(&seat.pool))
            })
        })
        .unwrap_or(false);
        if !on_worker_zero && let Some(pool) = self.pool.upgrade() {
            pool.mailbox(0).waker.wake();
        }
    }
}

/// A pool worker's loop state.
pub(crate) struct Worker {
    local: Rc<Local>,
    shared: Arc<Shared>,
    index: usize,
    /// Polls since the last look at the global queue.
    tick: u32,
    messages: Vec<Message>,
    panics: Panics,
    spin: Duration,
    /// Task polls since the timers were last checked.
    polls_since_timers: usize,
    /// The last turn polled no task.
    idle_turn: bool,
}

impl Worker {
    pub(crate) fn new(local: Rc<Local>, shared: Arc<Shared>, index: usize) -> Self {
        let spin = Duration::from_micros(shared.config.idle_spinner.budget_us);
        Self {
            local,
            shared,
            index,
            tick: 0,
            messages: Vec::new(),
            panics: Panics::default(),
            spin,
            polls_since_timers: 0,
            idle_turn: true,
        }
    }

    fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    /// Runs the loop with `root` until it completes. Worker zero only.
    pub(crate) fn block_on<F: Future>(
        &mut self,
        mut root: Pin<&mut F>,
        wake: &Arc<RootWake>,
    ) -> F::Output {
        let waker = Waker::from(wake.clone());
        let mut cx = Context::from_waker(&waker);
        self.shared.panicker.set_root_waker(Some(waker.clone()));
        loop {
            self.service_and_callbacks(Some(wake));
            // Tasks first: on the first turn this runs the service task, so a quiet worker
            // zero has an empty queue when the root first spawns, and keeps that spawn.
            let polled = self.run_tasks();
            if wake.take() {
                // The interrupt check: a failure published by a task or another worker ends the
                // root before any more of its code runs.
                if self.shared.panicker.has_failure()
                    && let Some(payload) = self.shared.panicker.take()
                {
                    std::panic::resume_unwind(payload);
                }
                if let Poll::Ready(output) = root.as_mut().poll(&mut cx) {
                    return output;
                }
            }
            if polled == 0 && !wake.is_woken() {
                self.park(Some(wake));
            }
        }
    }

    /// Runs the loop until the pool closes. Pool workers other than zero.
    pub(crate) fn run(&mut self) {
        while !self.pool().is_closed() {
            self.service_and_callbacks(None);
            if self.run_tasks() == 0 {
                self.park(None);
            }
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

    /// Steps 1 to 3 of a turn: ring and timers, messages, deferred callbacks.
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
        run_deferred(&self.local, &mut self.panics);
        if let Some(payload) = self.panics.take() {
            std::panic::resume_unwind(payload);
        }
    }

    /// Polls up to [`TURN_BUDGET`] tasks. Returns how many were polled.
    fn run_tasks(&mut self) -> usize {
        let polled = self.poll_tasks();
        self.polls_since_timers += polled;
        self.idle_turn = polled == 0;
        polled
    }

    fn poll_tasks(&mut self) -> usize {
        let mut polled = 0;
        while polled < TURN_BUDGET && !self.pool().is_closed() {
            let Some(runnable) = self.next_runnable() else {
                break;
            };
            polled += 1;
            match runnable.run() {
                Polled::Done(task) => self.shared.tasks.remove(&task),
                Polled::Requeue(runnable) => {
                    let pool = &self.shared.pool;
                    // SAFETY: this thread is the queue's worker.
                    unsafe {
                        pool.queue(self.index)
                            .push_back(runnable, |batch| pool.push_overflow(batch))
                    };
                }
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

    /// Takes from the global queue: exactly one when the local queue is at least half full,
    /// otherwise a fair share (its length over the number of workers), capped by the room
    /// left below half of the local queue.
    fn take_global(&mut self) -> Option<Runnable> {
        let pool = &self.shared.pool;
        let global = pool.global();
        if global.is_empty() {
            return None;
        }
        let queue = pool.queue(self.index);
        let queued = queue.len();
        let max = if queued >= CAPACITY / 2 {
            1
        } else {
            (global.len() / pool.workers())
                .max(1)
                .min(CAPACITY / 2 - queued)
        };
        global.take(max, |runnable| {
            // SAFETY: this thread is the queue's worker; the cap above leaves room, so this
            // never overflows.
            unsafe { queue.push_back(runnable, |batch| pool.push_overflow(batch)) }
        })
    }

    /// Parks until woken, a timer is due or (with ring operations in flight) one completes.
    fn park(&mut self, root: Option<&Arc<RootWake>>) {
        #[cfg(test)]
        crate::hooks::before_park();
        let pool = &self.shared.pool;
        let index = self.index;
        let mailbox = pool.mailbox(index);
        pool.idle().publish(index);
        let has_work = || {
            !pool.global().is_empty()
                || mailbox.has_pending()
                || root.is_some_and(|root| root.is_woken())
                || pool.is_closed()
                || !pool.queue(index).is_empty()
                || !self.local.state.borrow().deferred.is_empty()
        };
        if has_work() {
            pool.idle().withdraw(index);
            return;
        }
        if !self.spin.is_zero() {
            let until = Instant::now() + self.spin;
            while Instant::now() < until {
                if mailbox.waker.is_signalled() {
                    mailbox.waker.consume();
                    pool.idle().withdraw(index);
                    return;
                }
                std::hint::spin_loop();
            }
        }
        wait(&self.local, &mailbox.waker);
        pool.idle().withdraw(index);
    }
}

/// Reaps ring completions and fires due timers, deferring their wakers.
pub(crate) fn service(local: &Local, timers: bool) {
    let failure = {
        let mut guard = local.state.borrow_mut();
        let state = &mut *guard;
        let failure = state
            .driver
            .as_mut()
            .and_then(|driver| driver.service(&mut state.deferred.wakes).err());
        if timers && let Some(deadline) = state.timers.next_deadline() {
            let now = Instant::now();
            if deadline <= now {
                state.timers.fire_due(now, &mut state.deferred.wakes);
            }
        }
        failure
    };
    if let Some(error) = failure {
        panic!("io_uring driver service failed: {error}");
    }
}

/// Sleeps until `waker` is woken or the next timer is due: inside io_uring when operations are
/// in flight (a completion must end the wait), on the futex otherwise.
pub(crate) fn wait(local: &Local, waker: &crate::pool::wake::WakeState) {
    let mut state = local.state.borrow_mut();
    let timeout = state
        .timers
        .next_deadline()
        .map(|deadline| deadline.saturating_duration_since(Instant::now()));
    if timeout == Some(Duration::ZERO) {
        return;
    }
    match state.driver.as_mut() {
        Some(driver) if driver.in_flight() > 0 => {
            let result = driver.wait(
                timeout,
                || waker.begin_ring_wait(),
                || waker.end_ring_wait(),
            );
            if let Err(error) = result {
                drop(state);
                panic!("io_uring driver service failed: {error}");
            }
        }
        _ => {
            drop(state);
            waker.sleep(timeout);
        }
    }
}

/// A worker's final cleanup, with its `Local` still installed: refuse new registrations,
/// drain the ring (queued writes complete, reads are cancelled), close the timer table, and
/// run every callback that produced. The first callback panic is returned.
pub(crate) fn close(local: &Local) -> Option<crate::panic::Payload> {
    let mut panics = Panics::default();
    local.set_closing();
    let driver = local.state.borrow_mut().driver.take();
    if let Some(mut driver) = driver {
        let mut wakes = Vec::new();
        if let Err(payload) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.close(&mut wakes)))
        {
            panics.retain(payload);
        }
        local.state.borrow_mut().deferred.wakes.extend(wakes);
        drop(driver);
    }
    run_deferred(local, &mut panics);
    {
        let mut state = local.state.borrow_mut();
        let state = &mut *state;
        state.timers.close(&mut state.deferred.wakes);
    }
    run_deferred(local, &mut panics);
    panics.take()
}
