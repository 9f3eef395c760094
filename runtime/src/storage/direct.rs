//! System calls made by the task's own thread instead of the ring: writes and syncs on a
//! dedicated or blocking worker, and reads that the page cache answers at once.
//!
//! On the ring, `fsync` and `RWF_DSYNC` writes always run on the kernel's io-wq threads, and
//! their completion must then wake the worker: two cross-thread hops per durable write, which
//! on small machines cost about as much as the disk flush itself. A dedicated or blocking
//! worker runs one task on a thread of its own, so that task may simply make the system call
//! and wait for the disk itself: the same durability, no hop. Pool workers keep using the ring,
//! since blocking one would stall every task queued behind it.

use crate::buffer::{IoBufMut, IoBufs};
use crate::worker::Local;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Whether the current thread runs a dedicated or blocking worker that is not closing.
pub(super) fn on_own_thread() -> bool {
    Local::with_current(|local| local.seat().is_none() && !local.is_closing()).unwrap_or(false)
}

/// Writes every byte of `bufs` at `offset` (into the page cache: [`datasync`] makes them
/// durable).
pub(super) fn write_all_at(fd: &OwnedFd, mut bufs: IoBufs, mut offset: u64) -> io::Result<()> {
    while !bufs.is_empty() {
        let iovecs: Vec<libc::iovec> = bufs
            .chunks()
            .iter()
            .take(1024)
            .map(|chunk| libc::iovec {
                iov_base: chunk.as_ptr().cast_mut().cast(),
                iov_len: chunk.len(),
            })
            .collect();
        // SAFETY: the iovecs point at live chunks of `bufs`, which outlive the call; the
        // kernel only reads them.
        let written = unsafe {
            libc::pwritev2(
                fd.as_raw_fd(),
                iovecs.as_ptr(),
                iovecs.len() as i32,
                offset as libc::off_t,
                0,
            )
        };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if written == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the file accepted no bytes",
            ));
        }
        bufs.advance(written as usize);
        offset += written as u64;
    }
    Ok(())
}

/// One write of `bufs` at `offset` that never waits (`RWF_NOWAIT`): the bytes the file took
/// at once, `WouldBlock` if it would have waited, or `Unsupported` where the file system
/// cannot write without possibly waiting (ext4's buffered writes, for one). Any thread, a
/// pool worker's included, may make it.
pub(super) fn write_nowait(fd: &OwnedFd, bufs: &IoBufs, offset: u64) -> io::Result<usize> {
    let (iovecs, count) = bufs.iovecs::<8>();
    // SAFETY: the first `count` iovecs point at live chunks of `bufs`, which outlive the
    // call; the kernel only reads them.
    let written = unsafe {
        libc::pwritev2(
            fd.as_raw_fd(),
            iovecs.as_ptr(),
            count as i32,
            offset as libc::off_t,
            libc::RWF_NOWAIT,
        )
    };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(written as usize)
}

/// Makes the file's data (and the metadata needed to read it) durable.
pub(super) fn datasync(fd: &OwnedFd) -> io::Result<()> {
    loop {
        // SAFETY: a live descriptor; no memory preconditions.
        if unsafe { libc::fdatasync(fd.as_raw_fd()) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// How far a read from the page cache got.
pub(super) enum Cached {
    /// `want` bytes are in the buffer.
    Complete,
    /// The file ends before `want` bytes.
    Ended,
    /// Some pages are not cached (or the file system cannot tell without blocking): the ring
    /// reads the rest.
    Partial,
}

/// Reads into `buf` (whose first byte is the file's byte at `offset`) from the page cache
/// only (`RWF_NOWAIT`): a read that would wait for the disk stops at once, so any thread, a
/// pool worker's included, may make it. Saves a ring round trip for cached data.
pub(super) fn read_cached(fd: &OwnedFd, buf: &mut IoBufMut, offset: u64, want: usize) -> Cached {
    buf.reserve(want.saturating_sub(buf.len()));
    while buf.len() < want {
        let room = (want - buf.len()).min(buf.capacity() - buf.len());
        let iovec = libc::iovec {
            iov_base: buf.spare_ptr().cast(),
            iov_len: room,
        };
        // SAFETY: the iovec covers `room` bytes of `buf`'s spare capacity, which nobody else
        // touches during the call.
        let read = unsafe {
            libc::preadv2(
                fd.as_raw_fd(),
                &iovec,
                1,
                (offset + buf.len() as u64) as libc::off_t,
                libc::RWF_NOWAIT,
            )
        };
        match read {
            0 => return Cached::Ended,
            count if count > 0 => {
                // SAFETY: the kernel wrote `count` bytes into the spare capacity.
                unsafe { buf.filled(count as usize) };
            }
            // EAGAIN (not cached), EOPNOTSUPP (no RWF_NOWAIT here) or a real error, which the
            // ring's read reports.
            _ => return Cached::Partial,
        }
    }
    Cached::Complete
}
