//! The socket operations: a receive, a send, a readiness poll and a connect. Each is one type
//! that builds its submission and says what a completion means for it.

use super::{
    RECVSEND_POLL_FIRST, ReceiveEnd, RequestOutput, RingOp, Status, Step, Vectored, transferred,
};
use crate::buffer::{IoBufMut, IoBufs};
use crate::driver::provided;
use crate::driver::sockaddr::RawAddress;
use io_uring::{opcode, squeue, types};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Receives up to the buffer's spare capacity (one receive: whatever arrived first).
pub(super) struct Recv {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) buf: IoBufMut,
    pub(super) poll_first: bool,
}

impl RingOp for Recv {
    const CANCELLABLE: bool = true;

    fn entry(&mut self) -> squeue::Entry {
        let room = (self.buf.capacity() - self.buf.len()).min(u32::MAX as usize) as u32;
        let ioprio = if self.poll_first {
            RECVSEND_POLL_FIRST
        } else {
            0
        };
        opcode::Recv::new(types::Fd(self.fd.as_raw_fd()), self.buf.spare_ptr(), room)
            .ioprio(ioprio)
            .build()
    }

    fn step(&mut self, result: i32, flags: u32, status: Status) -> Step {
        let received = transferred(result).map_err(|_| status.error(result));
        if let Ok(len) = received {
            // SAFETY: the kernel wrote `len` bytes into the spare capacity.
            unsafe { self.buf.filled(len) };
        }
        let more = io_uring::cqueue::sock_nonempty(flags);
        Step::Done(RequestOutput::Recv(
            std::mem::take(&mut self.buf),
            received,
            more,
        ))
    }
}

/// Receives into the ring's provided buffers until it ends. The driver copies each
/// completion's bytes into the slot's inbox before it steps the operation, so a step only
/// decides whether the receive goes on and, if not, why it ended.
pub(super) struct RecvMulti {
    pub(super) fd: Arc<OwnedFd>,
}

impl RingOp for RecvMulti {
    const CANCELLABLE: bool = true;

    fn entry(&mut self) -> squeue::Entry {
        opcode::RecvMulti::new(types::Fd(self.fd.as_raw_fd()), provided::GROUP).build()
    }

    fn step(&mut self, result: i32, flags: u32, status: Status) -> Step {
        if io_uring::cqueue::more(flags) {
            return Step::More;
        }
        // A receive that ran out of buffers after a cancellation was sent (the cancellation
        // found nothing to cancel) ends as the cancellation would have ended it.
        let result = if result == -libc::ENOBUFS && status.cancelled {
            -libc::ECANCELED
        } else {
            result
        };
        let end = match result {
            // The kernel ended it after delivering bytes (its completion queue overflowed, for
            // one): the connection is still open.
            1.. => ReceiveEnd::Paused,
            0 => ReceiveEnd::Closed,
            // Every provided buffer was taken when bytes arrived. The driver gives buffers
            // back as it handles their completions, all before this resubmission reaches the
            // kernel, so it finds the ring refilled (other receives may take those buffers
            // first; then it runs out again and is resubmitted at the next enter).
            _ if result == -libc::ENOBUFS => return Step::Again,
            // Cancelled for a full inbox, or by the ring's closing (the connection outlives
            // the ring that armed it: the next call arms a receive where it runs).
            _ if result == -libc::ECANCELED && status.cancelled && !status.timed_out => {
                ReceiveEnd::Paused
            }
            // A socket error (a reset, say) stays an error even if a pause was asked for: the
            // kernel has cleared it, so a receive armed again would read a clean end instead.
            _ => ReceiveEnd::Failed(status.error(result)),
        };
        Step::Done(RequestOutput::Received(end))
    }
}

/// Sends every byte; a short send is resubmitted for the rest unless it was cancelled.
pub(super) struct SendAll {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) bufs: IoBufs,
    pub(super) vectored: Vectored,
}

impl RingOp for SendAll {
    const CANCELLABLE: bool = true;

    fn entry(&mut self) -> squeue::Entry {
        if self.bufs.chunks().len() == 1 {
            let chunk = &self.bufs.chunks()[0];
            opcode::Send::new(
                types::Fd(self.fd.as_raw_fd()),
                chunk.as_ptr(),
                chunk.len().min(u32::MAX as usize) as u32,
            )
            .flags(libc::MSG_NOSIGNAL)
            .build()
        } else {
            self.vectored.point_at(&self.bufs);
            opcode::SendMsg::new(
                types::Fd(self.fd.as_raw_fd()),
                &raw const *self.vectored.message,
            )
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
        }
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        let bufs = &mut self.bufs;
        Step::Done(RequestOutput::Send(match transferred(result) {
            Ok(sent) if sent < bufs.len() && sent > 0 && status.cancelled => {
                Err(status.error(-libc::ECANCELED))
            }
            Ok(sent) if sent < bufs.len() && sent > 0 => {
                bufs.advance(sent);
                return Step::Again;
            }
            Ok(0) if !bufs.is_empty() => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the socket accepted no bytes",
            )),
            Ok(_) => Ok(()),
            Err(_) => Err(status.error(result)),
        }))
    }
}

/// Waits until the descriptor is readable (a poll for `POLLIN`).
pub(super) struct Readable {
    pub(super) fd: Arc<OwnedFd>,
}

impl RingOp for Readable {
    const CANCELLABLE: bool = true;

    fn entry(&mut self) -> squeue::Entry {
        opcode::PollAdd::new(types::Fd(self.fd.as_raw_fd()), libc::POLLIN as u32).build()
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        Step::Done(RequestOutput::Readable(
            transferred(result)
                .map(drop)
                .map_err(|_| status.error(result)),
        ))
    }
}

/// Connects a socket to an address (kept on the heap: the kernel points at it).
pub(super) struct Connect {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) address: Box<RawAddress>,
}

impl RingOp for Connect {
    const CANCELLABLE: bool = true;

    fn entry(&mut self) -> squeue::Entry {
        opcode::Connect::new(
            types::Fd(self.fd.as_raw_fd()),
            (&raw const self.address.storage).cast(),
            self.address.len,
        )
        .build()
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        Step::Done(RequestOutput::Connect(
            transferred(result)
                .map(drop)
                .map_err(|_| status.error(result)),
        ))
    }
}
