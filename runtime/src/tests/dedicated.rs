//! Dedicated and blocking workers: the registry lease that covers a spawn from its factory to
//! its worker's last cleanup step, launch and startup failures with payloads that misbehave,
//! and what a finishing worker does to the registrations it owns.

use super::*;
use crate::RingConfig;
use crate::hooks::{AFTER_RELEASE, Fault, STARTUP_FAILURE, inject};
use crate::worker::dedicated::registry::ThreadRegistry;
use futures::future::{pending, poll_fn};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::task::Wake;

/// Waits, yielding to the runtime, until no dedicated or blocking lease is outstanding. A
/// handle resolves inside the task's final poll, before its worker has cleaned up.
async fn leases_released(context: &Context) {
    yield_until(|| context.runtime().workers.state.lock().active == 0).await
}

/// A never-polled payload that records its drop, checks that the registry still counts its
/// lease and is unlocked while it drops, and may panic there.
struct RejectedPayload {
    workers: Arc<ThreadRegistry>,
    drops: Drops,
    explode: bool,
}

impl Drop for RejectedPayload {
    fn drop(&mut self) {
        let state = self.workers.state.try_lock().expect("registry unlocked");
        assert_eq!(state.active, 1, "the lease outlives the payload");
        drop(state);
        self.drops.0.fetch_add(1, Ordering::SeqCst);
        if self.explode {
            panic!("rejected payload destructor failure");
        }
    }
}

/// A dedicated or blocking spawn whose factory is still running on a foreign thread when the
/// runner shuts down holds its lease through it: shutdown closes the registry and waits. When
/// the factory returns, publication is refused: the future is dropped unpolled, then the lease
/// is released, and the handle is `Closed`.
#[test]
fn dedicated_reservation_covers_factory_construction_through_shutdown() {
    /// Reports when shutdown destroys the ordinary task holding it.
    struct Closing(mpsc::Sender<()>);
    impl Drop for Closing {
        fn drop(&mut self) {
            self.0.send(()).unwrap();
        }
    }

    for mode in Mode::THREADED {
        let drops = Drops::default();
        let polled = Arc::new(AtomicBool::new(false));
        let (metadata, received) = mpsc::channel();
        let (closing, closed) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let payload = drops.guard();
        let future_polled = polled.clone();
        let runner = thread::spawn(move || {
            Runner::new(config()).start(move |context| async move {
                // Ordinary tasks are destroyed after the registry closes: this one's drop
                // tells the test that shutdown is under way.
                let closing = Closing(closing);
                drop(context.clone().spawn(move |_| async move {
                    let _closing = closing;
                    pending::<()>().await
                }));
                let registry = context.runtime().workers.clone();
                let (entered, entering) = oneshot::channel();
                let child = mode.place(context.clone());
                let publisher = thread::spawn(move || {
                    child.spawn(move |_| {
                        entered.send(()).unwrap();
                        released.recv_timeout(TEST_TIMEOUT).unwrap();
                        async move {
                            let _payload = payload;
                            future_polled.store(true, Ordering::SeqCst);
                        }
                    })
                });
                entering.await.unwrap();
                metadata.send((registry, publisher)).unwrap();
            })
        });

        let (registry, publisher) = received.recv_timeout(TEST_TIMEOUT).unwrap();
        closed.recv_timeout(TEST_TIMEOUT).unwrap();
        assert!(registry.state.lock().closed);
        assert_eq!(registry.state.lock().active, 1);
        assert!(!runner.is_finished(), "shutdown waits for the lease");
        assert_eq!(drops.count(), 0);

        release.send(()).unwrap();
        let handle = publisher.join().unwrap();
        runner.join().unwrap();
        assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
        assert_eq!(registry.state.lock().active, 0);
        assert_eq!(drops.count(), 1);
        assert!(!polled.load(Ordering::SeqCst));
    }
}

