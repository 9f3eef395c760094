//! Failure routing: the cross-thread [`Panicker`] that carries the first failure to the root,
//! and the per-worker [`Panics`] accumulator that contains panics of code the runtime runs on a
//! user's behalf (destructors, wakers, callbacks).
//!
//! Invariants:
//! - The first failure wins; later payloads are forgotten, never dropped, because dropping a
//!   payload can itself panic.
//! - Task panics (`notify`) are only observed while the root runs: once the root has finished,
//!   `close_tasks` makes later notifications no-ops. Worker failures (`worker_failed`) are
//!   always recorded, because they mean the runtime itself misbehaved.
//! - A panic is printed once, where it happens, by the panic hook; carrying it anywhere else
//!   uses `resume_unwind`, which does not print.

use crate::sync::Mutex;
use std::any::Any;
use std::mem;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;

/// A panic payload.
pub(crate) type Payload = Box<dyn Any + Send>;

#[derive(Default)]
struct Channel {
    failure: Mutex<Option<Payload>>,
    /// Set with `failure`, read on every root poll without taking the lock.
    failed: AtomicBool,
    /// Set once the root has finished: task panics are no longer observed.
    tasks_closed: AtomicBool,
    /// Wakes the root so its interrupt check runs.
    root: Mutex<Option<Waker>>,
}

/// The failure channel to the root.
#[derive(Clone, Default)]
pub struct Panicker {
    channel: Arc<Channel>,
}

impl Panicker {
    /// Reports an uncaught task panic: it fails the runner if the root is still running.
    pub(crate) fn notify(&self, payload: Payload) {
        if self.channel.tasks_closed.load(Ordering::Acquire) {
            mem::forget(payload);
            return;
        }
        self.record(payload);
    }

    /// Reports a failure of a worker itself: it fails the runner whatever the root is doing.
    pub(crate) fn worker_failed(&self, payload: Payload) {
        self.record(payload);
    }

    fn record(&self, payload: Payload) {
        {
            let mut failure = self.channel.failure.lock();
            if failure.is_some() {
                drop(failure);
                mem::forget(payload);
                return;
            }
            *failure = Some(payload);
            self.channel.failed.store(true, Ordering::Release);
        }
        let root = self.channel.root.lock().clone();
        if let Some(root) = root {
            root.wake();
        }
    }

    /// Whether a failure is waiting (cheap; for the root's interrupt check).
    pub(crate) fn has_failure(&self) -> bool {
        self.channel.failed.load(Ordering::Acquire)
    }

    /// Takes the recorded failure.
    pub(crate) fn take(&self) -> Option<Payload> {
        let payload = self.channel.failure.lock().take();
        self.channel.failed.store(false, Ordering::Release);
        payload
    }

    /// Installs the waker that interrupts the root.
    pub(crate) fn set_root_waker(&self, waker: Option<Waker>) {
        *self.channel.root.lock() = waker;
    }

    /// The root finished: task panics are no longer observed.
    pub(crate) fn close_tasks(&self) {
        self.channel.tasks_closed.store(true, Ordering::Release);
    }
}

/// Panics collected on one worker while it runs callbacks on users' behalf.
#[derive(Default)]
pub struct Panics {
    first: Option<Payload>,
}

impl Panics {
    /// Runs `f`, containing a panic: the payload is dropped (and if that drop panics too, the
    /// second payload is leaked) and `None` is returned.
    pub(crate) fn contain<T>(f: impl FnOnce() -> T) -> Option<T> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(value) => Some(value),
            Err(payload) => {
                dispose(payload);
                None
            }
        }
    }

    /// Keeps `payload` if it is the first; forgets it otherwise.
    pub(crate) fn retain(&mut self, payload: Payload) {
        if self.first.is_none() {
            self.first = Some(payload);
        } else {
            mem::forget(payload);
        }
    }

    /// Hands over the first payload, if any.
    pub(crate) fn take(&mut self) -> Option<Payload> {
        self.first.take()
    }
}

impl Drop for Panics {
    fn drop(&mut self) {
        // An unclaimed payload may panic on drop; leaking it is the only safe disposal here.
        if let Some(payload) = self.first.take() {
            mem::forget(payload);
        }
    }
}

/// Drops a panic payload, leaking any payload its destructor panics with.
pub(crate) fn dispose(payload: Payload) {
    if let Err(secondary) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        mem::forget(secondary);
    }
}

/// The message of a panic payload, for assertions.
#[cfg(test)]
pub(crate) fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A payload that counts its drops and can panic when dropped.
    pub(crate) struct Bomb {
        pub(crate) drops: Arc<AtomicUsize>,
        pub(crate) explode: bool,
    }
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
            if self.explode {
                std::panic::panic_any(Bomb {
                    drops: self.drops.clone(),
                    explode: false,
                });
            }
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "forgets payloads on purpose, which Miri reports as leaks"
    )]
    fn contain_returns_values_and_drops_payloads_once() {
        assert_eq!(Panics::contain(|| 7), Some(7));
        let drops = Arc::new(AtomicUsize::new(0));
        let bomb = Bomb {
            drops: drops.clone(),
            explode: false,
        };
        assert_eq!(
            Panics::contain(move || std::panic::panic_any(bomb)),
            None::<()>
        );
        assert_eq!(drops.load(Ordering::SeqCst), 1);

        // A payload whose drop panics: its secondary payload is leaked, nothing escapes.
        let drops = Arc::new(AtomicUsize::new(0));
        let bomb = Bomb {
            drops: drops.clone(),
            explode: true,
        };
        assert_eq!(
            Panics::contain(move || std::panic::panic_any(bomb)),
            None::<()>
        );
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "the secondary payload is not dropped"
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "forgets payloads on purpose, which Miri reports as leaks"
    )]
    fn retain_keeps_the_first_and_forgets_the_rest() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut panics = Panics::default();
        panics.retain(Box::new("first"));
        panics.retain(Box::new(Bomb {
            drops: drops.clone(),
            explode: true,
        }));
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "later payloads are forgotten"
        );
        let first = panics.take().expect("the first payload is kept");
        assert_eq!(message(&*first), "first");
        assert!(panics.take().is_none());

        panics.retain(Box::new(Bomb {
            drops: drops.clone(),
            explode: true,
        }));
        drop(panics);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "an unclaimed payload is leaked"
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "forgets payloads on purpose, which Miri reports as leaks"
    )]
    fn the_first_failure_wins_and_task_panics_stop_counting_after_the_root() {
        let panicker = Panicker::default();
        panicker.notify(Box::new("first"));
        panicker.notify(Box::new("second"));
        assert!(panicker.has_failure());
        assert_eq!(message(&*panicker.take().unwrap()), "first");
        panicker.close_tasks();
        panicker.notify(Box::new("late task panic"));
        assert!(!panicker.has_failure());
        panicker.worker_failed(Box::new("worker"));
        assert_eq!(message(&*panicker.take().unwrap()), "worker");
    }
}
