//! The connection halves as `futures::io` types: [`Stream`] is `AsyncRead` and `AsyncBufRead`,
//! [`Sink`] is `AsyncWrite`, so codecs, line readers and copy loops of the ecosystem run on
//! them.
//!
//! Both are poll-based over the same state the halves' own futures use: the operation in
//! flight (and the buffer it owns until the kernel posts its completion) is kept in the half
//! across polls, never in a future a caller could drop. So:
//!
//! - A read the caller stops polling leaves its receive registered; the next read, whether
//!   `poll_read`, `recv` or `recv_some`, takes its bytes first. Mixing the poll-based and the
//!   future-based calls on one stream neither loses nor reorders bytes: every call serves the
//!   stream's buffer first, and the buffer only grows at its end.
//! - A half dropped with an operation in flight is as sound as with `recv`/`send`: the
//!   stream shuts its reading side and cancels the receive, the sink lets its send finish
//!   before it shuts the writing side (see the module above).
//!
//! Errors are [`Error`]s turned into [`io::Error`]s (see `From<Error> for io::Error`): the
//! kind is the OS error's, and `get_ref()` gives back the runtime error.
//!
//! Timeouts: the runner's read/write timeout (`Config::with_read_write_timeout`) applies as it
//! does to `recv` and `send`, and surfaces as an error of kind [`io::ErrorKind::TimedOut`].
//! A read's clock starts when a `poll_read` or `poll_fill_buf` first has to wait and stops
//! when one returns (or a `recv`/`recv_some` is called); after a timeout the stream is still
//! usable (the next read waits afresh), so a caller that treats a quiet peer as alive just
//! reads again. A read given up while it waits (its future dropped, as a `select` or an outer
//! timeout does) keeps its receive and its clock: the next read, if it comes after that
//! clock ran out, may fail with `TimedOut` at once, and the one after waits afresh. A write's
//! clock starts when the bytes the socket could not take at once are handed to the ring.

use super::{
    NativeSink, NativeStream, RECEIVE_AHEAD, Sink, SinkKind, Stream, StreamKind, finish_pending,
    shutdown,
};
use crate::Error;
use crate::buffer::IoBufs;
use crate::driver::{Request, RequestOutput};
use crate::worker::Operation;
use futures::io::{AsyncBufRead, AsyncRead, AsyncWrite};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

/// The most one `poll_write` copies into a send handed to the ring when the socket is full:
/// a writer holds at most this much in flight beyond the socket's own buffer.
const WRITE_AHEAD: usize = 256 * 1024;

impl NativeStream {
    /// Waits until the buffer holds a byte, or the stream has ended (the buffer stays empty).
    /// `want` is how many bytes the reader could take at once.
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
            // The end of the stream: every byte the peer sent has been read.
            Poll::Ready(Err(Error::RecvFailed(error)))
                if self.closed && error.kind() == io::ErrorKind::UnexpectedEof =>
            {
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error.into())),
        }
    }
}

/// Reads what has come, like [`recv_some`](crate::Stream::recv_some): the bytes the stream
/// holds, else what one receive brings. `Ok(0)` at the end of the stream (and for an empty
/// `buf`). A timeout is an error of kind `TimedOut` that leaves the stream usable.
impl AsyncRead for NativeStream {
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

/// The stream's own receive buffer, without a copy: `poll_fill_buf` returns what it holds
/// (receiving when it is empty; empty at the end of the stream), `consume` drops bytes from
/// its front. A receive asks the kernel for at least 4 KiB, and never reserves more than
/// 1 MiB ahead, so wrapping the stream in a `BufReader` only adds a copy.
impl AsyncBufRead for NativeStream {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        ready!(this.poll_buffered(cx, RECEIVE_AHEAD))?;
        Poll::Ready(Ok(&this.buffer[..]))
    }

    fn consume(self: Pin<&mut Self>, amount: usize) {
        super::consume_buffered(&mut self.get_mut().buffer, amount);
    }
}

impl NativeSink {
    /// Waits for the send in flight (one an earlier `poll_write` or a dropped `send` left) to
    /// end, and fails if it or an earlier one failed: nothing goes out after a gap.
    fn poll_settle(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if let Some(output) = ready!(finish_pending(&mut self.pending, cx)) {
            match output {
                RequestOutput::Send(Ok(())) => {}
                RequestOutput::Send(Err(error)) => {
                    self.broken = true;
                    // Bytes this sink accepted are lost: the connection is broken, which is
                    // what the caller must hear. A cancelled send's `Interrupted` would say
                    // "retry" by io's convention; it stays the source.
                    let error = if error.kind() == io::ErrorKind::Interrupted {
                        io::Error::new(io::ErrorKind::BrokenPipe, error)
                    } else {
                        error
                    };
                    return Poll::Ready(Err(Error::SendFailed(error)));
                }
                other => unreachable!("a send answered {other:?}"),
            }
        }
        if self.broken {
            return Poll::Ready(Err(super::broken_pipe()));
        }
        Poll::Ready(Ok(()))
    }

