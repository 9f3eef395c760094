//! A supervisor's children as it sees them: the [`Child`] trait over an actor child and a
//! nested supervisor, how an incarnation of either ended ([`Ended`]), and the events a running
//! incarnation reports to its supervisor's loop ([`Event`], sent by its [`Reporter`]).

use super::*;
use crate::lifecycle::StopWatch;

/// How an incarnation ended, as the supervisor sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// It stopped itself (or was asked to).
    Stopped,
    /// A ref's `stop()` ended it: done for good, whatever its restart policy.
    Terminated,
    /// No ref is left.
    Unreachable,
    /// It panicked (or, for a supervisor, escalated).
    Failed,
    /// Its factory or `on_start` panicked, or it never ran: a failure, which a dynamic
    /// supervisor tells apart on a child's first start (refused, not restarted).
    FailedToStart,
}

pub(super) enum Event {
    Ended {
        index: usize,
        generation: u64,
        ended: Ended,
        reason: ExitReason,
    },
    /// Stop: a ref's (`None`: whichever incarnation runs, or the next), or a nested
    /// supervisor's parent's, for the incarnation it numbers (stale once that one ended).
    Stop { incarnation: Option<u64> },
    /// The child at `index` (a key, for a dynamic supervisor), waiting out a backoff before
    /// its restart, was stopped by its ref: it is done for good now, not at its restart.
    Withdrawn { index: usize },
    /// A dynamic supervisor's new child, and where the child itself says it started
    /// (`true`) or not.
    Start {
        child: Box<dyn Child>,
        started: oneshot::Sender<bool>,
    },
    /// A dynamic supervisor's new child `id` failed to start, as its caller heard from it:
    /// out of the registry at once, before its report (which follows its `on_stop`).
    Refused { id: ActorId },
    /// A dynamic supervisor is asked to stop the child `id` for good.
    Terminate {
        id: ActorId,
        done: oneshot::Sender<Result<(), Error>>,
    },
}

impl Event {
    /// Whether this is a stop for the running incarnation numbered `incarnation`.
    pub(super) fn stops(&self, incarnation: u64) -> bool {
        matches!(self, Event::Stop { incarnation: None })
            || matches!(self, Event::Stop { incarnation: Some(number) } if *number == incarnation)
    }
}

impl Ended {
    /// How the supervisor sees an incarnation's `exit`.
    fn of(exit: &Exit) -> Self {
        match exit {
            Exit::Stopped | Exit::Requested => Ended::Stopped,
            Exit::Terminated => Ended::Terminated,
            Exit::Unreachable => Ended::Unreachable,
            Exit::Linked(_) | Exit::Panicked(_) | Exit::Aborted => Ended::Failed,
        }
    }

    /// Whether a child with `restart` that ended this way restarts.
    pub(super) fn restarts(self, restart: Restart) -> bool {
        match (restart, self) {
            (_, Ended::Unreachable | Ended::Terminated) | (Restart::Temporary, _) => false,
            (Restart::Transient, Ended::Stopped) => false,
            (Restart::Transient, Ended::Failed | Ended::FailedToStart)
            | (Restart::Permanent, _) => true,
        }
    }
}

/// Sends an incarnation's end to its supervisor.
pub(super) struct Reporter {
    pub(super) events: mpsc::UnboundedSender<Event>,
    pub(super) index: usize,
    pub(super) generation: u64,
    pub(super) reported: bool,
}

impl Reporter {
    fn report(mut self, ended: Ended, reason: ExitReason) {
        self.send(ended, reason);
    }

    fn send(&mut self, ended: Ended, reason: ExitReason) {
        self.reported = true;
        let _ = self.events.unbounded_send(Event::Ended {
            index: self.index,
            generation: self.generation,
            ended,
            reason,
        });
    }
}

