//! The [`Actor`] trait the `#[actor]` attributes implement, and the loop that runs one
//! incarnation of an actor: `on_start`, then one message at a time, then `on_stop`.
//!
//! Invariants:
//! - Messages are handled one at a time, in mailbox order, each to completion (an async
//!   handler's awaits included) before the next is taken.
//! - A handler's panic is caught at the handler: the actor's state is still owned by the
//!   loop, so `on_stop` runs, and only then does the incarnation end with `Exit::Panicked`.
//!   The failed handler's future is dropped with `UNWINDING_HANDLER` set, so a reply channel
//!   it held reports [`Error::Panicked`](crate::Error::Panicked) rather than `Closed`.
//! - The loop stops before the next message when the handler called `Context::stop`, when a
//!   stop is requested (by a supervisor), or when no ref is left and the mailbox is empty.

use crate::lifecycle::{Down, LinkExit, Signal};
use crate::mailbox::Received;
use crate::metrics::ActorMetrics;
use crate::{ActorId, Context, ExitReason};
use std::any::Any;
use std::cell::Cell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::Poll;

/// Where an actor's task runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On the shared pool of workers: the default, for actors that never block.
    Pool,
    /// On a thread (and ring) of its own, for the actor's whole life.
    Dedicated,
    /// On a thread of its own that may block (a blocking task).
    Blocking,
}

/// What `#[actor]` on a struct declares: its label, mailbox capacity and placement.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not declared as an actor",
    label = "no `#[actor]` on the struct `{Self}`",
    note = "put `#[actor]` (or `#[actor(dedicated)]`, `#[actor(blocking)]`) on the struct \
            declaration of `{Self}`"
)]
pub trait Declared: Sized + 'static {
    /// The supervision label and metric label; by default the type name in snake_case.
    const LABEL: &'static str;
    /// The mailbox's capacity in messages.
    const MAILBOX: usize;
    /// Where the actor runs.
    const PLACEMENT: Placement;
    /// The deadline of every ask to the actor unless the ask sets its own (`#[actor(ask_timeout
    /// = "5s")]`); none by default.
    const ASK_TIMEOUT: Option<std::time::Duration> = None;
    /// Where its incarnations' futures run: `OnPool` for `Placement::Pool` (they must be
    /// `Send`), `OnItsThread` otherwise (built and kept on the actor's thread); generated.
    #[doc(hidden)]
    type __Placed;
}

/// An actor: state with message handlers, run one message at a time. Implemented by
/// `#[actor]` on the struct's inherent impl; see the crate documentation.
///
/// Neither the state nor the futures of its handlers and hooks need be `Send` here: those of
/// a pool actor must be, which its generated `__launch` checks at its concrete type, while a
/// dedicated or blocking actor's are built on its thread and never leave it.
#[diagnostic::on_unimplemented(
    message = "the actor `{Self}` has no handlers",
    label = "`{Self}` needs an `#[actor] impl {Self} {{ ... }}` block",
    note = "put `#[actor]` on the inherent `impl {Self}` block holding its handlers (it may be \
            empty)"
)]
pub trait Actor: Declared {
    /// The messages its handlers take, one variant per handler (generated).
    type Message: Send + 'static;
    /// The typed ref `#[actor]` generates: `<Name>Ref`.
    type Ref: From<crate::Ref<Self>> + Clone + Send + Sync + 'static;

    /// Whether linked actors' exits reach [`on_link_exit`](Self::on_link_exit) (the actor
    /// declares that hook) instead of ending this actor too.
    const TRAPS_EXITS: bool = false;

    /// The message that runs `call` on the actor (a timer's tick, a stream's item); generated.
    #[doc(hidden)]
    fn __call(call: crate::timer::Call<Self>) -> Self::Message;

    /// Spawns an incarnation in `scope` (generated: it names the concrete type, where the
    /// compiler sees whether a pool actor's future is `Send`; see `spawn::Place`).
    #[doc(hidden)]
    fn __launch(scope: runtime::Context, launch: crate::spawn::Launch<Self>)
    -> runtime::Handle<()>;

    /// Runs the handler `message` is for.
    fn handle(
        &mut self,
        ctx: &mut Context<Self>,
        message: Self::Message,
    ) -> impl Future<Output = ()>;

    /// Runs before the first message.
    fn on_start(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ()> {
        let _ = ctx;
        async {}
    }

    /// Runs after the last message, whatever stopped the actor (but an abort of its task),
    /// with the reason it stops.
    fn on_stop(
        &mut self,
        ctx: &mut Context<Self>,
        reason: &ExitReason,
    ) -> impl Future<Output = ()> {
        let _ = (ctx, reason);
        async {}
    }

    /// A monitored actor ended (see [`Context::monitor`]); handled in mailbox order.
    fn on_down(
        &mut self,
        ctx: &mut Context<Self>,
        id: ActorId,
        reason: ExitReason,
    ) -> impl Future<Output = ()> {
        let _ = (ctx, id, reason);
        async {}
    }

    /// A linked actor ended (see [`Context::link`]); called only when
    /// [`TRAPS_EXITS`](Self::TRAPS_EXITS), in mailbox order, for normal ends too.
    fn on_link_exit(
        &mut self,
        ctx: &mut Context<Self>,
        id: ActorId,
        reason: ExitReason,
    ) -> impl Future<Output = ()> {
        let _ = (ctx, id, reason);
        async {}
    }
}

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

thread_local! {
    /// Set while a panicked handler's future is dropped (see the module doc).
    static UNWINDING_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Whether a panicked handler's future is being dropped on this thread.
pub(crate) fn unwinding_handler() -> bool {
    UNWINDING_HANDLER.with(Cell::get)
}

/// Polls `future` to completion, catching a panic; a panicked future is dropped in place
/// with `UNWINDING_HANDLER` set.
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
                UNWINDING_HANDLER.with(|flag| flag.set(true));
                // A destructor panicking here is contained: the actor already failed.
                let _ = catch_unwind(AssertUnwindSafe(|| future.as_mut().set(None)));
                UNWINDING_HANDLER.with(|flag| flag.set(false));
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
                let handled = guarded(actor.handle(this.parts().0, message)).await;
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
