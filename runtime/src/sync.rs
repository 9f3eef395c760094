//! The atomics and cells of the lock-free pieces (run queue, idle set, wake state, the task
//! cell's state word and reference count), switched to `loom`'s checked versions under
//! `--cfg loom` so their models explore every interleaving the memory model allows.
//! Everything else in the crate uses `std` directly.
//!
//! It also holds the crate's [`Mutex`]: `parking_lot`'s, except under Miri, where it is `std`'s
//! behind the same interface. `parking_lot` parks a contended lock with a raw `futex`
//! syscall whose variadic arguments Miri's shim rejects as undefined behaviour
//! (`&AtomicI32` where it declares `*mut u32`), which stops a Miri run at the first contended
//! lock of a test whose own code is sound. Miri models `std`'s lock natively, so our code is
//! still checked against a real lock: what changes is only whose futex call parks the thread.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, fence};

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

#[cfg(not(miri))]
pub use parking_lot::{Mutex, MutexGuard};

/// `std`'s mutex with `parking_lot`'s interface (no poisoning: a panic while holding the lock
/// leaves the value as the panicking code left it, as `parking_lot` does), for Miri runs.
#[cfg(miri)]
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

#[cfg(miri)]
pub type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

#[cfg(miri)]
impl<T> Mutex<T> {
    pub const fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }

    pub fn into_inner(self) -> T {
        self.0
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(miri)]
impl<T: ?Sized> Mutex<T> {
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
