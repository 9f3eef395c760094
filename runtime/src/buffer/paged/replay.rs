//! [`Replay`]: every byte of a sealed paged blob, in order, with page reads kept in flight.
//!
//! Invariants:
//! - Pages are verified and handed out in order: `ready` holds verified bytes of pages
//!   before `in_flight`'s, which hold pages before `next`. A page is never handed out twice
//!   and never skipped: a batch leaves `in_flight` only once all its pages are verified.
//! - A batch whose read fails, or whose origin worker closed before it was observed, stays in
//!   place with no read, and is issued again from the worker that polls the replay next.
//!   A batch that fails verification hands out the pages before the damaged one, and the valid
//!   start of that page (`skip` remembers it, so a retry hands it out once), and keeps the
//!   rest, so a caller can consume everything up to the damage.
//! - Read-ahead is bounded: reads are issued only while the bytes held and in flight are
//!   short of the larger of the buffer and the amount an `ensure` asks for.
//! - Cached pages skip the ring: with nothing in flight, the next batch is first read from the
//!   page cache on the calling thread (`RWF_NOWAIT`, which never waits for the disk) and
//!   verified at once, while its bytes are still in the CPU's cache; only a batch with a page
//!   not cached goes to the ring, with read-ahead. Either way it passes through `in_flight`
//!   and `accept`, so damage and retries are handled once.
//! - A read's verified pages are handed out in place, as one `ready` entry: no handle and no
//!   queue entry per page. Every page of an entry is whole but its last (only the blob's last
//!   page and a damaged page are short, and a damaged page ends the entry).
//! - All state is in the replay, not in an `ensure` future, so dropping one loses nothing.

use super::Layout;
use crate::Error;
use crate::storage::{Blob, ReadMany, ReadOptions};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;

/// Reads a sealed paged blob from the start (made by
/// [`Sealed::replay`](super::Sealed::replay)). [`ensure`](Self::ensure) makes bytes
/// available; [`bytes::Buf`] hands them out (`chunk` is at most one page, and
/// `copy_to_bytes` within a page shares the read's memory instead of copying).
pub struct Replay {
    blob: Blob,
    layout: Layout,
    /// Pages in the blob, and the bytes of the last one.
    pages: u64,
    last_len: usize,
    options: ReadOptions,
    /// Pages per read, and the pages to keep read ahead.
    batch_pages: usize,
    ahead_pages: usize,
    /// The next page to issue a read for.
    next: u64,
    in_flight: VecDeque<Batch>,
    in_flight_pages: usize,
    /// Verified bytes not yet consumed: one entry per read, never empty, pages in order.
    ready: VecDeque<Verified>,
    remaining: usize,
    /// Counts `ensure` calls: a read issued during this call that reports its worker closed is
    /// an error, not a reason to issue it again.
    call: u64,
}

/// The verified pages of one read, handed out in place: no handle and no queue entry per page.
/// Every page from `at` on holds a whole page of data except the last, which ends at `end`.
struct Verified {
    /// The read's bytes: whole physical pages, trailers included.
    bytes: Bytes,
    /// The next byte to hand out.
    at: usize,
    /// Where the data of the page holding `at` ends (before its trailer, or at `end`).
    page_end: usize,
    /// Where the last page's valid bytes end.
    end: usize,
}

impl Verified {
    /// The rest of the current page.
    fn chunk(&self) -> &[u8] {
        &self.bytes[self.at..self.page_end]
    }

    /// Consumes `count` bytes of the current page (at most its rest); returns whether bytes are
    /// left after it.
    fn consume(&mut self, count: usize, layout: Layout) -> bool {
        self.at += count;
        if self.at < self.page_end {
            return true;
        }
        // Past the trailer to the next page's data.
        let next = self.page_end.next_multiple_of(layout.physical);
        if next >= self.end {
            return false;
        }
        self.at = next;
        self.page_end = (next + layout.page_size).min(self.end);
        true
    }
}

