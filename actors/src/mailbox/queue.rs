//! A bounded lock-free MPMC queue of slots, after Dmitry Vyukov's bounded queue: each slot
//! carries a stamp that says whose turn it is, so a push and a pop each cost one CAS on their
//! cursor and never take a lock.
//!
//! Invariants:
//! - `head` and `tail` only grow (wrapping). A slot at index `i` with stamp `s`:
//!   - `s == i` (mod the stamp space): empty, the push whose cursor is `i` may fill it;
//!   - `s == i + 1`: full, the pop whose cursor is `i` may take it;
//!   - anything else: a lap behind or ahead; the cursor holder retries or reports empty/full.
//! - A slot's value is written only by the push that won its cursor with the CAS, before it
//!   stores the stamp `i + 1` with `Release`; it is read only by the pop that won its cursor,
//!   after loading that stamp with `Acquire`, which then stores `i + capacity` with `Release`
//!   so the next lap's push sees the slot empty only after the read.
//! - The mailbox hands out at most `capacity` permits, so a push holding one never finds the
//!   queue full: `push` may assume room and loops only on contention.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Pads a cursor to its own cache line, so producers and the consumer do not share one.
#[repr(align(128))]
struct Padded<T>(T);

struct Slot<T> {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

pub(crate) struct Queue<T> {
    head: Padded<AtomicUsize>,
    tail: Padded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
    /// `slots.len() - 1`; the length is a power of two.
    mask: usize,
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
        let slots = (0..len)
            .map(|index| Slot {
                stamp: AtomicUsize::new(index),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Queue {
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
            slots,
            mask: len - 1,
        }
    }

    /// Adds `value`. The caller holds a permit, so there is room: the loop only retries a lost
    /// race for the cursor.
    pub(crate) fn push(&self, value: T) {
        let mut tail = self.tail.0.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[tail & self.mask];
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == tail {
                match self.tail.0.compare_exchange_weak(
                    tail,
                    tail.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the cursor at a slot stamped `tail` makes this push
                        // its only writer until it publishes the stamp below.
                        unsafe { (*slot.value.get()).write(value) };
                        slot.stamp.store(tail.wrapping_add(1), Ordering::Release);
                        return;
                    }
                    Err(current) => tail = current,
                }
            } else {
                // Another push won this cursor (or, with permits, the slot's pop is finishing
                // its read): look again.
                std::hint::spin_loop();
                tail = self.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value, if any.
    pub(crate) fn pop(&self) -> Option<T> {
        let mut head = self.head.0.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[head & self.mask];
            let stamp = slot.stamp.load(Ordering::Acquire);
            let full = head.wrapping_add(1);
            if stamp == full {
                match self.head.0.compare_exchange_weak(
                    head,
                    full,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the stamp says a push wrote this slot (its `Release` store,
                        // loaded with `Acquire` above), and winning the cursor makes this pop
                        // its only reader.
                        let value = unsafe { (*slot.value.get()).assume_init_read() };
                        slot.stamp
                            .store(head.wrapping_add(self.slots.len()), Ordering::Release);
                        return Some(value);
                    }
                    Err(current) => head = current,
                }
            } else if stamp == head {
                // Empty at this cursor; a push may have won it but not yet written.
                return None;
            } else {
                std::hint::spin_loop();
                head = self.head.0.load(Ordering::Relaxed);
            }
        }
    }
}

impl<T> Drop for Queue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[cfg(test)]
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
        const EACH: usize = 20_000;
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
