//! A worker's run queue: bounded, FIFO, one producer (its worker), many lock-free thieves.
//!
//! The oldest item of a queue that was empty when it arrived is *kept* apart, in a slot only
//! the owner touches: thieves take from the ring behind it and never the kept item. This is
//! what lets every spawn go to the spawning worker's queue (tokio's rule, which hands a burst
//! to thieves half a queue at a time) while a busy worker still keeps its first spawn and a
//! lone queued wake stays where it was woken (the seed's placement tests).
//!
//! The layout follows tokio's `multi_thread/queue.rs`: a ring buffer of [`CAPACITY`] slots, a
//! `tail` only the owner writes, and a `head` word packing two indices, `steal` and `real`.
//! `real` is the next slot to pop. `steal` equals `real` except while a thief copies out the
//! range `[steal, real)` it claimed; until it moves `steal` up to `real`, the owner must not
//! reuse those slots, and no other thief may start.
//!
//! Invariants:
//! - The kept item, when present, is older than every item in the ring: an item is kept only
//!   when it arrives at a queue with no kept item and an empty ring. `pop` takes it first.
//! - Only the owner reads or writes the kept slot; `kept` (the flag) mirrors it for other
//!   threads' counts, which are snapshots either way.
//! - Slots in `[real, tail)` hold items owned by the queue, slots in `[steal, real)` items a
//!   thief is copying out; every other slot is uninitialized. Only the owner writes slots and
//!   `tail`, and it writes a slot before it publishes the new `tail` with `Release`; a thief
//!   reads `tail` with `Acquire` before it reads the slots below it.
//! - `tail - steal + kept <= CAPACITY` (`kept` counting 1 for a kept item): the owner never
//!   overwrites a slot a thief may still read, and the whole queue holds at most `CAPACITY`.
//! - A thief claims half of everything queued, kept item included, rounded down, and at most
//!   the ring's items: a lone item (kept or not) is never stolen, and the owner always keeps at
//!   least as much as it gave away.
//! - Overflow gives the **newest** half back from the tail (one less beside a kept item), and
//!   only when the queue is full and no steal is in progress (`steal == real`,
//!   `tail - real + kept == CAPACITY`); while a steal is in progress, only the new item
//!   overflows. The owner lowers `tail`, then checks with a
//!   compare-and-swap that `head` is still what it read: a thief claiming from that `head` saw
//!   at most `CAPACITY` items and claims at most half, inside `[real, real + CAPACITY / 2)`,
//!   and every thief after the check reads the lowered tail. If `head` moved (a steal ended
//!   and another could start from the new `real` with the old tail), the owner restores
//!   `tail` and decides again.

use crate::sync::{AtomicBool, AtomicU32, AtomicU64, UnsafeCell};
use crate::task::Runnable;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

/// Slots in each worker's run queue.
#[cfg(not(loom))]
pub const CAPACITY: usize = 256;
/// Slots in each worker's run queue (small under loom, so models stay tractable).
#[cfg(loom)]
pub const CAPACITY: usize = 4;

const MASK: u32 = CAPACITY as u32 - 1;
const HALF: u32 = CAPACITY as u32 / 2;

fn pack(steal: u32, real: u32) -> u64 {
    (u64::from(steal) << 32) | u64::from(real)
}

fn unpack(head: u64) -> (u32, u32) {
    ((head >> 32) as u32, head as u32)
}

/// A bounded single-producer run queue of `T` (runnables, except in the models).
pub struct RunQueue<T = Runnable> {
    /// `(steal, real)`, see the module documentation. Every change is a compare-and-swap with
    /// `AcqRel`: the owner's pop and a thief's claim must see each other's moves.
    head: AtomicU64,
    /// One past the newest item. Written by the owner only, with `Release` after the slot.
    tail: AtomicU32,
    buffer: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// The kept item (see the module documentation). Owner only.
    kept_item: UnsafeCell<Option<T>>,
    /// Whether `kept_item` holds an item. Written by the owner only, read by anyone for counts.
    kept: AtomicBool,
}

// SAFETY: slots are accessed only under the index protocol of the module invariants, which
// gives every slot one reader or one writer at a time, and the kept slot only by the owner
// (every method touching it requires the caller to be the owner); items are `Send`.
unsafe impl<T: Send> Sync for RunQueue<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for RunQueue<T> {}

