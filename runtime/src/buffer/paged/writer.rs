//! The append side of a paged blob: [`Writer`] lays bytes out in pages and writes them when
//! its buffer fills, and [`Sealed`] is the finished blob, read through the cache or replayed.
//!
//! Invariants:
//! - Pages `0..stored` are full and handed to the blob: written, or in the write in flight.
//!   They are never written again (but by `truncate`). The buffer holds the pages from `stored`
//!   on, in their physical layout: `buffered` logical bytes, of which all but the last
//!   `buffered % page_size` fill whole pages.
//! - The buffer is written only when it is full of whole pages (an append) or on `sync`,
//!   `seal` and `truncate`, which also write the partial last page. One write is in flight
//!   at a time, and writes are issued in blob order, so a killed process leaves a prefix of
//!   what it wrote.
//! - Every write is kept in `in_flight` from its registration until it is known finished.
//!   An append that fills the buffer returns while its write runs, filling the second buffer
//!   meanwhile; the next write, `sync`, `seal` or `truncate` first waits for it and reports
//!   its failure. Pages `in_flight.first..stored` are read from the in-flight buffer, never
//!   from the blob, whose copy may be half written.
//! - A writer dropped with a write in flight (its own drop, or a dropped method future) hands
//!   the write to `ABANDONED`, and so does a dropped recovery or `truncate` with a resize or
//!   trailer write pending (`Tracked`). `Writer::new` on the same file waits for them before
//!   measuring and recovering the blob: a change landing after recovery would otherwise
//!   overwrite or cut what the new writer wrote.
//! - `truncate` never leaves a short page before the blob's last: it cuts the pages past the
//!   new last one first, then rewrites that page's trailer in two synced steps (the new slot
//!   beside the longest valid one, then the longest cleared), so a crash at any point leaves
//!   at least the kept bytes valid.
//! - `partial` is the trailer slot last written for page `stored` (a partial page written by a
//!   `sync`) and which of the two it occupies. Rewriting that page keeps the slot where it is
//!   and puts the new one in the other, so a torn rewrite falls back to the synced state.
//!   Recovery syncs the blob before anything is rewritten, so the slot it keeps is durable.
//! - Every method that writes takes the writer by value: if it fails, or its future is
//!   dropped, the writer is gone with it, and no half-updated writer is ever used again.
//!   A fresh `Writer::new` on the blob recovers the durable state.

use super::checksum::{Slot, Trailer};
use super::recovery::{self, CutReason, Recovery, SetAside, Tail, TornTail};
use super::{CacheRef, Paged, Replay};
use crate::buffer::IoBuf;
use crate::storage::{Blob, ReadOptions, WriteOptions};
use crate::sync::Mutex;
use crate::{Blob as _, Error};
use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, Waker};

/// Appends bytes to a paged blob. See the [module](super) for the layout and what is durable
/// when.
///
/// Holds two buffers of the size given to [`Writer::new`]: one fills while the other is
/// written.
pub struct Writer {
    paged: Paged,
    /// Full pages handed to the blob.
    stored: u64,
    /// Whole physical pages; pages `stored..` in their layout.
    buffer: BytesMut,
    /// Logical bytes in the buffer.
    buffered: usize,
    /// The slot last written for page `stored` while it was partial, and its index.
    partial: Option<(usize, Slot)>,
    /// The last write, until it is known finished.
    in_flight: Option<InFlight>,
    /// A buffer to fill while another is in flight, kept from a write that finished.
    spare: Option<BytesMut>,
}

/// A buffer's write, registered on the ring.
struct InFlight {
    /// Its first page: it writes the full pages `first..stored` (and maybe the partial one).
    first: u64,
    /// The physical pages it writes, which reads of those pages are served from.
    bytes: Bytes,
    write: Exclusive<PendingWrite>,
}

type PendingWrite = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// A value reached only through `&mut` or by value, which makes it `Sync` whatever it is:
/// `Writer::read_at` takes `&self`, and its future must be `Send`, so `Writer` must be `Sync`,
/// though the boxed write in flight is not.
struct Exclusive<T>(T);

// SAFETY: nothing reaches the value through `&Exclusive` (there is no `&self` method and the
// field is private to this module, used only via `&mut` and by value), so sharing references
// across threads shares no access to it.
unsafe impl<T: Send> Sync for Exclusive<T> {}

