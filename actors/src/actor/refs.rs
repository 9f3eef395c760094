//! [`Ref`]: the sending end of an actor's mailbox, which the generated `<Name>Ref` wraps;
//! [`WeakRef`]: one that does not keep the actor alive; [`Join`]: waiting for the actor's end;
//! and [`Reply`]: the channel an ask's answer comes back on.
//!
//! A ref counts itself in the mailbox: when the last one is dropped, the actor handles what is
//! queued and stops. A weak ref holds the mailbox but is not counted, and becomes a
//! ref again only while the count is above zero (see `Mailbox::try_add_sender`). An ask costs
//! one allocation (its reply channel); a tell none.

use crate::lifecycle::{Peer, request_ordered_stop};
use crate::mailbox::{Channel, Mailbox, Sending};
use crate::oneshot;
use crate::{Actor, ActorId, Error, ExitReason};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A handle to send messages to an actor of type `A`. Cloning it is an atomic increment.
pub struct Ref<A: Actor> {
    mailbox: Arc<Mailbox<A::Message>>,
}

impl<A: Actor> Ref<A> {
    pub(crate) fn new(mailbox: Arc<Mailbox<A::Message>>) -> Self {
        mailbox.add_sender();
        Ref { mailbox }
    }

    /// A ref to `mailbox` while some ref still reaches it (the count is above zero): what a
    /// weak ref or a timer upgrades to.
    pub(crate) fn upgrade(mailbox: &Arc<Mailbox<A::Message>>) -> Option<Self> {
        mailbox.try_add_sender().then(|| Ref {
            mailbox: mailbox.clone(),
        })
    }

    /// Sends `message`, waiting while the mailbox is full. Fails with [`Error::Closed`] if the
    /// actor has stopped.
    pub async fn send(&self, message: A::Message) -> Result<(), Error> {
        self.mailbox.send(message).await
    }

    /// Sends `message` if the mailbox has room now: [`Error::Full`] if not, [`Error::Closed`]
    /// if the actor has stopped.
    pub fn try_send(&self, message: A::Message) -> Result<(), Error> {
        self.mailbox.try_send(message).map_err(|(error, _)| error)
    }

    /// Builds the message `make` makes around a reply channel: the [`Ask`] sends it (waiting
    /// for room) and waits for the reply, within the actor's `ask_timeout` if it has one or
    /// the ask's own [`timeout`](Ask::timeout).
    pub fn ask<R>(&self, make: impl FnOnce(Reply<R>) -> A::Message) -> Ask<'_, A, R> {
        Ask(asking::<A, R>(&self.mailbox, make), None)
    }

    /// [`ask`](Self::ask) through this ref, which the ask owns: what a pool's ask is, the ref
    /// being the member it routed to. The ask lives as long as its caller wants.
    pub(crate) fn into_ask<'a, R>(
        self,
        make: impl FnOnce(Reply<R>) -> A::Message,
    ) -> Ask<'a, A, R> {
        // SAFETY: `channel` points into the mailbox's heap allocation, which `self.mailbox`
        // (an `Arc`) keeps alive while `self` lives; `self` moves into the ask's second field,
        // so the allocation lives at least as long as the ask (moving the ask moves the
        // `Arc`'s pointer, not the mailbox). The reference goes only into the ask's first
        // field, whose `Asking` (and its `Sending`) never hands it out: every use of it,
        // drops included, happens while the ask exists, and the first field is dropped before
        // the second (declaration order), also when a panic unwinds through a drop. So the
        // reference is valid wherever it is used, though its type says `'a`.
        let channel: &'a Mailbox<A::Message> = unsafe { &*Arc::as_ptr(&self.mailbox) };
        Ask(asking::<A, R>(channel, make), Some(self))
    }

    /// The mailbox, for the erased refs made from this one.
    pub(crate) fn mailbox(&self) -> &Arc<Mailbox<A::Message>> {
        &self.mailbox
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.mailbox.life.id()
    }

    /// Asks the actor to stop once it has handled the messages queued before this call, and
    /// resolves with its [`ExitReason`] once its `on_stop` has finished: `Stopped`, or why it
    /// ended first. At once for an actor that already ended. A supervised actor stopped this
    /// way is done for good: its supervisor does not restart it. The request is made when
    /// `stop` is called, so dropping the future does not withdraw it.
    pub fn stop(&self) -> Join {
        request_ordered_stop(&*self.mailbox);
        self.join()
    }

    /// Resolves with the actor's [`ExitReason`] whenever it ends (for a supervised actor: when
    /// it ends for good, not restarted), without asking it to. At once if it already ended.
    /// The future holds no ref: it does not keep the actor alive.
    pub fn join(&self) -> Join {
        Join {
            peer: self.mailbox.clone(),
            slot: None,
        }
    }

    /// A ref that does not keep the actor alive; [`WeakRef::upgrade`] gives this one back
    /// while the actor runs.
    pub fn downgrade(&self) -> WeakRef<A> {
        WeakRef::new(&self.mailbox)
    }

    /// Whether the actor has stopped for good (its mailbox is closed).
    pub fn is_closed(&self) -> bool {
        self.mailbox.is_closed()
    }

    /// Messages waiting in the mailbox now.
    pub fn queued(&self) -> usize {
        self.mailbox.len()
    }

    /// The mailbox's capacity.
    pub fn capacity(&self) -> usize {
        self.mailbox.capacity()
    }
}

