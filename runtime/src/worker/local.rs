//! `Local`: the per-thread state of a native worker, reachable through a thread-local.
//!
//! Invariants:
//! - `CURRENT` is set while a worker runs on this thread and cleared when it is done; access
//!   goes through `try_with`, so code running in TLS destructors (after the key is gone) sees
//!   "no worker" and takes the foreign path instead of panicking.
//! - `state` is borrowed only for short, user-code-free sections (registering a timer,
//!   reaping completions). Wakes and waker drops that happen in those sections are pushed to
//!   `deferred` and run after the borrow ends.

use crate::driver::Driver;
use crate::panic::Panics;
use crate::pool::Pool;
use crate::time::Timers;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;

thread_local! {
    static CURRENT: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
}

/// Wakes and waker drops collected while the worker state was borrowed.
#[derive(Default)]
pub struct Deferred {
    /// Wakers to wake.
    pub wakes: Vec<Waker>,
    /// Wakers to drop (their drop may run user code).
    pub drops: Vec<Waker>,
}

impl Deferred {
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.wakes.is_empty() && self.drops.is_empty()
    }

    /// Runs every queued callback, each inside its own panic boundary: a panic does not skip
    /// the others, and the first payload is kept in `panics`.
    pub fn run(&mut self, panics: &mut Panics) {
        for waker in self.wakes.drain(..) {
            if let Err(payload) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || waker.wake()))
            {
                panics.retain(payload);
            }
        }
        for waker in self.drops.drain(..) {
            if let Err(payload) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(waker)))
            {
                panics.retain(payload);
            }
        }
    }
}

/// The borrowable part of a worker's state.
#[derive(Default)]
pub struct WorkerState {
    /// The worker's timer table.
    pub timers: Timers,
    /// Callbacks to run once the borrow ends.
    pub deferred: Deferred,
    /// The worker's ring; `None` once closed.
    pub driver: Option<Driver>,
}

impl WorkerState {
    /// The earliest moment the worker must look again on its own: a timer's deadline or an
    /// I/O operation's timeout.
    pub(crate) fn next_deadline(&mut self) -> Option<std::time::Instant> {
        let timer = self.timers.next_deadline();
        let io = self.driver.as_ref().and_then(Driver::next_deadline);
        match (timer, io) {
            (Some(timer), Some(io)) => Some(timer.min(io)),
            (timer, io) => timer.or(io),
        }
    }
}

/// Where a pool worker sits in its pool.
pub(crate) struct Seat {
    pub(crate) pool: Arc<Pool>,
    pub(crate) index: usize,
}

/// Where a worker is in its life; it only moves forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Running its loop.
    Running,
    /// The loop has ended: its run queue is no longer drained, so runnables woken or spawned
    /// on this thread go to the global queue.
    LeftPool,
    /// In its final cleanup: new registrations are refused (and, as after `LeftPool`,
    /// deliveries go to the global queue).
    Closing,
}

/// A native worker's thread-local state.
pub struct Local {
    id: u64,
    seat: Option<Seat>,
    phase: Cell<Phase>,
    /// Set when the worker's cleanup has drained its ring (see [`Local::ring_closed`]).
    closed: crate::driver::RingClosed,
    /// The borrowable part. Only the worker's own code borrows it; the ring and the timers
    /// are reached from elsewhere through [`Local::with_open_driver`] and
    /// [`Local::with_open_timers`], which borrow it for one call that runs no user code.
    pub(super) state: RefCell<WorkerState>,
}

impl Local {
    pub(crate) fn new(seat: Option<Seat>, driver: Driver) -> Rc<Self> {
        Self::with_driver(seat, Some(driver))
    }

    /// A worker without a ring, for a deterministic run: its operations on the ring are
    /// refused as on a closed ring, and its timers run on the run's virtual clock.
    #[cfg(feature = "deterministic")]
    pub(crate) fn without_ring(seat: Seat) -> Rc<Self> {
        Self::with_driver(Some(seat), None)
    }