/// A factory that panics: the panic reaches the caller with its payload under either policy,
/// the spawn stays counted, its running metric is finished at once, and a dedicated or
/// blocking spawn's lease, held (unlocked) while the factory ran, is released.
#[test]
fn factory_panic_finishes_metrics_and_releases_reservation() {
    for catch in [false, true] {
        Runner::new(config().with_catch_panics(catch)).start(|context| async move {
            for (mode, placement, leased) in [
                (Mode::Default, "shared", 0),
                (Mode::Dedicated, "dedicated", 1),
                (Mode::Blocking, "blocking", 1),
            ] {
                let scope = mode.place(context.child("factory"));
                let registry = context.runtime().workers.clone();
                let observed = Arc::new(Mutex::new(String::new()));
                let seen = observed.clone();
                let inner = scope.clone();
                let result = catch_unwind(AssertUnwindSafe(|| {
                    scope.spawn(move |_| -> std::future::Ready<()> {
                        let active = registry.state.try_lock().expect("registry unlocked").active;
                        assert_eq!(active, leased);
                        *seen.lock().unwrap() = inner.encode();
                        panic!("factory failed")
                    })
                }));
                // The caller gets the factory's own payload, not a copy re-raised as text.
                let Err(payload) = result else {
                    panic!("the factory's panic reaches the caller")
                };
                assert_eq!(payload.downcast_ref::<&str>(), Some(&"factory failed"));
                let running =
                    format!("runtime_tasks_running{{name=\"factory\",placement=\"{placement}\"}}");
                let spawned = format!(
                    "runtime_tasks_spawned_total{{name=\"factory\",placement=\"{placement}\"}} 1"
                );
                let during = observed.lock().unwrap().clone();
                assert!(during.contains(&format!("{running} 1")), "{during}");
                let after = context.encode();
                assert!(after.contains(&format!("{running} 0")), "{after}");
                assert!(after.contains(&spawned), "{after}");
                assert_eq!(context.runtime().workers.state.lock().active, 0);
                assert_eq!(context.clone().spawn(|_| async { 7 }).await, Ok(7));
            }
        });
    }
}

/// A rejected payload whose destructor spawns another blocking worker while the launch
/// failure disposes of it: the registry is unlocked by then, so nothing deadlocks; the payload
/// drops once and the launch failure unwinds out of `spawn`, the root and `start`.
#[test]
fn launch_failure_destroys_reentrant_payload_after_unlocking_registry() {
    struct ReentrantDrop {
        context: Option<Context>,
        drops: Drops,
    }
    impl Drop for ReentrantDrop {
        fn drop(&mut self) {
            self.drops.0.fetch_add(1, Ordering::SeqCst);
            let context = self.context.take().expect("dropped once");
            drop(context.shared(true).spawn(|_| async {}));
        }
    }

    let drops = Drops::default();
    let config = config();
    let directory = config.storage_directory().clone();
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config).start(|context| {
            let drops = drops.clone();
            async move {
                let payload = ReentrantDrop {
                    context: Some(context.child("reentrant")),
                    drops,
                };
                inject(&directory, Fault::Launch);
                drop(context.shared(true).spawn(move |_| async move {
                    let _payload = payload;
                }));
            }
        })
    }));
    let text = panic_text(result);
    assert!(text.contains("failed to spawn thread"), "{text}");
    assert_eq!(drops.count(), 1);
}

/// A blocking worker that fails at startup while its payload's destructor panics: the payload
/// drops once, with the lease still counted and the registry unlocked; the destructor's panic
/// is contained, and the runner fails with the startup error.
#[test]
fn startup_failure_survives_rejected_payload_destructor_panic() {
    let drops = Drops::default();
    let config = config().with_catch_panics(false);
    inject(config.storage_directory(), Fault::DedicatedStartup);
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config).start(|context| {
            let drops = drops.clone();
            async move {
                let payload = RejectedPayload {
                    workers: context.runtime().workers.clone(),
                    drops,
                    explode: true,
                };
                drop(context.shared(true).spawn(move |_| async move {
                    let _payload = payload;
                }));
                pending::<()>().await
            }
        })
    }));
    let text = panic_text(result);
    assert!(text.contains(STARTUP_FAILURE), "{text}");
    assert!(
        text.contains("failed to create native io_uring worker"),
        "{text}"
    );
    assert_eq!(drops.count(), 1);
}

/// A finished dedicated worker leaves the shared registry open: a later sibling and a
/// dedicated task nested in it still spawn.
#[test]
fn completed_dedicated_worker_does_not_close_sibling_registry() {
    Runner::new(config()).start(|context| async move {
        context
            .child("first")
            .dedicated()
            .spawn(|_| async {})
            .await
            .unwrap();
        leases_released(&context).await;
        let nested = context
            .child("second")
            .dedicated()
            .spawn(|context| async move {
                context
                    .child("nested")
                    .dedicated()
                    .spawn(|_| async { 11 })
                    .await
                    .unwrap()
            })
            .await;
        assert_eq!(nested, Ok(11));
        assert!(!context.runtime().workers.state.lock().closed);
    });
}

