//! OTP supervision: a [`Supervisor`] starts children from factories, in order, each in its own
//! child scope, and restarts them by their [`Restart`] policy and its [`Strategy`], within a
//! restart intensity; past it, it stops every child and escalates to its own parent.
//!
//! ```
//! use actors::prelude::*;
//! use actors::supervisor::{ChildSpec, Strategy, Supervisor};
//! use std::time::Duration;
//!
//! #[actor]
//! struct Worker;
//!
//! #[actor]
//! impl Worker {
//!     fn work(&self, n: u64) -> u64 {
//!         assert!(n != 13, "unlucky");
//!         n * 2
//!     }
//! }
//!
//! runtime::Runner::new(runtime::Config::default()).start(|context| async move {
//!     let mut supervisor = Supervisor::new("workers", Strategy::OneForOne)
//!         .intensity(3, Duration::from_secs(5));
//!     let worker = supervisor.child(ChildSpec::new(|| Worker));
//!     let supervisor = supervisor.spawn(&context);
//!     assert_eq!(worker.work(2).await, Ok(4));
//!     assert!(worker.work(13).await.is_err()); // a panic: the worker restarts
//!     assert_eq!(worker.work(3).await, Ok(6)); // the same ref reaches the new incarnation
//!     // Resolves once every child and the supervisor ended.
//!     assert_eq!(supervisor.stop().await, actors::ExitReason::Stopped);
//! });
//! ```
//!
//! Invariants:
//! - A child's mailbox belongs to its slot, not to an incarnation: refs keep working across
//!   restarts (its own, and its supervisor's when a parent restarts a nested supervisor),
//!   and messages sent meanwhile wait for the next incarnation. It is closed when the child
//!   is done for good (not restarted; it then stays done across its supervisor's restarts),
//!   or when the supervisor's state goes (`State`'s drop: its task ended or was dropped, or
//!   its parent went).
//! - Each incarnation reports its exit, tagged with the slot's generation. The supervisor
//!   bumps the generation whenever it stops an incarnation itself, so the report of a child
//!   it stopped on purpose is never mistaken for a failure.
//! - An incarnation's `on_stop` runs before it reports its end, and the supervisor starts the
//!   next one only after that report, or, when it stopped the incarnation itself, after the
//!   incarnation's future is gone (`Running::gone`; an aborted task's handle resolves before
//!   its future drops): the old incarnation's `on_stop` finishes before the new one's
//!   `on_start`, and never do two incarnations hold one mailbox.
//! - Children start one at a time, in order, as OTP's `start_link` does: each one's
//!   `on_start` has returned before the next one starts.
//! - Children stop in reverse start order, each given its shutdown timeout to finish its
//!   current message and `on_stop`, then aborted.
//! - A supervisor owns its `Permanent` and `Transient` children: it holds a ref to each, so
//!   they live until it ends them or they fail by their policy, whether or not anyone else
//!   holds a ref (see the table on [`Restart`]). A `Temporary` child ends when its last ref
//!   goes, and is not restarted.
//! - A nested supervisor (a [`Supervisor`], a [`DynamicSupervisor`] or a
//!   [`Pool`](crate::Pool) added with [`Supervisor::supervisor`]) is a child like any other:
//!   its parent's strategy restarts it with everything under it, it is stopped (its children
//!   first, in reverse start order) within its shutdown timeout, and when it gives up it
//!   fails, which its parent handles as any failure, up to the top.

mod backoff;
mod child;
mod dynamic;
mod life;
mod table;

pub use backoff::Backoff;
pub use dynamic::{DynamicSupervisor, DynamicSupervisorRef};

use child::{
    ActorChild, Child, Ended, Event, Incarnation, Loop, Nested, NestedHandle, Reporter,
    SupervisorChild,
};
use life::Ending;
pub(crate) use life::SupervisorLife;
pub use table::{
    ChildCounts, ChildInfo, ChildKind, ChildStatus, Shape, SupervisionTree, TreeNode,
    supervision_tree,
};
use table::{Entry, Node, Observer};

