//! TCP on the rings: [`Listener`], and a connection's halves [`Sink`] and [`Stream`].
//!
//! Every connect and receive is an operation registered on the ring of the worker that first
//! polls it. An accept is a non-blocking `accept4` on the listening socket; when no connection
//! is waiting, the ring waits for the listener's readiness set (an epoll descriptor holding
//! only that socket) to become readable. The ring never holds the listening socket itself, so
//! when a process dies (even by `kill -9`) its listening sockets close with its descriptor
//! table, and a restarted server binds the port at once: a ring's in-flight requests are only
//! released by its teardown, which the kernel finishes asynchronously, after the process is
//! gone. A send first offers its bytes to the socket with one non-blocking
//! `sendmsg` (what the socket takes at once needs no completion and no second wake of the
//! task) and registers the rest.
//!
//! A stream receives in one of two ways, chosen by `RingConfig::receive_buffers`:
//! - One receive per call that must wait (the default), registered on the ring of the worker
//!   running the call. One that follows a receive which drained the socket asks the ring to wait
//!   for data before trying (`IORING_RECVSEND_POLL_FIRST`), saving a try that would find
//!   nothing.
//! - One multishot receive into the ring's provided buffers, armed by the first call that must
//!   wait and left armed across calls: its bytes collect in its slot's inbox, and a call takes
//!   them only when the stream's own buffer lacks what it asks for. Once the inbox holds 64 KiB
//!   the receive pauses itself, and the next call that must wait arms it again (with that
//!   call's deadline), so a reader that does not read holds the sender back through TCP. A
//!   ring that has no buffers answers the first arm with `Unsupported`, and the stream receives
//!   one call at a time from then on.
//!
//! The halves keep the operation they started until it is done, which gives the guarantees the
//! traits promise:
//!
//! - A dropped `accept` future loses nothing: its readiness wait stays with the listener, and
//!   the next call takes the connection first.
//! - A dropped `recv` future loses no bytes, and holds nothing past the drop: its one-call
//!   receive is cancelled on its ring at once (`IORING_OP_ASYNC_CANCEL`), and bytes the kernel
//!   delivered before the cancellation stay in the stream's buffer for the calls that follow.
//!   A multishot receive belongs to the stream, not to a call, and stays armed.
//! - Sends go out in call order, and the driver resubmits short sends, so every byte of a send
//!   that resolves goes out. A send whose future is dropped before it resolves is cancelled on
//!   its ring at once, so a caller's own limit (a timeout around the send) is what holds the
//!   socket, not the runtime's read/write timeout: the bytes it had not handed to the socket
//!   may never go out, so the next send first takes the cancelled one's answer and fails with
//!   it (`Interrupted`) unless every byte went out after all.
//! - A sink never sends bytes after a gap: once a send fails (times out, is reset, or is
//!   given up with bytes it may not have delivered), every later send on it fails too
//!   (`BrokenPipe`), so a caller that retries cannot put a damaged stream on the wire.
//! - A stream dropped with a receive in flight shuts its reading side down and cancels the
//!   receive, and a listener dropped with an accept in flight shuts the socket down, so the
//!   pending operation ends and the socket closes instead of waiting for a peer. A sink
//!   dropped with a (given up) send in flight has its writing side shut once the ring has the
//!   send's answer.
//! - A receive never reserves more than 1 MiB ahead of the bytes it holds: a
//!   length a peer announces gets memory only as its bytes arrive. A multishot receive holds
//!   at most 128 KiB plus its ring's provided buffers beyond what the reader asked for.
//! - A multishot receive's error comes after the bytes that arrived before it, and a receive
//!   cancelled because its ring closed (a dedicated task's thread ended) is armed again on the
//!   ring of the next call.
//!
//! The halves also speak `futures::io` (`futures_io`): the stream is `AsyncRead` and
//! `AsyncBufRead` over its own receive buffer, the sink `AsyncWrite`, keeping the operation
//! in flight in the half across polls as the futures above do.
//!
//! Sockets are created with `SOCK_CLOEXEC` and left blocking (the ring never blocks on them:
//! it arms a poll and retries). Connections have `TCP_NODELAY` set: messages of an actor
//! system are small and latency-bound. Connect timeouts and read/write timeouts come from the
//! runner's `Config` and run on each ring's timeout wheel.

mod futures_io;
#[cfg(feature = "deterministic")]
mod simulated;

use crate::buffer::{IoBufMut, IoBufs};
use crate::context::Context;
use crate::driver::operation::ReceiveEnd;
use crate::driver::sockaddr::RawAddress;
use crate::driver::{Completion, Request, RequestOutput};
use crate::worker::Operation;
use crate::worker::operation::register_here;
use crate::{Error, Network};
use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Poll, ready};
use std::time::{Duration, Instant};

/// The smallest buffer a receive asks the kernel to fill: bytes beyond what the call wants are
/// kept for the next calls, so reading a header and then a body costs one receive.
const RECEIVE_AHEAD: usize = 4096;

