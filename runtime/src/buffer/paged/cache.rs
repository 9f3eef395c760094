//! The page cache that paged blobs share: a bounded set of verified pages, evicted by CLOCK.
//!
//! Invariants:
//! - It never holds more than `capacity` pages; its memory is `capacity * page_size` bytes at
//!   most, allocated as pages arrive (an unused cache costs nothing).
//! - It holds only pages whose checksum was verified when they were read, keyed by the paged
//!   blob's identity (a number unique in this process, taken when its writer is made) and the
//!   page number. Pages of a paged blob never change once full, and a partial page is cached
//!   only for a sealed blob, whose pages never change at all, so an entry is never stale.
//! - Eviction is CLOCK (second chance): a hit sets the page's reference bit; a miss that needs
//!   room sweeps the hand over the pages, clearing set bits, and replaces the first page whose
//!   bit was already clear. A page read once is evicted before a page read twice, and a
//!   sweep is at most two turns.
//! - The lock is held only to copy a page in or out (a few hundred nanoseconds for 4 KiB),
//!   never across I/O.

use crate::sync::Mutex;
use std::collections::HashMap;
use std::num::{NonZeroU16, NonZeroUsize};
use std::sync::Arc;

/// A page's key: the paged blob's identity and the page's number in it.
pub(crate) type Key = (u64, u64);

/// A handle to a page cache shared by any number of paged blobs. Clones share the cache.
///
/// Every blob that uses one cache has its page size. Readers consult the cache before the
/// blob and insert what they read; appends and replays bypass it (a replay reads every page
/// once, and would only push out pages that are read again).
#[derive(Clone)]
pub struct CacheRef {
    inner: Arc<Cache>,
}

struct Cache {
    page_size: usize,
    capacity: usize,
    state: Mutex<Clock>,
}

struct Clock {
    index: HashMap<Key, usize>,
    frames: Vec<Frame>,
    /// `frames.len() * page_size` bytes: frame `i`'s page is at `i * page_size`.
    data: Vec<u8>,
    hand: usize,
}

struct Frame {
    key: Key,
    len: usize,
    referenced: bool,
}

impl CacheRef {
    /// A cache of at most `cache_pages` pages of `page_size` bytes.
    pub fn new(page_size: NonZeroU16, cache_pages: NonZeroUsize) -> Self {
        Self {
            inner: Arc::new(Cache {
                page_size: usize::from(page_size.get()),
                capacity: cache_pages.get(),
                state: Mutex::new(Clock {
                    index: HashMap::new(),
                    frames: Vec::new(),
                    data: Vec::new(),
                    hand: 0,
                }),
            }),
        }
    }

    /// The logical bytes per page of every blob using this cache.
    pub fn page_size(&self) -> NonZeroU16 {
        let size = u16::try_from(self.inner.page_size).expect("made from a NonZeroU16");
        NonZeroU16::new(size).expect("made from a NonZeroU16")
    }

    /// The most pages the cache holds.
    pub fn capacity(&self) -> NonZeroUsize {
        NonZeroUsize::new(self.inner.capacity).expect("made from a NonZeroUsize")
    }

    /// Copies page `key`'s bytes `from..from + out.len()` into `out` if the cache holds them.
    pub(crate) fn read(&self, key: Key, from: usize, out: &mut [u8]) -> bool {
        let page_size = self.inner.page_size;
        let mut clock = self.inner.state.lock();
        let Some(&frame) = clock.index.get(&key) else {
            return false;
        };
        if from + out.len() > clock.frames[frame].len {
            return false;
        }
        clock.frames[frame].referenced = true;
        let start = frame * page_size + from;
        out.copy_from_slice(&clock.data[start..start + out.len()]);
        true
    }

