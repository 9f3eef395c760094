//! Refs that hide the actor's type: an interface ref (any actor that implements an
//! `#[interface]`, see [`crate::interface`]) and a [`Recipient`] (one handler of one actor).
//!
//! Both hold an [`ErasedRef<I>`]: a counted ref to an actor's mailbox that takes messages of
//! type `I` and converts each into the actor's own message as it is pushed. A send through
//! one is the typed send (the same permit, waiters and push, see `mailbox`) through a virtual
//! call per step, and allocates nothing the typed send does not (a tell nothing, an ask its
//! reply channel): the erased ref allocates once, when it is made from a typed ref.
//!
//! Invariants:
//! - An erased ref counts in the mailbox's senders exactly like a typed ref: it keeps the
//!   actor reachable, and the last ref of any kind dropped lets it stop.
//! - The conversion is a plain function (`fn(I) -> M`), so an erased ref captures nothing but
//!   the mailbox: it is `Send + Sync` whatever the actor is.

use super::refs::{Asking, Deadline, Reply};
use crate::lifecycle::{Peer, request_ordered_stop};
use crate::mailbox::{Channel, Mailbox};
use crate::{Actor, ActorHandle, ActorId, Error, Join, PeerHandle, Ref};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// An actor whose messages carry those of an interface, `I`: what `#[actor(implements(..))]`
/// on its inherent impl declares. Not part of the public API.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the actor `{Self}` does not take the interface messages `{I}`",
    label = "`{Self}` does not list this interface",
    note = "list the interface in `#[actor(implements(..))]` on `{Self}`'s inherent `impl` block"
)]
pub trait Implements<I>: Actor {
    /// `message` as one of the actor's messages.
    fn wrap(message: I) -> Self::Message;
}

/// An actor's mailbox seen as a channel of `I`, with what a ref needs besides sending.
pub(crate) trait ErasedMailbox<I>: Channel<I> {
    fn add_sender(&self);
    fn try_add_sender(&self) -> bool;
    fn remove_sender(&self);
    fn peer(&self) -> Arc<dyn Peer>;
    fn label(&self) -> &'static str;
    fn ask_timeout(&self) -> Option<Duration>;
    fn is_closed(&self) -> bool;
}

/// `Mailbox<M>` taking `I`, converted by `wrap`.
struct Converting<M, I> {
    mailbox: Arc<Mailbox<M>>,
    wrap: fn(I) -> M,
    label: &'static str,
    ask_timeout: Option<Duration>,
}

impl<M: Send + 'static, I: Send> Channel<I> for Converting<M, I> {
    #[inline]
    fn take_permit(&self) -> Result<(), Error> {
        Channel::take_permit(&*self.mailbox)
    }

    fn register_waiter(&self, waiter: &mut Option<u64>, waker: &Waker) {
        self.mailbox.register_waiter(waiter, waker);
    }

    fn forget_waiter(&self, waiter: &mut Option<u64>, holds_message: bool) {
        self.mailbox.forget_waiter(waiter, holds_message);
    }

    #[inline]
    fn push_permitted(&self, message: I) {
        self.mailbox.push_permitted((self.wrap)(message));
    }

    fn id(&self) -> ActorId {
        Channel::id(&*self.mailbox)
    }

    fn count_ask_timeout(&self) {
        Channel::count_ask_timeout(&*self.mailbox);
    }
}

impl<M: Send + 'static, I: Send> ErasedMailbox<I> for Converting<M, I> {
    fn add_sender(&self) {
        self.mailbox.add_sender();
    }

    fn try_add_sender(&self) -> bool {
        self.mailbox.try_add_sender()
    }

    fn remove_sender(&self) {
        self.mailbox.remove_sender();
    }

    fn peer(&self) -> Arc<dyn Peer> {
        self.mailbox.clone()
    }

    fn label(&self) -> &'static str {
        self.label
    }

    fn ask_timeout(&self) -> Option<Duration> {
        self.ask_timeout
    }

    fn is_closed(&self) -> bool {
        self.mailbox.is_closed()
    }
}

/// A ref that sends `I`, whatever the actor behind it; what interface refs and
/// [`Recipient`]s wrap. Counted like a [`Ref`]: it keeps the actor reachable. Not part of the
/// public API: generated interface refs name it.
#[doc(hidden)]
pub struct ErasedRef<I> {
    mailbox: Arc<dyn ErasedMailbox<I>>,
}