/// Writes of writers dropped while one was in flight, with the file (device and inode) each
/// writes to. Finished ones are pruned whenever one is added.
static ABANDONED: Mutex<Vec<(FileId, Exclusive<PendingWrite>)>> = Mutex::new(Vec::new());

/// A file's identity: device and inode.
type FileId = (u64, u64);

fn abandon(file: FileId, mut write: PendingWrite) {
    let mut noop = TaskContext::from_waker(Waker::noop());
    if write.as_mut().poll(&mut noop).is_ready() {
        return;
    }
    let mut abandoned = ABANDONED.lock();
    prune(&mut abandoned);
    abandoned.push((file, Exclusive(write)));
}

/// Drops the abandoned writes that have finished.
fn prune(abandoned: &mut Vec<(FileId, Exclusive<PendingWrite>)>) {
    let mut noop = TaskContext::from_waker(Waker::noop());
    abandoned.retain_mut(|(_, write)| write.0.as_mut().poll(&mut noop).is_pending());
}

/// Waits for every abandoned write to `file`. Their results are their writers' business.
async fn wait_for_abandoned(file: FileId) {
    loop {
        let next = {
            let mut abandoned = ABANDONED.lock();
            prune(&mut abandoned);
            let position = abandoned.iter().position(|(id, _)| *id == file);
            position.map(|position| abandoned.swap_remove(position).1)
        };
        match next {
            // Tracked: if this wait is dropped, the write goes back on the list.
            Some(write) => {
                let _ = Tracked::new(file, write.0).await;
            }
            None => return,
        }
    }
}

/// A change to the file (a write or a resize) that is handed to `ABANDONED` if dropped before
/// it finishes, so the next `Writer::new` on the file waits for it rather than racing it.
struct Tracked {
    file: FileId,
    change: Option<PendingWrite>,
}

impl Tracked {
    fn new(file: FileId, change: PendingWrite) -> Self {
        Tracked {
            file,
            change: Some(change),
        }
    }
}

impl Future for Tracked {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let change = self.change.as_mut().expect("polled after it finished");
        let result = std::task::ready!(change.as_mut().poll(cx));
        self.change = None;
        Poll::Ready(result)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(change) = self.change.take() {
            abandon(self.file, change);
        }
    }
}

/// Resizes the blob, as a tracked change.
fn resize(paged: &Paged, len: u64) -> Tracked {
    Tracked::new(paged.file, Box::pin(paged.blob.resize_owned(len)))
}

/// Writes `bytes` at physical `offset`, as a tracked change.
fn write(paged: &Paged, offset: u64, bytes: Bytes) -> Tracked {
    let write = paged
        .blob
        .write_owned(offset, IoBuf::from(bytes).into(), WriteOptions::default());
    Tracked::new(paged.file, Box::pin(write))
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(in_flight) = self.in_flight.take() {
            abandon(self.paged.file, in_flight.write.0);
        }
    }
}

impl Writer {
    /// A writer appending to `blob`, with a buffer of `buffer` bytes of blob (whole physical
    /// pages: `page_size +` [`CHECKSUM_SIZE`](super::CHECKSUM_SIZE) each, the page size being
    /// the cache's), and what recovering the blob found and did. `size` is the length
    /// [`Storage::open`](crate::Storage::open) returned; the writer measures the length again
    /// once earlier writers' abandoned changes are done (they may have grown or cut the blob
    /// since), and uses that.
    ///
    /// An existing blob is recovered first (see [`Recovery`] and the
    /// [recovery rules](super#recovery)): a tail a crash may have torn is copied to a file
    /// beside the blob, then cut, and the [`Recovery`] says what was cut and where it is
    /// kept; damage before the last valid page is refused when read.
    /// Waits first for writes of earlier writers of this blob that were dropped while a write
    /// was in flight. Fails if `buffer` holds no page, or if reading, copying, truncating or
    /// syncing the blob fails. [`Writer::open`] with [`TornTail::Refuse`] refuses a torn tail
    /// too.
    pub async fn new(
        blob: Blob,
        size: u64,
        buffer: usize,
        cache: CacheRef,
    ) -> Result<(Writer, Recovery), Error> {
        Self::open(blob, size, buffer, cache, TornTail::SetAside).await
    }

