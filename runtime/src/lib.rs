//! A native io_uring, work-stealing async runtime with supervised task trees.
//!
//! Start a runtime with [`Runner::start`]; the root future runs on the calling thread (worker
//! zero) and receives a [`Context`], whose capability traits ([`Spawner`], [`Clock`],
//! [`Metrics`]) spawn supervised tasks, tell time and export Prometheus metrics:
//!
//! ```
//! use runtime::prelude::*;
//! use std::time::Duration;
//!
//! let output = runtime::Runner::new(runtime::Config::default()).start(|context| async move {
//!     let handle = context.clone().spawn(|context| async move {
//!         context.sleep(Duration::from_millis(1)).await;
//!         6
//!     });
//!     handle.await.unwrap() + 1
//! });
//! assert_eq!(output, 7);
//! ```
//!
//! Programs and tests usually start it through the attributes `#[runtime::main]` (on
//! `async fn main`) and `#[runtime::test]` (on `async fn` tests, each with a fresh storage
//! directory and an optional `timeout`); both may take the root `Context`.
//!
//! Every native worker owns one io_uring ring (`SINGLE_ISSUER | DEFER_TASKRUN`, Linux 6.1+).
//! No other executor runs underneath: the task cells, queues, timers and rings are this
//! crate's own.

// Under `--cfg loom` only the models run; the rest of the crate is compiled but not exercised.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

mod config;
mod context;
mod driver;
#[doc(hidden)]
pub mod __private {
    //! Support for the macros' expansions; not a public interface.
    pub use crate::macro_support::run_test;
}
#[cfg(test)]
mod hooks;
mod macro_support;
mod metrics;
mod panic;
mod pool;
mod runner;
mod slab;
mod stop;
mod supervision;
mod sync;
mod task;
mod time;
mod worker;

#[cfg(all(test, not(loom)))]
mod tests;

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};

/// Runs `async fn main` on the runtime; see the `runtime-macros` crate for its options.
pub use runtime_macros::main;
/// Runs an `async fn` test on a fresh runtime; see the `runtime-macros` crate for its options.
pub use runtime_macros::test;

pub use config::{Config, MAX_RING_SIZE, MAX_WORKERS, RingConfig, SpinnerConfig};
pub use context::{Context, Execution};
pub use runner::Runner;
pub use stop::Signal;
pub use task::Handle;
pub use time::TimeoutWheel;

/// The capability traits, imported anonymously so their methods work without clashing with
/// other names.
pub mod prelude {
    pub use crate::Clock as _;
    pub use crate::Metrics as _;
    pub use crate::Spawner as _;
}

/// Errors of runtime operations.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The task was aborted, cancelled, refused or shut down, or its worker failed to start,
    /// or its future's destructor panicked before the result was published.
    Closed,
    /// The task panicked while panics are caught.
    Exited,
    /// The deadline passed first.
    Timeout,
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Closed => f.write_str("closed: the task was aborted, cancelled or shut down"),
            Error::Exited => f.write_str("exited: the task panicked"),
            Error::Timeout => f.write_str("timed out"),
        }
    }
}

impl std::error::Error for Error {}

/// Spawning supervised tasks, scoping them, and stopping the runtime gracefully.
pub trait Spawner: Clone + Send + Sync + 'static {
    /// A child scope named `label` (ASCII letters, digits, `_`): a new supervision node whose
    /// tasks are aborted with it, and a new metric label path.
    fn child(&self, label: &'static str) -> Self;

    /// Adds a metric label to every task spawned from this context.
    fn with_attribute(self, key: &'static str, value: impl Display) -> Self;

    /// The next spawn runs on the pool (`false`), or on a thread of its own because it blocks
    /// (`true`).
    ///
    /// A blocking task has its thread and ring to itself while it runs; when it ends, the
    /// thread parks for 10 s with its drained ring, and the next blocking spawn runs there
    /// instead of creating a thread and a ring (as tokio's `spawn_blocking` reuses its pool).
    /// Each task still starts with fresh timers and registrations; only the thread's own
    /// thread-locals carry over. Shutdown tells parked threads to leave and waits for them.
    fn shared(self, blocking: bool) -> Self;

    /// The next spawn runs on a thread and ring of its own, created for it and ended after
    /// it: use it for long-lived work such as an actor that owns its thread. The thread's
    /// thread-locals are destroyed when the task's worker has finished its cleanup.
    fn dedicated(self) -> Self;

    /// Runs `f` synchronously on the caller to build the task's future, then schedules it
    /// according to the context's placement. A factory panic unwinds into the caller. A
    /// closed context returns an already-closed handle without calling `f`.
    fn spawn<F, Fut, T>(self, f: F) -> Handle<T>
    where
        F: FnOnce(Self) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static;

    /// Resolves every [`Signal`] to `value` (the first call's value wins) and waits until every
    /// signal has been dropped, or `timeout` passes (`Err(Error::Timeout)`).
    fn stop(
        self,
        value: i32,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// A future that resolves to the first value passed to [`stop`](Self::stop).
    fn stopped(&self) -> Signal;
}

/// Time.
pub trait Clock: Clone + Send + Sync + 'static {
    /// The wall-clock time.
    fn current(&self) -> SystemTime;

    /// Completes after `duration`. Polled first on a runtime worker, it registers on that
    /// worker's timer table.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send + 'static;

    /// Completes at `deadline` (at once if it has passed).
    fn sleep_until(&self, deadline: SystemTime) -> impl Future<Output = ()> + Send + 'static;

    /// Runs `future` for at most `duration`: `Err(Error::Timeout)` if the time runs out first.
    fn timeout<F>(
        &self,
        duration: Duration,
        future: F,
    ) -> impl Future<Output = Result<F::Output, Error>> + Send
    where
        F: Future + Send,
        F::Output: Send;
}

/// Prometheus metrics.
pub trait Metrics: Clone + Send + Sync + 'static {
    /// Registers `metric` under `name`, prefixed with this context's label path.
    fn register(
        &self,
        name: impl Into<String>,
        help: impl Into<String>,
        metric: impl prometheus_client::registry::Metric,
    );

    /// The Prometheus text exposition of everything registered in the runtime, ending in
    /// `# EOF`.
    fn encode(&self) -> String;
}

/// A future that yields once: it wakes itself and returns `Pending`, so the task runs again
/// behind the work already queued.
pub fn reschedule() -> Reschedule {
    Reschedule { yielded: false }
}

/// The future of [`reschedule`].
#[derive(Debug)]
pub struct Reschedule {
    yielded: bool,
}

impl Future for Reschedule {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
