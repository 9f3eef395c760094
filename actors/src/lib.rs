//! Typed actors on the runtime: declared with `#[actor]`, reached through generated refs,
//! with bounded mailboxes, supervised child scopes and OTP restart strategies.
//!
//! ```
//! use actors::prelude::*;
//!
//! #[actor(mailbox = 16)]
//! struct Counter {
//!     total: u64,
//! }
//!
//! #[actor]
//! impl Counter {
//!     async fn add(&mut self, by: u64) -> u64 {
//!         self.total += by;
//!         self.total
//!     }
//!
//!     fn total(&self) -> u64 {
//!         self.total
//!     }
//! }
//!
//! runtime::Runner::new(runtime::Config::default()).start(|context| async move {
//!     let counter: CounterRef = Counter { total: 0 }.spawn(&context);
//!     assert_eq!(counter.add(2).await, Ok(2));
//!     counter.tell_add(3).await.unwrap();
//!     assert_eq!(counter.total().await, Ok(5));
//! });
//! ```
//!
//! - `#[actor]` on a struct declares it an actor: placement `dedicated` (a thread of its
//!   own), `blocking` (a thread that may block) or none (the shared pool), and options
//!   `mailbox = N` (capacity, default 64) and `name = "label"` (supervision label and metric
//!   label, default the type name in snake_case). It generates `<Name>Ref` and
//!   `<Name>::spawn(self, &runtime::Context) -> <Name>Ref`.
//! - `#[actor]` on the struct's inherent impl makes every method taking `&self` or `&mut
//!   self` a handler (sync or async, optionally with `ctx: &mut actors::Context<Self>` first).
//!   For a handler `add(by: u64) -> u64`, the ref gets `add(by)` (an ask:
//!   `Result<u64, Error>`), `tell_add(by)` (a send that waits for mailbox room, no reply)
//!   and `try_add(by)` (a send that fails with [`Error::Full`] rather than wait). Methods
//!   named `on_start` and `on_stop` are hooks, run before the first and after the last
//!   message.
//! - Messages from one sender are handled in the order sent; one message at a time.
//! - An actor stops when a handler calls [`Context::stop`], when its last ref is dropped
//!   (after handling what is queued), when a ref's `stop()` asks it to (after what was
//!   queued before), when its parent scope ends, when a linked actor ends abnormally, or when
//!   a handler panics. Asks that it will not answer resolve to [`Error::Closed`] (or
//!   [`Error::Panicked`] for the one whose handler panicked); none hangs.
//! - Every actor has an [`ActorId`] (`label#n`) and ends with an [`ExitReason`], which
//!   `join()` and `stop()` on any ref resolve with, `on_stop(&mut self, reason:
//!   &ExitReason)` may take, and monitors and links deliver. `downgrade()` gives a
//!   [`WeakRef`], which does not keep the actor alive.
//! - Monitors and links, with OTP's semantics, from the [`Context`]: `ctx.monitor(&other)`
//!   delivers one down notification to the hook `on_down(&mut self, id: ActorId, reason:
//!   ExitReason)` in mailbox order; `ctx.link(&other)` ends each side when the other ends
//!   abnormally, unless it declares `on_link_exit(&mut self, id: ActorId, reason:
//!   ExitReason)` (it traps exits). Both hooks may take `ctx` first, and may be async.
//! - An ask is an [`Ask`] future: `.timeout(d)` gives it a deadline, and `#[actor(ask_timeout
//!   = "5s")]` one for every ask to the actor; past it the ask resolves to
//!   [`Error::Timeout`] (a message already queued is still handled, its reply dropped).
//! - A handler whose last argument is [`Reply<R>`] answers through it (a delegated reply):
//!   the ask resolves to `R` when someone sends on it, and to [`Error::Closed`] if it is
//!   dropped unanswered. Refs get `forward_<handler>(args, reply)` to hand a reply to
//!   another actor's handler.
//! - From a handler or hook, [`Context::run_after`], [`Context::run_every`] and
//!   [`Context::attach`] run closures on the actor in mailbox order (timers, a stream's
//!   items), until cancelled by their [`Timer`] or the actor's end.
//! - Actors may be generic (`#[actor] struct Cache<K, V>` and `#[actor] impl<K, V> Cache<K,
//!   V>`, with the same bounds, `'static` among them and `Send` on the shared pool), giving
//!   `CacheRef<K, V>`;
//!   handlers may not be generic, nor may an actor borrow (lifetime parameters). One
//!   `#[actor]` impl per actor struct.
//! - A dedicated or blocking actor's state need not be `Send`: [`spawn_with`] (also
//!   [`Context::spawn_with`] and [`ChildSpec::new`](supervisor::ChildSpec::new)) calls a
//!   `Send` factory on the actor's own thread, and the state never leaves it; its ref is
//!   `Send + Sync` as always. On the shared pool such an actor is a compile error.
//! - [`#[interface]`](interface) on a trait of handler signatures generates `<Trait>Ref`,
//!   a ref any implementing actor can stand behind (`#[actor(implements(Trait))]` on its
//!   inherent impl, `#[actor] impl Trait for Actor`), with the same ask, `tell_`, `try_` and
//!   `forward_` methods; `<handler>_recipient()` gives one handler as a [`Recipient`].
//! - [`Registry::of`] names actors per runtime (weakly, removed when they end);
//!   [`Topic`] publishes to recipients in one order with a [`WhenFull`] policy; [`Pool`] runs
//!   N supervised members behind `<Name>PoolRef`, routed round-robin, least-loaded or by key.
//! - Metrics per label (`actor_messages_handled_total`, `actor_handler_seconds_total`,
//!   `actor_mailbox_depth`, `actor_restarts_total`, `actor_running`,
//!   `actor_ask_timeouts_total`, and `actor_exits_total` also by reason) appear in
//!   `context.encode()`.