    fn with_driver(seat: Option<Seat>, driver: Option<Driver>) -> Rc<Self> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Rc::new(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            seat,
            phase: Cell::new(Phase::Running),
            closed: Default::default(),
            state: RefCell::new(WorkerState {
                driver,
                ..WorkerState::default()
            }),
        })
    }

    /// The worker running on this thread, if any.
    #[cfg(test)]
    pub fn current() -> Option<Rc<Local>> {
        CURRENT
            .try_with(|current| current.borrow().clone())
            .ok()
            .flatten()
    }

    /// Runs `f` with the worker running on this thread; `None` if there is none (or the
    /// thread-local is already destroyed).
    pub(crate) fn with_current<R>(f: impl FnOnce(&Local) -> R) -> Option<R> {
        CURRENT
            .try_with(|current| {
                let current = current.borrow();
                current.as_deref().map(f)
            })
            .ok()
            .flatten()
    }

    /// Installs `local` as this thread's worker. Panics if one is installed already.
    pub(crate) fn install(local: Rc<Local>) {
        CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            assert!(
                current.is_none(),
                "a runtime worker already runs on this thread"
            );
            *current = Some(local);
        });
    }

    /// Removes this thread's worker.
    pub(crate) fn uninstall() -> Option<Rc<Local>> {
        CURRENT
            .try_with(|current| current.borrow_mut().take())
            .ok()
            .flatten()
    }

    /// A unique id of this worker.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The pool seat of a pool worker.
    pub(crate) fn seat(&self) -> Option<&Seat> {
        self.seat.as_ref()
    }

    /// Whether the worker is in its final cleanup: new registrations are refused.
    pub fn is_closing(&self) -> bool {
        self.phase.get() == Phase::Closing
    }

    pub(crate) fn set_closing(&self) {
        self.phase.set(Phase::Closing);
    }

    /// A flag set once this worker's cleanup has drained its ring: results of its
    /// registrations first observed after that are reported lost.
    pub(crate) fn ring_closed(&self) -> crate::driver::RingClosed {
        self.closed.clone()
    }

    /// Marks the worker's ring drained (see [`Local::ring_closed`]).
    pub(crate) fn set_closed(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Runs `f` with this worker's ring, unless the worker is closing or its ring is gone.
    /// `f` must not run user code (wakes, drops of foreign values): the state is borrowed.
    pub(crate) fn with_open_driver<R>(&self, f: impl FnOnce(&mut Driver) -> R) -> Option<R> {
        if self.is_closing() {
            return None;
        }
        self.state.borrow_mut().driver.as_mut().map(f)
    }

    /// Runs `f` with this worker's ring if its state is not borrowed right now (a drop
    /// inside the worker's own borrow finds it borrowed) and the ring is not gone, closing
    /// or not. `f` must not run user code: the state is borrowed.
    pub(crate) fn try_with_driver<R>(&self, f: impl FnOnce(&mut Driver) -> R) -> Option<R> {
        let mut state = self.state.try_borrow_mut().ok()?;
        state.driver.as_mut().map(f)
    }

    /// Runs `f` with this worker's timer table, unless the worker is closing or its timers
    /// are closed. `f` must not run user code: the state is borrowed.
    pub(crate) fn with_open_timers<R>(&self, f: impl FnOnce(&mut Timers) -> R) -> Option<R> {
        if self.is_closing() {
            return None;
        }
        let mut state = self.state.borrow_mut();
        if state.timers.is_closed() {
            return None;
        }
        Some(f(&mut state.timers))
    }

    /// Runs `f` with this worker's timer table if its state is not borrowed right now (a
    /// drop inside the worker's own borrow finds it borrowed), closed or not.
    pub(crate) fn try_with_timers<R>(&self, f: impl FnOnce(&mut Timers) -> R) -> Option<R> {
        let mut state = self.state.try_borrow_mut().ok()?;
        Some(f(&mut state.timers))
    }

    /// The borrowable state, for the crate's tests.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &RefCell<WorkerState> {
        &self.state
    }

    /// Whether this worker's loop has ended (see [`Local::leave_pool`]).
    pub(crate) fn has_left_pool(&self) -> bool {
        self.phase.get() >= Phase::LeftPool
    }

    /// Marks the end of this worker's loop: from now on its own queue is not drained, so
    /// deliveries on this thread (a root destructor's wakes and spawns) take the global queue,
    /// where another worker can run them.
    pub(crate) fn leave_pool(&self) {
        self.phase.set(self.phase.get().max(Phase::LeftPool));
    }
}

/// Runs every deferred callback of `local` until none are left, batch by batch (callbacks may
/// defer more). Returns whether anything ran.
pub(crate) fn run_deferred(local: &Local, panics: &mut Panics) -> bool {
    let mut ran = false;
    loop {
        if local.state.borrow().deferred.is_empty() {
            return ran;
        }
        let mut batch = std::mem::take(&mut local.state.borrow_mut().deferred);
        if batch.is_empty() {
            return ran;
        }
        ran = true;
        batch.run(panics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Bad(Arc<AtomicUsize>);
    impl Wake for Bad {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("callback failure");
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "forgets payloads on purpose, which Miri reports as leaks"
    )]
    fn a_failing_callback_does_not_skip_its_siblings() {
        let calls = Arc::new(AtomicUsize::new(0));
        let waker = Waker::from(Arc::new(Bad(calls.clone())));
        let mut deferred = Deferred {
            wakes: [waker.clone(), waker].into(),
            drops: Vec::new(),
        };
        let mut panics = Panics::default();
        deferred.run(&mut panics);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(deferred.is_empty());
        let first = panics.take().expect("the first panic is kept");
        assert_eq!(crate::panic::message(&*first), "callback failure");
        assert!(panics.take().is_none());
    }
}
