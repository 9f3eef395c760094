//! [`DynamicSupervisor`]: OTP's `DynamicSupervisor`: children of any actor type, started on
//! demand with [`DynamicSupervisorRef::start_child`], each restarted on its own (one for one)
//! by its [`Restart`](super::Restart) policy, within a restart intensity and with an optional
//! [`Backoff`]; past the intensity it stops every child and escalates, as [`Supervisor`]
//! does.
//!
//! ```
//! use actors::prelude::*;
//! use actors::supervisor::{ChildSpec, DynamicSupervisor, Restart};
//!
//! #[actor]
//! struct Session {
//!     user: String,
//! }
//!
//! #[actor]
//! impl Session {
//!     fn user(&self) -> String {
//!         self.user.clone()
//!     }
//! }
//!
//! runtime::Runner::new(runtime::Config::default()).start(|context| async move {
//!     let sessions = DynamicSupervisor::new("sessions").max_children(1000).spawn(&context);
//!     let ada = sessions
//!         .start_child(ChildSpec::new(|| Session { user: "ada".into() }).restart(Restart::Temporary))
//!         .await
//!         .unwrap();
//!     assert_eq!(ada.user().await.unwrap(), "ada");
//!     assert_eq!(sessions.count(), 1);
//!     sessions.terminate_child(ada.id()).await.unwrap();
//!     assert_eq!(sessions.count(), 0);
//!     sessions.stop();
//! });
//! ```
//!
//! Invariants:
//! - Children live in a map keyed by a number that is never reused, so a report from an
//!   incarnation of a child that is gone can never be taken for another child's; within a
//!   child, generations tell a stale report from a live one (as in `Supervisor`).
//! - `count()` and `children()` read the table, which holds every child admitted and not
//!   yet done for good: a child is admitted by `start_child` (refused past `max_children`
//!   before anything is spawned) and removed by the loop when it ends for good. Its mailbox is
//!   ended (refs see `Closed`, joiners, monitors and links its reason) when it leaves.
//! - The loop never waits for a child's `on_start`: a new child tells its caller itself
//!   whether it started, and reports its end as every incarnation does. A first run that
//!   fails to start reports `Ended::FailedToStart` and is removed, never restarted; its
//!   caller answers once the removal ended the child's mailbox.
//! - A delayed restart is a timer in the loop, not a wait: other children, commands and
//!   stops are handled while it runs; a child terminated meanwhile is not restarted.
//! - Stopping the supervisor asks every child to stop at once, then waits for each within
//!   its shutdown timeout (aborting past it), and ends each for good.
//! - Nested under a [`Supervisor`](super::Supervisor), each incarnation starts empty, as
//!   OTP's does: the children of the last one ended for good with it (their refs see
//!   `Closed`), and its ref's `start_child` reaches the next one (a request made between two
//!   waits for it).

use super::child::{Loop, NestedHandle};
use super::table::{Node, Shape};
use super::{
    ActorChild, Backoff, Child, ChildCounts, ChildInfo, ChildSpec, ChildStatus, ChildSupervisor,
    Ended, Ending, Escalated, Event, Intensity, Nesting, Restart, Slot, giving_up,
};
use crate::id::Serials;
use crate::{Actor, ActorId, Error, ExitReason, Join, Ref};
use futures::StreamExt as _;
use futures::channel::{mpsc, oneshot};
use runtime::{Clock as _, Spawner as _};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Builds a dynamic supervisor; [`spawn`](Self::spawn) starts it.
#[derive(Debug)]
pub struct DynamicSupervisor {
    label: &'static str,
    intensity: (usize, Duration),
    max_children: Option<usize>,
    backoff: Backoff,
    /// A pool's supervisor: shown as one in the supervision tree.
    pooled: bool,
}

impl DynamicSupervisor {
    /// A dynamic supervisor labelled `label` (its scope's name: ASCII letters, digits and
    /// `_`), with a restart intensity of 3 restarts within 5 seconds, no limit on children
    /// and no backoff.
    pub fn new(label: &'static str) -> Self {
        DynamicSupervisor {
            label,
            intensity: (3, Duration::from_secs(5)),
            max_children: None,
            backoff: Backoff::none(),
            pooled: false,
        }
    }