    /// Caches `page` (a verified page's bytes, at most a page) as `key`, replacing any copy
    /// (a page's bytes only ever grow, so a later copy is never shorter).
    pub(crate) fn insert(&self, key: Key, page: &[u8]) {
        let page_size = self.inner.page_size;
        assert!(
            page.len() <= page_size,
            "a page holds at most the page size"
        );
        let mut clock = self.inner.state.lock();
        let clock = &mut *clock;
        let frame = match clock.index.get(&key) {
            Some(&frame) => frame,
            None if clock.frames.len() < self.inner.capacity => {
                clock.frames.push(Frame {
                    key,
                    len: 0,
                    referenced: false,
                });
                // Doubling keeps the copies linear; capping at the bound keeps memory within
                // it, not only the pages.
                if clock.data.capacity() < clock.frames.len() * page_size {
                    let bound = self.inner.capacity * page_size;
                    let target = (clock.data.capacity() * 2).clamp(page_size, bound);
                    clock.data.reserve_exact(target - clock.data.len());
                }
                clock.data.resize(clock.frames.len() * page_size, 0);
                clock.frames.len() - 1
            }
            None => {
                let victim = clock.sweep();
                let evicted = std::mem::replace(&mut clock.frames[victim].key, key);
                clock.index.remove(&evicted);
                clock.frames[victim].referenced = false;
                victim
            }
        };
        clock.index.insert(key, frame);
        let start = frame * page_size;
        clock.data[start..start + page.len()].copy_from_slice(page);
        clock.frames[frame].len = page.len();
    }

    #[cfg(test)]
    fn contains(&self, key: Key) -> bool {
        self.inner.state.lock().index.contains_key(&key)
    }
}

impl Clock {
    /// The frame to replace: the first at or after the hand whose reference bit is clear,
    /// clearing the set bits it passes. Leaves the hand just past it.
    fn sweep(&mut self) -> usize {
        loop {
            let frame = self.hand;
            self.hand = (self.hand + 1) % self.frames.len();
            let entry = &mut self.frames[frame];
            if !entry.referenced {
                return frame;
            }
            entry.referenced = false;
        }
    }
}

impl std::fmt::Debug for CacheRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("CacheRef");
        debug
            .field("page_size", &self.inner.page_size)
            .field("capacity", &self.inner.capacity);
        // `try_lock`: Debug never waits, and never deadlocks on a lock its own thread holds.
        match self.inner.state.try_lock() {
            Some(state) => debug.field("cached", &state.frames.len()).finish(),
            None => debug.finish_non_exhaustive(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(pages: usize) -> CacheRef {
        CacheRef::new(
            NonZeroU16::new(4).unwrap(),
            NonZeroUsize::new(pages).unwrap(),
        )
    }

    #[test]
    fn a_cached_page_reads_back_in_part_or_whole() {
        let cache = cache(2);
        cache.insert((1, 0), b"abcd");
        let mut out = [0u8; 2];
        assert!(cache.read((1, 0), 1, &mut out));
        assert_eq!(&out, b"bc");
        assert!(!cache.read((2, 0), 0, &mut out), "another blob's page 0");
        assert!(!cache.read((1, 1), 0, &mut out));
    }

    #[test]
    fn a_partial_page_serves_only_its_bytes_until_replaced_by_a_longer_copy() {
        let cache = cache(1);
        cache.insert((1, 0), b"ab");
        let mut out = [0u8; 3];
        assert!(!cache.read((1, 0), 0, &mut out));
        cache.insert((1, 0), b"abc");
        assert!(cache.read((1, 0), 0, &mut out));
        assert_eq!(&out, b"abc");
    }

    #[test]
    fn clock_evicts_a_page_read_once_before_a_page_read_again() {
        let cache = cache(3);
        for page in 0..3 {
            cache.insert((1, page), &[page as u8; 4]);
        }
        // Page 0 is read again; 1 and 2 are not.
        assert!(cache.read((1, 0), 0, &mut [0; 4]));
        cache.insert((1, 3), &[3; 4]);
        assert!(
            cache.contains((1, 0)),
            "a referenced page gets a second chance"
        );
        assert!(!cache.contains((1, 1)), "the first unreferenced page goes");
        assert!(cache.contains((1, 2)));
        cache.insert((1, 4), &[4; 4]);
        // The hand passed page 0 (clearing its bit) and stopped at 1's frame, now page 3's;
        // next comes 2.
        assert!(!cache.contains((1, 2)));
        assert!(cache.contains((1, 0)) && cache.contains((1, 3)) && cache.contains((1, 4)));
        let mut out = [0u8; 4];
        assert!(cache.read((1, 4), 0, &mut out));
        assert_eq!(out, [4; 4]);
    }

    #[test]
    fn never_holds_more_than_its_capacity() {
        let cache = cache(4);
        for page in 0..100 {
            cache.insert((7, page), &[0; 4]);
            let clock = cache.inner.state.lock();
            assert!(clock.frames.len() <= 4 && clock.index.len() <= 4);
            assert_eq!(clock.data.len(), clock.frames.len() * 4);
            assert!(
                clock.data.capacity() <= 4 * 4,
                "memory stays within the bound"
            );
        }
    }
}
