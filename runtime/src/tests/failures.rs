//! Worker startup and launch failures, driver service failures, and how each is routed.

use super::*;
use crate::hooks::{Fault, STARTUP_FAILURE, inject};
use crate::runner::{POOL_LAUNCH, POOL_LAUNCH_FAILURE, PoolLaunch};

/// A dedicated or blocking worker whose ring cannot be created: its handle is `Closed` and its
/// payload is dropped once, never polled. Caught, the runner carries on: a sibling spawned
/// after the failure runs and its output (11) is the root's. Uncaught, the failure interrupts
/// the root (left pending for it) with the io error.
#[test]
fn worker_startup_failure_uses_configured_panic_policy() {
    for catch in [true, false] {
        for mode in Mode::THREADED {
            let config = config().with_catch_panics(catch);
            inject(config.storage_directory(), Fault::DedicatedStartup);
            let drops = Drops::default();
            let polled = Arc::new(AtomicBool::new(false));
            let result = catch_unwind(AssertUnwindSafe(|| {
                Runner::new(config).start(|context| {
                    let (drops, polled) = (drops.clone(), polled.clone());
                    async move {
                        let guard = drops.guard();
                        let handle = mode.place(context.clone()).spawn(move |_| async move {
                            polled.store(true, Ordering::SeqCst);
                            let _guard = guard;
                        });
                        assert_eq!(handle.await, Err(Error::Closed));
                        if !catch {
                            // Only the failure can end the root now.
                            futures::future::pending::<()>().await;
                        }
                        context
                            .child("sibling")
                            .spawn(|_| async { 11 })
                            .await
                            .unwrap()
                    }
                })
            }));
            assert_eq!(drops.count(), 1, "the payload is dropped once");
            assert!(
                !polled.load(Ordering::SeqCst),
                "the payload is never polled"
            );
            if catch {
                assert_eq!(result.ok(), Some(11));
            } else {
                let text = panic_text(result);
                assert!(text.contains(STARTUP_FAILURE), "{text}");
                assert!(
                    text.contains("failed to create native io_uring worker"),
                    "{text}"
                );
            }
        }
    }
}

/// A pool whose third worker's thread cannot be launched, or whose third worker's ring cannot
/// be created, fails `start` whatever the panic policy: the builder is never called, the
/// workers that started are stopped and joined, the runner's shared services are released,
/// and the pool is left closed with a clean idle state, held by nobody else and with no task
/// cell left (no strong or weak reference but the test's).
#[test]
fn partial_startup_failure_releases_all_workers() {
    for launch in [false, true] {
        for catch in [false, true] {
            let case = format!("launch={launch} catch={catch}");
            let config = config().with_worker_threads(4).with_catch_panics(catch);
            if !launch {
                inject(config.storage_directory(), Fault::PoolStartup(2));
            }
            POOL_LAUNCH.with(|slot| {
                *slot.borrow_mut() = Some(PoolLaunch {
                    fail_at: launch.then_some(2),
                    ..PoolLaunch::default()
                })
            });
            let called = Arc::new(AtomicBool::new(false));
            let flag = called.clone();
            let result = catch_unwind(AssertUnwindSafe(|| {
                Runner::new(config).start(move |_| {
                    flag.store(true, Ordering::SeqCst);
                    async {}
                })
            }));
            let text = panic_text(result);
            if launch {
                assert!(text.contains("failed to spawn thread"), "{case}: {text}");
                assert!(text.contains(POOL_LAUNCH_FAILURE), "{case}: {text}");
            } else {
                assert!(text.contains(STARTUP_FAILURE), "{case}: {text}");
            }
            assert!(
                !called.load(Ordering::SeqCst),
                "{case}: the builder was called"
            );
            assert!(tls_cleared(), "{case}");
            let recorded = POOL_LAUNCH
                .with(|slot| slot.borrow_mut().take())
                .expect("armed above");
            assert!(
                recorded.fail_at.is_none(),
                "{case}: the startup reached the failing launch"
            );
            assert!(
                recorded.shared.upgrade().is_none(),
                "{case}: the runner's shared services are released"
            );
            let pool = recorded.pool.expect("the runner launched pool workers");
            assert!(
                pool.is_clean(),
                "{case}: the pool is closed and every worker left the idle set"
            );
            assert_eq!(
                Arc::strong_count(&pool),
                1,
                "{case}: the runner and its workers released the pool"
            );
            assert_eq!(Arc::weak_count(&pool), 0, "{case}: no task cell is left");
        }
    }
}

