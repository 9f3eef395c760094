//! A registered io_uring operation and the slot its result lands in.
//!
//! A registration lives on the ring it was registered on (the future that registers on the
//! current worker's ring is `worker::operation`). Its result travels through a shared slot
//! ([`Completion`]) that any thread may poll: polled elsewhere, the future leaves its waker in
//! the slot for the owner to wake (the latest waker wins), and the registration itself never
//! moves.
//!
//! Each kind of operation is one type implementing [`RingOp`] (the socket ones in `socket`,
//! the file ones in `file`): it builds its submission entry, steps its completions and says
//! whether closing may cancel it. The `kinds!` list names every type once; a new operation is
//! its type, a line there, and its [`Request`] and [`RequestOutput`] variants.
//!
//! Invariants:
//! - The driver's [`InFlight`] owns every resource the kernel uses (fd, buffers, iovecs,
//!   addresses) until the operation is done; the future owns none of them, so dropping it early
//!   is safe. Everything the kernel points at lives on the heap, so the slab holding `InFlight`
//!   may move it.
//! - A send or a write is finished by the driver, not by its future: a short transfer is
//!   resubmitted for the rest. A write's bytes all go out even if its future is dropped; a
//!   send's do unless it is given up (its future dropped: cancelled), its deadline passes or
//!   its worker closes first (a peer that stops reading must not hold a socket past the
//!   caller's limit, nor a worker's shutdown).
//! - When the owner's driver closes, every cancellable registration (receives, accepts,
//!   connects, reads) is cancelled and completes with an error; writes, syncs and truncations
//!   run to completion. Either way the waker is woken.
//! - A cancellable registration whose observer gives it up ([`Completion::request_cancel`],
//!   asked when its future or owner is dropped) is cancelled on its ring at most once, and
//!   only while it is not done. Its [`InFlight`] still owns every resource the kernel uses
//!   until the completion of the cancelled operation is reaped: the cancellation asks the
//!   kernel to stop, it never frees anything itself. A receive cancelled so reports
//!   `Interrupted` (its bytes, if the kernel delivered some first, come with its output); a
//!   send whose bytes did not all go out fails with `Interrupted` too.

mod file;
mod socket;

use super::sockaddr::RawAddress;
use super::{CancelInbox, Driver};
use crate::buffer::{IoBufMut, IoBufs};
use crate::sync::Mutex;
use file::{DataSync, Read, ReadAt, Truncate, Write};
use futures::task::AtomicWaker;
use io_uring::squeue;
use socket::{Connect, Readable, Recv, RecvMulti, SendAll};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Instant;

/// `IORING_RECVSEND_POLL_FIRST`: a receive waits for data before its first try.
const RECVSEND_POLL_FIRST: u16 = 1;

/// `RWF_DONTCACHE` (Linux 6.14): buffered I/O that drops its pages from the cache once done.
const RWF_DONTCACHE: i32 = 0x80;

/// What to ask the kernel for.
pub(crate) enum Request {
    /// Reads up to `len` bytes from `fd` at its current position.
    #[cfg_attr(not(test), allow(dead_code))]
    Read { fd: Arc<OwnedFd>, len: usize },
    /// Receives up to `buf`'s spare capacity from a socket (one receive: it completes with
    /// whatever arrived first). With `poll_first`, the ring waits for data before trying,
    /// which saves a try that would find the socket empty.
    Recv {
        fd: Arc<OwnedFd>,
        buf: IoBufMut,
        poll_first: bool,
        deadline: Option<Instant>,
    },
    /// Receives from a socket into the ring's provided buffers until it ends: each arrival is
    /// copied into the slot's inbox (see [`Completion::take_received`]). It pauses itself once
    /// the inbox holds [`INBOX_CAP`] bytes nobody took, so a peer that sends faster than the
    /// stream reads is held back by TCP, not by memory. The deadline ends it with `TimedOut`.
    RecvMulti {
        fd: Arc<OwnedFd>,
        deadline: Option<Instant>,
    },
    /// Sends every byte of `bufs`.
    Send {
        fd: Arc<OwnedFd>,
        bufs: IoBufs,
        deadline: Option<Instant>,
    },
    /// Waits until `fd` is readable (a poll for `POLLIN`; what a listener's readiness set
    /// waits with, so the ring holds no reference to the listening socket itself).
    Readable { fd: Arc<OwnedFd> },
    /// Connects a socket to `address`.
    Connect {
        fd: Arc<OwnedFd>,
        address: SocketAddr,
        deadline: Option<Instant>,
    },
    /// Reads into `buf` until it holds `want` bytes or the file ends; `buf`'s first byte is the
    /// file's byte at `offset`, and its spare capacity must hold `want` bytes.
    ReadAt {
        fd: Arc<OwnedFd>,
        offset: u64,
        buf: IoBufMut,
        want: usize,
        dont_cache: bool,
    },
    /// Writes every byte of `bufs` to `fd` at `offset`. A `sync` write is durable
    /// (`RWF_DSYNC`) once it completes. Writes are never cancelled: a closing worker waits for
    /// them.
    Write {
        fd: Arc<OwnedFd>,
        offset: u64,
        bufs: IoBufs,
        sync: bool,
    },
    /// Makes a file's data (and the metadata needed to read it) durable.
    Sync { fd: Arc<OwnedFd> },
    /// Sets a file's length.
    Truncate { fd: Arc<OwnedFd>, len: u64 },
}