    /// Marks it as a pool's supervisor, for the supervision tree.
    pub(crate) fn pooled(mut self) -> Self {
        self.pooled = true;
        self
    }

    /// At most `restarts` restarts (of all children together) within `within`: one more, and
    /// the supervisor stops every child and escalates, as [`Supervisor`](super::Supervisor)
    /// does.
    pub fn intensity(mut self, restarts: usize, within: Duration) -> Self {
        self.intensity = (restarts, within);
        self
    }

    /// At most `max` children at a time: `start_child` past it fails with
    /// [`Error::TooManyChildren`] and starts nothing.
    pub fn max_children(mut self, max: usize) -> Self {
        self.max_children = Some(max);
        self
    }

    /// Waits `backoff` before each restart of a child (none by default). The child's refs
    /// keep working meanwhile: messages wait in its mailbox, bounded by its capacity.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// [`spawn`](Self::spawn), refusing an invalid label (see
    /// [`Spawner::try_child`](runtime::Spawner::try_child)) with an error that names it
    /// instead of panicking; for a label chosen at run time.
    pub fn try_spawn(self, context: &runtime::Context) -> Result<DynamicSupervisorRef, Error> {
        context.try_child(self.label)?;
        Ok(self.spawn(context))
    }

    /// Starts the supervisor in a child scope of `context` named by its label. It runs until
    /// [`DynamicSupervisorRef::stop`] or its scope ends; children start in its scope.
    ///
    /// # Panics
    ///
    /// On a label that is not ASCII letters, digits and `_`, as
    /// [`Spawner::child`](runtime::Spawner::child) does; [`try_spawn`](Self::try_spawn)
    /// refuses it with an error instead.
    pub fn spawn(self, context: &runtime::Context) -> DynamicSupervisorRef {
        let (state, supervisor_ref) = self.build();
        super::table::add_root(context, &supervisor_ref.node);
        // Made before the spawn: a refused spawn drops it, which ends the life (`Shutdown`).
        let mut ending = Ending::new(supervisor_ref.node.life.clone(), state);
        // The task's handle is not kept: every ref waits on the life, and a dropped handle
        // detaches the task.
        drop(context.child(self.label).spawn(move |runtime| async move {
            let (started, _) = oneshot::channel();
            let outcome = ending.state().supervise(&runtime, 0, started).await;
            ending.state().close_all();
            match outcome {
                Ok(()) => ending.end(ExitReason::Stopped),
                Err(Escalated(message)) => {
                    super::report_giving_up(&message);
                    ending.end(ExitReason::Panicked(message));
                }
            }
        }));
        supervisor_ref
    }

    /// The loop's state and its ref, not yet running.
    fn build(&self) -> (Dynamic, DynamicSupervisorRef) {
        let (sender, events) = mpsc::unbounded();
        let shape = if self.pooled {
            Shape::Pool
        } else {
            Shape::Dynamic
        };
        let node = Node::new(self.label, shape);
        let state = Dynamic {
            label: self.label,
            intensity: self.intensity,
            backoff: self.backoff,
            restarts: Intensity::default(),
            slots: Serials::default(),
            keys: Serials::default(),
            delayed: BTreeMap::new(),
            first_runs: Serials::default(),
            events,
            sender: sender.clone(),
            node: node.clone(),
            keeps: false,
        };
        let supervisor_ref = DynamicSupervisorRef {
            control: sender,
            node,
            max_children: self.max_children,
            label: self.label,
            nested: None,
        };
        (state, supervisor_ref)
    }

