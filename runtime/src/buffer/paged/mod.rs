//! Paged blobs: an append-only layout of fixed-size pages, each followed by a checksum, with
//! a shared page cache, recovery of a torn tail, and a replay that streams every byte back.
//!
//! # Layout
//! A paged blob is a sequence of physical pages of `page_size + CHECKSUM_SIZE` bytes: the
//! page's data, then a trailer of two slots, each a length (`u16`) and a CRC-32C of the
//! page's first `length` bytes, the length and the page number. Every page but the last is
//! full; the last holds `0..page_size` bytes, zero padded: bytes that end at a page boundary
//! are closed by an end page that holds none, so a synced blob never ends with a full page
//! and a blob that does is known to have lost its end. The blob's length is always a whole
//! number of physical pages.
//!
//! # Guarantees
//! - **Acknowledged bytes survive a crash.** Bytes are acknowledged once [`Writer::sync`]
//!   returns, or the durability future [`Writer::seal`] returns resolves.
//!   - After a killed process, [`Writer::new`] on the same blob recovers every acknowledged
//!     byte, in order, and appends continue after the last byte that reached the blob (the
//!     writer issues its writes in order, and the page cache keeps them).
//!   - After a lost machine (power, kernel), writes made since the last sync may have reached
//!     the disk in any order, so a page may be missing before pages that are present.
//!     [`Writer::new`] still keeps every acknowledged byte, but a [`Replay`] then stops at the
//!     first missing page with [`Error::BlobCorrupt`], having
//!     handed out every byte before it (the acknowledged ones among them);
//!     [`Writer::truncate`] to the bytes replayed makes the blob whole. A log recovers this
//!     way: replay until the end or the first corruption, then truncate there.
//! - **A torn tail is set aside and reported, never read, never lost.** On opening, what a
//!   crash can leave past the last synced byte (a fragment shorter than a page, trailing
//!   pages that validate nothing, a last-page rewrite whose new slot fails, a missing end) is
//!   copied to a file beside the blob, synced, and only then cut; the [`Recovery`] that
//!   [`Writer::new`] returns says what was cut, where, why, and where it is kept.
//!   [`TornTail::Refuse`] refuses even that, changing nothing. The
//!   [recovery rules](self#recovery) below say what a crash can leave and why the same
//!   bytes, which damage can imitate, are kept rather than dropped; [`salvage_page`] reads
//!   what can still be verified, page by page. A partial last page is rewritten when bytes
//!   are added to it, and its trailer keeps the slot of the state last written beside the new
//!   one, so a rewrite torn by a crash still validates as the previous, durable state.
//! - **Damage is reported, never returned.** A page inside the blob whose bytes no slot
//!   validates (or that is shorter than its place requires) fails the read with
//!   [`Error::BlobCorrupt`], naming the blob and the page's offset.
//! - **Replays survive their workers.** A [`Replay`] keeps page reads in flight between calls.
//!   If the worker that issued them closes before they are observed, the replay issues them
//!   again from the worker that asks next, so a replay handed from one task to another still
//!   yields every byte.
//! - **A dropped writer's last write is waited for.** A writer returns from an append while
//!   its buffer's write is still running. If it is dropped then, [`Writer::new`] on the same
//!   file waits for that write before recovering, so it cannot land on what the new writer
//!   writes.
//!
//! # Recovery
//! Past the last synced byte, a crash leaves at most a fragment of a page, whole pages that
//! validate nothing (never written, or written in part by a lost machine), a last-page slot
//! that fails beside one that validates, or a missing end page. The same bytes can also be
//! damage (a truncated file, a zeroed page, a flipped bit), and nothing tells the two apart;
//! so these are cut, but only after they are copied aside (`<hex(name)>.cut-<offset>` in the
//! blob's partition, which [`Storage::scan`](crate::Storage::scan) never lists), and always
//! reported. A page that fails before a valid one is refused when read. An acknowledged byte
//! is therefore never lost silently: it is kept, refused with its offset, or set aside and
//! reported.
//!
//! # Example
//! ```
//! use bytes::Buf as _;
//! use runtime::buffer::paged::{CacheRef, Writer, CHECKSUM_SIZE};
//! use runtime::prelude::*;
//! use runtime::ReadOptions;
//! use std::num::{NonZeroU16, NonZeroUsize};
//!
//! runtime::Runner::new(runtime::Config::default()).start(|context| async move {
//!     let cache = CacheRef::new(NonZeroU16::new(4096).unwrap(), NonZeroUsize::new(64).unwrap());
//!     let buffer = 16 * (4096 + CHECKSUM_SIZE as usize);
//!     let (blob, size) = context.open("log", b"events").await.unwrap();
//!     // Recovers what a previous run left (nothing here), then appends after it.
//!     let (writer, recovery) = Writer::new(blob, size, buffer, cache).await.unwrap();
//!     assert!(recovery.is_clean(), "nothing to cut in a new blob");
//!     let (writer, at) = writer.append(b"first event;").await.unwrap();
//!     assert_eq!(at, 0);
//!     let writer = writer.sync().await.unwrap(); // acknowledged: survives a crash
//!     let (writer, _) = writer.append(b"second event").await.unwrap();
//!     assert_eq!(writer.read_at(6, 6).await.unwrap().as_ref(), b"event;");
//!     let (sealed, durable) = writer.seal().await.unwrap();
//!     durable.await.unwrap();
//!
//!     let mut replay = sealed.replay(NonZeroUsize::new(buffer).unwrap(), ReadOptions::default()).unwrap();
//!     assert!(replay.ensure(24).await.unwrap());
//!     assert_eq!(replay.copy_to_bytes(24).as_ref(), b"first event;second event");
//!     assert!(!replay.ensure(1).await.unwrap(), "the end");
//!     context.remove("log", None).await.unwrap();
//! });
//! ```
//!
//! # Costs
//! Appends copy into a buffer of whole physical pages and write it with one system call when
//! it fills, while the next buffer fills (a writer holds two). Checksums run at tens of
//! gigabytes per second with AVX-512 (VPCLMULQDQ folding), several without (the SSE 4.2
//! instruction on three lanes). Reads go through the [`CacheRef`]; replays read batches of
//! pages directly, bypassing it. Opening a non-empty blob costs one read of its last page (more
//! if its tail is torn) and one sync; a torn tail costs its copy too.