    fn poll_write_bytes(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<Result<usize, Error>> {
        ready!(self.poll_settle(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match send_slice_now(&self.fd, buf) {
            Ok(sent) => return Poll::Ready(Ok(sent)),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => {
                self.broken = true;
                return Poll::Ready(Err(Error::SendFailed(error)));
            }
        }
        // The socket is full: the ring sends a copy once there is room, and this write
        // counts as accepted (in flight). The next write, flush or close waits for it.
        let accepted = buf.len().min(WRITE_AHEAD);
        self.pending = Some(Operation::register(Request::Send {
            fd: self.fd.clone(),
            bufs: IoBufs::from(buf[..accepted].to_vec()),
            deadline: Some(Instant::now() + self.timeouts.read_write),
        }));
        // Registers it now (an operation registers at its first poll), so the bytes go out
        // without waiting for the caller's next poll.
        match self.poll_settle(cx) {
            Poll::Pending | Poll::Ready(Ok(())) => Poll::Ready(Ok(accepted)),
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
        }
    }
}

/// Writes through the sink, in order with its `send`s.
///
/// - `poll_write` offers the bytes to the socket with one non-blocking send; when the socket
///   is full it accepts up to 256 KiB by handing a copy to the ring, which sends it once there
///   is room. It returns `Pending` only while such a send is in flight.
/// - `poll_flush` resolves once every byte accepted so far has been handed to the kernel
///   (the ring's send is done): it is in the socket's buffer or on the wire, not yet
///   necessarily read by the peer.
/// - `poll_close` flushes, then shuts the writing side (`shutdown(SHUT_WR)`): the peer reads
///   end-of-stream after every byte. Writes after it fail (`BrokenPipe`).
///
/// A write that fails (the peer reset, the read/write timeout passed: kind `TimedOut`) breaks
/// the sink as a failed `send` does: every later write fails too, so the byte stream never
/// has a gap.
impl AsyncWrite for NativeSink {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_bytes(cx, buf)
            .map_err(io::Error::from)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_settle(cx).map_err(io::Error::from)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_settle(cx))?;
        shutdown(&this.fd, libc::SHUT_WR);
        Poll::Ready(Ok(()))
    }
}

/// One non-blocking `send` of `buf`: how many bytes the socket took, or `WouldBlock`.
fn send_slice_now(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a live slice for the whole call, and the kernel only reads its
        // `buf.len()` bytes.
        let sent = unsafe {
            libc::send(
                fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if sent >= 0 {
            return Ok(sent as usize);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Reads as the stream's kind does: the native one as described on its impl above, the
/// simulated one with the same contract over the run's network.
impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            StreamKind::Native(stream) => Pin::new(stream).poll_read(cx, buf),
            #[cfg(feature = "deterministic")]
            StreamKind::Simulated(stream) => Pin::new(&mut **stream).poll_read(cx, buf),
        }
    }
}

/// The stream's own receive buffer, without a copy, for either kind.
impl AsyncBufRead for Stream {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        match &mut self.get_mut().0 {
            StreamKind::Native(stream) => Pin::new(stream).poll_fill_buf(cx),
            #[cfg(feature = "deterministic")]
            StreamKind::Simulated(stream) => Pin::new(&mut **stream).poll_fill_buf(cx),
        }
    }

    fn consume(self: Pin<&mut Self>, amount: usize) {
        match &mut self.get_mut().0 {
            StreamKind::Native(stream) => Pin::new(stream).consume(amount),
            #[cfg(feature = "deterministic")]
            StreamKind::Simulated(stream) => Pin::new(&mut **stream).consume(amount),
        }
    }
}

/// Writes as the sink's kind does, in order with its `send`s.
impl AsyncWrite for Sink {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            SinkKind::Native(sink) => Pin::new(sink).poll_write(cx, buf),
            #[cfg(feature = "deterministic")]
            SinkKind::Simulated(sink) => Pin::new(&mut **sink).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            SinkKind::Native(sink) => Pin::new(sink).poll_flush(cx),
            #[cfg(feature = "deterministic")]
            SinkKind::Simulated(sink) => Pin::new(&mut **sink).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            SinkKind::Native(sink) => Pin::new(sink).poll_close(cx),
            #[cfg(feature = "deterministic")]
            SinkKind::Simulated(sink) => Pin::new(&mut **sink).poll_close(cx),
        }
    }
}