use crate::actor::run::Exit;
use crate::actor::spawn::spawn_incarnation;
use crate::mailbox::Mailbox;
use crate::metrics::Families;
use crate::sync::Mutex;
use crate::{Actor, ActorId, Error, ExitReason, Join, Ref};
use futures::StreamExt as _;
use futures::channel::{mpsc, oneshot};
use runtime::{Clock as _, Spawner as _};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When a child is restarted (OTP's restart types). A supervisor owns its children: a
/// child's life is decided by its supervisor and its policy, not by who holds its refs.
///
/// | restart | ends normally: stopped itself (`Normal`), or asked by its supervisor (`Stopped`) | ends abnormally: `Panicked`, `Linked`, `Shutdown` (lost or aborted), a failed start, a nested supervisor giving up | ended for good: a ref's `stop()`, `terminate_child` | its last ref dropped |
/// |---|---|---|---|---|
/// | `Permanent` | restarted | restarted | not restarted | lives on |
/// | `Transient` | not restarted | restarted | not restarted | lives on |
/// | `Temporary` | not restarted | not restarted | not restarted | ends `Normal`, not restarted |
///
/// Every restart counts against the supervisor's intensity; one past it, and the supervisor
/// stops every child and fails (it escalates). A restart cancelled before it happened (the
/// child terminated while it waited out a backoff) does not count.
///
/// Where this differs from OTP, and why:
/// - **A ref's `stop()` ends a child for good, whatever its type.** In OTP a permanent child
///   that exits for any reason is restarted, and a caller removes it with
///   `supervisor:terminate_child/2`. Here a ref's `stop()` is that call: the holder of a ref
///   saying it is done with the child, answered by the child's end (`Stopped`), which its
///   joiners and monitors see.
/// - **A `Temporary` child ends when its last ref goes.** An OTP process lives on when nobody
///   holds its pid. A temporary child nobody can reach can never be sent a message again, and
///   is never restarted: it ends `Normal` rather than idling until its supervisor ends.
/// - **A restart may wait** (a [`Backoff`], none by default); OTP restarts at once.
/// - **A supervisor that gives up ends `Panicked`** (the message names it and its
///   intensity), where OTP's ends with `shutdown`. Monitors and joiners can then tell giving
///   up from being stopped, and a `Transient` nested supervisor that gives up is restarted
///   by its parent (OTP's, having ended with `shutdown`, is not; make it `Temporary` to
///   have no restart at all).
/// - **A restarted child keeps its id, refs and mailbox**, where an OTP process gets a new
///   pid: a ref behaves like a registered name, and messages sent while the child restarts
///   wait for it. So do a nested [`Supervisor`]'s children and a pool's members across
///   their supervisor's restart. A nested [`DynamicSupervisor`] restarts empty, as OTP's.
/// - **No `terminate_child`, `restart_child` or `delete_child` on a static supervisor**: a
///   ref's `stop()` ends a child for good, and its entry stays, `Stopped`, as OTP's does
///   after `terminate_child` (a `Temporary` child's entry goes when it ends, as its spec
///   does in OTP). Significant children and `auto_shutdown` are not supported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Always, whether it failed or stopped itself.
    Permanent,
    /// Only when it ended abnormally: a handler or hook panicked (`Panicked`), an actor it
    /// was linked to ended abnormally and it did not trap exits (`Linked`), its incarnation
    /// was aborted or lost without reporting (`Shutdown`), its factory or `on_start`
    /// panicked (except a dynamic supervisor's child's first start, which is refused), or,
    /// for a nested supervisor, it gave up. Not when it ended normally: it stopped itself
    /// (`Normal`) or was asked to by its supervisor (`Stopped`). A child stopped by a ref's
    /// `stop()` or left without refs is never restarted, whatever its policy.
    Transient,
    /// Never.
    Temporary,
}

/// Which children restart when one must (OTP's strategies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Only that child.
    OneForOne,
    /// Every child: the others are stopped (in reverse start order), then all start again.
    OneForAll,
    /// That child and those started after it.
    RestForOne,
}

/// How to start a child, when to restart it, and how long it has to stop.
pub struct ChildSpec<A: Actor> {
    /// Shared with each incarnation, which calls it where it runs (on its own thread for a
    /// dedicated or blocking actor, whose state need not be `Send`).
    factory: Arc<Mutex<dyn FnMut() -> A + Send>>,
    restart: Restart,
    shutdown: Duration,
}

/// Shows the actor type, the restart type and the shutdown timeout (not the factory).
impl<A: Actor> std::fmt::Debug for ChildSpec<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildSpec")
            .field("actor", &std::any::type_name::<A>())
            .field("restart", &self.restart)
            .field("shutdown", &self.shutdown)
            .finish_non_exhaustive()
    }
}

impl<A: Actor> ChildSpec<A> {
    /// A permanent child made by `factory` (called for every incarnation, where it runs: on
    /// the incarnation's own thread for a dedicated or blocking actor, so its state need not
    /// be `Send`), with a shutdown timeout of 5 seconds. A panicking factory is a failed
    /// start, with the panic as its reason.
    pub fn new(factory: impl FnMut() -> A + Send + 'static) -> Self {
        ChildSpec {
            factory: Arc::new(Mutex::new(factory)),
            restart: Restart::Permanent,
            shutdown: Duration::from_secs(5),
        }
    }

    /// When the child restarts.
    pub fn restart(mut self, restart: Restart) -> Self {
        self.restart = restart;
        self
    }

    /// How long the child has to finish its message and `on_stop` when stopped, before its
    /// task is aborted.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown = timeout;
        self
    }
}

/// One child and its running incarnation.
struct Slot {
    child: Box<dyn Child>,
    /// The running incarnation, until its future is known gone.
    running: Option<Running>,
    generation: u64,
    /// Done for good: not restarted.
    finished: bool,
    restarts: Option<prometheus_client::metrics::counter::Counter>,
    /// How its last incarnation ended: what its refs see once it is done for good.
    last: Option<ExitReason>,
    /// Consecutive delayed restarts, and when the running incarnation started.
    backoff: backoff::Attempts,
    /// Its status as its supervisor's table shows it (a copy: the table is written only
    /// when it changes), and its entry there, once it has one.
    status: ChildStatus,
    observer: Option<Observer>,
}