impl<T> Default for RunQueue<T> {
    fn default() -> Self {
        Self {
            head: AtomicU64::new(0),
            tail: AtomicU32::new(0),
            buffer: (0..CAPACITY)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            kept_item: UnsafeCell::new(None),
            kept: AtomicBool::new(false),
        }
    }
}

impl<T> RunQueue<T> {
    /// Number of items queued and not claimed by a thief, the kept item included (a snapshot
    /// for anyone but the owner).
    pub fn len(&self) -> usize {
        self.ring_len() + usize::from(self.kept.load(Ordering::Acquire))
    }

    /// Number of items in the ring (queued behind the kept item, stealable).
    fn ring_len(&self) -> usize {
        let (_, real) = unpack(self.head.load(Ordering::Acquire));
        let tail = self.tail.load(Ordering::Acquire);
        tail.wrapping_sub(real) as usize
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many more items the owner can push before the queue overflows. Items a thief has
    /// claimed but not yet copied out still occupy their slots, so this can be less than
    /// `CAPACITY - len()`; it only grows while the owner does not push.
    ///
    /// Only meaningful to the owner (anyone else sees a snapshot).
    pub(crate) fn room(&self) -> usize {
        let (steal, _) = unpack(self.head.load(Ordering::Acquire));
        let tail = self.tail.load(Ordering::Acquire);
        CAPACITY
            - usize::from(self.kept.load(Ordering::Acquire))
            - tail.wrapping_sub(steal) as usize
    }

    /// Whether a thief may take from this queue: a lone item is never stolen, nor the kept
    /// one.
    pub fn is_stealable(&self) -> bool {
        let ring = self.ring_len();
        ring >= 1 && ring + usize::from(self.kept.load(Ordering::Acquire)) >= 2
    }

    /// How many items a thief claims when it sees `ring` items in the ring: half of all that is
    /// queued, kept item included, rounded down, and never more than the ring holds.
    fn share(&self, ring: u32) -> u32 {
        let kept = u32::from(self.kept.load(Ordering::Acquire));
        (ring.wrapping_add(kept) / 2).min(ring)
    }

    /// Appends `item` and returns the queue's length after the push (kept item included). An
    /// item arriving at an empty queue is kept (see the module documentation). When the ring
    /// is full, the newest half (with `item`) is handed to `overflow` as one batch for the
    /// global queue instead, or only `item` while a thief is copying out a range; 0 is
    /// returned then.
    ///
    /// # Safety
    /// Only the queue's owning worker may call this (single producer).
    pub(crate) unsafe fn push_back(&self, item: T, overflow: impl FnOnce(Vec<T>)) -> usize {
        // Only this thread writes `tail` and `kept`.
        let tail = self.tail.load(Ordering::Relaxed);
        let kept = self.kept.load(Ordering::Relaxed);
        loop {
            let head = self.head.load(Ordering::Acquire);
            let (steal, real) = unpack(head);
            if !kept && real == tail {
                // Empty ring and no kept item: this item is the oldest. A thief copying out
                // `[steal, real)` took those items already; they are no longer queued here.
                self.kept_item.with_mut(|slot| {
                    // SAFETY: only the owner (us) touches the kept slot.
                    unsafe { *slot = Some(item) };
                });
                self.kept.store(true, Ordering::Release);
                return 1;
            }
            // The kept item takes one of the queue's `CAPACITY` places.
            let capacity = CAPACITY as u32 - u32::from(kept);
            if tail.wrapping_sub(steal) < capacity {
                self.buffer[(tail & MASK) as usize].with_mut(|slot| {
                    // SAFETY: `tail - steal < CAPACITY - kept`, so this slot is outside every range a
                    // thief or the owner reads, and only the owner (us) writes slots.
                    unsafe { (*slot).write(item) };
                });
                self.tail.store(tail.wrapping_add(1), Ordering::Release);
                return tail.wrapping_sub(real) as usize + 1 + usize::from(kept);
            }
            if steal != real {
                // A thief is copying out a range and frees room soon; this one item goes to
                // the global queue instead of waiting for it.
                overflow(vec![item]);
                return 0;
            }
            // Full (`tail - real == capacity`), no steal in progress: give back from the tail
            // everything above the oldest `HALF` of the ring (half the queue, or one less
            // beside a kept item). Lower the tail first, then check that `head` has not moved since we read it: a thief that
            // finished a steal meanwhile moved `real`, and one starting after it could claim
            // from the new `real` with the old tail, above `start`. The compare-and-swap also
            // hands the lowered tail to every later thief, which reads `head` (through this
            // RMW's release sequence) before `tail`. A thief still claiming from `head` as we
            // read it saw at most `CAPACITY` items in the ring from `real` and claims at most
            // half of them and the kept item, `(CAPACITY + 1) / 2 == HALF`, below `start`.
            let start = real.wrapping_add(HALF);
            let given = tail.wrapping_sub(start);
            self.tail.store(start, Ordering::Release);
            if self
                .head
                .compare_exchange(head, head, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // A thief moved first: restore the tail and look again.
                self.tail.store(tail, Ordering::Release);
                continue;
            }
            let mut batch = Vec::with_capacity(given as usize + 1);
            for index in 0..given {
                let slot = start.wrapping_add(index) & MASK;
                batch.push(self.buffer[slot as usize].with(|slot| {
                    // SAFETY: slots `[start, tail)` were initialized by us; the check above
                    // proved that no thief claimed into them (every claim lies below `start`),
                    // and lowering `tail` returned them to the owner alone.
                    unsafe { (*slot).assume_init_read() }
                }));
            }
            batch.push(item);
            overflow(batch);
            return 0;
        }
    }

    /// Takes the oldest item: the kept one, else the ring's oldest.
    ///
    /// # Safety
    /// Only the queue's owning worker may call this.
    pub(crate) unsafe fn pop(&self) -> Option<T> {
        if self.kept.load(Ordering::Relaxed) {
            self.kept.store(false, Ordering::Release);
            // SAFETY: only the owner (us) touches the kept slot, and the flag said it is full.
            return self.kept_item.with_mut(|slot| unsafe { (*slot).take() });
        }
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let (steal, real) = unpack(head);
            let tail = self.tail.load(Ordering::Relaxed);
            if real == tail {
                return None;
            }
            let next_real = real.wrapping_add(1);
            // While a steal is in progress, `steal` stays where the thief started.
            let next = if steal == real {
                pack(next_real, next_real)
            } else {
                pack(steal, next_real)
            };
            match self
                .head
                .compare_exchange(head, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Some(self.buffer[(real & MASK) as usize].with(|slot| {
                        // SAFETY: the compare-and-swap claimed slot `real` for us alone, and it
                        // is initialized (it was below `tail`).
                        unsafe { (*slot).assume_init_read() }
                    }));
                }
                Err(actual) => head = actual,
            }
        }
    }

    /// Steals half of this queue's items (rounded down, kept item counted but never taken) into
    /// `dst`'s ring, appended in order. Returns how many moved: 0 when the queue holds fewer
    /// than two or only its kept item, another thief is at work, or `dst` lacks room for half
    /// a queue.
    ///
    /// # Safety
    /// Only `dst`'s owning worker may call this, and `dst` must not be `self`.
    pub(crate) unsafe fn steal_into(&self, dst: &RunQueue<T>) -> usize {
        let dst_tail = dst.tail.load(Ordering::Relaxed);
        let (dst_steal, _) = unpack(dst.head.load(Ordering::Acquire));
        // `dst`'s kept item takes one of its places too (we own `dst`: the flag is ours).
        let dst_kept = u32::from(dst.kept.load(Ordering::Relaxed));
        if dst_tail.wrapping_sub(dst_steal) + dst_kept > HALF {
            return 0;
        }
        // Claim `[real, real + n)` by moving `real` while `steal` stays: the owner can keep
        // popping above the range, and no other thief starts until `steal` catches up.
        let mut head = self.head.load(Ordering::Acquire);
        let (first, count) = loop {
            let (steal, real) = unpack(head);
            if steal != real {
                return 0;
            }
            let tail = self.tail.load(Ordering::Acquire);
            let count = self.share(tail.wrapping_sub(real));
            if count == 0 {
                return 0;
            }
            let claimed = pack(steal, real.wrapping_add(count));
            match self
                .head
                .compare_exchange(head, claimed, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break (real, count),
                Err(actual) => head = actual,
            }
        };
        #[cfg(all(test, not(loom)))]
        tests::after_claim();
        for offset in 0..count {
            let item = self.buffer[(first.wrapping_add(offset) & MASK) as usize].with(|slot| {
                // SAFETY: the claim gave us `[first, first + count)`; the owner neither pops
                // (it pops from `real`, above the range) nor overwrites it (`tail - steal`
                // stays bounded by `CAPACITY` while `steal == first`).
                unsafe { (*slot).assume_init_read() }
            });
            dst.buffer[(dst_tail.wrapping_add(offset) & MASK) as usize].with_mut(|slot| {
                // SAFETY: we own `dst`, which had room for `HALF >= count` more items beside
                // its kept item (checked above), so these slots are unused by its readers.
                unsafe { (*slot).write(item) };
            });
        }
        // Let go of the range: `steal` catches up with `real`, which the owner may have moved.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let (_, real) = unpack(head);
            match self.head.compare_exchange(
                head,
                pack(real, real),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => head = actual,
            }
        }
        dst.tail
            .store(dst_tail.wrapping_add(count), Ordering::Release);
        count as usize
    }
}

