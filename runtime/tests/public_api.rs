//! Integration tests of the runtime's public API: runner lifecycle, spawning and placement,
//! supervision, panics, scheduling, time, graceful stop, metrics and configuration checks.
//!
//! Synchronization uses channels only; sleeps appear solely where time itself is under test.

use futures::FutureExt;
use futures::channel::oneshot;
use prometheus_client::metrics::counter::Counter;
use runtime::prelude::*;
use runtime::{
    Config, Context, Error, Handle, MAX_WORKERS, RingConfig, Runner, SpinnerConfig, TimeoutWheel,
};
use std::cell::Cell;
use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

/// Far longer than any test should take; used to bound waits that must make progress.
const PROGRESS: Duration = Duration::from_secs(5);

/// A sleep that outlives every test: keeps a task pending until it is aborted or shut down.
const FOREVER: Duration = Duration::from_secs(3600);

/// Removes a runner's storage directory when the test ends.
struct Storage(PathBuf);

impl Drop for Storage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The default test config with `workers` pool workers, and the guard of its storage directory.
fn config(workers: usize) -> (Config, Storage) {
    let config = Config::new()
        .with_worker_threads(workers)
        .with_idle_spinner(SpinnerConfig::disabled());
    let storage = Storage(config.storage_directory().clone());
    (config, storage)
}

/// Counts drops of the value it is captured in, and reports the first drop on a channel.
struct DropGuard {
    drops: Arc<AtomicUsize>,
    dropped: Option<oneshot::Sender<()>>,
}

impl DropGuard {
    fn new(drops: &Arc<AtomicUsize>) -> Self {
        Self {
            drops: drops.clone(),
            dropped: None,
        }
    }

    fn reporting(drops: &Arc<AtomicUsize>) -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let guard = Self {
            drops: drops.clone(),
            dropped: Some(tx),
        };
        (guard, rx)
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        if let Some(tx) = self.dropped.take() {
            let _ = tx.send(());
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_string()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// `start` returns the root's output, and a spawned task's handle resolves to `Ok` with the
/// task's output, with 1 and 2 workers.
#[test]
fn start_returns_root_output_and_handles_resolve_to_task_output() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        let output = Runner::new(cfg).start(|context| async move {
            let handle = context.clone().spawn(|context| async move {
                context.sleep(Duration::from_millis(1)).await;
                6
            });
            handle.await.unwrap() + 1
        });
        assert_eq!(output, 7, "workers = {workers}");
    }
}

/// The root may borrow non-`Send` state (an `Rc`, a `&` to the caller's locals) across an
/// await, is polled only on the calling thread, and may return output borrowed from the caller.
#[test]
fn root_borrows_non_send_state_and_returns_borrowed_output() {
    let (cfg, _storage) = config(1);
    let caller = thread::current().id();
    let text = String::from("borrowed output");
    let counter = Rc::new(Cell::new(0));
    let local = Cell::new(0u32);
    let output: &str = Runner::new(cfg).start(|context| {
        let counter = counter.clone();
        let local = &local;
        let text = &text;
        async move {
            assert_eq!(thread::current().id(), caller);
            counter.set(counter.get() + 1);
            local.set(1);
            context.sleep(Duration::from_millis(2)).await;
            assert_eq!(thread::current().id(), caller);
            counter.set(counter.get() + 1);
            local.set(local.get() + 1);
            &text[..8]
        }
    });
    assert_eq!(output, "borrowed");
    assert_eq!(counter.get(), 2);
    assert_eq!(local.get(), 2);
}

/// `spawn` runs its factory synchronously on the calling thread and the factory has finished
/// before `spawn` returns, whether the caller is the root or a task on a dedicated thread.
#[runtime::test(worker_threads = 1)]
async fn spawn_runs_the_factory_synchronously_on_the_caller(context: Context) {
    let caller = thread::current().id();
    let (tx, rx) = mpsc::channel();
    let handle = context.clone().spawn(move |_| {
        tx.send(thread::current().id()).unwrap();
        async move { 1 }
    });
    // The factory already ran: its message is there without yielding.
    assert_eq!(rx.try_recv(), Ok(caller));
    assert_eq!(handle.await.unwrap(), 1);

    let parent = context.clone().dedicated().spawn(|context| async move {
        let caller = thread::current().id();
        let (tx, rx) = mpsc::channel();
        let child = context.spawn(move |_| {
            tx.send(thread::current().id()).unwrap();
            async move { 2 }
        });
        let factory_thread = rx.try_recv();
        (caller, factory_thread, child.await)
    });
    let (dedicated, factory_thread, child) = parent.await.unwrap();
    assert_eq!(factory_thread, Ok(dedicated));
    assert_eq!(child.unwrap(), 2);
}