/// An incarnation: its task's handle (until it resolved), and what resolves once its future
/// is dropped. Kept in the slot while a stop waits, so that a loop dropped mid-stop (a nested
/// supervisor aborted) leaves it for the next run to wait for.
struct Running {
    handle: Option<runtime::Handle<()>>,
    gone: oneshot::Receiver<()>,
}

/// A supervisor gave up, saying why (its exit reason's message).
struct Escalated(String);

/// How a wait before a restart ended.
enum Paused {
    /// The delay elapsed: restart.
    Elapsed,
    /// The supervisor is asked to stop.
    Stopped,
    /// Every child it waited to restart was stopped by its ref.
    Withdrawn,
}

/// The restarts within a supervisor's intensity window.
#[derive(Default)]
struct Intensity(VecDeque<(Instant, u64)>);

impl Intensity {
    /// Records a restart of the child `key`; whether it is one too many: more than `limit`
    /// within `window`.
    fn exceeded(&mut self, key: u64, (limit, window): (usize, Duration)) -> bool {
        let now = runtime::clock::now();
        while self
            .0
            .front()
            .is_some_and(|&(at, _)| now.duration_since(at) > window)
        {
            self.0.pop_front();
        }
        self.0.push_back((now, key));
        self.0.len() > limit
    }