    /// This supervisor as a parent's child that keeps its children across its own restarts
    /// (a pool's members: their mailboxes, and so the pool's routing, stay), starting with
    /// one child per spec of `members`, whose refs it returns; every incarnation starts them
    /// all again, in order, then runs `fill` (with the incarnation's context) beside the
    /// loop, and counts as started once both are done. A `fill` that fails fails the
    /// incarnation, with its error in the reason.
    pub(crate) fn nest_keeping<A: Actor, F>(
        self,
        restart: Restart,
        shutdown: Duration,
        members: Vec<ChildSpec<A>>,
        fill: F,
    ) -> (Nesting, DynamicSupervisorRef, Vec<Ref<A>>)
    where
        F: FnMut(&runtime::Context) -> futures::future::BoxFuture<'static, Result<(), Error>>,
        F: Send + 'static,
    {
        let (mut dynamic, supervisor_ref) = self.build();
        dynamic.keeps = true;
        let refs = members
            .into_iter()
            .map(|spec| {
                let mailbox = crate::actor::spawn::mailbox::<A>();
                let member = Ref::<A>::new(mailbox.clone());
                dynamic.admit(Box::new(ActorChild::new(spec, mailbox)), false);
                member
            })
            .collect();
        let (nesting, supervisor_ref) =
            nest(Filled { dynamic, fill }, supervisor_ref, restart, shutdown);
        (nesting, supervisor_ref, refs)
    }
}

/// `state`, the loop of the supervisor `supervisor_ref` reaches, as a parent's child.
fn nest<S: Loop>(
    state: S,
    mut supervisor_ref: DynamicSupervisorRef,
    restart: Restart,
    shutdown: Duration,
) -> (Nesting, DynamicSupervisorRef) {
    let control = supervisor_ref.control.clone();
    let (nesting, handle) = Nesting::new(
        supervisor_ref.node.clone(),
        state,
        control,
        restart,
        shutdown,
    );
    supervisor_ref.nested = Some(handle);
    (nesting, supervisor_ref)
}

impl super::sealed::Sealed for DynamicSupervisor {}

impl ChildSupervisor for DynamicSupervisor {
    type Ref = DynamicSupervisorRef;

    fn __nest(self, restart: Restart, shutdown: Duration) -> (Nesting, DynamicSupervisorRef) {
        let (dynamic, supervisor_ref) = self.build();
        nest(dynamic, supervisor_ref, restart, shutdown)
    }
}

/// A nested dynamic supervisor's loop.
impl Loop for Dynamic {
    async fn run<'a>(
        &'a mut self,
        runtime: &'a runtime::Context,
        incarnation: u64,
        started: oneshot::Sender<bool>,
    ) -> Result<(), Escalated> {
        let outcome = self.supervise(runtime, incarnation, started).await;
        // Its children do not outlive the incarnation (OTP's dynamic supervisor restarts
        // empty), unless it keeps them (a pool's members).
        if self.keeps {
            // Every kept child starts again with the next incarnation (the parent's hold on
            // this state marks them stopped as it takes it back: `PutBack`).
            self.delayed.clear();
            self.first_runs.clear();
        } else {
            self.release();
        }
        outcome
    }

    fn close(&mut self) {
        self.close_all();
    }

    fn stopped(&mut self) {
        for slot in self.slots.values_mut() {
            slot.observe(ChildStatus::Stopped);
        }
    }
}

/// A nested dynamic supervisor whose incarnations each run `fill` beside the loop (see
/// [`DynamicSupervisor::nest_keeping`]).
struct Filled<F> {
    dynamic: Dynamic,
    fill: F,
}

