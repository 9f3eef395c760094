//! [`Context`]: what a handler reaches besides its actor's state: the runtime context of the
//! actor's task, its own ref, children, and the way to stop.

use crate::mailbox::Mailbox;
use crate::{Actor, Ref};
use std::sync::Arc;

/// A handler's view of its actor's surroundings. Handlers take it as `ctx: &mut
/// actors::Context<Self>`, the first argument after `self`.
pub struct Context<A: Actor> {
    runtime: runtime::Context,
    mailbox: Arc<Mailbox<A::Message>>,
    stopping: bool,
}

impl<A: Actor> Context<A> {
    pub(crate) fn new(runtime: runtime::Context, mailbox: Arc<Mailbox<A::Message>>) -> Self {
        Context {
            runtime,
            mailbox,
            stopping: false,
        }
    }

    pub(crate) fn mailbox(&self) -> &Arc<Mailbox<A::Message>> {
        &self.mailbox
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping
    }

    /// The runtime context of the actor's task: its clock, network, storage and metrics.
    /// Tasks spawned from it live in the actor's scope and are aborted when it stops.
    pub fn runtime(&self) -> &runtime::Context {
        &self.runtime
    }

    /// A ref to this actor. Like any ref, it keeps the actor reachable while it lives: an
    /// actor that keeps its own ref stops only by [`stop`](Self::stop) or its scope ending.
    pub fn actor_ref(&self) -> A::Ref {
        A::Ref::from(Ref::new(self.mailbox.clone()))
    }

    /// Stops the actor once the current handler returns, and `on_stop` runs. Unsupervised,
    /// or supervised and not restarted, the mailbox closes: messages still queued are dropped
    /// (their asks resolve to [`Error::Closed`](crate::Error::Closed)). A supervised actor
    /// that its supervisor restarts (a permanent child) keeps its mailbox, and the next
    /// incarnation handles what is queued.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// Spawns `child` in this actor's scope, with the child's own placement: it stops (its
    /// task aborted) when this actor stops.
    pub fn spawn<C: Actor>(&self, child: C) -> C::Ref {
        crate::spawn::spawn(child, &self.runtime)
    }

    /// The actor's label.
    pub fn label(&self) -> &'static str {
        A::LABEL
    }
}