mod cache;
mod checksum;
mod recovery;
mod replay;
mod writer;

pub use cache::CacheRef;
pub use checksum::{CHECKSUM_SIZE, crc32c, crc32c_extend};
pub use recovery::{Cut, CutReason, Recovery, SetAside, TornTail};
pub use replay::Replay;
pub use writer::{Sealed, Writer};

use crate::Error;
use crate::storage::Blob;
use checksum::Trailer;
use std::io;

/// The sizes of a paged blob's pages.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// Logical bytes per page.
    page_size: usize,
    /// Bytes per page in the blob: the page and its trailer.
    physical: usize,
}

impl Layout {
    fn new(cache: &CacheRef) -> Self {
        let page_size = usize::from(cache.page_size().get());
        Self {
            page_size,
            physical: page_size + usize::from(CHECKSUM_SIZE),
        }
    }

    /// Where page `page` starts in the blob.
    fn offset(self, page: u64) -> u64 {
        page * self.physical as u64
    }

    /// How many whole pages a buffer of `bytes` holds, or an error saying what is allowed.
    fn pages_in(self, blob: &Blob, bytes: usize, what: &str) -> Result<usize, Error> {
        match bytes / self.physical {
            0 => Err(blob.failed(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {what} buffer of {bytes} bytes holds no page: it needs at least {} \
                     bytes (a page of {} bytes and its {CHECKSUM_SIZE}-byte checksum)",
                    self.physical, self.page_size
                ),
            ))),
            pages => Ok(pages),
        }
    }

    /// How many bytes physical page `page` (its data and trailer) validly holds: its longest
    /// slot that validates, if any.
    fn valid_len(self, page: u64, bytes: &[u8]) -> Option<usize> {
        debug_assert_eq!(bytes.len(), self.physical);
        let (data, trailer) = bytes.split_at(self.page_size);
        let (_, slot) = Trailer::decode(trailer).best(page, data)?;
        Some(usize::from(slot.len))
    }

    /// Checks physical page `page` and returns how many bytes it holds, at least `expected`:
    /// the page's latest durable state must cover its place in the blob.
    fn verify(self, blob: &Blob, page: u64, bytes: &[u8], expected: usize) -> Result<usize, Error> {
        match self.valid_len(page, bytes) {
            Some(len) if len >= expected => Ok(len),
            _ => Err(self.corrupt(blob, page)),
        }
    }

    fn corrupt(self, blob: &Blob, page: u64) -> Error {
        Error::BlobCorrupt {
            blob: blob.label().to_owned(),
            offset: self.offset(page),
        }
    }
}

/// How many bytes page `page` of a paged blob with pages of `page_size` bytes validly holds,
/// given its physical bytes (`page_size` bytes of data, then the trailer): its longest slot
/// that validates, or `None` if none does (damaged, or never written). Reads nothing: for a
/// salvage that reads a blob in large pieces and checks each page itself.
///
/// # Panics
/// If `physical` is not `page_size + CHECKSUM_SIZE` bytes long.
pub fn verified_len(page_size: std::num::NonZeroU16, page: u64, physical: &[u8]) -> Option<usize> {
    let page_size = usize::from(page_size.get());
    let layout = Layout {
        page_size,
        physical: page_size + usize::from(CHECKSUM_SIZE),
    };
    assert_eq!(physical.len(), layout.physical, "one physical page");
    layout.valid_len(page, physical)
}