impl<T> Drop for RunQueue<T> {
    fn drop(&mut self) {
        // Exclusive access: release every queued item (a runnable's task is owned by the set).
        // SAFETY: `&mut self` makes us the owner, with no thief left.
        while let Some(item) = unsafe { self.pop() } {
            drop(item);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::sync::{Arc, Barrier};

    thread_local! {
        /// Runs on a thief's thread after it claimed a range and before it copies it out.
        static AFTER_CLAIM: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    pub(super) fn after_claim() {
        if let Some(hook) = AFTER_CLAIM.with(|hook| hook.borrow_mut().take()) {
            hook();
        }
    }

    /// A thief's claimed range still occupies the owner's slots: a full queue with half of it
    /// claimed has no room, and the next push overflows instead of overwriting the range.
    #[test]
    fn room_counts_the_range_a_thief_is_copying() {
        // The first item is kept; the ring behind it is full.
        let victim = Arc::new(filled(0..CAPACITY as u32));
        assert_eq!(victim.room(), 0);
        let claimed = Arc::new(Barrier::new(2));
        let resume = Arc::new(Barrier::new(2));
        let thief = {
            let (victim, claimed, resume) = (victim.clone(), claimed.clone(), resume.clone());
            std::thread::spawn(move || {
                AFTER_CLAIM.with(|hook| {
                    *hook.borrow_mut() = Some(Box::new(move || {
                        claimed.wait();
                        resume.wait();
                    }))
                });
                let mine = RunQueue::default();
                // SAFETY: this thread owns `mine`.
                let stolen = unsafe { victim.steal_into(&mine) };
                (stolen, drain(&mine))
            })
        };
        claimed.wait();
        assert_eq!(
            victim.len(),
            CAPACITY / 2,
            "the claimed half left the count"
        );
        assert_eq!(victim.room(), 0, "but not the slots");
        let mut overflowed = None;
        // SAFETY: this thread owns the victim.
        unsafe { victim.push_back(u32::MAX, |batch| overflowed = Some(batch)) };
        assert_eq!(
            overflowed,
            Some(vec![u32::MAX]),
            "a push with no room overflows alone"
        );
        resume.wait();
        let (stolen, items) = thief.join().unwrap();
        assert_eq!(stolen, CAPACITY / 2);
        assert_eq!(
            items,
            (1..=HALF).collect::<Vec<_>>(),
            "the ring's oldest half"
        );
        assert_eq!(victim.room(), CAPACITY / 2, "the kept item holds one place");
    }

    fn filled(items: std::ops::Range<u32>) -> RunQueue<u32> {
        let queue = RunQueue::default();
        for item in items {
            // SAFETY: this test thread is the only producer.
            unsafe { queue.push_back(item, |_| panic!("no overflow")) };
        }
        queue
    }

    fn drain(queue: &RunQueue<u32>) -> Vec<u32> {
        // SAFETY: this test thread owns the queue.
        std::iter::from_fn(|| unsafe { queue.pop() }).collect()
    }

    #[test]
    fn fifo_order_and_stealability() {
        let queue = filled(0..1);
        assert!(!queue.is_stealable(), "a lone item is not stealable");
        // SAFETY: this test thread is the only producer.
        let len = unsafe { queue.push_back(1, |_| panic!("no overflow")) };
        assert_eq!(len, 2, "a push reports the length it made");
        assert!(queue.is_stealable());
        assert_eq!(drain(&queue), [0, 1], "oldest first");
    }

    #[test]
    fn overflow_hands_over_the_newest_half_with_the_new_item() {
        // The kept item and a full ring: `CAPACITY` in all.
        let queue = filled(0..CAPACITY as u32);
        let mut batch = None;
        // SAFETY: this test thread is the only producer.
        let len = unsafe { queue.push_back(CAPACITY as u32, |overflow| batch = Some(overflow)) };
        assert_eq!(len, 0, "an overflowing push reports no length");
        let batch = batch.expect("the push into a full queue overflows");
        let newest: Vec<u32> = (HALF + 1..=CAPACITY as u32).collect();
        assert_eq!(batch, newest, "the newest half and the new item, in order");
        assert_eq!(
            drain(&queue),
            (0..=HALF).collect::<Vec<_>>(),
            "the kept item and the ring's oldest half stay"
        );
        // Without a kept item the ring holds `CAPACITY` and gives back exactly half.
        // SAFETY: as above.
        unsafe {
            queue.push_back(0, |_| panic!("no overflow"));
            queue.push_back(1, |_| panic!("no overflow"));
            assert_eq!(queue.pop(), Some(0));
            for item in 2..=CAPACITY as u32 {
                queue.push_back(item, |_| panic!("no overflow"));
            }
            assert_eq!(queue.len(), CAPACITY);
            let mut batch = None;
            queue.push_back(u32::MAX, |overflow| batch = Some(overflow));
            assert_eq!(batch.map(|batch| batch.len()), Some(HALF as usize + 1));
        }
    }

    #[test]
    fn a_thief_takes_the_oldest_half_behind_the_kept_item_and_never_a_lone_item() {
        let thief = RunQueue::default();
        let lone = filled(0..1);
        assert!(!lone.is_stealable());
        // SAFETY: this thread owns `thief`.
        assert_eq!(unsafe { lone.steal_into(&thief) }, 0);
        assert_eq!(lone.len(), 1);

        let victim = filled(0..7);
        // SAFETY: this thread owns `thief`.
        assert_eq!(unsafe { victim.steal_into(&thief) }, 3, "half of seven");
        assert_eq!(drain(&thief), [1, 2, 3], "the ring's oldest, in order");
        // Each steal takes half of what remains, down to the kept item, which stays.
        // SAFETY: as above.
        let steals: Vec<usize> = std::iter::from_fn(|| {
            let count = unsafe { victim.steal_into(&thief) };
            (count > 0).then_some(count)
        })
        .collect();
        assert_eq!(steals, [2, 1]);
        assert!(!victim.is_stealable());
        assert_eq!(drain(&victim), [0], "the kept item is never stolen");
    }

    /// A lone item in the ring behind no kept item is not stolen either: the owner popped the
    /// kept item and the ring's oldest is now its next.
    #[test]
    fn a_lone_ring_item_without_a_kept_item_stays() {
        let queue = filled(0..2);
        // SAFETY: this test thread owns the queue.
        assert_eq!(unsafe { queue.pop() }, Some(0));
        assert_eq!(queue.len(), 1);
        assert!(!queue.is_stealable());
        let thief = RunQueue::default();
        // SAFETY: this thread owns `thief`.
        assert_eq!(unsafe { queue.steal_into(&thief) }, 0);
        // An item arriving behind it goes to the ring, not the kept slot: FIFO holds.
        // SAFETY: this test thread owns the queue.
        assert_eq!(unsafe { queue.push_back(2, |_| panic!("no overflow")) }, 2);
        assert_eq!(drain(&queue), [1, 2]);
    }

    /// A thief's own kept item counts against its room: it never ends above `CAPACITY`.
    #[test]
    fn a_thief_with_a_kept_item_and_half_a_ring_takes_nothing() {
        let thief = filled(0..HALF + 1);
        let victim = filled(1000..1000 + CAPACITY as u32);
        // SAFETY: this thread owns `thief`.
        assert_eq!(unsafe { victim.steal_into(&thief) }, 0);
        assert!(thief.len() <= CAPACITY);
        assert_eq!(thief.room(), CAPACITY - HALF as usize - 1);
    }

    #[test]
    fn a_thief_without_room_for_half_a_queue_takes_nothing() {
        // The kept item and more than half a ring.
        let thief = filled(0..HALF + 2);
        assert!(thief.room() < HALF as usize);
        let victim = filled(0..8);
        // SAFETY: this thread owns `thief`.
        assert_eq!(unsafe { victim.steal_into(&thief) }, 0);
        assert_eq!(victim.len(), 8);
    }

    #[test]
    fn items_survive_wrapping_indices() {
        let queue = RunQueue::default();
        let thief = RunQueue::default();
        let mut next = 0u32;
        let mut seen = Vec::new();
        for _ in 0..3 * CAPACITY {
            // SAFETY: this thread owns both queues.
            unsafe {
                queue.push_back(next, |_| panic!("no overflow"));
                queue.push_back(next + 1, |_| panic!("no overflow"));
                next += 2;
                seen.extend(queue.pop());
                queue.steal_into(&thief);
                seen.extend(thief.pop());
            }
        }
        seen.extend(drain(&queue));
        seen.extend(drain(&thief));
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..next).collect::<Vec<_>>(),
            "nothing lost or doubled"
        );
    }
}

#[cfg(all(test, loom))]
mod models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// An owner pushing, popping and overflowing races a thief: every item comes out exactly
    /// once, through the owner, the thief or an overflow batch.
    #[test]
    fn owner_and_thief_account_for_every_item() {
        crate::sync::model(|| {
            let victim = Arc::new(RunQueue::<u32>::default());
            let thief = {
                let victim = victim.clone();
                thread::spawn(move || {
                    let mine = RunQueue::default();
                    // SAFETY: this thread owns `mine`.
                    let stolen = unsafe { victim.steal_into(&mine) };
                    // SAFETY: as above.
                    let items: Vec<u32> = std::iter::from_fn(|| unsafe { mine.pop() }).collect();
                    assert_eq!(items.len(), stolen);
                    items
                })
            };
            let mut seen = Vec::new();
            // SAFETY: this thread is the victim's owner.
            unsafe {
                // The kept item, a full ring, and one more that overflows.
                for item in 0..CAPACITY as u32 + 1 {
                    victim.push_back(item, |batch| seen.extend(batch));
                }
                seen.extend(victim.pop());
                seen.extend(std::iter::from_fn(|| victim.pop()));
            }
            seen.extend(thief.join().unwrap());
            seen.sort_unstable();
            assert_eq!(seen, (0..CAPACITY as u32 + 1).collect::<Vec<_>>());
        });
    }

