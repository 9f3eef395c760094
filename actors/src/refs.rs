//! [`Ref`]: the sending end of an actor's mailbox, which the generated `<Name>Ref` wraps, and
//! [`Reply`]: the channel an ask's answer comes back on.
//!
//! A ref counts itself in the mailbox: when the last one is dropped, the actor handles what is
//! queued and stops. An ask costs one allocation (its reply channel); a tell none.

use crate::mailbox::Mailbox;
use crate::oneshot;
use crate::{Actor, Error};
use std::sync::Arc;

/// A handle to send messages to an actor of type `A`. Cloning it is an atomic increment.
pub struct Ref<A: Actor> {
    mailbox: Arc<Mailbox<A::Message>>,
}

impl<A: Actor> Ref<A> {
    pub(crate) fn new(mailbox: Arc<Mailbox<A::Message>>) -> Self {
        mailbox.add_sender();
        Ref { mailbox }
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

    /// Sends the message `make` builds around a reply channel, waiting for room, and waits for
    /// the reply.
    pub async fn ask<R>(&self, make: impl FnOnce(Reply<R>) -> A::Message) -> Result<R, Error> {
        let (sender, receiver) = oneshot::channel();
        let reply = Reply {
            sender: Some(sender),
        };
        self.mailbox.send(make(reply)).await?;
        match receiver.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Panicked)) => Err(Error::Panicked { actor: A::LABEL }),
            Err(oneshot::Canceled) => Err(Error::Closed),
        }
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
            .field("actor", &A::LABEL)
            .field("queued", &self.mailbox.len())
            .field("closed", &self.mailbox.is_closed())
            .finish()
    }
}

/// Where the answer to an ask goes. Dropped unanswered, the ask resolves to
/// [`Error::Closed`], or to [`Error::Panicked`] if dropped by a panicking handler.
pub struct Reply<R> {
    sender: Option<oneshot::Sender<Result<R, Panicked>>>,
}

/// What a reply dropped by a panicking handler sends.
struct Panicked;

impl<R> Reply<R> {
    /// A reply nobody waits for: what a tell carries.
    pub fn none() -> Self {
        Reply { sender: None }
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
            && (std::thread::panicking() || crate::actor::unwinding_handler())
        {
            sender.send(Err(Panicked));
        }
    }
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
