//! The registry of dedicated and blocking workers: a count of leases that shutdown closes and
//! waits on.
//!
//! Invariants:
//! - A lease ([`Active`]) is taken before a dedicated task's factory runs and released only
//!   after its worker has finished all cleanup, so `wait` returning means no dedicated worker
//!   holds anything of the runner any more.
//! - `reserve` after `close` returns `None` and counts nothing; leases taken before `close`
//!   stay counted until dropped.
//! - The lock is never held while user code runs (factories, destructors).

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

/// The registry's counters.
#[derive(Debug, Default)]
pub struct State {
    /// Leases outstanding.
    pub active: usize,
    /// Whether new leases are refused.
    pub closed: bool,
}

/// The dedicated and blocking worker registry.
#[derive(Default)]
pub struct Workers {
    /// The counters (non-poisoning lock).
    pub state: Mutex<State>,
    released: Condvar,
}

/// A lease on the registry; released on drop.
pub struct Active(pub Arc<Workers>);

impl Workers {
    /// Takes a lease unless the registry is closed.
    pub fn reserve(self: &Arc<Self>) -> Option<Active> {
        let mut state = self.state.lock();
        if state.closed {
            return None;
        }
        state.active += 1;
        Some(Active(self.clone()))
    }

    /// Refuses every later lease.
    pub fn close(&self) {
        self.state.lock().closed = true;
    }

    /// Blocks until every lease is released.
    pub fn wait(&self) {
        let mut state = self.state.lock();
        while state.active > 0 {
            self.released.wait(&mut state);
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.active -= 1;
        if state.active == 0 {
            self.0.released.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lease_taken_before_close_stays_counted_until_released() {
        let workers = Arc::new(Workers::default());
        let lease = workers.reserve().expect("open registry");
        workers.close();
        assert_eq!(workers.state.lock().active, 1);
        assert!(workers.reserve().is_none());
        let waiter = {
            let workers = workers.clone();
            std::thread::spawn(move || workers.wait())
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "wait blocks while a lease is out");
        drop(lease);
        waiter.join().unwrap();
        assert_eq!(workers.state.lock().active, 0);
    }

    #[test]
    fn reserve_after_close_counts_nothing() {
        let workers = Arc::new(Workers::default());
        workers.close();
        assert!(workers.reserve().is_none());
        assert_eq!(workers.state.lock().active, 0);
        workers.wait();
    }
}