/// A panic in a factory unwinds out of `spawn` into the caller, with its payload, under either
/// panic policy, and the caller can keep spawning afterwards.
#[test]
fn factory_panic_unwinds_into_the_caller_and_spawning_continues() {
    for catch in [false, true] {
        let (cfg, _storage) = config(1);
        let cfg = cfg.with_catch_panics(catch);
        let output = Runner::new(cfg).start(|context| async move {
            let spawner = context.clone();
            let caught = catch_unwind(AssertUnwindSafe(move || {
                spawner.spawn(|_| -> std::future::Ready<u32> { panic!("factory failed") })
            }));
            let payload = caught.expect_err("the factory panic must reach the caller");
            assert_eq!(panic_message(&*payload), "factory failed");
            context.spawn(|_| async move { 7 }).await.unwrap()
        });
        assert_eq!(output, 7, "catch_panics = {catch}");
    }
}

/// With one worker, ordinary tasks (default placement and `shared(false)`) run on the root's
/// thread.
#[test]
fn ordinary_tasks_run_on_the_root_thread_with_one_worker() {
    let (cfg, _storage) = config(1);
    Runner::new(cfg).start(|context| async move {
        let root = thread::current().id();
        let default = context
            .clone()
            .spawn(|_| async move { thread::current().id() });
        let shared = context
            .clone()
            .shared(false)
            .spawn(|_| async move { thread::current().id() });
        assert_eq!(default.await.unwrap(), root);
        assert_eq!(shared.await.unwrap(), root);
    });
}

/// `dedicated()` and `shared(true)` tasks each run on a new thread of their own (different from
/// the root's and from each other), placement is not inherited, and the ordinary children of
/// such a task run on the pool (with one worker: the root's thread).
#[test]
fn dedicated_and_blocking_tasks_get_own_threads_and_their_children_run_on_the_pool() {
    let (cfg, _storage) = config(1);
    Runner::new(cfg).start(|context| async move {
        let root = thread::current().id();
        let mut seen = HashSet::new();
        for dedicated in [true, false] {
            let spawner = if dedicated {
                context.clone().dedicated()
            } else {
                context.clone().shared(true)
            };
            let handle = spawner.spawn(|context| async move {
                let own = thread::current().id();
                let child = context
                    .clone()
                    .spawn(|_| async move { thread::current().id() })
                    .await
                    .unwrap();
                let nested = context
                    .dedicated()
                    .spawn(|_| async move { thread::current().id() })
                    .await
                    .unwrap();
                (own, child, nested)
            });
            let (own, child, nested) = handle.await.unwrap();
            assert_ne!(
                own, root,
                "dedicated = {dedicated}: task ran on the root thread"
            );
            assert_eq!(
                child, root,
                "dedicated = {dedicated}: ordinary child left the pool"
            );
            assert_ne!(nested, own);
            assert_ne!(nested, root);
            assert!(seen.insert(own), "threads must not be shared");
            assert!(seen.insert(nested), "threads must not be shared");
        }
    });
}

/// A blocking or dedicated task may block its thread on an ordinary child (a synchronous
/// `mpsc::recv`): the child runs on the pool meanwhile, so there is no deadlock.
#[test]
fn blocking_task_can_block_its_thread_on_an_ordinary_child() {
    let (cfg, _storage) = config(1);
    Runner::new(cfg).start(|context| async move {
        for dedicated in [false, true] {
            let spawner = if dedicated {
                context.clone().dedicated()
            } else {
                context.clone().shared(true)
            };
            let handle = spawner.spawn(|context| async move {
                let (tx, rx) = mpsc::channel();
                let _child = context.spawn(move |_| async move { tx.send(41).unwrap() });
                rx.recv_timeout(PROGRESS)
                    .expect("the ordinary child never ran")
                    + 1
            });
            assert_eq!(handle.await.unwrap(), 42, "dedicated = {dedicated}");
        }
    });
}

/// With 2 workers, many tasks spawned by a root all complete, using at most 2 threads.
#[test]
fn tasks_complete_on_at_most_the_configured_workers() {
    let (cfg, _storage) = config(2);
    assert_eq!(cfg.worker_threads(), 2);
    let threads = Runner::new(cfg).start(|context| async move {
        let handles: Vec<Handle<ThreadId>> = (0..12)
            .map(|_| {
                context.clone().spawn(|_| async move {
                    runtime::reschedule().await;
                    thread::current().id()
                })
            })
            .collect();
        let mut threads = HashSet::new();
        for handle in handles {
            threads.insert(handle.await.unwrap());
        }
        threads
    });
    assert!(
        (1..=2).contains(&threads.len()),
        "{} threads",
        threads.len()
    );
}

/// `abort()` makes a pending task's handle resolve to `Err(Error::Closed)`, and the task's
/// future is then dropped exactly once (by its next poll), with 1 and 2 workers.
#[test]
fn abort_closes_the_handle_and_drops_the_future() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        let drops = Arc::new(AtomicUsize::new(0));
        let observed = drops.clone();
        Runner::new(cfg).start(|context| async move {
            let (guard, dropped) = DropGuard::reporting(&observed);
            let (started_tx, started) = oneshot::channel();
            let handle = context.clone().spawn(move |context| async move {
                let _guard = guard;
                started_tx.send(()).unwrap();
                context.sleep(FOREVER).await;
                1
            });
            started.await.unwrap();
            handle.abort();
            assert_eq!(handle.await.unwrap_err(), Error::Closed);
            context
                .timeout(PROGRESS, dropped)
                .await
                .expect("the aborted future was never dropped")
                .unwrap();
        });
        assert_eq!(drops.load(Ordering::SeqCst), 1, "workers = {workers}");
    }
}