    /// The restart of the child `key` recorded last was cancelled before it happened (the
    /// child was terminated while it waited out its backoff): it no longer counts.
    fn cancel(&mut self, key: u64) {
        if let Some(at) = self.0.iter().rposition(|&(_, restarted)| restarted == key) {
            self.0.remove(at);
        }
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A supervisor's children and policy; what its loop runs on.
struct State {
    label: &'static str,
    /// Its life, and the table its refs read.
    node: Arc<Node>,
    strategy: Strategy,
    intensity: (usize, Duration),
    slots: Vec<Slot>,
    events: mpsc::UnboundedReceiver<Event>,
    sender: mpsc::UnboundedSender<Event>,
    restarts: Intensity,
    backoff: Backoff,
    /// Reports that arrived while a restart waited out its backoff, read before new ones.
    deferred: VecDeque<Event>,
}

/// Builds a supervision tree level: children are added with [`child`](Self::child) (each
/// returns its ref at once) and start, in order, when the supervisor is spawned.
pub struct Supervisor {
    state: State,
    /// The labels of the nested supervisors under it, at every depth, for
    /// [`try_spawn`](Self::try_spawn) to check before anything starts.
    nested_labels: Vec<&'static str>,
    /// What is wrong with a nested child (a pool's size), at every depth: `spawn` panics on
    /// it, `try_spawn` returns it.
    problems: Vec<Error>,
}

/// Shows the supervisor's label, strategy, intensity and how many children it has so far.
impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("label", &self.state.label)
            .field("strategy", &self.state.strategy)
            .field("intensity", &self.state.intensity)
            .field("children", &self.state.slots.len())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor labelled `label` (its scope's name: ASCII letters, digits and `_`) with
    /// `strategy` and a restart intensity of 3 restarts within 5 seconds.
    pub fn new(label: &'static str, strategy: Strategy) -> Self {
        let (sender, events) = mpsc::unbounded();
        Supervisor {
            state: State {
                label,
                node: Node::new(label, Shape::Static(strategy)),
                strategy,
                intensity: (3, Duration::from_secs(5)),
                slots: Vec::new(),
                events,
                sender,
                restarts: Intensity::default(),
                backoff: Backoff::none(),
                deferred: VecDeque::new(),
            },
            nested_labels: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// At most `restarts` restarts within `within`: one more, and the supervisor stops every
    /// child and escalates (fails, as a panic would, to its own supervisor or the runtime).
    pub fn intensity(mut self, restarts: usize, within: Duration) -> Self {
        self.state.intensity = (restarts, within);
        self
    }

    /// Waits `backoff` before each restart (none by default): a child that keeps failing
    /// is restarted ever more slowly. Its refs keep working meanwhile: messages wait in its
    /// mailbox, bounded by its capacity. A stop during the wait is handled at once.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.state.backoff = backoff;
        self
    }

    /// Adds a child, started after those added before it; returns its ref, which reaches
    /// every incarnation.
    pub fn child<A: Actor>(&mut self, spec: ChildSpec<A>) -> A::Ref {
        let mailbox = crate::actor::spawn::mailbox::<A>();
        let actor_ref = Ref::<A>::new(mailbox.clone());
        self.add(Slot::new(Box::new(ActorChild::new(spec, mailbox))), None);
        A::Ref::from(actor_ref)
    }

    /// Adds `slot`, and its entry in the table (`nested`: a nested supervisor's node).
    fn add(&mut self, mut slot: Slot, nested: Option<Arc<Node>>) {
        let key = self.state.slots.len() as u64;
        let entry = slot.entry(nested);
        self.state.node.table.lock().children.insert(key, entry);
        slot.observer = Some(Observer::new(&self.state.node, key));
        self.state.slots.push(slot);
    }

    /// Adds a supervisor as a child: a [`Supervisor`], a [`DynamicSupervisor`] or a
    /// [`Pool`](crate::Pool), with its restart policy and shutdown timeout; returns its ref
    /// at once, which reaches every incarnation of it. It starts, after the children added
    /// before it, once its own children run; this supervisor's strategy restarts it, with
    /// everything under it, like any child; stopping it stops its children first, in reverse
    /// start order, all within `shutdown` (then it is aborted); when it gives up (more
    /// restarts than its intensity allows) it fails, and this supervisor handles that as a
    /// failure of its child.
    ///
    /// What a restart keeps: a nested [`Supervisor`]'s children, and a pool's members, keep
    /// their refs and mailboxes (messages sent meanwhile wait); a [`DynamicSupervisor`]
    /// comes back empty, as in OTP (its children's refs see `Closed`; its own ref starts new
    /// ones, and a `start_child` made while it restarts waits for it).
    pub fn supervisor<S: ChildSupervisor>(
        &mut self,
        supervisor: S,
        restart: Restart,
        shutdown: Duration,
    ) -> S::Ref {
        let (nesting, supervisor_ref) = supervisor.__nest(restart, shutdown);
        self.nested_labels.extend(nesting.labels);
        self.problems.extend(nesting.problem);
        self.add(Slot::new(nesting.child), Some(nesting.node));
        supervisor_ref
    }

    /// [`spawn`](Self::spawn), refusing an invalid label, its own or a nested supervisor's
    /// at any depth (see [`Spawner::try_child`](runtime::Spawner::try_child)), or a nested
    /// pool's size, with an error that names it instead of panicking; for labels and sizes
    /// chosen at run time.
    pub fn try_spawn(mut self, context: &runtime::Context) -> Result<SupervisorRef, Error> {
        context.try_child(self.state.label)?;
        for label in &self.nested_labels {
            // A nested supervisor's scope is a child of its parent's: the same rule.
            context.try_child(label)?;
        }
        if !self.problems.is_empty() {
            return Err(self.problems.swap_remove(0));
        }
        Ok(self.spawn(context))
    }

    /// Starts the children in order under a child scope of `context` named by the label, and
    /// supervises them until [`SupervisorRef::stop`] or its scope ends.
    ///
    /// # Panics
    ///
    /// On a label that is not ASCII letters, digits and `_`, as
    /// [`Spawner::child`](runtime::Spawner::child) does, or a nested pool's size outside
    /// `1..=MAX_POOL_SIZE`; [`try_spawn`](Self::try_spawn) refuses them with an error
    /// instead.
    pub fn spawn(self, context: &runtime::Context) -> SupervisorRef {
        if let Some(problem) = self.problems.first() {
            panic!("{problem}");
        }
        let control = self.state.sender.clone();
        let label = self.state.label;
        let node = self.state.node.clone();
        let life = node.life.clone();
        table::add_root(context, &node);
        // Made before the spawn: a refused spawn drops it, which ends the life (`Shutdown`).
        let mut ending = Ending::new(life.clone(), self.state);
        // The task's handle is not kept: every ref waits on the life, and a dropped handle
        // detaches the task.
        drop(context.child(label).spawn(move |runtime| async move {
            let (started, _) = oneshot::channel();
            match ending.state().run(&runtime, 0, started).await {
                Ok(()) => ending.end(ExitReason::Stopped),
                Err(Escalated(message)) => {
                    // Nobody restarts this supervisor: its children are done for good (the
                    // state's drop), then it is.
                    report_giving_up(&message);
                    ending.end(ExitReason::Panicked(message));
                }
            }
        }));
        SupervisorRef {
            control,
            node,
            nested: None,
        }
    }
}

/// Why a `kind` of supervisor labelled `label` gives up past its `intensity`.
fn giving_up(kind: &str, label: &str, (limit, window): (usize, Duration)) -> Escalated {
    Escalated(format!(
        "{kind} `{label}` gave up: more than {limit} restarts within {window:?}"
    ))
}

/// A supervisor that can be a [`Supervisor`]'s child, added with [`Supervisor::supervisor`]:
/// a [`Supervisor`], a [`DynamicSupervisor`] or a [`Pool`](crate::Pool). Sealed: those are
/// the three.
pub trait ChildSupervisor: sealed::Sealed {
    /// Its ref, which [`Supervisor::supervisor`] returns: it reaches every incarnation.
    type Ref;

    /// The child its parent supervises, and its ref.
    #[doc(hidden)]
    fn __nest(self, restart: Restart, shutdown: Duration) -> (Nesting, Self::Ref);
}

pub(crate) mod sealed {
    /// Keeps [`ChildSupervisor`](super::ChildSupervisor) to this crate's supervisors.
    pub trait Sealed {}
}

/// A nested supervisor as its parent takes it: the child, the labels of every supervisor in
/// it (its own included), and what is wrong with it, if anything.
#[doc(hidden)]
pub struct Nesting {
    child: Box<dyn Child>,
    /// Its node: its life and table.
    node: Arc<Node>,
    labels: Vec<&'static str>,
    problem: Option<Error>,
}

/// Shows the nested supervisor's labels.
impl std::fmt::Debug for Nesting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nesting")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl Nesting {
    /// Marks the nested supervisor as one its parent's `spawn` refuses, for `problem`.
    pub(crate) fn refuse(&mut self, problem: Error) {
        self.problem.get_or_insert(problem);
    }

    /// The child that runs `state`'s loop labelled `label`, with its life and control
    /// channel; what its ref holds of it.
    fn new<S: Loop>(
        node: Arc<Node>,
        state: S,
        control: mpsc::UnboundedSender<Event>,
        restart: Restart,
        shutdown: Duration,
    ) -> (Self, NestedHandle) {
        let nested = Nested::new(state);
        let handle: Arc<dyn child::Terminable> = nested.clone();
        let label = node.label;
        let child = SupervisorChild {
            label,
            life: node.life.clone(),
            nested,
            control,
            restart,
            shutdown,
            incarnation: 0,
        };
        let nesting = Nesting {
            child: Box::new(child),
            node,
            labels: vec![label],
            problem: None,
        };
        (nesting, Arc::downgrade(&handle))
    }
}

impl sealed::Sealed for Supervisor {}

impl ChildSupervisor for Supervisor {
    type Ref = SupervisorRef;

    fn __nest(self, restart: Restart, shutdown: Duration) -> (Nesting, SupervisorRef) {
        let control = self.state.sender.clone();
        let node = self.state.node.clone();
        let (mut nesting, handle) =
            Nesting::new(node.clone(), self.state, control.clone(), restart, shutdown);
        nesting.labels.extend(self.nested_labels);
        nesting.problem = self.problems.into_iter().next();
        let supervisor_ref = SupervisorRef {
            control,
            node,
            nested: Some(handle),
        };
        (nesting, supervisor_ref)
    }
}

/// A ref's `stop()` of the supervisor whose events `control` takes and whose life is
/// `node`'s: a nested one is marked done for good first (its parent does not restart it),
/// then asked to stop, whichever incarnation runs; resolves once it ended.
fn stop(
    control: &mpsc::UnboundedSender<Event>,
    nested: &Option<NestedHandle>,
    node: &Node,
) -> Join {
    child::terminate(nested);
    let _ = control.unbounded_send(Event::Stop { incarnation: None });
    node.life.join()
}

/// Reports a top-level supervisor that gave up. Like an actor's panic, that ends the
/// supervisor (its joiners see `ExitReason::Panicked` with `message`), not the program: a
/// program that cannot go on without it joins it and stops. A closed stderr loses the line,
/// never the program.
pub(crate) fn report_giving_up(message: &str) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "{message}; it ended with its children, and the program goes on (join it to act on \
         that)"
    );
}

