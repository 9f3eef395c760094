//! The channel an ask's reply comes back on: one value, one sender, one receiver, one
//! allocation, and one atomic read-modify-write per side on the fast path (the generic
//! `futures` oneshot takes several locks per message, which an ask round trip feels).
//!
//! Invariants:
//! - `state` bits: `VALUE` (the sender wrote `value`), `CLOSED` (the sender went away without
//!   a value), `WAKER` (the receiver stored `waker`), `TAKEN` (the receiver took the value).
//!   `VALUE` and `CLOSED` are each set once, by the sender, never both; taking the value
//!   trades `VALUE` for `TAKEN` in one RMW, so a state with none of the three means the
//!   sender is not done.
//! - `value` is written only by the sender, before it sets `VALUE` (`AcqRel`); it is read
//!   only by the receiver after it saw `VALUE` (`Acquire`).
//! - `waker` belongs to the receiver while `WAKER` is clear, and to the sender once its RMW
//!   found `WAKER` set. The receiver stores a waker, then publishes it by setting `WAKER`
//!   with a CAS; to look at or replace it later, it first clears `WAKER` with a CAS. A failed
//!   CAS means the sender is done (the only other writer of `state`): the receiver then
//!   leaves the waker alone and takes the outcome.
//! - A receiver dropped while its waker is published takes the waker back the same way (a
//!   CAS that clears `WAKER` while the sender is not done) and drops it: an ask that timed out
//!   or was dropped leaves nothing of its task in the channel, which the actor may hold for a
//!   long time. If the CAS fails, the sender is done and has taken the waker itself.
//! - A receiver polled again after it returned the value gets `Canceled` and touches neither
//!   the waker nor the value (the sender may still be taking the waker it found published).
//! - `expiry`, set at creation and never changed, says when the value is no longer wanted
//!   (a remote ask past its deadline): the sender may look at it instead of sending.

use crate::sync::{AtomicUsize, UnsafeCell};
use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

const VALUE: usize = 1;
const CLOSED: usize = 2;
const WAKER: usize = 4;
const TAKEN: usize = 8;

struct Inner<T> {
    state: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
    waker: UnsafeCell<Option<Waker>>,
    expiry: Option<Arc<dyn Expiry>>,
}

/// When the value of a channel is no longer wanted: asked by the sender before it does the
/// work (a handler about to run for a remote ask whose asker has given up).
pub(crate) trait Expiry: Send + Sync {
    fn expired(&self) -> bool;
}

// SAFETY: the value crosses threads (hence `T: Send`); `value` and `waker` are each reached by
// one side at a time, as the module invariants order them.
unsafe impl<T: Send> Send for Inner<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Inner<T> {}

/// Channels alive now, in debug builds: what a test of a leak counts (a release build would
/// pay a contended atomic per ask for it).
#[cfg(debug_assertions)]
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Reply channels alive now; `None` in release builds, which do not count them.
pub(crate) fn live() -> Option<usize> {
    #[cfg(debug_assertions)]
    return Some(LIVE.load(Ordering::SeqCst));
    #[cfg(not(debug_assertions))]
    None
}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        LIVE.fetch_sub(1, Ordering::SeqCst);
        // A value sent but never received is dropped with the channel.
        if self.state.load(Ordering::Acquire) & VALUE != 0 {
            // SAFETY: `VALUE` says the sender wrote the value, and nobody took it (taking it
            // clears `VALUE`); both sides are gone, so nothing else reaches it.
            self.value
                .with_mut(|value| unsafe { (*value).assume_init_drop() });
        }
    }
}

pub(crate) struct Sender<T> {
    inner: crate::sync::Arc<Inner<T>>,
}

pub(crate) struct Receiver<T> {
    inner: crate::sync::Arc<Inner<T>>,
}

/// The sender went away without a value.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Canceled;

pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    channel_with(None)
}

/// A channel whose value stops being wanted when `expiry` says so.
#[cfg(feature = "remote")]
pub(crate) fn expiring<T>(expiry: Arc<dyn Expiry>) -> (Sender<T>, Receiver<T>) {
    channel_with(Some(expiry))
}