impl<F> Loop for Filled<F>
where
    F: FnMut(&runtime::Context) -> futures::future::BoxFuture<'static, Result<(), Error>>,
    F: Send + 'static,
{
    async fn run<'a>(
        &'a mut self,
        runtime: &'a runtime::Context,
        incarnation: u64,
        started: oneshot::Sender<bool>,
    ) -> Result<(), Escalated> {
        let filling = (self.fill)(runtime);
        let control = self.dynamic.sender.clone();
        let label = self.dynamic.label;
        let (loop_started, is_loop_started) = oneshot::channel();
        let supervising = std::pin::pin!(Loop::run(
            &mut self.dynamic,
            runtime,
            incarnation,
            loop_started
        ));
        let ready = async move {
            filling.await?;
            // Dropped unsent if the loop ended first, which the select sees first.
            is_loop_started.await.map_err(|_| Error::Closed)?;
            Ok::<(), Error>(())
        };
        match futures::future::select(supervising, std::pin::pin!(ready)).await {
            // The loop ended first (it gave up, or was stopped): what `fill` started ended
            // with it.
            futures::future::Either::Left((outcome, _)) => outcome,
            futures::future::Either::Right((Ok(()), supervising)) => {
                let _ = started.send(true);
                supervising.await
            }
            futures::future::Either::Right((Err(error), supervising)) => {
                let _ = control.unbounded_send(Event::Stop {
                    incarnation: Some(incarnation),
                });
                let _ = supervising.await;
                Err(Escalated(format!("`{label}` failed to start: {error}")))
            }
        }
    }

    fn close(&mut self) {
        self.dynamic.close_all();
    }

    fn stopped(&mut self) {
        Loop::stopped(&mut self.dynamic);
    }
}

/// A running dynamic supervisor: start and terminate children, list them, stop it. Cheap to
/// clone.
#[derive(Clone)]
pub struct DynamicSupervisorRef {
    control: mpsc::UnboundedSender<Event>,
    /// Its life, and its table of children (with the admission bookkeeping).
    node: Arc<Node>,
    max_children: Option<usize>,
    label: &'static str,
    /// A nested supervisor's state, shared with its parent: `stop` marks it done for good.
    nested: Option<NestedHandle>,
}

impl DynamicSupervisorRef {
    /// Starts a child from `spec` and returns its typed ref once its `on_start` returned (as
    /// OTP's `start_child` does). Fails with [`Error::TooManyChildren`] past `max_children`
    /// and with [`Error::Closed`] once the supervisor has stopped; a child whose `on_start`
    /// panics fails with [`Error::Panicked`] once its `on_stop` ran and it is out of
    /// [`children`](Self::children), and one whose factory panics (no state, so no
    /// `on_stop`) fails the same way once it is out. The ref reaches every incarnation.
    ///
    /// The child answers its caller itself: the supervisor's loop does not wait for its
    /// `on_start`, so children start concurrently, and a child's `on_start` may call its own
    /// supervisor. A request whose future is dropped before the supervisor takes it starts
    /// nothing (nobody would get the ref); one taken already goes on.
    pub async fn start_child<A: Actor>(&self, spec: ChildSpec<A>) -> Result<A::Ref, Error> {
        self.start(spec).await.map(A::Ref::from)
    }

    /// [`start_child`](Self::start_child), giving the untyped ref.
    pub(crate) async fn start<A: Actor>(&self, spec: ChildSpec<A>) -> Result<Ref<A>, Error> {
        {
            let mut registry = self.node.table.lock();
            if registry.closed {
                return Err(Error::Closed);
            }
            if let Some(max) = self.max_children
                && registry.children.len() + registry.admitting >= max
            {
                return Err(Error::TooManyChildren {
                    supervisor: self.label,
                    max,
                });
            }
            registry.admitting += 1;
        }
        let mailbox = crate::actor::spawn::mailbox::<A>();
        let actor_ref = Ref::<A>::new(mailbox.clone());
        let (started, is_started) = oneshot::channel();
        let child = Box::new(ActorChild::new(spec, mailbox));
        if self
            .control
            .unbounded_send(Event::Start { child, started })
            .is_err()
        {
            self.node.table.lock().admitting -= 1;
            return Err(Error::Closed);
        }
        match is_started.await {
            Ok(true) => Ok(actor_ref),
            Ok(false) => {
                // Its `on_start` (or factory) panicked: out of the table now (so nobody
                // terminates a child that never started), and removed when its report
                // arrives, after its `on_stop`, which ends its mailbox.
                let _ = self
                    .control
                    .unbounded_send(Event::Refused { id: actor_ref.id() });
                actor_ref.join().await;
                Err(Error::Panicked { actor: A::LABEL })
            }
            // The loop went away with the request (it counted it off), or the child could
            // not be spawned (its scope is closing).
            Err(oneshot::Canceled) => Err(Error::Closed),
        }
    }