    /// [`Writer::new`], with what to do with a tail that recovery would cut: set it aside
    /// ([`TornTail::SetAside`], what `new` does) or refuse the blob with [`Error::BlobTorn`],
    /// changing nothing ([`TornTail::Refuse`]).
    pub async fn open(
        blob: Blob,
        size: u64,
        buffer: usize,
        cache: CacheRef,
        torn: TornTail,
    ) -> Result<(Writer, Recovery), Error> {
        let paged = Paged::new(blob, cache)?;
        let layout = paged.layout;
        let pages = layout.pages_in(&paged.blob, buffer, "writer")?;
        wait_for_abandoned(paged.file).await;
        // Measured now rather than taken from `size`: an earlier writer's abandoned write or
        // resize may have changed the length since `open`.
        let _ = size;
        let (_, size) = paged
            .blob
            .identity()
            .map_err(|error| paged.blob.failed(error))?;
        let mut writer = Writer {
            buffer: BytesMut::zeroed(pages * layout.physical),
            paged,
            stored: 0,
            buffered: 0,
            partial: None,
            in_flight: None,
            spare: None,
        };
        let recovery = writer.recover(size, torn).await?;
        Ok((writer, recovery))
    }

    /// Finds the last page that validates, sets aside and cuts the tail after it (see
    /// [`recovery`](super::recovery) for what a crash can leave), loads the last page if
    /// partial, and makes that state durable: the slot kept for the next rewrite must be on
    /// the disk, not only in the page cache.
    async fn recover(&mut self, size: u64, torn: TornTail) -> Result<Recovery, Error> {
        let layout = self.paged.layout;
        let tail = Tail::find(&self.paged.blob, layout, size).await?;
        if torn == TornTail::Refuse
            && let Some(refusal) = tail.refusal(&self.paged.blob, size)
        {
            return Err(refusal);
        }
        let set_aside = match tail.cuts.first() {
            Some(first) if first.offset < size => {
                Some(recovery::set_aside(&self.paged, first.offset, size).await?)
            }
            _ => None,
        };
        let pages = tail.pages;
        if layout.offset(pages) != size {
            resize(&self.paged, layout.offset(pages)).await?;
        }
        let failed_slot = tail
            .cuts
            .iter()
            .any(|cut| matches!(cut.reason, CutReason::FailedSlot { .. }));
        if failed_slot && let Some((_, best)) = &tail.last {
            let (at, trailer) = recovery::cleared_trailer(layout, pages - 1, *best);
            write(&self.paged, at, trailer).await?;
        }
        match tail.last {
            Some((_, (_, slot))) if usize::from(slot.len) == layout.page_size => {
                self.stored = pages;
            }
            Some((bytes, (index, slot))) => {
                let len = usize::from(slot.len);
                self.stored = pages - 1;
                self.buffer[..len].copy_from_slice(&bytes[..len]);
                self.buffered = len;
                self.partial = Some((index, slot));
            }
            None => self.stored = 0,
        }
        if size > 0 {
            self.paged.blob.sync().await?;
        }
        Ok(Recovery {
            pages_read: tail.pages_read,
            kept: self.size(),
            cuts: tail.cuts,
            set_aside,
        })
    }

    /// The logical length: every byte appended so far, written or still buffered.
    pub fn size(&self) -> u64 {
        self.stored * self.paged.layout.page_size as u64 + self.buffered as u64
    }

    /// The blob this writer appends to.
    pub fn blob(&self) -> &Blob {
        &self.paged.blob
    }

    /// Appends `data` and returns the writer with the logical offset where `data` starts.
    /// Writes the buffer each time it fills, and returns while that write runs; the bytes are
    /// durable only after the next [`sync`](Self::sync) (or the durability future of
    /// [`seal`](Self::seal)). A failure may be that of an earlier append's write.
    pub async fn append(mut self, data: &[u8]) -> Result<(Writer, u64), Error> {
        let offset = self.size();
        self.check_room(data.len())?;
        let mut data = data;
        while !data.is_empty() {
            let copied = self.copy_in(data);
            data = &data[copied..];
            if self.buffered == self.capacity() {
                self.write(false, true).await?;
            }
        }
        Ok((self, offset))
    }

    /// Makes every byte appended so far durable: writes the buffer, including the partial
    /// last page, and syncs the blob.
    pub async fn sync(mut self) -> Result<Writer, Error> {
        self.write(true, false).await?;
        self.paged.blob.sync().await?;
        Ok(self)
    }