fn channel_with<T>(expiry: Option<Arc<dyn Expiry>>) -> (Sender<T>, Receiver<T>) {
    #[cfg(debug_assertions)]
    LIVE.fetch_add(1, Ordering::SeqCst);
    let inner = crate::sync::Arc::new(Inner {
        state: AtomicUsize::new(0),
        value: UnsafeCell::new(MaybeUninit::uninit()),
        waker: UnsafeCell::new(None),
        expiry,
    });
    (
        Sender {
            inner: inner.clone(),
        },
        Receiver { inner },
    )
}

impl<T> Sender<T> {
    /// Whether the value is no longer wanted (its expiry says so); never for a channel made
    /// without one.
    pub(crate) fn expired(&self) -> bool {
        self.inner
            .expiry
            .as_ref()
            .is_some_and(|expiry| expiry.expired())
    }

    /// Sends `value`; a receiver that went away drops it with the channel.
    pub(crate) fn send(self, value: T) {
        // Moved out without running `Drop` (which reports a sender gone without a value); a
        // bare `Arc` rather than an `Option` keeps the sender, and the messages carrying it, a
        // pointer wide.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the `Arc` is moved out once.
        let inner = unsafe { std::ptr::read(&this.inner) };
        // SAFETY: only the sender writes `value`, once, before it sets `VALUE`.
        inner.value.with_mut(|cell| unsafe { (*cell).write(value) });
        finish(&inner, VALUE);
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        finish(&self.inner, CLOSED);
    }
}

/// Sets `bit` (the sender is done) and wakes a stored waker.
fn finish<T>(inner: &Inner<T>, bit: usize) {
    let previous = inner.state.fetch_or(bit, Ordering::AcqRel);
    if previous & WAKER != 0 {
        // SAFETY: `WAKER` was set before this RMW, so the receiver published the waker and
        // will not touch it again now that the sender is done.
        if let Some(waker) = inner.waker.with_mut(|waker| unsafe { (*waker).take() }) {
            waker.wake();
        }
    }
}

impl<T> Receiver<T> {
    fn take(&self, state: usize) -> Poll<Result<T, Canceled>> {
        if state & VALUE != 0 {
            // `VALUE` for `TAKEN`: the channel's drop does not drop the value again, and the
            // receiver's drop knows the sender is done.
            self.inner.state.fetch_xor(VALUE | TAKEN, Ordering::Relaxed);
            // SAFETY: `VALUE` (loaded with `Acquire`) says the sender wrote the value; only the
            // receiver reads it, once.
            let value = self
                .inner
                .value
                .with(|value| unsafe { (*value).assume_init_read() });
            return Poll::Ready(Ok(value));
        }
        Poll::Ready(Err(Canceled))
    }
}

