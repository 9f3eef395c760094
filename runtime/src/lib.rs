//! A native io_uring, work-stealing async runtime with supervised task trees.
//!
//! Start a runtime with [`Runner::start`]; the root future runs on the calling thread (worker
//! zero) and receives a [`Context`], whose capability traits spawn supervised tasks
//! ([`Spawner`]), tell time ([`Clock`]), speak TCP ([`Network`], [`Listener`], [`Sink`],
//! [`Stream`]), resolve host names ([`Resolver`]), store durable blobs ([`Storage`], [`Blob`])
//! and export Prometheus metrics ([`Metrics`]). `use runtime::prelude::*` brings them all into
//! scope:
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

pub mod buffer;
mod config;
mod context;
mod driver;
mod extensions;
#[doc(hidden)]
pub mod __private {
    //! Support for the macros' expansions; not a public interface.
    pub use crate::macro_support::run_test;
    /// The lock the actors crate shares with the runtime (`std`'s under Miri; see `sync`).
    pub use crate::sync::{Mutex, MutexGuard};
}
/// A test hook's call site, one line in the path it marks: `test_hook!(before_park())` calls
/// `hooks::before_park()` in the crate's own tests and is nothing in every other build.
macro_rules! test_hook {
    ($hook:ident($($argument:expr),* $(,)?)) => {
        #[cfg(test)]
        crate::hooks::$hook($($argument),*);
    };
}

/// A park point of a worker's turn (`park_point!(self, BeforeWait)`): the `at_park` hook in the
/// crate's own tests, nothing in every other build.
macro_rules! park_point {
    ($worker:expr, $point:ident) => {
        #[cfg(test)]
        crate::hooks::at_park(
            $worker.pool(),
            $worker.index,
            crate::hooks::ParkPoint::$point,
        );
    };
}

#[cfg(test)]
mod hooks;
mod macro_support;
mod metrics;
pub mod net;
mod panic;
mod pool;
mod resolver;
mod runner;
mod slab;
mod stop;
pub mod storage;
mod supervision;
mod sync;
mod task;
mod time;
mod worker;

#[cfg(all(test, not(loom)))]
mod tests;

use std::fmt::Display;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};

/// Runs `async fn main` on the runtime; see the `runtime-macros` crate for its options.
pub use runtime_macros::main;
/// Runs an `async fn` test on a fresh runtime; see the `runtime-macros` crate for its options.
pub use runtime_macros::test;

pub use buffer::{IoBuf, IoBufMut, IoBufs, IoBufsMut};
pub use config::{Config, MAX_RING_SIZE, MAX_WORKERS, RingConfig, SpinnerConfig};
pub use context::{Context, Execution};
pub use runner::Runner;
pub use stop::Signal;
pub use storage::{ReadOptions, WriteOptions};
pub use task::Handle;
pub use time::{Sleep, TimeoutWheel};

/// The capability traits, imported anonymously so their methods work without clashing with
/// other names.
pub mod prelude {
    pub use crate::Blob as _;
    pub use crate::Clock as _;
    pub use crate::Listener as _;
    pub use crate::Metrics as _;
    pub use crate::Network as _;
    pub use crate::Resolver as _;
    pub use crate::Sink as _;
    pub use crate::Spawner as _;
    pub use crate::Storage as _;
    pub use crate::Stream as _;
}