    /// Writes every byte appended so far and returns the sealed blob, with a future that makes
    /// it durable. Until that future resolves, a crash may lose the bytes appended since the
    /// last [`sync`](Self::sync).
    pub async fn seal(
        mut self,
    ) -> Result<
        (
            Sealed,
            impl Future<Output = Result<(), Error>> + Send + 'static,
        ),
        Error,
    > {
        self.write(true, false).await?;
        let blob = self.paged.blob.clone();
        let sealed = Sealed {
            paged: self.paged.clone(),
            size: self.size(),
        };
        Ok((sealed, async move { blob.sync().await }))
    }

    /// Cuts the paged blob to its first `size` bytes, durably, and appends continue there. For
    /// recovery after a lost machine: writes after the last sync may reach the disk in any
    /// order, so pages may be missing before others that are present; a [`Replay`] then stops
    /// at the first missing one with [`Error::BlobCorrupt`], having handed out every byte
    /// before it, and `truncate` to the bytes replayed makes the blob whole again. Fails with
    /// [`Error::BlobTooShort`] if `size` is past the end, and with [`Error::BlobCorrupt`] if
    /// the page holding the new last byte does not validate that far. When it returns, every
    /// kept byte is durable, as after [`sync`](Self::sync); a crash before then leaves at
    /// least the kept bytes that were durable, maybe with some of the cut ones.
    pub async fn truncate(mut self, size: u64) -> Result<Writer, Error> {
        check_within(&self.paged, size, 0, self.size())?;
        self.finish_in_flight().await?;
        let layout = self.paged.layout;
        let page_size = layout.page_size as u64;
        let synced_len = self.partial.map_or(0, |(_, slot)| u64::from(slot.len));
        if size >= self.stored * page_size + synced_len {
            // Nothing past the cut is on the blob: drop the buffered bytes past it, and write
            // the rest as `sync` does.
            self.buffered = (size - self.stored * page_size) as usize;
            return self.sync().await;
        }
        let (full, rest) = (size / page_size, (size % page_size) as usize);
        if full < self.stored {
            // Cached pages of this blob may hold cut bytes; later reads use a fresh identity.
            self.paged.renew_id();
        }
        // Pages past the new last one go first: were the new last page's trailer cut before
        // them, a crash could leave a short page in the middle of the blob.
        let pages = full + u64::from(rest > 0);
        if pages < self.stored + u64::from(self.partial.is_some()) {
            resize(&self.paged, layout.offset(pages)).await?;
        }
        self.partial = None;
        if rest > 0 {
            let bytes = self
                .paged
                .blob
                .read_at(layout.offset(full), layout.physical, ReadOptions::default())
                .await?
                .coalesce();
            self.partial = Some(self.cut_trailer(full, &bytes, rest).await?);
            self.buffer[..rest].copy_from_slice(&bytes[..rest]);
        }
        self.stored = full;
        self.buffered = rest;
        if rest == 0 && full > 0 {
            // Cut at a page boundary: closed by an end page, as a sync closes its bytes. The
            // cut is made durable first: the end page overwrites the start of the page that
            // was there, which a crash must not leave in the blob half overwritten.
            self.paged.blob.sync().await?;
            self.write(true, false).await?;
        }
        self.paged.blob.sync().await?;
        Ok(self)
    }

    /// [`truncate`](Self::truncate), first copying the bytes it cuts, as the blob holds them
    /// (trailers included) from the first cut byte to its end, to a file beside the blob, made
    /// durable before the blob changes: for a layer above that cuts what it cannot read (a
    /// record a crash cut short) and keeps it for a person to look at. Writes and syncs what
    /// is buffered first. Returns where the bytes are kept, or `None` if nothing was cut.
    pub async fn truncate_aside(self, size: u64) -> Result<(Writer, Option<SetAside>), Error> {
        check_within(&self.paged, size, 0, self.size())?;
        if size == self.size() {
            return Ok((self, None));
        }
        let writer = self.sync().await?;
        let layout = writer.paged.layout;
        let page_size = layout.page_size as u64;
        let from = layout.offset(size / page_size) + size % page_size;
        let (_, end) = writer
            .paged
            .blob
            .identity()
            .map_err(|error| writer.paged.blob.failed(error))?;
        let set_aside = recovery::set_aside(&writer.paged, from, end).await?;
        Ok((writer.truncate(size).await?, Some(set_aside)))
    }

