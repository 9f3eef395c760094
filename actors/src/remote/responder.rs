//! [`Responder`]: the replies of one remote message as its handler makes them, turned into
//! the bytes that go back to the asker (or into nothing, for a tell). What the generated
//! `Remote::__message` calls; below the serving loop, which makes one per message.

use super::codec::{self, Failure};
use super::liveness::{Refusal, Ticket};
use crate::Reply;
use crate::actor::refs::Panicked;
use crate::oneshot::Canceled;
use serde::Serialize;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A reply's bytes once the handler answered, or `None`: no reply at all.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>;

/// Makes the replies of one remote message: real ones for an ask, none for a tell (what a
/// generated `Remote::__message` calls for its handler's reply).
pub struct Responder {
    ask: bool,
    label: &'static str,
    /// The ask's deadline and the node's liveness, when it has a deadline.
    ticket: Option<Arc<Ticket>>,
    /// The node's name, for the failure of an ask refused as sent while it was cut off.
    node: Arc<str>,
    pending: Option<Pending>,
}

/// Shows the actor's label, the node, whether an ask waits for the reply and whether one is
/// on its way.
impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("label", &self.label)
            .field("node", &self.node)
            .field("ask", &self.ask)
            .field("pending", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// The replies of a message (`ask`: one that wants a reply) to the actor labelled
    /// `label` on node `node`, within `ticket`'s deadline when it has one.
    pub(crate) fn new(
        ask: bool,
        label: &'static str,
        ticket: Option<Arc<Ticket>>,
        node: Arc<str>,
    ) -> Self {
        Responder {
            ask,
            label,
            ticket,
            node,
            pending: None,
        }
    }

    /// The reply's bytes to come, once the handler took its reply.
    pub(crate) fn into_pending(self) -> Option<Pending> {
        self.pending
    }

    /// The reply of the handler the message is for.
    pub fn reply<R: Serialize + Send + 'static>(&mut self) -> Reply<R> {
        if !self.ask {
            return Reply::none();
        }
        let (reply, receiver) = match &self.ticket {
            Some(ticket) => Reply::expiring(ticket.clone()),
            None => Reply::expiring(Arc::new(NeverExpires)),
        };
        let label = self.label;
        let ticket = self.ticket.clone();
        let node = self.node.clone();
        self.pending = Some(Box::pin(async move {
            match receiver.await {
                Ok(Ok(value)) => Some(codec::reply::<R>(Ok(value))),
                Ok(Err(Panicked)) => Some(codec::reply::<R>(Err(Failure::Panicked(label.into())))),
                // Not run because its asker may have given up: say why.
                Err(Canceled) => match ticket.as_ref().and_then(|ticket| ticket.not_run()) {
                    Some(refusal) => refused(refusal, &node).map(codec::reply::<()>),
                    None => Some(codec::reply::<R>(Err(Failure::Closed))),
                },
            }
        }));
        reply
    }
}

/// An ask without a deadline (sent by another client than a node): always wanted.
struct NeverExpires;

impl crate::oneshot::Expiry for NeverExpires {
    fn expired(&self) -> bool {
        false
    }
}

/// What an asker is told of an ask refused for `refusal` by the node `node`: nothing for
/// one sent to an incarnation of this node's name it never had (it may be another node
/// still serving the name, whose answer must not be raced).
pub(crate) fn refused(refusal: Refusal, node: &str) -> Option<Result<(), Failure>> {
    match refusal {
        Refusal::Expired => Some(Err(Failure::Timeout)),
        Refusal::CutOff | Refusal::OldIncarnation => Some(Err(Failure::NodeDown(node.to_string()))),
        Refusal::OtherIncarnation => None,
    }
}
