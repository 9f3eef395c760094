//! The join slot a task's [`Handle`](super::Handle) shares with its cell (the handle reaches it
//! through a [`JoinRef`](super::cell::JoinRef)).
//!
//! The slot lives inside the task cell (no allocation of its own) and guarantees:
//! - exactly one result is published: `Ok` if the future finished and dropped cleanly, `Closed`
//!   if it was aborted, refused, cancelled or its destructor panicked, `Exited` if it panicked;
//! - the publisher's `published` callback (the owner's, which lowers the running metric) runs
//!   exactly once, after the result is stored and before the handle can see it or is woken; if
//!   it panics, the result is still made visible and the handle woken;
//! - an abort (the handle's or an ancestor's) publishes `Closed` at once and wakes the task so
//!   that its next poll drops the future: the handle resolves without any poll by the runtime;
//! - the slot keeps no waker past the publish that wakes it, nor past the handle that
//!   registered it: a waker holds a count on the waiting task's cell, and one kept would tie
//!   that cell's life to this one's (a task that polled its own handle, or two tasks that
//!   polled each other's, would never be freed).
//!
//! # The state word
//!
//! No lock: one atomic word and two cells, on tokio's `JOIN_WAKER` model.
//!
//! - `CLAIMED`: a publisher won the right to store the result. Set once, by an atomic
//!   `fetch_or`, so of racing publishers (the poller finishing, an abort from any thread)
//!   exactly one stores; the others return at once.
//! - `PUBLISHED`: the result is stored. Set once, by the claimant, after it stored the result
//!   and ran `published` (Release), so a reader that sees it (Acquire) sees the result.
//! - `WAKER_SET`: the waker cell belongs to the publisher. The handle touches the cell (to
//!   write, compare or drop the waker) only while the bit is clear, sets it to hand the cell
//!   over, and clears it to take the cell back only while `PUBLISHED` is clear
//!   (compare-and-swap). The publisher touches the cell (takes the waker and wakes it) only if
//!   the `fetch_or` that set `PUBLISHED` found the bit set. In the word's modification order
//!   that `fetch_or` is before or after any handle's clear, never between a clear and the set
//!   after it, so the two never touch the cell at once; and once `PUBLISHED` is set the bit
//!   never clears again, so a cell the publisher took stays the publisher's.
//!
//! The result cell is written only by the claimant, before `PUBLISHED`, and read only by the
//! handle, after it saw `PUBLISHED`; the handle is one per slot and polls through `&mut`, so
//! reads never overlap. A result never taken is dropped with the slot, when the cell is freed.
//!
//! A spawn and await thus costs the publisher one `fetch_or` to claim and one to publish, and
//! the handle one load per poll plus, per pending poll, one `fetch_or` to hand the waker over
//! (and on a repeated pending poll a compare-and-swap to take it back first), and a load when
//! it is dropped.

use crate::Error;
use crate::sync::{AtomicUsize, UnsafeCell};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::task::{Poll, Waker};

/// A publisher has claimed the slot (see the module doc).
const CLAIMED: usize = 1;
/// The result is stored and visible.
const PUBLISHED: usize = 1 << 1;
/// The waker cell holds the handle's waker, and belongs to the publisher.
const WAKER_SET: usize = 1 << 2;

/// How a task ends without its output: the only errors a handle resolves to. Stored in a
/// byte: a whole `Error` in the result cell is 64 bytes in every task's cell.
pub(crate) enum Ended {
    /// [`Error::Closed`].
    Closed,
    /// [`Error::Exited`].
    Exited,
}

impl From<Ended> for Error {
    fn from(ended: Ended) -> Self {
        match ended {
            Ended::Closed => Error::Closed,
            Ended::Exited => Error::Exited,
        }
    }
}

/// Where one task's result goes, until its handle takes it.
pub(crate) struct JoinSlot<T> {
    state: AtomicUsize,
    result: UnsafeCell<Option<Result<T, Ended>>>,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the cells are reached only as the module doc's protocol allows: the result is
// written by one publishing thread and read, after a Release/Acquire pair on `state`, by the
// handle's thread (so `T` crosses threads: `T: Send`), and the waker (`Send`) has one owner at
// a time, handed over by Release/Acquire pairs on `state` as well.
unsafe impl<T: Send> Sync for JoinSlot<T> {}
// SAFETY: as above; moving the slot moves a `T` and a `Waker`.
unsafe impl<T: Send> Send for JoinSlot<T> {}

/// Makes a claimed result visible when dropped: after the `published` callback, or while it
/// unwinds, so that a panicking callback still leaves the handle a result and a wake.
struct Reveal<'a, T>(&'a JoinSlot<T>);