/// Dropping a handle detaches the task: it keeps running to completion.
#[test]
fn dropping_a_handle_detaches_the_task() {
    let (cfg, _storage) = config(1);
    let output = Runner::new(cfg).start(|context| async move {
        let (tx, rx) = oneshot::channel();
        drop(context.clone().spawn(move |context| async move {
            context.sleep(Duration::from_millis(1)).await;
            tx.send(5).unwrap();
        }));
        rx.await.unwrap()
    });
    assert_eq!(output, 5);
}

/// When a task finishes, its still-pending descendants (spawned from the context it received,
/// or from a `child` context of it) are aborted before its own handle resolves, with 1 and 2
/// workers.
#[test]
fn finished_task_aborts_its_pending_descendants_before_its_handle_resolves() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        Runner::new(cfg).start(|context| async move {
            let parent = context.clone().spawn(|context| async move {
                let direct = context
                    .clone()
                    .spawn(|context| async move { context.sleep(FOREVER).await });
                let scoped = context
                    .child("scoped")
                    .spawn(|context| async move { context.sleep(FOREVER).await });
                let remote = context
                    .dedicated()
                    .spawn(|context| async move { context.sleep(FOREVER).await });
                (direct, scoped, remote)
            });
            let (direct, scoped, remote) = parent.await.unwrap();
            // Already closed when the parent's handle resolved: no poll needed.
            assert_eq!(direct.now_or_never().unwrap().unwrap_err(), Error::Closed);
            assert_eq!(scoped.now_or_never().unwrap().unwrap_err(), Error::Closed);
            assert_eq!(remote.now_or_never().unwrap().unwrap_err(), Error::Closed);
            // Siblings still work.
            let sibling = context.spawn(|_| async move { 7 });
            assert_eq!(sibling.await.unwrap(), 7);
        });
    }
}

/// A context retained from a finished task (a `child` of its context) is closed before the
/// task's handle resolves: spawning on it gives an immediate `Err(Error::Closed)` and the factory
/// is never called, for every placement.
#[test]
fn retained_context_of_a_finished_task_refuses_spawns() {
    let (cfg, _storage) = config(1);
    Runner::new(cfg).start(|context| async move {
        let parent = context
            .clone()
            .spawn(|context| async move { context.child("retained") });
        let retained = parent.await.unwrap();
        let called = Arc::new(AtomicBool::new(false));
        for placement in 0..3 {
            let spawner = match placement {
                0 => retained.clone(),
                1 => retained.clone().dedicated(),
                _ => retained.clone().shared(true),
            };
            let flag = called.clone();
            let handle = spawner.spawn(move |_| {
                flag.store(true, Ordering::SeqCst);
                async move { 1 }
            });
            let result = handle
                .now_or_never()
                .expect("a refused handle is ready at once");
            assert_eq!(result.unwrap_err(), Error::Closed, "placement {placement}");
        }
        assert!(
            !called.load(Ordering::SeqCst),
            "a refused factory was called"
        );
        let running: Vec<_> = context
            .encode()
            .lines()
            .filter(|line| line.starts_with("runtime_tasks_running{") && line.contains("retained"))
            .map(str::to_string)
            .collect();
        assert!(!running.is_empty());
        assert!(
            running.iter().all(|line| line.ends_with(" 0")),
            "{running:?}"
        );
        // The finished parent no longer counts as running.
        assert!(
            context
                .encode()
                .contains(r#"runtime_tasks_running{name="",placement="shared"} 0"#)
        );
    });
}

/// Aborting a task aborts its descendants too: a child it spawned resolves to
/// `Err(Error::Closed)`.
#[test]
fn aborting_a_task_aborts_its_descendants() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        Runner::new(cfg).start(|context| async move {
            let (child_tx, child_rx) = oneshot::channel();
            let parent = context.clone().spawn(move |context| async move {
                let child = context
                    .clone()
                    .spawn(|context| async move { context.sleep(FOREVER).await });
                child_tx.send(child).unwrap();
                context.sleep(FOREVER).await;
            });
            let child = child_rx.await.unwrap();
            parent.abort();
            assert_eq!(parent.await.unwrap_err(), Error::Closed);
            let result = context
                .timeout(PROGRESS, child)
                .await
                .expect("the child of an aborted task stayed pending");
            assert_eq!(result.unwrap_err(), Error::Closed);
        });
    }
}

/// With `with_catch_panics(true)`, a panicking task's handle resolves to `Err(Error::Exited)`
/// and the runner carries on, for ordinary and dedicated tasks, with 1 and 2 workers.
#[test]
fn caught_task_panic_resolves_exited_and_runner_continues() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        let cfg = cfg.with_catch_panics(true);
        assert!(cfg.catch_panics());
        let output = Runner::new(cfg).start(|context| async move {
            let ordinary = context.clone().spawn(|context| async move {
                context.sleep(Duration::from_millis(1)).await;
                panic!("ordinary task failure");
            });
            assert_eq!(ordinary.await.unwrap_err(), Error::Exited);
            let dedicated = context
                .clone()
                .dedicated()
                .spawn(|_| async move { panic!("dedicated task failure") });
            assert_eq!(dedicated.await.unwrap_err(), Error::Exited);
            context.spawn(|_| async move { 7 }).await.unwrap()
        });
        assert_eq!(output, 7, "workers = {workers}");
    }
}

