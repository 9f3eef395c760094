//! Blob storage on the rings: partitions are folders of the runner's storage directory, and a
//! blob is the file `<partition>/<hex(name)>` in one of them.
//!
//! Reads, writes, syncs, resizes and opens are operations on the ring of the worker that
//! polls them. Guarantees:
//! - A partition name is `[A-Za-z0-9_-]+`, checked before anything touches the file system,
//!   so no path ever leaves the storage directory.
//! - A write is registered at its first poll and then belongs to the ring: dropping its
//!   future does not stop it, the driver finishes short writes, and a closing worker (or
//!   shutdown) waits for it. On a dedicated or blocking worker, plain writes and `sync` are
//!   instead made by the task's own thread during that first poll (the `direct` module): a `sync`
//!   skips the kernel's io-wq hop, and a plain write is complete before its future can be
//!   dropped. `SYNC` writes stay registrations everywhere (pending after their first poll);
//!   for the fastest durable writes on a dedicated worker, write and then `sync`. On a pool
//!   worker, a plain write is first offered as one write that never waits (`RWF_NOWAIT`),
//!   which skips io-wq where the file system takes it; ext4 and tmpfs refuse buffered writes
//!   that way, which an opened blob learns at its first write, and then every write is a
//!   registration. A [`WriteOptions::SYNC`] write is durable (`RWF_DSYNC`) when it resolves;
//!   [`Blob::sync`](crate::Blob::sync) makes every completed write durable.
//! - `open` resolves in its first poll (no ring round trip), so writes issued right after it
//!   are registered at once. A created blob's directory entries (and its partition's) become
//!   durable with its first `sync` or `SYNC` write, so a synced blob is found after a crash.
//! - `read_at` returns exactly the bytes asked for, or [`Error::BlobTooShort`]. It first asks
//!   the page cache (`RWF_NOWAIT`, which never waits for the disk) and takes the ring only for
//!   what is not cached, so a cached read costs one system call and no task wake.
//! - `open`, `remove` and `scan` are directory operations made by the calling thread (creating
//!   a directory entry, unlinking, listing): they take microseconds on a local file system and
//!   complete in their first poll.
//! - [`Blob::start_read_many`] issues a batch of reads on this worker and hands back a
//!   [`ReadMany`] that any thread may await. Its results belong to the issuing worker's life:
//!   first observed after that worker finished its cleanup (or after the runner shut down),
//!   it reports [`Error::ReadFailed`]; a pending handle does not keep the worker alive.

mod direct;
#[cfg(feature = "deterministic")]
mod memory;

use crate::buffer::{IoBufMut, IoBufs, IoBufsMut};
use crate::context::Context;
use crate::driver::RingClosed;
use crate::driver::{Completion, Request, RequestOutput};
use crate::worker::operation::{Operation, register_batch, submit_now};
use crate::{Error, Storage};
use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll};

pub use crate::traits::{ReadOptions, WriteOptions};

/// Lowercase hex of `bytes`: a blob's file name.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    out
}

/// The bytes a lowercase hex file name stands for, if it is one.
fn unhex(name: &str) -> Option<Vec<u8>> {
    if !name.len().is_multiple_of(2) || name.is_empty() {
        return None;
    }
    let digit = |byte: u8| match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    };
    name.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// Refuses a range that does not fit in a file offset (`i64`): the kernel would read an offset
/// of -1 as "the file's current position".
fn check_range(blob: &Blob, offset: u64, len: usize) -> Result<(), Error> {
    let end = offset.checked_add(len as u64);
    if end.is_some_and(|end| end <= i64::MAX as u64) {
        return Ok(());
    }
    Err(blob.failed(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "the range of {len} bytes at offset {offset} ends past the largest file offset \
             ({})",
            i64::MAX
        ),
    )))
}

/// The longest read whose buffer is allocated without first asking the file for its length:
/// one page-cache-sized allocation costs less than the `fstat` that would check it.
const UNCHECKED_READ_LEN: usize = 64 * 1024;