/// What the kernel answered.
#[derive(Debug)]
pub(crate) enum RequestOutput {
    #[cfg_attr(not(test), allow(dead_code))]
    Read(io::Result<Vec<u8>>),
    /// The buffer (with what it held before plus what arrived), the bytes received, and
    /// whether the socket had more bytes queued after this receive (`SOCK_NONEMPTY`).
    Recv(IoBufMut, io::Result<usize>, bool),
    /// How a multishot receive ended; the bytes it received are in the slot's inbox.
    Received(ReceiveEnd),
    Send(io::Result<()>),
    Readable(io::Result<()>),
    Connect(io::Result<()>),
    /// The buffer (with what it held before plus what was read) and the bytes read.
    ReadAt(IoBufMut, io::Result<usize>),
    /// Bytes written.
    Write(io::Result<usize>),
    Sync(io::Result<()>),
    Truncate(io::Result<()>),
}

/// How a multishot receive ([`Request::RecvMulti`]) ended.
#[derive(Debug)]
pub(crate) enum ReceiveEnd {
    /// The peer closed its sending side: every byte it sent is in the inbox.
    Closed,
    /// It stopped with the connection open (its inbox reached [`INBOX_CAP`], its ring closed,
    /// or the kernel ended it): arm another when more bytes are wanted.
    Paused,
    /// This ring has no provided buffers: receive one call at a time instead.
    Unsupported,
    /// The receive failed (`TimedOut` when its deadline passed).
    Failed(io::Error),
}

/// The bytes a multishot receive's inbox holds before the receive pauses itself. A stream
/// takes the whole inbox when it lacks bytes, so a connection holds at most twice this plus
/// the ring's provided buffers beyond what its reader asked for (the rest waits in the socket,
/// where TCP holds the peer back). Small, since it is per connection.
pub(crate) const INBOX_CAP: usize = 64 * 1024;

/// The slot an operation's observer and its owner share.
#[derive(Default)]
pub(crate) struct Completion {
    outcome: Mutex<Outcome>,
    waker: AtomicWaker,
}

#[derive(Default)]
struct Outcome {
    output: Option<RequestOutput>,
    /// Whether the operation is done (its output may have been taken since).
    done: bool,
    /// For a send: shut the socket's writing side once it is done (its sink was dropped).
    shut_write_after: bool,
    /// For a multishot receive: bytes received and not taken yet.
    inbox: IoBufMut,
    /// The ring's cancellation inbox and the operation's `user_data` there (none for a slot
    /// answered without a ring).
    route: Option<(Arc<CancelInbox>, u64)>,
    /// A cancellation was asked for already.
    cancel_requested: bool,
}

impl Completion {
    /// Takes the result if it has landed, leaving `waker` to be woken when it does.
    pub(crate) fn poll(&self, waker: &Waker) -> Poll<RequestOutput> {
        self.waker.register(waker);
        match self.outcome.lock().output.take() {
            Some(output) => Poll::Ready(output),
            None => Poll::Pending,
        }
    }

    /// A slot whose operation is done already, with `output`: the answer to a request the
    /// ring refuses without submitting it.
    fn answered(output: RequestOutput) -> Arc<Self> {
        let slot = Self::default();
        {
            let mut outcome = slot.outcome.lock();
            outcome.output = Some(output);
            outcome.done = true;
        }
        Arc::new(slot)
    }

