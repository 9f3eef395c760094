//! The file operations: reads, writes, a data sync and a truncation. Each is one type that
//! builds its submission and says what a completion means for it. Writes, syncs and
//! truncations are never cancelled: a write must become durable without an observer.

use super::{RWF_DONTCACHE, RequestOutput, RingOp, Status, Step, Vectored, transferred};
use crate::buffer::{IoBufMut, IoBufs};
use io_uring::{opcode, squeue, types};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Reads up to the buffer's length at the descriptor's current position.
pub(super) struct Read {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) buffer: Vec<u8>,
}

impl RingOp for Read {
    const CANCELLABLE: bool = true;

    fn entry(&mut self) -> squeue::Entry {
        opcode::Read::new(
            types::Fd(self.fd.as_raw_fd()),
            self.buffer.as_mut_ptr(),
            self.buffer.len() as u32,
        )
        .offset(u64::MAX)
        .build()
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        Step::Done(RequestOutput::Read(match transferred(result) {
            Ok(len) => {
                self.buffer.truncate(len);
                Ok(std::mem::take(&mut self.buffer))
            }
            Err(_) => Err(status.error(result)),
        }))
    }
}

/// Reads into the buffer until it holds `want` bytes or the file ends; its first byte is the
/// file's byte at `offset`.
pub(super) struct ReadAt {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) offset: u64,
    pub(super) buf: IoBufMut,
    pub(super) want: usize,
    pub(super) dont_cache: bool,
}

impl RingOp for ReadAt {
    const CANCELLABLE: bool = true;

    fn entry(&mut self) -> squeue::Entry {
        let room = (self.buf.capacity() - self.buf.len())
            .min(self.want.saturating_sub(self.buf.len()))
            .min(u32::MAX as usize) as u32;
        let flags = if self.dont_cache { RWF_DONTCACHE } else { 0 };
        opcode::Read::new(types::Fd(self.fd.as_raw_fd()), self.buf.spare_ptr(), room)
            .offset(self.offset + self.buf.len() as u64)
            .rw_flags(flags)
            .build()
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        if self.dont_cache
            && !status.cancelled
            && matches!(-result, libc::EOPNOTSUPP | libc::EINVAL)
        {
            // This file system (or kernel) has no uncached buffered reads: read through the
            // cache.
            self.dont_cache = false;
            return Step::Again;
        }
        let mut read = transferred(result).map_err(|_| status.error(result));
        if let Ok(len) = read {
            // SAFETY: the kernel wrote `len` bytes into the spare capacity.
            unsafe { self.buf.filled(len) };
            if len > 0 && self.buf.len() < self.want {
                if !status.cancelled {
                    return Step::Again;
                }
                // Short because it was cancelled, not because the file ends there: reported
                // as the cancellation, never as a short blob.
                read = Err(status.error(-libc::ECANCELED));
            }
        }
        Step::Done(RequestOutput::ReadAt(std::mem::take(&mut self.buf), read))
    }
}

/// Writes every byte at `offset`; a short write is resubmitted for the rest. A `sync` write
/// is durable (`RWF_DSYNC`) once it completes.
pub(super) struct Write {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) offset: u64,
    pub(super) bufs: IoBufs,
    pub(super) written: usize,
    pub(super) sync: bool,
    pub(super) vectored: Vectored,
}

impl RingOp for Write {
    const CANCELLABLE: bool = false;

    fn entry(&mut self) -> squeue::Entry {
        let flags = if self.sync { libc::RWF_DSYNC } else { 0 };
        self.vectored.point_at(&self.bufs);
        opcode::Writev::new(
            types::Fd(self.fd.as_raw_fd()),
            self.vectored.iovecs.as_ptr(),
            self.vectored.iovecs.len() as u32,
        )
        .offset(self.offset + self.written as u64)
        .rw_flags(flags)
        .build()
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        Step::Done(RequestOutput::Write(match transferred(result) {
            Ok(count) if count > 0 && count < self.bufs.len() => {
                self.bufs.advance(count);
                self.written += count;
                return Step::Again;
            }
            Ok(0) if !self.bufs.is_empty() => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the file accepted no bytes",
            )),
            Ok(count) => Ok(self.written + count),
            Err(_) => Err(status.error(result)),
        }))
    }
}

/// Makes a file's data (and the metadata needed to read it) durable.
pub(super) struct DataSync {
    pub(super) fd: Arc<OwnedFd>,
}

impl RingOp for DataSync {
    const CANCELLABLE: bool = false;

    fn entry(&mut self) -> squeue::Entry {
        opcode::Fsync::new(types::Fd(self.fd.as_raw_fd()))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        Step::Done(RequestOutput::Sync(
            transferred(result)
                .map(drop)
                .map_err(|_| status.error(result)),
        ))
    }
}

/// Sets a file's length.
pub(super) struct Truncate {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) len: u64,
}

impl RingOp for Truncate {
    const CANCELLABLE: bool = false;

    fn entry(&mut self) -> squeue::Entry {
        opcode::Ftruncate::new(types::Fd(self.fd.as_raw_fd()), self.len).build()
    }

    fn step(&mut self, result: i32, _flags: u32, status: Status) -> Step {
        Step::Done(RequestOutput::Truncate(
            transferred(result)
                .map(drop)
                .map_err(|_| status.error(result)),
        ))
    }
}