/// Shows `status` in the table `observer` reaches, if it is not what `shown` already says.
fn observe(shown: &mut ChildStatus, observer: &Option<Observer>, status: ChildStatus) {
    if *shown == status {
        return;
    }
    *shown = status;
    if let Some(observer) = observer {
        observer.update(|entry| entry.status = status);
    }
}

impl Slot {
    fn new(child: Box<dyn Child>) -> Self {
        Slot {
            child,
            running: None,
            generation: 0,
            finished: false,
            restarts: None,
            last: None,
            backoff: backoff::Attempts::default(),
            status: ChildStatus::Stopped,
            observer: None,
        }
    }

    /// Its entry in its supervisor's table; `nested`, a nested supervisor's node.
    fn entry(&self, nested: Option<Arc<Node>>) -> Entry {
        Entry {
            id: self.child.id(),
            restart: self.child.restart(),
            status: self.status,
            restarts: 0,
            nested,
        }
    }

    /// Its table shows it `status`.
    fn observe(&mut self, status: ChildStatus) {
        observe(&mut self.status, &self.observer, status);
    }

    /// It restarts: counted in its metrics and its table.
    fn count_restart(&self) {
        if let Some(counter) = &self.restarts {
            counter.inc();
        }
        if let Some(observer) = &self.observer {
            observer.update(|entry| entry.restarts += 1);
        }
    }

    /// Starts an incarnation and waits until it started; whether its `on_start` returned.
    async fn start(
        &mut self,
        index: usize,
        events: mpsc::UnboundedSender<Event>,
        runtime: &runtime::Context,
    ) -> bool {
        let (started, is_started) = oneshot::channel();
        self.launch(index, events, runtime, started);
        // Dropped unsent when the child failed before it started: its report follows.
        matches!(is_started.await, Ok(true))
    }

    /// Starts an incarnation without waiting for it: it says on `started` whether its
    /// `on_start` returned, and reports its end as every incarnation does.
    fn launch(
        &mut self,
        index: usize,
        events: mpsc::UnboundedSender<Event>,
        runtime: &runtime::Context,
        started: oneshot::Sender<bool>,
    ) {
        self.generation += 1;
        let reporter = Reporter {
            events,
            index,
            generation: self.generation,
            reported: false,
        };
        self.backoff.started();
        self.observe(ChildStatus::Running);
        let (incarnation, gone) = oneshot::channel();
        let handle = self
            .child
            .start(runtime, reporter, started, Incarnation(incarnation));
        self.running = Some(Running {
            handle: Some(handle),
            gone,
        });
    }

