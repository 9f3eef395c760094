//! Starting an unsupervised actor: its mailbox, its task in a child scope named by its label
//! with its placement, and the guard that ends the actor however the task ends.
//!
//! Invariants:
//! - Every incarnation reports its end exactly once: `ended` runs with how the run loop
//!   ended, or, if the future is dropped first (an abort, a refused spawn, a panic outside a
//!   handler), with `Exit::Aborted` from the future's drop. Each end is counted in
//!   `actor_exits_total`, and the incarnation leaves `actor_running`, before `ended` runs:
//!   whoever hears of the end (a joiner, a monitor, its supervisor) finds it counted.
//! - An unsupervised actor's mailbox is ended (closed, its joiners, monitors and links told)
//!   only after `on_stop` returned, so `stop()` and `join()` resolve after it.
//! - The actor is built inside its incarnation's future, from a `Send` factory: on the pool
//!   that future must be `Send` (checked at the concrete actor type, see [`Place`]); on a
//!   thread of its own it is a [`ThreadBound`] one, so state that is not `Send` is built,
//!   used and dropped on that thread only.

use super::run::{Exit, Running, run};
use crate::mailbox::Mailbox;
use crate::metrics::{ActorMetrics, Families};
use crate::thread_bound::ThreadBound;
use crate::{Actor, ActorId, Context, ExitReason, Placement, Ref};
use runtime::Spawner as _;
use std::future::Future;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
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
    let mailbox = Mailbox::new(A::MAILBOX, ActorId::next(&A::LABEL));
    mailbox.life.set_traps_exits(A::TRAPS_EXITS);
    mailbox
}

/// Runs `actor` in a child scope of `context` named by its label, with its placement, and
/// returns its ref. What `<Name>::spawn` calls. Actors of one label spawned from one context
/// share that scope's node (it lives while any of them does). The actor is built here and
/// moved to where it runs, so it must be `Send`; see [`spawn_with`] for one that is not.
pub fn spawn<A: Actor + Send>(actor: A, context: &runtime::Context) -> A::Ref {
    spawn_with(context, move || actor)
}

/// An actor on its way to where it runs, for `<Name>::spawn(self, ..)`: `Send` exactly when
/// the actor is. The generated `spawn` requires `Moved<'_, Self>: Send` rather than `Self:
/// Send`, which the compiler would reject at its definition for an actor that is not `Send`
/// (a bound naming no parameter must hold); the lifetime only makes the bound a parameter's.
#[doc(hidden)]
pub struct Moved<'a, A>(A, PhantomData<&'a ()>);

/// Shows nothing of the actor, which need not be `Debug`.
impl<A> std::fmt::Debug for Moved<'_, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Moved").finish_non_exhaustive()
    }
}

impl<A> Moved<'_, A> {
    pub fn new(actor: A) -> Self {
        Moved(actor, PhantomData)
    }

    fn into_inner(self) -> A {
        self.0
    }
}

/// What the generated `<Name>::spawn(self, context)` calls: [`spawn`] for an actor shown
/// `Send` through [`Moved`].
#[doc(hidden)]
pub fn spawn_moved<'a: 'static, A: Actor>(actor: Moved<'a, A>, context: &runtime::Context) -> A::Ref
where
    Moved<'a, A>: Send,
{
    spawn_with(context, move || actor.into_inner())
}

/// Runs the actor `factory` builds, as [`spawn`] does, calling `factory` where the actor
/// runs: on its own thread for a dedicated or blocking actor, whose state then need not be
/// `Send` (it never leaves that thread; its ref is `Send + Sync` all the same). What
/// `<Name>::spawn_with` calls. A panicking factory ends the actor as a panicking `on_start`
/// would.
pub fn spawn_with<A: Actor>(
    context: &runtime::Context,
    factory: impl FnOnce() -> A + Send + 'static,
) -> A::Ref {
    let mailbox = mailbox::<A>();
    let actor_ref = Ref::<A>::new(mailbox.clone());
    let ending = mailbox.clone();
    drop(spawn_incarnation(
        factory,
        context,
        mailbox,
        |_| {},
        move |exit, reason, _| {
            let id = ending.life.id();
            // Asks still queued resolve, and joiners learn the reason, before a panic is
            // reported or goes on to the runtime.
            ending.end(reason.clone());
            if let Exit::Panicked(payload) = exit {
                if A::PANIC_FAILS_RUNNER {
                    std::panic::resume_unwind(*payload);
                }
                report_panic(id, &reason);
            }
        },
    ));
    A::Ref::from(actor_ref)
}

/// Reports an unsupervised actor's panic, which ended that actor and nothing else. The panic
/// hook has already printed where it happened; this line says what became of it. A closed or
/// failing stderr loses the line, never the program.
fn report_panic(id: ActorId, reason: &ExitReason) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "actor {id} exited ({reason}); its monitors, links and joiners see \
         ExitReason::Panicked, and the program goes on (`#[actor(panic_fails_runner = true)]` \
         fails the runner instead)"
    );
}

