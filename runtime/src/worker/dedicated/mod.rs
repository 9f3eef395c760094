//! Dedicated and blocking workers: one thread and one ring for one task at a time.
//!
//! A dedicated worker has no run queue and no place in the task set: its task's runnables are
//! delivered to its [`TaskInbox`], and it polls them until the task finishes. Then it cleans up
//! (drains its ring, closes its timers, runs callbacks), drops every reference to the runner
//! and, last, releases its registry lease. Wakes it issues for ordinary tasks go to the pool's
//! global queue.
//!
//! A dedicated task's thread exits after that, so the task's thread-locals are destroyed
//! right away. A blocking task's thread instead parks in the registry, with its drained ring,
//! for a keep-alive of 10 s: the next blocking spawn runs there without creating a thread
//! or a ring, as tokio's blocking pool does. Each task still gets a fresh `Local` (timer
//! table, callbacks, identity), so nothing registered by one task is visible to the next;
//! only the thread's own thread-locals carry over. Shutdown tells parked threads to exit and
//! waits for them.

pub(crate) mod registry;

use super::{Local, close_keeping_ring, run_deferred, service, wait};
use crate::driver::Driver;
use crate::panic::{Panics, Payload};
use crate::pool::Inbox;
use crate::pool::wake::WakeState;
use crate::sync::Mutex;
use crate::task::{Polled, Runnable, Task};
use crate::worker::RunnerState;
use registry::Lease;
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

/// Where a dedicated task's runnable waits for its worker.
pub(crate) struct TaskInbox {
    runnable: Mutex<Option<Runnable>>,
    /// Set by the worker once it runs the task; a delivery before that is found by the
    /// worker's first look at `runnable`.
    state: OnceLock<Arc<WakeState>>,
}

impl TaskInbox {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            runnable: Mutex::new(None),
            state: OnceLock::new(),
        })
    }

    fn take(&self) -> Option<Runnable> {
        self.runnable.lock().take()
    }
}

impl Inbox for TaskInbox {
    fn deliver(&self, runnable: Runnable) {
        let previous = self.runnable.lock().replace(runnable);
        debug_assert!(previous.is_none(), "a task has at most one runnable");
        if let Some(state) = self.state.get() {
            state.wake();
        }
    }
}

/// Everything a new dedicated thread takes with it: the task (cleared, future first, if the
/// thread never runs it), its first runnable, its inbox, the runner, and the registry lease,
/// released last.
pub struct Launch {
    pub(crate) task: Task,
    pub(crate) runnable: Runnable,
    pub(crate) inbox: Arc<TaskInbox>,
    pub(crate) shared: Arc<RunnerState>,
    /// The registry lease.
    pub lease: Lease,
}

impl Launch {
    /// Disposes of a payload that never ran: the future is dropped (its destructor's panic
    /// contained) while the lease is still counted; the lease goes last.
    fn refuse(self) {
        let Launch {
            task,
            runnable,
            inbox,
            shared,
            lease,
        } = self;
        drop(runnable);
        Panics::contain(|| task.clear());
        drop((task, inbox, shared));
        drop(lease);
    }
}

/// Runs `launch` on a thread of its own: a parked blocking thread if `blocking` and one is
/// parked, a new thread otherwise. If no thread can be created, the payload is disposed of
/// (future first, then the lease) and the caller panics with "failed to spawn thread: ...".
pub(crate) fn launch(launch: Launch, blocking: bool) {
    #[cfg(test)]
    if crate::hooks::launch_fails(&launch.shared) {
        launch.refuse();
        panic!("failed to spawn thread: injected worker launch failure");
    }
    let (launch, name) = if blocking {
        match launch.lease.0.clone().hand_to_parked(launch) {
            Ok(()) => return,
            Err(launch) => (launch, "iouring-blocking"),
        }
    } else {
        (launch, "iouring-dedicated")
    };
    // The payload travels through a slot rather than the closure itself, so that after a
    // failed launch it is disposed of here, with its destructor's panic contained, rather
    // than inside `spawn`.
    let slot = Arc::new(Mutex::new(Some(launch)));
    let spawned = std::thread::Builder::new().name(name.into()).spawn({
        let slot = slot.clone();
        move || {
            let launch = slot.lock().take();
            drop(slot);
            if let Some(launch) = launch {
                thread_main(launch, blocking);
            }
        }
    });
    if let Err(error) = spawned {
        if let Some(launch) = slot.lock().take() {
            launch.refuse();
        }
        panic!("failed to spawn thread: {error}");
    }
}

