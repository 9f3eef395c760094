//! Starting an unsupervised actor: its mailbox, its task in a child scope named by its label
//! with its placement, and the guard that closes the mailbox however the task ends.

use crate::actor::{Exit, run};
use crate::mailbox::Mailbox;
use crate::metrics::Families;
use crate::{Actor, Context, Placement, Ref};
use runtime::Spawner as _;
use std::sync::Arc;

/// Closes a mailbox when dropped: when its actor's task ends, is aborted, or is never started
/// (the runtime refused the spawn), so that no send or ask waits on a mailbox nobody reads.
pub(crate) struct CloseOnDrop<M: Send>(pub(crate) Arc<Mailbox<M>>);

impl<M: Send> Drop for CloseOnDrop<M> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// `context` with `placement` applied.
pub(crate) fn placed(context: runtime::Context, placement: Placement) -> runtime::Context {
    match placement {
        Placement::Pool => context,
        Placement::Dedicated => context.dedicated(),
        Placement::Blocking => context.shared(true),
    }
}

/// Runs `actor` in a child scope of `context` named by its label, with its placement, and
/// returns its ref. What `<Name>::spawn` calls. Actors of one label spawned from one context
/// share that scope's node (it lives while any of them does).
pub fn spawn<A: Actor>(actor: A, context: &runtime::Context) -> A::Ref {
    let mailbox = Mailbox::new(A::MAILBOX);
    let actor_ref = Ref::<A>::new(mailbox.clone());
    let closer = CloseOnDrop(mailbox.clone());
    drop(spawn_incarnation(
        actor,
        context,
        mailbox,
        || {},
        move |exit| {
            // Asks still queued resolve before a panic goes on to the runtime.
            drop(closer);
            if let Exit::Panicked(payload) = exit {
                std::panic::resume_unwind(payload);
            }
        },
    ));
    A::Ref::from(actor_ref)
}

/// Spawns one incarnation of `actor` on `mailbox`, in the scope node its label shares under
/// `context`, with its placement: `started` runs once `on_start` returned, and `ended` gets
/// how it ended. Unsupervised actors and supervised children both start here.
pub(crate) fn spawn_incarnation<A: Actor>(
    actor: A,
    context: &runtime::Context,
    mailbox: Arc<Mailbox<A::Message>>,
    started: impl FnOnce() + Send + 'static,
    ended: impl FnOnce(Exit) + Send + 'static,
) -> runtime::Handle<()> {
    // Counts the actor as running from here: a refused spawn drops it at once.
    let mut metrics = Families::of(context).actor(A::LABEL);
    placed(context.__shared_child(A::LABEL), A::PLACEMENT).spawn(move |runtime| async move {
        let mut ctx = Context::<A>::new(runtime, mailbox);
        let exit = run(actor, &mut ctx, &mut metrics, started).await;
        ended(exit);
    })
}