    /// Stops the child `id` for good (a stop request, its shutdown timeout, then an abort)
    /// and removes it: its refs see `Closed`, its joiners [`ExitReason::Stopped`] (or
    /// `Shutdown` if it had to be aborted). [`Error::NoSuchChild`] if `id` is not a child of
    /// this supervisor (never was, or already ended for good).
    pub async fn terminate_child(&self, id: ActorId) -> Result<(), Error> {
        let (done, is_done) = oneshot::channel();
        self.control
            .unbounded_send(Event::Terminate { id, done })
            .map_err(|_| Error::Closed)?;
        is_done.await.unwrap_or(Err(Error::Closed))
    }

    /// The children now, in start order: those running, and those waiting for a restart.
    pub fn children(&self) -> Vec<ActorId> {
        let table = self.node.table.lock();
        table.children.values().map(|entry| entry.id).collect()
    }

    /// How many children there are now (see [`children`](Self::children)).
    pub fn count(&self) -> usize {
        self.node.table.lock().children.len()
    }

    /// Its children now, in start order (those running and those waiting for a restart),
    /// each with its id, label, kind, restart type, status and restarts so far (OTP's
    /// `which_children`).
    pub fn which_children(&self) -> Vec<ChildInfo> {
        self.node.which_children()
    }

    /// Its children now, counted: all, running, supervisors (none: a dynamic supervisor's
    /// children are actors), actors (OTP's `count_children`).
    pub fn count_children(&self) -> ChildCounts {
        self.node.count_children()
    }

    /// The supervisor's id, shown as `label#n`.
    pub fn id(&self) -> ActorId {
        self.node.life.id()
    }

    /// Stops every child (all asked at once, as OTP's `DynamicSupervisor` does), then the
    /// supervisor; resolves with its exit reason once it ended (`Stopped`, or why it ended
    /// first). The request is made when `stop` is called: dropping the future
    /// (`supervisor.stop();`) does not withdraw it, which is the fire-and-forget form.
    pub fn stop(&self) -> Join {
        super::stop(&self.control, &self.nested, &self.node)
    }

    /// Resolves with the supervisor's exit reason once it ended, without asking it to (at
    /// once if it has): every caller, from any clone, hears the same reason. `Stopped` once
    /// stopped; `Panicked` if it gave up (more restarts than its intensity allows: it ends,
    /// reported on stderr, and the program goes on); `Shutdown` if its scope ended first. Its children have all ended for good by then.
    pub fn join(&self) -> Join {
        self.node.life.join()
    }

    /// The supervisor's life, which a pool's ref is registered and monitored by.
    pub(crate) fn life(&self) -> &Arc<super::SupervisorLife> {
        &self.node.life
    }
}

impl std::fmt::Debug for DynamicSupervisorRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("DynamicSupervisorRef");
        debug.field("label", &self.label);
        // `try_lock`: Debug never waits, and never deadlocks on a lock its own thread holds.
        match self.node.table.try_lock() {
            Some(table) => debug.field("children", &table.children.len()).finish(),
            None => debug.finish_non_exhaustive(),
        }
    }
}

/// The loop's state.
struct Dynamic {
    label: &'static str,
    intensity: (usize, Duration),
    backoff: Backoff,
    restarts: Intensity,
    /// Children by key (never reused).
    slots: Serials<Slot>,
    /// Their keys by id serial: `terminate_child` finds its child in constant time.
    keys: Serials<u64>,
    /// Restarts waiting out their backoff: (when, key) -> generation of the failed run.
    delayed: BTreeMap<(Instant, u64), u64>,
    /// Children whose first run has not reported yet, with its generation: a first run
    /// that fails to start is refused (removed, not restarted), as OTP refuses a child
    /// whose `init` fails.
    first_runs: Serials<u64>,
    events: mpsc::UnboundedReceiver<Event>,
    sender: mpsc::UnboundedSender<Event>,
    /// Its life and table, shared with its refs.
    node: Arc<Node>,
    /// Its children outlive its incarnations (a pool's members): each incarnation starts
    /// them again, on the same mailboxes.
    keeps: bool,
}