/// What one incarnation calls, in one allocation: the factory that builds the actor where it
/// runs, then `started` and `ended`, each at most once.
trait Hooks<A>: Send {
    /// Builds the actor; called at most once (never for a spawn that was refused).
    fn make(&mut self) -> A;
    /// `on_start` returned (`true`), or it or `make` panicked (`false`); called at most once.
    fn started(&mut self, ok: bool);
    /// How the incarnation ended, with that exit's reason and whether `on_start` had
    /// returned; consumes the hooks.
    fn ended(self: Box<Self>, exit: Exit, reason: ExitReason, began: bool);
}

/// [`Hooks`] made of three closures. `make` and `started` are dropped as they are called, so
/// what they hold goes then, not with the incarnation; their memory goes with the hooks, at
/// the end, so a factory larger than [`INLINE_FACTORY`] is boxed on its own (an actor moved
/// in by `spawn` would otherwise keep a dead copy of itself for its whole life).
struct Closures<M, S, E> {
    /// Taken by `make` (which sets `made`); dropped with the hooks if never taken.
    make: ManuallyDrop<M>,
    /// Taken by `started` (which sets `told`); dropped with the hooks if never taken.
    started: ManuallyDrop<S>,
    /// Taken by `ended`.
    ended: Option<E>,
    made: bool,
    told: bool,
}

impl<M, S, E> Closures<M, S, E> {
    fn new(make: M, started: S, ended: E) -> Self {
        Closures {
            make: ManuallyDrop::new(make),
            started: ManuallyDrop::new(started),
            ended: Some(ended),
            made: false,
            told: false,
        }
    }

    /// Drops `make` and `started` if they were never called.
    fn drop_uncalled(&mut self) {
        if !self.made {
            self.made = true;
            // SAFETY: `made` was clear, so `make` still holds its closure; setting the flag
            // first means nothing takes or drops it again, even if this drop panics.
            unsafe { ManuallyDrop::drop(&mut self.make) };
        }
        if !self.told {
            self.told = true;
            // SAFETY: as above, with `told` for `started`.
            unsafe { ManuallyDrop::drop(&mut self.started) };
        }
    }
}

impl<M, S, E> Drop for Closures<M, S, E> {
    fn drop(&mut self) {
        self.drop_uncalled();
    }
}

impl<A, M, S, E> Hooks<A> for Closures<M, S, E>
where
    M: FnOnce() -> A + Send,
    S: FnOnce(bool) + Send,
    E: FnOnce(Exit, ExitReason, bool) + Send,
{
    fn make(&mut self) -> A {
        assert!(!self.made, "an incarnation builds its actor once");
        self.made = true;
        // SAFETY: `made` was clear, so `make` still holds its closure, taken once here: the
        // flag is set first, so nothing takes or drops it again (a panicking call consumed it).
        let make = unsafe { ManuallyDrop::take(&mut self.make) };
        make()
    }

    fn started(&mut self, ok: bool) {
        if !self.told {
            self.told = true;
            // SAFETY: as in `make`, with `told` for `started`.
            let started = unsafe { ManuallyDrop::take(&mut self.started) };
            started(ok);
        }
    }

    fn ended(mut self: Box<Self>, exit: Exit, reason: ExitReason, began: bool) {
        // What was never called (a refused spawn, or a future dropped before `on_start`
        // returned) goes before the end is reported: a supervisor waiting for `started` sees
        // it dropped first.
        self.drop_uncalled();
        let ended = self.ended.take().expect("an incarnation ends once");
        drop(self);
        ended(exit, reason, began);
    }
}

/// The largest factory kept inline in an incarnation's hooks: a cache line.
const INLINE_FACTORY: usize = 64;