struct Batch {
    first: u64,
    count: usize,
    /// Bytes of the first page already handed out: the valid start of a page that was
    /// shorter than its place requires.
    skip: usize,
    /// `None` when it must be issued (again).
    read: Option<ReadMany>,
    issued_in: u64,
}

impl Replay {
    pub(super) fn new(
        blob: Blob,
        layout: Layout,
        pages: u64,
        last_len: usize,
        ahead_pages: usize,
        options: ReadOptions,
    ) -> Self {
        Self {
            blob,
            layout,
            pages,
            last_len,
            options,
            batch_pages: (ahead_pages / 4).max(1),
            ahead_pages,
            next: 0,
            in_flight: VecDeque::new(),
            in_flight_pages: 0,
            ready: VecDeque::new(),
            remaining: 0,
            call: 0,
        }
    }

    /// Waits until at least `n` bytes are available through [`Buf`], reading and verifying
    /// pages as needed. Returns `false` if the blob ends first (the bytes up to its end are
    /// then available). Fails with [`Error::BlobCorrupt`] at a damaged page (the bytes before
    /// it stay available), or with the read's error; calling again retries.
    pub async fn ensure(&mut self, n: usize) -> Result<bool, Error> {
        self.call += 1;
        loop {
            if self.remaining >= n {
                return Ok(true);
            }
            if self.read_cached_batch()? {
                continue;
            }
            self.issue(n).await;
            let Some(batch) = self.in_flight.front_mut() else {
                return Ok(false);
            };
            let read = batch.read.as_mut().expect("issued just above");
            match read.await {
                Ok(bufs) => {
                    let bytes = bufs
                        .into_iter()
                        .next()
                        .expect("one range per batch")
                        .coalesce()
                        .into_bytes_mut()
                        .freeze();
                    self.accept(bytes)?;
                }
                Err(Error::ReadFailed) if batch.issued_in != self.call => {
                    // The worker that issued it closed (or is closing): issue it again, with
                    // every other read that worker took with it.
                    batch.read = None;
                    for batch in &mut self.in_flight {
                        if batch.read.as_ref().is_some_and(ReadMany::is_orphaned) {
                            batch.read = None;
                        }
                    }
                }
                Err(error) => {
                    batch.read = None;
                    return Err(error);
                }
            }
        }
    }

    /// With nothing in flight, reads the next batch from the page cache on this thread and
    /// verifies it at once, while its bytes are still in the CPU's cache. Returns false if
    /// there is nothing to read this way (reads are in flight, the blob is read in full, the
    /// caller asked to bypass the cache, or some page is not cached).
    fn read_cached_batch(&mut self) -> Result<bool, Error> {
        if !self.in_flight.is_empty() || self.next >= self.pages || self.options.dont_cache {
            return Ok(false);
        }
        let count = (self.pages - self.next).min(self.batch_pages as u64) as usize;
        let Some(buf) = self
            .blob
            .read_cached(self.layout.offset(self.next), count * self.layout.physical)
        else {
            return Ok(false);
        };
        self.in_flight.push_back(Batch {
            first: self.next,
            count,
            skip: 0,
            read: None,
            issued_in: self.call,
        });
        self.next += count as u64;
        self.in_flight_pages += count;
        self.accept(buf.freeze().into_bytes())?;
        Ok(true)
    }

    /// Issues the reads that were lost, then new ones until enough is held or in flight.
    async fn issue(&mut self, n: usize) {
        for batch in &mut self.in_flight {
            if batch.read.is_none() {
                let range = (
                    self.layout.offset(batch.first),
                    batch.count * self.layout.physical,
                );
                batch.read = Some(self.blob.start_read_many(&[range], self.options).await);
                batch.issued_in = self.call;
            }
        }
        let wanted = n.max(self.ahead_pages * self.layout.page_size);
        while self.next < self.pages
            && self.remaining + self.in_flight_pages * self.layout.page_size < wanted
        {
            let count = (self.pages - self.next).min(self.batch_pages as u64) as usize;
            let range = (self.layout.offset(self.next), count * self.layout.physical);
            let read = self.blob.start_read_many(&[range], self.options).await;
            self.in_flight.push_back(Batch {
                first: self.next,
                count,
                skip: 0,
                read: Some(read),
                issued_in: self.call,
            });
            self.next += count as u64;
            self.in_flight_pages += count;
        }
    }

