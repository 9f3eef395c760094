//! [`Context`]: the capabilities a task holds: where its spawns go (placement), its node in
//! the supervision tree, and its label path for metrics. Here a spawned task's cell is tied to
//! the rest of the runtime: its owner is a [`TaskNode`] (its node, home and placement), whose
//! hooks ([`Owner`]) deliver it through the worker, close it in the tree and count it in its
//! label path.
//!
//! Invariants:
//! - Placement is per spawn and never inherited: the context a task receives is always
//!   ordinary (`Shared(false)`), whatever the placement it was spawned with.
//! - `spawn` refuses (an already-closed handle, the factory never called) when the context's
//!   node is aborted or the task set is closed, and checks the set again after the factory,
//!   dropping a refused future on the caller's thread.
//! - The running metric is raised before the factory runs and is owned by the task from then
//!   on, so a factory panic, a refusal or the task's end each lower it exactly once.

use crate::metrics::Label;
use crate::panic::Payload;
use crate::pool::Home;
use crate::sharded::{ShardedCounter, ShardedGauge};
use crate::stop::Stopped;
use crate::supervision::{self, NodeRef, ScopeNode, TaskNode};
use crate::task::{Execution, Handle, Owner, Placement, Runnable, Task, TaskRef};
use crate::worker::dedicated::{self, Launch};
use crate::worker::{RunnerState, Sleep, deliver};
use crate::{Clock, Error, Metrics, Spawner};
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};

