//! The connection halves of a deterministic run: the same contracts as the native ones, over
//! the run's in-memory network (`simulation::network`), waiting on virtual time.
//!
//! A half keeps the model's id of its connection and which end it is; every call asks the
//! model what it can do now (bytes that have arrived, room in the peer's window, a connection
//! whose SYN arrived), and when the answer is "wait", leaves its waker with the model and
//! sleeps (virtual time) until the next moment the answer changes by itself (a segment's
//! arrival) or the call's deadline, whichever comes first.
//!
//! Invariants:
//! - No bytes are lost or reordered by a half: a stream takes bytes from its pipe only into
//!   its own buffer, every call serves that buffer first, and a dropped call leaves its bytes
//!   there (nothing is in flight outside the model, so there is nothing to cancel).
//! - A sink never writes after a gap: once a send or write fails (a reset, a timeout) or a
//!   send is given up with bytes not written, every later one fails (the given-up send's
//!   successor with `Interrupted`, as the native sink's, then `BrokenPipe`).
//! - A call's deadline (the runner's read/write timeout) starts when it first must wait and
//!   ends it with `TimedOut`; a stream stays usable after a receive's timeout. A dial learns
//!   its outcome when the model says (a round trip, or the connect timeout).
//! - Dropping a sink shuts its writing side (the peer reads end-of-stream after every byte);
//!   dropping a stream discards what it never read; dropping a listener resets the
//!   connections it had not accepted.

use super::{RECEIVE_AHEAD, RECEIVE_CHUNK, Timeouts};
use crate::Error;
use crate::buffer::{IoBufMut, IoBufs};
use crate::simulation::Simulation;
use crate::simulation::network::{Polled, WINDOW};
use crate::time::clock;
use crate::worker::Sleep;
use futures::io::{AsyncBufRead, AsyncRead, AsyncWrite};
use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

/// A virtual-time sleep to one instant, made again when the instant changes.
#[derive(Default)]
struct Timer(Option<(Instant, Sleep)>);

impl Timer {
    /// Ready once `at` has passed; until then the task is woken at `at`.
    fn poll_until(&mut self, cx: &mut Context<'_>, at: Instant) -> Poll<()> {
        if self.0.as_ref().is_none_or(|(when, _)| *when != at) {
            let sleep = Sleep::new(at.saturating_duration_since(clock::now()));
            self.0 = Some((at, sleep));
        }
        let (_, sleep) = self.0.as_mut().expect("set above");
        let slept = Pin::new(sleep).poll(cx);
        if slept.is_ready() {
            self.0 = None;
        }
        slept
    }
}

/// Waits for `arrival` (when the model said the state changes by itself) or `deadline`,
/// whichever is first: `Ready` when one of them has passed and the caller should look again.
fn poll_wait(
    timer: &mut Timer,
    cx: &mut Context<'_>,
    arrival: Option<Instant>,
    deadline: Instant,
) -> Poll<()> {
    let at = arrival.map_or(deadline, |arrival| arrival.min(deadline));
    timer.poll_until(cx, at)
}

fn failed(kind: io::ErrorKind) -> io::Error {
    io::Error::new(kind, format!("simulated network: {kind}"))
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "simulated network: the read/write timeout passed",
    )
}

/// A simulated listener.
pub(crate) struct Listener {
    simulation: Arc<Simulation>,
    local: SocketAddr,
    timeouts: Timeouts,
    timer: Timer,
}

/// The sending half of a simulated connection.
pub(crate) struct Sink {
    simulation: Arc<Simulation>,
    id: u64,
    end: usize,
    local: SocketAddr,
    peer: SocketAddr,
    timeouts: Timeouts,
    timer: Timer,
    /// A send or write failed: nothing more goes out.
    broken: bool,
    /// A send was given up with bytes not written: the next one fails with `Interrupted`.
    interrupted: bool,
    /// The deadline of the `poll_write` that waits for room.
    write_deadline: Option<Instant>,
}

