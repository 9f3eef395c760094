//! The atomics and cells of the lock-free pieces (run queue, idle set, wake state, the task
//! cell's state word and reference count), switched to `loom`'s checked versions under
//! `--cfg loom` so their models explore every interleaving the memory model allows.
//! Everything else in the crate uses `std` directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, fence};

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std`'s `UnsafeCell` with the closure-style accessors of `loom`'s, so the same code
/// compiles under both.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a pointer to the contents; the caller's protocol makes the access sound.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Runs a loom model with a preemption bound (5 unless `LOOM_MAX_PREEMPTIONS` says otherwise),
/// which keeps the models to minutes while still covering the interleavings that matter.
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(5);
    }
    builder.check(f);
}