    /// Verifies the front batch's pages (`bytes`) and makes them available. At a damaged page,
    /// hands out the bytes before it (including the valid start of that page, as after a lost
    /// machine a page may hold only what an earlier sync wrote), and leaves the rest in flight,
    /// to be read again.
    fn accept(&mut self, bytes: Bytes) -> Result<(), Error> {
        let layout = self.layout;
        let batch = self.in_flight.front_mut().expect("the batch just read");
        let from = batch.skip;
        // Where the verified bytes end in `bytes`, and how many there are.
        let mut end = from;
        let mut added = 0;
        let mut damaged = None;
        for index in 0..batch.count {
            let page = batch.first + index as u64;
            let expected = if page + 1 == self.pages {
                self.last_len
            } else {
                layout.page_size
            };
            let start = index * layout.physical;
            let physical = &bytes[start..start + layout.physical];
            let page_from = if index == 0 { from } else { 0 };
            let valid = layout.valid_len(page, physical).unwrap_or(0);
            let page_end = valid.min(expected);
            if page_end > page_from {
                end = start + page_end;
                added += page_end - page_from;
            }
            if valid < expected {
                damaged = Some((index, page, page_from.max(page_end)));
                break;
            }
        }
        if end > from {
            // Every page but the last one handed out is whole (only the blob's last page and
            // a damaged one are short, and a damaged one ends the span), which is what lets
            // one span hand them all out.
            self.ready.push_back(Verified {
                at: from,
                page_end: layout.page_size.min(end),
                end,
                bytes,
            });
            self.remaining += added;
        }
        match damaged {
            Some((index, page, skip)) => {
                batch.first = page;
                batch.count -= index;
                batch.skip = skip;
                batch.read = None;
                self.in_flight_pages -= index;
                Err(layout.corrupt(&self.blob, page))
            }
            None => {
                self.in_flight_pages -= batch.count;
                self.in_flight.pop_front();
                Ok(())
            }
        }
    }

    /// Consumes `count` bytes, at most the rest of the current page.
    fn consume_front(&mut self, count: usize) {
        let front = self.ready.front_mut().expect("counted in remaining");
        self.remaining -= count;
        if !front.consume(count, self.layout) {
            self.ready.pop_front();
        }
    }
}

impl Buf for Replay {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.ready.front().map_or(&[], Verified::chunk)
    }

    fn advance(&mut self, mut count: usize) {
        assert!(
            count <= self.remaining,
            "advancing {count} bytes past the {} available",
            self.remaining
        );
        while count > 0 {
            let page_rest = self.chunk().len();
            let take = count.min(page_rest);
            self.consume_front(take);
            count -= take;
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        assert!(
            len <= self.remaining,
            "taking {len} bytes of the {} available",
            self.remaining
        );
        if let Some(front) = self.ready.front()
            && front.chunk().len() >= len
        {
            let taken = front.bytes.slice(front.at..front.at + len);
            self.consume_front(len);
            return taken;
        }
        let mut out = BytesMut::with_capacity(len);
        while out.len() < len {
            let chunk = self.chunk();
            let take = chunk.len().min(len - out.len());
            out.extend_from_slice(&chunk[..take]);
            self.advance(take);
        }
        out.freeze()
    }
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("blob", &self.blob.label())
            .field("remaining", &self.remaining)
            .field("next_page", &self.next)
            .field("pages", &self.pages)
            .finish()
    }
}