/// The receiving half of a simulated connection.
pub(crate) struct Stream {
    simulation: Arc<Simulation>,
    id: u64,
    end: usize,
    local: SocketAddr,
    peer: SocketAddr,
    timeouts: Timeouts,
    timer: Timer,
    /// Bytes taken from the pipe and not yet returned.
    buffer: IoBufMut,
    /// The peer's end-of-stream has been read: every byte it sent is in `buffer`.
    closed: bool,
    /// The deadline of the poll-based read that waits.
    read_deadline: Option<Instant>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("simulated", &true)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("simulated", &self.id)
            .field("local", &self.local)
            .field("peer", &self.peer)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("simulated", &self.id)
            .field("local", &self.local)
            .field("peer", &self.peer)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

/// The halves of end `end` of connection `id`.
fn halves(
    simulation: &Arc<Simulation>,
    id: u64,
    end: usize,
    (local, peer): (SocketAddr, SocketAddr),
    timeouts: Timeouts,
) -> (Sink, Stream) {
    (
        Sink {
            simulation: simulation.clone(),
            id,
            end,
            local,
            peer,
            timeouts,
            timer: Timer::default(),
            broken: false,
            interrupted: false,
            write_deadline: None,
        },
        Stream {
            simulation: simulation.clone(),
            id,
            end,
            local,
            peer,
            timeouts,
            timer: Timer::default(),
            buffer: IoBufMut::default(),
            closed: false,
            read_deadline: None,
        },
    )
}

/// Binds a listener on the run's network.
pub(crate) fn bind(
    simulation: &Arc<Simulation>,
    address: SocketAddr,
    timeouts: Timeouts,
) -> Result<Listener, Error> {
    let local = simulation
        .network()
        .bind(simulation, address)
        .map_err(|error| Error::BindFailed(address, error))?;
    Ok(Listener {
        simulation: simulation.clone(),
        local,
        timeouts,
        timer: Timer::default(),
    })
}

/// Resets the connection of a dial given up before it learned its outcome.
struct Abandon<'a> {
    simulation: &'a Simulation,
    id: Option<u64>,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.simulation.network().abandon(self.simulation, id);
        }
    }
}

/// Dials `address` on the run's network, from the host the polling task runs on.
pub(crate) async fn dial(
    simulation: Arc<Simulation>,
    address: SocketAddr,
    timeouts: Timeouts,
) -> Result<(Sink, Stream), Error> {
    let dialed = simulation
        .network()
        .dial(&simulation, address, timeouts.connect);
    let mut abandon = Abandon {
        simulation: &simulation,
        id: dialed.result.as_ref().ok().map(|(id, _)| *id),
    };
    Sleep::new(dialed.at.saturating_duration_since(clock::now())).await;
    abandon.id = None;
    drop(abandon);
    match dialed.result {
        Ok((id, local)) => Ok(halves(&simulation, id, 0, (local, address), timeouts)),
        Err(kind) => Err(Error::DialFailed(address, failed(kind))),
    }
}

impl Listener {
    /// The next connection whose SYN has arrived. Dropping the future loses nothing: the
    /// connection stays in the model's backlog until a call takes it.
    pub(crate) fn accept(
        &mut self,
    ) -> impl Future<Output = Result<(SocketAddr, Sink, Stream), Error>> + Send + '_ {
        poll_fn(move |cx| {
            loop {
                let polled =
                    self.simulation
                        .network()
                        .accept(&self.simulation, self.local, cx.waker());
                match polled {
                    Polled::Ready(accepted) => {
                        let (sink, stream) = halves(
                            &self.simulation,
                            accepted.connection,
                            1,
                            (accepted.local, accepted.peer),
                            self.timeouts,
                        );
                        return Poll::Ready(Ok((accepted.peer, sink, stream)));
                    }
                    Polled::Failed(kind) => {
                        return Poll::Ready(Err(Error::AcceptFailed(failed(kind))));
                    }
                    Polled::Wait(Some(at)) => ready!(self.timer.poll_until(cx, at)),
                    Polled::Wait(None) | Polled::End => return Poll::Pending,
                }
            }
        })
    }

    /// The address the listener is bound to.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.simulation
            .network()
            .unbind(&self.simulation, self.local);
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

