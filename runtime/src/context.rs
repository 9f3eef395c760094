//! [`Context`]: the capabilities a task holds: where its spawns go (placement), its node in
//! the supervision tree, and its label path for metrics.
//!
//! Invariants:
//! - Placement is per spawn and never inherited: the context a task receives is always
//!   ordinary (`Shared(false)`), whatever the placement it was spawned with.
//! - `spawn` refuses (an already-closed handle, the factory never called) when the context's
//!   node is aborted or the task set is closed, and checks the set again after the factory,
//!   dropping a refused future on the caller's thread.
//! - The running metric is raised before the factory runs and is owned by the task from then
//!   on, so a factory panic, a refusal or the task's end each lower it exactly once.

use crate::metrics::{Label, MetricHandle};
use crate::runner::Shared;
use crate::stop::Signal;
use crate::supervision::{NodeRef, Tree};
use crate::task::{Handle, Home, Task};
use crate::time::Sleep;
use crate::worker::dedicated::{self, Launch};
use crate::worker::{Arrival, deliver};
use crate::{Clock, Error, Metrics, Spawner};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant, SystemTime};

/// Where a spawned task runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Execution {
    /// On the work-stealing pool (`false`), or on a thread of its own because it blocks
    /// (`true`).
    Shared(bool),
    /// On a thread and ring of its own.
    Dedicated,
}

impl Default for Execution {
    fn default() -> Self {
        Execution::Shared(false)
    }
}

impl Execution {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Execution::Shared(false) => "shared",
            Execution::Shared(true) => "blocking",
            Execution::Dedicated => "dedicated",
        }
    }

    fn slot(self) -> usize {
        match self {
            Execution::Shared(false) => 0,
            Execution::Shared(true) => 1,
            Execution::Dedicated => 2,
        }
    }
}

/// A label path: its name, its attributes, and its task metric handles, resolved once per
/// placement. Shared by every context of the path, so cloning a context costs one count.
#[derive(Default)]
struct Scope {
    name: String,
    attributes: Vec<(&'static str, String)>,
    families: [OnceLock<(Counter, Gauge)>; 3],
}

/// The capabilities of a task. Cheap to clone; `Send + Sync + 'static`.
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tree: NodeRef,
    pub(crate) execution: Execution,
    scope: Arc<Scope>,
}

impl Context {
    pub(crate) fn root(shared: Arc<Shared>, tree: NodeRef) -> Self {
        Self {
            shared,
            tree,
            execution: Execution::default(),
            scope: Arc::default(),
        }
    }

    fn families(&self) -> &(Counter, Gauge) {
        self.scope.families[self.execution.slot()].get_or_init(|| {
            let label = Label::task(self.scope.name.clone(), self.execution)
                .with_attributes(&self.scope.attributes);
            let metrics = &self.shared.metrics;
            (
                metrics.tasks_spawned.get_or_create(&label).clone(),
                metrics.tasks_running.get_or_create(&label).clone(),
            )
        })
    }

    /// The context the spawned task receives: a new tree node, ordinary placement.
    fn for_task(&self, tree: NodeRef) -> Context {
        Context {
            shared: self.shared.clone(),
            tree,
            execution: Execution::default(),
            scope: self.scope.clone(),
        }
    }
}

fn check_label(label: &str) {
    let valid = !label.is_empty()
        && label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
    assert!(
        valid,
        "invalid context label {label:?}: allowed are non-empty labels of ASCII letters, digits \
         and '_'"
    );
}

impl Spawner for Context {
    fn child(&self, label: &'static str) -> Self {
        check_label(label);
        let name = if self.scope.name.is_empty() {
            label.to_string()
        } else {
            format!("{}_{label}", self.scope.name)
        };
        Context {
            shared: self.shared.clone(),
            tree: Tree::child(&self.tree).0,
            execution: self.execution,
            scope: Arc::new(Scope {
                name,
                attributes: self.scope.attributes.clone(),
                families: Default::default(),
            }),
        }
    }

    fn with_attribute(mut self, key: &'static str, value: impl Display) -> Self {
        check_label(key);
        let mut attributes = self.scope.attributes.clone();
        let value = value.to_string();
        match attributes.iter_mut().find(|(existing, _)| *existing == key) {
            Some(entry) => entry.1 = value,
            None => attributes.push((key, value)),
        }
        self.scope = Arc::new(Scope {
            name: self.scope.name.clone(),
            attributes,
            families: Default::default(),
        });
        self
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
        if self.tree.is_aborted() || self.shared.tasks.is_closed() {
            return Handle::closed();
        }
        let lease = match self.execution {
            Execution::Shared(false) => None,
            _ => match self.shared.workers.reserve() {
                Some(lease) => Some(lease),
                None => return Handle::closed(),
            },
        };
        let metric = MetricHandle::new(running.clone());
        let panicker = self.shared.panicker.clone();
        let catch_panics = self.shared.config.catch_panics;
        let inbox = lease.as_ref().map(|_| dedicated::TaskInbox::new());
        let home = match &inbox {
            None => Home::Pool(Arc::downgrade(&self.shared.pool)),
            Some(inbox) => Home::Dedicated(inbox.clone()),
        };
        // The cell exists before the future: the factory's context refers to it as the new
        // task's node, adopted by this context's node.
        let mut prepared = Task::prepare::<Fut>(&self.tree, metric, panicker, catch_panics, home);
        let node = prepared.node();
        if let NodeRef::Task(task) = &node {
            self.tree.adopt_task(task);
        }
        let future = f(self.for_task(node));
        let (task, runnable, handle) = prepared.install(future);
        match (lease, inbox) {
            (Some(active), Some(inbox)) => {
                let name = format!("iouring-{}", self.execution.as_str());
                dedicated::launch(
                    Launch {
                        task,
                        runnable,
                        inbox,
                        shared: self.shared.clone(),
                        active,
                    },
                    name,
                );
            }
            _ => {
                // A refusal clears the task here: its handle closes, its future is dropped.
                let _ = self
                    .shared
                    .tasks
                    .admit(task, runnable, |runnable| deliver(runnable, Arrival::Spawn));
            }
        }
        handle
    }

    fn stop(
        self,
        value: i32,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.shared.stopper.stop(value);
        let released = self.shared.stopper.released();
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

    fn stopped(&self) -> Signal {
        self.shared.stopper.signal()
    }
}

impl Clock for Context {
    fn current(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send + 'static {
        Sleep::new(duration)
    }

    fn sleep_until(&self, deadline: SystemTime) -> impl Future<Output = ()> + Send + 'static {
        let remaining = deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Sleep::until(Instant::now() + remaining)
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
        let full = if self.scope.name.is_empty() {
            name
        } else {
            format!("{}_{name}", self.scope.name)
        };
        self.shared.metrics.register(full, help.into(), metric);
    }

    fn encode(&self) -> String {
        self.shared.metrics.encode()
    }
}