impl<I: Send + 'static> ErasedRef<I> {
    /// An erased ref to `actor`, sending `I` as `wrap` converts it.
    pub fn new<A: Actor>(actor: &Ref<A>, wrap: fn(I) -> A::Message) -> Self {
        let mailbox = actor.mailbox().clone();
        mailbox.add_sender();
        ErasedRef {
            mailbox: Arc::new(Converting {
                mailbox,
                wrap,
                label: A::LABEL,
                ask_timeout: A::ASK_TIMEOUT,
            }),
        }
    }

    /// Sends `message`, waiting while the mailbox is full ([`Ref::send`]).
    pub async fn send(&self, message: I) -> Result<(), Error> {
        crate::mailbox::Sending::new(&*self.mailbox, message).await
    }

    /// Sends `message` if the mailbox has room now ([`Ref::try_send`]).
    pub fn try_send(&self, message: I) -> Result<(), Error> {
        self.try_send_or_return(message).map_err(|(error, _)| error)
    }

    /// [`try_send`](Self::try_send), handing the message back when it is refused.
    pub(crate) fn try_send_or_return(&self, message: I) -> Result<(), (Error, I)> {
        match self.mailbox.take_permit() {
            Ok(()) => {
                self.mailbox.push_permitted(message);
                Ok(())
            }
            Err(error) => Err((error, message)),
        }
    }

    /// Asks with the message `make` builds around a reply channel ([`Ref::ask`]).
    #[inline]
    pub fn ask<R>(&self, make: impl FnOnce(Reply<R>) -> I) -> ErasedAsk<'_, I, R> {
        ErasedAsk(Asking::new(
            &*self.mailbox,
            make,
            self.mailbox.label(),
            self.mailbox.ask_timeout(),
        ))
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.mailbox.id()
    }

    /// The actor's label (what generated remote interfaces report a panic with).
    pub fn __label(&self) -> &'static str {
        self.mailbox.label()
    }

    /// Asks the actor to stop after what is queued ([`Ref::stop`]).
    pub fn stop(&self) -> Join {
        let peer = self.mailbox.peer();
        request_ordered_stop(&*peer);
        Join::on(peer)
    }

    /// Resolves with the actor's exit reason whenever it ends ([`Ref::join`]).
    pub fn join(&self) -> Join {
        Join::on(self.mailbox.peer())
    }

    /// Whether the actor has stopped for good.
    pub fn is_closed(&self) -> bool {
        self.mailbox.is_closed()
    }
}

impl<I> ErasedRef<I> {
    /// A ref to the same actor that does not keep it alive.
    pub fn downgrade(&self) -> WeakErasedRef<I> {
        WeakErasedRef {
            mailbox: self.mailbox.clone(),
        }
    }
}

/// An [`ErasedRef`] that does not keep its actor alive (what a registry holds for an
/// interface ref). Not part of the public API.
#[doc(hidden)]
pub struct WeakErasedRef<I> {
    mailbox: Arc<dyn ErasedMailbox<I>>,
}

impl<I> std::fmt::Debug for WeakErasedRef<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakErasedRef")
            .field("actor", &self.mailbox.id())
            .finish()
    }
}

impl<I> WeakErasedRef<I> {
    /// The counted ref, while the actor runs and some ref still reaches it.
    pub fn upgrade(&self) -> Option<ErasedRef<I>> {
        self.mailbox.try_add_sender().then(|| ErasedRef {
            mailbox: self.mailbox.clone(),
        })
    }
}

impl<I> Clone for ErasedRef<I> {
    fn clone(&self) -> Self {
        self.mailbox.add_sender();
        ErasedRef {
            mailbox: self.mailbox.clone(),
        }
    }
}

impl<I> Drop for ErasedRef<I> {
    fn drop(&mut self) {
        self.mailbox.remove_sender();
    }
}

impl<I> std::fmt::Debug for ErasedRef<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErasedRef")
            .field("actor", &self.mailbox.id())
            .field("closed", &self.mailbox.is_closed())
            .finish()
    }
}

impl<I> ActorHandle for ErasedRef<I> {
    fn actor_id(&self) -> ActorId {
        self.mailbox.id()
    }

    fn __peer(&self) -> PeerHandle {
        PeerHandle(self.mailbox.peer())
    }
}