/// A label path: the runner, its name, its attributes, and its task metric handles, resolved
/// once per placement. Every node of the supervision tree carries its path, so a context is
/// one pointer (its node) and cloning it costs one count.
pub(crate) struct LabelPath {
    shared: Arc<RunnerState>,
    name: String,
    attributes: Vec<(&'static str, String)>,
    families: [OnceLock<(ShardedCounter, ShardedGauge)>; 3],
    /// The scopes `child` made under this one, by label: a scope is only a name, attributes
    /// and metric handles, so every child context with one label shares one (spawning
    /// thousands of actors under one label then makes one scope, not thousands). Labels are
    /// `'static`, so the list is bounded by the program's labels.
    children: crate::sync::Mutex<Vec<(&'static str, Arc<LabelPath>)>>,
}

impl LabelPath {
    /// Lowers the running gauge of `execution` (raised by the spawn, before its factory ran).
    pub(crate) fn finish_running(&self, execution: Execution) {
        if let Some((_, running)) = self.families[execution.slot()].get() {
            running.dec();
        }
    }

    /// A panic of a task's poll: with `catch_panics` only its handle sees it (`Exited`);
    /// otherwise it goes to the panicker and fails the runner.
    pub(crate) fn route_panic(&self, payload: Payload) {
        if self.shared.config.catch_panics {
            crate::panic::dispose(payload);
        } else {
            self.shared.panicker.notify(payload);
        }
    }

    fn new(
        shared: Arc<RunnerState>,
        name: String,
        attributes: Vec<(&'static str, String)>,
    ) -> Self {
        Self {
            shared,
            name,
            attributes,
            families: Default::default(),
            children: Default::default(),
        }
    }
}

impl Owner for TaskNode<LabelPath> {
    fn schedule(runnable: Runnable) {
        deliver::<LabelPath>(runnable);
    }

    fn is_aborted(&self) -> bool {
        self.core.is_closed()
    }

    fn end(&self, task: &TaskRef) {
        supervision::end(&self.core, task);
    }

    fn abort(&self, task: &TaskRef) {
        NodeRef::<LabelPath>::Task(task.clone()).abort();
    }

    fn published(&self) {
        self.core.scope().finish_running(self.execution);
    }

    fn panicked(&self, payload: Payload) {
        self.core.scope().route_panic(payload);
    }
}

/// Delivers a new pool task's first runnable. Not generic, so the spawns of every future type
/// share this one compiled path instead of an instance each.
fn deliver_spawned(runnable: Runnable) {
    deliver::<LabelPath>(runnable);
}

/// The capabilities of a task. Cheap to clone (one count); `Send + Sync + 'static`.
#[derive(Clone)]
pub struct Context {
    pub(crate) tree: NodeRef<LabelPath>,
    pub(crate) execution: Execution,
}

/// Shows what identifies the context: its label path (the scope name its metrics are prefixed
/// with, empty for the root), its attributes, its node in the supervision tree (`task@<address>`
/// for a task's own context, the address its [`Handle`] shows too, or `scope@<address>`),
/// whether that node is aborted, and the placement of its next spawn. Reads no lock.
impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scope = self.scope();
        let node = match &self.tree {
            NodeRef::Scope(node) => format!("scope@{:p}", Arc::as_ptr(node)),
            NodeRef::Task(task) => format!("task@{:p}", task.identity()),
        };
        f.debug_struct("Context")
            .field("label", &scope.name)
            .field("attributes", &scope.attributes)
            .field("node", &format_args!("{node}"))
            .field("aborted", &self.tree.is_aborted())
            .field("execution", &self.execution)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The root context: a root scope of the runner.
    pub(crate) fn root(shared: Arc<RunnerState>) -> Self {
        let scope = Arc::new(LabelPath::new(shared, String::new(), Vec::new()));
        Self {
            tree: ScopeNode::root(scope),
            execution: Execution::default(),
        }
    }

    /// The runner this context belongs to.
    pub(crate) fn runtime(&self) -> &Arc<RunnerState> {
        &self.scope().shared
    }

    /// Whether this context belongs to a deterministic run.
    #[cfg(feature = "deterministic")]
    #[inline]
    pub(crate) fn is_simulated(&self) -> bool {
        self.runtime().simulation.is_some()
    }

    /// The scope `child(label)` labels its node with: made once per label under this scope.
    fn child_scope(&self, label: &'static str) -> Arc<LabelPath> {
        let scope = self.scope();
        let mut children = scope.children.lock();
        match children.iter().find(|(existing, _)| *existing == label) {
            Some((_, child)) => child.clone(),
            None => {
                let name = if scope.name.is_empty() {
                    label.to_string()
                } else {
                    format!("{}_{label}", scope.name)
                };
                let child = Arc::new(LabelPath::new(
                    scope.shared.clone(),
                    name,
                    scope.attributes.clone(),
                ));
                children.push((label, child.clone()));
                child
            }
        }
    }

    /// The value of type `T` this context's runtime keeps, made by `init` on first use: one
    /// per runner and type, shared by every context of the runner, dropped with it. For
    /// libraries built on the runtime that need state per runtime rather than per process
    /// (the `actors` crate keeps its registry of names and its metric families here).
    ///
    /// `init` runs once per runtime, under the lock that guards the values, with the
    /// runtime's Prometheus registry: metrics it registers appear in [`encode`](Self::encode)
    /// under the names it gives them, not prefixed by this context's label. It must not ask
    /// for an extension itself (that would wait for its own lock). Finding a value takes that
    /// lock and a scan of the values kept: keep the returned `Arc` rather than call this per
    /// operation.
    pub fn extension<T: std::any::Any + Send + Sync>(
        &self,
        init: impl FnOnce(&mut prometheus_client::registry::Registry) -> T,
    ) -> Arc<T> {
        let shared = self.runtime();
        shared
            .extensions
            .get_or_init(|| shared.metrics.with_registry(init))
    }

    /// A future that resolves when the process receives `signal` (SIGINT for
    /// [`Signal::Interrupt`](crate::Signal::Interrupt), SIGTERM for
    /// [`Signal::Terminate`](crate::Signal::Terminate)) after this call; it fails at once,
    /// saying why, only if the process cannot watch signals (out of descriptors or threads).
    ///
    /// The first wait for a signal installs its handler for the rest of the process: from
    /// then on that signal no longer ends the process by itself, whoever waits (as with
    /// tokio's `ctrl_c`), so a program that waits for Ctrl-C decides what it does, usually a
    /// graceful [`stop`](crate::Spawner::stop) with a deadline. Every wait made before a
    /// delivery sees it, however many there are and whichever runner made them.
    ///
    /// ```no_run
    /// use runtime::prelude::*;
    /// use runtime::Signal;
    /// use std::time::Duration;
    ///
    /// #[runtime::main]
    /// async fn main(context: runtime::Context) -> Result<(), runtime::Error> {
    ///     let interrupt = context.signal(Signal::Interrupt);
    ///     // ... start the program's work ...
    ///     interrupt.await?;
    ///     context.stop(0, Some(Duration::from_secs(5))).await
    /// }
    /// ```
    pub fn signal(&self, signal: crate::Signal) -> crate::SignalWait {
        crate::SignalWait::new(signal)
    }

    /// The context's label path (its scope name), as metric names are prefixed with it.
    #[doc(hidden)]
    pub fn __label(&self) -> &str {
        &self.scope().name
    }

    fn scope(&self) -> &Arc<LabelPath> {
        self.tree.scope()
    }

    /// A context on a new scope node under this one, for `scope`.
    fn with_scope(&self, scope: LabelPath) -> Context {
        Context {
            tree: ScopeNode::child(&self.tree, Arc::new(scope)).0,
            execution: self.execution,
        }
    }

    fn families(&self) -> &(ShardedCounter, ShardedGauge) {
        let scope = self.scope();
        scope.families[self.execution.slot()].get_or_init(|| {
            let label =
                Label::task(scope.name.clone(), self.execution).with_attributes(&scope.attributes);
            let metrics = &scope.shared.metrics;
            (
                metrics.tasks_spawned.get_or_create(&label).clone(),
                metrics.tasks_running.get_or_create(&label).clone(),
            )
        })
    }

    /// The context the spawned task receives: its own node, ordinary placement.
    fn for_task(tree: NodeRef<LabelPath>) -> Context {
        Context {
            tree,
            execution: Execution::default(),
        }
    }
}

/// Whether a label or an attribute key is valid: non-empty, ASCII letters, digits and `_`
/// (what a metric name may hold). On the spawn path (`child` runs per spawn from a loop): a
/// plain check, with the error built only when it fails.
fn label_is_valid(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// The literal forms' check, which panics with [`Error::LabelInvalid`]'s message.
#[inline]
fn check_label(label: &str) {
    if !label_is_valid(label) {
        invalid_label(label);
    }
}

#[cold]
#[inline(never)]
fn invalid_label(label: &str) -> ! {
    panic!("{}", Error::LabelInvalid(label.to_string()))
}

impl Spawner for Context {
    /// Every call with one label on this context's node shares one node while anything under
    /// it lives (a context or a task), instead of a node per call: a child context can only be
    /// closed with its parent, so contexts of one label under one parent are
    /// indistinguishable, and spawning from `context.child("label")` in a loop allocates
    /// nothing for the child.
    fn child(&self, label: &'static str) -> Self {
        check_label(label);
        Context {
            tree: ScopeNode::shared_child(&self.tree, label, || self.child_scope(label)).0,
            execution: self.execution,
        }
    }

    fn try_child(&self, label: &'static str) -> Result<Self, Error> {
        if !label_is_valid(label) {
            return Err(Error::LabelInvalid(label.to_string()));
        }
        Ok(self.child(label))
    }

    fn with_attribute(self, key: &'static str, value: impl Display) -> Self {
        check_label(key);
        let scope = self.scope();
        let mut attributes = scope.attributes.clone();
        let value = value.to_string();
        match attributes.iter_mut().find(|(existing, _)| *existing == key) {
            Some(entry) => entry.1 = value,
            None => attributes.push((key, value)),
        }
        // A scope of its own, under this one: the attribute labels what is spawned from it.
        self.with_scope(LabelPath::new(
            scope.shared.clone(),
            scope.name.clone(),
            attributes,
        ))
    }

    fn shared(mut self, blocking: bool) -> Self {
        self.execution = Execution::Shared(blocking);
        self
    }

    fn dedicated(mut self) -> Self {
        self.execution = Execution::Dedicated;
        self
    }

    fn spawn<F, Fut, T>(self, f: F) -> Handle<T>
    where
        F: FnOnce(Self) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (spawned, running) = self.families();
        spawned.inc();
        if self.tree.is_aborted() || self.runtime().tasks.is_closed() {
            return Handle::closed();
        }
        let lease = match self.execution.placement() {
            Placement::Pool => None,
            // A deterministic run has one thread: dedicated and blocking tasks are polled on
            // it with the others (their placement still labels their metrics). Compiled only
            // with the feature: without it, the spawn path is the one it was.
            #[cfg(feature = "deterministic")]
            _ if self.is_simulated() => None,
            _ => match self.runtime().workers.reserve() {
                Some(lease) => Some(lease),
                None => return Handle::closed(),
            },
        };
        running.inc();
        let inbox = lease.as_ref().map(|_| dedicated::TaskInbox::new());
        let home = match &inbox {
            None => Home::Pool(Arc::downgrade(&self.runtime().pool)),
            Some(inbox) => Home::Dedicated(inbox.clone()),
        };
        // The cell exists before the future: the factory's context refers to it as the new
        // task's node, adopted by this context's node.
        let owner = TaskNode::under(&self.tree, home, self.execution);
        let mut prepared = Task::prepare::<Fut, TaskNode<LabelPath>>(owner);
        let node = prepared.for_context();
        self.tree.adopt_task(&node);
        let future = f(Context::for_task(NodeRef::Task(node)));
        let (task, runnable, join) = prepared.install(future);
        let handle = Handle::new(join);
        match (lease, inbox) {
            (Some(lease), Some(inbox)) => {
                dedicated::launch(
                    Launch {
                        task,
                        runnable,
                        inbox,
                        shared: self.runtime().clone(),
                        lease,
                    },
                    self.execution.placement() == Placement::Blocking,
                );
            }
            _ => {
                // A refusal clears the task here: its handle closes, its future is dropped.
                let _ = self.runtime().tasks.admit(task, runnable, deliver_spawned);
            }
        }
        handle
    }

    fn stop(
        self,
        value: i32,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.runtime().stopper.stop(value);
        let released = self.runtime().stopper.released();
        async move {
            match timeout {
                Some(timeout) => self.timeout(timeout, released).await,
                None => {
                    released.await;
                    Ok(())
                }
            }
        }
    }

    fn stopped(&self) -> Stopped {
        self.runtime().stopper.signal()
    }
}

impl Clock for Context {
    fn current(&self) -> SystemTime {
        crate::time::clock::system_now()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send + 'static {
        Sleep::new(duration)
    }

    fn sleep_until(&self, deadline: SystemTime) -> impl Future<Output = ()> + Send + 'static {
        let remaining = deadline
            .duration_since(crate::time::clock::system_now())
            .unwrap_or(Duration::ZERO);
        Sleep::new(remaining)
    }

    fn timeout<F>(
        &self,
        duration: Duration,
        future: F,
    ) -> impl Future<Output = Result<F::Output, Error>> + Send
    where
        F: Future + Send,
        F::Output: Send,
    {
        Timeout {
            future,
            sleep: Sleep::new(duration),
        }
    }
}

/// A future bounded by a sleep: `Err(Error::Timeout)` if the sleep ends first.
struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of `self`; `sleep` is
        // `Unpin`.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: see above.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(output) = future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(&mut this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Error::Timeout)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Metrics for Context {
    fn register(
        &self,
        name: impl Into<String>,
        help: impl Into<String>,
        metric: impl prometheus_client::registry::Metric,
    ) {
        let name = name.into();
        let prefix = &self.scope().name;
        let full = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}_{name}")
        };
        self.runtime().metrics.register(full, help.into(), metric);
    }

    fn encode(&self) -> String {
        self.runtime().metrics.encode()
    }
}