    /// Makes the trailer of the stored page `page` (its physical bytes `bytes`) validate its
    /// first `len` bytes and nothing longer, in two synced steps so that a crash at any point
    /// leaves a trailer that validates at least `len` bytes: first the new slot goes beside
    /// the longest valid one, then that one is cleared. Returns the new slot and its index.
    async fn cut_trailer(
        &self,
        page: u64,
        bytes: &[u8],
        len: usize,
    ) -> Result<(usize, Slot), Error> {
        let layout = self.paged.layout;
        let (data, trailer) = bytes.split_at(layout.page_size);
        let (longest, old) = match Trailer::decode(trailer).best(page, data) {
            Some((index, slot)) if usize::from(slot.len) >= len => (index, slot),
            _ => return Err(layout.corrupt(&self.paged.blob, page)),
        };
        if usize::from(old.len) == len {
            return Ok((longest, old));
        }
        let slot = Slot::compute(page, &data[..len]);
        let at = layout.offset(page) + layout.page_size as u64;
        for step in [Some(old), None] {
            let mut trailer = Trailer::default();
            trailer.slots[1 - longest] = Some(slot);
            trailer.slots[longest] = step;
            let mut encoded = BytesMut::zeroed(usize::from(super::CHECKSUM_SIZE));
            trailer.encode(&mut encoded);
            write(&self.paged, at, encoded.freeze()).await?;
            self.paged.blob.sync().await?;
        }
        Ok((1 - longest, slot))
    }

    /// Reads `len` bytes at logical `offset`: buffered bytes from the buffer, written ones
    /// through the cache. Fails with [`Error::BlobTooShort`] past the end.
    pub async fn read_at(&self, offset: u64, len: usize) -> Result<IoBuf, Error> {
        check_within(&self.paged, offset, len, self.size())?;
        let mut out = vec![0; len];
        let layout = self.paged.layout;
        let page_size = layout.page_size as u64;
        let written = self
            .in_flight
            .as_ref()
            .map_or(self.stored, |write| write.first);
        let written_len = (written * page_size).saturating_sub(offset).min(len as u64) as usize;
        if written_len > 0 {
            self.paged
                .read_stored(offset, &mut out[..written_len], written, layout.page_size)
                .await?;
        }
        let end = offset + len as u64;
        let mut position = offset + written_len as u64;
        while position < end {
            let page = position / page_size;
            let within = (position % page_size) as usize;
            let count = (layout.page_size - within).min((end - position) as usize);
            let (source, index) = match &self.in_flight {
                Some(write) if page < self.stored => (&write.bytes[..], page - write.first),
                _ => (&self.buffer[..], page - self.stored),
            };
            let at = index as usize * layout.physical + within;
            let into = (position - offset) as usize;
            out[into..into + count].copy_from_slice(&source[at..at + count]);
            position += count as u64;
        }
        Ok(IoBuf::from(out))
    }

