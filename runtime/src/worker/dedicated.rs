//! Dedicated and blocking workers: one thread and one ring for one task.
//!
//! A dedicated worker has no run queue and no place in the task set: it polls its one task
//! until it finishes, then cleans up (drains its ring, closes its timers, runs callbacks),
//! drops every reference to the runner and, last, releases its registry lease. Wakes it
//! issues for ordinary tasks go to the pool's global queue.

use super::registry::Active;
use super::{Local, close, run_deferred, service, wait};
use crate::driver::Driver;
use crate::panic::{Panics, Payload};
use crate::pool::wake::WakeState;
use crate::runner::Shared;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};

/// Everything a new dedicated thread takes with it. Fields drop in order: the future first,
/// the lease last, so the lease is still counted while the future's destructor runs.
pub struct Launch {
    pub(crate) future: Pin<Box<dyn Future<Output = ()> + Send>>,
    pub(crate) shared: Arc<Shared>,
    /// The registry lease.
    pub active: Active,
}

struct DedicatedWake {
    woken: AtomicBool,
    state: WakeState,
}

impl Wake for DedicatedWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.state.wake();
    }
}

/// Starts a thread for `launch`. On failure the payload is dropped (future first, then the
/// lease) and the caller panics with "failed to spawn thread: ...".
pub(crate) fn launch(launch: Launch, name: String) {
    #[cfg(test)]
    if crate::hooks::launch_fails(&launch.shared) {
        Panics::contain(move || drop(launch));
        panic!("failed to spawn thread: injected worker launch failure");
    }
    // The payload travels through a slot rather than the closure itself, so that after a
    // failed launch it is dropped here, with its destructor's panic contained, rather than
    // inside `spawn`.
    let slot = Arc::new(parking_lot::Mutex::new(Some(launch)));
    let spawned = std::thread::Builder::new().name(name).spawn({
        let slot = slot.clone();
        move || {
            let launch = slot.lock().take();
            drop(slot);
            if let Some(launch) = launch {
                run(launch);
            }
        }
    });
    if let Err(error) = spawned {
        let launch = slot.lock().take();
        Panics::contain(move || drop(launch));
        panic!("failed to spawn thread: {error}");
    }
}

fn report_startup_failure(shared: &Shared, error: std::io::Error) {
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

fn run(launch: Launch) {
    let Launch {
        future,
        shared,
        active,
    } = launch;
    #[cfg(test)]
    let wake_state = crate::hooks::before_startup(&shared, None).and_then(|()| WakeState::new());
    #[cfg(not(test))]
    let wake_state = WakeState::new();
    let driver = wake_state.and_then(|state| {
        let driver = Driver::new(
            shared.config.ring_config.size,
            state.eventfd().as_raw_fd(),
            shared.metrics.pending_operations.clone(),
        )?;
        Ok((state, driver))
    });
    let (state, driver) = match driver {
        Ok(parts) => parts,
        Err(error) => {
            report_startup_failure(&shared, error);
            Panics::contain(move || drop(future));
            drop(shared);
            drop(active);
            return;
        }
    };
    let local = Local::new(None, driver);
    Local::install(local.clone());
    let wake = Arc::new(DedicatedWake {
        woken: AtomicBool::new(true),
        state,
    });
    let mut future = Some(future);
    let outcome: Result<(), Payload> = catch_unwind(AssertUnwindSafe(|| {
        let waker = Waker::from(wake.clone());
        let mut cx = Context::from_waker(&waker);
        let mut panics = Panics::default();
        loop {
            service(&local);
            run_deferred(&local, &mut panics);
            if let Some(payload) = panics.take() {
                std::panic::resume_unwind(payload);
            }
            if wake.woken.swap(false, Ordering::AcqRel) {
                let task = future.as_mut().expect("present until it finishes");
                if task.as_mut().poll(&mut cx).is_ready() {
                    return;
                }
            } else {
                wait(&local, &wake.state);
            }
        }
    }));
    Panics::contain(move || drop(future));
    let failure = close(&local);
    drop(Local::uninstall());
    drop(local);
    for payload in outcome.err().into_iter().chain(failure) {
        shared.panicker.worker_failed(payload);
    }
    drop(shared);
    drop(active);
    #[cfg(test)]
    crate::hooks::after_release();
}