/// The most a single receive asks the kernel for: larger receives take several.
const RECEIVE_CHUNK: usize = 1 << 20;

/// Moves the front of a stream's receive buffer into `out`, as much as fits: what an
/// `AsyncRead` read hands out, natively and in a deterministic run alike. Returns how many.
fn take_buffered(buffer: &mut IoBufMut, out: &mut [u8]) -> usize {
    let count = buffer.len().min(out.len());
    out[..count].copy_from_slice(&buffer[..count]);
    drop(buffer.split_to(count));
    count
}

/// Drops up to `amount` bytes from the front of a stream's receive buffer (`AsyncBufRead`'s
/// `consume`).
fn consume_buffered(buffer: &mut IoBufMut, amount: usize) {
    let amount = amount.min(buffer.len());
    drop(buffer.split_to(amount));
}

/// The listen backlog: enough for bursts of hundreds of connects.
const BACKLOG: i32 = 1024;

/// A TCP listener on the ring (see [`Listener`]).
struct NativeListener {
    /// The listening socket, non-blocking.
    fd: Arc<OwnedFd>,
    /// An epoll descriptor watching `fd` for `EPOLLIN` (level-triggered): what the ring polls.
    readiness: Arc<OwnedFd>,
    /// A readiness wait registered by an earlier call that has not been taken yet.
    pending: Option<Operation>,
    timeouts: Timeouts,
}

/// The sending half of a TCP connection on the ring (see [`Sink`]).
struct NativeSink {
    fd: Arc<OwnedFd>,
    /// A send registered by an earlier call that has not finished yet.
    pending: Option<Operation>,
    timeouts: Timeouts,
    /// A send failed (timed out, was reset, or was given up) with bytes it may not have
    /// delivered: the stream may have a gap there, so every later send fails too, rather
    /// than putting bytes after the gap.
    broken: bool,
}

/// The receiving half of a TCP connection on the ring (see [`Stream`]).
struct NativeStream {
    fd: Arc<OwnedFd>,
    /// The multishot receive armed by an earlier call, which stays armed across calls: its
    /// bytes wait in its slot's inbox until a call needs them.
    armed: Option<Arc<Completion>>,
    /// The ring answered a multishot receive with `Unsupported`: receive one call at a time.
    one_at_a_time: bool,
    /// The peer closed its sending side, and every byte it sent is in `buffer`.
    closed: bool,
    /// How the multishot receive failed, kept until the bytes that came before it are taken.
    failure: Option<io::Error>,
    /// One-at-a-time mode: a receive registered by an earlier call; it holds `buffer` while
    /// in flight.
    pending: Option<Operation>,
    /// Bytes received and not yet returned.
    buffer: IoBufMut,
    /// One-at-a-time mode: the last receive left the socket empty, so the next one is likely
    /// to wait and asks the ring to wait for data first instead of trying (and failing) at
    /// once.
    drained: bool,
    /// The deadline of the poll-based read (`AsyncRead`, `AsyncBufRead`) that is waiting: set
    /// when one first must wait, cleared when one returns.
    read_deadline: Option<Instant>,
    timeouts: Timeouts,
}

/// A TCP listener: on the worker's ring, or in a deterministic run on its simulated network.
pub struct Listener(ListenerKind);

/// Which listener: the one variant a build without the `deterministic` feature has is the
/// native one, so the enum is the native listener's size and a match on it has no branch.
/// The simulated variant is boxed so that, with the feature, the enum keeps the native size
/// too (the box fits in a niche of the native half).
enum ListenerKind {
    Native(NativeListener),
    #[cfg(feature = "deterministic")]
    Simulated(Box<simulated::Listener>),
}

/// The sending half of a TCP connection. Dropping it shuts the sending side down (the peer
/// reads end-of-stream), after a send still in flight is done.
///
/// Besides [`send`](crate::Sink::send) it is a [`futures::io::AsyncWrite`]: `poll_write`
/// accepts what the socket takes at once or hands a copy (at most 256 KiB) to the ring,
/// `poll_flush` waits until the kernel has every accepted byte, `poll_close` flushes and shuts
/// the writing side. Errors are [`Error`]s as [`io::Error`]s (a timeout is kind `TimedOut`).
/// In a deterministic run the same calls go to the run's simulated network.
pub struct Sink(SinkKind);

/// Which sink (see [`ListenerKind`]).
enum SinkKind {
    Native(NativeSink),
    #[cfg(feature = "deterministic")]
    Simulated(Box<simulated::Sink>),
}

/// The receiving half of a TCP connection.
///
/// Besides [`recv`](crate::Stream::recv) and [`recv_some`](crate::Stream::recv_some) it is a
/// [`futures::io::AsyncRead`] and a [`futures::io::AsyncBufRead`] over its own receive buffer
/// (`Ok(0)` at the end of the stream; a timeout is an error of kind `TimedOut` that leaves the
/// stream usable). Both ways share the buffer and the receive in flight, so they can be mixed
/// without losing or reordering bytes. In a deterministic run the same calls go to the run's
/// simulated network.
pub struct Stream(StreamKind);

