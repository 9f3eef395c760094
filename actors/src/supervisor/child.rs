//! A supervisor's children as it sees them: the [`Child`] trait over an actor child and a
//! nested supervisor, how an incarnation of either ended ([`Ended`]), and the events a running
//! incarnation reports to its supervisor's loop ([`Event`], sent by its [`Reporter`]).

use super::*;

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
    Stop,
    /// A dynamic supervisor's new child, and where the child itself says it started
    /// (`true`) or not.
    Start {
        child: Box<dyn Child>,
        started: oneshot::Sender<bool>,
    },
    /// A dynamic supervisor's new child `id` failed to start, as its caller heard from it:
    /// out of the registry at once, before its report (which follows its `on_stop`).
    Refused {
        id: ActorId,
    },
    /// A dynamic supervisor is asked to stop the child `id` for good.
    Terminate {
        id: ActorId,
        done: oneshot::Sender<Result<(), Error>>,
    },
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
    /// The child is done for good, for `reason`: its refs see `Closed`, its joiners,
    /// monitors and links the reason.
    fn close(&self, reason: ExitReason);
}

/// Held by an incarnation's future; its drop tells the supervisor the future is gone (an
/// aborted task's handle resolves before its future is dropped, and the next incarnation
/// must not start while the last one still holds the mailbox's consumer or the nested
/// supervisor's state).
pub(super) struct Incarnation(#[allow(dead_code)] pub(super) oneshot::Sender<()>);

pub(super) struct ActorChild<A: Actor> {
    pub(super) spec: ChildSpec<A>,
    pub(super) mailbox: Arc<Mailbox<A::Message>>,
}

impl<A: Actor> Child for ActorChild<A> {
    fn label(&self) -> &'static str {
        A::LABEL
    }

    fn id(&self) -> ActorId {
        self.mailbox.life.id()
    }

    fn restart(&self) -> Restart {
        self.spec.restart
    }

    fn shutdown_timeout(&self) -> Duration {
        self.spec.shutdown
    }

    fn start(
        &mut self,
        scope: &runtime::Context,
        reporter: Reporter,
        started: oneshot::Sender<bool>,
        incarnation: Incarnation,
    ) -> runtime::Handle<()> {
        self.mailbox.clear_last_incarnation();
        let factory = self.spec.factory.clone();
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

    fn close(&self, reason: ExitReason) {
        self.mailbox.end(reason);
    }
}

/// A supervisor supervised by another: its incarnations run its loop over the same children.
pub(super) struct SupervisorChild {
    pub(super) label: &'static str,
    /// Its own life: its refs' `join` and `stop` wait for its end for good.
    pub(super) life: Arc<SupervisorLife>,
    pub(super) nested: Arc<Mutex<Nested>>,
    pub(super) control: mpsc::UnboundedSender<Event>,
    pub(super) restart: Restart,
    pub(super) shutdown: Duration,
}

/// A nested supervisor's state between incarnations (`None` while one runs), whether its
/// parent is done with it for good, and whether a ref's `stop()` asked for that.
pub(super) struct Nested {
    pub(super) state: Option<State>,
    pub(super) closed: bool,
    pub(super) terminated: bool,
}

/// Puts a running nested supervisor's state back when its future ends or is dropped (an
/// abort), closing its children if its parent closed it meanwhile.
pub(super) struct PutBack {
    nested: Arc<Mutex<Nested>>,
    state: Option<State>,
}

impl Drop for PutBack {
    fn drop(&mut self) {
        let mut nested = self.nested.lock();
        let state = self.state.take().expect("put back once");
        if nested.closed {
            state.close_all();
        }
        nested.state = Some(state);
    }
}

impl Child for SupervisorChild {
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
            let outcome = state.supervise(&runtime, Some(started)).await;
            // Back before the report: the next incarnation may start as soon as it is read.
            drop(running);
            match outcome {
                Ok(()) if nested.lock().terminated => {
                    reporter.report(Ended::Terminated, ExitReason::Stopped)
                }
                Ok(()) => reporter.report(Ended::Stopped, ExitReason::Stopped),
                Err(_) => reporter.report(
                    Ended::Failed,
                    ExitReason::Panicked("its supervisor gave up".to_string()),
                ),
            }
        })
    }

    fn request_stop(&self) {
        let _ = self.control.unbounded_send(Event::Stop);
    }

    /// Its children end for good with it (now, or when its running incarnation's future
    /// puts its state back), then its own life, with `reason`.
    fn close(&self, reason: ExitReason) {
        let mut nested = self.nested.lock();
        nested.closed = true;
        if let Some(state) = nested.state.as_ref() {
            state.close_all();
        }
        drop(nested);
        self.life.end(reason);
    }
}