    /// Stops the child's running incarnation, if any: a stop request, then its shutdown
    /// timeout, then an abort. Its own report of this end is ignored. With `until_gone`, also
    /// waits until the incarnation's future is dropped (before a restart, which needs its
    /// mailbox consumer); a handler blocking its thread delays that until it returns.
    /// Without, an aborted incarnation stays in the slot for a later `stop` to wait for.
    async fn stop(&mut self, runtime: &runtime::Context, until_gone: bool) {
        self.request_stop();
        self.finish_stop(runtime, until_gone).await;
    }

    /// The first half of [`stop`](Self::stop): asks the running incarnation, if any, to
    /// stop, and ignores its report from now on.
    fn request_stop(&mut self) {
        if self.running.is_none() {
            return;
        }
        self.generation += 1;
        self.child.request_stop();
    }

    /// The child waits out a backoff and is stopped for good meanwhile: it ends `Stopped`
    /// (it was asked to), not with the failure it was to be restarted from. A child that
    /// ended for good, or whose supervisor gave up, keeps its own reason.
    fn stop_waiting(&mut self) {
        if self.running.is_none() && !self.finished {
            self.last = Some(ExitReason::Stopped);
        }
    }

    /// The second half of [`stop`](Self::stop), after [`request_stop`](Self::request_stop):
    /// waits out the shutdown timeout, then aborts.
    async fn finish_stop(&mut self, runtime: &runtime::Context, until_gone: bool) {
        let slot = self;
        let Some(running) = slot.running.as_mut() else {
            return;
        };
        let mut aborted = false;
        if let Some(handle) = running.handle.as_mut() {
            if runtime
                .timeout(slot.child.shutdown_timeout(), &mut *handle)
                .await
                .is_err()
            {
                handle.abort();
                aborted = true;
            }
            running.handle = None;
        }
        slot.last = Some(if aborted {
            ExitReason::Shutdown
        } else {
            ExitReason::Stopped
        });
        if aborted && !until_gone {
            return;
        }
        // An ended task dropped its future before its handle resolved: this is immediate.
        // An aborted one's handle resolves first, and its future is dropped after.
        let _ = (&mut running.gone).await;
        slot.running = None;
    }
}

/// A static supervisor's loop: its children keep their slots (and mailboxes) across its own
/// restarts.
impl Loop for State {
    fn run<'a>(
        &'a mut self,
        runtime: &'a runtime::Context,
        incarnation: u64,
        started: oneshot::Sender<bool>,
    ) -> impl std::future::Future<Output = Result<(), Escalated>> + Send + 'a {
        self.supervise(runtime, incarnation, started)
    }

    fn close(&mut self) {
        self.close_all();
    }

    fn stopped(&mut self) {
        for slot in &mut self.slots {
            slot.observe(ChildStatus::Stopped);
        }
    }
}

