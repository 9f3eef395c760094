//! Metric values kept in per-thread cells: [`Sharded`] and the counter and gauge built on it.
//!
//! Invariants:
//! - A thread always writes the same cell (assigned round-robin on its first write), so values
//!   changed on one thread and read back there are exact, and a value incremented on one
//!   worker and decremented on another writes two cache lines that stay with their cores.
//! - A read sums the cells with relaxed loads: exact once the writers are quiet; a read racing
//!   writers may see one thread's change and not its counterpart's on another thread (a
//!   gauge raised on one worker and lowered on another can read one below its true value, -1
//!   included, for as long as the two writes race the read).
//! - A value costs [`SHARDS`] cache lines (512 bytes, with its `Arc`, about 600): a label
//!   family of the runtime keeps one per label set it has seen.

use prometheus_client::metrics::counter::{self, Counter};
use prometheus_client::metrics::gauge::{self, Gauge};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

/// A counter whose cells are per thread (see [`Sharded`]).
pub(crate) type ShardedCounter = Counter<u64, Sharded<AtomicU64>>;
/// A gauge whose cells are per thread (see [`Sharded`]).
pub(crate) type ShardedGauge = Gauge<i64, Sharded<AtomicI64>>;

/// How many cells a [`Sharded`] value has; threads share them round-robin.
const SHARDS: usize = 8;

/// One cell on a cache line of its own.
#[derive(Default)]
#[repr(align(64))]
struct Padded<A>(A);

/// A metric value kept in [`SHARDS`] cells, each thread writing its own (threads are assigned
/// cells round-robin on first use) and a read summing them. The increment's return value is
/// the writing thread's cell's previous value, not the total's (nothing here reads it).
#[derive(Default)]
pub(crate) struct Sharded<A>([Padded<A>; SHARDS]);

/// The calling thread's number: assigned in turn on first use, never zero, below 2^24 (the
/// 2^24-th thread wraps to 1). Threads use it to pick their cell here, and the supervision
/// tree to tell whether a task ends on the thread that adopted it. Inline: it runs twice per
/// spawned task, and without the hint whether it is inlined depended on which codegen unit
/// the compiler put it in (adding the simulation's modules moved it: +1% on the spawn rows).
#[inline]
pub(crate) fn thread_number() -> u32 {
    const NUMBERS: u32 = (1 << 24) - 1;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static NUMBER: Cell<u32> = const { Cell::new(0) };
    }
    NUMBER.with(|number| {
        if number.get() == 0 {
            number.set(NEXT.fetch_add(1, Ordering::Relaxed) % NUMBERS + 1);
        }
        number.get()
    })
}

/// The cell of the calling thread.
fn shard() -> usize {
    thread_number() as usize % SHARDS
}

impl std::fmt::Debug for Sharded<AtomicU64> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Sharded")
            .field(&counter::Atomic::get(self))
            .finish()
    }
}

impl std::fmt::Debug for Sharded<AtomicI64> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Sharded")
            .field(&gauge::Atomic::get(self))
            .finish()
    }
}

impl<A> Sharded<A> {
    fn mine(&self) -> &A {
        &self.0[shard()].0
    }
}

impl counter::Atomic<u64> for Sharded<AtomicU64> {
    fn inc(&self) -> u64 {
        self.inc_by(1)
    }

    fn inc_by(&self, v: u64) -> u64 {
        self.mine().fetch_add(v, Ordering::Relaxed)
    }

    fn get(&self) -> u64 {
        self.0.iter().fold(0u64, |sum, cell| {
            sum.wrapping_add(cell.0.load(Ordering::Relaxed))
        })
    }
}

impl gauge::Atomic<i64> for Sharded<AtomicI64> {
    fn inc(&self) -> i64 {
        self.inc_by(1)
    }

    fn inc_by(&self, v: i64) -> i64 {
        self.mine().fetch_add(v, Ordering::Relaxed)
    }

    fn dec(&self) -> i64 {
        self.dec_by(1)
    }

    fn dec_by(&self, v: i64) -> i64 {
        self.mine().fetch_sub(v, Ordering::Relaxed)
    }

    /// Sets the total: the other cells are emptied into this one's replacement. Exact only
    /// while no other thread changes the value.
    fn set(&self, v: i64) -> i64 {
        let previous = self.0.iter().fold(0i64, |sum, cell| {
            sum.wrapping_add(cell.0.swap(0, Ordering::Relaxed))
        });
        self.mine().store(v, Ordering::Relaxed);
        previous
    }

    fn get(&self) -> i64 {
        self.0.iter().fold(0i64, |sum, cell| {
            sum.wrapping_add(cell.0.load(Ordering::Relaxed))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes made on several threads add up in the total, whatever cells they landed in.
    #[test]
    fn changes_from_many_threads_add_up_once_the_writers_are_quiet() {
        let rounds: i64 = if cfg!(miri) { 10 } else { 1_000 };
        let gauge = std::sync::Arc::new(ShardedGauge::default());
        let counter = std::sync::Arc::new(ShardedCounter::default());
        let threads: Vec<_> = (0..2 * SHARDS as i64)
            .map(|index| {
                let (gauge, counter) = (gauge.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..rounds {
                        gauge.inc();
                        counter.inc();
                    }
                    gauge.dec_by(index);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let threads = 2 * SHARDS as i64;
        assert_eq!(gauge.get(), threads * rounds - (0..threads).sum::<i64>());
        assert_eq!(counter.get(), (threads * rounds) as u64);
        gauge.set(5);
        assert_eq!(gauge.get(), 5, "set replaces the total");
    }

    /// A value raised on one thread and lowered on another writes two cells, and the total is
    /// what a single cell would hold.
    #[test]
    fn a_raise_and_a_lower_on_two_threads_cancel() {
        let gauge = std::sync::Arc::new(ShardedGauge::default());
        gauge.inc();
        let other = gauge.clone();
        std::thread::spawn(move || other.dec()).join().unwrap();
        assert_eq!(gauge.get(), 0);
    }
}
