//! A bounded lock-free MPMC queue of slots, after Dmitry Vyukov's bounded queue: each slot
//! carries a stamp that says whose turn it is, so a push and a pop each cost one CAS on their
//! cursor and never take a lock. Slots are allocated in blocks on first use, and the blocks
//! double in size along the ring (the first holds one slot for a capacity up to 128), so an
//! actor that has handled a few messages holds a few slots, not its whole capacity.
//!
//! Invariants:
//! - `head` and `tail` only grow (wrapping). `tail` is moved by pushes, from any sender
//!   holding a permit; `head` by pops: the mailbox's one consumer, and the drains of a closed
//!   mailbox, which may race it. Both cursors are claimed with a CAS for that reason. A slot
//!   at index `i` with stamp `s`:
//!   - `s == i` (mod the stamp space): empty, the push whose cursor is `i` may fill it;
//!   - `s == i + 1`: full, the pop whose cursor is `i` may take it;
//!   - anything else: a lap behind or ahead; the cursor holder retries or reports empty/full.
//! - A slot's value is written only by the push that won its cursor with the CAS, before it
//!   stores the stamp `i + 1` with `Release`; it is read only by the pop that won its cursor,
//!   after loading that stamp with `Acquire`, which then stores `i + len` with `Release`
//!   so the next lap's push sees the slot empty only after the read.
//! - The mailbox hands out at most `capacity` permits, so a push holding one never finds the
//!   queue full: `push` may assume room and loops only on contention.
//! - A block is first reached by the push whose cursor is its first index on the first lap
//!   (cursors visit indices in order), or a push racing it within the block: its stamps start
//!   at their lap-0 indices. Whoever finds the pointer null allocates, and one CAS decides
//!   which block stays (`AcqRel`, so the stamps are visible to whoever loads the pointer
//!   with `Acquire`). A pop never reaches a slot before a push has: a null block at `head`
//!   means empty.