impl Dynamic {
    /// Runs the children until a stop (a ref's, or its parent's for `incarnation`) or an
    /// escalation, and stops them all; `started` is told at once.
    async fn supervise(
        &mut self,
        runtime: &runtime::Context,
        incarnation: u64,
        started: oneshot::Sender<bool>,
    ) -> Result<(), Escalated> {
        self.restarts.clear();
        self.start_kept(runtime).await;
        let _ = started.send(true);
        let outcome = loop {
            let event = match self.delayed.keys().next().copied() {
                None => self.events.next().await,
                Some((due, key)) => {
                    let wait = due.saturating_duration_since(runtime::clock::now());
                    let sleep = std::pin::pin!(runtime.sleep(wait));
                    match futures::future::select(sleep, self.events.next()).await {
                        futures::future::Either::Left(_) => {
                            let generation = self
                                .delayed
                                .remove(&(due, key))
                                .expect("the earliest delayed restart");
                            self.restart(key, generation, runtime);
                            continue;
                        }
                        futures::future::Either::Right((event, _)) => event,
                    }
                }
            };
            let Some(event) = event else {
                break Ok(());
            };
            match event {
                Event::Stop { .. } if event.stops(incarnation) => break Ok(()),
                // A stop for an earlier incarnation, which it never read.
                Event::Stop { .. } => {}
                Event::Start { child, started } => self.start_child(child, started, runtime),
                Event::Refused { id } => {
                    if let Some(&key) = self.keys.get(&id.serial())
                        && self.first_runs.contains_key(&key)
                    {
                        self.keys.remove(&id.serial());
                        self.node.table.lock().children.remove(&key);
                    }
                }
                Event::Withdrawn { index } => {
                    // Stopped by its ref while it waits out a backoff: done for good now.
                    // A stop that came as it restarted is the child's own to take.
                    let key = index as u64;
                    if self
                        .slots
                        .get(&key)
                        .is_some_and(|slot| slot.running.is_none())
                    {
                        self.terminate(key, runtime).await;
                    }
                }
                Event::Terminate { id, done } => {
                    let key = self.keys.get(&id.serial()).copied();
                    let result = match key {
                        Some(key) => {
                            self.terminate(key, runtime).await;
                            Ok(())
                        }
                        None => Err(Error::NoSuchChild {
                            supervisor: self.label,
                            id,
                        }),
                    };
                    let _ = done.send(result);
                }
                Event::Ended {
                    index,
                    generation,
                    ended,
                    reason,
                } => {
                    let key = index as u64;
                    let Some(slot) = self.slots.get_mut(&key) else {
                        continue;
                    };
                    if slot.generation != generation {
                        continue;
                    }
                    slot.running = None;
                    slot.last = Some(reason.clone());
                    let first_run = self.first_runs.remove(&key) == Some(generation);
                    if first_run && ended == Ended::FailedToStart {
                        // Its caller waits for this removal (see `start_child`).
                        self.remove(key, reason);
                        continue;
                    }
                    if !ended.restarts(slot.child.restart()) {
                        self.remove(key, reason);
                        continue;
                    }
                    slot.observe(ChildStatus::Restarting);
                    if self.restarts.exceeded(key, self.intensity) {
                        #[cfg(feature = "tracing")]
                        crate::trace::gave_up(self.label, slot.child.id(), &reason, self.intensity);
                        break Err(giving_up("dynamic supervisor", self.label, self.intensity));
                    }
                    let delay = slot.backoff.next_delay(&self.backoff);
                    #[cfg(feature = "tracing")]
                    crate::trace::restarting(
                        self.label,
                        slot.child.id(),
                        &reason,
                        slot.generation,
                        delay,
                    );
                    if delay.is_zero() {
                        self.restart(key, generation, runtime);
                    } else {
                        if let Some(due) = runtime::clock::now().checked_add(delay) {
                            self.delayed.insert((due, key), generation);
                        }
                        self.watch_stop(key);
                    }
                    // A delay past the clock's range is never: the child waits for a
                    // terminate or the supervisor's end.
                }
            }
        };
        self.stop_all(runtime).await;
        outcome
    }