impl Drop for Reporter {
    /// An incarnation that ends without reporting (its future panicked outside a handler, or
    /// was dropped) failed; if the supervisor stopped it on purpose, the generation it bumped
    /// makes this report stale.
    fn drop(&mut self) {
        if !self.reported {
            self.send(Ended::Failed, ExitReason::Shutdown);
        }
    }
}

/// A supervised child, type-erased.
pub(super) trait Child: Send {
    fn label(&self) -> &'static str;
    /// The child's id (a nested supervisor has one of its own, which no ref shows).
    fn id(&self) -> ActorId;
    fn restart(&self) -> Restart;
    fn shutdown_timeout(&self) -> Duration;
    /// Starts an incarnation under `scope`; it reports its end through `reporter`, and
    /// `started` once it has started (`true`: its `on_start` returned, or its children
    /// started; `false`: its `on_start` panicked).
    /// `incarnation` is held by the incarnation's future: it is dropped with it.
    fn start(
        &mut self,
        scope: &runtime::Context,
        reporter: Reporter,
        started: oneshot::Sender<bool>,
        incarnation: Incarnation,
    ) -> runtime::Handle<()>;
    /// Asks the running incarnation to stop before its next message.
    fn request_stop(&self);
    /// While the child waits out a backoff (no incarnation runs), has `watch` called when a
    /// ref's `stop()` asks it to end for good, or no one with `None`; whether one did
    /// already.
    fn watch_stop(&self, watch: Option<StopWatch>) -> bool;
    /// The child is done for good, for `reason`: its refs see `Closed`, its joiners,
    /// monitors and links the reason, and what its spec held (its factory's captures: a
    /// listener, say) goes now, not with the supervisor.
    fn close(&mut self, reason: ExitReason);
}

/// Held by an incarnation's future; its drop tells the supervisor the future is gone (an
/// aborted task's handle resolves before its future is dropped, and the next incarnation
/// must not start while the last one still holds the mailbox's consumer or the nested
/// supervisor's state).
pub(super) struct Incarnation(#[allow(dead_code)] pub(super) oneshot::Sender<()>);

pub(super) struct ActorChild<A: Actor> {
    /// The spec's factory, until the child is done for good.
    factory: Option<Arc<Mutex<dyn FnMut() -> A + Send>>>,
    restart: Restart,
    shutdown: Duration,
    pub(super) mailbox: Arc<Mailbox<A::Message>>,
    /// The supervisor's own ref to a `Permanent` or `Transient` child: it owns the child,
    /// which therefore never ends for want of refs (OTP's rule: clients' references do not
    /// decide a child's life). `None` for a `Temporary` one, which ends `Normal` when its
    /// last ref goes, as an unsupervised actor does. Held for the count it keeps, never read.
    #[allow(dead_code)]
    pub(super) owner: Option<Ref<A>>,
}

impl<A: Actor> ActorChild<A> {
    /// The child `spec` makes, on `mailbox`, owned by its supervisor unless temporary.
    pub(super) fn new(spec: ChildSpec<A>, mailbox: Arc<Mailbox<A::Message>>) -> Self {
        let owner = (spec.restart != Restart::Temporary).then(|| Ref::new(mailbox.clone()));
        ActorChild {
            factory: Some(spec.factory),
            restart: spec.restart,
            shutdown: spec.shutdown,
            mailbox,
            owner,
        }
    }
}

impl<A: Actor> Child for ActorChild<A> {
    fn label(&self) -> &'static str {
        A::LABEL
    }

    fn id(&self) -> ActorId {
        self.mailbox.life.id()
    }

    fn restart(&self) -> Restart {
        self.restart
    }

    fn shutdown_timeout(&self) -> Duration {
        self.shutdown
    }

    fn start(
        &mut self,
        scope: &runtime::Context,
        reporter: Reporter,
        started: oneshot::Sender<bool>,
        incarnation: Incarnation,
    ) -> runtime::Handle<()> {
        self.mailbox.clear_last_incarnation();
        let factory = self
            .factory
            .clone()
            .expect("a child done for good is never started again");
        // The lock is never contended: one incarnation runs at a time.
        let make = move || (*factory.lock())();
        let started = move |ok| {
            let _ = started.send(ok);
        };
        spawn_incarnation(
            make,
            scope,
            self.mailbox.clone(),
            started,
            move |exit, reason, began| {
                let ended = if began {
                    Ended::of(&exit)
                } else {
                    Ended::FailedToStart
                };
                reporter.report(ended, reason);
                // Held by the future until here; an aborted one drops it with the future.
                drop(incarnation);
            },
        )
    }

    fn request_stop(&self) {
        self.mailbox.request_stop();
    }

    fn watch_stop(&self, watch: Option<StopWatch>) -> bool {
        self.mailbox.life.watch_stop(watch)
    }

    fn close(&mut self, reason: ExitReason) {
        // The spec's captures go before anyone hears of the end: whoever joined the child
        // finds them gone (a listener closed).
        self.factory = None;
        self.mailbox.end(reason);
        self.owner = None;
    }
}

