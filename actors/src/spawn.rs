//! Starting an unsupervised actor: its mailbox, its task in a child scope named by its label
//! with its placement, and the guard that ends the actor however the task ends.
//!
//! Invariants:
//! - Every incarnation reports its end exactly once: `ended` runs with how the run loop
//!   ended, or, if the future is dropped first (an abort, a refused spawn, a panic outside a
//!   handler), with `Exit::Aborted` from the future's drop. Each end is counted in
//!   `actor_exits_total`.
//! - An unsupervised actor's mailbox is ended (closed, its joiners, monitors and links told)
//!   only after `on_stop` returned, so `stop()` and `join()` resolve after it.

use crate::actor::{Exit, run};
use crate::mailbox::Mailbox;
use crate::metrics::{ActorMetrics, Families};
use crate::{Actor, ActorId, Context, ExitReason, Placement, Ref};
use runtime::Spawner as _;
use std::sync::Arc;

/// `context` with `placement` applied.
pub(crate) fn placed(context: runtime::Context, placement: Placement) -> runtime::Context {
    match placement {
        Placement::Pool => context,
        Placement::Dedicated => context.dedicated(),
        Placement::Blocking => context.shared(true),
    }
}

/// A fresh mailbox for an actor of type `A`, with a fresh id.
pub(crate) fn mailbox<A: Actor>() -> Arc<Mailbox<A::Message>> {
    let mailbox = Mailbox::new(A::MAILBOX, ActorId::next(A::LABEL));
    mailbox.life.set_traps_exits(A::TRAPS_EXITS);
    mailbox
}

/// Runs `actor` in a child scope of `context` named by its label, with its placement, and
/// returns its ref. What `<Name>::spawn` calls. Actors of one label spawned from one context
/// share that scope's node (it lives while any of them does).
pub fn spawn<A: Actor>(actor: A, context: &runtime::Context) -> A::Ref {
    let mailbox = mailbox::<A>();
    let actor_ref = Ref::<A>::new(mailbox.clone());
    let ending = mailbox.clone();
    drop(spawn_incarnation(
        actor,
        context,
        mailbox,
        |_| {},
        move |exit, reason, _| {
            // Asks still queued resolve, and joiners learn the reason, before a panic goes on
            // to the runtime.
            ending.end(reason);
            if let Exit::Panicked(payload) = exit {
                std::panic::resume_unwind(payload);
            }
        },
    ));
    A::Ref::from(actor_ref)
}

/// An incarnation's metrics and what to call when it ends: with its exit (or
/// `Exit::Aborted` if dropped first), that exit's reason, and whether its `on_start` had
/// returned. Counts the exit either way.
struct OnEnd<F: FnOnce(Exit, ExitReason, bool)> {
    metrics: ActorMetrics,
    began: bool,
    ended: Option<F>,
}

impl<F: FnOnce(Exit, ExitReason, bool)> OnEnd<F> {
    fn call(mut self, exit: Exit) {
        self.end(exit);
    }

    fn end(&mut self, exit: Exit) {
        if let Some(ended) = self.ended.take() {
            let reason = exit.reason();
            self.metrics.exit(&reason);
            ended(exit, reason, self.began);
        }
    }
}

impl<F: FnOnce(Exit, ExitReason, bool)> Drop for OnEnd<F> {
    fn drop(&mut self) {
        self.end(Exit::Aborted);
    }
}

/// Spawns one incarnation of `actor` on `mailbox`, in the scope node its label shares under
/// `context`, with its placement: `started` runs once `on_start` returned (`true`) or
/// panicked, and `ended` gets how it ended (`Exit::Aborted` if its future is dropped first),
/// with its reason, and whether `on_start` had returned. Unsupervised actors and supervised children both
/// start here.
pub(crate) fn spawn_incarnation<A: Actor>(
    actor: A,
    context: &runtime::Context,
    mailbox: Arc<Mailbox<A::Message>>,
    started: impl FnOnce(bool) + Send + 'static,
    ended: impl FnOnce(Exit, ExitReason, bool) + Send + 'static,
) -> runtime::Handle<()> {
    // Counts the actor as running from here: a refused spawn drops it at once.
    let mut ended = OnEnd {
        metrics: Families::of(context).actor(A::LABEL),
        began: false,
        ended: Some(ended),
    };
    mailbox.bind_ask_timeouts(|| ended.metrics.ask_timeouts());
    placed(context.__shared_child(A::LABEL), A::PLACEMENT).spawn(move |runtime| async move {
        let mut ctx = Context::<A>::new(runtime, mailbox);
        let began = &mut ended.began;
        let started = move |ok| {
            *began = ok;
            started(ok);
        };
        let exit = run(actor, &mut ctx, &mut ended.metrics, started).await;
        ended.call(exit);
    })
}
