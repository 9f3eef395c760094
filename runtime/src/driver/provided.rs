//! A ring of provided buffers: memory the kernel picks from for multishot receives, so one armed
//! receive completes many times without the application naming a buffer for each.
//!
//! The driver copies a completion's bytes out of the buffer the kernel picked and gives the
//! buffer back at once, while handling that completion. Buffers are therefore held by the
//! kernel only between a receive and the reap that follows it, and a few of them serve every
//! connection of the ring.
//!
//! Invariants:
//! - Both mappings (the entry ring the kernel reads and the buffers it writes into) are private
//!   anonymous mappings owned here, unmapped when this is dropped. The kernel pins the entry
//!   ring, but writes into the buffers through their addresses, and only for a receive in
//!   flight: so this is dropped only when no receive is (the driver drops it after `close`
//!   drained its ring, and leaks it when the drain fails; see `Driver::abandon`). That is the
//!   contract of [`ProvidedBuffers::register`].
//! - Every buffer id is in exactly one place: published in the entry ring (the kernel may pick
//!   it), or picked by the kernel and named by exactly one completion not yet handled, or being
//!   copied out by [`ProvidedBuffers::take`], which publishes it again before it returns. So at
//!   most `count` entries are ever published and none overwrites an entry the kernel has not
//!   consumed. (A panic while the bytes are copied leaves that buffer out of the ring: a smaller
//!   ring, never an overwritten entry.)
//! - An entry is written before the tail that publishes it, and the tail is stored with release
//!   ordering: the kernel reads the tail with acquire ordering and only then the entries.
//! - The kernel reads only the entries between its head and the published tail, and writes
//!   only into buffers it took from there: a buffer named by a completion is not written again
//!   until it is published again.

use io_uring::IoUring;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

/// The buffer group the driver registers its provided buffers under (one group per ring).
pub(crate) const GROUP: u16 = 0;

/// One entry of the ring the kernel reads (`struct io_uring_buf`). The first entry's last
/// field is the ring's tail.
#[repr(C)]
struct RawEntry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

/// The provided buffers of one ring: `count` buffers of `size` bytes.
pub(crate) struct ProvidedBuffers {
    entries: Mapping,
    data: Mapping,
    count: u16,
    size: u32,
    /// The tail as last published: the ring position the next given-back buffer goes to.
    tail: u16,
}

impl ProvidedBuffers {
    /// Maps `count` buffers of `size` bytes and registers them with `ring` under [`GROUP`].
    /// `count` must be a power of two in `1..=32768`, `size` at least 1.
    ///
    /// # Safety
    ///
    /// The result must not be dropped while a receive that may pick its buffers is in flight
    /// on `ring`: drop it after every such receive has completed, or leak it.
    pub(crate) unsafe fn register(ring: &IoUring, count: u16, size: u32) -> io::Result<Self> {
        debug_assert!(count.is_power_of_two() && count <= 32_768 && size > 0);
        let entries = Mapping::new(usize::from(count) * std::mem::size_of::<RawEntry>())?;
        let data = Mapping::new(usize::from(count) * size as usize)?;
        let mut buffers = Self {
            entries,
            data,
            count,
            size,
            tail: 0,
        };
        // SAFETY: the entry ring is a live, page-aligned mapping of `count` entries, owned by
        // `buffers`; the data mapping holds every buffer the entries will name; and the caller
        // keeps both mapped while a receive may use them (this function's contract).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                buffers.entries.ptr.as_ptr() as u64,
                count,
                GROUP,
                0,
            )?;
        }
        for id in 0..count {
            buffers.write_entry(id);
        }
        buffers.publish_tail();
        Ok(buffers)
    }

    /// Hands `f` the `len` bytes the kernel received into buffer `id`, then gives the buffer
    /// back to the kernel. A completion that selected a buffer is passed here whatever else
    /// becomes of it, so only a panic in `f` loses a buffer (module invariants).
    ///
    /// # Panics
    /// If `id` or `len` is out of range: the kernel named a buffer it was never given, a bug.
    pub(crate) fn take<R>(&mut self, id: u16, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(
            id < self.count && len <= self.size as usize,
            "a completion names provided buffer {id} with {len} bytes; the ring has {} buffers \
             of {} bytes",
            self.count,
            self.size
        );
        let start = usize::from(id) * self.size as usize;
        // SAFETY: `start + len` lies inside the data mapping (checked above). The kernel wrote
        // these bytes before posting the completion that named `id`, and writes this buffer
        // again only after it is published below (module invariants), so nothing writes them
        // while the slice lives.
        let bytes = unsafe { std::slice::from_raw_parts(self.data.ptr.as_ptr().add(start), len) };
        let result = f(bytes);
        self.write_entry(id);
        self.publish_tail();
        result
    }

    /// Writes buffer `id` into the entry at the tail and advances the (unpublished) tail.
    fn write_entry(&mut self, id: u16) {
        let position = usize::from(self.tail & (self.count - 1));
        let address = self.data.ptr.as_ptr() as u64 + u64::from(id) * u64::from(self.size);
        // SAFETY: `position < count`, so the entry lies inside the entry mapping. The kernel
        // does not read it: buffer `id` is out of the ring, so fewer than `count` entries are
        // published and this position is not between the kernel's head and the published tail
        // (module invariants). The fields are written through raw pointers, never through a
        // reference to the whole entry, so the tail (the first entry's `resv`) is not touched.
        unsafe {
            let entry = self.entries.ptr.as_ptr().cast::<RawEntry>().add(position);
            (&raw mut (*entry).addr).write(address);
            (&raw mut (*entry).len).write(self.size);
            (&raw mut (*entry).bid).write(id);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes every entry written so far.
    fn publish_tail(&self) {
        // SAFETY: the first entry's `resv` is the ring's tail, a naturally aligned u16 inside
        // the entry mapping, which the kernel only reads; accessing it atomically is what the
        // kernel's own acquire load pairs with.
        let tail = unsafe {
            &*(&raw const (*self.entries.ptr.as_ptr().cast::<RawEntry>()).resv).cast::<AtomicU16>()
        };
        tail.store(self.tail, Ordering::Release);
    }
}

/// A private anonymous mapping, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value, reached only through `&mut` access
// to its owner; unmapping it is valid from any thread.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh anonymous mapping; no existing memory is affected. The result is
        // checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).expect("mmap never maps address 0 here");
        Ok(Self { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `new` with this length and is unmapped once; the
        // kernel no longer uses it (module invariants).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
