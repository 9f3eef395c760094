//! The deterministic runner: one thread, a seeded order, virtual time, an auditor whose digest
//! two runs of one seed share, stalls and timeouts as failures that name the seed.

use runtime::deterministic::{self, Runner};
use runtime::prelude::*;
use runtime::{Context, Execution};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A program whose order of events depends on scheduling: tasks of every placement record
/// their steps in one log, yielding and sleeping between them.
async fn interleaved(context: Context) -> Vec<(u32, u32)> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for task in 0..6u32 {
        let log = log.clone();
        let context = match task % 3 {
            0 => context.child("pool"),
            1 => context.child("dedicated").dedicated(),
            _ => context.child("blocking").shared(true),
        };
        handles.push(context.spawn(move |context| async move {
            for step in 0..4u32 {
                log.lock().unwrap().push((task, step));
                if step % 2 == 0 {
                    runtime::reschedule().await;
                } else {
                    context.sleep(Duration::from_millis(u64::from(task))).await;
                }
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    Arc::try_unwrap(log).unwrap().into_inner().unwrap()
}

fn run(seed: u64) -> (Vec<(u32, u32)>, u64) {
    Runner::seeded(seed).start(|context| async move {
        let log = interleaved(context).await;
        (log, deterministic::digest().unwrap())
    })
}

/// A hundred runs of one seed poll in the same order and end with the same digest; the seeds
/// of a range do not all give one order.
#[test]
fn one_seed_one_order_and_one_digest() {
    let (log, digest) = run(7);
    for _ in 0..100 {
        assert_eq!(run(7), (log.clone(), digest));
    }
    let orders: std::collections::HashSet<_> = (0..20).map(|seed| run(seed).0).collect();
    assert!(
        orders.len() > 10,
        "seeds choose orders: {} of 20",
        orders.len()
    );
    let digests: std::collections::HashSet<_> = (0..20).map(|seed| run(seed).1).collect();
    assert_eq!(digests.len(), 20);
}

/// Time is virtual: an hour's sleep takes no real time, and the clocks a context reads move
/// with it.
#[test]
fn time_is_virtual_and_jumps_to_the_next_deadline() {
    let started = std::time::Instant::now();
    let (slept, wall) = Runner::seeded(1).start(|context| async move {
        let before = runtime::clock::now();
        let wall_before = context.current();
        context.sleep(Duration::from_secs(3000)).await;
        (
            runtime::clock::now() - before,
            context.current().duration_since(wall_before).unwrap(),
        )
    });
    assert!(slept >= Duration::from_secs(3000), "{slept:?}");
    assert!(slept < Duration::from_secs(3001), "{slept:?}");
    assert!(wall >= Duration::from_secs(3000), "{wall:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// Every task runs on the runner's thread, dedicated and blocking ones included.
#[test]
fn every_placement_runs_on_the_one_thread() {
    let here = std::thread::current().id();
    let threads = Runner::seeded(2).start(|context| async move {
        let mut threads = Vec::new();
        for execution in [
            Execution::Shared(false),
            Execution::Shared(true),
            Execution::Dedicated,
        ] {
            let context = match execution {
                Execution::Dedicated => context.clone().dedicated(),
                Execution::Shared(blocking) => context.clone().shared(blocking),
            };
            threads.push(
                context
                    .spawn(|_| async { std::thread::current().id() })
                    .await
                    .unwrap(),
            );
        }
        threads
    });
    assert!(threads.iter().all(|thread| *thread == here), "{threads:?}");
}

fn failure(run: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(run)).expect_err("the run fails");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_default()
}

/// A run in which every task waits and no timer is set fails as stalled, not hanging.
#[test]
fn a_deadlock_is_a_stall() {
    let message = failure(|| {
        Runner::seeded(3).start(|context| async move {
            let (_sender, receiver) = futures::channel::oneshot::channel::<()>();
            let waiter = context.spawn(|_| receiver);
            let _ = waiter.await;
        })
    });
    assert!(message.contains("stalled"), "{message}");
}

/// A run that never ends fails once its virtual time passes the limit.
#[test]
fn a_livelock_times_out_in_virtual_time() {
    let message = failure(|| {
        Runner::seeded(4)
            .with_timeout(Duration::from_secs(1))
            .start(|_| async move {
                loop {
                    runtime::reschedule().await;
                }
            })
    });
    assert!(message.contains("timed out"), "{message}");
}

/// A task's panic fails the run unless panics are caught; caught, only its handle sees it.
#[test]
fn a_task_panic_fails_the_run_unless_caught() {
    let message = failure(|| {
        Runner::seeded(5).start(|context| async move {
            let _ = context.spawn(|_| async { panic!("task failed") }).await;
            std::future::pending::<()>().await;
        })
    });
    assert!(message.contains("task failed"), "{message}");
    let exited = Runner::seeded(5)
        .with_catch_panics(true)
        .start(|context| async move { context.spawn(|_| async { panic!("task failed") }).await });
    assert!(exited.is_err());
}

/// The generator is the run's: equal draws for one seed, recorded by the auditor.
#[test]
fn random_draws_follow_the_seed() {
    let draw = |seed| {
        Runner::seeded(seed)
            .start(|_| async { (0..4).map(|_| runtime::random_u64()).collect::<Vec<_>>() })
    };
    assert_eq!(draw(9), draw(9));
    assert_ne!(draw(9), draw(10));
    assert_eq!(
        Runner::seeded(11).start(|_| async { deterministic::seed() }),
        Some(11)
    );
    assert_eq!(deterministic::seed(), None);
}

/// The attribute runs the body as a deterministic run of the seed it names.
#[runtime::test(deterministic, seed = 21)]
async fn the_attribute_runs_one_seed(context: Context) {
    assert_eq!(deterministic::seed(), Some(21));
    context.sleep(Duration::from_secs(60)).await;
    assert!(deterministic::elapsed().unwrap() >= Duration::from_secs(60));
}

/// ... and a range of seeds, each its own run; a body may return a `Result`.
#[runtime::test(deterministic, seeds = 0..50)]
async fn the_attribute_runs_a_range_of_seeds(context: Context) -> Result<(), runtime::Error> {
    let seed = deterministic::seed().unwrap();
    assert!(seed < 50);
    context
        .timeout(
            Duration::from_secs(1),
            context.sleep(Duration::from_millis(seed)),
        )
        .await
}

/// Prints the digest of seed 42's run, for the test below, which runs it in processes of its
/// own; run alone it checks that the digest is the in-process one.
#[test]
fn digest_of_seed_42() {
    let (_, digest) = run(42);
    println!("digest of seed 42: {digest:016x}");
    assert_eq!(run(42).1, digest);
}

/// One seed gives one digest in separate processes too: no process-global state (a hash key,
/// an id counter, an address) leaks into a run.
#[test]
fn one_seed_one_digest_across_processes() {
    let exe = std::env::current_exe().unwrap();
    let digest_in = |_| {
        let output = Command::new(&exe)
            .args([
                "--exact",
                "digest_of_seed_42",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_remove("RUNTIME_SEED")
            .env_remove("RUNTIME_SEEDS")
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let stdout = String::from_utf8(output.stdout).unwrap();
        stdout
            .lines()
            .find_map(|line| line.split("digest of seed 42: ").nth(1))
            .unwrap_or_else(|| panic!("no digest printed: {stdout}"))
            .to_string()
    };
    let digests: Vec<String> = (0..2).map(digest_in).collect();
    assert_eq!(digests[0], digests[1]);
    assert_eq!(digests[0], format!("{:016x}", run(42).1));
}
