//! [`Call`]: a closure run on the actor in mailbox order. Timers and attached streams
//! (`timer`) deliver their work as calls; every generated message enum has a variant for one.

use crate::{Actor, Context};

/// A closure run on the actor in mailbox order (a timer's tick, an attached stream's item).
/// Not part of the public API: generated message enums carry it.
#[doc(hidden)]
pub struct Call<A: Actor> {
    /// One thin box: a `Call` is a variant of every generated message enum, so its size is a
    /// floor on every message's (each slot of the mailbox's queue, each copy of a message).
    closure: Box<Closure<A>>,
}

/// Shows nothing of the closure, which is opaque.
impl<A: Actor> std::fmt::Debug for Call<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").finish_non_exhaustive()
    }
}

/// What a [`Call`] runs.
type Closure<A> = dyn FnOnce(&mut A, &mut Context<A>) + Send;

impl<A: Actor> Call<A> {
    /// A call that runs `closure` on the actor; whoever makes it checks whether it still
    /// applies inside the closure (see `timer`).
    pub(crate) fn new(closure: impl FnOnce(&mut A, &mut Context<A>) + Send + 'static) -> Self {
        Call {
            closure: Box::new(closure),
        }
    }

    /// Runs the call on `actor` (what the generated `handle` does with its `__Call`).
    pub fn run(self, actor: &mut A, ctx: &mut Context<A>) {
        (self.closure)(actor, ctx);
    }
}