impl<A: Actor> Clone for Ref<A> {
    fn clone(&self) -> Self {
        Ref::new(self.mailbox.clone())
    }
}

impl<A: Actor> Drop for Ref<A> {
    fn drop(&mut self) {
        self.mailbox.remove_sender();
    }
}

impl<A: Actor> std::fmt::Debug for Ref<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ref")
            .field("actor", &self.id())
            .field("queued", &self.mailbox.len())
            .field("closed", &self.mailbox.is_closed())
            .finish()
    }
}

/// An ask: resolves to the handler's reply, or to why there is none.
///
/// Its deadline, if it has one, runs from the first poll and covers both the wait for room
/// in the mailbox and the wait for the reply. When it passes the ask resolves to
/// [`Error::Timeout`]: a message still waiting for room is dropped, never queued; one
/// already queued is still handled, and its reply is dropped with the reply channel when
/// the handler sends it (nothing is kept for the asker that left). A deadline costs a timer
/// registration only when the reply is not there on the first poll, and its removal.
///
/// The deadline is a runtime timer: an ask with one must be polled on a runtime thread (a
/// pool worker, a dedicated or blocking task), or it panics as a runtime `Sleep` does. An
/// ask without one needs no runtime. A reply forwarded to another actor (`forward_`) that
/// panics there reports [`Error::Panicked`] with the label of the actor asked.
///
/// A pool's ask (`<Name>PoolRef`'s handler methods, [`PoolRef::ask`](crate::PoolRef::ask)) is
/// this same type: it holds the ref of the member the pool routed it to.
#[must_use = "an ask does nothing unless awaited"]
pub struct Ask<'a, A: Actor, R>(
    // Declared (so dropped) first: it may borrow the mailbox the second field keeps alive.
    Asking<'a, A::Message, Mailbox<A::Message>, R>,
    /// The ref the ask was made through, when the ask owns it (a pool's); `None` when it
    /// borrows it. Never read: held for what it keeps alive.
    #[allow(dead_code)]
    Option<Ref<A>>,
);

impl<'a, A: Actor, R> Ask<'a, A, R> {
    /// Gives the ask a deadline of `timeout` from its first poll (from now, if it was polled
    /// already), in place of the actor's `ask_timeout`; [`Duration::MAX`] means none.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.0.deadline = Deadline::After(timeout);
        self
    }

    /// Waits only until the message is queued (while the mailbox is full, within the ask's
    /// deadline), then gives the ask back, to be awaited for its reply later. For a caller
    /// that pipelines: asks queued one after another reach the actor in that order, and
    /// their replies are awaited while more are queued.
    pub fn queued(self) -> Queued<'a, A, R> {
        Queued(Some(self))
    }
}

/// An [`Ask`] until its message is queued: see [`Ask::queued`]. Resolves to the ask, or to
/// the error that kept the message out (`Closed`, `Timeout`).
#[must_use = "a queued ask does nothing unless awaited"]
pub struct Queued<'a, A: Actor, R>(Option<Ask<'a, A, R>>);

/// Shows the ask it waits to queue (`None` once resolved).
impl<A: Actor, R> std::fmt::Debug for Queued<'_, A, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Queued").field(&self.0).finish()
    }
}

impl<'a, A: Actor, R> Future for Queued<'a, A, R> {
    type Output = Result<Ask<'a, A, R>, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_until_queued(&mut self.0, cx, |ask, cx| ask.0.poll_queued(cx))
    }
}

