//! Writes and syncs issued straight from a dedicated or blocking worker's thread.
//!
//! On the ring, `fsync` and `RWF_DSYNC` writes always run on the kernel's io-wq threads, and
//! their completion must then wake the worker: two cross-thread hops per durable write, which
//! on small machines cost about as much as the disk flush itself. A dedicated or blocking
//! worker runs one task on a thread of its own, so that task may simply make the system call
//! and wait for the disk itself: the same durability, no hop. Pool workers keep using the ring,
//! since blocking one would stall every task queued behind it.

use crate::buffer::IoBufs;
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