impl State {
    /// Runs the children until a stop (a ref's, or for a nested supervisor its parent's
    /// for `incarnation`) or an escalation; either way they are all stopped when it
    /// returns, and their mailboxes stay open: whoever owns this state decides whether they
    /// come back (a parent restarting a nested supervisor) or are done (`State`'s drop).
    /// `started` is sent once its children run.
    ///
    /// Reports an earlier run left unread are about incarnations that are gone: their
    /// generations are stale. So are stops for earlier incarnations: a parent sends one to
    /// every incarnation it stops, read or not, and each names the incarnation it is for.
    async fn supervise(
        &mut self,
        runtime: &runtime::Context,
        incarnation: u64,
        started: oneshot::Sender<bool>,
    ) -> Result<(), Escalated> {
        // Incarnations an aborted earlier run of this loop left behind (a nested supervisor
        // whose parent gave up waiting) must be gone before their children start again.
        for index in (0..self.slots.len()).rev() {
            self.stop(index, runtime, true).await;
        }
        let families = Families::of(runtime);
        for slot in &mut self.slots {
            slot.restarts = Some(families.restarts(slot.child.label()));
        }
        self.restarts.clear();
        for index in 0..self.slots.len() {
            // A child done for good stays done (its mailbox is closed).
            if !self.slots[index].finished {
                self.start(index, runtime).await;
            }
        }
        let _ = started.send(true);
        let outcome = loop {
            let event = match self.deferred.pop_front() {
                Some(event) => event,
                None => match self.events.next().await {
                    Some(event) => event,
                    None => break Ok(()),
                },
            };
            let (index, ended, reason) = match event {
                Event::Stop { .. } if event.stops(incarnation) => break Ok(()),
                // A stop for an earlier incarnation, which it never read.
                Event::Stop { .. } => continue,
                Event::Ended {
                    index,
                    generation,
                    ended,
                    reason,
                } => {
                    if self.slots[index].generation != generation {
                        continue;
                    }
                    (index, ended, reason)
                }
                // Only a dynamic supervisor is sent these.
                Event::Start { .. } | Event::Refused { .. } | Event::Terminate { .. } => continue,
                // A stop that came as a restart ended: the child takes it itself.
                Event::Withdrawn { .. } => continue,
            };
            let slot = &mut self.slots[index];
            slot.running = None;
            slot.last = Some(reason.clone());
            if !ended.restarts(slot.child.restart()) {
                self.finish(index, reason);
                continue;
            }
            slot.observe(ChildStatus::Restarting);
            if self.restarts.exceeded(index as u64, self.intensity) {
                #[cfg(feature = "tracing")]
                crate::trace::gave_up(self.label, slot.child.id(), &reason, self.intensity);
                break Err(self.giving_up("supervisor"));
            }
            let delay = slot.backoff.next_delay(&self.backoff);
            #[cfg(feature = "tracing")]
            crate::trace::restarting(self.label, slot.child.id(), &reason, slot.generation, delay);
            let affected = match self.strategy {
                Strategy::OneForOne => index..index + 1,
                Strategy::OneForAll => 0..self.slots.len(),
                Strategy::RestForOne => index..self.slots.len(),
            };
            for other in affected.clone().rev() {
                self.stop(other, runtime, true).await;
            }
            for waiting in affected.clone() {
                let slot = &self.slots[waiting];
                if slot.finished {
                    continue;
                }
                if waiting != index && slot.child.restart() == Restart::Temporary {
                    // Stopped with the failed child, and never restarted: done for good, as
                    // OTP ends a temporary sibling.
                    let reason = slot.last.clone().unwrap_or(ExitReason::Stopped);
                    self.finish(waiting, reason);
                    continue;
                }
                self.slots[waiting].observe(ChildStatus::Restarting);
            }
            if !delay.is_zero() {
                self.watch_stops(affected.clone(), true);
                let paused = self
                    .pause(runtime, incarnation, delay, affected.clone())
                    .await;
                self.watch_stops(affected.clone(), false);
                match paused {
                    Paused::Elapsed => {}
                    Paused::Stopped => {
                        for waiting in affected {
                            self.slots[waiting].stop_waiting();
                        }
                        break Ok(());
                    }
                    // Every child it waited to restart was stopped by its ref meanwhile: the
                    // restart never happens, and does not count.
                    Paused::Withdrawn => {
                        self.restarts.cancel(index as u64);
                        continue;
                    }
                }
            }
            for restarted in affected {
                if self.slots[restarted].finished {
                    continue;
                }
                self.slots[restarted].count_restart();
                self.start(restarted, runtime).await;
            }
        };
        // The shutdown timeout bounds this: an aborted child whose thread is blocked is left
        // for its future to drop on its own, and for a next run to wait for.
        for index in (0..self.slots.len()).rev() {
            self.stop(index, runtime, false).await;
        }
        outcome
    }

    /// While the children `waiting` wait out a backoff (`on`), a ref's `stop()` of one of
    /// them is sent to this loop as `Event::Withdrawn`, to end it at once; one made already
    /// is sent now.
    fn watch_stops(&mut self, waiting: std::ops::Range<usize>, on: bool) {
        for index in waiting {
            let slot = &self.slots[index];
            if slot.finished {
                continue;
            }
            let watch: Option<crate::lifecycle::StopWatch> = on.then(|| {
                let events = self.sender.clone();
                Arc::new(move || {
                    let _ = events.unbounded_send(Event::Withdrawn { index });
                }) as crate::lifecycle::StopWatch
            });
            if slot.child.watch_stop(watch) && on {
                let _ = self.sender.unbounded_send(Event::Withdrawn { index });
            }
        }
    }

    /// The child at `index` is done for good, for `reason`: not restarted, its mailbox
    /// closed, what its spec held dropped. A `Temporary` child leaves the table, as OTP
    /// deletes its spec; any other stays, `Stopped`.
    fn finish(&mut self, index: usize, reason: ExitReason) {
        let slot = &mut self.slots[index];
        slot.finished = true;
        slot.last = Some(reason.clone());
        slot.observe(ChildStatus::Stopped);
        if slot.child.restart() == Restart::Temporary {
            self.node.table.lock().children.remove(&(index as u64));
        }
        slot.child.close(reason);
    }

    /// The child at `index`, waiting out a backoff, was stopped by its ref: done for good.
    fn withdraw(&mut self, index: usize) {
        let slot = &self.slots[index];
        if slot.finished || slot.running.is_some() {
            return;
        }
        slot.child.watch_stop(None);
        self.finish(index, ExitReason::Stopped);
    }

    /// Waits `delay` before restarting the children `waiting`, keeping reports that arrive
    /// meanwhile for later, and ending at once a waiting child stopped by its ref; how it
    /// ended: the delay elapsed, a stop for `incarnation` came, or every child it waited for
    /// was stopped by its ref (nothing is left to restart).
    async fn pause(
        &mut self,
        runtime: &runtime::Context,
        incarnation: u64,
        delay: Duration,
        waiting: std::ops::Range<usize>,
    ) -> Paused {
        let mut sleep = std::pin::pin!(runtime.sleep(delay));
        loop {
            let next = self.events.next();
            match futures::future::select(sleep.as_mut(), next).await {
                futures::future::Either::Left(_) => return Paused::Elapsed,
                futures::future::Either::Right((None, _)) => return Paused::Stopped,
                futures::future::Either::Right((Some(event), _)) if event.stops(incarnation) => {
                    return Paused::Stopped;
                }
                futures::future::Either::Right((Some(Event::Stop { .. }), _)) => {}
                futures::future::Either::Right((Some(Event::Withdrawn { index }), _)) => {
                    self.withdraw(index);
                    if waiting.clone().all(|index| self.slots[index].finished) {
                        return Paused::Withdrawn;
                    }
                }
                futures::future::Either::Right((Some(event), _)) => self.deferred.push_back(event),
            }
        }
    }

