//! A worker's timer table: the sleeps registered on it, ordered by deadline.
//!
//! Each registration is an [`Entry`] shared with its `Sleep` (`worker::sleep`): the table owns
//! the deadline order, the entry carries the state and the waker, so the sleep may be polled
//! from any thread without the registration moving.
//!
//! Invariants:
//! - An entry leaves `PENDING` exactly once: to `FIRED` when its deadline passes on its
//!   worker, to `CLOSED` when its worker closes the table. Either way its waker is handed to
//!   the caller to run as a deferred callback, never under the worker's borrow.
//! - A sleep dropped on its own worker removes its entry at once; dropped elsewhere (or while
//!   its worker's state is borrowed) it marks the entry `CANCELLED` and counts it in the
//!   table's shared [`Cancellations`]. The owner never waits for a cancelled entry: the
//!   earliest deadline it reports skips (and discards) cancelled entries at the front, and an
//!   insert sweeps the whole table once the cancelled entries could be more than half of it,
//!   so the table holds at most about twice the live sleeps plus the cancellations since the
//!   last sweep.

use futures::task::AtomicWaker;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
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

impl Entry {
    /// Cancels the entry from a thread that cannot reach its table: marks it and counts it
    /// in the table's `cancellations`, for the owner to sweep. A fired or closed entry stays
    /// as it is.
    pub(crate) fn cancel(&self, cancellations: &Cancellations) {
        if self
            .state
            .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // Relaxed: the count only paces sweeps; the state word is what a sweep reads.
            cancellations.0.fetch_add(1, Ordering::Relaxed);
            // The waker goes now, on this thread: nothing will wake it, and dropping it later
            // would run its drop inside the owner's borrow of its state.
            drop(self.waker.take());
        }
    }
}

/// The number of a table's entries cancelled from elsewhere since its last sweep; shared
/// with every sleep registered on it.
#[derive(Clone, Default)]
pub(crate) struct Cancellations(Arc<AtomicUsize>);

/// Where an entry sits in its table.
pub(crate) type Key = (Instant, u64);

/// The table of one worker.
#[derive(Default)]
pub struct Timers {
    entries: BTreeMap<Key, Arc<Entry>>,
    cancellations: Cancellations,
    next_id: u64,
    closed: bool,
}

impl Timers {
    /// Registers `entry` to fire at `deadline`. Sweeps out cancelled entries first if they
    /// could be more than half of the table.
    pub(crate) fn insert(&mut self, deadline: Instant, entry: Arc<Entry>) -> Key {
        if self.cancellations.0.load(Ordering::Relaxed) > self.entries.len() / 2 {
            self.sweep();
        }
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

    /// The count that sleeps registered here report remote cancellations to.
    pub(crate) fn cancellations(&self) -> &Cancellations {
        &self.cancellations
    }

    /// Forgets the entry at `key` (its sleep was dropped on this worker).
    pub(crate) fn remove(&mut self, key: &Key) {
        self.entries.remove(key);
    }

    /// Discards every cancelled entry.
    fn sweep(&mut self) {
        // Reset before the scan: a cancellation counted after it is either seen by this scan
        // (and counted once too often, which only brings the next sweep forward) or left for
        // the next sweep.
        self.cancellations.0.store(0, Ordering::Relaxed);
        self.entries
            .retain(|_, entry| entry.state.load(Ordering::Acquire) != CANCELLED);
    }

    /// The earliest deadline of a timer that is not cancelled, if any. Cancelled entries in
    /// front of it are discarded, so a worker never wakes for a sleep nobody waits for.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(entry) = self.entries.first_entry() {
            if entry.get().state.load(Ordering::Acquire) != CANCELLED {
                return Some(entry.key().0);
            }
            entry.remove();
        }
        None
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

    /// An entry cancelled from another thread is not waited for: the next deadline skips it
    /// (and the entry leaves the table) even though its own deadline has not come.
    /// A waker that holds `Arc<()>` to show whether it is still alive.
    struct CountWakes(#[allow(dead_code)] Arc<()>);

    impl std::task::Wake for CountWakes {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_remotely_cancelled_entry_is_not_waited_for() {
        let mut timers = Timers::default();
        let now = Instant::now();
        let soon = Arc::new(Entry::default());
        let later = Arc::new(Entry::default());
        timers.insert(now + Duration::from_secs(1), soon.clone());
        timers.insert(now + Duration::from_secs(60), later.clone());
        let cancellations = timers.cancellations().clone();
        std::thread::spawn(move || soon.cancel(&cancellations))
            .join()
            .unwrap();
        assert_eq!(timers.next_deadline(), Some(now + Duration::from_secs(60)));
        assert_eq!(timers.len(), 1, "the cancelled entry left the table");
        // A cancelled entry's waker is dropped by the cancel, not kept until a sweep.
        let entry = Arc::new(Entry::default());
        let woken = Arc::new(());
        let waker = std::task::Waker::from(Arc::new(CountWakes(woken.clone())));
        entry.waker.register(&waker);
        drop(waker);
        timers.insert(now + Duration::from_secs(30), entry.clone());
        entry.cancel(timers.cancellations());
        assert_eq!(Arc::strong_count(&woken), 1, "the waker was released");
        later.cancel(timers.cancellations());
        assert_eq!(timers.next_deadline(), None);
        assert_eq!(timers.len(), 0);
    }

    /// Sleeps registered and then cancelled from elsewhere, far in the future, never pile up:
    /// inserts sweep them, so the table stays within a small multiple of the live sleeps.
    #[test]
    fn remote_cancellations_keep_the_table_bounded() {
        let mut timers = Timers::default();
        let far = Instant::now() + Duration::from_secs(3600);
        let live: Vec<_> = (0..10)
            .map(|_| {
                let entry = Arc::new(Entry::default());
                timers.insert(far, entry.clone());
                entry
            })
            .collect();
        let mut largest = 0;
        // Fewer rounds under Miri, which interprets every step.
        for _ in 0..if cfg!(miri) { 300 } else { 10_000 } {
            let entry = Arc::new(Entry::default());
            timers.insert(far, entry.clone());
            entry.cancel(timers.cancellations());
            largest = largest.max(timers.len());
        }
        assert!(largest <= 2 * live.len() + 2, "the table grew to {largest}");
        // A fired entry is not cancelled (nor counted) afterwards.
        let fired = Arc::new(Entry::default());
        fired.state.store(FIRED, Ordering::Release);
        fired.cancel(timers.cancellations());
        assert_eq!(fired.state.load(Ordering::Acquire), FIRED);
    }
}
