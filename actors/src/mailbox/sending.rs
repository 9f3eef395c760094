//! A send that may wait: [`Channel`], what a send needs of a mailbox whatever type the
//! message is sent as, and [`Sending`], the future of a send that waits for room. The
//! handshake between a waiting sender and a returned permit is the mailbox's (see its
//! module documentation): a waiter registers with an RMW of `state` that sets the waiters
//! bit, then looks for a permit once more.

use super::{Mailbox, WAITERS};
use crate::{ActorId, Error};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

/// What a send needs of a mailbox, whatever type the message is sent as: `Mailbox<M>` itself
/// (sending its own `M`), or an erased mailbox sending `I` as one of its messages
/// ([`crate::erased`], behind interface refs and recipients). The permit and waiter logic is
/// the mailbox's either way; only the push converts.
pub(crate) trait Channel<M>: Send + Sync {
    /// Takes a permit, or says why not (`Full` or `Closed`).
    fn take_permit(&self) -> Result<(), Error>;
    /// Registers (or refreshes) a waiting sender's waker under `waiter`.
    fn register_waiter(&self, waiter: &mut Option<u64>, waker: &Waker);
    /// Leaves the waiters; `holds_message`: the sender still has a message (a wake it got
    /// passes on if it takes no permit).
    fn forget_waiter(&self, waiter: &mut Option<u64>, holds_message: bool);
    /// Pushes `message` under a permit taken.
    fn push_permitted(&self, message: M);
    /// The actor's id.
    fn id(&self) -> ActorId;
    /// Counts an ask to the actor whose deadline passed.
    fn count_ask_timeout(&self);
}

impl<M: Send> Channel<M> for Mailbox<M> {
    #[inline]
    fn take_permit(&self) -> Result<(), Error> {
        Mailbox::take_permit(self)
    }

    fn register_waiter(&self, waiter: &mut Option<u64>, waker: &Waker) {
        let mut waiters = self.waiters.lock();
        let waiters = waiters.get_or_insert_with(Box::default);
        let registered =
            waiter.and_then(|id| waiters.queue.iter_mut().find(|(other, _)| *other == id));
        match registered {
            Some((_, registered)) => registered.clone_from(waker),
            None => {
                let id = waiters.next_id;
                waiters.next_id += 1;
                waiters.queue.push_back((id, waker.clone()));
                // An RMW before the caller's second look for a permit (see the module
                // documentation).
                self.state.fetch_or(WAITERS, Ordering::AcqRel);
                *waiter = Some(id);
            }
        }
    }

    fn forget_waiter(&self, waiter: &mut Option<u64>, holds_message: bool) {
        let Some(id) = waiter.take() else {
            return;
        };
        let mut waiters = self.waiters.lock();
        let Some(list) = waiters.as_mut() else {
            return;
        };
        match list.queue.iter().position(|(other, _)| *other == id) {
            Some(position) => {
                list.queue.remove(position);
                self.settle_waiters(&list.queue);
            }
            None if holds_message => {
                drop(waiters);
                self.wake_waiter();
            }
            None => {}
        }
    }

    #[inline]
    fn push_permitted(&self, message: M) {
        self.push(message);
    }

    fn id(&self) -> ActorId {
        self.life.id()
    }

    fn count_ask_timeout(&self) {
        Mailbox::count_ask_timeout(self);
    }
}

/// A send waiting for room; see [`Mailbox::send`]. Generic over the channel: `C` is
/// `Mailbox<M>` for a typed ref, `dyn Channel<M>` for an erased one.
pub(crate) struct Sending<'a, M: Send, C: ?Sized + Channel<M> = Mailbox<M>> {
    channel: &'a C,
    message: Option<M>,
    /// Its id in the mailbox's waiters, once it registered.
    waiter: Option<u64>,
}

impl<'a, M: Send, C: ?Sized + Channel<M>> Sending<'a, M, C> {
    /// A send of `message` on `channel`.
    pub(crate) fn new(channel: &'a C, message: M) -> Self {
        Sending {
            channel,
            message: Some(message),
            waiter: None,
        }
    }
}

// The message is moved out by value, never pinned.
impl<M: Send, C: ?Sized + Channel<M>> Unpin for Sending<'_, M, C> {}

impl<M: Send, C: ?Sized + Channel<M>> Future for Sending<'_, M, C> {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let channel = this.channel;
        match channel.take_permit() {
            Ok(()) => return Poll::Ready(this.deliver()),
            Err(Error::Full) => {}
            Err(error) => {
                channel.forget_waiter(&mut this.waiter, true);
                this.message = None;
                return Poll::Ready(Err(error));
            }
        }
        // The registration (an RMW of `state` that sets the waiters bit), then a second look
        // for a permit: against `return_permit`'s RMW, one of the two sees the other.
        channel.register_waiter(&mut this.waiter, cx.waker());
        match channel.take_permit() {
            Ok(()) => Poll::Ready(this.deliver()),
            Err(Error::Full) => Poll::Pending,
            Err(error) => {
                channel.forget_waiter(&mut this.waiter, true);
                this.message = None;
                Poll::Ready(Err(error))
            }
        }
    }
}

impl<M: Send, C: ?Sized + Channel<M>> Sending<'_, M, C> {
    /// Pushes the message under the permit just taken.
    fn deliver(&mut self) -> Result<(), Error> {
        let message = self.message.take().expect("polled after it finished");
        // It takes a permit: a wake it got is used, not passed on. (Most sends never wait:
        // they skip the call, which may go through a vtable.)
        if self.waiter.is_some() {
            self.channel.forget_waiter(&mut self.waiter, false);
        }
        self.channel.push_permitted(message);
        Ok(())
    }
}

impl<M: Send, C: ?Sized + Channel<M>> Drop for Sending<'_, M, C> {
    fn drop(&mut self) {
        if self.waiter.is_some() {
            let holds_message = self.message.is_some();
            self.channel.forget_waiter(&mut self.waiter, holds_message);
        }
    }
}