/// An ask through an erased ref (an interface ref's or a [`Recipient`]'s): resolves as an
/// [`Ask`](crate::Ask) does, deadline included.
#[must_use = "an ask does nothing unless awaited"]
pub struct ErasedAsk<'a, I: Send, R>(Asking<'a, I, dyn ErasedMailbox<I>, R>);

impl<'a, I: Send, R> ErasedAsk<'a, I, R> {
    /// Gives the ask a deadline of `timeout` from its first poll, in place of the actor's
    /// `ask_timeout` ([`Ask::timeout`](crate::Ask::timeout)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.0.deadline = Deadline::After(timeout);
        self
    }

    /// Waits only until the message is queued, then gives the ask back, to be awaited for
    /// its reply later ([`Ask::queued`](crate::Ask::queued)).
    pub fn queued(self) -> ErasedQueued<'a, I, R> {
        ErasedQueued(Some(self))
    }
}

/// An [`ErasedAsk`] until its message is queued: see [`ErasedAsk::queued`]. Resolves to the
/// ask, or to the error that kept the message out (`Closed`, `Timeout`).
#[must_use = "a queued ask does nothing unless awaited"]
pub struct ErasedQueued<'a, I: Send, R>(Option<ErasedAsk<'a, I, R>>);

impl<'a, I: Send, R> Future for ErasedQueued<'a, I, R> {
    type Output = Result<ErasedAsk<'a, I, R>, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        super::refs::poll_until_queued(&mut self.0, cx, |ask, cx| ask.0.poll_queued(cx))
    }
}

impl<I: Send, R> std::fmt::Debug for ErasedQueued<'_, I, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ErasedQueued").field(&self.0).finish()
    }
}

impl<I: Send, R> Future for ErasedAsk<'_, I, R> {
    type Output = Result<R, Error>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll(cx)
    }
}

impl<I: Send, R> std::fmt::Debug for ErasedAsk<'_, I, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One handler of one actor, with the actor's type erased: what a callback takes. `Args`
/// is the handler's argument (a tuple for several, `()` for none) and `R` its reply. Cheap to
/// clone; it keeps the actor reachable, like a ref. Made by the generated
/// `<handler>_recipient()` of a ref.
pub struct Recipient<Args, R> {
    inner: ErasedRef<(Args, Reply<R>)>,
}

impl<Args: Send + 'static, R: Send + 'static> Recipient<Args, R> {
    /// The recipient of the handler of `actor` that `wrap` builds messages for (generated).
    #[doc(hidden)]
    pub fn __new<A: Actor>(actor: &Ref<A>, wrap: fn((Args, Reply<R>)) -> A::Message) -> Self {
        Recipient {
            inner: ErasedRef::new(actor, wrap),
        }
    }

    /// Asks the handler: resolves to its reply, as the typed ref's ask does.
    pub fn ask(&self, args: Args) -> ErasedAsk<'_, (Args, Reply<R>), R> {
        self.inner.ask(|reply| (args, reply))
    }

    /// Sends without waiting for the reply; waits while the mailbox is full.
    pub async fn tell(&self, args: Args) -> Result<(), Error> {
        self.inner.send((args, Reply::none())).await
    }

    /// Sends without waiting for the reply if the mailbox has room now: [`Error::Full`] if
    /// not.
    pub fn try_tell(&self, args: Args) -> Result<(), Error> {
        self.inner.try_send((args, Reply::none()))
    }

    /// [`try_tell`](Self::try_tell), handing the arguments back when refused.
    pub(crate) fn try_tell_or_return(&self, args: Args) -> Result<(), (Error, Args)> {
        self.inner
            .try_send_or_return((args, Reply::none()))
            .map_err(|(error, (args, _))| (error, args))
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.inner.id()
    }

    /// Whether the actor has stopped for good.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
}

impl<Args, R> Clone for Recipient<Args, R> {
    fn clone(&self) -> Self {
        Recipient {
            inner: self.inner.clone(),
        }
    }
}

impl<Args, R> std::fmt::Debug for Recipient<Args, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recipient")
            .field("actor", &self.inner.mailbox.id())
            .finish()
    }
}

impl<Args, R> ActorHandle for Recipient<Args, R> {
    fn actor_id(&self) -> ActorId {
        self.inner.actor_id()
    }

    fn __peer(&self) -> PeerHandle {
        self.inner.__peer()
    }
}