/// A thread that cannot be created for a dedicated or blocking spawn: the payload is dropped
/// once, never polled, while the reservation is still counted and the registry unlocked, then
/// the reservation is released, and `spawn` panics in its caller. A payload destructor that
/// panics too still yields a single panic, and the runner keeps running.
#[test]
fn creation_failure_destroys_payload_before_releasing_tracking() {
    for (explode, mode) in [false, true]
        .into_iter()
        .flat_map(|explode| Mode::THREADED.map(|mode| (explode, mode)))
    {
        let config = config();
        let directory = config.storage_directory().clone();
        Runner::new(config).start(|context| async move {
            struct Payload(
                Arc<crate::worker::dedicated::registry::ThreadRegistry>,
                Drops,
                bool,
            );
            impl Drop for Payload {
                fn drop(&mut self) {
                    // The registry is not locked (try_lock succeeds) and still counts us.
                    let state = self.0.state.try_lock().expect("registry unlocked");
                    assert_eq!(state.active, 1);
                    drop(state);
                    self.1.0.fetch_add(1, Ordering::SeqCst);
                    if self.2 {
                        panic!("payload destructor failure");
                    }
                }
            }
            let drops = Drops::default();
            let payload = Payload(context.runtime().workers.clone(), drops.clone(), explode);
            let polled = Arc::new(AtomicBool::new(false));
            inject(&directory, Fault::Launch);
            let result = catch_unwind(AssertUnwindSafe(|| {
                let polled = polled.clone();
                mode.place(context.clone()).spawn(move |_| async move {
                    polled.store(true, Ordering::SeqCst);
                    let _payload = payload;
                })
            }));
            let text = panic_text(result);
            assert!(text.contains("failed to spawn thread"), "{text}");
            assert_eq!(drops.count(), 1);
            assert!(
                !polled.load(Ordering::SeqCst),
                "a payload whose thread never started is never polled"
            );
            assert_eq!(context.runtime().workers.state.lock().active, 0);
            assert_eq!(context.clone().spawn(|_| async { 7 }).await, Ok(7));
        });
    }
}

/// A launch failure inside a task whose panics are caught panics only that task.
#[test]
fn creation_failure_in_caught_task_leaves_runner_usable() {
    for caller in [Mode::Default, Mode::Dedicated] {
        let config = config().with_catch_panics(true);
        let directory = config.storage_directory().clone();
        let output = Runner::new(config).start(|context| async move {
            let handle = caller
                .place(context.clone())
                .spawn(move |context| async move {
                    inject(&directory, Fault::Launch);
                    drop(context.shared(true).spawn(|_| async {}));
                });
            assert_eq!(handle.await, Err(Error::Exited));
            context.spawn(|_| async { 7 }).await.unwrap()
        });
        assert_eq!(output, 7);
    }
}

/// A failure of worker zero's ring service fails `start` with "io_uring driver service
/// failed" and the cause, before the root sees the completion that service reaped: the root
/// polls an operation that escapes into the test with its own waker on every poll, and every
/// such poll is `Pending`. The escaped operation is safe to drop afterwards.
#[test]
fn service_error_preserves_completions_before_cleanup() {
    let (read, write) = pipe();
    let escaped = Arc::new(Mutex::new(None));
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config()).start(|_| {
            let escaped = escaped.clone();
            async move {
                *escaped.lock().unwrap() = Some(Operation::register(Request::Read {
                    fd: read.clone(),
                    len: 4,
                }));
                fail_next_service();
                // A completion for the next service to reap: the read is registered at the
                // first poll below, and the bytes are already there.
                write_ping(&write);
                // Had the failed service delivered the completion, its wake would poll the
                // root again and that poll would find the read ready.
                futures::future::poll_fn(|cx| {
                    let mut escaped = escaped.lock().unwrap();
                    let operation = escaped.as_mut().expect("the operation escaped");
                    assert!(
                        operation.poll_unpin(cx).is_pending(),
                        "the root never sees the completion of the failed service"
                    );
                    Poll::<()>::Pending
                })
                .await
            }
        })
    }));
    let text = panic_text(result);
    assert!(text.contains("io_uring driver service failed"), "{text}");
    assert!(
        text.contains("injected service failure after completion"),
        "{text}"
    );
    drop(escaped.lock().unwrap().take());
    assert!(tls_cleared());
}