impl<T> Drop for Reveal<'_, T> {
    fn drop(&mut self) {
        // AcqRel: Release publishes the result to the handle; Acquire takes over the waker the
        // handle stored before it set WAKER_SET.
        let previous = self.0.state.fetch_or(PUBLISHED, AcqRel);
        if previous & WAKER_SET != 0 {
            // SAFETY: WAKER_SET was set when PUBLISHED went in, so the cell is ours for good:
            // the handle takes it back only by clearing the bit while PUBLISHED is clear.
            let waker = self.0.waker.with_mut(|slot| unsafe { (*slot).take() });
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

impl<T> JoinSlot<T> {
    /// An empty slot.
    pub(crate) fn new() -> Self {
        Self {
            state: AtomicUsize::new(0),
            result: UnsafeCell::new(None),
            waker: UnsafeCell::new(None),
        }
    }

    /// Publishes `result` unless something was published first; then runs `published`, makes
    /// the result visible, and wakes the handle if it waits. Returns whether it published.
    pub(crate) fn publish(&self, result: Result<T, Ended>, published: impl FnOnce()) -> bool {
        if self.state.fetch_or(CLAIMED, Relaxed) & CLAIMED != 0 {
            return false;
        }
        // SAFETY: the claim above is ours alone, and the handle reads the result only after
        // it sees PUBLISHED, which `Reveal` sets below: nobody else touches the cell now.
        self.result.with_mut(|slot| unsafe { *slot = Some(result) });
        let reveal = Reveal(self);
        published();
        drop(reveal);
        true
    }

    /// Publishes `Closed` unless a result was published first. Returns whether it did (the
    /// caller then wakes the task so its future is dropped).
    pub(crate) fn abort(&self, published: impl FnOnce()) -> bool {
        self.publish(Err(Ended::Closed), published)
    }

    /// The handle's poll: takes the result if one was published, else leaves `waker` to be
    /// woken when it is. Panics if the result was already taken.
    ///
    /// # Safety
    /// Only the slot's one handle calls this and [`forget_waker`](Self::forget_waker), never
    /// two at once (it calls them through `&mut`): see [`JoinRef`](super::cell::JoinRef).
    pub(crate) unsafe fn poll_result(&self, waker: &Waker) -> Poll<Result<T, Error>> {
        let state = self.state.load(Acquire);
        if state & PUBLISHED != 0 {
            // SAFETY: PUBLISHED (Acquire) hands us the result; we are its only reader.
            return Poll::Ready(unsafe { self.take_result() });
        }
        if state & WAKER_SET != 0 && !self.take_waker_cell_back(state) {
            // SAFETY: the result was published meanwhile (seen with Acquire).
            return Poll::Ready(unsafe { self.take_result() });
        }
        // SAFETY: WAKER_SET is clear, and only this handle sets it: the cell is ours.
        self.waker.with_mut(|slot| unsafe {
            match &*slot {
                Some(registered) if registered.will_wake(waker) => {}
                _ => *slot = Some(waker.clone()),
            }
        });
        // AcqRel: Release hands the waker to the publisher; Acquire sees the result if it was
        // published meanwhile.
        let previous = self.state.fetch_or(WAKER_SET, AcqRel);
        if previous & PUBLISHED != 0 {
            // The publisher's fetch_or came first and found WAKER_SET clear, so it did not
            // take the cell, and never will: the waker is still ours, and useless now.
            // SAFETY: as just said, nobody else touches the cell.
            drop(self.waker.with_mut(|slot| unsafe { (*slot).take() }));
            // SAFETY: as for the first check.
            return Poll::Ready(unsafe { self.take_result() });
        }
        Poll::Pending
    }

    /// The handle is going: drops the waker it left, unless a publish has taken it over.
    ///
    /// # Safety
    /// As for [`poll_result`](Self::poll_result).
    pub(crate) unsafe fn forget_waker(&self) {
        let state = self.state.load(Acquire);
        // With WAKER_SET clear the cell is the handle's (it may hold a waker if a clone or a
        // drop of the previous one panicked in `poll_result`); with it set, it is the
        // handle's again once taken back.
        if state & WAKER_SET == 0 || self.take_waker_cell_back(state) {
            // SAFETY: WAKER_SET is clear, and only this handle sets it: the cell is ours.
            drop(self.waker.with_mut(|slot| unsafe { (*slot).take() }));
        }
    }

    /// Clears WAKER_SET, starting from `state` (which has it set), unless the result is
    /// published first. Returns whether the waker cell is the handle's again; `false` means
    /// PUBLISHED was seen (with Acquire) and the cell stays the publisher's.
    fn take_waker_cell_back(&self, mut state: usize) -> bool {
        loop {
            if state & PUBLISHED != 0 {
                return false;
            }
            // Acquire on success: the cell was last written by this handle, but a failed
            // compare may see PUBLISHED, whose result we then read.
            match self
                .state
                .compare_exchange_weak(state, state & !WAKER_SET, Acquire, Acquire)
            {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
    }

    /// # Safety
    /// PUBLISHED was seen with Acquire ordering, by the slot's only reader.
    unsafe fn take_result(&self) -> Result<T, Error> {
        // SAFETY: per the caller's contract the claimant's write happened before, and nobody
        // else reads or writes the cell any more.
        let result = self.result.with_mut(|slot| unsafe { (*slot).take() });
        result
            .expect("Handle polled after it resolved")
            .map_err(Error::from)
    }

    /// Whether a result has been published (it may have been taken since).
    pub(crate) fn is_published(&self) -> bool {
        self.state.load(Acquire) & PUBLISHED != 0
    }
}

/// What the tests and models below share: a waker that counts its wakes, and a poll as the
/// slot's one handle makes it.
#[cfg(test)]
mod support {
    use super::JoinSlot;
    use crate::Error;
    use crate::sync::AtomicUsize;
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    use std::task::{Poll, Wake, Waker};

    /// Polls as the slot's one handle does. Each test and model polls its slot from one
    /// place (one thread), one poll at a time.
    pub(super) fn poll<T>(slot: &JoinSlot<T>, waker: &Waker) -> Poll<Result<T, Error>> {
        // SAFETY: the callers poll each slot from one place, one poll at a time (above).
        unsafe { slot.poll_result(waker) }
    }

    #[derive(Default)]
    pub(super) struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    /// A waker and the count of its wakes.
    pub(super) fn waker() -> (Waker, Arc<Wakes>) {
        let wakes = Arc::new(Wakes::default());
        (Waker::from(wakes.clone()), wakes)
    }

    impl Wakes {
        pub(super) fn count(&self) -> usize {
            self.0.load(SeqCst)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::support::{poll, waker};
    use super::*;
    use std::cell::Cell;
    use std::sync::Arc;

    #[test]
    fn a_published_result_is_taken_by_the_next_poll() {
        let slot = JoinSlot::new();
        let calls = Cell::new(0);
        assert!(slot.publish(Ok(7), || calls.set(calls.get() + 1)));
        assert_eq!(calls.get(), 1);
        assert!(slot.is_published());
        let (waker, wakes) = waker();
        assert!(matches!(poll(&slot, &waker), Poll::Ready(Ok(7))));
        assert_eq!(wakes.count(), 0, "a result already there wakes nobody");
    }

    #[test]
    fn a_waiting_handle_is_woken_once_by_the_publish() {
        let slot = JoinSlot::new();
        let (waker, wakes) = waker();
        assert!(poll(&slot, &waker).is_pending());
        assert!(poll(&slot, &waker).is_pending(), "the same waker again");
        assert_eq!(wakes.count(), 0);
        assert!(slot.publish(Ok("done"), || {}));
        assert_eq!(wakes.count(), 1);
        assert!(matches!(poll(&slot, &waker), Poll::Ready(Ok("done"))));
    }

    #[test]
    fn only_the_first_publish_counts() {
        let slot = JoinSlot::new();
        let calls = Cell::new(0);
        assert!(slot.publish(Ok(1), || calls.set(calls.get() + 1)));
        assert!(!slot.publish(Ok(2), || calls.set(calls.get() + 1)));
        assert!(!slot.abort(|| calls.set(calls.get() + 1)));
        assert_eq!(
            calls.get(),
            1,
            "the callback runs for the one result published"
        );
        let (waker, _) = waker();
        assert!(matches!(poll(&slot, &waker), Poll::Ready(Ok(1))));
    }

    #[test]
    fn an_abort_publishes_closed() {
        let slot = JoinSlot::<u8>::new();
        assert!(slot.abort(|| {}));
        assert!(!slot.publish(Ok(1), || {}));
        let (waker, _) = waker();
        assert!(matches!(
            poll(&slot, &waker),
            Poll::Ready(Err(Error::Closed))
        ));
    }

    #[test]
    fn a_new_waker_replaces_the_registered_one() {
        let slot = JoinSlot::new();
        let (first, first_wakes) = waker();
        let (second, second_wakes) = waker();
        assert!(poll(&slot, &first).is_pending());
        assert!(poll(&slot, &second).is_pending());
        assert!(slot.publish(Ok(()), || {}));
        assert_eq!(first_wakes.count(), 0, "the replaced waker is not woken");
        assert_eq!(second_wakes.count(), 1);
        assert!(poll(&slot, &second).is_ready());
    }

    #[test]
    fn the_result_is_hidden_until_the_published_callback_ran() {
        let slot = JoinSlot::new();
        let (waker, wakes) = waker();
        assert!(poll(&slot, &waker).is_pending());
        assert!(slot.publish(Ok(3), || {
            assert!(!slot.is_published(), "not visible inside the callback");
            assert!(poll(&slot, &waker).is_pending(), "a poll inside it waits");
        }));
        assert_eq!(wakes.count(), 1);
        assert!(matches!(poll(&slot, &waker), Poll::Ready(Ok(3))));
    }

    #[test]
    fn the_slot_keeps_no_waker_past_the_publish() {
        let slot = JoinSlot::new();
        let (waker, wakes) = waker();
        assert!(poll(&slot, &waker).is_pending());
        assert_eq!(Arc::strong_count(&wakes), 3, "the slot holds a clone");
        assert!(slot.publish(Ok(()), || {}));
        assert_eq!(Arc::strong_count(&wakes), 2, "the publish took and woke it");
        assert!(poll(&slot, &waker).is_ready());
        assert_eq!(Arc::strong_count(&wakes), 2);
    }

    #[test]
    fn the_slot_keeps_no_waker_past_its_handle() {
        let slot = JoinSlot::<()>::new();
        let (waker, wakes) = waker();
        assert!(poll(&slot, &waker).is_pending());
        // SAFETY: the test is the slot's only handle.
        unsafe { slot.forget_waker() };
        assert_eq!(Arc::strong_count(&wakes), 2, "the going handle dropped it");
        assert!(slot.publish(Ok(()), || {}));
        assert_eq!(wakes.count(), 0, "nobody waits any more");
    }

    #[test]
    fn a_panicking_callback_still_publishes_and_wakes() {
        let slot = JoinSlot::new();
        let (waker, wakes) = waker();
        assert!(poll(&slot, &waker).is_pending());
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            slot.publish(Ok(4), || panic!("published"))
        }));
        assert!(unwound.is_err());
        assert_eq!(wakes.count(), 1);
        assert!(!slot.abort(|| {}), "the result stays the one published");
        assert!(matches!(poll(&slot, &waker), Poll::Ready(Ok(4))));
    }

    #[test]
    #[should_panic(expected = "Handle polled after it resolved")]
    fn polling_after_the_result_was_taken_panics() {
        let slot = JoinSlot::new();
        assert!(slot.publish(Ok(()), || {}));
        let (waker, _) = waker();
        assert!(poll(&slot, &waker).is_ready());
        let _ = poll(&slot, &waker);
    }

    #[test]
    fn a_result_never_taken_is_dropped_with_the_slot() {
        let value = Arc::new(());
        let slot = JoinSlot::new();
        let (waker, _) = waker();
        assert!(poll(&slot, &waker).is_pending());
        assert!(slot.publish(Ok(value.clone()), || {}));
        drop(slot);
        assert_eq!(Arc::strong_count(&value), 1);
    }
}

/// Loom models of the slot's state word: a publish racing the handle's registration, two
/// publishers racing, and a waker swap racing a publish. In every interleaving exactly one
/// result is published and its callback runs once, and a handle left pending is woken through
/// the waker it registered last, so its next poll takes the result: no wake is lost.
#[cfg(all(test, loom))]
mod models {
    use super::support::{poll, waker};
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::thread;
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn a_publish_racing_the_first_poll_is_never_lost() {
        crate::sync::model(|| {
            let slot = Arc::new(JoinSlot::new());
            let publisher = {
                let slot = slot.clone();
                thread::spawn(move || assert!(slot.publish(Ok(5), || {})))
            };
            let (waker, wakes) = waker();
            let first = poll(&slot, &waker);
            publisher.join().unwrap();
            assert_eq!(Arc::strong_count(&wakes), 2, "the slot keeps no clone");
            match first {
                Poll::Ready(result) => {
                    assert!(matches!(result, Ok(5)));
                    assert_eq!(wakes.count(), 0, "a result found at once wakes nobody");
                }
                Poll::Pending => {
                    assert_eq!(wakes.count(), 1, "a pending handle is woken");
                    assert!(matches!(poll(&slot, &waker), Poll::Ready(Ok(5))));
                }
            }
        });
    }

    #[test]
    fn of_two_racing_publishers_exactly_one_publishes() {
        crate::sync::model(|| {
            let slot = Arc::new(JoinSlot::new());
            let calls = Arc::new(AtomicUsize::new(0));
            let (waker, wakes) = waker();
            assert!(poll(&slot, &waker).is_pending());
            let aborting = {
                let (slot, calls) = (slot.clone(), calls.clone());
                thread::spawn(move || {
                    slot.abort(|| {
                        calls.fetch_add(1, SeqCst);
                    })
                })
            };
            let finished = slot.publish(Ok(9), || {
                calls.fetch_add(1, SeqCst);
            });
            let aborted = aborting.join().unwrap();
            assert!(finished != aborted, "exactly one publishes");
            assert_eq!(calls.load(SeqCst), 1);
            assert_eq!(wakes.count(), 1);
            match poll(&slot, &waker) {
                Poll::Ready(Ok(9)) => assert!(finished),
                Poll::Ready(Err(Error::Closed)) => assert!(aborted),
                _ => panic!("the winner's result"),
            }
        });
    }

    /// The handle going (dropping the waker it left) racing a publish (taking it to wake):
    /// the waker is dropped exactly once, by one of them, and the slot keeps none.
    #[test]
    fn a_going_handle_racing_a_publish_leaves_no_waker() {
        crate::sync::model(|| {
            let slot = Arc::new(JoinSlot::new());
            let (waker, wakes) = waker();
            assert!(poll(&slot, &waker).is_pending());
            drop(waker);
            let publisher = {
                let slot = slot.clone();
                thread::spawn(move || assert!(slot.publish(Ok(2), || {})))
            };
            // SAFETY: this thread is the slot's only handle.
            unsafe { slot.forget_waker() };
            publisher.join().unwrap();
            assert!(wakes.count() <= 1);
            assert_eq!(
                Arc::strong_count(&wakes),
                1,
                "no clone of the waker is left"
            );
        });
    }

    #[test]
    fn a_waker_swap_racing_a_publish_wakes_the_last_waker() {
        crate::sync::model(|| {
            let slot = Arc::new(JoinSlot::new());
            let (first, first_wakes) = waker();
            let (second, second_wakes) = waker();
            assert!(poll(&slot, &first).is_pending());
            let publisher = {
                let slot = slot.clone();
                thread::spawn(move || assert!(slot.publish(Ok(1), || {})))
            };
            let swapped = poll(&slot, &second);
            publisher.join().unwrap();
            assert_eq!(
                Arc::strong_count(&first_wakes),
                2,
                "the replaced waker is dropped"
            );
            assert_eq!(
                Arc::strong_count(&second_wakes),
                2,
                "the slot keeps no clone"
            );
            if swapped.is_pending() {
                assert_eq!(
                    second_wakes.count(),
                    1,
                    "the waker registered last is woken"
                );
                assert!(matches!(poll(&slot, &second), Poll::Ready(Ok(1))));
            } else {
                assert!(matches!(swapped, Poll::Ready(Ok(1))));
            }
        });
    }
}