/// Which stream (see [`ListenerKind`]).
enum StreamKind {
    Native(NativeStream),
    #[cfg(feature = "deterministic")]
    Simulated(Box<simulated::Stream>),
}

/// The future of a native call: itself when there is no other kind (no wrapper, no branch).
#[cfg(not(feature = "deterministic"))]
#[inline(always)]
fn native_path<N>(future: N) -> N {
    future
}

/// The future of a native call, as one side of the two a deterministic build may answer.
#[cfg(feature = "deterministic")]
#[inline(always)]
fn native_path<N, S>(future: N) -> futures::future::Either<N, S> {
    futures::future::Either::Left(future)
}

/// The future of a simulated call, as the other side.
#[cfg(feature = "deterministic")]
#[inline(always)]
fn simulated_path<N, S>(future: S) -> futures::future::Either<N, S> {
    futures::future::Either::Right(future)
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            ListenerKind::Native(listener) => listener.fmt(f),
            #[cfg(feature = "deterministic")]
            ListenerKind::Simulated(listener) => listener.fmt(f),
        }
    }
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            SinkKind::Native(sink) => sink.fmt(f),
            #[cfg(feature = "deterministic")]
            SinkKind::Simulated(sink) => sink.fmt(f),
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            StreamKind::Native(stream) => stream.fmt(f),
            #[cfg(feature = "deterministic")]
            StreamKind::Simulated(stream) => stream.fmt(f),
        }
    }
}

impl crate::Listener for Listener {
    type Sink = Sink;
    type Stream = Stream;

    fn accept(&mut self) -> impl Future<Output = Result<(SocketAddr, Sink, Stream), Error>> + Send {
        match &mut self.0 {
            ListenerKind::Native(listener) => native_path(listener.accept()),
            #[cfg(feature = "deterministic")]
            ListenerKind::Simulated(listener) => {
                simulated_path(futures::FutureExt::map(listener.accept(), |accepted| {
                    accepted.map(|(peer, sink, stream)| {
                        (
                            peer,
                            Sink(SinkKind::Simulated(Box::new(sink))),
                            Stream(StreamKind::Simulated(Box::new(stream))),
                        )
                    })
                }))
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            ListenerKind::Native(listener) => listener.local_addr(),
            #[cfg(feature = "deterministic")]
            ListenerKind::Simulated(listener) => Ok(listener.local_addr()),
        }
    }
}

impl crate::Sink for Sink {
    fn send(
        &mut self,
        bufs: impl Into<IoBufs> + Send,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        match &mut self.0 {
            SinkKind::Native(sink) => native_path(sink.send(bufs.into())),
            #[cfg(feature = "deterministic")]
            SinkKind::Simulated(sink) => simulated_path(sink.send(bufs.into())),
        }
    }
}

impl crate::Stream for Stream {
    fn recv(&mut self, len: usize) -> impl Future<Output = Result<IoBufs, Error>> + Send {
        match &mut self.0 {
            StreamKind::Native(stream) => native_path(stream.recv(len)),
            #[cfg(feature = "deterministic")]
            StreamKind::Simulated(stream) => simulated_path(stream.receive(len, false)),
        }
    }

    fn recv_some(&mut self, max: usize) -> impl Future<Output = Result<IoBufs, Error>> + Send {
        match &mut self.0 {
            StreamKind::Native(stream) => native_path(stream.recv_some(max)),
            #[cfg(feature = "deterministic")]
            StreamKind::Simulated(stream) => simulated_path(stream.receive(max, true)),
        }
    }
}

#[cfg(test)]
impl Sink {
    /// Test view: the native socket's descriptor.
    pub(crate) fn raw_fd(&self) -> RawFd {
        match &self.0 {
            SinkKind::Native(sink) => sink.raw_fd(),
            #[cfg(feature = "deterministic")]
            SinkKind::Simulated(_) => unreachable!("a simulated sink has no descriptor"),
        }
    }
}

#[cfg(test)]
impl Stream {
    /// Test view of the native stream's armed multishot receive (see `NativeStream`).
    pub(crate) fn armed_state(&self) -> Option<(usize, Option<String>)> {
        match &self.0 {
            StreamKind::Native(stream) => stream.armed_state(),
            #[cfg(feature = "deterministic")]
            StreamKind::Simulated(_) => None,
        }
    }
}

#[derive(Clone, Copy)]
struct Timeouts {
    connect: Duration,
    read_write: Duration,
}

impl Timeouts {
    fn of(context: &Context) -> Self {
        let config = &context.runtime().config;
        Self {
            connect: config.connect_timeout,
            read_write: config.read_write_timeout,
        }
    }
}

/// Whether `error` is the timeout of a receive an earlier call started, not of the call whose
/// deadline is `deadline` (not started yet, or still ahead): such a receive is started again.
fn earlier_calls_timeout(error: &io::Error, deadline: Option<Instant>) -> bool {
    error.kind() == io::ErrorKind::TimedOut
        && deadline.is_none_or(|deadline| Instant::now() < deadline)
}

/// Polls the operation an earlier call left in `pending`: once it is done, clears the slot
/// and returns its output; `None` at once if nothing is pending.
fn finish_pending(
    pending: &mut Option<Operation>,
    cx: &mut std::task::Context<'_>,
) -> Poll<Option<RequestOutput>> {
    let Some(operation) = pending else {
        return Poll::Ready(None);
    };
    let output = ready!(Pin::new(operation).poll(cx));
    *pending = None;
    Poll::Ready(Some(output))
}

/// The local and peer addresses of a connected socket, where the kernel knows them.
fn addresses(fd: &OwnedFd) -> (Option<SocketAddr>, Option<SocketAddr>) {
    // SAFETY: the descriptor stays owned by `fd`: the borrowed stream is never dropped (it is
    // wrapped in ManuallyDrop) and does not outlive this call.
    let stream =
        std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(fd.as_raw_fd()) });
    (stream.local_addr().ok(), stream.peer_addr().ok())
}

