//! The crate's synchronization, spelled one way: the atomics, cells, waker slot and lock of
//! the lock-free pieces (the mailbox's slot queue, an actor's life and the reply channel),
//! switched to `loom`'s checked versions under `--cfg actors_loom` (a name of its own, so the
//! runtime it depends on builds as usual) so their models explore every interleaving the
//! memory model allows, and the reader-writer lock of the tables that lookups share (the
//! registry's shards, a pool's members). Every lock in the crate comes from here.

#[cfg(actors_loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize};

#[cfg(not(actors_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize};

/// The reference count of the reply channel, whose last drop frees what the two sides
/// published: loom's in models, so that drop's ordering is checked too.
#[cfg(actors_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(actors_loom))]
pub(crate) use std::sync::Arc;

/// The crate's lock: the runtime's (`parking_lot`'s, `std`'s under Miri, whose shim rejects
/// `parking_lot`'s futex call; see the runtime's `sync`), or loom's in models (a lock loom
/// cannot see would block its single thread).
#[cfg(not(actors_loom))]
pub(crate) use runtime::__private::Mutex;

#[cfg(all(actors_loom, feature = "remote"))]
pub(crate) use loom::sync::MutexGuard;
/// The guard of [`Mutex`], named where a guard is handed along (remote's waiting table).
#[cfg(all(not(actors_loom), feature = "remote"))]
pub(crate) use runtime::__private::MutexGuard;

/// The lock of a process-wide static (the interned labels): the runtime's in every build,
/// loom's never, since a loom object lives within one model execution and a static outlives
/// them all.
pub(crate) type StaticMutex<T> = runtime::__private::Mutex<T>;

/// The reader-writer lock of tables read far more often than written. Not modelled: no
/// lock-free path reads what it guards.
pub(crate) use parking_lot::RwLock;

/// The consumer's waker slot: `futures`' `AtomicWaker`, or loom's in models, so the wakes that
/// go only through it (a stop request, an ordered stop, the last ref's drop, a close) are
/// checked with the rest.
#[cfg(not(actors_loom))]
pub(crate) use futures::task::AtomicWaker;

/// `loom`'s `AtomicWaker` behind the interface of `futures`' (`register` by reference,
/// `take`), so the same code compiles under both.
#[cfg(actors_loom)]
#[derive(Debug, Default)]
pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

#[cfg(actors_loom)]
impl AtomicWaker {
    pub(crate) fn new() -> Self {
        Self(loom::future::AtomicWaker::new())
    }

    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.0.register_by_ref(waker);
    }

    pub(crate) fn wake(&self) {
        self.0.wake();
    }

    pub(crate) fn take(&self) -> Option<std::task::Waker> {
        self.0.take_waker()
    }
}

#[cfg(actors_loom)]
#[derive(Debug, Default)]
pub(crate) struct Mutex<T: ?Sized>(loom::sync::Mutex<T>);

#[cfg(actors_loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }
}

#[cfg(actors_loom)]
impl<T: ?Sized> Mutex<T> {
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().expect("no model panics while holding a lock")
    }

    /// The guard if the lock is free now: what a `Debug` impl takes, which never waits.
    pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0
            .get_mut()
            .expect("no model panics while holding a lock")
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