/// With panics not caught (the default), a task panic interrupts the pending root and `start`
/// panics with the task's payload, with 1 and 2 workers.
#[test]
fn uncaught_task_panic_fails_start() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        assert!(!cfg.catch_panics());
        let root_finished = Arc::new(AtomicBool::new(false));
        let finished = root_finished.clone();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            Runner::new(cfg).start(|context| async move {
                let _handle = context.clone().spawn(|_| async move {
                    runtime::reschedule().await;
                    panic!("task failure");
                });
                let _ = context
                    .timeout(PROGRESS, futures::future::pending::<()>())
                    .await;
                finished.store(true, Ordering::SeqCst);
            })
        }));
        let payload = outcome.expect_err("an uncaught task panic must fail start");
        assert_eq!(
            panic_message(&*payload),
            "task failure",
            "workers = {workers}"
        );
        assert!(
            !root_finished.load(Ordering::SeqCst),
            "the root was not interrupted"
        );
    }
}

/// `reschedule()` yields once behind queued work: with one worker, two tasks spawned from the
/// root, the first of which yields, run in the order first, second, first-again.
#[test]
fn reschedule_yields_behind_already_queued_work() {
    let (cfg, _storage) = config(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let log = order.clone();
    Runner::new(cfg).start(|context| async move {
        let first_log = log.clone();
        let first = context.clone().spawn(move |_| async move {
            first_log.lock().unwrap().push("first");
            runtime::reschedule().await;
            first_log.lock().unwrap().push("first-again");
        });
        let second_log = log.clone();
        let second = context.clone().spawn(move |_| async move {
            second_log.lock().unwrap().push("second");
        });
        first.await.unwrap();
        second.await.unwrap();
    });
    assert_eq!(
        *order.lock().unwrap(),
        vec!["first", "second", "first-again"]
    );
}

/// `sleep(d)` and `sleep_until(t)` complete, and not before their time has passed.
#[test]
fn sleep_and_sleep_until_wait_at_least_their_duration() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        Runner::new(cfg).start(|context| async move {
            let start = Instant::now();
            context.sleep(Duration::from_millis(20)).await;
            assert!(start.elapsed() >= Duration::from_millis(20));

            let start = Instant::now();
            let deadline = context.current() + Duration::from_millis(20);
            context.sleep_until(deadline).await;
            assert!(start.elapsed() >= Duration::from_millis(19));
            assert!(context.current() >= deadline);

            // A deadline in the past completes at once; a task can sleep too.
            context
                .sleep_until(context.current() - Duration::from_secs(1))
                .await;
            let task = context.clone().spawn(|context| async move {
                let start = Instant::now();
                context.sleep(Duration::from_millis(10)).await;
                start.elapsed()
            });
            assert!(task.await.unwrap() >= Duration::from_millis(10));
        });
    }
}

/// `timeout(d, fut)` gives `Err(Error::Timeout)` when `d` passes first, and `Ok(output)` when
/// the future finishes first.
#[runtime::test(worker_threads = 1)]
async fn timeout_expires_or_passes_the_output_through(context: Context) {
    let start = Instant::now();
    let expired = context
        .timeout(Duration::from_millis(10), futures::future::pending::<u32>())
        .await;
    assert_eq!(expired.unwrap_err(), Error::Timeout);
    assert!(start.elapsed() >= Duration::from_millis(10));

    let ready = context.timeout(PROGRESS, async { 5 }).await;
    assert_eq!(ready.unwrap(), 5);

    let task = context.clone().spawn(|context| async move {
        context.sleep(Duration::from_millis(1)).await;
        9
    });
    let joined = context.timeout(PROGRESS, task).await;
    assert_eq!(joined.unwrap().unwrap(), 9);
}

/// A sleep or timeout whose deadline lies past what time can represent means "never", as in
/// tokio: `sleep(Duration::MAX)`, `sleep(from_secs(u64::MAX))`, a far `sleep_until` and
/// `timeout(Duration::MAX, f)` neither panic nor end early, and the timeout passes `f`'s
/// output through.
#[runtime::test(worker_threads = 1)]
async fn deadlines_past_the_representable_range_mean_never(context: Context) {
    let far = context
        .current()
        .checked_add(Duration::from_secs(1 << 40))
        .expect("a representable far future");
    let mut never = [
        context.sleep(Duration::MAX).boxed(),
        context.sleep(Duration::from_secs(u64::MAX)).boxed(),
        context.sleep_until(far).boxed(),
    ];
    for sleep in &mut never {
        assert!(futures::poll!(sleep.as_mut()).is_pending());
    }
    // A real sleep ends while the endless ones are still pending.
    let raced = futures::future::select(
        futures::future::select_all(never),
        context.sleep(Duration::from_millis(5)).boxed(),
    )
    .await;
    assert!(
        matches!(raced, futures::future::Either::Right(_)),
        "an endless sleep ended"
    );

    assert_eq!(context.timeout(Duration::MAX, async { 5 }).await, Ok(5));
    let (sender, receiver) = oneshot::channel();
    let task = context.clone().spawn(move |context| async move {
        context.sleep(Duration::from_millis(1)).await;
        sender.send(9).unwrap();
    });
    assert_eq!(
        context.timeout(Duration::MAX, receiver).await.unwrap(),
        Ok(9)
    );
    task.await.unwrap();
}