    /// Why it gives up, as its exit reason says: a `kind` (a supervisor, a dynamic one, a
    /// pool) labelled so had more restarts than its intensity allows.
    fn giving_up(&self, kind: &str) -> Escalated {
        giving_up(kind, self.label, self.intensity)
    }

    /// Starts the child and waits until it has started, as OTP's `start_link` does: children
    /// start one after the other, in order. A child that fails to start reports it as its
    /// end.
    async fn start(&mut self, index: usize, runtime: &runtime::Context) {
        let events = self.sender.clone();
        self.slots[index].start(index, events, runtime).await;
    }

    /// Stops the child's running incarnation, if any (see [`Slot::stop`]); its table shows it
    /// stopped.
    async fn stop(&mut self, index: usize, runtime: &runtime::Context, until_gone: bool) {
        let slot = &mut self.slots[index];
        // A child that already ended (the one whose failure is handled) keeps its status.
        let running = slot.running.is_some();
        slot.stop(runtime, until_gone).await;
        if running {
            slot.observe(ChildStatus::Stopped);
        }
    }

    /// Every child is done for good, with how it last ended; nothing reads the supervisor's
    /// events any more, so a ref's `stop()` from now on is not queued (it hears the end).
    fn close_all(&mut self) {
        self.events.close();
        for slot in &mut self.slots {
            slot.observe(ChildStatus::Stopped);
            let reason = slot.last.clone().unwrap_or(ExitReason::Shutdown);
            slot.child.close(reason);
        }
    }
}

impl Drop for State {
    /// A supervisor's state goes when nothing can run its children any more: a top-level
    /// supervisor's task ended (or never started: refused, or the `Supervisor` dropped
    /// unspawned), or a nested one's parent went. Refs to the children then see `Closed`.
    fn drop(&mut self) {
        self.close_all();
    }
}

/// A running supervisor: stop it, or wait for it to end, as an actor's ref does. Cheap to
/// clone; dropping every clone does not stop the supervisor.
///
/// Its end is an [`ExitReason`], as an actor's: `Stopped` once stopped (by
/// [`stop`](Self::stop), or by its parent), `Panicked` if it gave up (more restarts than its
/// intensity allows: a top-level supervisor then ends, reported on stderr, and the program
/// goes on; a nested one escalates to its parent),
/// and `Shutdown` if its scope ended first (or, for a nested supervisor, its parent aborted it
/// past its shutdown timeout).
#[derive(Clone)]
pub struct SupervisorRef {
    control: mpsc::UnboundedSender<Event>,
    /// Its life and table.
    node: Arc<Node>,
    /// A nested supervisor's state, shared with its parent: `stop` marks it done for good.
    nested: Option<NestedHandle>,
}

/// Shows the supervisor's id (`label#n`), whether it is nested under another supervisor, and
/// whether its loop is gone; it takes no lock.
impl std::fmt::Debug for SupervisorRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorRef")
            .field("id", &self.node.life.id())
            .field("nested", &self.nested.is_some())
            .field("closed", &self.control.is_closed())
            .finish()
    }
}

impl SupervisorRef {
    /// The supervisor's id, shown as `label#n`.
    pub fn id(&self) -> ActorId {
        self.node.life.id()
    }

    /// Its children now, in start order, each with its id, label, kind, restart type,
    /// status and restarts so far (OTP's `which_children`). A static supervisor lists every
    /// child it was given, those done for good as [`ChildStatus::Stopped`], but for a
    /// `Temporary` child that ended, whose entry goes (as OTP deletes its spec).
    pub fn which_children(&self) -> Vec<ChildInfo> {
        self.node.which_children()
    }

    /// Its children now, counted: all, running, supervisors, actors (OTP's
    /// `count_children`).
    pub fn count_children(&self) -> ChildCounts {
        self.node.count_children()
    }

    /// Stops every child, in reverse start order, then the supervisor; resolves with its
    /// exit reason once it ended (`Stopped`, or why it ended first). The request is made when
    /// `stop` is called: dropping the future (`supervisor.stop();`) does not withdraw it,
    /// which is the fire-and-forget form. A nested supervisor stopped this way is done for
    /// good: its parent does not restart it, whatever its restart policy (as an actor
    /// child's `stop()`).
    pub fn stop(&self) -> Join {
        stop(&self.control, &self.nested, &self.node)
    }

    /// Resolves with the supervisor's exit reason once it ended for good, without asking it
    /// to (at once if it has): every caller, from any clone, hears the same reason. A nested
    /// supervisor ends for good when its parent is done with it (not at a restart).
    pub fn join(&self) -> Join {
        self.node.life.join()
    }
}