    /// An owner overflowing a full queue races a thief that steals twice: the second steal
    /// starts from where the first left `real`, with the tail it saw before the overflow
    /// lowered it, so the overflow must not hand out any slot that steal claimed.
    #[test]
    fn an_overflow_racing_repeated_steals_hands_out_every_item_once() {
        crate::sync::model(|| {
            let victim = Arc::new(RunQueue::<u32>::default());
            // SAFETY: this thread is the victim's owner.
            unsafe {
                // The kept item and a full ring.
                for item in 0..CAPACITY as u32 {
                    victim.push_back(item, |_| unreachable!("not full yet"));
                }
            }
            let thief = {
                let victim = victim.clone();
                thread::spawn(move || {
                    let mine = RunQueue::default();
                    let mut items = Vec::new();
                    for _ in 0..2 {
                        // SAFETY: this thread owns `mine`.
                        unsafe { victim.steal_into(&mine) };
                        // SAFETY: as above.
                        items.extend(std::iter::from_fn(|| unsafe { mine.pop() }));
                    }
                    items
                })
            };
            let mut seen = Vec::new();
            // SAFETY: this thread is the victim's owner.
            unsafe {
                victim.push_back(CAPACITY as u32, |batch| seen.extend(batch));
            }
            seen.extend(thief.join().unwrap());
            // SAFETY: as above.
            seen.extend(std::iter::from_fn(|| unsafe { victim.pop() }));
            seen.sort_unstable();
            assert_eq!(seen, (0..=CAPACITY as u32).collect::<Vec<_>>());
        });
    }

