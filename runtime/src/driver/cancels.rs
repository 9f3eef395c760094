//! The cancellations other threads ask of a ring: an operation whose future (or owner) was
//! dropped on a thread other than its ring's is named here, and the ring's own thread sends
//! the `IORING_OP_ASYNC_CANCEL` (a ring is only used from its thread, `SINGLE_ISSUER`).
//!
//! Invariants:
//! - A request is pushed under the lock, then `pending` is set (still under it), then the
//!   worker's eventfd is written (still under it). The ring's thread takes the requests
//!   (clearing `pending` under the lock) before every wait, and its waits keep a read of that
//!   eventfd armed, so a request either is taken before the thread sleeps or ends its sleep:
//!   none waits for an unrelated completion. `pending` only spares the owner the lock while
//!   nothing is asked.
//! - The eventfd belongs to the worker and outlives the ring, not the requesters: the ring
//!   closes the inbox (under the lock) when it is dropped, after which requests are ignored
//!   (a dropped ring cancelled or finished everything), so no write ever reaches a closed
//!   descriptor, nor one whose number was reused.
//! - Requests are plain tokens (`user_data`): one that names an operation already finished,
//!   or a slot reused since, is recognised by its generation and ignored by the ring.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

// Under loom, its own lock and flag, so the models see every interleaving of the protocol.
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard, atomic::AtomicBool};
#[cfg(not(loom))]
use {
    crate::sync::{Mutex, MutexGuard},
    std::sync::atomic::AtomicBool,
};

/// The cancellations asked of one ring by other threads.
pub(crate) struct CancelInbox {
    state: Mutex<State>,
    /// Set with every push and cleared with every take, both under the lock: whether the ring
    /// has anything to take.
    pending: AtomicBool,
    /// The worker's wake eventfd, which the ring's waits keep a read armed on.
    eventfd: RawFd,
    /// Under loom, the eventfd is modelled by this flag.
    #[cfg(loom)]
    model_eventfd: AtomicBool,
}

struct State {
    tokens: Vec<u64>,
    /// Cleared when the ring is dropped: nobody takes requests any more, and the eventfd may
    /// be closed.
    open: bool,
}

impl CancelInbox {
    /// An inbox whose requests wake the ring's thread through `eventfd`, which must stay open
    /// until [`CancelInbox::close`].
    pub(crate) fn new(eventfd: RawFd) -> Self {
        Self {
            state: Mutex::new(State {
                tokens: Vec::new(),
                open: true,
            }),
            pending: AtomicBool::new(false),
            eventfd,
            #[cfg(loom)]
            model_eventfd: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        #[cfg(loom)]
        return self.state.lock().expect("no panic while it is held");
        #[cfg(not(loom))]
        self.state.lock()
    }

    /// Asks the ring to cancel the operation `token` names, waking its thread. Ignored once
    /// the ring is gone.
    pub(crate) fn send(&self, token: u64) {
        let mut state = self.lock();
        if !state.open {
            return;
        }
        state.tokens.push(token);
        // SeqCst, like the wake state's word: the store is ordered before the eventfd write
        // below, and the owner's load in `take` before its wait, so an owner that reads false
        // enters a wait that this write ends.
        self.pending.store(true, Ordering::SeqCst);
        // Under the lock: `close` cannot run meanwhile, so the eventfd is still open.
        self.wake();
    }

    /// Moves every request into `into` (for the ring's thread).
    pub(crate) fn take(&self, into: &mut Vec<u64>) {
        if !self.pending.load(Ordering::SeqCst) {
            return;
        }
        let mut state = self.lock();
        self.pending.store(false, Ordering::SeqCst);
        into.append(&mut state.tokens);
    }

    /// Stops accepting requests: the ring is being dropped, and its eventfd may close after.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.open = false;
        state.tokens.clear();
    }

    #[cfg(not(loom))]
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64. The descriptor is open: the caller holds
        // the lock and saw `open`; the eventfd outlives the ring (`Driver::new`'s contract),
        // and the ring's `Drop` clears `open` (under this lock) before anything else, so
        // before the eventfd can be closed, on every path, an unwinding one included. A
        // write blocks only if the counter would overflow, which takes 2^64 writes between
        // two reads.
        unsafe {
            libc::write(
                self.eventfd,
                (&raw const one).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }

    #[cfg(loom)]
    fn wake(&self) {
        let _ = self.eventfd;
        self.model_eventfd.store(true, Ordering::SeqCst);
    }

    /// Under loom: the ring's wait, which ends once the eventfd was written.
    #[cfg(loom)]
    fn model_wait(&self) {
        while !self.model_eventfd.load(Ordering::SeqCst) {
            loom::thread::yield_now();
        }
    }
}

#[cfg(all(test, loom))]
mod models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A request racing the ring's "anything asked?" look before it sleeps is never lost:
    /// the look finds it, or the request's eventfd write ends the sleep and the next look
    /// finds it.
    #[test]
    fn a_request_racing_the_look_before_a_wait_is_never_lost() {
        crate::sync::model(|| {
            let inbox = Arc::new(CancelInbox::new(-1));
            let requester = {
                let inbox = inbox.clone();
                thread::spawn(move || inbox.send(7))
            };
            let mut taken = Vec::new();
            inbox.take(&mut taken);
            if taken.is_empty() {
                inbox.model_wait();
                inbox.take(&mut taken);
            }
            assert_eq!(taken, [7]);
            requester.join().unwrap();
        });
    }

    /// A request racing the ring's close is either taken or dropped, never left behind a
    /// closed inbox to wake a descriptor that may be gone.
    #[test]
    fn a_request_after_close_writes_nothing() {
        crate::sync::model(|| {
            let inbox = Arc::new(CancelInbox::new(-1));
            let requester = {
                let inbox = inbox.clone();
                thread::spawn(move || inbox.send(7))
            };
            inbox.close();
            let woke = inbox.model_eventfd.load(Ordering::SeqCst);
            requester.join().unwrap();
            // A write seen after close must have happened before it (under the lock).
            let woke_after = inbox.model_eventfd.load(Ordering::SeqCst);
            let mut taken = Vec::new();
            inbox.take(&mut taken);
            assert!(taken.is_empty(), "a closed inbox keeps nothing");
            assert_eq!(woke, woke_after, "no write after close");
        });
    }
}