/// Whether page `page` of a paged blob with pages of `page_size` bytes, given its physical
/// bytes, holds two slots that both verify: a page a sync closed partial and the writer later
/// rewrote, which it does only once that sync has returned. So such a page proves that a sync
/// completed after every page before it was last written: a page before it that verifies
/// only as partial is damaged, not the end of the synced bytes a lost machine left.
///
/// # Panics
///
/// If `physical` is not one physical page long.
pub fn rewritten_after_a_sync(page_size: std::num::NonZeroU16, page: u64, physical: &[u8]) -> bool {
    let page_size = usize::from(page_size.get());
    assert_eq!(
        physical.len(),
        page_size + usize::from(CHECKSUM_SIZE),
        "one physical page"
    );
    let (data, trailer) = physical.split_at(page_size);
    Trailer::decode(trailer)
        .slots
        .iter()
        .filter(|slot| slot.is_some_and(|slot| slot.is_valid_for(page, data)))
        .count()
        == 2
}

/// Reads page `page` of a paged blob with pages of `page_size` bytes, trusting nothing else
/// in the blob: the bytes its longest valid trailer slot covers, or `None` if no slot
/// validates (damaged, or never written). For salvaging what a damaged blob still holds,
/// page by page, where [`Writer::new`] refuses it; a page past the blob's end is `None` too.
pub async fn salvage_page(
    blob: &Blob,
    page_size: std::num::NonZeroU16,
    page: u64,
) -> Result<Option<bytes::Bytes>, Error> {
    use crate::Blob as _;
    use crate::ReadOptions;
    let page_size = usize::from(page_size.get());
    let layout = Layout {
        page_size,
        physical: page_size + usize::from(CHECKSUM_SIZE),
    };
    let (_, size) = blob.identity().map_err(|error| blob.failed(error))?;
    if layout.offset(page + 1) > size {
        return Ok(None);
    }
    let bytes = blob
        .read_at(layout.offset(page), layout.physical, ReadOptions::default())
        .await?
        .coalesce();
    Ok(layout
        .valid_len(page, &bytes)
        .map(|len| bytes::Bytes::copy_from_slice(&bytes[..len])))
}

/// What a writer and the blob it seals share: the blob, its layout, and its place in the cache.
#[derive(Clone)]
struct Paged {
    blob: Blob,
    layout: Layout,
    cache: CacheRef,
    /// This paged blob's identity in the cache.
    id: u64,
    /// The file's device and inode.
    file: (u64, u64),
}

/// Cache identities: unique in this process.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Paged {
    fn new(blob: Blob, cache: CacheRef) -> Result<Self, Error> {
        let (file, _) = blob.identity().map_err(|error| blob.failed(error))?;
        Ok(Self {
            layout: Layout::new(&cache),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            blob,
            cache,
            file,
        })
    }

    /// Takes a fresh cache identity, so no page cached under the old one is found again.
    fn renew_id(&mut self) {
        self.id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Fills `out` with the logical bytes at `offset` from the stored pages `0..pages`, the
    /// last of which holds `last_len` bytes: from the cache where it has them, otherwise with
    /// one read of the remaining pages, each verified and then cached.
    async fn read_stored(
        &self,
        offset: u64,
        out: &mut [u8],
        pages: u64,
        last_len: usize,
    ) -> Result<(), Error> {
        use crate::Blob as _;
        let page_size = self.layout.page_size as u64;
        let end = offset + out.len() as u64;
        let expected = |page: u64| {
            if page + 1 == pages {
                last_len
            } else {
                self.layout.page_size
            }
        };
        let mut position = offset;
        while position < end {
            let page = position / page_size;
            let within = (position % page_size) as usize;
            let len = (self.layout.page_size - within).min((end - position) as usize);
            let at = (position - offset) as usize;
            if self
                .cache
                .read((self.id, page), within, &mut out[at..at + len])
            {
                position += len as u64;
                continue;
            }
            // Read every page from here to the range's end at once, verify and cache them.
            let last_page = (end - 1) / page_size;
            let count = (last_page - page + 1) as usize;
            let physical = self.layout.physical;
            let bytes = self
                .blob
                .read_at(
                    self.layout.offset(page),
                    count * physical,
                    crate::ReadOptions::default(),
                )
                .await?
                .coalesce();
            for (index, bytes) in bytes.chunks_exact(physical).enumerate() {
                let page = page + index as u64;
                let start = (page * page_size).max(position);
                let stop = ((page + 1) * page_size).min(end);
                // Only the bytes this read needs must verify: a page the last sync closed
                // partial, whose rewrite a lost machine did not keep while it kept pages
                // after it, still hands out its synced bytes (a read past them fails).
                let needed = (stop - page * page_size) as usize;
                let held = self.layout.verify(&self.blob, page, bytes, needed)?;
                let held = held.min(expected(page));
                self.cache.insert((self.id, page), &bytes[..held]);
                let within = (start - page * page_size) as usize;
                let at = (start - offset) as usize;
                let len = (stop - start) as usize;
                out[at..at + len].copy_from_slice(&bytes[within..within + len]);
            }
            position = end;
        }
        Ok(())
    }
}