use crate::sync::{AtomicPtr, AtomicUsize, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::Ordering;

/// Blocks per queue, at most: their pointers live in the queue itself, with no allocation of
/// their own. Block 0 holds `first` slots and block `k >= 1` holds `first << (k - 1)` (it
/// starts at that index too), so the ring is `first << (BLOCKS - 1)` slots at most, and
/// `first` is one for rings of up to 128 slots.
const BLOCKS: usize = 8;

struct Slot<T> {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

pub(crate) struct Queue<T> {
    // Not padded apart: an idle actor's memory matters more than the false sharing of the
    // two cursors, which the permit counter's line shares anyway.
    head: AtomicUsize,
    tail: AtomicUsize,
    /// Blocks doubling in size (see [`BLOCKS`]), allocated on first use.
    blocks: [AtomicPtr<Slot<T>>; BLOCKS],
    /// `log2` of the slots in block 0 (and in block 1).
    first_shift: u32,
    /// Slots in all (a power of two).
    len: u32,
}

/// What [`Queue::pop_unless`] found.
pub(crate) enum Popped<T, D> {
    Value(T),
    /// Nothing written at the head (empty, or a push that has not written yet).
    Empty,
    /// A value waits at the head, left there for what the caller takes first.
    Deferred(D),
}

// SAFETY: values move between threads through the queue (so `T: Send` is required), and a
// slot's value is reached only by the single push or pop that owns its stamp (module doc).
unsafe impl<T: Send> Send for Queue<T> {}
// SAFETY: as above: shared access to the queue never gives two threads one slot's value.
unsafe impl<T: Send> Sync for Queue<T> {}

impl<T> Queue<T> {
    /// A queue with room for at least `capacity` values (rounded up to a power of two).
    pub(crate) fn new(capacity: usize) -> Self {
        let len = capacity.max(1).next_power_of_two();
        let len = u32::try_from(len).expect("a mailbox holds at most 2^31 messages");
        // The smallest first block that keeps the ring within `BLOCKS` blocks.
        let first_shift = len.trailing_zeros().saturating_sub(BLOCKS as u32 - 1);
        Queue {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            blocks: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            first_shift,
            len,
        }
    }

    /// The block holding ring position `position`, and the position its block starts at
    /// (block `k >= 1` starts at `first << (k - 1)`, which is also its length).
    #[inline]
    fn locate(&self, position: usize) -> (usize, usize) {
        let block = (usize::BITS - (position >> self.first_shift).leading_zeros()) as usize;
        let start = ((1usize << block) >> 1) << self.first_shift;
        (block, start)
    }

    /// Slots in block `block`.
    fn block_len(&self, block: usize) -> usize {
        (1usize << block.saturating_sub(1)) << self.first_shift
    }

    /// The slot at `index`, if its block exists.
    #[inline]
    fn slot(&self, index: usize) -> Option<&Slot<T>> {
        let position = index & (self.len as usize - 1);
        let (block, start) = self.locate(position);
        let pointer = self.blocks[block].load(Ordering::Acquire);
        // SAFETY: a non-null block pointer was installed by `slot_or_allocate`, points to
        // `block_len(block)` slots for the positions from `start` on (`locate` puts
        // `position` among them), and lives until the queue is dropped.
        (!pointer.is_null()).then(|| unsafe { &*pointer.add(position - start) })
    }

    /// The slot at `index`, allocating its block if needed.
    fn slot_or_allocate(&self, index: usize) -> &Slot<T> {
        if let Some(slot) = self.slot(index) {
            return slot;
        }
        let (block, start) = self.locate(index & (self.len as usize - 1));
        let len = self.block_len(block);
        let fresh: Box<[Slot<T>]> = (start..start + len)
            .map(|index| Slot {
                stamp: AtomicUsize::new(index),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        let fresh = Box::into_raw(fresh).cast::<Slot<T>>();
        let pointer = &self.blocks[block];
        if let Err(_installed) =
            pointer.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `fresh` came from `Box::into_raw` of a slice of `len` slots just above
            // and was never shared.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, len)) });
        }
        self.slot(index).expect("installed above")
    }

    /// Adds `value`. The caller holds a permit, so there is room: the loop only retries a lost
    /// race for the cursor.
    pub(crate) fn push(&self, value: T) {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = self.slot_or_allocate(tail);
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == tail {
                match self.tail.compare_exchange_weak(
                    tail,
                    tail.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the cursor at a slot stamped `tail` makes this push
                        // its only writer until it publishes the stamp below.
                        slot.value.with_mut(|cell| unsafe { (*cell).write(value) });
                        slot.stamp.store(tail.wrapping_add(1), Ordering::Release);
                        return;
                    }
                    Err(current) => tail = current,
                }
            } else {
                // Another push won this cursor (or, with permits, the slot's pop is finishing
                // its read): look again.
                std::hint::spin_loop();
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Pushes that have claimed a slot so far (wrapping): what a signal queued now is stamped
    /// with. Relaxed: a push that happened before the caller's load is seen by coherence.
    pub(crate) fn tail(&self) -> usize {
        self.tail.load(Ordering::Relaxed)
    }

    /// Pops so far (wrapping). Moved by the mailbox's consumer and, once the mailbox is
    /// closed, by its drains (`close`, or a send that found it closed), which may run beside
    /// the consumer (hence the CAS on `head`): while the mailbox is open only the consumer
    /// pops, so its own read is exact.
    pub(crate) fn head(&self) -> usize {
        self.head.load(Ordering::Relaxed)
    }

    /// Takes the oldest value, if any.
    pub(crate) fn pop(&self) -> Option<T> {
        match self.pop_unless(|| None::<()>) {
            Popped::Value(value) => Some(value),
            Popped::Empty | Popped::Deferred(()) => None,
        }
    }

    /// Takes the oldest value, unless `defer` (asked once, after the value is found written
    /// and before it is taken) gives something to take first instead, which it returns. `defer`
    /// runs after the `Acquire` load of the value's stamp: whatever its pusher did before the
    /// push is visible to it.
    #[inline]
    pub(crate) fn pop_unless<D>(&self, defer: impl FnOnce() -> Option<D>) -> Popped<T, D> {
        let mut defer = Some(defer);
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // No block yet: no push has reached this slot.
            let Some(slot) = self.slot(head) else {
                return Popped::Empty;
            };
            let stamp = slot.stamp.load(Ordering::Acquire);
            let full = head.wrapping_add(1);
            if stamp == full {
                if let Some(defer) = defer.take()
                    && let Some(first) = defer()
                {
                    return Popped::Deferred(first);
                }
                match self.head.compare_exchange_weak(
                    head,
                    full,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the stamp says a push wrote this slot (its `Release` store,
                        // loaded with `Acquire` above), and winning the cursor makes this pop
                        // its only reader.
                        let value = slot
                            .value
                            .with(|cell| unsafe { (*cell).assume_init_read() });
                        slot.stamp
                            .store(head.wrapping_add(self.len as usize), Ordering::Release);
                        return Popped::Value(value);
                    }
                    Err(current) => head = current,
                }
            } else if stamp == head {
                // Empty at this cursor; a push may have won it but not yet written.
                return Popped::Empty;
            } else {
                std::hint::spin_loop();
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }
}

impl<T> Drop for Queue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
        for (block, pointer) in self.blocks.iter().enumerate() {
            let slots = pointer.load(Ordering::Acquire);
            if !slots.is_null() {
                // SAFETY: installed by `slot_or_allocate` from a boxed slice of
                // `block_len(block)` slots, whose values were all popped above; nothing else
                // holds it now.
                drop(unsafe {
                    Box::from_raw(ptr::slice_from_raw_parts_mut(slots, self.block_len(block)))
                });
            }
        }
    }
}

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn keeps_fifo_order_across_laps() {
        let queue = Queue::new(3);
        for lap in 0..10 {
            for value in 0..4 {
                queue.push(lap * 10 + value);
            }
            for value in 0..4 {
                assert_eq!(queue.pop(), Some(lap * 10 + value));
            }
            assert_eq!(queue.pop(), None);
        }
    }

    /// Blocks double along the ring; a large queue starts with a larger first block, still
    /// at most `BLOCKS` blocks, and keeps its order across laps.
    #[test]
    fn large_queues_keep_order_in_larger_blocks() {
        let small = Queue::<u32>::new(64);
        let lens: Vec<_> = (0..7).map(|block| small.block_len(block)).collect();
        assert_eq!(lens, [1, 1, 2, 4, 8, 16, 32]);
        assert_eq!(small.locate(0), (0, 0));
        assert_eq!(small.locate(1), (1, 1));
        assert_eq!(small.locate(3), (2, 2));
        assert_eq!(small.locate(63), (6, 32));
        let queue = Queue::<u32>::new(1000);
        assert_eq!((queue.len, queue.first_shift), (1024, 3));
        assert_eq!(queue.locate(1023), (BLOCKS - 1, 512));
        let queue = Queue::new(100);
        assert_eq!((queue.len, queue.first_shift), (128, 0));
        for lap in 0..3 {
            for value in 0..100 {
                queue.push(lap * 1000 + value);
            }
            for value in 0..100 {
                assert_eq!(queue.pop(), Some(lap * 1000 + value));
            }
        }
        assert_eq!(queue.pop(), None);
    }

    #[test]
    fn allocates_blocks_only_as_cursors_reach_them() {
        let queue = Queue::new(64);
        let allocated = |queue: &Queue<u32>| {
            queue
                .blocks
                .iter()
                .filter(|block| !block.load(Ordering::Relaxed).is_null())
                .count()
        };
        assert_eq!(allocated(&queue), 0);
        assert_eq!(queue.pop(), None);
        queue.push(0);
        assert_eq!(queue.pop(), Some(0));
        assert_eq!(allocated(&queue), 1, "one message, one slot");
        for value in 1..8 {
            queue.push(value);
            assert_eq!(queue.pop(), Some(value));
        }
        assert_eq!(allocated(&queue), 4, "blocks of 1, 1, 2 and 4 slots");
        queue.push(99);
        assert_eq!(allocated(&queue), 5);
        assert_eq!(queue.pop(), Some(99));
    }

    #[test]
    fn drops_what_it_still_holds() {
        let value = Arc::new(());
        let queue = Queue::new(4);
        queue.push(value.clone());
        queue.push(value.clone());
        drop(queue);
        assert_eq!(Arc::strong_count(&value), 1);
    }

    /// Producers each push an increasing sequence while one consumer pops: nothing is lost or
    /// duplicated, and each producer's values come out in its order.
    #[test]
    fn concurrent_producers_keep_their_own_order() {
        const PRODUCERS: usize = 4;
        // Fewer under Miri, which interprets every step.
        const EACH: usize = if cfg!(miri) { 100 } else { 20_000 };
        let queue = Arc::new(Queue::new(64));
        let permits = Arc::new(AtomicUsize::new(64));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|producer| {
                let (queue, permits) = (queue.clone(), permits.clone());
                std::thread::spawn(move || {
                    for sequence in 0..EACH {
                        // Take a permit, as the mailbox does, so the queue never overflows.
                        loop {
                            let available = permits.load(Ordering::Acquire);
                            if available > 0
                                && permits
                                    .compare_exchange(
                                        available,
                                        available - 1,
                                        Ordering::AcqRel,
                                        Ordering::Relaxed,
                                    )
                                    .is_ok()
                            {
                                break;
                            }
                            std::thread::yield_now();
                        }
                        queue.push((producer, sequence));
                    }
                })
            })
            .collect();
        let mut next = [0; PRODUCERS];
        let mut received = 0;
        while received < PRODUCERS * EACH {
            match queue.pop() {
                Some((producer, sequence)) => {
                    assert_eq!(sequence, next[producer], "producer {producer} out of order");
                    next[producer] += 1;
                    received += 1;
                    permits.fetch_add(1, Ordering::AcqRel);
                }
                None => std::thread::yield_now(),
            }
        }
        for producer in producers {
            producer.join().unwrap();
        }
        assert_eq!(queue.pop(), None);
    }
}

#[cfg(all(test, actors_loom))]
mod models {
    use super::*;
    use loom::sync::Arc;

    /// Two producers push into a queue whose cursors have just reached a block of two slots
    /// no push has allocated yet (both racing to allocate it) while the consumer pops: each
    /// value comes out exactly once, and a producer's values in order.
    #[test]
    fn racing_pushes_and_pops_lose_nothing() {
        crate::sync::model(|| {
            let queue = Arc::new(Queue::new(4));
            // Past the two blocks of one slot: the pushes below share block 2 (slots 2, 3).
            for value in [10, 11] {
                queue.push(value);
                assert_eq!(queue.pop(), Some(value));
            }
            let producers: Vec<_> = (0..2)
                .map(|producer| {
                    let queue = queue.clone();
                    loom::thread::spawn(move || queue.push(producer))
                })
                .collect();
            let mut seen = Vec::new();
            while seen.len() < 2 {
                match queue.pop() {
                    Some(value) => seen.push(value),
                    None => loom::thread::yield_now(),
                }
            }
            for producer in producers {
                producer.join().unwrap();
            }
            seen.sort_unstable();
            assert_eq!(seen, [0, 1]);
            assert_eq!(queue.pop(), None);
        });
    }

    /// With one slot, the next lap's push (allowed once the pop returned its permit) never
    /// overwrites a value its pop is still reading.
    #[test]
    fn a_slot_is_reused_only_after_its_pop() {
        crate::sync::model(|| {
            use loom::sync::atomic::AtomicBool;
            let queue = Arc::new(Queue::new(1));
            let permit = Arc::new(AtomicBool::new(false));
            queue.push(Arc::new(1));
            let producer = {
                let (queue, permit) = (queue.clone(), permit.clone());
                loom::thread::spawn(move || {
                    while !permit.load(Ordering::Acquire) {
                        loom::thread::yield_now();
                    }
                    queue.push(Arc::new(2));
                })
            };
            let first = queue.pop().expect("pushed before the model");
            permit.store(true, Ordering::Release);
            assert_eq!(*first, 1);
            let second = loop {
                match queue.pop() {
                    Some(value) => break value,
                    None => loom::thread::yield_now(),
                }
            };
            assert_eq!(*second, 2);
            producer.join().unwrap();
        });
    }
}