/// Errors of runtime operations.
///
/// Errors compare equal when they are the same variant, whatever they carry, so tests and
/// callers can write `assert_eq!(result, Err(Error::Closed))`. Variants that carry an
/// [`io::Error`](std::io::Error) keep the operating system's error (its `kind()` and
/// `raw_os_error()`); an I/O timeout is an error of kind `TimedOut`.
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
    /// A read could not be observed: the worker that issued it closed before its result was
    /// taken, or it was polled where no runtime worker runs.
    ReadFailed,
    /// A write could not be issued: it was first polled where no runtime worker runs, or on a
    /// worker that is closing.
    WriteFailed,
    /// A host name could not be resolved (or the runtime has shut down); says why.
    ResolveFailed(String),
    /// A partition name is empty or holds a byte outside `[A-Za-z0-9_-]`.
    PartitionNameInvalid,
    /// The partition does not exist.
    PartitionMissing(String),
    /// The blob (`partition/hex(name)`) does not exist.
    BlobMissing(String),
    /// A blob operation failed; names the blob (`partition/hex(name)`) and keeps the OS error.
    BlobFailed(String, std::io::Error),
    /// A read of `len` bytes at `offset` reaches past the blob's end, which is `end`.
    BlobTooShort {
        /// The blob, as `partition/hex(name)`.
        blob: String,
        /// Where the read started.
        offset: u64,
        /// How many bytes it asked for.
        len: usize,
        /// The blob's length when the read hit its end.
        end: u64,
    },
    /// A page of a paged blob fails its checksum (or is shorter than its place requires): the
    /// bytes were damaged after they were written. Names the blob and the page's offset in it;
    /// the page's bytes are never returned as data.
    BlobCorrupt {
        /// The blob, as `partition/hex(name)`.
        blob: String,
        /// Where the damaged page starts in the blob (its physical offset).
        offset: u64,
    },
    /// Binding a listener to the address failed.
    BindFailed(std::net::SocketAddr, std::io::Error),
    /// Connecting to the address failed or timed out.
    DialFailed(std::net::SocketAddr, std::io::Error),
    /// Accepting a connection failed.
    AcceptFailed(std::io::Error),
    /// Sending failed, timed out, or the peer reset the connection.
    SendFailed(std::io::Error),
    /// Receiving failed, timed out, or the peer closed the connection before the bytes asked
    /// for arrived (kind `UnexpectedEof`).
    RecvFailed(std::io::Error),
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
            Error::ReadFailed => f.write_str(
                "read failed: the worker that issued it closed before its result was taken, or \
                 it was polled off the runtime's workers",
            ),
            Error::WriteFailed => f.write_str(
                "write failed: it was first polled off the runtime's workers or on a closing \
                 worker",
            ),
            Error::ResolveFailed(why) => write!(f, "resolve failed: {why}"),
            Error::PartitionNameInvalid => f.write_str(
                "partition name invalid: allowed are non-empty names of ASCII letters, digits, \
                 '_' and '-'",
            ),
            Error::PartitionMissing(partition) => {
                write!(f, "partition {partition:?} does not exist")
            }
            Error::BlobMissing(blob) => write!(f, "blob {blob} does not exist"),
            Error::BlobFailed(blob, error) => write!(f, "blob {blob}: {error}"),
            Error::BlobTooShort {
                blob,
                offset,
                len,
                end,
            } => write!(
                f,
                "blob {blob}: reading {len} bytes at offset {offset} reaches past its end at {end}"
            ),
            Error::BlobCorrupt { blob, offset } => write!(
                f,
                "blob {blob}: the page at offset {offset} is corrupt (no checksum in its \
                 trailer matches its bytes)"
            ),
            Error::BindFailed(address, error) => write!(f, "bind to {address} failed: {error}"),
            Error::DialFailed(address, error) => write!(f, "dial to {address} failed: {error}"),
            Error::AcceptFailed(error) => write!(f, "accept failed: {error}"),
            Error::SendFailed(error) => write!(f, "send failed: {error}"),
            Error::RecvFailed(error) => write!(f, "recv failed: {error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::BlobFailed(_, error)
            | Error::BindFailed(_, error)
            | Error::DialFailed(_, error)
            | Error::AcceptFailed(error)
            | Error::SendFailed(error)
            | Error::RecvFailed(error) => Some(error),
            _ => None,
        }
    }
}

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

/// TCP networking on the worker's ring.
pub trait Network: Clone + Send + Sync + 'static {
    /// What [`bind`](Self::bind) returns.
    type Listener: Listener;

    /// A listener on `address` (port 0 picks a free port; see [`Listener::local_addr`]).
    fn bind(
        &self,
        address: SocketAddr,
    ) -> impl Future<Output = Result<Self::Listener, Error>> + Send;

    /// A connection to `address`, as its sending and receiving halves. Fails with
    /// [`Error::DialFailed`] if it is refused or not made within the connect timeout.
    #[allow(clippy::type_complexity)]
    fn dial(
        &self,
        address: SocketAddr,
    ) -> impl Future<
        Output = Result<
            (
                <Self::Listener as Listener>::Sink,
                <Self::Listener as Listener>::Stream,
            ),
            Error,
        >,
    > + Send;
}