    /// The owner empties its queue and refills it, a new kept item first, while a thief's steal
    /// of the old ring is in flight: every item comes out exactly once.
    #[test]
    fn a_kept_item_refilled_during_a_steal_accounts_for_every_item() {
        crate::sync::model(|| {
            let victim = Arc::new(RunQueue::<u32>::default());
            let mut seen = Vec::new();
            // SAFETY: this thread is the victim's owner.
            unsafe {
                for item in 0..3 {
                    victim.push_back(item, |_| unreachable!("no overflow"));
                }
                seen.extend(victim.pop());
            }
            let thief = {
                let victim = victim.clone();
                thread::spawn(move || {
                    let mine = RunQueue::default();
                    // SAFETY: this thread owns `mine`.
                    unsafe { victim.steal_into(&mine) };
                    // SAFETY: as above.
                    std::iter::from_fn(|| unsafe { mine.pop() }).collect::<Vec<u32>>()
                })
            };
            // SAFETY: this thread is the victim's owner.
            unsafe {
                seen.extend(victim.pop());
                seen.extend(victim.pop());
                for item in 3..3 + CAPACITY as u32 {
                    victim.push_back(item, |batch| seen.extend(batch));
                }
            }
            seen.extend(thief.join().unwrap());
            // SAFETY: as above.
            seen.extend(std::iter::from_fn(|| unsafe { victim.pop() }));
            seen.sort_unstable();
            assert_eq!(seen, (0..3 + CAPACITY as u32).collect::<Vec<_>>());
        });
    }