/// What a supervisor runs for each incarnation, as another's child: its loop over its
/// children. A static [`Supervisor`]'s `State`, a dynamic one's, a pool's.
pub(super) trait Loop: Send + 'static {
    /// One incarnation: runs the children until a stop (a ref's, or its parent's for
    /// `incarnation`) or an escalation, telling `started` once they run (dropped unsent if
    /// they never did). Every child is stopped when it returns.
    fn run<'a>(
        &'a mut self,
        runtime: &'a runtime::Context,
        incarnation: u64,
        started: oneshot::Sender<bool>,
    ) -> impl std::future::Future<Output = Result<(), Escalated>> + Send + 'a;

    /// Done for good: every child ends for good, with how it last ended, and nothing new is
    /// admitted.
    fn close(&mut self);

    /// No incarnation runs (it ended, or was dropped mid-run): every child shows stopped.
    fn stopped(&mut self);
}

/// A supervisor supervised by another: its incarnations run its loop over the same state.
pub(super) struct SupervisorChild<S: Loop> {
    pub(super) label: &'static str,
    /// Its own life: its refs' `join` and `stop` wait for its end for good.
    pub(super) life: Arc<SupervisorLife>,
    pub(super) nested: Arc<Mutex<Nested<S>>>,
    pub(super) control: mpsc::UnboundedSender<Event>,
    pub(super) restart: Restart,
    pub(super) shutdown: Duration,
    /// The number of its latest incarnation, which its parent's stop names: a stop sent to
    /// an incarnation that ended meanwhile is not taken by the next one.
    pub(super) incarnation: u64,
}

/// A nested supervisor's state between incarnations (`None` while one runs), whether its
/// parent is done with it for good, and whether a ref's `stop()` asked for that.
pub(super) struct Nested<S> {
    pub(super) state: Option<S>,
    pub(super) closed: bool,
    pub(super) terminated: bool,
    /// Its parent, waiting out a backoff before restarting it: told of a ref's `stop()`.
    pub(super) stop_watch: Option<StopWatch>,
}

impl<S: Loop> Nested<S> {
    /// A nested supervisor's shared state, before its first incarnation.
    pub(super) fn new(state: S) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Nested {
            state: Some(state),
            closed: false,
            terminated: false,
            stop_watch: None,
        }))
    }
}

/// What a nested supervisor's refs hold of it: a ref's `stop()` marks it done for good.
pub(super) trait Terminable: Send + Sync {
    /// Marks the supervisor done for good: its parent does not restart it.
    fn terminate(&self);
}

impl<S: Loop> Terminable for Mutex<Nested<S>> {
    fn terminate(&self) {
        let mut nested = self.lock();
        nested.terminated = true;
        let watch = nested.stop_watch.clone();
        drop(nested);
        if let Some(watch) = watch {
            watch();
        }
    }
}

