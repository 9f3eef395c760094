//! The loop that runs one incarnation of an actor: `on_start`, then one message at a time,
//! then `on_stop`.
//!
//! Invariants:
//! - Messages are handled one at a time, in mailbox order, each to completion (an async
//!   handler's awaits included) before the next is taken.
//! - A handler's panic is caught at the handler: the actor's state is still owned by the
//!   loop, so `on_stop` runs, and only then does the incarnation end with `Exit::Panicked`.
//!   The failed handler's future is dropped with the thread's unwinding flag set (see
//!   `refs::unwinding_handler`), so a reply channel it held reports
//!   [`Error::Panicked`](crate::Error::Panicked) rather than `Closed`.
//! - The loop stops before the next message when the handler called `Context::stop`, when a
//!   stop is requested (by a supervisor), or when no ref is left and the mailbox is empty.

use super::refs::set_unwinding_handler;
use crate::lifecycle::{Down, LinkExit, Signal};
use crate::mailbox::Received;
use crate::metrics::ActorMetrics;
use crate::{Actor, ActorId, Context, ExitReason};
use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::Poll;

/// How an incarnation ended.
pub(crate) enum Exit {
    /// `Context::stop`.
    Stopped,
    /// No ref is left and every message was handled.
    Unreachable,
    /// Its supervisor asked it to stop.
    Requested,
    /// A ref asked it to stop (`stop()`): done for good, whatever a supervisor's policy.
    Terminated,
    /// A linked actor ended abnormally: its id and reason (boxed: rare, and it would double
    /// the size of every actor's run loop).
    Linked(Box<(ActorId, ExitReason)>),
    /// A handler or hook panicked; the payload (boxed once more: a thin pointer keeps the
    /// exit, which every idle actor's future holds, at two words).
    Panicked(Box<Box<dyn Any + Send>>),
    /// Its task was aborted, or never ran: `on_stop` did not run.
    Aborted,
}

impl Exit {
    /// The reason refs, monitors and links see.
    pub(crate) fn reason(&self) -> ExitReason {
        match self {
            Exit::Stopped | Exit::Unreachable => ExitReason::Normal,
            Exit::Requested | Exit::Terminated => ExitReason::Stopped,
            Exit::Linked(linked) => ExitReason::Linked {
                partner: linked.0,
                reason: Box::new(linked.1.clone()),
            },
            Exit::Panicked(payload) => ExitReason::panicked(&***payload),
            Exit::Aborted => ExitReason::Shutdown,
        }
    }
}

/// Polls `future` to completion, catching a panic; a panicked future is dropped in place
/// with the unwinding flag set (see `refs::unwinding_handler`).
fn guarded<F: Future>(future: F) -> Guarded<F> {
    Guarded {
        future: Some(future),
    }
}

/// See [`guarded`]. A plain future rather than an `async fn`: its `poll` inlines into the
/// run loop, where an `async` wrapper was a call and a copy of the handler's future per
/// message (a third of a tell's cost on one worker).
struct Guarded<F> {
    /// Structurally pinned: never moved out, dropped in place (`set(None)`) or with `self`.
    future: Option<F>,
}

impl<F: Future> Future for Guarded<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is pinned with `self`: it is only ever reached through this
        // projection, never moved out of (it is dropped in place by `set`, or with `self`),
        // `Guarded` has no `Drop` of its own and is `Unpin` only when `F` is.
        let mut future = unsafe { self.map_unchecked_mut(|this| &mut this.future) };
        let running = future
            .as_mut()
            .as_pin_mut()
            .expect("polled after it finished");
        match catch_unwind(AssertUnwindSafe(|| running.poll(cx))) {
            Ok(Poll::Ready(output)) => {
                future.set(None);
                Poll::Ready(Ok(output))
            }
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                set_unwinding_handler(true);
                // A destructor panicking here is contained: the actor already failed.
                let _ = catch_unwind(AssertUnwindSafe(|| future.as_mut().set(None)));
                set_unwinding_handler(false);
                Poll::Ready(Err(payload))
            }
        }
    }
}

/// What the run loop needs from the incarnation it runs: its factory, its context and
/// metrics, and whom to tell that it started. Reached through one reference, kept in place
/// in the incarnation's future (an `async fn` stores each argument twice: as it was passed
/// and as the local it is moved to; see `spawn::Launch::run`).
pub(crate) trait Running<A: Actor> {
    /// Builds the actor; called once, where it runs. May panic.
    fn make(&mut self) -> A;
    /// `on_start` returned (`true`), or it or `make` panicked (`false`).
    fn started(&mut self, ok: bool);
    /// The actor's context and metrics.
    fn parts(&mut self) -> (&mut Context<A>, &mut ActorMetrics);
}

