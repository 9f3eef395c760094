//! An actor: the [`Actor`] trait the `#[actor]` attributes implement, and below it what an
//! actor is made of, each in a child module with one job:
//!
//! - `call`: a closure queued as a message (a timer's tick, a stream's item).
//! - `refs`: the typed handles that send to an actor ([`Ref`](crate::Ref),
//!   [`WeakRef`](crate::WeakRef), asks and their replies).
//! - `erased`: the same with the actor's type erased (interface refs, recipients).
//! - `context`: what a handler reaches besides its state ([`Context`]).
//! - `run`: the loop that runs one incarnation.
//! - `spawn`: how an actor gets a mailbox and a task.
//!
//! The trait names its context, its ref and the spawn and call types its generated impl
//! fills in, and they name it back: they are one module, whose children depend on each other
//! only in that order (see `actors/ARCHITECTURE.md`).

pub(crate) mod call;
pub(crate) mod context;
pub(crate) mod erased;
pub(crate) mod refs;
pub(crate) mod run;
pub(crate) mod spawn;

use crate::{ActorId, Context, ExitReason};
use std::future::Future;

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
    /// Whether a panic that ends an unsupervised incarnation goes on to fail the runner
    /// (`#[actor(panic_fails_runner = true)]`), as a panicking plain task does under the
    /// runtime's panic policy. By default it does not: the panic ends the actor with
    /// [`ExitReason::Panicked`](crate::ExitReason::Panicked), its monitors, links and joiners
    /// see that, and a report goes to stderr. A supervised actor's panic always goes to its
    /// supervisor.
    const PANIC_FAILS_RUNNER: bool = false;
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
    fn __call(call: call::Call<Self>) -> Self::Message;

    /// The name of the handler `message` is for (the method's; `call` for a closure run on
    /// the actor), which the `tracing` feature's message spans carry; generated.
    #[cfg(feature = "tracing")]
    #[doc(hidden)]
    fn __handler_name(message: &Self::Message) -> &'static str;

    /// Spawns an incarnation in `scope` (generated: it names the concrete type, where the
    /// compiler sees whether a pool actor's future is `Send`; see `spawn::Place`).
    #[doc(hidden)]
    fn __launch(scope: runtime::Context, launch: spawn::Launch<Self>) -> runtime::Handle<()>;

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