impl Sink {
    /// Sends every byte of `bufs` (see [`Sending`]).
    pub(crate) fn send(&mut self, bufs: IoBufs) -> Sending<'_> {
        Sending {
            sink: self,
            bufs,
            deadline: None,
            started: false,
            finished: false,
        }
    }

    /// Fails with the error an earlier send or write left, if any.
    fn check(&mut self) -> Result<(), Error> {
        if self.interrupted {
            self.interrupted = false;
            self.broken = true;
            return Err(Error::SendFailed(io::Error::new(
                io::ErrorKind::Interrupted,
                "an earlier send was given up before all its bytes went out",
            )));
        }
        if self.broken {
            return Err(broken_pipe());
        }
        Ok(())
    }

    /// Puts bytes of `bytes` on the wire: how many went in, waiting (with `deadline`, set
    /// when it first must) while the peer's window is full. Fails, breaking the sink, on a
    /// reset or a timeout.
    fn poll_write_some(
        &mut self,
        cx: &mut Context<'_>,
        bytes: &bytes::Bytes,
        deadline: &mut Option<Instant>,
    ) -> Poll<Result<usize, Error>> {
        loop {
            let polled = self.simulation.network().write(
                &self.simulation,
                self.id,
                self.end,
                bytes,
                cx.waker(),
            );
            match polled {
                Polled::Ready(count) => return Poll::Ready(Ok(count)),
                Polled::Failed(kind) => {
                    self.broken = true;
                    return Poll::Ready(Err(Error::SendFailed(failed(kind))));
                }
                Polled::Wait(arrival) => {
                    let deadline =
                        *deadline.get_or_insert_with(|| clock::now() + self.timeouts.read_write);
                    if clock::now() >= deadline {
                        self.broken = true;
                        return Poll::Ready(Err(Error::SendFailed(timed_out())));
                    }
                    ready!(poll_wait(&mut self.timer, cx, arrival, deadline));
                }
                Polled::End => unreachable!("a write never reads an end"),
            }
        }
    }
}

/// The future of a simulated send. Dropped before it resolves with bytes not written, it
/// leaves the sink to fail the next send with `Interrupted` (those bytes never go out).
pub(crate) struct Sending<'a> {
    sink: &'a mut Sink,
    /// The bytes not yet written.
    bufs: IoBufs,
    deadline: Option<Instant>,
    /// It looked at the sink's earlier failures (once, at its first poll).
    started: bool,
    finished: bool,
}

impl Future for Sending<'_> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.started {
            this.started = true;
            if let Err(error) = this.sink.check() {
                this.finished = true;
                return Poll::Ready(Err(error));
            }
        }
        loop {
            // Leading empty chunks are dropped first.
            this.bufs.advance(0);
            let Some(chunk) = this.bufs.chunks().first().filter(|chunk| !chunk.is_empty()) else {
                this.finished = true;
                return Poll::Ready(Ok(()));
            };
            let bytes = chunk.clone().into_bytes();
            let written = this.sink.poll_write_some(cx, &bytes, &mut this.deadline);
            match ready!(written) {
                Ok(count) => this.bufs.advance(count),
                Err(error) => {
                    this.finished = true;
                    return Poll::Ready(Err(error));
                }
            }
        }
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if self.started && !self.finished && !self.bufs.is_empty() {
            self.sink.interrupted = true;
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.simulation
            .network()
            .release_half(&self.simulation, self.id, self.end, 0);
    }
}

