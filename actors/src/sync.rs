//! The atomics, cells and locks of the lock-free pieces (the mailbox's slot queue, an actor's
//! life and the reply channel), switched to `loom`'s checked versions under `--cfg actors_loom` (a name of its own, so the runtime it depends on builds as usual) so their models explore
//! every interleaving the memory model allows. Everything else in the crate uses `std`.

#[cfg(actors_loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicUsize, fence};

#[cfg(not(actors_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicUsize, fence};

/// The lock of an actor's life: the runtime's (`parking_lot`'s, `std`'s under Miri), or loom's in models (a lock loom cannot see
/// would block its single thread).
#[cfg(not(actors_loom))]
pub(crate) use runtime::__private::Mutex;

#[cfg(actors_loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(actors_loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .expect("no model panics while holding a life's lock")
    }
}

#[cfg(actors_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std`'s `UnsafeCell` with the closure-style accessors of `loom`'s, so the same code
/// compiles under both.
#[cfg(not(actors_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(actors_loom))]
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

/// Runs a loom model with a preemption bound (4 unless `LOOM_MAX_PREEMPTIONS` says otherwise),
/// which keeps the models to minutes while still covering the interleavings that matter.
#[cfg(all(test, actors_loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(4);
    }
    builder.check(f);
}