    /// Refuses an append whose pages would end past the largest file offset (`i64::MAX`).
    fn check_room(&self, len: usize) -> Result<(), Error> {
        let layout = self.paged.layout;
        let end = self.size().checked_add(len as u64).and_then(|end| {
            end.div_ceil(layout.page_size as u64)
                .checked_mul(layout.physical as u64)
        });
        if end.is_some_and(|end| end <= i64::MAX as u64) {
            return Ok(());
        }
        Err(self.paged.blob.failed(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "appending {len} bytes to {} would end past the largest file offset ({})",
                self.size(),
                i64::MAX
            ),
        )))
    }

    /// Logical bytes the buffer holds when full.
    fn capacity(&self) -> usize {
        self.buffer.len() / self.paged.layout.physical * self.paged.layout.page_size
    }

    /// Copies as much of `data` as fits into the buffer's pages; returns how much.
    fn copy_in(&mut self, data: &[u8]) -> usize {
        let layout = self.paged.layout;
        let mut copied = 0;
        while copied < data.len() && self.buffered < self.capacity() {
            let within = self.buffered % layout.page_size;
            let at = self.buffered / layout.page_size * layout.physical + within;
            let count = (layout.page_size - within).min(data.len() - copied);
            self.buffer[at..at + count].copy_from_slice(&data[copied..copied + count]);
            copied += count;
            self.buffered += count;
        }
        copied
    }

    /// Waits for the write in flight, if any, and keeps its buffer as the spare. The write
    /// stays in `in_flight` while it is awaited, so a dropped wait abandons it properly.
    async fn finish_in_flight(&mut self) -> Result<(), Error> {
        let Some(in_flight) = &mut self.in_flight else {
            return Ok(());
        };
        let result = (&mut in_flight.write.0).await;
        self.retire_in_flight();
        result
    }

    /// Drops the finished write in flight and keeps its buffer as the spare.
    fn retire_in_flight(&mut self) {
        let in_flight = self.in_flight.take().expect("a write in flight");
        drop(in_flight.write);
        if let Ok(buffer) = in_flight.bytes.try_into_mut() {
            self.spare = Some(buffer);
        }
    }

    /// Writes the buffer's full pages, and with `partial` its partial last page too (unless
    /// that page was already written at this length), in one write, after the write in
    /// flight. With `pipelined`, returns once the write is registered and started, leaving it
    /// in flight; otherwise returns once it is done.
    async fn write(&mut self, partial: bool, pipelined: bool) -> Result<(), Error> {
        self.finish_in_flight().await?;
        let layout = self.paged.layout;
        let full = self.buffered / layout.page_size;
        let rest = self.buffered % layout.page_size;
        let unchanged = full == 0
            && self
                .partial
                .is_some_and(|(_, slot)| usize::from(slot.len) == rest);
        // Bytes that end at a page boundary are closed by an end page holding none, so a
        // blob whose last page is full is known to have lost its end (see `recovery`).
        let at_boundary = rest == 0 && self.stored + full as u64 > 0;
        let write_partial = partial && (rest > 0 || at_boundary) && !unchanged;
        if full == 0 && !write_partial {
            return Ok(());
        }
        for index in 0..full {
            let keep = if index == 0 { self.partial } else { None };
            self.seal_page(index, layout.page_size, keep);
        }
        let mut partial_slot = None;
        if write_partial {
            let start = full * layout.physical;
            self.buffer[start + rest..start + layout.page_size].fill(0);
            let keep = if full == 0 { self.partial } else { None };
            partial_slot = Some(self.seal_page(full, rest, keep));
        }
        let len = (full + usize::from(write_partial)) * layout.physical;
        let frozen = std::mem::take(&mut self.buffer).freeze();
        let write = self.paged.blob.write_owned(
            layout.offset(self.stored),
            IoBuf::from(frozen.slice(..len)).into(),
            WriteOptions::default(),
        );
        self.in_flight = Some(InFlight {
            first: self.stored,
            bytes: frozen.clone(),
            write: Exclusive(Box::pin(write)),
        });
        // The partial page (if any) moves to the start of the next buffer.
        let from = if full > 0 { full * layout.physical } else { 0 };
        self.next_buffer(frozen, from, rest);
        if full > 0 {
            self.stored += full as u64;
            self.buffered = rest;
            self.partial = None;
        }
        if let Some(slot) = partial_slot {
            self.partial = Some(slot);
        }
        if !pipelined {
            return self.finish_in_flight().await;
        }
        // The first poll registers the write; started now, it runs while this task fills the
        // next buffer.
        let in_flight = self.in_flight.as_mut().expect("set above");
        let first_poll =
            std::future::poll_fn(|cx| Poll::Ready(in_flight.write.0.as_mut().poll(cx))).await;
        match first_poll {
            Poll::Ready(result) => {
                self.retire_in_flight();
                result
            }
            Poll::Pending => {
                crate::storage::start_registered();
                Ok(())
            }
        }
    }

    /// Makes the buffer to fill next, starting with the `keep` bytes at `from` of `frozen`:
    /// `frozen` itself if nothing else holds it (its write is over), else the spare, else a
    /// new one.
    fn next_buffer(&mut self, frozen: Bytes, from: usize, keep: usize) {
        let frozen = match frozen.try_into_mut() {
            Ok(mut buffer) => {
                buffer.copy_within(from..from + keep, 0);
                self.buffer = buffer;
                return;
            }
            Err(frozen) => frozen,
        };
        let mut buffer = self
            .spare
            .take()
            .unwrap_or_else(|| BytesMut::zeroed(frozen.len()));
        buffer[..keep].copy_from_slice(&frozen[from..from + keep]);
        self.buffer = buffer;
    }

    /// Fills the trailer of buffer page `index` for its first `len` bytes, keeping `keep` in
    /// its slot; returns the new slot and its index.
    fn seal_page(
        &mut self,
        index: usize,
        len: usize,
        keep: Option<(usize, Slot)>,
    ) -> (usize, Slot) {
        let layout = self.paged.layout;
        let start = index * layout.physical;
        let page = self.stored + index as u64;
        let slot = Slot::compute(page, &self.buffer[start..start + len]);
        let mut trailer = Trailer::default();
        let position = match keep {
            Some((kept, old)) => {
                trailer.slots[kept] = Some(old);
                1 - kept
            }
            None => 0,
        };
        trailer.slots[position] = Some(slot);
        trailer.encode(&mut self.buffer[start + layout.page_size..start + layout.physical]);
        (position, slot)
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("blob", &self.paged.blob.label())
            .field("size", &self.size())
            .finish()
    }
}