/// Runs the hook a down notification or (for an actor that traps exits) a linked actor's
/// exit is for; `signal` is taken whole, so the caller keeps nothing of it across the await.
async fn on_signal<A: Actor>(actor: &mut A, ctx: &mut Context<A>, signal: Signal) {
    match signal {
        Signal::Down(down) => {
            let Down { id, reason, .. } = *down;
            actor.on_down(ctx, id, reason).await;
        }
        Signal::Exit(linked) => {
            let LinkExit { from, reason } = *linked;
            actor.on_link_exit(ctx, from, reason).await;
        }
        Signal::Stop => {}
    }
}

/// Runs one incarnation of the actor `this` builds until it stops, and returns why. A
/// panicking factory is a failed start: `started(false)`, and no `on_stop` (there is no
/// actor to call it on).
// Not an `async fn` on purpose (clippy would make it one): see the comment inside.
#[allow(clippy::manual_async_fn)]
pub(crate) fn run<A: Actor>(this: &mut impl Running<A>) -> impl Future<Output = Exit> + '_ {
    // A block rather than an `async fn`, which would keep `this` twice (see `Running`).
    async move {
        let mut actor = match catch_unwind(AssertUnwindSafe(|| this.make())) {
            Ok(actor) => actor,
            Err(payload) => {
                this.started(false);
                this.parts().0.end_incarnation();
                return Exit::Panicked(Box::new(payload));
            }
        };
        let mut consumer = this
            .parts()
            .0
            .mailbox()
            .consumer()
            .expect("one incarnation consumes the mailbox at a time");
        let mut exit = match guarded(actor.on_start(this.parts().0)).await {
            Ok(()) => None,
            Err(payload) => Some(Exit::Panicked(Box::new(payload))),
        };
        this.started(exit.is_none());
        // The context and metrics are reached through `this` each time, not kept in locals:
        // two references fewer in every idle actor's future.
        'messages: while exit.is_none() {
            if this.parts().0.stopping() {
                exit = Some(Exit::Stopped);
                break;
            }
            // Neither `received` nor the signal taken out of it lives across an await: the
            // handler's future and a hook's then overlap in every idle actor's future, and
            // nothing beside them keeps the 24 bytes of a `Received`.
            let signal = 'signal: {
                let message = 'message: {
                    let received = match consumer.try_recv() {
                        Some(received) => received,
                        None => {
                            this.parts().1.idle();
                            consumer.recv_after_empty().await
                        }
                    };
                    match received {
                        Received::Message(message) => break 'message message,
                        Received::Signal(Signal::Exit(linked)) if !A::TRAPS_EXITS => {
                            exit = Some(Exit::Linked(Box::new((linked.from, linked.reason))));
                        }
                        Received::Signal(Signal::Stop) => exit = Some(Exit::Terminated),
                        Received::Signal(signal) => break 'signal signal,
                        Received::Stop => exit = Some(Exit::Requested),
                        Received::Disconnected => exit = Some(Exit::Unreachable),
                    }
                    continue 'messages;
                };
                this.parts().1.taken(consumer.mailbox().len());
                #[cfg(not(feature = "tracing"))]
                let handled = guarded(actor.handle(this.parts().0, message)).await;
                // The span is made before the message moves into the handler, which names it.
                #[cfg(feature = "tracing")]
                let handled = {
                    let id = this.parts().0.id();
                    let span = crate::trace::message(id, A::__handler_name(&message));
                    let handling = guarded(actor.handle(this.parts().0, message));
                    tracing::Instrument::instrument(handling, span).await
                };
                this.parts().1.handled(consumer.mailbox().len());
                if let Err(payload) = handled {
                    exit = Some(Exit::Panicked(Box::new(payload)));
                }
                continue 'messages;
            };
            if let Err(payload) = guarded(on_signal(&mut actor, this.parts().0, signal)).await {
                exit = Some(Exit::Panicked(Box::new(payload)));
            }
        }
        this.parts().1.idle();
        drop(consumer);
        this.parts().0.end_incarnation();
        let exit = exit.expect("set when the loop ends");
        // Boxed: it lives across `on_stop`'s awaits, in every idle actor's future otherwise.
        let reason = Box::new(exit.reason());
        let stopped = guarded(actor.on_stop(this.parts().0, &reason)).await;
        drop(actor);
        match (exit, stopped) {
            (Exit::Panicked(payload), _) => Exit::Panicked(payload),
            (_, Err(payload)) => Exit::Panicked(Box::new(payload)),
            (exit, Ok(())) => exit,
        }
    }
}