/// What a queued ask's future does, for the typed and the erased ask alike: polls the ask in
/// `slot` until its message is queued, then gives the ask back; on an error, drops it (its
/// message never went in) and gives the error. Panics if polled after it resolved.
pub(crate) fn poll_until_queued<T>(
    slot: &mut Option<T>,
    cx: &mut Context<'_>,
    poll_queued: impl FnOnce(&mut T, &mut Context<'_>) -> Poll<Result<(), Error>>,
) -> Poll<Result<T, Error>> {
    let ask = slot
        .as_mut()
        .expect("a queued ask polled after it resolved");
    match poll_queued(ask, cx) {
        Poll::Ready(Ok(())) => Poll::Ready(Ok(slot.take().expect("present"))),
        Poll::Ready(Err(error)) => {
            *slot = None;
            Poll::Ready(Err(error))
        }
        Poll::Pending => Poll::Pending,
    }
}

impl<A: Actor, R> Future for Ask<'_, A, R> {
    type Output = Result<R, Error>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll(cx)
    }
}

impl<A: Actor, R> std::fmt::Debug for Ask<'_, A, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// An ask of the message `make` builds, to the actor `A` on `channel`, with the actor's
/// `ask_timeout`: what [`Ref::ask`] and [`Ref::into_ask`] build. With the `tracing` feature
/// it knows the handler asked (read off the message as it is made) for the timeout event.
#[inline]
fn asking<'a, A: Actor, R>(
    channel: &'a Mailbox<A::Message>,
    make: impl FnOnce(Reply<R>) -> A::Message,
) -> Asking<'a, A::Message, Mailbox<A::Message>, R> {
    #[cfg(not(feature = "tracing"))]
    return Asking::new(channel, make, A::LABEL, A::ASK_TIMEOUT);
    #[cfg(feature = "tracing")]
    {
        let mut handler = "";
        let make = |reply| {
            let message = make(reply);
            handler = A::__handler_name(&message);
            message
        };
        let mut asking = Asking::new(channel, make, A::LABEL, A::ASK_TIMEOUT);
        asking.handler = handler;
        asking
    }
}

/// An ask on any channel: what [`Ask`] and [`ErasedAsk`](crate::ErasedAsk) are. See
/// [`Ask`] for its deadline.
pub(crate) struct Asking<'a, M: Send, C: ?Sized + Channel<M>, R> {
    /// The send, until the message is queued.
    sending: Option<Sending<'a, M, C>>,
    channel: &'a C,
    receiver: oneshot::Receiver<Result<R, Panicked>>,
    pub(crate) deadline: Deadline,
    /// The label of the actor asked, for `Error::Panicked`.
    label: &'static str,
    /// The handler asked, for the `tracing` feature's timeout event; empty when the ask's
    /// maker does not know it (an erased ask).
    #[cfg(feature = "tracing")]
    pub(crate) handler: &'static str,
}

/// An ask's deadline: none, a duration from the first poll, or the sleep that counts it.
pub(crate) enum Deadline {
    None,
    After(Duration),
    Sleeping(runtime::Sleep),
}

impl<'a, M: Send, C: ?Sized + Channel<M>, R> Asking<'a, M, C, R> {
    /// An ask of the message `make` builds around a fresh reply channel, on `channel`, to
    /// the actor labelled `label`, with the deadline `ask_timeout` unless the ask sets one.
    #[inline]
    pub(crate) fn new(
        channel: &'a C,
        make: impl FnOnce(Reply<R>) -> M,
        label: &'static str,
        ask_timeout: Option<Duration>,
    ) -> Self {
        let (sender, receiver) = oneshot::channel();
        let reply = Reply {
            sender: Some(sender),
        };
        Asking {
            sending: Some(Sending::new(channel, make(reply))),
            channel,
            receiver,
            deadline: match ask_timeout {
                Some(timeout) => Deadline::After(timeout),
                None => Deadline::None,
            },
            label,
            #[cfg(feature = "tracing")]
            handler: "",
        }
    }