/// A paged blob whose writing is finished: read it through the cache, or replay it.
#[derive(Clone)]
pub struct Sealed {
    paged: Paged,
    size: u64,
}

impl Sealed {
    /// The logical length.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The blob.
    pub fn blob(&self) -> &Blob {
        &self.paged.blob
    }

    /// Reads `len` bytes at logical `offset` through the cache. Fails with
    /// [`Error::BlobTooShort`] past the end and [`Error::BlobCorrupt`] on a damaged page.
    pub async fn read_at(&self, offset: u64, len: usize) -> Result<IoBuf, Error> {
        check_within(&self.paged, offset, len, self.size)?;
        let mut out = vec![0; len];
        if len > 0 {
            let (pages, last_len) = self.pages();
            self.paged
                .read_stored(offset, &mut out, pages, last_len)
                .await?;
        }
        Ok(IoBuf::from(out))
    }

    /// A reader of every byte from the start, keeping up to `buffer` bytes of blob (whole
    /// physical pages) read ahead, in four batches. `options` applies to its reads
    /// ([`ReadOptions::DONT_CACHE`] keeps a long replay out of the page cache). Fails if
    /// `buffer` holds no page.
    pub fn replay(&self, buffer: NonZeroUsize, options: ReadOptions) -> Result<Replay, Error> {
        let layout = self.paged.layout;
        let pages = layout.pages_in(&self.paged.blob, buffer.get(), "replay")?;
        let (stored, last_len) = self.pages();
        Ok(Replay::new(
            self.paged.blob.clone(),
            layout,
            stored,
            last_len,
            pages,
            options,
        ))
    }

    /// How many pages the blob holds, and how many bytes its last one holds.
    fn pages(&self) -> (u64, usize) {
        let page_size = self.paged.layout.page_size as u64;
        let pages = self.size.div_ceil(page_size);
        let last_len = (self.size - pages.saturating_sub(1) * page_size) as usize;
        (pages, last_len)
    }
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealed")
            .field("blob", &self.paged.blob.label())
            .field("size", &self.size)
            .finish()
    }
}

/// Refuses a logical range reaching past `size`.
fn check_within(paged: &Paged, offset: u64, len: usize, size: u64) -> Result<(), Error> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::BlobTooShort {
            blob: paged.blob.label().to_owned(),
            offset,
            len,
            end: size,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt as _;
    use futures::channel::oneshot;

    fn pending_for(file: FileId) -> usize {
        ABANDONED
            .lock()
            .iter()
            .filter(|(id, _)| *id == file)
            .count()
    }

    /// A change abandoned on a file holds back `wait_for_abandoned` on that file until it
    /// finishes, even across a dropped wait: the wait puts it back.
    #[test]
    fn an_abandoned_change_is_waited_for_even_across_a_dropped_wait() {
        // No real file has device `u64::MAX`.
        let file = (u64::MAX, 1);
        let (finish, finished) = oneshot::channel::<()>();
        let change: PendingWrite = Box::pin(async move {
            let _ = finished.await;
            Ok(())
        });
        drop(Tracked::new(file, change));
        assert_eq!(
            pending_for(file),
            1,
            "a dropped tracked change is abandoned"
        );

        let mut wait = Box::pin(wait_for_abandoned(file));
        assert!(
            (&mut wait).now_or_never().is_none(),
            "the change is not done"
        );
        drop(wait);
        assert_eq!(pending_for(file), 1, "a dropped wait puts the change back");

        assert!(wait_for_abandoned((u64::MAX, 2)).now_or_never().is_some());
        finish.send(()).unwrap();
        assert!(wait_for_abandoned(file).now_or_never().is_some());
        assert_eq!(pending_for(file), 0);
    }
}
