//! A registered io_uring operation and the future that observes it.
//!
//! Only the tests register operations until networking and storage land on this module.
#![cfg_attr(not(test), allow(dead_code))]
//!
//! A registration lives on the worker that first polled it. Its result travels through a
//! shared slot ([`Shared`]) that any thread may poll: polled elsewhere, the future leaves its
//! waker in the slot for the owner to wake, and the registration itself never moves.
//!
//! Invariants:
//! - The driver's [`InFlight`] owns every resource the kernel uses (fd, buffer) until the
//!   completion is reaped; the future owns none of them, so dropping it early is safe.
//! - When the owner's driver closes, every registration still in flight is cancelled and
//!   completes with an error, and its waker is woken.

use super::Driver;
use crate::worker::Local;
use futures::task::AtomicWaker;
use io_uring::{opcode, squeue, types};
use parking_lot::Mutex;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// What to ask the kernel for.
pub(crate) enum Request {
    /// Reads up to `len` bytes from `fd` at its current position.
    Read { fd: Arc<OwnedFd>, len: usize },
    /// Writes `data` to `fd` at `offset`. A `sync` write is durable (`RWF_DSYNC`) once it
    /// completes. Writes are never cancelled: a worker that closes waits for them.
    Write {
        fd: Arc<OwnedFd>,
        offset: u64,
        data: Vec<u8>,
        sync: bool,
    },
}

/// What the kernel answered.
#[derive(Debug)]
pub(crate) enum RequestOutput {
    Read(io::Result<Vec<u8>>),
    /// Bytes written.
    Write(io::Result<usize>),
}

#[derive(Default)]
struct Outcome {
    result: Option<RequestOutput>,
}

/// The slot an operation's observer and its owner share.
#[derive(Default)]
pub(crate) struct Shared {
    outcome: Mutex<Outcome>,
    waker: AtomicWaker,
}

/// What the driver keeps for an operation in flight.
pub(crate) struct InFlight {
    shared: Arc<Shared>,
    kind: Kind,
}

enum Kind {
    Read { _fd: Arc<OwnedFd>, buffer: Vec<u8> },
    Write { _fd: Arc<OwnedFd>, _data: Vec<u8> },
}

/// A completion's result: bytes transferred, or the error the kernel reported.
fn transferred(result: i32) -> io::Result<usize> {
    usize::try_from(result).map_err(|_| io::Error::from_raw_os_error(-result))
}

impl InFlight {
    /// Whether closing the driver may cancel it (reads may; durable writes may not).
    pub(crate) fn is_cancellable(&self) -> bool {
        matches!(self.kind, Kind::Read { .. })
    }

    /// Publishes the kernel's `result` and returns the waker to notify.
    pub(crate) fn complete(self, result: i32) -> Option<Waker> {
        let output = match self.kind {
            Kind::Read { mut buffer, .. } => RequestOutput::Read(transferred(result).map(|len| {
                buffer.truncate(len);
                buffer
            })),
            Kind::Write { .. } => RequestOutput::Write(transferred(result)),
        };
        self.shared.outcome.lock().result = Some(output);
        self.shared.waker.take()
    }
}

impl Driver {
    /// Registers `request` on this ring and returns the slot its result lands in.
    pub(crate) fn register(&mut self, request: Request) -> Arc<Shared> {
        let shared = Arc::new(Shared::default());
        let (entry, kind): (squeue::Entry, Kind) = match request {
            Request::Read { fd, len } => {
                let mut buffer = vec![0; len];
                let entry =
                    opcode::Read::new(types::Fd(fd.as_raw_fd()), buffer.as_mut_ptr(), len as u32)
                        .offset(u64::MAX)
                        .build();
                (entry, Kind::Read { _fd: fd, buffer })
            }
            Request::Write {
                fd,
                offset,
                data,
                sync,
            } => {
                let flags = if sync { libc::RWF_DSYNC } else { 0 };
                let entry =
                    opcode::Write::new(types::Fd(fd.as_raw_fd()), data.as_ptr(), data.len() as u32)
                        .offset(offset)
                        .rw_flags(flags)
                        .build();
                (
                    entry,
                    Kind::Write {
                        _fd: fd,
                        _data: data,
                    },
                )
            }
        };
        self.submit(
            entry,
            InFlight {
                shared: shared.clone(),
                kind,
            },
        );
        shared
    }
}

/// A future that registers `request` on the worker that first polls it and resolves to the
/// kernel's answer.
pub(crate) struct Operation {
    request: Option<Request>,
    shared: Option<Arc<Shared>>,
}

impl Operation {
    pub(crate) fn register(request: Request) -> Self {
        Self {
            request: Some(request),
            shared: None,
        }
    }
}

fn no_worker(request: &Request) -> RequestOutput {
    let error = io::Error::other("io_uring operations must be polled on a runtime worker");
    match request {
        Request::Read { .. } => RequestOutput::Read(Err(error)),
        Request::Write { .. } => RequestOutput::Write(Err(error)),
    }
}

impl Future for Operation {
    type Output = RequestOutput;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RequestOutput> {
        if self.shared.is_none() {
            let request = self
                .request
                .take()
                .expect("Operation polled after completion");
            let mut request = Some(request);
            let registered = Local::with_current(|local| {
                let mut state = local.state.borrow_mut();
                if local.is_closing() {
                    return None;
                }
                let driver = state.driver.as_mut()?;
                Some(driver.register(request.take().expect("taken once")))
            })
            .flatten();
            match registered {
                Some(shared) => self.shared = Some(shared),
                None => return Poll::Ready(no_worker(&request.expect("not registered"))),
            }
        }
        let shared = self.shared.as_ref().expect("registered above");
        shared.waker.register(cx.waker());
        match shared.outcome.lock().result.take() {
            Some(output) => Poll::Ready(output),
            None => Poll::Pending,
        }
    }
}