/// A ring service failure on a pool worker is a worker failure: it interrupts the root even
/// when task panics are caught, before the root's code resumes (the root, pending once with no
/// wake of its own, is polled again only for the failure). The pool still ends clean, released
/// by every worker and with no task cell left.
#[test]
fn remote_driver_failure_interrupts_root_even_when_task_panics_are_caught() {
    let (read, write) = pipe();
    let resumed = Arc::new(AtomicBool::new(false));
    let kept = Arc::new(Mutex::new(None));
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config().with_worker_threads(2).with_catch_panics(true)).start(|context| {
            let (resumed, kept) = (resumed.clone(), kept.clone());
            async move {
                *kept.lock().unwrap() = Some(context.runtime().pool.clone());
                // Worker zero stays busy with the root (blocked below) so that the foreign
                // spawn claims parked worker one.
                let (tx, rx) = mpsc::channel();
                spawn_on_worker_one(&context, move |_| async move {
                    fail_next_service();
                    let operation = Operation::register(Request::Read { fd: read, len: 4 });
                    tx.send(()).unwrap();
                    drop(operation.await);
                });
                rx.recv_timeout(TEST_TIMEOUT)
                    .expect("worker one must register its read");
                write_ping(&write);
                // Pending once without waking itself: only the failure polls the root again,
                // and that poll must end it before the code below runs.
                super::pool::pending_once_unwoken().await;
                resumed.store(true, Ordering::SeqCst);
            }
        })
    }));
    let text = panic_text(result);
    assert!(
        text.contains("injected service failure after completion"),
        "{text}"
    );
    assert!(
        !resumed.load(Ordering::SeqCst),
        "the root must not resume after the failure"
    );
    assert!(tls_cleared());
    let pool: Arc<crate::pool::Pool> = kept.lock().unwrap().take().expect("a pool was kept");
    assert!(
        pool.is_clean(),
        "every worker left the idle set with its counts returned"
    );
    assert_eq!(Arc::strong_count(&pool), 1, "the runner released its pool");
    assert_eq!(Arc::weak_count(&pool), 0, "every task cell was freed");
}

/// Child-process plumbing for `startup_failure_is_reported_once`.
const CASE: &str = "RUNTIME_STARTUP_FAILURE_CASE";

/// Each startup failure is printed once, by the panic hook where it happens, and carried to
/// the runner without printing again.
#[test]
fn startup_failure_is_reported_once() {
    if let Ok(case) = std::env::var(CASE) {
        run_startup_failure_case(&case);
        return;
    }
    let executable = std::env::current_exe().unwrap();
    for case in [
        "worker_zero",
        "pool_worker",
        "dedicated",
        "dedicated_caught",
        "blocking",
    ] {
        let output = std::process::Command::new(&executable)
            .args([
                "tests::failures::startup_failure_is_reported_once",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CASE, case)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "case {case} failed:\n{stderr}");
        assert_eq!(
            stderr
                .matches("failed to create native io_uring worker")
                .count(),
            1,
            "case {case}:\n{stderr}"
        );
    }
}

fn run_startup_failure_case(case: &str) {
    let config = config().with_catch_panics(case == "dedicated_caught");
    let result = match case {
        "worker_zero" => {
            FAIL_STARTUP.with(|fail| *fail.borrow_mut() = Some(STARTUP_FAILURE.into()));
            catch_unwind(AssertUnwindSafe(|| Runner::new(config).start(|_| async {})))
        }
        "pool_worker" => {
            let config = config.with_worker_threads(2);
            inject(config.storage_directory(), Fault::PoolStartup(1));
            catch_unwind(AssertUnwindSafe(|| Runner::new(config).start(|_| async {})))
        }
        _ => {
            inject(config.storage_directory(), Fault::DedicatedStartup);
            let blocking = case == "blocking";
            let caught = case == "dedicated_caught";
            catch_unwind(AssertUnwindSafe(|| {
                Runner::new(config).start(|context| async move {
                    let context = if blocking {
                        context.shared(true)
                    } else {
                        context.dedicated()
                    };
                    assert_eq!(context.spawn(|_| async {}).await, Err(Error::Closed));
                    if !caught {
                        // Uncaught, the failure interrupts the root here.
                        futures::future::pending::<()>().await
                    }
                })
            }))
        }
    };
    if case == "dedicated_caught" {
        assert!(
            result.is_ok(),
            "a caught startup failure does not fail the runner"
        );
    } else {
        assert!(panic_text(result).contains(STARTUP_FAILURE));
    }
}
