//! Core scheduler workloads, ours against tokio's `current_thread` runtime.
//!
//! Every sample builds a fresh runtime, but only the workload inside the root future is timed
//! (with `Instant` inside the root / `block_on`). The two runtimes alternate sample by sample
//! in this one process; after `WARMUPS` untimed runs each, `SAMPLES` runs each are kept and
//! their medians printed as a markdown table.
//!
//! Run with `cargo run --release -p benches --bin runtime_core`.

use std::time::{Duration, Instant};

use benches::{Workload, run_table};
use runtime::Context;
use runtime::prelude::*;

const WARMUPS: usize = 2;
const SAMPLES: usize = 7;

const SPAWN_AWAIT_TASKS: u64 = 100_000;
const CHAIN_DEPTH: usize = 1_000;
const YIELD_TASKS: usize = 200;
const YIELDS_PER_TASK: usize = 1_000;
const SLEEPS: usize = 1_000;
const TIMER_ROUND_TRIPS: usize = 100_000;

/// Runs `f` as the root of a fresh single-worker runtime of ours and returns what it measured.
fn ours<F, Fut>(f: F) -> Duration
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Duration>,
{
    benches::ours(1, f)
}

/// Runs `future` on a fresh tokio `current_thread` runtime and returns what it measured.
fn tokio_rt(future: impl Future<Output = Duration>) -> Duration {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(future)
}

// ---------------------------------------------------------------------------------------------
// spawn_await_100k: sequential spawn + await of empty tasks.

fn ours_spawn_await() -> Duration {
    ours(|context| async move {
        let start = Instant::now();
        let mut sum = 0u64;
        for i in 0..SPAWN_AWAIT_TASKS {
            sum += context
                .clone()
                .spawn(move |_| async move { i })
                .await
                .expect("task");
        }
        let elapsed = start.elapsed();
        assert_eq!(sum, SPAWN_AWAIT_TASKS * (SPAWN_AWAIT_TASKS - 1) / 2);
        elapsed
    })
}

fn tokio_spawn_await() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        let mut sum = 0u64;
        for i in 0..SPAWN_AWAIT_TASKS {
            sum += tokio::spawn(async move { i }).await.expect("task");
        }
        let elapsed = start.elapsed();
        assert_eq!(sum, SPAWN_AWAIT_TASKS * (SPAWN_AWAIT_TASKS - 1) / 2);
        elapsed
    })
}

// ---------------------------------------------------------------------------------------------
// chained_spawn_1000: each task spawns the next; the last one signals the root.

fn ours_chained_spawn() -> Duration {
    ours(|context| benches::ours_chained_spawn(context, CHAIN_DEPTH, false))
}

fn tokio_chained_spawn() -> Duration {
    tokio_rt(benches::tokio_chained_spawn(CHAIN_DEPTH))
}

// ---------------------------------------------------------------------------------------------
// yield_many_200x1000: 200 tasks, each yielding 1000 times.

fn ours_yield_many() -> Duration {
    ours(|context| async move {
        let start = Instant::now();
        let handles: Vec<_> = (0..YIELD_TASKS)
            .map(|_| {
                context.clone().spawn(|_| async {
                    for _ in 0..YIELDS_PER_TASK {
                        runtime::reschedule().await;
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.await.expect("task");
        }
        start.elapsed()
    })
}

fn tokio_yield_many() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        let handles: Vec<_> = (0..YIELD_TASKS)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..YIELDS_PER_TASK {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.await.expect("task");
        }
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------------
// sleep_zero_1k: sequential zero-length sleeps in the root. A deadline that has passed
// completes without touching the timer table on ours; tokio rounds every sleep up to its
// 1 ms tick, so this row shows resolution, not throughput.

fn ours_sleep_zero() -> Duration {
    ours(|context| async move {
        let start = Instant::now();
        for _ in 0..SLEEPS {
            context.sleep(Duration::ZERO).await;
        }
        start.elapsed()
    })
}

fn tokio_sleep_zero() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        for _ in 0..SLEEPS {
            tokio::time::sleep(Duration::ZERO).await;
        }
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------------
// timer_churn_100k: 100k sequential timeouts around a future that yields once. Each one
// registers a timer on its worker, is polled again, completes and cancels the timer: the
// register/cancel round trip of the timer table.

fn ours_timer_churn() -> Duration {
    ours(|context| async move {
        let start = Instant::now();
        for _ in 0..TIMER_ROUND_TRIPS {
            context
                .timeout(Duration::from_secs(10), runtime::reschedule())
                .await
                .expect("completes long before the timeout");
        }
        start.elapsed()
    })
}

fn tokio_timer_churn() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        for _ in 0..TIMER_ROUND_TRIPS {
            tokio::time::timeout(Duration::from_secs(10), tokio::task::yield_now())
                .await
                .expect("completes long before the timeout");
        }
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let workloads = [
        Workload {
            name: "spawn_await_100k",
            ours: ours_spawn_await,
            peer: tokio_spawn_await,
        },
        Workload {
            name: "chained_spawn_1000",
            ours: ours_chained_spawn,
            peer: tokio_chained_spawn,
        },
        Workload {
            name: "yield_many_200x1000",
            ours: ours_yield_many,
            peer: tokio_yield_many,
        },
        Workload {
            name: "timer_churn_100k",
            ours: ours_timer_churn,
            peer: tokio_timer_churn,
        },
        Workload {
            name: "sleep_zero_1k",
            ours: ours_sleep_zero,
            peer: tokio_sleep_zero,
        },
    ];
    run_table(&workloads, "tokio", WARMUPS, SAMPLES);
}