/// Refuses reads that [`check_range`] refuses, and, before buffers of more than
/// [`UNCHECKED_READ_LEN`] bytes in all are allocated for them, any that reaches past the blob's
/// current length: a length from a caller (a corrupt header, say), or many small ones, never
/// become an allocation the blob cannot fill.
fn check_reads(blob: &Blob, ranges: &[(u64, usize)]) -> Result<(), Error> {
    let mut total = 0usize;
    for &(offset, len) in ranges {
        check_range(blob, offset, len)?;
        total = total.saturating_add(len);
    }
    if total <= UNCHECKED_READ_LEN {
        return Ok(());
    }
    let (_, end) = blob.identity().map_err(|error| blob.failed(error))?;
    match ranges
        .iter()
        .find(|&&(offset, len)| offset.saturating_add(len as u64) > end)
    {
        None => Ok(()),
        Some(&(offset, len)) => Err(Error::BlobTooShort {
            blob: blob.label().to_owned(),
            offset,
            len,
            end,
        }),
    }
}

fn check_partition(partition: &str) -> Result<(), Error> {
    let valid = !partition.is_empty()
        && partition
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if valid {
        Ok(())
    } else {
        Err(Error::PartitionNameInvalid)
    }
}

/// An open blob. Clones share the file; it closes when the last clone (and the last
/// operation using it) is gone.
#[derive(Clone)]
pub struct Blob {
    inner: Inner,
}

/// What a blob is: a file, or (in a deterministic run) an inode of the simulated disk. With
/// the `deterministic` feature off the enum has one variant, so it is the `Arc` alone and
/// every match on it compiles to nothing.
#[derive(Clone)]
enum Inner {
    File(Arc<File>),
    #[cfg(feature = "deterministic")]
    Memory(Arc<memory::Memory>),
}

struct File {
    fd: Arc<OwnedFd>,
    /// `partition/hex(name)`, for errors.
    label: String,
    /// Where the file is, for the files set beside it ([`Blob::create_beside`]).
    path: PathBuf,
    /// Directories whose entries for this blob (or its partition) are not known to be durable
    /// yet: the first sync or `SYNC` write syncs them too.
    unsynced_directories: futures::lock::Mutex<Vec<PathBuf>>,
    /// Whether the file system may take a write that never waits (`RWF_NOWAIT`): cleared at
    /// the first refusal, so a file system that cannot (ext4) costs one failed call per file.
    nowait_writes: AtomicBool,
}

impl File {
    /// Makes the directory entries leading to this blob durable, once.
    async fn sync_directories(&self) -> io::Result<()> {
        // Held across the syncs: a concurrent sync waits rather than finding the list empty
        // and claiming durability early; a directory leaves the list only once it is synced,
        // so a sync dropped half-way leaves the rest for the next one.
        let mut directories = self.unsynced_directories.lock().await;
        while let Some(directory) = directories.first() {
            let fd = Arc::new(OwnedFd::from(std::fs::File::open(directory)?));
            sync_fd(fd).await?;
            directories.remove(0);
        }
        Ok(())
    }
}

/// Shows the blob as `partition/hex(name)`, its descriptor and its current length (one `fstat`,
/// which never waits on the blob's operations; `None` if it fails).
impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::os::fd::AsRawFd;
        let mut debug = f.debug_struct("Blob");
        debug.field("label", &self.label());
        match &self.inner {
            Inner::File(file) => debug.field("fd", &file.fd.as_raw_fd()),
            #[cfg(feature = "deterministic")]
            Inner::Memory(_) => debug.field("simulated", &true),
        };
        debug
            .field("len", &self.identity().ok().map(|(_, len)| len))
            .finish_non_exhaustive()
    }
}

