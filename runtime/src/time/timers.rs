//! A worker's timer table: the sleeps registered on it, ordered by deadline.
//!
//! Each registration is an [`Entry`] shared with its [`Sleep`](super::Sleep): the table owns
//! the deadline order, the entry carries the state and the waker, so the sleep may be polled
//! from any thread without the registration moving.
//!
//! Invariants:
//! - An entry leaves `PENDING` exactly once: to `FIRED` when its deadline passes on its
//!   worker, to `CLOSED` when its worker closes the table. Either way its waker is handed to
//!   the caller to run as a deferred callback, never under the worker's borrow.
//! - A sleep dropped on its own worker removes its entry at once; dropped elsewhere it marks
//!   the entry `CANCELLED` and the table discards it when its deadline comes.

use futures::task::AtomicWaker;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Waker;
use std::time::Instant;

pub(crate) const PENDING: u8 = 0;
pub(crate) const FIRED: u8 = 1;
pub(crate) const CLOSED: u8 = 2;
pub(crate) const CANCELLED: u8 = 3;

/// One registered sleep.
#[derive(Default)]
pub(crate) struct Entry {
    pub(crate) state: AtomicU8,
    pub(crate) waker: AtomicWaker,
}

/// Where an entry sits in its table.
pub(crate) type Key = (Instant, u64);

/// The table of one worker.
#[derive(Default)]
pub struct Timers {
    entries: BTreeMap<Key, Arc<Entry>>,
    next_id: u64,
    closed: bool,
}

impl Timers {
    /// Registers `entry` to fire at `deadline`.
    pub(crate) fn insert(&mut self, deadline: Instant, entry: Arc<Entry>) -> Key {
        let key = (deadline, self.next_id);
        self.next_id += 1;
        self.entries.insert(key, entry);
        key
    }

    /// Registers a timer that is already due and wakes `waker` when the worker services it.
    #[cfg(test)]
    pub fn insert_due(&mut self, waker: Waker) {
        let entry = Arc::new(Entry::default());
        entry.waker.register(&waker);
        self.insert(Instant::now(), entry);
    }

    /// Forgets the entry at `key` (its sleep was dropped on this worker).
    pub(crate) fn remove(&mut self, key: &Key) {
        self.entries.remove(key);
    }

    /// The earliest deadline, if any timer is registered.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.keys().next().map(|(deadline, _)| *deadline)
    }

    /// Whether the table has been closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Fires every timer due at `now`, pushing their wakers to `wakes`.
    pub(crate) fn fire_due(&mut self, now: Instant, wakes: &mut Vec<Waker>) {
        while let Some(entry) = self.entries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let entry = entry.remove();
            if entry
                .state
                .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                wakes.extend(entry.waker.take());
            }
        }
    }

    /// Closes the table: every pending timer is marked closed and its waker handed to `wakes`.
    pub(crate) fn close(&mut self, wakes: &mut Vec<Waker>) {
        self.closed = true;
        for (_, entry) in std::mem::take(&mut self.entries) {
            if entry
                .state
                .compare_exchange(PENDING, CLOSED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                wakes.extend(entry.waker.take());
            }
        }
    }

    /// Number of registered timers.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn due_timers_fire_in_order_and_later_ones_wait() {
        let mut timers = Timers::default();
        let now = Instant::now();
        let soon = Arc::new(Entry::default());
        let later = Arc::new(Entry::default());
        timers.insert(now + Duration::from_secs(60), later.clone());
        timers.insert(now, soon.clone());
        assert_eq!(timers.next_deadline(), Some(now));
        let mut wakes = Vec::new();
        timers.fire_due(now, &mut wakes);
        assert_eq!(soon.state.load(Ordering::Acquire), FIRED);
        assert_eq!(later.state.load(Ordering::Acquire), PENDING);
        assert_eq!(timers.len(), 1);

        timers.insert_due(std::task::Waker::noop().clone());
        timers.fire_due(Instant::now(), &mut wakes);
        assert_eq!(
            wakes.len(),
            1,
            "the due timer fired with the waker it was given"
        );

        timers.close(&mut wakes);
        assert_eq!(later.state.load(Ordering::Acquire), CLOSED);
        assert!(timers.is_closed() && timers.next_deadline().is_none());
    }
}