/// A nested supervisor's hold on its shared state, for its refs: weak, so that a ref kept in
/// the supervisor's own children (a pool's members hold its ref) makes no cycle.
pub(super) type NestedHandle = std::sync::Weak<dyn Terminable>;

/// Marks the nested supervisor `handle` holds, if any, done for good.
pub(super) fn terminate(handle: &Option<NestedHandle>) {
    if let Some(nested) = handle.as_ref().and_then(std::sync::Weak::upgrade) {
        nested.terminate();
    }
}

/// Puts a running nested supervisor's state back when its future ends or is dropped (an
/// abort), closing its children if its parent closed it meanwhile.
pub(super) struct PutBack<S: Loop> {
    nested: Arc<Mutex<Nested<S>>>,
    state: Option<S>,
}

impl<S: Loop> Drop for PutBack<S> {
    fn drop(&mut self) {
        let mut nested = self.nested.lock();
        let mut state = self.state.take().expect("put back once");
        state.stopped();
        if nested.closed {
            state.close();
        }
        nested.state = Some(state);
    }
}

impl<S: Loop> Child for SupervisorChild<S> {
    fn label(&self) -> &'static str {
        self.label
    }

    fn id(&self) -> ActorId {
        self.life.id()
    }

    fn restart(&self) -> Restart {
        self.restart
    }

    fn shutdown_timeout(&self) -> Duration {
        self.shutdown
    }

    fn start(
        &mut self,
        scope: &runtime::Context,
        reporter: Reporter,
        started: oneshot::Sender<bool>,
        incarnation: Incarnation,
    ) -> runtime::Handle<()> {
        let nested = self.nested.clone();
        self.incarnation += 1;
        let number = self.incarnation;
        scope.child(self.label).spawn(move |runtime| async move {
            let _incarnation = incarnation;
            let state = {
                let mut nested = nested.lock();
                if nested.terminated {
                    // A ref's `stop()` came while no incarnation ran: done for good. The state
                    // stays where it is, under the same lock, so a `close` from the parent
                    // finds it there.
                    None
                } else {
                    Some(nested.state.take())
                }
            };
            let Some(state) = state else {
                reporter.report(Ended::Terminated, ExitReason::Stopped);
                return;
            };
            let state = state.expect("the last incarnation's future is gone");
            let mut running = PutBack {
                nested: nested.clone(),
                state: Some(state),
            };
            let state = running.state.as_mut().expect("taken above");
            let outcome = state.run(&runtime, number, started).await;
            // Back before the report: the next incarnation may start as soon as it is read.
            drop(running);
            match outcome {
                Ok(()) if nested.lock().terminated => {
                    reporter.report(Ended::Terminated, ExitReason::Stopped)
                }
                Ok(()) => reporter.report(Ended::Stopped, ExitReason::Stopped),
                Err(Escalated(message)) => {
                    reporter.report(Ended::Failed, ExitReason::Panicked(message))
                }
            }
        })
    }

    fn request_stop(&self) {
        let _ = self.control.unbounded_send(Event::Stop {
            incarnation: Some(self.incarnation),
        });
    }

    fn watch_stop(&self, watch: Option<StopWatch>) -> bool {
        let mut nested = self.nested.lock();
        let replaced = std::mem::replace(&mut nested.stop_watch, watch);
        let terminated = nested.terminated;
        drop(nested);
        drop(replaced);
        terminated
    }

    /// Its children end for good with it (now, or when its running incarnation's future
    /// puts its state back), then its own life, with `reason`.
    fn close(&mut self, reason: ExitReason) {
        let mut nested = self.nested.lock();
        nested.closed = true;
        // Closed with the lock released: what the children's specs held is dropped there,
        // and may reach this supervisor through its ref. No incarnation takes the state
        // meanwhile (its parent starts no closed child), and a running one, which holds it,
        // closes it when it puts it back.
        let taken = nested.state.take();
        drop(nested);
        if let Some(mut state) = taken {
            state.close();
            self.nested.lock().state = Some(state);
        }
        self.life.end(reason);
    }
}