impl Blob {
    /// The file of a native blob. With the `deterministic` feature off, the only variant.
    #[inline]
    fn file(&self) -> &Arc<File> {
        match &self.inner {
            Inner::File(file) => file,
            #[cfg(feature = "deterministic")]
            Inner::Memory(_) => unreachable!("a file operation on a simulated blob"),
        }
    }

    /// The simulated blob, if this is one.
    #[cfg(feature = "deterministic")]
    #[inline]
    fn memory(&self) -> Option<&Arc<memory::Memory>> {
        match &self.inner {
            Inner::Memory(memory) => Some(memory),
            Inner::File(_) => None,
        }
    }

    /// Reads `len` bytes at `offset` from the page cache only, on the calling thread and
    /// without waiting for the disk (`RWF_NOWAIT`): the bytes if every one of them was
    /// cached, else `None`, and the caller reads them through the ring (which reports a blob
    /// that ends early). For a reader that checks what it reads at once, while the bytes are
    /// still in the CPU's cache.
    pub(crate) fn read_cached(&self, offset: u64, len: usize) -> Option<IoBufMut> {
        #[cfg(feature = "deterministic")]
        if let Some(memory) = self.memory() {
            return memory.read_cached(offset, len);
        }
        let mut buf = IoBufMut::with_capacity(len);
        match direct::read_cached(&self.file().fd, &mut buf, offset, len) {
            direct::Cached::Complete => Some(buf),
            direct::Cached::Ended | direct::Cached::Partial => None,
        }
    }

    /// On a pool worker, offers a plain write to the file system as one write that never
    /// waits, which saves the ring's hop to a kernel worker thread where the file system
    /// takes it (XFS and btrfs do for buffered writes; ext4 refuses, once per file). Returns
    /// what is left for the ring (`None` if nothing is): a write that would wait, or fails,
    /// goes to the ring whole, which waits or reports the error.
    fn write_nowait(
        &self,
        mut bufs: IoBufs,
        offset: u64,
        options: WriteOptions,
    ) -> Option<(IoBufs, u64)> {
        if options.sync || !self.file().nowait_writes.load(Ordering::Relaxed) {
            return Some((bufs, offset));
        }
        match direct::write_nowait(&self.file().fd, &bufs, offset) {
            Ok(written) if written == bufs.len() => None,
            Ok(written) => {
                bufs.advance(written);
                Some((bufs, offset + written as u64))
            }
            Err(error) => {
                if error.raw_os_error() == Some(libc::EOPNOTSUPP) {
                    self.file().nowait_writes.store(false, Ordering::Relaxed);
                }
                Some((bufs, offset))
            }
        }
    }

    pub(crate) fn failed(&self, error: io::Error) -> Error {
        Error::BlobFailed(self.label().to_owned(), error)
    }