    /// For a multishot receive: moves every byte received so far into `into` (after what it
    /// holds) and takes the receive's end if it has ended, leaving `waker` to be woken by the
    /// next arrival or the end. Bytes always come before the end, so once the end is taken
    /// nothing more arrives.
    pub(crate) fn take_received(
        &self,
        waker: &Waker,
        into: &mut IoBufMut,
    ) -> Option<RequestOutput> {
        self.waker.register(waker);
        let mut outcome = self.outcome.lock();
        if into.is_empty() {
            // No copy: the inbox becomes the caller's buffer, and the caller's (empty) buffer,
            // with whatever room it has, becomes the inbox.
            std::mem::swap(into, &mut outcome.inbox);
        } else if !outcome.inbox.is_empty() {
            into.extend_from_slice(&outcome.inbox);
            outcome.inbox.clear();
        }
        outcome.output.take()
    }

    /// Test view: bytes waiting in a multishot receive's inbox, and how it ended, if it has
    /// (the end's debug form, left in place).
    #[cfg(test)]
    pub(crate) fn inbox_state(&self) -> (usize, Option<String>) {
        let outcome = self.outcome.lock();
        let end = outcome.done.then(|| format!("{:?}", outcome.output));
        (outcome.inbox.len(), end)
    }

    /// Gives the operation up: the first call while it is not done returns the ring's
    /// cancellation inbox and the operation's `user_data`, for the caller to ask its ring to
    /// cancel it ([`Driver::cancel_dropped`] on the ring's thread, [`CancelInbox::send`]
    /// from elsewhere). Every later call, and any call once it is done, returns `None`.
    pub(crate) fn request_cancel(&self) -> Option<(Arc<CancelInbox>, u64)> {
        let mut outcome = self.outcome.lock();
        if outcome.done || outcome.cancel_requested {
            return None;
        }
        outcome.cancel_requested = true;
        outcome.route.clone()
    }

    /// Asks that the socket's writing side be shut once this send is done. Returns true if it
    /// is done already, in which case the caller shuts it. Both sides decide under the same
    /// lock, so exactly one of them does it.
    pub(crate) fn shut_write_after(&self) -> bool {
        let mut outcome = self.outcome.lock();
        outcome.shut_write_after = true;
        outcome.done
    }
}

/// What the driver keeps for an operation in flight.
pub(crate) struct InFlight {
    shared: Arc<Completion>,
    kind: Kind,
    /// Unique per driver: tells a deadline entry whether its operation is still this one.
    pub(super) id: u64,
    /// Where its deadline sits in the driver's wheel, if it has one.
    pub(super) deadline: Option<super::deadlines::Position>,
    /// Its deadline passed and a cancellation was sent: a cancelled completion is a timeout.
    pub(super) timed_out: bool,
    /// A cancellation was sent (its deadline passed, or its worker is closing): it is not
    /// resubmitted after a partial transfer.
    pub(super) cancelled: bool,
    /// The cancellation was sent because its observer gave it up (its future was dropped).
    pub(super) abandoned: bool,
}

/// Every operation type, once: the driver's in-flight entry holds one of them, and each
/// call on it goes to that type's [`RingOp`] implementation.
macro_rules! kinds {
    ($($name:ident),* $(,)?) => {
        enum Kind {
            $($name($name),)*
        }

        impl Kind {
            fn is_cancellable(&self) -> bool {
                match self {
                    $(Kind::$name(_) => <$name as RingOp>::CANCELLABLE,)*
                }
            }

            fn entry(&mut self) -> squeue::Entry {
                match self {
                    $(Kind::$name(operation) => operation.entry(),)*
                }
            }

            fn step(&mut self, result: i32, flags: u32, status: Status) -> Step {
                match self {
                    $(Kind::$name(operation) => operation.step(result, flags, status),)*
                }
            }
        }
    };
}

kinds!(
    Read, Recv, RecvMulti, SendAll, Readable, Connect, ReadAt, Write, DataSync, Truncate
);

/// One kind of ring operation, as the driver keeps it in flight: it owns what the kernel
/// points at, builds the submission for what is left, and says what a completion means.
trait RingOp {
    /// Whether closing the driver may cancel it: what waits for a peer or reads may; writes,
    /// syncs and truncations may not (a write must become durable without an observer).
    const CANCELLABLE: bool;

    /// The submission for what is left to do, pointing at resources this operation owns.
    fn entry(&mut self) -> squeue::Entry;

    /// Applies the kernel's `result` (and completion `flags`): the operation is done, or it
    /// resubmits the rest (a short transfer, or a read that must drop an unsupported flag).
    fn step(&mut self, result: i32, flags: u32, status: Status) -> Step;
}

/// What the driver knows of an operation besides its kind, for [`RingOp::step`].
#[derive(Clone, Copy)]
struct Status {
    /// Its deadline passed and a cancellation was sent.
    timed_out: bool,
    /// A cancellation was sent (deadline, closing worker, or dropped future).
    cancelled: bool,
    /// The cancellation was sent because the operation's future was dropped.
    abandoned: bool,
}