/// `stop(value, timeout)` resolves every `stopped()` signal to the first value passed to stop
/// and returns `Ok` once every signal has been dropped; later stops keep the first value.
#[test]
fn stop_resolves_signals_and_waits_for_their_release() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        Runner::new(cfg).start(|context| async move {
            let (tx, rx) = mpsc::channel();
            let mut handles = Vec::new();
            for _ in 0..3 {
                let mut signal = context.stopped();
                let tx = tx.clone();
                let (started_tx, started) = oneshot::channel();
                handles.push(context.clone().spawn(move |_| async move {
                    started_tx.send(()).unwrap();
                    let value = (&mut signal).await;
                    tx.send(value).unwrap();
                    // Released only after the value was reported.
                    drop(signal);
                }));
                started.await.unwrap();
            }
            let stopped = context.clone().stop(3, Some(PROGRESS)).await;
            assert!(stopped.is_ok(), "{stopped:?}");
            // `stop` returned only after every signal was dropped, i.e. after each task sent.
            let values: Vec<i32> = rx.try_iter().collect();
            assert_eq!(values, vec![3, 3, 3]);
            for handle in handles {
                handle.await.unwrap();
            }
            // The first value wins; a fresh signal resolves at once.
            let again = context.clone().stop(4, Some(PROGRESS)).await;
            assert!(again.is_ok(), "{again:?}");
            assert_eq!(context.stopped().now_or_never(), Some(3));
        });
    }
}

/// `stop` with a timeout returns `Err(Error::Timeout)` while a signal is still held, and the
/// held signal has resolved to the stop value.
#[runtime::test(worker_threads = 1)]
async fn stop_times_out_while_a_signal_is_held(context: Context) {
    let mut held = context.stopped();
    assert!((&mut held).now_or_never().is_none(), "resolved before stop");
    let stopped = context
        .clone()
        .stop(9, Some(Duration::from_millis(10)))
        .await;
    assert_eq!(stopped.unwrap_err(), Error::Timeout);
    assert_eq!(held.now_or_never(), Some(9));
    let released = context.clone().stop(9, Some(PROGRESS)).await;
    assert!(released.is_ok(), "{released:?}");
}