#![warn(missing_docs, missing_debug_implementations)]

mod actor;
mod clock;
mod error;
mod exit;
mod id;
mod lifecycle;
mod mailbox;
mod metrics;
mod oneshot;
pub mod pool;
pub mod registry;
#[cfg(feature = "remote")]
pub mod remote;
pub mod supervisor;
mod sync;
mod thread_bound;
mod timer;
pub mod topic;
#[cfg(feature = "tracing")]
mod trace;

pub use actor::context::Context;
pub use actor::erased::{ErasedAsk, ErasedQueued, Recipient};
pub use actor::refs::{ActorHandle, Ask, Join, PeerHandle, Queued, Ref, Reply, WeakRef};
pub use actor::spawn::{spawn, spawn_with};
pub use actor::{Actor, Declared, Placement};
pub use error::Error;
pub use exit::ExitReason;
pub use id::ActorId;
pub use lifecycle::Monitor;
pub use pool::{Pool, PoolRef, Routing};
pub use registry::{Registrable, Registry};
pub use runtime_macros::{actor, interface};
pub use timer::{Attachment, Timer};
pub use topic::{Topic, WhenFull};

/// What actor code needs in scope: the `#[actor]` attribute, the actor traits (anonymously)
/// and the runtime's prelude.
pub mod prelude {
    pub use crate::Actor as _;
    pub use crate::ActorHandle as _;
    pub use crate::actor;
    pub use crate::interface;
    pub use runtime::prelude::*;
}

/// Reply channels (one per ask in flight or answered but not yet received) alive in the
/// process now, in debug builds; `None` in release builds, which do not count them. For
/// tests that check asks leave nothing behind.
#[doc(hidden)]
pub fn __live_reply_slots() -> Option<usize> {
    oneshot::live()
}

/// What generated code names. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::actor::call::Call;
    pub use crate::actor::erased::{ErasedRef, Implements, WeakErasedRef};
    pub use crate::actor::spawn::{Launch, Moved, OnItsThread, OnPool, Place, spawn_moved};
    pub use runtime;
    #[cfg(feature = "remote")]
    pub use serde;

    /// What `#[actor(remote)]` expands to first: nothing with the `remote` feature, a clear
    /// error without it.
    #[cfg(feature = "remote")]
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __remote_enabled {
        () => {};
    }

    /// What `#[actor(remote)]` expands to first: nothing with the `remote` feature, a clear
    /// error without it.
    #[cfg(not(feature = "remote"))]
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __remote_enabled {
        () => {
            ::core::compile_error!(
                "#[actor(remote)] and #[interface(remote)] need the `remote` feature of actors: \
                 write `actors = { ..., features = [\"remote\"] }` in Cargo.toml"
            );
        };
    }
    pub use __remote_enabled as remote_enabled;

    /// What generated code wraps its `tracing` glue in (the handler names of a message
    /// enum): the items as written with the `tracing` feature of actors, nothing without it,
    /// so the feature decides in this crate and an actor's crate need not declare it.
    #[cfg(feature = "tracing")]
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __if_tracing {
        ($($item:tt)*) => { $($item)* };
    }

    /// What generated code wraps its `tracing` glue in: without the `tracing` feature,
    /// nothing.
    #[cfg(not(feature = "tracing"))]
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __if_tracing {
        ($($item:tt)*) => {};
    }
    pub use __if_tracing as if_tracing;
}