fn report_startup_failure(shared: &RunnerState, error: std::io::Error) {
    let message = format!("failed to create native io_uring worker: {error}");
    // Raise it once so the panic hook prints it where it happened; then carry the payload on
    // without printing again.
    let payload = catch_unwind(|| panic!("{message}")).expect_err("panics");
    if shared.config.catch_panics {
        crate::panic::dispose(payload);
    } else {
        shared.panicker.notify(payload);
    }
}

fn start(shared: &RunnerState) -> std::io::Result<(WakeState, Driver)> {
    #[cfg(test)]
    crate::hooks::before_startup(shared, None)?;
    let state = WakeState::new()?;
    let driver = Driver::new(
        &shared.config.ring_config,
        state.eventfd().as_raw_fd(),
        shared.metrics.ring(),
        shared.config.wheel_layout(),
    )?;
    Ok((state, driver))
}

/// A dedicated or blocking thread: start the ring, run the task, and, on a blocking thread,
/// park for the next one while the ring is healthy.
fn thread_main(first: Launch, blocking: bool) {
    let registry = first.lease.0.clone();
    let (state, driver) = match start(&first.shared) {
        Ok(parts) => parts,
        Err(error) => {
            report_startup_failure(&first.shared, error);
            first.refuse();
            return;
        }
    };
    // The eventfd the ring waits on belongs to `state`, which outlives every ring below: each
    // is dropped inside the loop.
    let state = Arc::new(state);
    let (mut launch, mut ring) = (first, driver);
    loop {
        let Some(drained) = run(launch, &state, ring) else {
            break;
        };
        if !blocking {
            break;
        }
        match registry.park() {
            Some(next) => (launch, ring) = (next, drained),
            None => {
                drop(drained);
                registry.left();
                break;
            }
        }
    }
    drop(state);
}

/// Runs one task with `driver` to completion, cleans up, releases the lease, and hands back
/// the drained ring if it is fit for another task.
fn run(launch: Launch, state: &Arc<WakeState>, driver: Driver) -> Option<Driver> {
    let Launch {
        task,
        runnable,
        inbox,
        shared,
        lease,
    } = launch;
    let state = inbox.state.get_or_init(|| state.clone());
    let local = Local::new(None, driver);
    Local::install(local.clone());
    let outcome: Result<(), Payload> = catch_unwind(AssertUnwindSafe(|| {
        let mut panics = Panics::default();
        let mut next = Some(runnable);
        loop {
            service(&local, true);
            run_deferred(&local, &mut panics);
            if let Some(payload) = panics.take() {
                std::panic::resume_unwind(payload);
            }
            match next.take().or_else(|| inbox.take()) {
                Some(runnable) => match runnable.run() {
                    Polled::Done(_) | Polled::Stale => return,
                    Polled::Requeue(runnable) => next = Some(runnable),
                    Polled::Idle => {}
                },
                None => wait(&local, state),
            }
        }
    }));
    // After an unwind the future may still be there: drop it on this thread.
    Panics::contain(|| task.clear());
    drop(task);
    let (failure, ring) = close_keeping_ring(&local);
    drop(Local::uninstall());
    drop(local);
    drop(inbox.take());
    let healthy = outcome.is_ok() && failure.is_none();
    for payload in outcome.err().into_iter().chain(failure) {
        shared.panicker.worker_failed(payload);
    }
    drop(shared);
    drop(lease);
    test_hook!(after_release());
    ring.filter(|_| healthy)
}
