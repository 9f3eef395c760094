//! Opening a paged blob: finding where its valid bytes end, and what happens to the bytes past
//! that point.
//!
//! # What a crash can leave, and what it cannot
//! The writer writes whole physical pages, in blob order, one write at a time, and rewrites
//! a partial last page with the slot of its synced state kept where it was (see the
//! [writer](super::writer)). So past the last synced byte, a crash leaves at most:
//! - **a fragment**: a tail shorter than a physical page, the start of a page whose write was
//!   cut short (a killed process, or a lost machine);
//! - **unwritten pages**: whole trailing pages whose trailer is all zero, which a file system
//!   shows for an extent whose data never reached the disk (a lost machine);
//! - **failed pages**: whole trailing pages whose trailer was written but validates nothing:
//!   a lost machine wrote the pages' blocks in any order, so a page may hold its trailer and
//!   not its data, or half a trailer;
//! - **a failed slot**: the last page's trailer holds a slot that fails its checksum beside one
//!   that validates: a rewrite of the partial page torn before all its bytes landed;
//! - **a missing end**: the blob ends with a full page. Every sync closes the bytes with a
//!   partial last page, or with an end page holding none when they end at a page boundary, so
//!   a full last page means the write after it was cut there (an append writes full pages
//!   only).
//!
//! Each of these can also be damage (a truncated file, a zeroed page, a flipped bit in the
//! last pages), and nothing in the bytes tells the two apart. So recovery treats them as a
//! crash's tail, **but never silently and never destructively**: what it cuts is first
//! copied, byte for byte and synced, to a file beside the blob (`<hex(name)>.cut-<offset>`,
//! the blob's bytes from `offset` to its old end as they were), and the [`Recovery`] that the
//! opener returns says what was cut, where, why, and where it is kept. [`TornTail::Refuse`]
//! refuses even these, changing nothing.
//!
//! Anything else is refused with [`Error::BlobCorrupt`] at its offset when it is read,
//! changing nothing: a page that fails with a valid page after it. A killed process cannot
//! leave that; a lost machine can (pages written out of order), and a log recovers from it by
//! replaying to the damage and truncating there (see the [module](super)).
//!
//! One page number in 2^32 has an end-page slot whose checksum is zero (with 4 KiB pages, the
//! first is page 785,815,615, 3.2 TB into a blob): its end page reads as unwritten and is
//! reported as cut, holding no bytes.
//!
//! # Invariants
//! - The set-aside copy is durable before the blob is changed: a crash in between leaves the
//!   blob as it was (the next opening sets its tail aside again, beside the first copy).
//! - A failed slot is cleared from the trailer after its page is set aside (the valid slot
//!   rewritten in place, byte for byte the same), so the next opening finds the page clean and
//!   reports nothing twice.
//! - `kept` is the logical length the writer continues from; `cuts` are in blob order and do
//!   not overlap; the set-aside file covers every cut (a missing end has no bytes to keep).
//! - A missing end changes nothing on opening (there is nothing to cut); the writer's next
//!   sync closes it with an end page, and it is not reported again after that.

use super::checksum::{Slot, Trailer};
use super::{Layout, Paged};
use crate::buffer::IoBuf;
use crate::storage::{Blob, ReadOptions, WriteOptions};
use crate::{Blob as _, Error};
use bytes::{Bytes, BytesMut};

/// What opening a paged blob does with a tail that recovery would cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TornTail {
    /// Copy it to a file beside the blob, cut it, and report it in the [`Recovery`].
    #[default]
    SetAside,
    /// Refuse to open the blob with [`Error::BlobTorn`], changing nothing: for a caller that
    /// wants a person to look at every cut first.
    Refuse,
}

/// What opening a paged blob found and did: returned by [`Writer::new`](super::Writer::new)
/// and [`Writer::open`](super::Writer::open).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "a recovery may have cut bytes: report it"]
pub struct Recovery {
    /// Physical pages read from the end to find the last valid one.
    pub pages_read: u64,
    /// Logical bytes kept: where appends continue.
    pub kept: u64,
    /// What was cut, in blob order; empty when the blob was whole.
    pub cuts: Vec<Cut>,
    /// Where the cut bytes are kept, when something was cut.
    pub set_aside: Option<SetAside>,
}

