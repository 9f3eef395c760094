//! Native workers: the loop every pool worker runs ([`Worker`]: a turn in `turn`, the idle
//! path in `park`), the per-thread state ([`Local`]), where a woken or spawned runnable goes
//! ([`deliver`]), the futures that register on the current worker's ring and timers
//! ([`Operation`], [`Sleep`]), the dedicated and blocking workers with their registry
//! ([`dedicated`]), and the state all workers and contexts of one runner share
//! ([`RunnerState`], built by the runner above).
//!
//! Each turn of the loop: service the ring and the timers, apply mailbox messages, run
//! deferred callbacks, poll the root (worker zero only), poll up to [`TURN_BUDGET`] tasks, and
//! go idle only when none of those found anything.
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
mod idle;
pub(crate) mod local;
pub(crate) mod operation;
mod park;
#[cfg(feature = "deterministic")]
pub(crate) mod simulated;
pub(crate) mod sleep;
mod turn;

use crate::config::Config;
use crate::extensions::Extensions;
use crate::metrics::RuntimeMetrics;
use crate::panic::{Panicker, Panics};
use crate::pool::{Home, Pool};
use crate::stop::Stopper;
use crate::supervision::TaskNode;
use crate::task::{Runnable, Tasks};
use dedicated::registry::ThreadRegistry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Wake;
use std::time::Duration;

pub use local::Local;
pub(crate) use local::{Seat, run_deferred};
pub(crate) use operation::Operation;
pub use sleep::Sleep;
pub(crate) use turn::Worker;

/// What every worker and context of a runner shares: made by the runner at start, freed when
/// the last holder lets go (the runner releases its own at the end of its shutdown).
pub struct RunnerState {
    pub(crate) config: Config,
    pub(crate) pool: Arc<Pool>,
    pub(crate) workers: Arc<ThreadRegistry>,
    pub(crate) tasks: Tasks,
    pub(crate) panicker: Panicker,
    pub(crate) metrics: RuntimeMetrics,
    pub(crate) stopper: Stopper,
    /// Values other crates of the project keep per runtime (see `Context::extension`).
    pub(crate) extensions: Extensions,
    /// The deterministic run this runner is, if it is one: its spawns stay on its one thread
    /// and its network and storage are simulated.
    #[cfg(feature = "deterministic")]
    pub(crate) simulation: Option<Arc<crate::simulation::Simulation>>,
}

/// The most tasks a worker polls between two services of its ring and timers.
pub(crate) const TURN_BUDGET: usize = 61;

/// Delivers `runnable` to its task's home: locally on a running worker of its own pool,
/// through the global queue from anywhere else (a foreign thread, a dedicated worker, another
/// runtime's worker, a closing worker), or to its dedicated worker's inbox.
///
/// Spawns and wakes alike go to the local queue, as tokio's do: a burst of spawns is handed
/// to other workers by stealing, half a queue at a time, where a global queue would wake a
/// worker for every few. The seed's placement comment (a busy worker queues its spawns
/// globally) is kept in effect by the queue's kept item: a runnable arriving at an empty queue
/// is kept apart and never stolen (see [`crate::pool::queue`] and `runtime/TESTING.md`).
///
/// The runnable's task is owned by a [`TaskNode`] of label `S` (see [`crate::task::Owner`]).
pub(crate) fn deliver<S: 'static>(runnable: Runnable) {
    let pool = match home::<S>(&runnable) {
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
            || local.has_left_pool()
            || seat.pool.is_closed()
            || !std::ptr::eq(pool, Arc::as_ptr(&seat.pool))
        {
            return;
        }
        push_local(
            &seat.pool,
            seat.index,
            runnable.take().expect("not taken yet"),
        );
    });
    if let Some(runnable) = runnable
        && let Home::Pool(pool) = home::<S>(&runnable)
        && let Some(pool) = pool.upgrade()
    {
        pool.push_global(runnable);
    }
}

/// Where `runnable`'s task is delivered. The borrow ends before the runnable is passed on: the
/// runnable's count is what keeps the cell, and the home inside it, alive.
fn home<S: 'static>(runnable: &Runnable) -> &Home {
    &runnable.owner::<TaskNode<S>>().home
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

/// Pushes `runnable` onto worker `index`'s queue from that worker's own thread, handing an
/// overflow to the global queue and kicking a parked worker when the push makes the queue
/// stealable.
#[inline]
fn push_local(pool: &Pool, index: usize, runnable: Runnable) {
    // SAFETY: callers run on worker `index`'s thread, the queue's only producer.
    let len = unsafe {
        pool.queue(index).push_back(runnable, |batch| {
            test_hook!(before_overflow(pool));
            pool.push_overflow(batch);
        })
    };
    if len >= 2 {
        pool.kick_for_backlog();
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
        if timers && let Some(deadline) = state.next_deadline() {
            let now = crate::time::clock::now();
            if deadline <= now {
                state.timers.fire_due(now, &mut state.deferred.wakes);
                if let Some(driver) = state.driver.as_mut() {
                    driver.expire(now);
                }
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
        .next_deadline()
        .map(|deadline| deadline.saturating_duration_since(crate::time::clock::now()));
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
    let (failure, ring) = close_keeping_ring(local);
    drop(ring);
    failure
}

/// [`close`], handing back the drained ring for another task's worker on this thread. The
/// ring is `None` if draining it failed (the failure is returned): it is not reused then.
pub(crate) fn close_keeping_ring(
    local: &Local,
) -> (Option<crate::panic::Payload>, Option<crate::driver::Driver>) {
    let mut panics = Panics::default();
    local.set_closing();
    let mut driver = local.state.borrow_mut().driver.take();
    if let Some(ring) = &mut driver {
        let mut wakes = Vec::new();
        if let Err(payload) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.close(&mut wakes)))
        {
            panics.retain(payload);
            driver = None;
        }
        local.state.borrow_mut().deferred.wakes.extend(wakes);
    }
    local.set_closed();
    run_deferred(local, &mut panics);
    {
        let mut state = local.state.borrow_mut();
        let state = &mut *state;
        state.timers.close(&mut state.deferred.wakes);
    }
    run_deferred(local, &mut panics);
    (panics.take(), driver)
}