/// An incarnation's metrics and its hooks, which get its end: its exit (or `Exit::Aborted`
/// if dropped first), that exit's reason, and whether its `on_start` had returned. Counts
/// the exit either way.
struct OnEnd<A> {
    /// Also keeps whether `on_start` returned ([`ActorMetrics::began`]), in its spare bytes.
    metrics: ActorMetrics,
    hooks: Option<Box<dyn Hooks<A>>>,
    /// The actor and the incarnation's number on its mailbox, for its span and events.
    #[cfg(feature = "tracing")]
    id: ActorId,
    #[cfg(feature = "tracing")]
    incarnation: u32,
}

impl<A> OnEnd<A> {
    fn call(mut self, exit: Exit) {
        self.end(exit);
    }

    fn hooks(&mut self) -> &mut dyn Hooks<A> {
        self.hooks
            .as_deref_mut()
            .expect("an incarnation's hooks stay until its end")
    }

    fn end(&mut self, exit: Exit) {
        if let Some(hooks) = self.hooks.take() {
            let reason = exit.reason();
            self.metrics.exit(&reason);
            // Before the hooks tell anyone (joiners, monitors, a supervisor that may start the
            // next incarnation at once): the metrics then say the incarnation ended by the
            // time anyone hears of it, not once this guard is dropped after them.
            self.metrics.leave();
            #[cfg(feature = "tracing")]
            crate::trace::exited(self.id, self.incarnation, &reason);
            hooks.ended(exit, reason, self.metrics.began);
        }
    }
}

impl<A> Drop for OnEnd<A> {
    fn drop(&mut self) {
        self.end(Exit::Aborted);
    }
}

/// Spawns one incarnation of the actor `make` builds on `mailbox`, in the scope node its
/// label shares under `context`, with its placement: `started` runs once `on_start` returned
/// (`true`) or panicked (or `make` did), and `ended` gets how it ended (`Exit::Aborted` if
/// its future is dropped first), with its reason, and whether `on_start` had returned.
/// Unsupervised actors and supervised children both start here. The three closures share
/// one allocation.
pub(crate) fn spawn_incarnation<A: Actor>(
    make: impl FnOnce() -> A + Send + 'static,
    context: &runtime::Context,
    mailbox: Arc<Mailbox<A::Message>>,
    started: impl FnOnce(bool) + Send + 'static,
    ended: impl FnOnce(Exit, ExitReason, bool) + Send + 'static,
) -> runtime::Handle<()> {
    let hooks: Box<dyn Hooks<A>> = if size_of_val(&make) <= INLINE_FACTORY {
        Box::new(Closures::new(make, started, ended))
    } else {
        let make: Box<dyn FnOnce() -> A + Send> = Box::new(make);
        Box::new(Closures::new(make, started, ended))
    };
    // Counts the actor as running from here: a refused spawn drops it at once.
    let ended = OnEnd {
        metrics: Families::of(context).actor(A::LABEL),
        hooks: Some(hooks),
        #[cfg(feature = "tracing")]
        id: mailbox.life.id(),
        #[cfg(feature = "tracing")]
        incarnation: mailbox.next_incarnation(),
    };
    mailbox.bind_ask_timeouts(|| ended.metrics.ask_timeouts());
    let scope = placed(context.child(A::LABEL), A::PLACEMENT);
    A::__launch(scope, Launch { mailbox, ended })
}

/// Everything one incarnation needs, before it runs: its mailbox, and its hooks (what
/// builds the actor, and what to call when it has started and when it ends). `Send`
/// whatever the actor is: the actor itself exists only once [`run`](Self::run) has begun,
/// where it runs.
///
/// Generated code hands it to [`Place::launch`] at the actor's concrete type, where the
/// compiler can see whether the incarnation's future is `Send` (see [`Place`]).
#[doc(hidden)]
pub struct Launch<A: Actor> {
    mailbox: Arc<Mailbox<A::Message>>,
    ended: OnEnd<A>,
}

impl<A: Actor> std::fmt::Debug for Launch<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("actor", &self.mailbox.life.id())
            .finish_non_exhaustive()
    }
}

