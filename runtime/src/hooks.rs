//! Test-only hooks at the points SPEC §4 names, so racy interleavings are forced rather than
//! hoped for. Every hook is a thread-local or a global that costs one load when unarmed; none
//! exists outside `cfg(test)`.

use std::cell::{Cell, RefCell};

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

/// Called on every native worker's own thread before its ring is created.
pub(crate) fn before_startup() -> std::io::Result<()> {
    match FAIL_STARTUP.with(|fail| fail.borrow_mut().take()) {
        Some(text) => Err(std::io::Error::other(text)),
        None => Ok(()),
    }
}