/// A TCP listener.
pub trait Listener: Send + 'static {
    /// The sending half of a connection.
    type Sink: Sink;
    /// The receiving half of a connection.
    type Stream: Stream;

    /// The next connection: the peer's address and the connection's halves. Dropping the
    /// future never loses a connection: one the kernel accepted for it is returned by the
    /// next call.
    fn accept(
        &mut self,
    ) -> impl Future<Output = Result<(SocketAddr, Self::Sink, Self::Stream), Error>> + Send;

    /// The address the listener is bound to.
    fn local_addr(&self) -> std::io::Result<SocketAddr>;
}

/// The sending half of a connection.
pub trait Sink: Send + 'static {
    /// Sends every byte of `bufs`, in order after earlier sends. Fails with
    /// [`Error::SendFailed`] if the peer resets or the bytes do not go out within the
    /// read/write timeout. Dropped after its first poll, the send still completes.
    fn send(
        &mut self,
        bufs: impl Into<IoBufs> + Send,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The receiving half of a connection.
pub trait Stream: Send + 'static {
    /// Exactly `len` bytes. Fails with [`Error::RecvFailed`] if the peer closes first (kind
    /// `UnexpectedEof`), resets, or no byte arrives within the read/write timeout. Dropping
    /// the future loses no bytes: what arrived for it is returned by the next call.
    fn recv(&mut self, len: usize) -> impl Future<Output = Result<IoBufs, Error>> + Send;
}

/// Host name resolution.
pub trait Resolver: Clone + Send + Sync + 'static {
    /// The addresses of `host`: a numeric address is returned as is, without a lookup; a
    /// name is looked up by the system resolver on a blocking thread, never on a pool worker.
    fn resolve(&self, host: &str) -> impl Future<Output = Result<Vec<IpAddr>, Error>> + Send;
}

/// Blob storage under the runner's storage directory.
pub trait Storage: Clone + Send + Sync + 'static {
    /// What [`open`](Self::open) returns.
    type Blob: Blob;

    /// Opens the blob `name` of `partition`, creating both if needed; returns it and its
    /// length. The blob lives at `<storage_directory>/<partition>/<hex(name)>`.
    fn open(
        &self,
        partition: &str,
        name: &[u8],
    ) -> impl Future<Output = Result<(Self::Blob, u64), Error>> + Send;

    /// Removes the blob `name` of `partition`, or the whole partition with `None`.
    fn remove(
        &self,
        partition: &str,
        name: Option<&[u8]>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// The names of the blobs in `partition`, sorted.
    fn scan(&self, partition: &str) -> impl Future<Output = Result<Vec<Vec<u8>>, Error>> + Send;
}

/// An open blob: a file of bytes read and written at offsets on the ring of the worker that
/// polls the operation. Clones share the file.
pub trait Blob: Clone + Send + Sync + 'static {
    /// Exactly `len` bytes at `offset`; a read reaching past the end is
    /// [`Error::BlobTooShort`], never a short read.
    fn read_at(
        &self,
        offset: u64,
        len: usize,
        options: ReadOptions,
    ) -> impl Future<Output = Result<IoBufs, Error>> + Send;

    /// Writes every byte of `bufs` at `offset`. Registered at its first poll: dropped after
    /// that, the write still completes (shutdown waits for it). With [`WriteOptions::SYNC`]
    /// the bytes are durable when the future resolves.
    fn write_at(
        &self,
        offset: u64,
        bufs: impl Into<IoBufs> + Send,
        options: WriteOptions,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Sets the blob's length, cutting or zero-extending it.
    fn resize(&self, len: u64) -> impl Future<Output = Result<(), Error>> + Send;

    /// Makes every completed write durable.
    fn sync(&self) -> impl Future<Output = Result<(), Error>> + Send;
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