    /// An overflow of a ring full without a kept item (the owner popped it) races a thief
    /// that may have read the kept flag before the pop: every item comes out exactly once.
    #[test]
    fn an_overflow_without_a_kept_item_racing_a_thief_accounts_for_every_item() {
        crate::sync::model(|| {
            let victim = Arc::new(RunQueue::<u32>::default());
            let mut seen = Vec::new();
            // SAFETY: this thread is the victim's owner.
            unsafe {
                victim.push_back(0, |_| unreachable!("no overflow"));
                victim.push_back(1, |_| unreachable!("no overflow"));
            }
            let thief = {
                let victim = victim.clone();
                thread::spawn(move || {
                    let mine = RunQueue::default();
                    let mut items = Vec::new();
                    for _ in 0..2 {
                        // SAFETY: this thread owns `mine`.
                        unsafe { victim.steal_into(&mine) };
                        // SAFETY: as above.
                        items.extend(std::iter::from_fn(|| unsafe { mine.pop() }));
                    }
                    items
                })
            };
            // SAFETY: this thread is the victim's owner.
            unsafe {
                seen.extend(victim.pop());
                for item in 2..3 + CAPACITY as u32 {
                    victim.push_back(item, |batch| seen.extend(batch));
                }
            }
            seen.extend(thief.join().unwrap());
            // SAFETY: as above.
            seen.extend(std::iter::from_fn(|| unsafe { victim.pop() }));
            seen.sort_unstable();
            assert_eq!(seen, (0..3 + CAPACITY as u32).collect::<Vec<_>>());
        });
    }

    /// Two thieves race for one queue: together they never take a lone item or one twice.
    #[test]
    fn two_thieves_never_share_an_item() {
        crate::sync::model(|| {
            let victim = Arc::new(RunQueue::<u32>::default());
            // SAFETY: this thread is the victim's owner.
            unsafe {
                for item in 0..3 {
                    victim.push_back(item, |_| unreachable!("no overflow"));
                }
            }
            let thieves: Vec<_> = (0..2)
                .map(|_| {
                    let victim = victim.clone();
                    thread::spawn(move || {
                        let mine = RunQueue::default();
                        // SAFETY: this thread owns `mine`.
                        unsafe { victim.steal_into(&mine) };
                        // SAFETY: as above.
                        std::iter::from_fn(|| unsafe { mine.pop() }).collect::<Vec<u32>>()
                    })
                })
                .collect();
            // SAFETY: this thread is the victim's owner.
            let mut seen: Vec<u32> = std::iter::from_fn(|| unsafe { victim.pop() }).collect();
            for thief in thieves {
                seen.extend(thief.join().unwrap());
            }
            // SAFETY: as above.
            seen.extend(std::iter::from_fn(|| unsafe { victim.pop() }));
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2]);
        });
    }
}