impl Recovery {
    /// Whether nothing was cut.
    pub fn is_clean(&self) -> bool {
        self.cuts.is_empty()
    }

    /// Bytes cut, in all (physical bytes of the blob, trailers included).
    pub fn cut_bytes(&self) -> u64 {
        self.cuts.iter().map(|cut| cut.len).sum()
    }
}

/// A range of a paged blob that recovery cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Where the range starts in the blob (a physical offset).
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Why recovery cut it.
    pub reason: CutReason,
}

/// Why recovery cut a range (see [the recovery rules](super#recovery) for what a crash can
/// leave).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CutReason {
    /// A tail shorter than a physical page: a write cut short, or a truncated file.
    Fragment,
    /// Whole trailing pages with an all-zero trailer: never written, or zeroed.
    UnwrittenPages,
    /// Whole trailing pages, at least one with a trailer that was written but validates
    /// nothing: pages a lost machine wrote in part, or damaged pages.
    FailedPages,
    /// A slot of the last page fails its checksum and the other validates: a rewrite of the
    /// partial page torn (its newest slot failing), or damage to either slot or to the bytes
    /// the failing one covered. The page keeps the state that validates; the rest of it is
    /// cut (and kept aside). When the older slot is the one that fails, nothing is lost.
    FailedSlot {
        /// The bytes of the page kept.
        kept: u16,
    },
    /// The blob ends with a full page, without the end page that closes bytes ending at a
    /// page boundary: its last write was cut at a page boundary by a crash, or pages were
    /// cut from its end. Nothing is cut here (the cut's length is 0): the bytes that may
    /// be missing are not in the blob to keep.
    MissingEnd,
}

impl std::fmt::Display for CutReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CutReason::Fragment => f.write_str(
                "a tail shorter than a page: a write cut short by a crash, or a truncated file",
            ),
            CutReason::UnwrittenPages => f.write_str(
                "trailing pages whose checksums were never written: writes a crash lost, or \
                 zeroed pages",
            ),
            CutReason::FailedPages => f.write_str(
                "trailing pages whose checksums validate nothing: pages a lost machine wrote \
                 in part, or damaged pages",
            ),
            CutReason::FailedSlot { kept } => write!(
                f,
                "a checksum of the last page fails beside one that validates its first {kept} \
                 bytes: a rewrite torn by a crash, or damage to the page"
            ),
            CutReason::MissingEnd => f.write_str(
                "the blob ends with a full page and no end page: its last write was cut at a \
                 page boundary by a crash, or pages were cut from its end (not in the blob)",
            ),
        }
    }
}

/// A file beside a paged blob that holds bytes cut from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    /// The file, as `partition/hex(name).cut-<offset>` (with `.N` appended if that was taken).
    pub file: String,
    /// Where its first byte was in the blob.
    pub offset: u64,
    /// How many bytes it holds: the blob's bytes from `offset` to its end, as they were.
    pub len: u64,
}

/// Where a blob's valid bytes end, found by reading from its end: nothing is changed yet.
pub(super) struct Tail {
    /// Whole physical pages kept.
    pub(super) pages: u64,
    /// The last kept page's physical bytes, its best slot and that slot's index.
    pub(super) last: Option<(IoBuf, (usize, Slot))>,
    pub(super) cuts: Vec<Cut>,
    pub(super) pages_read: u64,
}

