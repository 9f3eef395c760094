//! [`Operation`]: a future that registers an io_uring request on the ring of the worker that
//! first polls it and resolves to the kernel's answer; and the calls that register or submit on
//! the current worker's ring without a future ([`register_batch`], [`submit_now`]).
//!
//! The registration never migrates: polled on another thread, the future leaves its waker in
//! the operation's shared slot for the owner to wake. On a thread with no worker, or on a
//! worker that is closing, a request is refused at once with an error (a read hands its buffer
//! back).
//!
//! An [`Operation`] dropped before its output is taken gives the operation up ([`cancel`]):
//! a cancellable one (a send, a receive, a connect, a read) is cancelled on its ring, at once
//! when the drop happens on the ring's thread, else by a request that wakes the ring's
//! thread. The ring keeps owning its buffers and descriptor until the kernel's completion for
//! it arrives (see the driver's invariants), so the drop never frees what the kernel may
//! still use; a write is never cancelled and still completes.

use super::Local;
use crate::driver::{Completion, Request, RequestOutput};
use crate::driver::{Driver, RingClosed};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Runs `f` with the ring of the worker running on this thread; `None` if there is none (a
/// foreign thread) or that worker is closing.
fn with_open_driver<R>(f: impl FnOnce(&mut Driver, &Local) -> R) -> Option<R> {
    Local::with_current(|local| local.with_open_driver(|driver| f(driver, local))).flatten()
}

/// Starts the operations registered on this thread's worker now rather than at its next
/// service; see [`Driver::submit_now`]. Does nothing off the workers.
pub(crate) fn submit_now() {
    with_open_driver(|driver, _| driver.submit_now());
}

/// Registers every request on the worker running on this thread, in order, and returns their
/// slots with the worker's closing flag; `None` if there is no worker or it is closing.
pub(crate) fn register_batch(requests: Vec<Request>) -> Option<(Vec<Arc<Completion>>, RingClosed)> {
    with_open_driver(|driver, local| {
        let slots = requests
            .into_iter()
            .map(|request| driver.register(request))
            .collect();
        (slots, local.ring_closed())
    })
}

/// Registers `request` on the worker running on this thread, or hands it back if there is
/// none (a foreign thread) or that worker is closing.
pub(crate) fn register_here(request: Request) -> Result<Arc<Completion>, Request> {
    let mut request = Some(request);
    with_open_driver(|driver, _| driver.register(request.take().expect("taken once")))
        .ok_or_else(|| request.expect("not registered"))
}

/// Gives up the operation behind `slot`: if it is not done and was not given up already, its
/// ring cancels it (if it is cancellable). On the ring's own thread the cancellation is
/// queued at once; from any other thread (or while the ring's state is borrowed) it goes
/// through the ring's cancellation inbox, which wakes the ring's thread. A ring that is gone
/// cancelled everything when it closed, and ignores the request.
pub(crate) fn cancel(slot: &Completion) {
    let Some((inbox, token)) = slot.request_cancel() else {
        return;
    };
    let here = Local::with_current(|local| {
        local.try_with_driver(|driver| {
            let mine = Arc::ptr_eq(driver.cancel_inbox(), &inbox);
            if mine {
                driver.cancel_dropped(token);
            }
            mine
        })
    })
    .flatten()
    .unwrap_or(false);
    if !here {
        inbox.send(token);
    }
}

/// A future that registers `request` on the worker that first polls it and resolves to the
/// kernel's answer. Dropped after its first poll and before its answer, it gives the
/// operation up ([`cancel`]): a cancellable one is cancelled, a write still completes.
pub(crate) struct Operation {
    request: Option<Request>,
    shared: Option<Arc<Completion>>,
    /// Its output was taken: nothing is left to give up.
    finished: bool,
}

impl Operation {
    pub(crate) fn register(request: Request) -> Self {
        Self {
            request: Some(request),
            shared: None,
            finished: false,
        }
    }

    /// Gives the operation up, if it is registered and not finished (see [`cancel`]). Its
    /// output, once the ring has it, is still returned by a later poll: the kernel's answer
    /// to the cancelled operation (`Interrupted`, or its result if it finished first).
    pub(crate) fn cancel(&self) {
        if !self.finished
            && let Some(slot) = &self.shared
        {
            cancel(slot);
        }
    }

    /// Whether the request reached a ring (its first poll found a worker).
    pub(crate) fn is_registered(&self) -> bool {
        self.shared.is_some()
    }

    /// The slot of a registered operation.
    pub(crate) fn slot(&self) -> Option<&Arc<Completion>> {
        self.shared.as_ref()
    }
}

impl Future for Operation {
    type Output = RequestOutput;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RequestOutput> {
        if self.shared.is_none() {
            let request = self
                .request
                .take()
                .expect("Operation polled after completion");
            match register_here(request) {
                Ok(shared) => self.shared = Some(shared),
                Err(request) => return Poll::Ready(request.refuse()),
            }
        }
        let output = self
            .shared
            .as_ref()
            .expect("registered above")
            .poll(cx.waker());
        self.finished = output.is_ready();
        output
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        self.cancel();
    }
}
