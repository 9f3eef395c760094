//! The cost of a task on its own thread: spawning a dedicated or a blocking task and awaiting
//! its handle, against `std::thread::spawn` + `join` and against tokio's `spawn_blocking`.
//!
//! Our dedicated and blocking tasks each get a fresh thread with its own io_uring ring, set up
//! before the task runs and drained before the handle's lease is released; the round trip is
//! timed from the spawn to the handle's result. `std::thread` is the floor for a fresh thread.
//! tokio's `spawn_blocking` reuses idle threads of its blocking pool, so after the first
//! spawn its rows measure a hand-off to a parked thread rather than a thread's creation.
//!
//! Run with `cargo run --release -p benches --bin runtime_threads`.

use std::time::{Duration, Instant};

use benches::{Workload, run_table};
use runtime::Context;
use runtime::prelude::*;

const WARMUPS: usize = 2;
const SAMPLES: usize = 7;

/// Sequential round trips per sample.
const ROUND_TRIPS: usize = 200;
/// Tasks in flight at once in the burst rows.
const BURST: usize = 16;
/// Bursts per sample.
const BURSTS: usize = 20;

/// `ROUND_TRIPS` spawns through `place`, each awaited before the next.
async fn ours_round_trips(context: Context, place: fn(Context) -> Context) -> Duration {
    let start = Instant::now();
    for round in 0..ROUND_TRIPS {
        let value = place(context.clone())
            .spawn(move |_| async move { round })
            .await
            .expect("task finished");
        assert_eq!(value, round);
    }
    start.elapsed()
}

/// `BURSTS` bursts of `BURST` spawns through `place`, each burst awaited as a whole.
async fn ours_bursts(context: Context, place: fn(Context) -> Context) -> Duration {
    let start = Instant::now();
    for _ in 0..BURSTS {
        let handles: Vec<_> = (0..BURST)
            .map(|index| place(context.clone()).spawn(move |_| async move { index }))
            .collect();
        for (index, handle) in handles.into_iter().enumerate() {
            assert_eq!(handle.await.expect("task finished"), index);
        }
    }
    start.elapsed()
}

fn dedicated(context: Context) -> Context {
    context.dedicated()
}

fn blocking(context: Context) -> Context {
    context.shared(true)
}

fn thread_round_trips() -> Duration {
    let start = Instant::now();
    for round in 0..ROUND_TRIPS {
        let value = std::thread::spawn(move || round).join().expect("thread");
        assert_eq!(value, round);
    }
    start.elapsed()
}

fn thread_bursts() -> Duration {
    let start = Instant::now();
    for _ in 0..BURSTS {
        let threads: Vec<_> = (0..BURST)
            .map(|index| std::thread::spawn(move || index))
            .collect();
        for (index, thread) in threads.into_iter().enumerate() {
            assert_eq!(thread.join().expect("thread"), index);
        }
    }
    start.elapsed()
}

async fn tokio_round_trips() -> Duration {
    let start = Instant::now();
    for round in 0..ROUND_TRIPS {
        let value = tokio::task::spawn_blocking(move || round)
            .await
            .expect("task");
        assert_eq!(value, round);
    }
    start.elapsed()
}

async fn tokio_bursts() -> Duration {
    let start = Instant::now();
    for _ in 0..BURSTS {
        let handles: Vec<_> = (0..BURST)
            .map(|index| tokio::task::spawn_blocking(move || index))
            .collect();
        for (index, handle) in handles.into_iter().enumerate() {
            assert_eq!(handle.await.expect("task"), index);
        }
    }
    start.elapsed()
}

fn main() {
    println!("## against std::thread::spawn + join\n");
    run_table(
        &[
            Workload {
                name: "dedicated_round_trip_200",
                ours: || benches::ours(2, |context| ours_round_trips(context, dedicated)),
                peer: thread_round_trips,
            },
            Workload {
                name: "dedicated_burst_20x16",
                ours: || benches::ours(2, |context| ours_bursts(context, dedicated)),
                peer: thread_bursts,
            },
        ],
        "std::thread",
        WARMUPS,
        SAMPLES,
    );
    println!("\n## against tokio::task::spawn_blocking\n");
    run_table(
        &[
            Workload {
                name: "blocking_round_trip_200",
                ours: || benches::ours(2, |context| ours_round_trips(context, blocking)),
                peer: || benches::tokio_multi(2, tokio_round_trips()),
            },
            Workload {
                name: "blocking_burst_20x16",
                ours: || benches::ours(2, |context| ours_bursts(context, blocking)),
                peer: || benches::tokio_multi(2, tokio_bursts()),
            },
        ],
        "tokio",
        WARMUPS,
        SAMPLES,
    );
}