    /// Whether the deadline passed; starts it on the first call.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if let Deadline::After(timeout) = self.deadline {
            if timeout == Duration::MAX {
                self.deadline = Deadline::None;
                return false;
            }
            self.deadline = Deadline::Sleeping(runtime::Sleep::new(timeout));
        }
        match &mut self.deadline {
            Deadline::Sleeping(sleep) => Pin::new(sleep).poll(cx).is_ready(),
            _ => false,
        }
    }

    /// Ready once the message is queued (or will never be).
    pub(crate) fn poll_queued(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if let Some(sending) = &mut self.sending {
            match Pin::new(sending).poll(cx) {
                Poll::Ready(Ok(())) => self.sending = None,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return self.timed_out(cx),
            }
        }
        Poll::Ready(Ok(()))
    }

    #[inline]
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<R, Error>> {
        if let Some(sending) = &mut self.sending {
            match Pin::new(sending).poll(cx) {
                Poll::Ready(Ok(())) => self.sending = None,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return self.timed_out(cx),
            }
        }
        match Pin::new(&mut self.receiver).poll(cx) {
            Poll::Ready(Ok(Ok(value))) => Poll::Ready(Ok(value)),
            Poll::Ready(Ok(Err(Panicked))) => {
                Poll::Ready(Err(Error::Panicked { actor: self.label }))
            }
            Poll::Ready(Err(oneshot::Canceled)) => Poll::Ready(Err(Error::Closed)),
            Poll::Pending => self.timed_out(cx),
        }
    }

    /// Pending, or `Timeout` (counted) once the deadline passed.
    fn timed_out<T>(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, Error>> {
        if !self.expired(cx) {
            return Poll::Pending;
        }
        self.deadline = Deadline::None;
        // The message, if not queued yet, goes now: it is never handled.
        self.sending = None;
        self.channel.count_ask_timeout();
        #[cfg(feature = "tracing")]
        crate::trace::ask_timed_out(self.channel.id(), self.handler);
        Poll::Ready(Err(Error::Timeout))
    }
}

impl<M: Send, C: ?Sized + Channel<M>, R> std::fmt::Debug for Asking<'_, M, C, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ask")
            .field("actor", &self.channel.id())
            .field("queued", &self.sending.is_none())
            .finish()
    }
}

/// The end of an actor, as [`Ref::join`] and [`Ref::stop`] wait for it.
pub struct Join {
    peer: Arc<dyn Peer>,
    /// Where this join's waker is registered, once it is.
    slot: Option<usize>,
}

/// A join on `peer`, for the lifecycle's unit tests.
#[cfg(all(test, not(actors_loom)))]
pub(crate) fn tests_join(peer: Arc<dyn Peer>) -> Join {
    Join { peer, slot: None }
}

impl Join {
    /// A join on `peer`.
    pub(crate) fn on(peer: Arc<dyn Peer>) -> Self {
        Join { peer, slot: None }
    }
}

impl Future for Join {
    type Output = ExitReason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ExitReason> {
        let this = &mut *self;
        match this.peer.life().poll_join(&mut this.slot, cx.waker()) {
            Some(reason) => {
                this.slot = None;
                Poll::Ready(reason)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Join {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.peer.life().forget_join(slot);
        }
    }
}

impl std::fmt::Debug for Join {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Join")
            .field("actor", &self.peer.life().id())
            .finish()
    }
}

/// A ref that does not keep its actor alive: for timers, registries and self-messages that
/// must not stop an actor from ending when nobody else can reach it.
///
/// It holds the mailbox's memory (not its messages: an ended actor's are dropped), so that
/// [`join`](Self::join) still knows why the actor ended after it did.
pub struct WeakRef<A: Actor> {
    mailbox: Arc<Mailbox<A::Message>>,
}

impl<A: Actor> WeakRef<A> {
    pub(crate) fn new(mailbox: &Arc<Mailbox<A::Message>>) -> Self {
        WeakRef {
            mailbox: mailbox.clone(),
        }
    }

    /// The typed ref, while the actor runs and some ref still reaches it; `None` once it
    /// ended or is finishing because its last ref was dropped.
    pub fn upgrade(&self) -> Option<A::Ref> {
        Ref::upgrade(&self.mailbox).map(A::Ref::from)
    }

    /// [`upgrade`](Self::upgrade), to the untyped ref (for generated code, where the
    /// typed ref's name is known but not yet that it is `A::Ref`).
    #[doc(hidden)]
    pub fn __upgrade_ref(&self) -> Option<Ref<A>> {
        Ref::upgrade(&self.mailbox)
    }

    /// The actor's id, whether or not it still runs.
    pub fn id(&self) -> ActorId {
        self.mailbox.life.id()
    }

    /// Resolves with the actor's [`ExitReason`] when it ends, like [`Ref::join`].
    pub fn join(&self) -> Join {
        Join {
            peer: self.mailbox.clone(),
            slot: None,
        }
    }
}

impl<A: Actor> Clone for WeakRef<A> {
    fn clone(&self) -> Self {
        WeakRef::new(&self.mailbox)
    }
}

impl<A: Actor> std::fmt::Debug for WeakRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakRef")
            .field("actor", &self.id())
            .finish()
    }
}