/// Shows the socket's descriptor and its addresses, never buffered bytes.
impl std::fmt::Debug for NativeListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let local = with_std_listener(&self.fd, |listener| listener.local_addr().ok());
        f.debug_struct("Listener")
            .field("fd", &self.fd.as_raw_fd())
            .field("local", &local)
            .finish_non_exhaustive()
    }
}

/// Shows the socket's descriptor and its addresses, never bytes in flight.
impl std::fmt::Debug for NativeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_half(f, "Sink", &self.fd, ("broken", self.broken))
    }
}

/// Shows the socket's descriptor and its addresses, never received bytes.
impl std::fmt::Debug for NativeStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_half(f, "Stream", &self.fd, ("closed", self.closed))
    }
}

/// A connection half as `name { fd, local, peer, <state> }`: what identifies it, and the one
/// flag that says whether it still carries bytes.
fn debug_half(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    fd: &OwnedFd,
    (state, value): (&str, bool),
) -> std::fmt::Result {
    let (local, peer) = addresses(fd);
    f.debug_struct(name)
        .field("fd", &fd.as_raw_fd())
        .field("local", &local)
        .field("peer", &peer)
        .field(state, &value)
        .finish_non_exhaustive()
}

fn shutdown(fd: &OwnedFd, how: i32) {
    // SAFETY: `fd` is a live socket we own; shutdown has no memory preconditions. Errors (a
    // socket never connected) leave nothing to undo.
    unsafe { libc::shutdown(fd.as_raw_fd(), how) };
}

/// The halves of a connected socket, with `TCP_NODELAY` set.
fn connection(fd: OwnedFd, timeouts: Timeouts) -> (NativeSink, NativeStream) {
    let stream = std::net::TcpStream::from(fd);
    // Best effort: a socket that refuses it still works, only with Nagle's delays.
    let _ = stream.set_nodelay(true);
    let fd = Arc::new(OwnedFd::from(stream));
    (
        NativeSink {
            fd: fd.clone(),
            pending: None,
            timeouts,
            broken: false,
        },
        NativeStream {
            fd,
            armed: None,
            one_at_a_time: false,
            closed: false,
            failure: None,
            pending: None,
            buffer: IoBufMut::default(),
            drained: false,
            read_deadline: None,
            timeouts,
        },
    )
}

fn bind(address: SocketAddr, timeouts: Timeouts) -> io::Result<NativeListener> {
    // std sets SO_REUSEADDR, so connections of an earlier server in TIME_WAIT do not hold the
    // port.
    let listener = std::net::TcpListener::bind(address)?;
    // std listens with a small backlog; a second `listen` only raises it.
    // SAFETY: a live listening socket; no memory preconditions.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    listener.set_nonblocking(true)?;
    let readiness = readiness_set(listener.as_raw_fd())?;
    Ok(NativeListener {
        fd: Arc::new(OwnedFd::from(listener)),
        readiness: Arc::new(readiness),
        pending: None,
        timeouts,
    })
}

/// An epoll descriptor that is readable while `fd` is (level-triggered `EPOLLIN`). It holds no
/// reference that keeps `fd` open: closing `fd` removes it from the set.
fn readiness_set(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: no memory preconditions; the result is checked.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epoll < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: both descriptors are live; `event` is a valid epoll_event for the call.
    if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(epoll)
}

