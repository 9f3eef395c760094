//! The traits that say what travels and what is served: [`Protocol`] (a set of handlers as
//! they travel, and the hash of their signatures), [`Remote`] (an actor reachable from other
//! nodes), [`Served`] (what an exposure delivers to) and [`Exposable`] (a local ref that can
//! be exposed). Generated code implements them; the serving loop and `Node::expose` use them.

use super::responder::Responder;
use crate::{Actor, ActorHandle, ActorId, Error, Join, Ref};

/// A set of handlers as they travel: a remote actor's (the actor type itself), or a remote
/// interface's (a generated marker type). Implemented by `#[actor(remote)]` and
/// `#[interface(remote)]`.
pub trait Protocol: 'static {
    /// The handlers' messages as they travel (generated).
    #[doc(hidden)]
    type Wire: serde::Serialize + serde::de::DeserializeOwned + Send + 'static;

    /// A hash of the handlers' names, argument and reply types, in order, as compiled
    /// (generated): requests carry it, so nodes running other handlers refuse them.
    #[doc(hidden)]
    const SCHEMA: u32;
}

/// An actor whose handlers can be reached from other nodes: implemented by `#[actor(remote)]`.
pub trait Remote: Actor + Protocol {
    /// The message for the local mailbox, with replies that `responder` sends back.
    #[doc(hidden)]
    fn __message(wire: Self::Wire, responder: &mut Responder) -> Self::Message;
}

/// What an exposure serves: a local actor's ref, or an interface ref (generated), which
/// takes the handlers' messages as they travel and puts them in the actor's mailbox without
/// waiting.
#[doc(hidden)]
pub trait Served: ActorHandle + Send + Sync + 'static {
    /// The handlers it serves.
    type Protocol: Protocol;

    /// Puts `wire` in the mailbox if it has room now, with replies `responder` sends back.
    fn __deliver(
        &self,
        wire: <Self::Protocol as Protocol>::Wire,
        responder: &mut Responder,
    ) -> Result<(), Error>;

    /// The actor's label (for `Error::Panicked`).
    fn __label(&self) -> &'static str;

    /// Whether the actor has stopped for good.
    fn __is_closed(&self) -> bool;
}

impl<A: Remote> Served for Ref<A> {
    type Protocol = A;

    fn __deliver(&self, wire: A::Wire, responder: &mut Responder) -> Result<(), Error> {
        self.try_send(A::__message(wire, responder))
    }

    fn __label(&self) -> &'static str {
        A::LABEL
    }

    fn __is_closed(&self) -> bool {
        self.is_closed()
    }
}

/// The end of what `served` serves.
pub(crate) fn join_of(served: &impl Served) -> (ActorId, Join) {
    (served.actor_id(), Join::on(served.__peer().0))
}

/// One step of the handlers' schema hash (FNV-1a over `signature`'s bytes), for generated
/// code.
#[doc(hidden)]
pub const fn __schema_mix(mut hash: u32, signature: &str) -> u32 {
    let bytes = signature.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        hash ^= bytes[at] as u32;
        hash = hash.wrapping_mul(0x0100_0193);
        at += 1;
    }
    // A separator, so that ("ab", "c") and ("a", "bc") differ.
    hash ^= 0xff;
    hash.wrapping_mul(0x0100_0193)
}

/// A local ref that [`Node::expose`](crate::remote::Node::expose) can serve: the generated `<Name>Ref` of a remote actor,
/// or `<Trait>Ref` of a remote interface.
pub trait Exposable {
    /// What the exposure holds.
    #[doc(hidden)]
    type Served: Served;

    #[doc(hidden)]
    fn __served(&self) -> Self::Served;
}