/// Counts wakes, without ever polling anything.
struct Counter(AtomicUsize);
impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A registration first polled on a dedicated worker lives there. Observed through
/// `futures::Shared`, a second observer registers while the first poll is still running; when
/// the worker exits, it closes the registration and wakes that observer, whose next poll sees
/// the closure: an accept reports an error, a sleep panics. If the observer was dropped first,
/// the exiting worker drops the last clone itself, finishes its cleanup, and wakes nobody.
#[test]
fn worker_closure_wakes_shared_observers_before_forwarding() {
    for timer in [false, true] {
        for cancel in [false, true] {
            Runner::new(config()).start(|context| async move {
                let mut future = if timer {
                    let sleep = context.sleep(Duration::from_secs(60));
                    async move {
                        sleep.await;
                        Ok(())
                    }
                    .boxed()
                } else {
                    let address = "127.0.0.1:0".parse().unwrap();
                    let mut listener = context.bind(address).await.unwrap();
                    async move {
                        listener
                            .accept()
                            .await
                            .map(drop)
                            .map_err(|error| error.to_string())
                    }
                    .boxed()
                };

                // The first inner poll (on the dedicated worker) stays open until released,
                // so another observer registers without polling the inner future.
                let (entered, ready) = oneshot::channel();
                let mut entered = Some(entered);
                let (release, wait) = mpsc::channel::<()>();
                let polls = Arc::new(AtomicUsize::new(0));
                let inner_polls = polls.clone();
                let shared = poll_fn(move |cx| {
                    inner_polls.fetch_add(1, Ordering::SeqCst);
                    let result = future.as_mut().poll(cx);
                    if let Some(entered) = entered.take() {
                        assert!(result.is_pending());
                        entered.send(()).unwrap();
                        let _ = wait.recv_timeout(TEST_TIMEOUT);
                    }
                    result
                })
                .boxed()
                .shared();

                let mut source = shared.clone();
                let task = context.clone().dedicated().spawn(move |_| async move {
                    assert!(futures::poll!(&mut source).is_pending());
                });
                ready.await.unwrap();

                let counter = Arc::new(Counter(AtomicUsize::new(0)));
                let waker = Waker::from(counter.clone());
                let mut observer = shared;
                assert!(
                    observer
                        .poll_unpin(&mut TaskContext::from_waker(&waker))
                        .is_pending()
                );
                assert_eq!(polls.load(Ordering::SeqCst), 1);
                assert_eq!(counter.0.load(Ordering::SeqCst), 0);

                let mut observer = (!cancel).then_some(observer);
                release.send(()).unwrap();
                task.await.unwrap();
                leases_released(&context).await;

                match &mut observer {
                    Some(observer) => {
                        assert!(
                            counter.0.load(Ordering::SeqCst) > 0,
                            "closure woke the observer (timer: {timer})"
                        );
                        let polled = catch_unwind(AssertUnwindSafe(|| {
                            observer.poll_unpin(&mut TaskContext::from_waker(&waker))
                        }));
                        if timer {
                            let text = panic_text(polled);
                            assert!(text.contains("polled after its worker closed"), "{text}");
                        } else {
                            assert!(matches!(polled, Ok(Poll::Ready(Err(_)))));
                        }
                    }
                    None => assert_eq!(counter.0.load(Ordering::SeqCst), 0),
                }
            });
        }
    }
}

/// A dedicated worker finishes its orphaned durable writes (queued behind a one-slot ring)
/// and drops every reference to the runner before it releases its lease: when the lease is
/// gone, with the thread's own locals still alive, the runner's shared state is freed, every
/// write is on disk, and the storage directory's lock is free.
#[test]
fn worker_releases_the_runner_and_durable_io_before_tracking_ends() {
    let directory = Config::new().storage_directory().clone();
    let config = config()
        .with_storage_directory(&directory)
        .with_ring_config(RingConfig {
            size: 1,
            ..RingConfig::default()
        });
    let path = directory.join("retained");
    let (released, after_release) = mpsc::channel();
    let (finish, finished) = mpsc::channel::<()>();
    let (shared, registry) = Runner::new(config).start(|context| {
        let path = path.clone();
        async move {
            let shared = Arc::downgrade(context.runtime());
            let registry = context.runtime().workers.clone();
            context
                .clone()
                .dedicated()
                .spawn(move |_| async move {
                    AFTER_RELEASE.with(|hook| {
                        *hook.borrow_mut() = Some(Box::new(move || {
                            released.send(()).unwrap();
                            let _ = finished.recv_timeout(TEST_TIMEOUT);
                        }))
                    });
                    let file = Arc::new(OwnedFd::from(File::create(&path).unwrap()));
                    for offset in 0..8_u8 {
                        let mut write = Operation::register(Request::Write {
                            fd: file.clone(),
                            offset: offset.into(),
                            bufs: vec![b'a' + offset].into(),
                            sync: true,
                        });
                        // Registered, then dropped unobserved: the worker must finish it.
                        let noop = &mut TaskContext::from_waker(Waker::noop());
                        assert!(write.poll_unpin(noop).is_pending());
                    }
                })
                .await
                .unwrap();
            (shared, registry)
        }
    });

    // `start` waited for the lease: the writes are done and the runner is gone already.
    assert_eq!(std::fs::read(&path).unwrap(), b"abcdefgh");
    assert!(shared.upgrade().is_none(), "the worker released the runner");
    after_release.recv_timeout(TEST_TIMEOUT).unwrap();
    assert_eq!(registry.state.lock().active, 0);
    assert!(shared.upgrade().is_none(), "the worker released the runner");
    let contender = assert_storage_lock_free(&directory);
    assert_eq!(std::fs::read(&path).unwrap(), b"abcdefgh");
    finish.send(()).unwrap();
    drop(contender);
    std::fs::remove_dir_all(&directory).unwrap();
}