/// One non-blocking `accept4`: a connection (blocking, close-on-exec, like every socket of
/// the runtime) and its peer, or `WouldBlock` when none is waiting.
fn accept_now(fd: &OwnedFd) -> io::Result<(OwnedFd, Option<SocketAddr>)> {
    let mut address = RawAddress::empty();
    loop {
        // SAFETY: `address` has room for any socket address and `len` says how much.
        let accepted = unsafe {
            libc::accept4(
                fd.as_raw_fd(),
                (&raw mut address.storage).cast(),
                &raw mut address.len,
                libc::SOCK_CLOEXEC,
            )
        };
        if accepted >= 0 {
            // SAFETY: the kernel returned a fresh descriptor that nobody else owns.
            let socket = unsafe { OwnedFd::from_raw_fd(accepted) };
            return Ok((socket, address.to_socket_addr()));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

fn socket_for(address: SocketAddr) -> io::Result<OwnedFd> {
    let family = match address {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: no memory preconditions; the result is checked.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

async fn dial(address: SocketAddr, timeouts: Timeouts) -> Result<(Sink, Stream), Error> {
    let fd = Arc::new(socket_for(address).map_err(|error| Error::DialFailed(address, error))?);
    let connected = Operation::register(Request::Connect {
        fd: fd.clone(),
        address,
        deadline: Some(Instant::now() + timeouts.connect),
    })
    .await;
    match connected {
        RequestOutput::Connect(Ok(())) => {}
        RequestOutput::Connect(Err(error)) => return Err(Error::DialFailed(address, error)),
        other => unreachable!("a connect answered {other:?}"),
    }
    let fd = Arc::try_unwrap(fd).expect("the connect is done and holds the socket no more");
    let (sink, stream) = connection(fd, timeouts);
    Ok((
        Sink(SinkKind::Native(sink)),
        Stream(StreamKind::Native(stream)),
    ))
}

impl Network for Context {
    type Listener = Listener;

    fn bind(&self, address: SocketAddr) -> impl Future<Output = Result<Listener, Error>> + Send {
        let timeouts = Timeouts::of(self);
        #[cfg(feature = "deterministic")]
        if let Some(simulation) = &self.runtime().simulation {
            let bound = simulated::bind(simulation, address, timeouts);
            return std::future::ready(
                bound.map(|listener| Listener(ListenerKind::Simulated(Box::new(listener)))),
            );
        }
        let bound = bind(address, timeouts).map_err(|e| Error::BindFailed(address, e));
        std::future::ready(bound.map(|listener| Listener(ListenerKind::Native(listener))))
    }

    fn dial(
        &self,
        address: SocketAddr,
    ) -> impl Future<Output = Result<(Sink, Stream), Error>> + Send {
        #[cfg(feature = "deterministic")]
        if let Some(simulation) = &self.runtime().simulation {
            let dialed = simulated::dial(simulation.clone(), address, Timeouts::of(self));
            return simulated_path(futures::FutureExt::map(dialed, |dialed| {
                dialed.map(|(sink, stream)| {
                    (
                        Sink(SinkKind::Simulated(Box::new(sink))),
                        Stream(StreamKind::Simulated(Box::new(stream))),
                    )
                })
            }));
        }
        native_path(dial(address, Timeouts::of(self)))
    }
}

impl NativeListener {
    fn accept(&mut self) -> impl Future<Output = Result<(SocketAddr, Sink, Stream), Error>> + Send {
        poll_fn(move |cx| {
            loop {
                // A readiness wait left by an earlier call is taken first.
                match ready!(finish_pending(&mut self.pending, cx)) {
                    None | Some(RequestOutput::Readable(Ok(()))) => {}
                    Some(RequestOutput::Readable(Err(error))) => {
                        return Poll::Ready(Err(Error::AcceptFailed(error)));
                    }
                    Some(other) => unreachable!("a readiness wait answered {other:?}"),
                }
                match accept_now(&self.fd) {
                    Ok((fd, peer)) => {
                        let (sink, stream) = connection(fd, self.timeouts);
                        let peer = match peer {
                            Some(peer) => Ok(peer),
                            None => peer_address(&sink.fd),
                        };
                        return Poll::Ready(
                            peer.map(|peer| {
                                (
                                    peer,
                                    Sink(SinkKind::Native(sink)),
                                    Stream(StreamKind::Native(stream)),
                                )
                            })
                            .map_err(Error::AcceptFailed),
                        );
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        self.pending = Some(Operation::register(Request::Readable {
                            fd: self.readiness.clone(),
                        }));
                    }
                    Err(error) => return Poll::Ready(Err(Error::AcceptFailed(error))),
                }
            }
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        with_std_listener(&self.fd, |listener| listener.local_addr())
    }
}

fn peer_address(fd: &Arc<OwnedFd>) -> io::Result<SocketAddr> {
    let duplicate = fd.try_clone()?;
    std::net::TcpStream::from(duplicate).peer_addr()
}

fn with_std_listener<R>(fd: &OwnedFd, f: impl FnOnce(&std::net::TcpListener) -> R) -> R {
    // SAFETY: the descriptor stays owned by `fd`: the borrowed listener is never dropped (it is
    // wrapped in ManuallyDrop) and does not outlive this call.
    let listener =
        std::mem::ManuallyDrop::new(unsafe { std::net::TcpListener::from_raw_fd(fd.as_raw_fd()) });
    f(&listener)
}

impl Drop for NativeListener {
    fn drop(&mut self) {
        if self.pending.as_ref().is_some_and(Operation::is_registered) {
            // Makes the socket readable (a shut listener reports end-of-file), so the readiness
            // wait in flight ends instead of holding its ring until the worker closes.
            shutdown(&self.fd, libc::SHUT_RDWR);
        }
    }
}

impl NativeSink {
    fn send(&mut self, bufs: IoBufs) -> Sending<'_> {
        Sending {
            bufs: Some(bufs).filter(|bufs| !bufs.is_empty()),
            sink: self,
            deadline: None,
            finished: false,
            registered: false,
        }
    }
}

/// The future of [`Sink::send`](crate::Sink::send). Dropped before it resolves, it gives up
/// the send it registered: the ring cancels it, so the socket is not held past the caller's
/// own limit (the sink keeps the cancelled send, and the next send takes its answer first).
/// A send in flight that it did not register (one a `poll_write` left, whose bytes that call
/// reported written) is not its to give up: it stays in flight for the next call to settle.
struct Sending<'a> {
    sink: &'a mut NativeSink,
    /// The bytes not yet offered to the socket.
    bufs: Option<IoBufs>,
    /// This call's deadline, set when it first registers a send.
    deadline: Option<Instant>,
    /// It resolved: nothing of it is left to give up.
    finished: bool,
    /// The send in flight in the sink is this call's own (it took `bufs` and registered it).
    registered: bool,
}

impl Future for Sending<'_> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let had_bytes = this.bufs.is_some();
        let output = this.sink.poll_send(cx, &mut this.bufs, &mut this.deadline);
        this.finished = output.is_ready();
        // Its bytes left `bufs` for the socket or the ring; still pending means the ring.
        this.registered |= had_bytes && this.bufs.is_none() && output.is_pending();
        output
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if !self.finished
            && self.registered
            && let Some(pending) = &self.sink.pending
        {
            pending.cancel();
        }
    }
}

impl NativeSink {
    fn poll_send(
        &mut self,
        cx: &mut std::task::Context<'_>,
        bufs: &mut Option<IoBufs>,
        deadline: &mut Option<Instant>,
    ) -> Poll<Result<(), Error>> {
        let sent = ready!(self.poll_send_inner(cx, bufs, deadline));
        self.broken |= sent.is_err();
        Poll::Ready(sent)
    }

    fn poll_send_inner(
        &mut self,
        cx: &mut std::task::Context<'_>,
        bufs: &mut Option<IoBufs>,
        deadline: &mut Option<Instant>,
    ) -> Poll<Result<(), Error>> {
        if self.broken && self.pending.is_none() {
            return Poll::Ready(Err(broken_pipe()));
        }
        loop {
            if let Some(output) = ready!(finish_pending(&mut self.pending, cx)) {
                let sent = match output {
                    RequestOutput::Send(result) => result.map_err(Error::SendFailed),
                    other => unreachable!("a send answered {other:?}"),
                };
                // An earlier send's failure is this one's too: the bytes before ours
                // did not all go out (it timed out, failed, or was given up).
                if sent.is_err() || bufs.is_none() {
                    return Poll::Ready(sent);
                }
            }
            let Some(mut next) = bufs.take() else {
                return Poll::Ready(Ok(()));
            };
            // Nothing in flight: try the socket at once. Bytes it takes now need no
            // ring round trip (and no second wake of this task); the rest goes to the
            // ring, which waits for room.
            match send_now(&self.fd, &next) {
                Ok(sent) if sent == next.len() => return Poll::Ready(Ok(())),
                Ok(sent) => next.advance(sent),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(Error::SendFailed(error))),
            }
            let deadline =
                *deadline.get_or_insert_with(|| Instant::now() + self.timeouts.read_write);
            self.pending = Some(Operation::register(Request::Send {
                fd: self.fd.clone(),
                bufs: next,
                deadline: Some(deadline),
            }));
        }
    }
}

/// The error of a send on a sink an earlier send broke.
fn broken_pipe() -> Error {
    Error::SendFailed(io::Error::new(
        io::ErrorKind::BrokenPipe,
        "an earlier send on this connection failed or was given up before all its bytes went \
         out, so the byte stream may have a gap: nothing more is sent on it",
    ))
}

/// One non-blocking `sendmsg` of as many of `bufs`' chunks as fit in an iovec array.
fn send_now(fd: &OwnedFd, bufs: &IoBufs) -> io::Result<usize> {
    let (mut iovecs, count) = bufs.iovecs::<8>();
    // SAFETY: `msghdr` is plain data; zeroed is an empty message, filled in below.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iovecs.as_mut_ptr();
    message.msg_iovlen = count;
    // SAFETY: the iovecs point at live chunks of `bufs`, which outlive the call; the kernel
    // only reads them.
    let sent = unsafe {
        libc::sendmsg(
            fd.as_raw_fd(),
            &message,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

impl NativeSink {
    /// Test view: the socket's descriptor.
    #[cfg(test)]
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for NativeSink {
    fn drop(&mut self) {
        // With a send in flight, the driver shuts the writing side once the send is done, so
        // the peer still reads every byte before end-of-stream.
        let in_flight = self.pending.as_ref().and_then(Operation::slot);
        if in_flight.is_none_or(|slot| slot.shut_write_after()) {
            shutdown(&self.fd, libc::SHUT_WR);
        }
    }
}

impl NativeStream {
    fn recv(&mut self, len: usize) -> Receiving<'_> {
        Receiving {
            stream: self,
            len,
            up_to: false,
            deadline: None,
            finished: false,
        }
    }

    fn recv_some(&mut self, max: usize) -> Receiving<'_> {
        Receiving {
            stream: self,
            len: max,
            up_to: true,
            deadline: None,
            finished: false,
        }
    }
}

/// The future of [`Stream::recv`](crate::Stream::recv) and
/// [`Stream::recv_some`](crate::Stream::recv_some). Dropped before it resolves, it gives
/// up the one-call receive it registered: the ring cancels it (bytes the kernel delivered
/// first stay with the stream, for the next call). A multishot receive belongs to the
/// stream, not to a call (it stays armed after a call resolves too): it is left armed, and
/// ends when it pauses or the stream is dropped.
struct Receiving<'a> {
    stream: &'a mut NativeStream,
    /// Exactly this many bytes, or (`up_to`) at most this many and at least one.
    len: usize,
    /// `recv_some`: what has come, up to `len` bytes.
    up_to: bool,
    /// This call's deadline, set when it first must wait.
    deadline: Option<Instant>,
    /// It resolved: nothing of it is left to give up.
    finished: bool,
}

impl Future for Receiving<'_> {
    type Output = Result<IoBufs, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // A future-based call means any poll-based read was given up: its clock stops.
        this.stream.read_deadline = None;
        // `recv_some(0)` asks for nothing and gets nothing, at once.
        let least = if this.up_to {
            this.len.min(1)
        } else {
            this.len
        };
        let filled = this
            .stream
            .poll_fill(cx, least, this.len, &mut this.deadline);
        this.finished = filled.is_ready();
        ready!(filled)?;
        let take = if this.up_to {
            this.stream.buffer.len().min(this.len)
        } else {
            this.len
        };
        Poll::Ready(Ok(this.stream.buffer.split_to(take).freeze().into()))
    }
}

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        if !self.finished
            && let Some(pending) = &self.stream.pending
        {
            pending.cancel();
        }
    }
}