/// `encode()` returns Prometheus text ending in `# EOF` with per-context task metrics:
/// `runtime_tasks_spawned_total{name,placement}` counts spawns and `runtime_tasks_running`
/// counts tasks alive now, named after the `child` label path and placement.
#[test]
fn encode_reports_task_metrics_by_label_and_placement() {
    let (cfg, _storage) = config(1);
    Runner::new(cfg).start(|context| async move {
        let scoped = context.child("metrics_probe");
        let (release_tx, release) = oneshot::channel::<()>();
        let (started_tx, started) = oneshot::channel();
        let pending = scoped.clone().spawn(move |_| async move {
            started_tx.send(()).unwrap();
            let _ = release.await;
        });
        for _ in 0..2 {
            scoped.clone().spawn(|_| async move {}).await.unwrap();
        }
        scoped
            .clone()
            .dedicated()
            .spawn(|_| async move {})
            .await
            .unwrap();
        started.await.unwrap();

        let text = context.encode();
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
        assert!(
            text.contains(
                r#"runtime_tasks_spawned_total{name="metrics_probe",placement="shared"} 3"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"runtime_tasks_spawned_total{name="metrics_probe",placement="dedicated"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"runtime_tasks_running{name="metrics_probe",placement="shared"} 1"#),
            "{text}"
        );

        release_tx.send(()).unwrap();
        pending.await.unwrap();
        let text = context.encode();
        assert!(
            text.contains(r#"runtime_tasks_running{name="metrics_probe",placement="shared"} 0"#),
            "{text}"
        );
    });
}

/// `child` labels nest with `_`, `with_attribute` adds a metric label, and `register` names a
/// user metric with the context's label path as prefix.
#[test]
fn register_prefixes_user_metrics_with_the_label_path() {
    let (cfg, _storage) = config(1);
    Runner::new(cfg).start(|context| async move {
        let nested = context.child("outer").child("inner");
        let counter = Counter::<u64>::default();
        nested.register("requests", "Requests served", counter.clone());
        counter.inc_by(3);
        let plain = Counter::<u64>::default();
        context.register("top_level", "Unprefixed at the root", plain.clone());
        plain.inc();

        nested
            .clone()
            .with_attribute("role", "probe")
            .spawn(|_| async move {})
            .await
            .unwrap();

        let text = context.encode();
        assert!(text.contains("outer_inner_requests_total 3"), "{text}");
        assert!(text.contains("# HELP outer_inner_requests Requests served"), "{text}");
        assert!(text.contains("\ntop_level_total 1"), "{text}");
        assert!(
            text.contains(
                r#"runtime_tasks_spawned_total{name="outer_inner",placement="shared",role="probe"} 1"#
            ),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    });
}

/// `extension` keeps one value per runner and type: made once by its first caller, the same
/// `Arc` for every context of the runner, a new one for another runner, and the metrics its
/// `init` registers are encoded under their own names.
#[test]
fn an_extension_is_made_once_per_runner_and_shared_by_its_contexts() {
    struct Families(Counter<u64>);
    let made = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (cfg, _storage) = config(2);
        let made = made.clone();
        Runner::new(cfg).start(|context| async move {
            let make = |made: Arc<AtomicUsize>| {
                move |registry: &mut prometheus_client::registry::Registry| {
                    made.fetch_add(1, Ordering::SeqCst);
                    let counter = Counter::<u64>::default();
                    registry.register("library_events", "Events of a library", counter.clone());
                    Families(counter)
                }
            };
            let first = context.extension(make(made.clone()));
            let child = context.child("elsewhere");
            let again = child
                .clone()
                .spawn({
                    let made = made.clone();
                    move |context| async move { context.extension(make(made)) }
                })
                .await
                .unwrap();
            assert!(Arc::ptr_eq(&first, &again), "one value per runner");
            again.0.inc_by(2);
            let text = context.encode();
            assert!(text.contains("\nlibrary_events_total 2"), "{text}");
        });
    }
    assert_eq!(made.load(Ordering::SeqCst), 2, "made once by each runner");
}

/// A `Context` moved to a foreign thread can spawn ordinary tasks that run on the pool (with one
/// worker: the root's thread); their handles can be awaited with `block_on`, and an aborted
/// pending task's handle resolves to `Err(Error::Closed)`, whether it was aborted while
/// suspended or before its first poll (then it is never polled).
#[test]
fn foreign_thread_context_spawns_awaits_and_aborts() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        Runner::new(cfg).start(|context| async move {
            let root = thread::current().id();
            let foreign_context = context.clone();
            let (done_tx, done) = oneshot::channel();
            let (aborted_tx, aborted_rx) = mpsc::channel();
            let polled = Arc::new(AtomicBool::new(false));
            let early_polled = polled.clone();
            let foreign = thread::spawn(move || {
                let foreign = thread::current().id();
                // Aborted at once, before any worker could poll it when the only worker is
                // held by the root below: its handle still resolves to `Closed`.
                let early = foreign_context.child("aborted").spawn(move |_| async move {
                    early_polled.store(true, Ordering::SeqCst);
                    futures::future::pending::<()>().await
                });
                early.abort();
                aborted_tx.send(()).unwrap();
                let early = futures::executor::block_on(early);
                let handle = foreign_context
                    .clone()
                    .spawn(|_| async move { (thread::current().id(), 21) });
                let (ran_on, value) = futures::executor::block_on(handle).unwrap();
                let (started_tx, started) = oneshot::channel();
                let pending = foreign_context.spawn(move |context| async move {
                    started_tx.send(()).unwrap();
                    context.sleep(FOREVER).await;
                });
                futures::executor::block_on(started).unwrap();
                pending.abort();
                let aborted = futures::executor::block_on(pending);
                done_tx
                    .send((foreign, ran_on, value, aborted, early))
                    .unwrap();
            });
            // Held synchronously: with one worker nothing polls the early task before its
            // abort.
            aborted_rx.recv_timeout(PROGRESS).unwrap();
            let (foreign_id, ran_on, value, aborted, early) = context
                .timeout(PROGRESS, done)
                .await
                .expect("the foreign thread made no progress")
                .unwrap();
            foreign.join().unwrap();
            assert_eq!(value, 21);
            assert_ne!(
                ran_on, foreign_id,
                "an ordinary task ran on the foreign thread"
            );
            if workers == 1 {
                assert_eq!(ran_on, root);
            }
            assert_eq!(aborted.unwrap_err(), Error::Closed);
            assert_eq!(early, Err(Error::Closed));
            if workers == 1 {
                assert!(!polled.load(Ordering::SeqCst), "the aborted task never ran");
            }
        });
    }
}

/// After `start` returns, handles that escaped it (pending ordinary, dedicated and blocking
/// tasks) are immediately `Err(Error::Closed)`, and every task future has been dropped once.
#[test]
fn escaped_handles_are_closed_after_start_returns() {
    for workers in [1, 2] {
        let (cfg, _storage) = config(workers);
        let drops = Arc::new(AtomicUsize::new(0));
        let observed = drops.clone();
        let handles = Runner::new(cfg).start(|context| async move {
            let mut handles = Vec::new();
            for placement in 0..3 {
                let spawner = match placement {
                    0 => context.clone(),
                    1 => context.clone().dedicated(),
                    _ => context.clone().shared(true),
                };
                let guard = DropGuard::new(&observed);
                let (started_tx, started) = oneshot::channel();
                handles.push(spawner.spawn(move |context| async move {
                    let _guard = guard;
                    started_tx.send(()).unwrap();
                    context.sleep(FOREVER).await;
                }));
                started.await.unwrap();
            }
            handles
        });
        assert_eq!(drops.load(Ordering::SeqCst), 3, "workers = {workers}");
        for handle in handles {
            assert_eq!(
                handle
                    .now_or_never()
                    .expect("escaped handle is pending")
                    .unwrap_err(),
                Error::Closed
            );
        }
    }
}