/// Anything that names an actor: its generated ref, a [`Ref`] or a [`WeakRef`]. What
/// [`Context::monitor`](crate::Context::monitor) and [`Context::link`](crate::Context::link)
/// take.
pub trait ActorHandle {
    /// The actor's id.
    fn actor_id(&self) -> ActorId;

    /// The actor's life, type-erased.
    #[doc(hidden)]
    fn __peer(&self) -> PeerHandle;
}

/// An actor's life, type-erased (what [`ActorHandle`] gives). Not part of the public API.
#[doc(hidden)]
pub struct PeerHandle(pub(crate) Arc<dyn Peer>);

impl std::fmt::Debug for PeerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PeerHandle")
            .field(&self.0.life().id())
            .finish()
    }
}

impl<A: Actor> ActorHandle for Ref<A> {
    fn actor_id(&self) -> ActorId {
        self.id()
    }

    fn __peer(&self) -> PeerHandle {
        PeerHandle(self.mailbox.clone())
    }
}

impl<A: Actor> ActorHandle for WeakRef<A> {
    fn actor_id(&self) -> ActorId {
        self.id()
    }

    fn __peer(&self) -> PeerHandle {
        PeerHandle(self.mailbox.clone())
    }
}

/// Where the answer to an ask goes. Dropped unanswered, the ask resolves to
/// [`Error::Closed`], or to [`Error::Panicked`] if dropped by a panicking handler.
pub struct Reply<R> {
    sender: Option<oneshot::Sender<Result<R, Panicked>>>,
}

/// Shows whether an ask waits for this reply (a tell's reply goes nowhere).
impl<R> std::fmt::Debug for Reply<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("wanted", &self.sender.is_some())
            .finish()
    }
}

/// What a reply dropped by a panicking handler sends.
pub(crate) struct Panicked;

impl<R> Reply<R> {
    /// A reply nobody waits for: what a tell carries.
    pub fn none() -> Self {
        Reply { sender: None }
    }

    /// A reply whose answer comes out of the receiver (what a remote ask's server awaits),
    /// and which is no longer wanted once `expiry` says so.
    #[cfg(feature = "remote")]
    pub(crate) fn expiring(
        expiry: std::sync::Arc<dyn oneshot::Expiry>,
    ) -> (Self, oneshot::Receiver<Result<R, Panicked>>) {
        let (sender, receiver) = oneshot::expiring(expiry);
        let reply = Reply {
            sender: Some(sender),
        };
        (reply, receiver)
    }

    /// Whether the asker can no longer take the answer, so the handler is not run (generated
    /// code asks before it runs one): true only for a remote ask whose deadline has passed
    /// or whose serving node was cut off since it was sent. A local ask always runs.
    #[doc(hidden)]
    pub fn __expired(&self) -> bool {
        self.sender.as_ref().is_some_and(oneshot::Sender::expired)
    }

    /// Answers the ask. An asker that gave up is not an error.
    pub fn send(mut self, value: R) {
        if let Some(sender) = self.sender.take() {
            sender.send(Ok(value));
        }
    }
}

impl<R> Drop for Reply<R> {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take()
            && (std::thread::panicking() || unwinding_handler())
        {
            sender.send(Err(Panicked));
        }
    }
}

thread_local! {
    /// Set by the run loop while it drops a panicked handler's future (see `run`): a reply
    /// dropped meanwhile reports `Panicked`, though the thread is no longer panicking.
    static UNWINDING_HANDLER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a panicked handler's future is being dropped on this thread.
fn unwinding_handler() -> bool {
    UNWINDING_HANDLER.with(std::cell::Cell::get)
}

/// Marks (or unmarks) this thread as dropping a panicked handler's future.
pub(crate) fn set_unwinding_handler(unwinding: bool) {
    UNWINDING_HANDLER.with(|flag| flag.set(unwinding));
}

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;

    /// A reply travels inside every ask's message, in every mailbox slot: it stays one
    /// pointer wide (a tell's empty reply is the null niche).
    #[test]
    fn a_reply_is_one_pointer_wide() {
        assert_eq!(
            std::mem::size_of::<Reply<u64>>(),
            std::mem::size_of::<usize>()
        );
        assert_eq!(
            std::mem::size_of::<Reply<String>>(),
            std::mem::size_of::<usize>()
        );
    }
}