impl Status {
    /// The error a failed `result` reports: a timeout if the operation's deadline cancelled
    /// it, `Interrupted` if it was cancelled because its future was dropped, else the
    /// kernel's error.
    fn error(self, result: i32) -> io::Error {
        if self.timed_out && result == -libc::ECANCELED {
            io::Error::new(io::ErrorKind::TimedOut, "the operation timed out")
        } else if self.abandoned && result == -libc::ECANCELED {
            io::Error::new(
                io::ErrorKind::Interrupted,
                "the operation was cancelled: the call that started it was dropped",
            )
        } else {
            io::Error::from_raw_os_error(-result)
        }
    }
}

/// The iovec array (and message header) of a vectored send or write, rebuilt from the bytes
/// still to go before each submission; heap-allocated, so the kernel's pointers stay valid
/// wherever the operation moves.
struct Vectored {
    iovecs: Vec<libc::iovec>,
    message: Box<libc::msghdr>,
}

// SAFETY: the raw pointers in `iovecs` and `message` point into buffers owned by the same
// operation (`IoBufs`, which is `Send`) and into `iovecs` itself; they are only dereferenced
// by the kernel while the operation is in flight on its owner's ring.
unsafe impl Send for Vectored {}

impl Vectored {
    fn new() -> Self {
        Self {
            iovecs: Vec::new(),
            // SAFETY: `msghdr` is plain data; all zeroes is an empty message.
            message: Box::new(unsafe { std::mem::zeroed() }),
        }
    }

    /// Points the iovecs at every chunk of `bufs` (at most `IOV_MAX` of them).
    fn point_at(&mut self, bufs: &IoBufs) {
        self.iovecs.clear();
        self.iovecs
            .extend(bufs.chunks().iter().take(1024).map(|chunk| libc::iovec {
                iov_base: chunk.as_ptr().cast_mut().cast(),
                iov_len: chunk.len(),
            }));
        self.message.msg_iov = self.iovecs.as_mut_ptr();
        self.message.msg_iovlen = self.iovecs.len();
    }
}

/// A completion's result: bytes transferred, or the error the kernel reported.
pub(crate) fn transferred(result: i32) -> io::Result<usize> {
    usize::try_from(result).map_err(|_| io::Error::from_raw_os_error(-result))
}

/// What a completion means for its operation.
pub(super) enum Step {
    /// The operation is done: publish this.
    Done(RequestOutput),
    /// More to do: submit the operation's next entry.
    Again,
    /// A multishot operation goes on: more completions follow under the same entry.
    More,
}

impl InFlight {
    /// Whether closing the driver may cancel it (see [`RingOp::CANCELLABLE`]).
    pub(crate) fn is_cancellable(&self) -> bool {
        self.kind.is_cancellable()
    }

    /// The submission for what is left to do.
    pub(super) fn entry(&mut self) -> squeue::Entry {
        self.kind.entry()
    }

    /// For a multishot receive: appends `bytes` to the slot's inbox, pushes the waker to
    /// notify, and returns whether the inbox now holds [`INBOX_CAP`] bytes or more.
    pub(super) fn deliver(&self, bytes: &[u8], wakes: &mut Vec<Waker>) -> bool {
        let held = {
            let mut outcome = self.shared.outcome.lock();
            outcome.inbox.extend_from_slice(bytes);
            outcome.inbox.len()
        };
        wakes.extend(self.shared.waker.take());
        held >= INBOX_CAP
    }

    /// For a multishot receive whose inbox is full: marks it cancelled, so that its end (the
    /// cancellation) reads [`ReceiveEnd::Paused`]. Returns false if a cancellation was sent
    /// already.
    pub(super) fn pause(&mut self) -> bool {
        debug_assert!(
            matches!(self.kind, Kind::RecvMulti(_)),
            "only multishot receives select provided buffers and fill an inbox"
        );
        if self.cancelled {
            return false;
        }
        self.cancelled = true;
        true
    }

    /// Applies the kernel's `result`: done, or resubmit the rest.
    pub(super) fn step(&mut self, result: i32, flags: u32) -> Step {
        let status = Status {
            timed_out: self.timed_out,
            cancelled: self.cancelled,
            abandoned: self.abandoned,
        };
        self.kind.step(result, flags, status)
    }