    /// Admits `child` and starts it; the child itself tells `started` once its `on_start`
    /// returned (or panicked).
    fn start_child(
        &mut self,
        child: Box<dyn Child>,
        started: oneshot::Sender<bool>,
        runtime: &runtime::Context,
    ) {
        if started.is_canceled() {
            // Its caller is gone (a `start_child` future dropped, a pool's resize cut short by
            // a restart): nobody would ever get its ref.
            self.refuse(child, started);
            return;
        }
        let key = self.admit(child, true);
        let slot = self.slots.get_mut(&key).expect("admitted above");
        slot.restarts = Some(crate::metrics::Families::of(runtime).restarts(slot.child.label()));
        slot.launch(key as usize, self.sender.clone(), runtime, started);
        self.first_runs.insert(key, slot.generation);
    }

    /// Makes `child` a child, not started yet; its key. `requested`: admitted by
    /// `start_child` (counted off its admissions) and started right after, so its entry
    /// says `Running` at once (one lock of the table per start).
    fn admit(&mut self, child: Box<dyn Child>, requested: bool) -> u64 {
        let mut slot = Slot::new(child);
        if requested {
            slot.status = ChildStatus::Running;
        }
        let key = {
            let mut table = self.node.table.lock();
            if requested {
                table.admitting -= 1;
            }
            let key = table.next_key;
            table.next_key += 1;
            table.children.insert(key, slot.entry(None));
            key
        };
        slot.observer = Some(super::table::Observer::new(&self.node, key));
        self.keys.insert(slot.child.id().serial(), key);
        self.slots.insert(key, slot);
        key
    }