impl<A: Actor> Launch<A> {
    /// The incarnation: builds the actor (a panicking factory is a failed start), runs it,
    /// and reports its end.
    ///
    /// Not an `async fn`: one stores its arguments twice (as passed, and as the locals they
    /// are moved to), and this future is most of an idle actor's memory. The block below
    /// captures the one `Incarnation` and uses it in place.
    pub fn run(self, runtime: runtime::Context) -> impl Future<Output = ()> {
        let Launch { mailbox, ended } = self;
        #[cfg(feature = "tracing")]
        let span = crate::trace::incarnation(ended.id, ended.incarnation);
        let mut incarnation = Incarnation {
            ctx: Context::new(runtime, mailbox),
            ended,
        };
        async move {
            #[cfg(not(feature = "tracing"))]
            let exit = run(&mut incarnation).await;
            // The span is entered on every poll of the loop, and around the end's report (its
            // exit event); an aborted incarnation reports its end with the span's fields only.
            #[cfg(feature = "tracing")]
            let exit = tracing::Instrument::instrument(run(&mut incarnation), span.clone()).await;
            #[cfg(feature = "tracing")]
            let _entered = span.enter();
            incarnation.ended.call(exit);
        }
    }
}

/// A running incarnation's context and end hooks, as its future keeps them.
struct Incarnation<A: Actor> {
    ctx: Context<A>,
    ended: OnEnd<A>,
}

impl<A: Actor> Running<A> for Incarnation<A> {
    fn make(&mut self) -> A {
        self.ended.hooks().make()
    }

    fn started(&mut self, ok: bool) {
        #[cfg(feature = "tracing")]
        if ok {
            crate::trace::started(self.ended.id, self.ended.incarnation);
        }
        self.ended.metrics.began = ok;
        self.ended.hooks().started(ok);
    }

    fn parts(&mut self) -> (&mut Context<A>, &mut ActorMetrics) {
        (&mut self.ctx, &mut self.ended.metrics)
    }
}

/// Where an incarnation's future runs, chosen by the actor's placement
/// ([`Declared::__Placed`](crate::Declared)): [`OnPool`] needs the future to be `Send`,
/// [`OnItsThread`] builds it on the actor's thread and keeps it there. Generic over the
/// future so that the bound is checked where the generated code names the concrete actor
/// (the futures of its handlers are only known there).
#[doc(hidden)]
pub trait Place<F> {
    fn launch<A: Actor>(
        scope: runtime::Context,
        launch: Launch<A>,
        run: fn(Launch<A>, runtime::Context) -> F,
    ) -> runtime::Handle<()>;
}

/// The shared pool: the incarnation's future moves between workers.
#[doc(hidden)]
#[derive(Debug)]
pub enum OnPool {}

/// A dedicated or blocking thread: the incarnation's future is built there and never
/// leaves it (see [`ThreadBound`]).
#[doc(hidden)]
#[derive(Debug)]
pub enum OnItsThread {}

impl<F: Future<Output = ()> + Send + 'static> Place<F> for OnPool {
    fn launch<A: Actor>(
        scope: runtime::Context,
        launch: Launch<A>,
        run: fn(Launch<A>, runtime::Context) -> F,
    ) -> runtime::Handle<()> {
        scope.spawn(move |runtime| run(launch, runtime))
    }
}

impl<F: Future<Output = ()> + 'static> Place<F> for OnItsThread {
    fn launch<A: Actor>(
        scope: runtime::Context,
        launch: Launch<A>,
        run: fn(Launch<A>, runtime::Context) -> F,
    ) -> runtime::Handle<()> {
        // Checked in release builds too: a pool actor's future moves between workers, and
        // a thread-bound one would then panic on its first foreign poll.
        assert!(
            A::PLACEMENT != Placement::Pool,
            "`{}` is placed on the pool but launched on a thread of its own",
            A::LABEL
        );
        scope.spawn(move |runtime| ThreadBound::new(move || run(launch, runtime)))
    }
}

/// Spawning from a handler: the child joins this actor's scope.
impl<A: Actor> Context<A> {
    /// Spawns `child` in this actor's scope, with the child's own placement: it stops (its
    /// task aborted) when this actor stops.
    pub fn spawn<C: Actor + Send>(&self, child: C) -> C::Ref {
        spawn(child, self.runtime())
    }

    /// Spawns the actor `factory` builds in this actor's scope, as [`spawn`](Self::spawn)
    /// does; `factory` runs where the child runs, so a dedicated or blocking child's state
    /// need not be `Send` (see [`spawn_with`](crate::spawn_with)).
    pub fn spawn_with<C: Actor>(&self, factory: impl FnOnce() -> C + Send + 'static) -> C::Ref {
        spawn_with(self.runtime(), factory)
    }
}