impl Tail {
    /// Reads the blob's last pages, back to the last one that validates; what is past it is
    /// a tail to cut.
    pub(super) async fn find(blob: &Blob, layout: Layout, size: u64) -> Result<Tail, Error> {
        let whole = size / layout.physical as u64;
        let fragment = (layout.offset(whole) != size).then(|| Cut {
            offset: layout.offset(whole),
            len: size - layout.offset(whole),
            reason: CutReason::Fragment,
        });
        let mut pages = whole;
        let mut pages_read = 0;
        let mut last = None;
        let mut failed_slot = None;
        // Whether a trailing page without a valid slot had a trailer written.
        let mut written = false;
        while pages > 0 {
            let page = pages - 1;
            let bytes = blob
                .read_at(layout.offset(page), layout.physical, ReadOptions::default())
                .await?
                .coalesce();
            pages_read += 1;
            let (data, trailer) = bytes.split_at(layout.page_size);
            let decoded = Trailer::decode(trailer);
            if let Some(best) = decoded.best(page, data) {
                // A slot beside the best one that fails: the newest state torn or damaged.
                let failed = |slot: &Slot| !slot.is_valid_for(page, data);
                if decoded.slots.iter().flatten().any(failed) {
                    let kept = best.1.len;
                    failed_slot = Some(Cut {
                        offset: layout.offset(page) + u64::from(kept),
                        len: (layout.physical - usize::from(kept)) as u64,
                        reason: CutReason::FailedSlot { kept },
                    });
                }
                last = Some((bytes, best));
                break;
            }
            written |= trailer.iter().any(|&byte| byte != 0);
            pages -= 1;
        }
        let failed_pages = (pages < whole).then(|| Cut {
            offset: layout.offset(pages),
            len: layout.offset(whole) - layout.offset(pages),
            reason: if written {
                CutReason::FailedPages
            } else {
                CutReason::UnwrittenPages
            },
        });
        // In blob order: the last kept page's rest, the pages after it, the fragment.
        let mut cuts: Vec<Cut> = [failed_slot, failed_pages, fragment]
            .into_iter()
            .flatten()
            .collect();
        let last_is_full =
            matches!(&last, Some((_, (_, slot))) if usize::from(slot.len) == layout.page_size);
        if cuts.is_empty() && last_is_full {
            cuts.push(Cut {
                offset: layout.offset(pages),
                len: 0,
                reason: CutReason::MissingEnd,
            });
        }
        Ok(Tail {
            pages,
            last,
            cuts,
            pages_read,
        })
    }

    /// The error a strict opening fails with: the first cut, and everything after it.
    pub(super) fn refusal(&self, blob: &Blob, size: u64) -> Option<Error> {
        let first = self.cuts.first()?;
        let what = self
            .cuts
            .iter()
            .map(|cut| format!("{} bytes at {}: {}", cut.len, cut.offset, cut.reason))
            .collect::<Vec<_>>()
            .join("; ");
        Some(Error::BlobTorn {
            blob: blob.label().to_owned(),
            offset: first.offset,
            len: size - first.offset,
            what,
        })
    }
}

/// Copies the blob's bytes from `offset` to `size` into a new file beside it, named
/// `.cut-<offset>`, and makes the copy durable. Reads and writes a mebibyte at a time.
pub(super) async fn set_aside(paged: &Paged, offset: u64, size: u64) -> Result<SetAside, Error> {
    let blob = &paged.blob;
    let (copy, file) = blob.create_beside(&format!(".cut-{offset}"))?;
    let mut at = offset;
    while at < size {
        let len = (size - at).min(1 << 20) as usize;
        let bytes = blob.read_at(at, len, ReadOptions::default()).await?;
        copy.write_at(at - offset, bytes, WriteOptions::default())
            .await?;
        at += len as u64;
    }
    copy.sync().await?;
    Ok(SetAside {
        file,
        offset,
        len: size - offset,
    })
}

/// The trailer of page `page` with only its slot `best`, and where it goes in the blob: the
/// valid slot's bytes unchanged, so writing it in place cannot invalidate it, however the
/// write is cut. Clears a failed slot once its page is set aside.
pub(super) fn cleared_trailer(layout: Layout, page: u64, best: (usize, Slot)) -> (u64, Bytes) {
    let mut trailer = Trailer::default();
    trailer.slots[best.0] = Some(best.1);
    let mut encoded = BytesMut::zeroed(usize::from(super::CHECKSUM_SIZE));
    trailer.encode(&mut encoded);
    let at = layout.offset(page) + layout.page_size as u64;
    (at, encoded.freeze())
}
