//! The capability traits a [`Context`](crate::Context) implements: the public contract of
//! spawning, time, metrics, networking, resolution and storage. Only the contract lives here;
//! the implementations are in the layers that own the resources.

use crate::buffer::IoBufs;
use crate::error::Error;
use crate::stop::Stopped;
use crate::task::Handle;
use std::fmt::Display;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

/// Spawning supervised tasks, scoping them, and stopping the runtime gracefully.
pub trait Spawner: Clone + Send + Sync + 'static {
    /// A child scope named `label` (ASCII letters, digits, `_`): a supervision node under this
    /// context's, closed (and every task under it aborted) with it, and a metric label path.
    /// Every call with one label on one context shares the node while anything under it
    /// lives, so spawning from `context.child(label)` in a loop allocates nothing for it.
    ///
    /// # Panics
    ///
    /// On a label that is empty or holds another character: a literal label is a fixed part
    /// of the program, like a format string. A label chosen at run time goes through
    /// [`try_child`](Spawner::try_child), which refuses it with an error instead.
    fn child(&self, label: &'static str) -> Self;

    /// [`child`](Spawner::child), refusing an invalid label with [`Error::LabelInvalid`]
    /// (which names it and what is allowed) instead of panicking.
    fn try_child(&self, label: &'static str) -> Result<Self, Error>;

    /// Adds a metric label to every task spawned from this context.
    ///
    /// # Panics
    ///
    /// On a key that is not a valid label (see [`child`](Spawner::child)); keys are literals.
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

    /// Resolves every [`Stopped`] to `value` (the first call's value wins) and waits until every
    /// signal has been dropped, or `timeout` passes (`Err(Error::Timeout)`).
    fn stop(
        self,
        value: i32,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// A future that resolves to the first value passed to [`stop`](Self::stop).
    fn stopped(&self) -> Stopped;
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
    /// read/write timeout. Dropped before it resolves, the send is cancelled at once (the
    /// socket is not held past the caller's own limit): bytes it had not handed to the
    /// socket may never go out, and the next send fails with that cancellation (kind
    /// `Interrupted`) unless they all went out after all. Once a send fails, every later
    /// send fails too (kind `BrokenPipe`): the byte stream may have a gap, and nothing is
    /// sent after it.
    fn send(
        &mut self,
        bufs: impl Into<IoBufs> + Send,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The receiving half of a connection.
pub trait Stream: Send + 'static {
    /// Exactly `len` bytes. Fails with [`Error::RecvFailed`] if the peer closes first (kind
    /// `UnexpectedEof`), resets, or no byte arrives within the read/write timeout. Dropping
    /// the future loses no bytes: what arrived for it is returned by the next call, and a
    /// receive it left waiting is cancelled at once.
    fn recv(&mut self, len: usize) -> impl Future<Output = Result<IoBufs, Error>> + Send;

    /// What has come, between 1 and `max` bytes: the bytes the stream holds already (received
    /// ahead by earlier calls), or else what one receive brings once at least one byte has
    /// arrived. Use it for a decoder that takes whatever is there (a line or frame parser),
    /// rather than asking for bytes one exact length at a time.
    ///
    /// `max == 0` resolves at once to an empty buffer, without looking at the connection.
    /// At the end of the stream (the peer closed its sending side and every byte it sent has
    /// been returned) it fails with [`Error::RecvFailed`] of kind `UnexpectedEof`, as
    /// [`recv`](Self::recv) does; it fails likewise if the peer resets, or no byte arrives
    /// within the read/write timeout (kind `TimedOut`; the stream stays usable and the next
    /// call waits again). Dropping the future loses no bytes, as with `recv`.
    fn recv_some(&mut self, max: usize) -> impl Future<Output = Result<IoBufs, Error>> + Send;
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

    /// Removes the blob `name` of `partition`, or the whole partition with `None`. The removal
    /// happens at the call; the future resolves once it is durable (the directory that held
    /// the entry is synced), so a crash after it resolves cannot bring the blob back.
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

/// How a read uses the page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    pub(crate) dont_cache: bool,
}

impl ReadOptions {
    /// Read without keeping the pages in the page cache (`RWF_DONTCACHE`, Linux 6.14+; any
    /// offset and length). Where the file system cannot, the read goes through the cache.
    pub const DONT_CACHE: Self = Self { dont_cache: true };
}

/// How a write reaches the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    pub(crate) sync: bool,
}

impl WriteOptions {
    /// The write is durable when its future resolves (`RWF_DSYNC`).
    pub const SYNC: Self = Self { sync: true };
}