    /// The file's device and inode (equal for every handle on the same file, whichever `open`
    /// made it), and its current length.
    pub(crate) fn identity(&self) -> io::Result<((u64, u64), u64)> {
        use std::os::fd::AsRawFd;
        #[cfg(feature = "deterministic")]
        if let Some(memory) = self.memory() {
            return memory.identity();
        }
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: the descriptor is open for as long as `self.file` lives, and `stat` is
        // writable memory of the size `fstat` fills.
        let result = unsafe { libc::fstat(self.file().fd.as_raw_fd(), stat.as_mut_ptr()) };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fstat` succeeded, so it filled `stat`.
        let stat = unsafe { stat.assume_init() };
        Ok(((stat.st_dev, stat.st_ino), stat.st_size as u64))
    }

    /// The blob as `partition/hex(name)`, as errors name it.
    pub(crate) fn label(&self) -> &str {
        match &self.inner {
            Inner::File(file) => &file.label,
            #[cfg(feature = "deterministic")]
            Inner::Memory(memory) => memory.label(),
        }
    }

    /// Creates a new, empty file beside this blob's, named `hex(name)` followed by `suffix`
    /// (then `.2`, `.3`, ... if that name is taken: an existing file is never opened, so
    /// nothing already there is overwritten), and returns it as a blob with its label. The
    /// suffix must make the name something other than lowercase hex (start it with `.`):
    /// [`Storage::scan`](crate::Storage::scan) then never lists it, and no `open` of a blob
    /// name reaches it. Its directory entry becomes durable with its first sync.
    pub(crate) fn create_beside(&self, suffix: &str) -> Result<(Blob, String), Error> {
        debug_assert!(suffix.starts_with('.'), "not a blob name: {suffix:?}");
        #[cfg(feature = "deterministic")]
        if let Some(memory) = self.memory() {
            return memory.create_beside(suffix);
        }
        let directory = self
            .file()
            .path
            .parent()
            .expect("a blob is inside its partition")
            .to_path_buf();
        for attempt in 1..=1000u32 {
            let numbered = match attempt {
                1 => suffix.to_owned(),
                n => format!("{suffix}.{n}"),
            };
            let mut path = self.file().path.clone().into_os_string();
            path.push(&numbered);
            let label = format!("{}{numbered}", self.label());
            let created = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path);
            let file = match created {
                Ok(file) => file,
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(Error::BlobFailed(label, error)),
            };
            let blob = Blob {
                inner: Inner::File(Arc::new(File {
                    fd: Arc::new(OwnedFd::from(file)),
                    label: label.clone(),
                    path: path.into(),
                    unsynced_directories: futures::lock::Mutex::new(vec![directory]),
                    nowait_writes: AtomicBool::new(true),
                })),
            };
            return Ok((blob, label));
        }
        Err(self.failed(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "a thousand files named {}{suffix}[.N] exist already",
                self.label()
            ),
        )))
    }

    /// [`Blob::write_at`](crate::Blob::write_at) as a future that owns everything it uses, so
    /// it can be kept (and polled) after the blob handle is gone.
    pub(crate) fn write_owned(
        &self,
        offset: u64,
        bufs: IoBufs,
        options: WriteOptions,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static + use<> {
        let blob = self.clone();
        async move {
            check_range(&blob, offset, bufs.len())?;
            if bufs.is_empty() {
                return Ok(());
            }
            #[cfg(feature = "deterministic")]
            if let Some(memory) = blob.memory() {
                return memory.clone().write(offset, bufs, options).await;
            }
            // A `SYNC` write stays a registration even here: it must be pending after its
            // first poll and complete if dropped then, and durability costs the same wait.
            let written = if !options.sync && direct::on_own_thread() {
                RequestOutput::Write(
                    direct::write_all_at(&blob.file().fd, bufs, offset).map(|()| 0),
                )
            } else {
                let (bufs, offset) = match blob.write_nowait(bufs, offset, options) {
                    Some(rest) => rest,
                    None => return Ok(()),
                };
                Operation::register(Request::Write {
                    fd: blob.file().fd.clone(),
                    offset,
                    bufs,
                    sync: options.sync,
                })
                .await
            };
            match written {
                RequestOutput::Write(Ok(_)) if options.sync => blob
                    .file()
                    .sync_directories()
                    .await
                    .map_err(|error| blob.failed(error)),
                RequestOutput::Write(Ok(_)) => Ok(()),
                RequestOutput::Write(Err(error)) => Err(blob.failed(error)),
                other => unreachable!("a write answered {other:?}"),
            }
        }
    }

    /// [`Blob::resize`](crate::Blob::resize) as a future that owns everything it uses, so it
    /// can be kept (and polled) after the blob handle is gone.
    pub(crate) fn resize_owned(
        &self,
        len: u64,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static + use<> {
        let blob = self.clone();
        async move {
            check_range(&blob, len, 0)?;
            #[cfg(feature = "deterministic")]
            if let Some(memory) = blob.memory() {
                return memory.clone().resize(len).await;
            }
            let request = Request::Truncate {
                fd: blob.file().fd.clone(),
                len,
            };
            match Operation::register(request).await {
                RequestOutput::Truncate(result) => result.map_err(|error| blob.failed(error)),
                other => unreachable!("a truncate answered {other:?}"),
            }
        }
    }

    /// Issues reads of every `(offset, len)` range on the ring of the worker polling the
    /// returned future, and resolves to a handle for their results, in range order. The
    /// handle may be awaited anywhere; see the [module](self) for what happens when the
    /// issuing worker closes first. A range reaching past the blob's end fails the batch with
    /// [`Error::BlobTooShort`].
    // The future resolves to a handle that is itself awaited later, maybe on another thread.
    #[allow(clippy::async_yields_async)]
    pub fn start_read_many(
        &self,
        ranges: &[(u64, usize)],
        options: ReadOptions,
    ) -> impl Future<Output = ReadMany> + Send + use<> {
        let blob = self.clone();
        let ranges = ranges.to_vec();
        async move {
            #[cfg(feature = "deterministic")]
            if let Some(memory) = blob.memory() {
                return memory
                    .clone()
                    .start_read_many(blob.clone(), ranges, options)
                    .await;
            }
            let invalid = check_reads(&blob, &ranges).err();
            let requests = ranges
                .iter()
                .filter(|_| invalid.is_none())
                .filter(|(_, len)| *len > 0)
                .map(|&(offset, len)| Request::ReadAt {
                    fd: blob.file().fd.clone(),
                    offset,
                    buf: IoBufMut::with_capacity(len),
                    want: len,
                    dont_cache: options.dont_cache,
                })
                .collect();
            let registered = register_batch(requests);
            ReadMany {
                #[cfg(feature = "deterministic")]
                memory: None,
                blob,
                invalid,
                slots: registered.as_ref().map(|(slots, _)| slots.clone()),
                ring_closed: registered.map(|(_, closed)| closed),
                results: ranges
                    .into_iter()
                    .map(|(offset, len)| Range {
                        offset,
                        len,
                        data: (len == 0).then(IoBufMut::default),
                    })
                    .collect(),
            }
        }
    }
}

struct Range {
    offset: u64,
    len: usize,
    /// The bytes, once taken from the ring's slot (empty ranges start with theirs).
    data: Option<IoBufMut>,
}

/// The results of [`Blob::start_read_many`]: a future any thread may await.
pub struct ReadMany {
    blob: Blob,
    /// A range that cannot be read (it ends past the largest file offset).
    invalid: Option<Error>,
    /// The reads' slots, one per non-empty range in order; `None` if no worker took them.
    slots: Option<Vec<Arc<Completion>>>,
    ring_closed: Option<RingClosed>,
    results: Vec<Range>,
    /// A simulated batch: read at issue, answered once its turns are over.
    #[cfg(feature = "deterministic")]
    memory: Option<memory::Yields>,
}

/// Shows the blob read and the ranges (offset and length each), not their bytes.
impl std::fmt::Debug for ReadMany {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ranges: Vec<(u64, usize)> = self
            .results
            .iter()
            .map(|range| (range.offset, range.len))
            .collect();
        f.debug_struct("ReadMany")
            .field("blob", &self.blob.label())
            .field("ranges", &ranges)
            .field("invalid", &self.invalid)
            .finish_non_exhaustive()
    }
}

impl ReadMany {
    /// Whether these reads can no longer be observed: no worker took them, or the worker that
    /// issued them closed. Polling then reports [`Error::ReadFailed`], and the same reads
    /// issued again (from a live worker) would succeed.
    pub(crate) fn is_orphaned(&self) -> bool {
        #[cfg(feature = "deterministic")]
        if self.memory.is_some() {
            // Nothing but the run's own thread answers it, and that never closes under it.
            return false;
        }
        match &self.ring_closed {
            Some(closed) => closed.load(Ordering::Acquire),
            None => self.invalid.is_none(),
        }
    }
}

impl Future for ReadMany {
    type Output = Result<Vec<IoBufsMut>, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some(invalid) = this.invalid.take() {
            return Poll::Ready(Err(invalid));
        }
        if this.results.iter().all(|range| range.len == 0) {
            // Nothing to read: nothing a closed worker could have lost.
            return Poll::Ready(Ok(this
                .results
                .iter()
                .map(|_| IoBufsMut::from(IoBufMut::default()))
                .collect()));
        }
        #[cfg(feature = "deterministic")]
        if let Some(yields) = &mut this.memory {
            return memory::poll_read_many(yields, &mut this.results, cx);
        }
        let (Some(slots), Some(closed)) = (&this.slots, &this.ring_closed) else {
            return Poll::Ready(Err(Error::ReadFailed));
        };
        if closed.load(Ordering::Acquire) {
            // The issuing worker is gone: what it read went with it.
            return Poll::Ready(Err(Error::ReadFailed));
        }
        let mut slot_index = 0;
        let mut ready = true;
        for range in this.results.iter_mut() {
            if range.len == 0 {
                continue;
            }
            let slot = &slots[slot_index];
            slot_index += 1;
            if range.data.is_some() {
                continue;
            }
            match slot.poll(cx.waker()) {
                Poll::Pending => ready = false,
                Poll::Ready(RequestOutput::ReadAt(data, Ok(_))) => {
                    if data.len() < range.len {
                        return Poll::Ready(Err(Error::BlobTooShort {
                            blob: this.blob.label().to_owned(),
                            offset: range.offset,
                            len: range.len,
                            end: range.offset + data.len() as u64,
                        }));
                    }
                    range.data = Some(data);
                }
                Poll::Ready(RequestOutput::ReadAt(_, Err(error))) => {
                    // A read is cancelled only by its worker closing, which publishes the
                    // cancellation just before it marks the ring drained.
                    let cancelled = error.raw_os_error() == Some(libc::ECANCELED);
                    if cancelled || closed.load(Ordering::Acquire) {
                        return Poll::Ready(Err(Error::ReadFailed));
                    }
                    return Poll::Ready(Err(this.blob.failed(error)));
                }
                Poll::Ready(other) => unreachable!("a read answered {other:?}"),
            }
        }
        if !ready {
            return Poll::Pending;
        }
        Poll::Ready(Ok(this
            .results
            .iter_mut()
            .map(|range| IoBufsMut::from(range.data.take().expect("every range is read")))
            .collect()))
    }
}

impl crate::Blob for Blob {
    fn read_at(
        &self,
        offset: u64,
        len: usize,
        options: ReadOptions,
    ) -> impl Future<Output = Result<IoBufs, Error>> + Send {
        let blob = self.clone();
        async move {
            check_reads(&blob, &[(offset, len)])?;
            if len == 0 {
                return Ok(IoBufs::default());
            }
            #[cfg(feature = "deterministic")]
            if let Some(memory) = blob.memory() {
                return memory.clone().read(offset, len).await;
            }
            let mut buf = IoBufMut::with_capacity(len);
            if !options.dont_cache {
                match direct::read_cached(&blob.file().fd, &mut buf, offset, len) {
                    direct::Cached::Complete => return Ok(buf.freeze().into()),
                    direct::Cached::Ended => {
                        return Err(Error::BlobTooShort {
                            blob: blob.label().to_owned(),
                            offset,
                            len,
                            end: offset + buf.len() as u64,
                        });
                    }
                    direct::Cached::Partial => {}
                }
            }
            let read = Operation::register(Request::ReadAt {
                fd: blob.file().fd.clone(),
                offset,
                buf,
                want: len,
                dont_cache: options.dont_cache,
            })
            .await;
            match read {
                RequestOutput::ReadAt(data, Ok(_)) if data.len() == len => Ok(data.freeze().into()),
                RequestOutput::ReadAt(data, Ok(_)) => Err(Error::BlobTooShort {
                    blob: blob.label().to_owned(),
                    offset,
                    len,
                    end: offset + data.len() as u64,
                }),
                RequestOutput::ReadAt(_, Err(error)) => Err(blob.failed(error)),
                other => unreachable!("a read answered {other:?}"),
            }
        }
    }

    fn write_at(
        &self,
        offset: u64,
        bufs: impl Into<IoBufs> + Send,
        options: WriteOptions,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.write_owned(offset, bufs.into(), options)
    }

    fn resize(&self, len: u64) -> impl Future<Output = Result<(), Error>> + Send {
        self.resize_owned(len)
    }

    fn sync(&self) -> impl Future<Output = Result<(), Error>> + Send {
        let blob = self.clone();
        async move {
            #[cfg(feature = "deterministic")]
            if let Some(memory) = blob.memory() {
                return memory.clone().sync().await;
            }
            sync_fd(blob.file().fd.clone())
                .await
                .map_err(|error| blob.failed(error))?;
            blob.file()
                .sync_directories()
                .await
                .map_err(|error| blob.failed(error))
        }
    }
}

/// Starts the blob operations this task registered (a write's first poll registers it) now,
/// rather than when the worker next services its ring: for a task that goes on computing
/// while its write runs.
pub(crate) fn start_registered() {
    submit_now();
}

/// Makes `fd`'s data durable: on the ring, or straight from a dedicated or blocking worker's
/// own thread (see the `direct` module).
async fn sync_fd(fd: Arc<OwnedFd>) -> io::Result<()> {
    if direct::on_own_thread() {
        return direct::datasync(&fd);
    }
    match Operation::register(Request::Sync { fd }).await {
        RequestOutput::Sync(result) => result,
        other => unreachable!("a sync answered {other:?}"),
    }
}

fn partition_path(context: &Context, partition: &str) -> Result<PathBuf, Error> {
    check_partition(partition)?;
    Ok(context.runtime().config.storage_directory().join(partition))
}

/// Opens (creating if needed) the blob file, without a ring round trip: `open` resolves in its
/// first poll, so writes issued right after it are registered in that same poll. Returns the
/// directories whose entries must become durable with the blob's first sync.
fn open(context: &Context, partition: &str, name: &[u8]) -> Result<(Blob, u64), Error> {
    let directory = partition_path(context, partition)?;
    let label = format!("{partition}/{}", hex(name));
    let failed = |error: io::Error| Error::BlobFailed(label.clone(), error);
    if name.is_empty() {
        return Err(failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a blob name must not be empty",
        )));
    }
    let mut unsynced = Vec::new();
    if !directory.exists() {
        std::fs::create_dir_all(&directory).map_err(failed)?;
        if let Some(parent) = directory.parent() {
            unsynced.push(parent.to_path_buf());
        }
    }
    let path = directory.join(hex(name));
    let existed = path.exists();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path);
    let file = file.map_err(failed)?;
    let len = file.metadata().map_err(failed)?.len();
    // A new name (or a new partition) is durable only once its directory is synced.
    if !existed || !unsynced.is_empty() {
        unsynced.push(directory);
    }
    Ok((
        Blob {
            inner: Inner::File(Arc::new(File {
                fd: Arc::new(OwnedFd::from(file)),
                label,
                path,
                unsynced_directories: futures::lock::Mutex::new(unsynced),
                nowait_writes: AtomicBool::new(true),
            })),
        },
        len,
    ))
}

/// Removes the blob file (or the partition's directory) at the call, and resolves once the
/// directory that held it is synced.
fn remove_files(
    context: &Context,
    partition: &str,
    name: Option<&[u8]>,
) -> impl Future<Output = Result<(), Error>> + Send + use<> {
    // The directory whose entry the removal changed, and the label its errors carry.
    let removed = partition_path(context, partition).and_then(|directory| match name {
        Some(name) => {
            let label = format!("{partition}/{}", hex(name));
            match std::fs::remove_file(directory.join(hex(name))) {
                Ok(()) => Ok((directory, label)),
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    Err(Error::BlobMissing(label))
                }
                Err(error) => Err(Error::BlobFailed(label, error)),
            }
        }
        None => match std::fs::remove_dir_all(&directory) {
            Ok(()) => {
                let parent = directory
                    .parent()
                    .expect("a partition is below the storage directory")
                    .to_path_buf();
                Ok((parent, partition.to_owned()))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Err(Error::PartitionMissing(partition.to_owned()))
            }
            Err(error) => Err(Error::BlobFailed(partition.to_owned(), error)),
        },
    });
    async move {
        let (directory, label) = removed?;
        // Durable before it is reported: a crash after `remove` returns cannot bring the
        // blob (or partition) back, which is what a caller that retires data relies on.
        let synced = match std::fs::File::open(&directory) {
            Ok(file) => sync_fd(Arc::new(OwnedFd::from(file))).await,
            Err(error) => Err(error),
        };
        synced.map_err(|error| Error::BlobFailed(label, error))
    }
}

impl Storage for Context {
    type Blob = Blob;

    fn open(
        &self,
        partition: &str,
        name: &[u8],
    ) -> impl Future<Output = Result<(Blob, u64), Error>> + Send {
        #[cfg(feature = "deterministic")]
        if let Some(simulation) = &self.runtime().simulation {
            return std::future::ready(memory::open(simulation, partition, name));
        }
        std::future::ready(open(self, partition, name))
    }

    fn remove(
        &self,
        partition: &str,
        name: Option<&[u8]>,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        #[cfg(feature = "deterministic")]
        if let Some(simulation) = &self.runtime().simulation {
            return futures::future::Either::Left(memory::remove(simulation, partition, name));
        }
        #[cfg(feature = "deterministic")]
        return futures::future::Either::Right(remove_files(self, partition, name));
        #[cfg(not(feature = "deterministic"))]
        remove_files(self, partition, name)
    }

    fn scan(&self, partition: &str) -> impl Future<Output = Result<Vec<Vec<u8>>, Error>> + Send {
        #[cfg(feature = "deterministic")]
        if let Some(simulation) = &self.runtime().simulation {
            return std::future::ready(memory::scan(simulation, partition));
        }
        let result = partition_path(self, partition).and_then(|directory| {
            let entries = match std::fs::read_dir(&directory) {
                Ok(entries) => entries,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    return Err(Error::PartitionMissing(partition.to_owned()));
                }
                Err(error) => return Err(Error::BlobFailed(partition.to_owned(), error)),
            };
            let mut names = Vec::new();
            for entry in entries {
                let entry =
                    entry.map_err(|error| Error::BlobFailed(partition.to_owned(), error))?;
                if let Some(name) = entry.file_name().to_str().and_then(unhex) {
                    names.push(name);
                }
            }
            names.sort();
            Ok(names)
        });
        std::future::ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the simulation a blob is its file's `Arc` alone: the enum that can hold a
    /// simulated blob costs the native path nothing.
    #[cfg(not(feature = "deterministic"))]
    #[test]
    fn a_native_blob_is_one_pointer() {
        assert_eq!(size_of::<Blob>(), size_of::<usize>());
        assert_eq!(size_of::<Option<Blob>>(), size_of::<usize>());
    }

    #[test]
    fn names_are_lowercase_hex_both_ways() {
        assert_eq!(hex(b"retained"), "72657461696e6564");
        assert_eq!(hex(&[0, 255, 16]), "00ff10");
        assert_eq!(unhex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("FF"), None, "only the lowercase form is a blob name");
    }

    #[test]
    fn partition_names_allow_only_letters_digits_underscore_and_dash() {
        for good in ["a", "Z_9-x", "retained"] {
            assert_eq!(check_partition(good), Ok(()));
        }
        for bad in ["", "..", "a/b", "/", "a b", "é", ".hold"] {
            assert_eq!(
                check_partition(bad),
                Err(Error::PartitionNameInvalid),
                "{bad:?}"
            );
        }
    }
}