    /// Starts the children it keeps across its incarnations, one after the other in start
    /// order, each once its last incarnation is gone (an aborted one may still hold its
    /// mailbox). A failed start is reported as the child's end, and restarted like any.
    async fn start_kept(&mut self, runtime: &runtime::Context) {
        let mut keys: Vec<u64> = self.slots.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let slot = self.slots.get_mut(&key).expect("listed above");
            slot.stop(runtime, true).await;
            if slot.restarts.is_none() {
                let families = crate::metrics::Families::of(runtime);
                slot.restarts = Some(families.restarts(slot.child.label()));
            }
            slot.start(key as usize, self.sender.clone(), runtime).await;
        }
    }

    /// While the child `key` waits out a backoff, a ref's `stop()` of it is sent to this
    /// loop as `Event::Withdrawn`, to end it at once; one made already is sent now.
    fn watch_stop(&mut self, key: u64) {
        let Some(slot) = self.slots.get(&key) else {
            return;
        };
        let events = self.sender.clone();
        let index = key as usize;
        let watch: crate::lifecycle::StopWatch = Arc::new(move || {
            let _ = events.unbounded_send(Event::Withdrawn { index });
        });
        if slot.child.watch_stop(Some(watch)) {
            let _ = self.sender.unbounded_send(Event::Withdrawn { index });
        }
    }

    /// Restarts the child `key` whose run `generation` failed, unless it changed meanwhile
    /// (terminated, or already restarted). Nobody waits for its `on_start`: a failure there
    /// is reported as its end, like any other.
    fn restart(&mut self, key: u64, generation: u64, runtime: &runtime::Context) {
        let Some(slot) = self.slots.get_mut(&key) else {
            return;
        };
        if slot.generation != generation || slot.running.is_some() {
            return;
        }
        slot.child.watch_stop(None);
        slot.count_restart();
        let (started, _) = oneshot::channel();
        slot.launch(key as usize, self.sender.clone(), runtime, started);
    }

    /// Stops the child `key` for good and removes it. A restart it was waiting for is
    /// cancelled, and no longer counts against the intensity.
    async fn terminate(&mut self, key: u64, runtime: &runtime::Context) {
        let Some(slot) = self.slots.get_mut(&key) else {
            return;
        };
        if self.delayed.keys().any(|&(_, delayed)| delayed == key) {
            self.restarts.cancel(key);
        }
        slot.stop_waiting();
        slot.stop(runtime, false).await;
        let reason = slot.last.clone().unwrap_or(ExitReason::Stopped);
        self.remove(key, reason);
    }

    /// The child `key` is done for good: out of the table before its joiners hear of it,
    /// so that whoever joined it sees it gone from `children()`.
    fn remove(&mut self, key: u64, reason: ExitReason) {
        self.delayed.retain(|(_, delayed), _| *delayed != key);
        self.first_runs.remove(&key);
        self.node.table.lock().children.remove(&key);
        if let Some(mut slot) = self.slots.remove(&key) {
            self.keys.remove(&slot.child.id().serial());
            slot.child.close(reason);
        }
    }

    /// Stops every child: all are asked at once, then each is waited for (its shutdown
    /// timeout, then an abort) in reverse start order. Dynamic children are independent of
    /// each other, so, as OTP's `DynamicSupervisor` does, they stop concurrently rather
    /// than one after the other.
    async fn stop_all(&mut self, runtime: &runtime::Context) {
        let mut keys: Vec<u64> = self.slots.keys().copied().collect();
        keys.sort_unstable();
        // Children waiting out a backoff end `Stopped`; the one that made the supervisor
        // give up (not waiting: it was never to restart) keeps its failure.
        for &(_, key) in self.delayed.keys() {
            if let Some(slot) = self.slots.get_mut(&key) {
                slot.stop_waiting();
            }
        }
        for key in keys.iter().rev() {
            if let Some(slot) = self.slots.get_mut(key) {
                slot.request_stop();
            }
        }
        for key in keys.into_iter().rev() {
            if let Some(slot) = self.slots.get_mut(&key) {
                slot.finish_stop(runtime, false).await;
            }
        }
    }

    /// Ends every child for good: an incarnation is over. New children are still admitted,
    /// for the next one.
    fn release(&mut self) {
        self.node.table.lock().children.clear();
        self.delayed.clear();
        self.first_runs.clear();
        self.keys.clear();
        for (_, mut slot) in self.slots.drain() {
            let reason = slot.last.clone().unwrap_or(ExitReason::Shutdown);
            slot.child.close(reason);
        }
    }

    /// Ends every child for good and refuses new ones: the loop is over for good. Nothing
    /// reads its events any more: a request sent from now on fails (`Closed`), and those
    /// that raced with the end are answered `Closed` (and counted off) here.
    fn close_all(&mut self) {
        self.node.table.lock().closed = true;
        self.events.close();
        self.release();
        loop {
            match self.events.try_recv() {
                Ok(Event::Start { child, started }) => self.refuse(child, started),
                Ok(Event::Terminate { done, .. }) => {
                    let _ = done.send(Err(Error::Closed));
                }
                Ok(_) => {}
                // Closed and drained: nothing can be sent any more.
                Err(mpsc::TryRecvError::Closed) => break,
                // A sender counted its message before the close and has not queued it yet:
                // it is a few instructions from doing so, and its caller would otherwise
                // wait for an answer until this state is dropped.
                Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
    }

    /// A request to start `child` that is not taken: the child never runs, its caller (if
    /// still there) hears `Closed`, and the admission is counted off.
    fn refuse(&mut self, mut child: Box<dyn Child>, started: oneshot::Sender<bool>) {
        self.node.table.lock().admitting -= 1;
        child.close(ExitReason::Shutdown);
        drop(started);
    }
}

impl Drop for Dynamic {
    /// The loop's future was dropped (its scope ended) or it finished: every child is done.
    fn drop(&mut self) {
        self.close_all();
    }
}