impl Stream {
    /// Exactly `len` bytes, or (`up_to`) between 1 and `len` (see [`Receiving`]).
    pub(crate) fn receive(&mut self, len: usize, up_to: bool) -> Receiving<'_> {
        Receiving {
            stream: self,
            len,
            up_to,
            deadline: None,
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

    /// Waits until the buffer holds at least `len` bytes, taking from the pipe at most what
    /// `want` (the caller's whole appetite) calls for beyond a small read-ahead.
    fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        len: usize,
        want: usize,
        deadline: &mut Option<Instant>,
    ) -> Poll<Result<(), Error>> {
        loop {
            if self.buffer.len() >= len {
                return Poll::Ready(Ok(()));
            }
            if self.closed {
                return Poll::Ready(Err(self.unexpected_eof(len)));
            }
            let max = (want.max(len) - self.buffer.len()).clamp(RECEIVE_AHEAD, RECEIVE_CHUNK);
            let polled = self.simulation.network().read(
                &self.simulation,
                self.id,
                self.end,
                max,
                cx.waker(),
            );
            match polled {
                Polled::Ready(chunks) => {
                    for chunk in chunks {
                        self.buffer.extend_from_slice(&chunk);
                    }
                }
                Polled::End => self.closed = true,
                Polled::Failed(kind) => return Poll::Ready(Err(Error::RecvFailed(failed(kind)))),
                Polled::Wait(arrival) => {
                    let deadline =
                        *deadline.get_or_insert_with(|| clock::now() + self.timeouts.read_write);
                    if clock::now() >= deadline {
                        return Poll::Ready(Err(Error::RecvFailed(timed_out())));
                    }
                    ready!(poll_wait(&mut self.timer, cx, arrival, deadline));
                }
            }
        }
    }

    /// Waits until the buffer holds a byte, or the stream has ended (the buffer stays empty).
    fn poll_buffered(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<()>> {
        if !self.buffer.is_empty() {
            return Poll::Ready(Ok(()));
        }
        let mut deadline = self.read_deadline.take();
        match self.poll_fill(cx, 1, want, &mut deadline) {
            Poll::Pending => {
                self.read_deadline = deadline;
                Poll::Pending
            }
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(Error::RecvFailed(error)))
                if self.closed && error.kind() == io::ErrorKind::UnexpectedEof =>
            {
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error.into())),
        }
    }
}

/// The future of a simulated `recv` or `recv_some`. Dropping it loses nothing: the bytes it
/// took are in the stream's buffer, the rest in the pipe.
pub(crate) struct Receiving<'a> {
    stream: &'a mut Stream,
    len: usize,
    up_to: bool,
    deadline: Option<Instant>,
}

impl Future for Receiving<'_> {
    type Output = Result<IoBufs, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.stream.read_deadline = None;
        let least = if this.up_to {
            this.len.min(1)
        } else {
            this.len
        };
        ready!(
            this.stream
                .poll_fill(cx, least, this.len, &mut this.deadline)
        )?;
        let take = if this.up_to {
            this.stream.buffer.len().min(this.len)
        } else {
            this.len
        };
        Poll::Ready(Ok(this.stream.buffer.split_to(take).freeze().into()))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.simulation
            .network()
            .release_half(&self.simulation, self.id, self.end, 1);
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(this.poll_buffered(cx, buf.len()))?;
        Poll::Ready(Ok(super::take_buffered(&mut this.buffer, buf)))
    }
}

impl AsyncBufRead for Stream {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        ready!(this.poll_buffered(cx, RECEIVE_AHEAD))?;
        Poll::Ready(Ok(&this.buffer[..]))
    }

    fn consume(self: Pin<&mut Self>, amount: usize) {
        super::consume_buffered(&mut self.get_mut().buffer, amount);
    }
}

/// Writes go straight into the model (there is no kernel buffer between): `poll_write` waits
/// only while the peer's window is full, `poll_flush` has nothing to wait for, `poll_close`
/// shuts the writing side.
impl AsyncWrite for Sink {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let bytes = bytes::Bytes::copy_from_slice(&buf[..buf.len().min(WINDOW)]);
        let mut deadline = this.write_deadline.take();
        match this.poll_write_some(cx, &bytes, &mut deadline) {
            Poll::Pending => {
                this.write_deadline = deadline;
                Poll::Pending
            }
            Poll::Ready(written) => Poll::Ready(written.map_err(io::Error::from)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        Poll::Ready(this.check().map_err(io::Error::from))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        this.simulation
            .network()
            .shutdown(&this.simulation, this.id, this.end);
        Poll::Ready(Ok(()))
    }
}
