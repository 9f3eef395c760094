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
//!   its root flag, its run queue, the global queue and the other run queues (see
//!   [`crate::pool::idle`]).
//! - A worker holds a search count only while it looks for work: it returns the count before
//!   any user code runs (a callback, a task poll, a root poll), when it publishes itself idle,
//!   and, unwinding included, before it stops.
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
        push_local(
            &seat.pool,
            seat.index,
            runnable.take().expect("not taken yet"),
        );
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
    spinner: Spinner,
    /// Task polls since the timers were last checked.
    polls_since_timers: usize,
    /// The last turn polled no task.
    idle_turn: bool,
    /// This worker's bit is (or was, until a claim cleared it) set in the idle set.
    published: bool,
    /// This worker holds a search count: one it took to search, or one a claim took for it.
    searching: bool,
    /// Where the next search starts, so thieves spread over their victims.
    victim: usize,
}

impl Worker {
    pub(crate) fn new(local: Rc<Local>, shared: Arc<Shared>, index: usize) -> Self {
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
            published: false,
            searching: false,
            victim: index + 1,
        }
    }

    fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    /// Runs the loop with `root` until it completes. Worker zero only.
    ///
    /// However it ends, the worker leaves the idle set and returns its count before this
    /// returns or unwinds: the caller then destroys the root, whose destructor may push work
    /// and kick, and that kick must reach another worker, not this one.
    pub(crate) fn block_on<F: Future>(
        &mut self,
        root: Pin<&mut F>,
        wake: &Arc<RootWake>,
    ) -> F::Output {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.drive_root(root, wake)));
        self.leave_idle();
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

    /// Steps 1 to 4 of a turn: ring and timers, messages, deferred callbacks, and the
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
        #[cfg(test)]
        crate::hooks::at_park(
            self.pool(),
            self.index,
            crate::hooks::ParkPoint::AfterMessages,
        );
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
    fn pushable_share(&self) -> usize {
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

    /// Step 5 and 7 to 11: with nothing polled this turn, go round again if something is
    /// pending, otherwise search the other queues, and park if that finds nothing.
    fn idle(&mut self, root: Option<&Arc<RootWake>>) {
        if self.has_work(root) || self.deadline_passed() {
            // The next turn is the catch-up service; it returns the count before its callbacks.
            return;
        }
        if self.search() {
            return;
        }
        #[cfg(test)]
        crate::hooks::at_park(self.pool(), self.index, crate::hooks::ParkPoint::BeforeIdle);
        #[cfg(test)]
        crate::hooks::before_park();
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
            .borrow()
            .timers
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
        if !self.searching {
            if !self
                .pool()
                .idle()
                .take_count_if(|searching| 2 * searching < workers)
            {
                return false;
            }
            self.searching = true;
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

    /// Returns the search count this worker holds, if any. The last searcher to stop, with a
    /// backlog of its own, kicks a parked worker to share it, since kicks were suppressed
    /// while it searched.
    fn return_count(&mut self) {
        if !self.searching {
            return;
        }
        self.searching = false;
        let pool = self.pool();
        if pool.idle().return_count() == 0 && pool.queue(self.index).is_stealable() {
            pool.kick_for_backlog();
        }
    }

    /// Publishes this worker idle, returning its count in the same step.
    fn publish(&mut self) {
        self.pool().idle().publish(self.index, self.searching);
        self.searching = false;
        self.published = true;
    }

    /// Takes this worker out of the idle set. If a claim took it out first, the worker now
    /// holds the count the claim took for it.
    fn unpublish(&mut self) {
        if std::mem::take(&mut self.published) && !self.pool().idle().withdraw(self.index) {
            self.searching = true;
        }
    }

    /// Leaves the idle protocol entirely: unpublished, no count held.
    fn leave_idle(&mut self) {
        self.unpublish();
        if std::mem::take(&mut self.searching) {
            self.pool().idle().return_count();
        }
    }

    /// Steps 10 and 11: publish, take the last look, wait, and come back unpublished.
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
            if !self.searching {
                if !self.pool().idle().take_count_if(|searching| searching == 0) {
                    // Somebody started searching meanwhile; the backlog is theirs.
                    continue;
                }
                self.searching = true;
            }
            #[cfg(test)]
            crate::hooks::at_park(
                self.pool(),
                self.index,
                crate::hooks::ParkPoint::BeforeParkSearch,
            );
            if self.steal() {
                return;
            }
            // Found nothing: publish again, returning the count, and look once more.
        }
        #[cfg(test)]
        crate::hooks::at_park(self.pool(), self.index, crate::hooks::ParkPoint::BeforeWait);
        let waker = &self.shared.pool.mailbox(self.index).waker;
        if !self
            .spinner
            .spin(waker, self.local.state.borrow().timers.next_deadline())
        {
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

/// Pushes `runnable` onto worker `index`'s queue from that worker's own thread, handing an
/// overflow to the global queue and kicking a parked worker when the push makes the queue
/// stealable.
fn push_local(pool: &Pool, index: usize, runnable: Runnable) {
    // SAFETY: callers run on worker `index`'s thread, the queue's only producer.
    let len = unsafe {
        pool.queue(index).push_back(runnable, |batch| {
            #[cfg(test)]
            crate::hooks::before_overflow(pool);
            pool.push_overflow(batch);
        })
    };
    if len >= 2 {
        pool.kick_for_backlog();
    }
}

/// An idle worker's spin before it sleeps. The budget starts at `budget_us` and doubles (up to
/// `max_budget_us`) after each sleep that a wake ended within `quick_wake_us`, since a
/// spinning worker answers such a wake in well under a microsecond while waking a sleeping CPU
/// costs tens; a longer sleep resets it.
struct Spinner {
    budget: Duration,
    base: Duration,
    max: Duration,
    quick: Duration,
}

impl Spinner {
    fn new(config: &crate::config::SpinnerConfig) -> Self {
        let base = Duration::from_micros(config.budget_us);
        Self {
            budget: base,
            base,
            max: Duration::from_micros(config.max_budget_us),
            quick: Duration::from_micros(config.quick_wake_us),
        }
    }

    /// Spins until `waker` is signalled (consuming the signal; returns true) or the budget or
    /// `deadline` runs out (returns false).
    fn spin(&self, waker: &crate::pool::wake::WakeState, deadline: Option<Instant>) -> bool {
        if self.budget.is_zero() {
            return false;
        }
        let mut until = Instant::now() + self.budget;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        loop {
            if waker.is_signalled() {
                waker.consume();
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        }
    }

    /// Adapts the budget to how long the last sleep lasted.
    fn adapt(&mut self, slept: Duration) {
        self.budget = if slept < self.quick && !self.base.is_zero() {
            (self.budget * 2).min(self.max).max(self.base)
        } else {
            self.base
        };
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