/// Waits, yielding to the runtime, until `count` blocking threads are parked.
async fn parked(context: &Context, count: usize) {
    yield_until(|| context.runtime().workers.parked_threads() == count).await
}

/// A finished blocking task's thread parks with its drained ring and runs the next blocking
/// task, which gets a fresh worker: a sleep the first task left registered is closed, and the
/// second task's own sleeps work. A dedicated task never reuses a thread.
#[test]
fn blocking_threads_are_reused_with_a_fresh_worker_per_task() {
    Runner::new(config()).start(|context| async move {
        let first = context
            .clone()
            .shared(true)
            .spawn(|_| async {
                let sleep = registered_sleep(Duration::from_secs(3600), Waker::noop());
                (thread::current().id(), sleep)
            })
            .await
            .unwrap();
        let (first_thread, mut escaped) = first;
        parked(&context, 1).await;

        let second = context
            .clone()
            .shared(true)
            .spawn(|context| async move {
                context.sleep(Duration::from_millis(1)).await;
                thread::current().id()
            })
            .await;
        assert_eq!(second, Ok(first_thread), "the parked thread ran the task");
        let text = panic_text(catch_unwind(AssertUnwindSafe(|| {
            let _ = escaped.poll_unpin(&mut TaskContext::from_waker(Waker::noop()));
        })));
        assert!(text.contains("polled after its worker closed"), "{text}");
        parked(&context, 1).await;

        let dedicated = context
            .clone()
            .dedicated()
            .spawn(|_| async { thread::current().id() })
            .await
            .unwrap();
        assert_ne!(dedicated, first_thread, "dedicated tasks get a new thread");
        assert_eq!(context.runtime().workers.parked_threads(), 1);
    });
}

/// Shutdown tells parked blocking threads to exit and waits until they have left.
#[test]
fn shutdown_waits_for_parked_blocking_threads_to_leave() {
    let registry = Runner::new(config()).start(|context| async move {
        // The barrier keeps all three running at once, so each gets a thread of its own.
        let together = Arc::new(std::sync::Barrier::new(3));
        for _ in 0..3 {
            let together = together.clone();
            let blocking = context.clone().shared(true);
            drop(blocking.spawn(move |_| async move {
                together.wait();
            }));
        }
        leases_released(&context).await;
        parked(&context, 3).await;
        context.runtime().workers.clone()
    });
    assert_eq!(registry.parked_threads(), 0);
    assert_eq!(registry.idle_threads(), 0);
}

/// A parked blocking thread with no task for its keep-alive exits; the next blocking task
/// gets a new thread.
#[test]
fn an_idle_blocking_thread_exits_after_its_keep_alive() {
    Runner::new(config()).start(|context| async move {
        let registry = context.runtime().workers.clone();
        registry.set_keep_alive(Duration::from_millis(1));
        thread_local! {
            /// Dropped when the thread exits, which cancels the receiver.
            static EXITED: Cell<Option<oneshot::Sender<()>>> = const { Cell::new(None) };
        }
        let (exited, exit) = oneshot::channel::<()>();
        let first = context
            .clone()
            .shared(true)
            .spawn(|_| async move {
                EXITED.set(Some(exited));
                thread::current().id()
            })
            .await
            .unwrap();
        assert!(exit.await.is_err(), "the thread exited");
        assert_eq!(registry.parked_threads(), 0);
        let second = context
            .clone()
            .shared(true)
            .spawn(|_| async { thread::current().id() })
            .await
            .unwrap();
        assert_ne!(first, second);
    });
}