/// A context that escaped a finished runner refuses spawns: the handle is `Err(Error::Closed)`
/// and the factory is never called, for ordinary and blocking placement.
#[test]
fn context_of_a_finished_runner_refuses_spawns() {
    let (cfg, _storage) = config(1);
    let escaped = Runner::new(cfg).start(|context| async move { context });
    let called = Arc::new(AtomicBool::new(false));
    for blocking in [false, true] {
        let flag = called.clone();
        let handle = escaped.clone().shared(blocking).spawn(move |_| {
            flag.store(true, Ordering::SeqCst);
            async move { 1 }
        });
        let result = futures::executor::block_on(handle);
        assert_eq!(result.unwrap_err(), Error::Closed, "blocking = {blocking}");
    }
    assert!(!called.load(Ordering::SeqCst));
}

/// Every invalid setting makes `validate` panic with a message that names the setting first
/// and says what is allowed, and
/// `start` panic before it calls the root builder and before it creates the storage
/// directory. Each timeout is refused one nanosecond past `MAX_TIMEOUT`.
#[test]
fn invalid_config_panics_before_the_closure_and_the_storage_directory() {
    let spinner = SpinnerConfig {
        budget_us: 2,
        max_budget_us: 1,
        quick_wake_us: 0,
    };
    type Invalidate = fn(Config) -> Config;
    let invalid: Vec<(&str, &str, Invalidate)> = vec![
        ("zero workers", "worker_threads", |c| {
            c.with_worker_threads(0)
        }),
        ("too many workers", "worker_threads", |c| {
            c.with_worker_threads(MAX_WORKERS + 1)
        }),
        ("zero queue interval", "global_queue_interval", |c| {
            c.with_global_queue_interval(0)
        }),
        ("ring size 0", "ring_config.size", |c| {
            c.with_ring_config(RingConfig {
                size: 0,
                ..RingConfig::default()
            })
        }),
        ("ring size 32769", "ring_config.size", |c| {
            c.with_ring_config(RingConfig {
                size: 32_769,
                ..RingConfig::default()
            })
        }),
        ("ring size max", "ring_config.size", |c| {
            c.with_ring_config(RingConfig {
                size: u32::MAX,
                ..RingConfig::default()
            })
        }),
        ("zero tick", "ring_config.timeout_wheel_tick", |c| {
            c.with_ring_config(RingConfig {
                timeout_wheel_tick: Duration::ZERO,
                ..RingConfig::default()
            })
        }),
        ("1ns tick", "ring_config.timeout_wheel_tick", |c| {
            c.with_ring_config(RingConfig {
                timeout_wheel_tick: Duration::from_nanos(1),
                ..RingConfig::default()
            })
        }),
        ("max tick", "ring_config.timeout_wheel_tick", |c| {
            c.with_ring_config(RingConfig {
                timeout_wheel_tick: Duration::MAX,
                ..RingConfig::default()
            })
        }),
        (
            "receive buffers not a power of two",
            "ring_config.receive_buffers",
            |c| {
                c.with_ring_config(RingConfig {
                    receive_buffers: 3,
                    ..RingConfig::default()
                })
            },
        ),
        ("receive buffers max", "ring_config.receive_buffers", |c| {
            c.with_ring_config(RingConfig {
                receive_buffers: u16::MAX,
                ..RingConfig::default()
            })
        }),
        (
            "receive buffer size 0",
            "ring_config.receive_buffer_size",
            |c| {
                c.with_ring_config(RingConfig {
                    receive_buffer_size: 0,
                    ..RingConfig::default()
                })
            },
        ),
        (
            "receive buffer size 63",
            "ring_config.receive_buffer_size",
            |c| {
                c.with_ring_config(RingConfig {
                    receive_buffer_size: 63,
                    ..RingConfig::default()
                })
            },
        ),
        (
            "receive buffer size above 1 MiB",
            "ring_config.receive_buffer_size",
            |c| {
                c.with_ring_config(RingConfig {
                    receive_buffer_size: (1 << 20) + 1,
                    ..RingConfig::default()
                })
            },
        ),
        ("zero connect timeout", "connect_timeout", |c| {
            c.with_connect_timeout(Duration::ZERO)
        }),
        ("connect timeout above max", "connect_timeout", |c| {
            c.with_connect_timeout(TimeoutWheel::MAX_TIMEOUT + Duration::from_nanos(1))
        }),
        ("zero read/write timeout", "read_write_timeout", |c| {
            c.with_read_write_timeout(Duration::ZERO)
        }),
        ("read/write timeout above max", "read_write_timeout", |c| {
            c.with_read_write_timeout(TimeoutWheel::MAX_TIMEOUT + Duration::from_nanos(1))
        }),
    ];
    let mut cases: Vec<(String, &str, Config)> = invalid
        .into_iter()
        .map(|(name, field, apply)| (name.to_string(), field, apply(config(1).0)))
        .collect();
    cases.push((
        "spinner budget above max".into(),
        "idle_spinner.budget_us",
        config(1).0.with_idle_spinner(spinner),
    ));
    for (name, field, cfg) in cases {
        // `validate` itself refuses the setting, with a message that says so ...
        let mut direct = cfg.clone();
        let refused = catch_unwind(AssertUnwindSafe(|| direct.validate()));
        let Err(payload) = refused else {
            panic!("{name}: validate accepted an invalid config")
        };
        let message = payload
            .downcast::<String>()
            .map(|message| *message)
            .unwrap_or_else(|_| panic!("{name}: validate's panic carries no formatted message"));
        assert!(
            message.starts_with(&format!("invalid runtime configuration: {field}"))
                && message.contains("allowed"),
            "{name}: the message says what was wrong and what is allowed: {message}"
        );
        // ... and `start` refuses it before anything runs or touches the disk.
        let directory = cfg.storage_directory().clone();
        let _storage = Storage(directory.clone());
        let called = Arc::new(AtomicBool::new(false));
        let flag = called.clone();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            Runner::new(cfg).start(move |_| {
                flag.store(true, Ordering::SeqCst);
                async move {}
            })
        }));
        assert!(outcome.is_err(), "{name}: start accepted an invalid config");
        assert!(!called.load(Ordering::SeqCst), "{name}: closure was called");
        assert!(!directory.exists(), "{name}: storage directory was created");
    }
}

