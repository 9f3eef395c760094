//! Test-only hooks at the points of a worker's turn and park protocol (listed in
//! `worker::turn`) and of the spawn and wake paths where a race can be decided, so racy interleavings are forced rather than
//! hoped for. Every hook is a thread-local or a global that costs one load when unarmed; none
//! exists outside `cfg(test)`.

use crate::pool::Pool;
use crate::sync::Mutex;
use crate::worker::RunnerState;
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// A fault injected into one runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The ring of pool worker `index` cannot be created.
    PoolStartup(usize),
    /// The ring of the next dedicated or blocking worker cannot be created.
    DedicatedStartup,
    /// The next dedicated or blocking thread cannot be launched.
    Launch,
}

/// Faults keyed by the runner's storage directory, so parallel tests never share them. Each
/// fires once.
static FAULTS: Mutex<Vec<(PathBuf, Fault)>> = Mutex::new(Vec::new());

/// Arms `fault` for the runner whose storage directory is `directory`.
pub(crate) fn inject(directory: &Path, fault: Fault) {
    FAULTS.lock().push((directory.to_path_buf(), fault));
}

fn take(shared: &RunnerState, fault: Fault) -> bool {
    let mut faults = FAULTS.lock();
    let directory = shared.config.storage_directory();
    match faults
        .iter()
        .position(|(dir, armed)| dir == directory && *armed == fault)
    {
        Some(index) => {
            faults.remove(index);
            true
        }
        None => false,
    }
}

/// The error text of injected startup failures.
pub(crate) const STARTUP_FAILURE: &str = "injected native worker initialization failure";

thread_local! {
    /// When set, reaching the idle path on this thread is a bug the test wants to see.
    pub(crate) static FORBID_PARK: Cell<bool> = const { Cell::new(false) };
    /// Runs on a dedicated worker's thread after its lease was released.
    pub(crate) static AFTER_RELEASE: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    /// Runs on the runner's thread between the pool's close and the tree's abort.
    pub(crate) static BEFORE_ABORT: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    /// Makes the next worker startup on this thread fail with this error text.
    pub(crate) static FAIL_STARTUP: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Called at the idle boundary, just before a worker publishes itself idle.
pub(crate) fn before_park() {
    if FORBID_PARK.with(Cell::get) {
        panic!("a worker reached the idle path while work remained");
    }
}

/// Called on a dedicated worker's thread after its lease is released.
pub(crate) fn after_release() {
    if let Some(hook) = AFTER_RELEASE.with(|hook| hook.borrow_mut().take()) {
        hook();
    }
}

/// Called on the runner's thread after the pool closed, before the supervision tree aborts.
pub(crate) fn before_abort() {
    if let Some(hook) = BEFORE_ABORT.with(|hook| hook.borrow_mut().take()) {
        hook();
    }
}

/// Called on every native worker's own thread before its ring is created: worker zero and
/// pool workers with their index, dedicated workers with `None`.
pub(crate) fn before_startup(shared: &RunnerState, worker: Option<usize>) -> std::io::Result<()> {
    if let Some(text) = FAIL_STARTUP.with(|fail| fail.borrow_mut().take()) {
        return Err(std::io::Error::other(text));
    }
    let fault = match worker {
        Some(index) => Fault::PoolStartup(index),
        None => Fault::DedicatedStartup,
    };
    if take(shared, fault) {
        return Err(std::io::Error::other(STARTUP_FAILURE));
    }
    Ok(())
}

/// Called before a dedicated or blocking thread is launched: whether the launch must fail.
pub(crate) fn launch_fails(shared: &RunnerState) -> bool {
    take(shared, Fault::Launch)
}

/// A point in a pool worker's park sequence where a test hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParkPoint {
    /// After a turn's service, messages and callbacks; reached on every turn.
    AfterMessages,
    /// After the last readiness check and the search of the other queues, before publishing
    /// idle. A worker whose search ran and found nothing still holds its count here (one whose
    /// search was refused a count, or that has no other worker to search, holds none).
    BeforeIdle,
    /// Published idle, last look done, just before the wait.
    BeforeWait,
    /// After the last look took a count to search a stealable backlog, before the search.
    BeforeParkSearch,
}

/// One-shot callbacks keyed by `K`, each run once by the first caller of [`OneShot::fire`]
/// with its key. Unarmed, `fire` costs one load; a callback runs with the list unlocked.
struct OneShot<K> {
    armed: AtomicBool,
    hooks: Mutex<Vec<(K, Hook)>>,
}

/// A callback armed in a [`OneShot`].
type Hook = Box<dyn FnOnce() + Send>;

impl<K: PartialEq> OneShot<K> {
    const fn new() -> Self {
        Self {
            armed: AtomicBool::new(false),
            hooks: Mutex::new(Vec::new()),
        }
    }

    fn arm(&self, key: K, hook: impl FnOnce() + Send + 'static) {
        self.hooks.lock().push((key, Box::new(hook)));
        self.armed.store(true, Ordering::Release);
    }

    fn fire(&self, key: K) {
        if !self.armed.load(Ordering::Acquire) {
            return;
        }
        let hook = {
            let mut hooks = self.hooks.lock();
            hooks
                .iter()
                .position(|(armed, _)| *armed == key)
                .map(|at| hooks.swap_remove(at).1)
        };
        if let Some(hook) = hook {
            hook();
        }
    }
}

/// Park hooks, keyed by the pool's address, the worker's index and the point.
static PARK_HOOKS: OneShot<(usize, usize, ParkPoint)> = OneShot::new();

/// Runs `hook` once, on worker `index` of `pool`, when it next reaches `point`. The hook runs
/// with no lock held and no borrow of the worker's state.
pub(crate) fn on_next_park(
    pool: &Pool,
    index: usize,
    point: ParkPoint,
    hook: impl FnOnce() + Send + 'static,
) {
    PARK_HOOKS.arm((std::ptr::from_ref(pool).addr(), index, point), hook);
}

/// Called by worker `index` of `pool` at `point`: runs the hook armed there, if any.
pub(crate) fn at_park(pool: &Pool, index: usize, point: ParkPoint) {
    PARK_HOOKS.fire((std::ptr::from_ref(pool).addr(), index, point));
}

/// Overflow hooks, keyed by the pool's address.
static OVERFLOW_HOOKS: OneShot<usize> = OneShot::new();

/// Runs `hook` once, when a run queue of `pool` next overflows: after the newest half was
/// split off, before the batch reaches the global queue.
pub(crate) fn on_next_overflow(pool: &Pool, hook: impl FnOnce() + Send + 'static) {
    OVERFLOW_HOOKS.arm(std::ptr::from_ref(pool).addr(), hook);
}

/// Called by the overflowing worker before it pushes the batch to the global queue.
pub(crate) fn before_overflow(pool: &Pool) {
    OVERFLOW_HOOKS.fire(std::ptr::from_ref(pool).addr());
}