impl<T> Future for Receiver<T> {
    type Output = Result<T, Canceled>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &self.inner;
        let mut state = inner.state.load(Ordering::Acquire);
        // `TAKEN`: polled again after it returned the value. The sender is done and may still
        // be taking the waker it found published, so this poll touches nothing (`take` finds
        // no value and answers `Canceled`).
        if state & (VALUE | CLOSED | TAKEN) != 0 {
            return self.take(state);
        }
        if state & WAKER != 0 {
            // Take the waker back before looking at it: once the sender's RMW sees `WAKER` it
            // may take the waker at any time. Failing, the sender is done.
            match inner.state.compare_exchange(
                state,
                state & !WAKER,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => state &= !WAKER,
                Err(current) => return self.take(current),
            }
        }
        // SAFETY: `WAKER` is clear, so the sender will not touch the waker; only the receiver
        // reaches it.
        inner.waker.with_mut(|waker| {
            let waker = unsafe { &mut *waker };
            if !waker.as_ref().is_some_and(|old| old.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
        });
        match inner.state.compare_exchange(
            state,
            state | WAKER,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Poll::Pending,
            // The sender finished meanwhile (it saw no waker): take what it left.
            Err(current) => self.take(current),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let inner = &self.inner;
        let state = inner.state.load(Ordering::Acquire);
        if state & WAKER == 0 || state & (VALUE | CLOSED | TAKEN) != 0 {
            // No waker published, or the sender is done and the waker is its to take.
            return;
        }
        if inner
            .state
            .compare_exchange(state, state & !WAKER, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: this CAS cleared `WAKER` before the sender finished (its RMW would have
            // changed `state`), so the sender will find it clear and never touch the waker.
            drop(inner.waker.with_mut(|waker| unsafe { (*waker).take() }));
        }
    }
}

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;
    use futures::FutureExt as _;

    #[test]
    fn a_sent_value_arrives_before_or_after_the_receiver_waits() {
        let (sender, receiver) = channel();
        sender.send(1);
        assert_eq!(receiver.now_or_never(), Some(Ok(1)));

        let (sender, mut receiver) = channel();
        assert_eq!((&mut receiver).now_or_never(), None);
        sender.send(String::from("late"));
        assert_eq!(receiver.now_or_never(), Some(Ok("late".to_string())));
    }

    #[test]
    fn a_dropped_sender_cancels_and_a_dropped_receiver_drops_the_value() {
        let (sender, mut receiver) = channel::<u8>();
        assert_eq!((&mut receiver).now_or_never(), None);
        drop(sender);
        assert_eq!(receiver.now_or_never(), Some(Err(Canceled)));

        let value = Arc::new(());
        let (sender, receiver) = channel();
        drop(receiver);
        sender.send(value.clone());
        assert_eq!(Arc::strong_count(&value), 1);
    }

    /// A waker that counts its clones: the `Arc` behind it is alive as long as one is.
    struct Counted;

    impl std::task::Wake for Counted {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_dropped_receiver_leaves_no_waker_in_the_channel() {
        let counted = Arc::new(Counted);
        let waker = Waker::from(counted.clone());
        let (sender, mut receiver) = channel::<u8>();
        let polled = Pin::new(&mut receiver).poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending());
        drop(waker);
        assert_eq!(
            Arc::strong_count(&counted),
            2,
            "the channel holds the waker"
        );
        drop(receiver);
        assert_eq!(
            Arc::strong_count(&counted),
            1,
            "a receiver that went away left its waker with the sender"
        );
        drop(sender);

        // After a value was taken, the drop leaves the channel alone.
        let (sender, mut receiver) = channel::<u8>();
        let waker = Waker::from(counted.clone());
        assert!(
            Pin::new(&mut receiver)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        sender.send(3);
        assert_eq!(
            Pin::new(&mut receiver).poll(&mut Context::from_waker(&waker)),
            Poll::Ready(Ok(3))
        );
        drop(receiver);
        drop(waker);
        assert_eq!(Arc::strong_count(&counted), 1);
    }

    /// A receiver polled after it returned the value reports `Canceled`, and the waker it
    /// published stays the sender's.
    #[test]
    fn a_receiver_polled_after_its_value_is_canceled() {
        let (sender, mut receiver) = channel::<u8>();
        assert!((&mut receiver).now_or_never().is_none());
        sender.send(4);
        assert_eq!((&mut receiver).now_or_never(), Some(Ok(4)));
        assert_eq!((&mut receiver).now_or_never(), Some(Err(Canceled)));
    }

    #[test]
    fn the_waiting_receiver_is_woken_across_threads() {
        // Fewer rounds under Miri, which interprets every step.
        for _ in 0..if cfg!(miri) { 20 } else { 1_000 } {
            let (sender, receiver) = channel();
            let thread = std::thread::spawn(move || sender.send(7u64));
            assert_eq!(futures::executor::block_on(receiver), Ok(7));
            thread.join().unwrap();
        }
    }
}

#[cfg(all(test, actors_loom))]
mod models {
    use super::*;

    /// The value sent on another thread is received exactly once, whatever the interleaving
    /// of the send with the receiver's first poll, its waker replacement and its wait.
    #[test]
    fn a_value_sent_anywhere_is_received_once() {
        crate::sync::model(|| {
            let (sender, receiver) = channel();
            let value = Arc::new(());
            let sent = value.clone();
            let thread = loom::thread::spawn(move || sender.send(sent));
            let received = loom::future::block_on(receiver).expect("sent");
            thread.join().unwrap();
            drop(received);
            assert_eq!(Arc::strong_count(&value), 1);
        });
    }

    /// A receiver polled with one waker and then waiting with another, while the value is
    /// sent: the replacement never races the sender's wake, and the value arrives.
    #[test]
    fn a_replaced_waker_races_the_send_safely() {
        crate::sync::model(|| {
            let (sender, mut receiver) = channel();
            let thread = loom::thread::spawn(move || sender.send(5u8));
            let mut first = std::task::Context::from_waker(std::task::Waker::noop());
            let polled = Pin::new(&mut receiver).poll(&mut first);
            let value = match polled {
                Poll::Ready(value) => value,
                Poll::Pending => loom::future::block_on(receiver),
            };
            assert_eq!(value, Ok(5));
            thread.join().unwrap();
        });
    }

    /// A sender dropped on another thread wakes the waiting receiver with `Canceled`.
    #[test]
    fn a_dropped_sender_wakes_the_receiver() {
        crate::sync::model(|| {
            let (sender, receiver) = channel::<u8>();
            let thread = loom::thread::spawn(move || drop(sender));
            assert_eq!(loom::future::block_on(receiver), Err(Canceled));
            thread.join().unwrap();
        });
    }

    /// A receiver that waits and is then dropped while the value is sent: the waker is
    /// dropped exactly once, by whichever side owns it, and the value with the channel.
    #[test]
    fn a_waiting_receiver_dropped_during_the_send_frees_its_waker_once() {
        crate::sync::model(|| {
            let counted = Arc::new(Counted);
            let (sender, mut receiver) = channel();
            let value = Arc::new(());
            let sent = value.clone();
            let waker = std::task::Waker::from(counted.clone());
            let polled = Pin::new(&mut receiver).poll(&mut std::task::Context::from_waker(&waker));
            assert!(polled.is_pending());
            drop(waker);
            let thread = loom::thread::spawn(move || sender.send(sent));
            drop(receiver);
            thread.join().unwrap();
            assert_eq!(Arc::strong_count(&value), 1);
            assert_eq!(Arc::strong_count(&counted), 1);
        });
    }

    /// A receiver that took the value is dropped while the sender may still be taking the
    /// waker it published: only the sender touches it.
    #[test]
    fn a_receiver_done_with_the_value_leaves_the_waker_to_the_sender() {
        crate::sync::model(|| {
            let counted = Arc::new(Counted);
            let (sender, mut receiver) = channel();
            let waker = std::task::Waker::from(counted.clone());
            let mut cx = std::task::Context::from_waker(&waker);
            assert!(Pin::new(&mut receiver).poll(&mut cx).is_pending());
            let thread = loom::thread::spawn(move || sender.send(1u8));
            assert_eq!(poll_until_ready(&mut receiver, &mut cx), Ok(1));
            drop(receiver);
            thread.join().unwrap();
            drop(waker);
            assert_eq!(Arc::strong_count(&counted), 1);
        });
    }

    /// A receiver polled again after it returned the value, while the sender may still be
    /// taking the waker the first poll published: the second poll touches nothing.
    #[test]
    fn a_poll_after_the_value_leaves_the_waker_to_the_sender() {
        crate::sync::model(|| {
            let (sender, mut receiver) = channel();
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            assert!(Pin::new(&mut receiver).poll(&mut cx).is_pending());
            let thread = loom::thread::spawn(move || sender.send(1u8));
            assert_eq!(poll_until_ready(&mut receiver, &mut cx), Ok(1));
            assert_eq!(
                Pin::new(&mut receiver).poll(&mut cx),
                Poll::Ready(Err(Canceled))
            );
            thread.join().unwrap();
        });
    }

    /// Polls `receiver` with `cx` until it is ready, yielding to the sender between polls.
    fn poll_until_ready<T>(
        receiver: &mut Receiver<T>,
        cx: &mut std::task::Context<'_>,
    ) -> Result<T, Canceled> {
        loop {
            if let Poll::Ready(value) = Pin::new(&mut *receiver).poll(cx) {
                return value;
            }
            loom::thread::yield_now();
        }
    }

    struct Counted;

    impl std::task::Wake for Counted {
        fn wake(self: Arc<Self>) {}
    }

    /// A receiver dropped while the value is sent: the value is dropped exactly once.
    #[test]
    fn a_value_sent_to_a_dropped_receiver_is_dropped_once() {
        crate::sync::model(|| {
            let (sender, receiver) = channel();
            let value = Arc::new(());
            let sent = value.clone();
            let thread = loom::thread::spawn(move || sender.send(sent));
            drop(receiver);
            thread.join().unwrap();
            assert_eq!(Arc::strong_count(&value), 1);
        });
    }
}