/// Boundary values are accepted, by `start` and by `validate` itself: both I/O timeouts at
/// exactly `MAX_TIMEOUT` with a one-hour tick, a ring size rounded up to a power of two, and a
/// global queue interval of 1. The defaults (two workers, interval 31) validate too.
#[test]
fn boundary_config_values_start() {
    let (cfg, _storage) = config(2);
    let cfg = cfg
        .with_connect_timeout(TimeoutWheel::MAX_TIMEOUT)
        .with_read_write_timeout(TimeoutWheel::MAX_TIMEOUT)
        .with_ring_config(RingConfig {
            size: 3,
            timeout_wheel_tick: Duration::from_secs(3600),
            receive_buffers: 32_768,
            receive_buffer_size: 64,
        })
        .with_global_queue_interval(1);
    assert_eq!(cfg.global_queue_interval(), 1);
    let directory = cfg.storage_directory().clone();
    let output = Runner::new(cfg).start(|context| async move {
        assert!(
            directory.is_dir(),
            "the storage directory exists while running"
        );
        context.spawn(|_| async move { 3 }).await.unwrap()
    });
    assert_eq!(output, 3);

    let mut defaults = Config::default();
    assert_eq!(defaults.worker_threads(), 2);
    assert_eq!(defaults.global_queue_interval(), 31);
    assert!(!defaults.catch_panics());
    defaults.validate();

    // The same boundary values pass `validate` itself, not only `start`.
    let mut boundary = config(1)
        .0
        .with_connect_timeout(TimeoutWheel::MAX_TIMEOUT)
        .with_read_write_timeout(TimeoutWheel::MAX_TIMEOUT)
        .with_ring_config(RingConfig {
            timeout_wheel_tick: Duration::from_secs(3600),
            ..RingConfig::default()
        });
    boundary.validate();
}

/// A second runner using the storage directory of a running one panics before calling its
/// closure; the outer runner keeps spawning and sleeping, and the directory is free again once
/// the outer runner has returned.
#[test]
fn second_runner_on_a_used_storage_directory_is_rejected() {
    let (cfg, _storage) = config(1);
    let directory = cfg.storage_directory().clone();
    let inner_directory = directory.clone();
    let from_thread = directory.clone();
    let output = Runner::new(cfg).start(|context| async move {
        let called = Arc::new(AtomicBool::new(false));
        let flag = called.clone();
        let nested = catch_unwind(AssertUnwindSafe(|| {
            let (inner, _) = config(1);
            Runner::new(inner.with_storage_directory(inner_directory)).start(move |_| {
                flag.store(true, Ordering::SeqCst);
                async move {}
            })
        }));
        assert!(
            nested.is_err(),
            "a second runner shared the storage directory"
        );
        assert!(
            !called.load(Ordering::SeqCst),
            "the nested closure was called"
        );

        // The same from another thread, while this runner still holds the directory.
        let (tx, rx) = oneshot::channel();
        let other = thread::spawn(move || {
            let outcome = catch_unwind(|| {
                let (inner, _) = config(1);
                Runner::new(inner.with_storage_directory(from_thread)).start(|_| async move {})
            });
            tx.send(outcome.is_err()).unwrap();
        });
        assert!(
            rx.await.unwrap(),
            "a runner on another thread shared the directory"
        );
        other.join().unwrap();

        context.sleep(Duration::from_millis(1)).await;
        context.spawn(|_| async move { 7 }).await.unwrap()
    });
    assert_eq!(output, 7);

    let (again, _) = config(1);
    let reused = Runner::new(again.with_storage_directory(directory))
        .start(|context| async move { context.spawn(|_| async move { 8 }).await.unwrap() });
    assert_eq!(reused, 8);
}