impl NativeStream {
    /// Test view of the armed multishot receive: bytes in its inbox, and how it ended, if it
    /// has (left in place).
    #[cfg(test)]
    pub(crate) fn armed_state(&self) -> Option<(usize, Option<String>)> {
        self.armed.as_ref().map(|armed| armed.inbox_state())
    }

    /// Waits until the buffer holds at least `len` bytes, receiving as the stream's mode
    /// says; `want` (at least `len`) is how many the caller could take, a hint for how much
    /// room a one-call receive asks the kernel to fill. The deadline is the waiting call's:
    /// started when it first must wait.
    fn poll_fill(
        &mut self,
        cx: &mut std::task::Context<'_>,
        len: usize,
        want: usize,
        deadline: &mut Option<Instant>,
    ) -> Poll<Result<(), Error>> {
        if self.one_at_a_time {
            self.poll_fill_one(cx, len, want, deadline)
        } else {
            self.poll_fill_multishot(cx, len, want, deadline)
        }
    }

    fn unexpected_eof(&self, len: usize) -> Error {
        Error::RecvFailed(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the peer closed the connection with {} of {len} bytes received",
                self.buffer.len()
            ),
        ))
    }

    /// `recv` with a multishot receive: bytes that arrived are taken from its inbox only when
    /// the buffer lacks them, so a stream that is not read leaves them there, and the receive
    /// pauses once the inbox is full. An ended receive is armed again by the next call that
    /// must wait, with that call's deadline.
    fn poll_fill_multishot(
        &mut self,
        cx: &mut std::task::Context<'_>,
        len: usize,
        want: usize,
        deadline: &mut Option<Instant>,
    ) -> Poll<Result<(), Error>> {
        let read_write = self.timeouts.read_write;
        loop {
            if self.buffer.len() >= len {
                return Poll::Ready(Ok(()));
            }
            if let Some(armed) = &self.armed {
                let end = armed.take_received(cx.waker(), &mut self.buffer);
                if let Some(end) = end {
                    self.armed = None;
                    match end {
                        RequestOutput::Received(ReceiveEnd::Closed) => self.closed = true,
                        RequestOutput::Received(ReceiveEnd::Paused) => {}
                        RequestOutput::Received(ReceiveEnd::Unsupported) => {
                            self.one_at_a_time = true;
                            return self.poll_fill_one(cx, len, want, deadline);
                        }
                        // The deadline of the call that armed the receive, not this call's,
                        // unless this call's has passed too: arm again.
                        RequestOutput::Received(ReceiveEnd::Failed(error))
                            if earlier_calls_timeout(&error, *deadline) => {}
                        // This call's own timeout, unless what arrived meanwhile is enough.
                        RequestOutput::Received(ReceiveEnd::Failed(error))
                            if error.kind() == io::ErrorKind::TimedOut =>
                        {
                            if self.buffer.len() < len {
                                return Poll::Ready(Err(Error::RecvFailed(error)));
                            }
                        }
                        // Reported once the bytes that came before it are taken (TCP hands out
                        // queued bytes before a socket error, and so does this).
                        RequestOutput::Received(ReceiveEnd::Failed(error)) => {
                            self.failure = Some(error);
                        }
                        other => unreachable!("a multishot receive answered {other:?}"),
                    }
                } else if self.buffer.len() >= len {
                    return Poll::Ready(Ok(()));
                } else {
                    // Armed and short of bytes: wait (the waker is registered), starting this
                    // call's clock if it has not started.
                    deadline.get_or_insert_with(|| Instant::now() + read_write);
                    return Poll::Pending;
                }
                continue;
            }
            if let Some(error) = self.failure.take() {
                return Poll::Ready(Err(Error::RecvFailed(error)));
            }
            if self.closed {
                return Poll::Ready(Err(self.unexpected_eof(len)));
            }
            let call_deadline = *deadline.get_or_insert_with(|| Instant::now() + read_write);
            let request = Request::RecvMulti {
                fd: self.fd.clone(),
                deadline: Some(call_deadline),
            };
            match register_here(request) {
                Ok(slot) => self.armed = Some(slot),
                Err(refused) => match refused.refuse() {
                    RequestOutput::Received(ReceiveEnd::Failed(error)) => {
                        return Poll::Ready(Err(Error::RecvFailed(error)));
                    }
                    other => unreachable!("a refused multishot receive answered {other:?}"),
                },
            }
        }
    }

    /// `recv` one receive at a time, for rings without provided buffers.
    fn poll_fill_one(
        &mut self,
        cx: &mut std::task::Context<'_>,
        len: usize,
        want: usize,
        deadline: &mut Option<Instant>,
    ) -> Poll<Result<(), Error>> {
        loop {
            if let Some(output) = ready!(finish_pending(&mut self.pending, cx)) {
                let (buffer, received) = match output {
                    RequestOutput::Recv(buffer, received, more) => {
                        self.drained = !more;
                        (buffer, received)
                    }
                    other => unreachable!("a receive answered {other:?}"),
                };
                self.buffer = buffer;
                match received {
                    // The peer closed its sending side: every byte it sent is in the buffer.
                    Ok(0) => self.closed = true,
                    Ok(_) => {}
                    // A timeout of a receive an earlier, dropped call started is not this
                    // call's, unless this call's own deadline has passed too; nor is the
                    // cancellation of a receive whose call was dropped.
                    Err(error) if earlier_calls_timeout(&error, *deadline) => {}
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Poll::Ready(Err(Error::RecvFailed(error))),
                }
            }
            if self.buffer.len() >= len {
                return Poll::Ready(Ok(()));
            }
            if self.closed {
                return Poll::Ready(Err(self.unexpected_eof(len)));
            }
            let deadline =
                *deadline.get_or_insert_with(|| Instant::now() + self.timeouts.read_write);
            let mut buffer = std::mem::take(&mut self.buffer);
            let missing = want.max(len) - buffer.len();
            // Room for what is missing, but never more than one chunk at a time: a
            // length a peer announced is not trusted with memory before its bytes arrive.
            buffer.reserve(missing.clamp(RECEIVE_AHEAD, RECEIVE_CHUNK));
            self.pending = Some(Operation::register(Request::Recv {
                fd: self.fd.clone(),
                buf: buffer,
                poll_first: self.drained,
                deadline: Some(deadline),
            }));
        }
    }
}

impl Drop for NativeStream {
    fn drop(&mut self) {
        if self.armed.is_some() || self.pending.as_ref().is_some_and(Operation::is_registered) {
            // Ends the receive in flight (it reads end-of-stream), so the socket closes.
            shutdown(&self.fd, libc::SHUT_RD);
        }
        // And cancels it on its ring (a pending one-call receive is cancelled as it drops).
        if let Some(armed) = &self.armed {
            crate::worker::operation::cancel(armed);
        }
    }
}

#[cfg(test)]
mod size_tests {
    /// The public halves are the native ones' size, with the `deterministic` feature or
    /// without: the simulated variant costs the native path nothing.
    #[test]
    fn the_public_halves_are_the_native_size() {
        use std::mem::size_of;
        assert_eq!(
            size_of::<super::Listener>(),
            size_of::<super::NativeListener>()
        );
        assert_eq!(size_of::<super::Sink>(), size_of::<super::NativeSink>());
        assert_eq!(size_of::<super::Stream>(), size_of::<super::NativeStream>());
    }
}