    /// Publishes `output` and returns the waker to notify.
    pub(super) fn publish(self, output: RequestOutput) -> Option<Waker> {
        let InFlight { shared, kind, .. } = self;
        let sent_on = match &kind {
            Kind::SendAll(send) => Some(send.fd.clone()),
            _ => None,
        };
        // The observer may take the output at once: it must find every resource released
        // (a connect's caller unwraps its socket).
        drop(kind);
        let shut_write = {
            let mut outcome = shared.outcome.lock();
            outcome.output = Some(output);
            outcome.done = true;
            outcome.shut_write_after
        };
        if shut_write && let Some(fd) = sent_on {
            // SAFETY: a live socket; shutdown has no memory preconditions.
            unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) };
        }
        shared.waker.take()
    }
}

impl Request {
    fn into_kind(self) -> (Kind, Option<Instant>) {
        match self {
            Request::Read { fd, len } => (
                Kind::Read(Read {
                    fd,
                    buffer: vec![0; len],
                }),
                None,
            ),
            Request::Recv {
                fd,
                buf,
                poll_first,
                deadline,
            } => (
                Kind::Recv(Recv {
                    fd,
                    buf,
                    poll_first,
                }),
                deadline,
            ),
            Request::RecvMulti { fd, deadline } => (Kind::RecvMulti(RecvMulti { fd }), deadline),
            Request::Send { fd, bufs, deadline } => (
                Kind::SendAll(SendAll {
                    fd,
                    bufs,
                    vectored: Vectored::new(),
                }),
                deadline,
            ),
            Request::Readable { fd } => (Kind::Readable(Readable { fd }), None),
            Request::Connect {
                fd,
                address,
                deadline,
            } => (
                Kind::Connect(Connect {
                    fd,
                    address: Box::new(RawAddress::from_socket_addr(address)),
                }),
                deadline,
            ),
            Request::ReadAt {
                fd,
                offset,
                mut buf,
                want,
                dont_cache,
            } => {
                buf.reserve(want.saturating_sub(buf.len()));
                (
                    Kind::ReadAt(ReadAt {
                        fd,
                        offset,
                        buf,
                        want,
                        dont_cache,
                    }),
                    None,
                )
            }
            Request::Write {
                fd,
                offset,
                bufs,
                sync,
            } => (
                Kind::Write(Write {
                    fd,
                    offset,
                    bufs,
                    written: 0,
                    sync,
                    vectored: Vectored::new(),
                }),
                None,
            ),
            Request::Sync { fd } => (Kind::DataSync(DataSync { fd }), None),
            Request::Truncate { fd, len } => (Kind::Truncate(Truncate { fd, len }), None),
        }
    }

    /// The answer for a request that found no worker to run it; buffers are handed back.
    pub(crate) fn refuse(self) -> RequestOutput {
        let error = io::Error::other(
            "io_uring operations must be polled on a runtime worker that is not closing",
        );
        match self {
            Request::Recv { buf, .. } => RequestOutput::Recv(buf, Err(error), false),
            Request::ReadAt { buf, .. } => RequestOutput::ReadAt(buf, Err(error)),
            other => other.refused(),
        }
    }

    fn refused(&self) -> RequestOutput {
        let error = || {
            io::Error::other(
                "io_uring operations must be polled on a runtime worker that is not closing",
            )
        };
        match self {
            Request::Read { .. } => RequestOutput::Read(Err(error())),
            Request::Recv { .. } | Request::ReadAt { .. } => {
                unreachable!("refused reads hand their buffer back through `refuse`")
            }
            Request::RecvMulti { .. } => RequestOutput::Received(ReceiveEnd::Failed(error())),
            Request::Send { .. } => RequestOutput::Send(Err(error())),
            Request::Readable { .. } => RequestOutput::Readable(Err(error())),
            Request::Connect { .. } => RequestOutput::Connect(Err(error())),
            Request::Write { .. } => RequestOutput::Write(Err(error())),
            Request::Sync { .. } => RequestOutput::Sync(Err(error())),
            Request::Truncate { .. } => RequestOutput::Truncate(Err(error())),
        }
    }
}

impl Driver {
    /// Registers `request` on this ring and returns the slot its result lands in.
    pub(crate) fn register(&mut self, request: Request) -> Arc<Completion> {
        if matches!(request, Request::RecvMulti { .. }) && !self.has_provided_buffers() {
            return Completion::answered(RequestOutput::Received(ReceiveEnd::Unsupported));
        }
        let shared = Arc::new(Completion::default());
        let (kind, deadline) = request.into_kind();
        let token = self.submit(
            InFlight {
                shared: shared.clone(),
                kind,
                id: 0,
                deadline: None,
                timed_out: false,
                cancelled: false,
                abandoned: false,
            },
            deadline,
        );
        shared.outcome.lock().route = Some((self.cancel_inbox().clone(), token));
        shared
    }
}
