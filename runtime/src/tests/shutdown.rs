//! Shutdown ordering: what it waits for, what it discards, and what it ignores.

use super::*;

/// Shutdown cancels a suspended dedicated task and waits for its destructor: while that
/// blocks, shutdown is waiting in the closed registry, which still counts the worker, and
/// `start` has not returned; it returns after the destructor, with nothing counted.
#[test]
fn shutdown_waits_for_dedicated_task_destruction() {
    /// Holds its drop open until the test lets it finish.
    struct HeldDestructor {
        entered: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
    }
    impl Drop for HeldDestructor {
        fn drop(&mut self) {
            let _ = self.entered.send(());
            let _ = self.release.recv_timeout(TEST_TIMEOUT);
        }
    }
    let (metadata, received) = mpsc::channel();
    let (entered, entering) = mpsc::channel();
    let (release, released) = mpsc::channel();
    let runner = thread::spawn(move || {
        Runner::new(config()).start(|context| async move {
            metadata.send(context.runtime().workers.clone()).unwrap();
            let (started, starting) = oneshot::channel();
            drop(
                context
                    .child("cancelled_worker")
                    .dedicated()
                    .spawn(move |_| async move {
                        let _held = HeldDestructor {
                            entered,
                            release: released,
                        };
                        started.send(()).unwrap();
                        futures::future::pending::<()>().await
                    }),
            );
            // Shutdown then cancels a task suspended in its first poll, not a future never
            // polled.
            starting.await.unwrap();
        })
    });
    let registry = received.recv_timeout(TEST_TIMEOUT).unwrap();
    entering.recv_timeout(TEST_TIMEOUT).unwrap();
    spin_until(
        || registry.state.lock().waiters == 1,
        "shutdown waits in the registry",
    );
    {
        let state = registry.state.lock();
        assert!(state.closed);
        assert_eq!(state.active, 1, "the destructor's worker is still counted");
    }
    assert!(!runner.is_finished());
    release.send(()).unwrap();
    runner.join().unwrap();
    assert_eq!(registry.state.lock().active, 0);
}

/// Shutdown waits for a lease held by a foreign thread, and a failure that thread publishes
/// after the root ended does not replace the result: `start` returns the root's output, or
/// fails with the root's own panic when the root failed. Nothing is counted afterwards.
#[test]
fn shutdown_waits_for_workers_without_observing_late_panics() {
    /// A root that is ready (or panics) at its first poll and tells the publisher when it is
    /// dropped, which is when the root's execution has ended.
    struct RootWithLatePublisher {
        dropped: Option<mpsc::Sender<()>>,
        fails: bool,
    }
    impl std::future::Future for RootWithLatePublisher {
        type Output = u8;
        fn poll(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<u8> {
            assert!(!self.fails, "primary root failure");
            Poll::Ready(7)
        }
    }
    impl Drop for RootWithLatePublisher {
        fn drop(&mut self) {
            self.dropped.take().unwrap().send(()).unwrap();
        }
    }
    for root_fails in [false, true] {
        let (metadata, received) = mpsc::channel();
        let (publishing, publication) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let runner = thread::spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(|| {
                Runner::new(config().with_catch_panics(false)).start(move |context| {
                    let registry = context.runtime().workers.clone();
                    let lease = registry.reserve().unwrap();
                    let panicker = context.runtime().panicker.clone();
                    let (dropped, root_dropped) = mpsc::channel();
                    let publisher = thread::spawn(move || {
                        root_dropped.recv_timeout(TEST_TIMEOUT).unwrap();
                        publishing.send(()).unwrap();
                        released.recv_timeout(TEST_TIMEOUT).unwrap();
                        panicker.notify(Box::new("delayed worker failure"));
                        drop(lease);
                    });
                    metadata.send((registry, publisher)).unwrap();
                    RootWithLatePublisher {
                        dropped: Some(dropped),
                        fails: root_fails,
                    }
                })
            }));
            result.map_err(|payload| message(&*payload))
        });
        let (registry, publisher) = received.recv_timeout(TEST_TIMEOUT).unwrap();
        publication.recv_timeout(TEST_TIMEOUT).unwrap();
        // The root has ended; shutdown waits on the foreign lease.
        spin_until(
            || registry.state.lock().waiters == 1,
            "shutdown waits in the registry",
        );
        assert_eq!(registry.state.lock().active, 1);
        assert!(!runner.is_finished());
        release.send(()).unwrap();
        publisher.join().unwrap();
        let expected = if root_fails {
            Err("primary root failure".to_string())
        } else {
            Ok(7)
        };
        assert_eq!(runner.join().unwrap(), expected, "root fails {root_fails}");
        assert_eq!(registry.state.lock().active, 0);
    }
}

/// A foreign spawn paused between the set's insert and the delivery of its first runnable
/// while the runner shuts down: teardown drops the future unpolled, and the late delivery
/// into the closed global queue is discarded; the handle is `Closed`.
#[test]
fn shutdown_between_registration_and_first_runnable_clears_the_task() {
    let (inserted, inserted_rx) = mpsc::channel();
    let (resume, resume_rx) = mpsc::channel::<()>();
    let drops = Drops::default();
    let polled = Arc::new(AtomicBool::new(false));
    let (context_tx, context_rx) = mpsc::channel::<Context>();
    let spawner = {
        let drops = drops.clone();
        let polled = polled.clone();
        thread::spawn(move || {
            let context = context_rx.recv_timeout(TEST_TIMEOUT).unwrap();
            crate::task::set::tests::AFTER_INSERT.with(|hook| {
                hook.set(Some(Box::new(move || {
                    inserted.send(()).unwrap();
                    // Bounded: a shutdown that waited for this registration fails the test
                    // below instead of hanging it.
                    resume_rx
                        .recv_timeout(TEST_TIMEOUT)
                        .expect("the test resumes the registration");
                })))
            });
            let guard = drops.guard();
            context.spawn(move |_| async move {
                polled.store(true, Ordering::SeqCst);
                drop(guard);
            })
        })
    };
    Runner::new(config()).start(|context| async move {
        context_tx.send(context).unwrap();
        inserted_rx.recv_timeout(TEST_TIMEOUT).unwrap();
    });
    assert_eq!(drops.count(), 1, "teardown dropped the future");
    resume.send(()).unwrap();
    let handle = spawner.join().unwrap();
    assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
    assert!(!polled.load(Ordering::SeqCst));
    assert_eq!(drops.count(), 1);
}

/// An ordinary factory still running on a foreign thread does not hold up shutdown; when it
/// returns, its future is dropped unpolled and the handle is `Closed`.
#[test]
fn shutdown_does_not_wait_for_an_unpublished_ordinary_factory() {
    let (in_factory, in_factory_rx) = mpsc::channel();
    let (finish, finish_rx) = mpsc::channel::<()>();
    let (context_tx, context_rx) = mpsc::channel::<Context>();
    let drops = Drops::default();
    let polled = Arc::new(AtomicBool::new(false));
    let spawner = {
        let drops = drops.clone();
        let polled = polled.clone();
        thread::spawn(move || {
            let context = context_rx.recv_timeout(TEST_TIMEOUT).unwrap();
            context.spawn(move |_| {
                let guard = drops.guard();
                in_factory.send(()).unwrap();
                // Bounded: a shutdown that waited for this factory fails the test below
                // instead of hanging it.
                finish_rx
                    .recv_timeout(TEST_TIMEOUT)
                    .expect("the test lets the factory finish");
                async move {
                    polled.store(true, Ordering::SeqCst);
                    drop(guard);
                }
            })
        })
    };
    Runner::new(config()).start(|context| async move {
        context_tx.send(context).unwrap();
        in_factory_rx.recv_timeout(TEST_TIMEOUT).unwrap();
    });
    assert_eq!(drops.count(), 0, "the factory still holds its captures");
    finish.send(()).unwrap();
    let handle = spawner.join().unwrap();
    assert_eq!(drops.count(), 1);
    assert!(!polled.load(Ordering::SeqCst));
    assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
}

/// Handles polled in the ways that would tie cells together through the waker a join slot
/// keeps (a task polling its own handle; a task returning the handle of a task it polled, its
/// own handle dropped): the slot keeps no waker past its handle or its publish, so every cell
/// is freed by the end of the run.
#[test]
#[allow(clippy::async_yields_async)] // a task returns a handle on purpose: nobody takes it
fn a_polled_handle_leaves_no_waker_behind() {
    for workers in [1, 2] {
        let pool = Runner::new(config().with_worker_threads(workers)).start(|context| async move {
            // A task that polls its own handle once, then finishes.
            let (own_tx, own_rx) = oneshot::channel::<crate::Handle<()>>();
            let own = context.clone().spawn(move |_| async move {
                let mut own = own_rx.await.expect("its own handle");
                futures::future::poll_fn(|cx| {
                    assert!(own.poll_unpin(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
            });
            // `own` is moved into the task through the channel; the root keeps no handle.
            own_tx.send(own).expect("sent");
            // A task that polls a pending task's handle and returns it as its output; its own
            // handle is dropped, so nobody takes that output.
            let (finish, finished) = oneshot::channel::<()>();
            let (polled_tx, polled_rx) = oneshot::channel::<()>();
            drop(context.clone().spawn(move |context| async move {
                let mut pending = context.spawn(move |_| finished);
                futures::future::poll_fn(|cx| {
                    assert!(pending.poll_unpin(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                let _ = polled_tx.send(());
                pending
            }));
            polled_rx.await.expect("polled");
            // The pending task was spawned under the returning one, so that one's end has
            // aborted it (its publish of `Closed` took the waker) or is about to.
            drop(finish);
            context.runtime().pool.clone()
        });
        assert!(pool.is_clean());
        assert_eq!(
            Arc::weak_count(&pool),
            0,
            "no join slot kept a waker that kept a cell"
        );
    }
}

/// A handle dropped after it was polled takes its waker out of the slot: a task that polled
/// the handle of a task still pending, dropped it and finished is freed at once (its output,
/// which nobody takes, is dropped with its cell), not when the pending task ends. One worker,
/// so that the finished task's cell is released before the root is polled again.
#[test]
fn a_dropped_handle_takes_its_waker_back() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    Runner::new(config().with_worker_threads(1)).start(|context| async move {
        let (release, pending) = oneshot::channel::<()>();
        let waited_on = context.clone().spawn(move |_| pending);
        let freed = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let flag = Flag(freed.clone());
        drop(context.clone().spawn(move |_| async move {
            let mut waited_on = waited_on;
            futures::future::poll_fn(|cx| {
                assert!(waited_on.poll_unpin(cx).is_pending());
                Poll::Ready(())
            })
            .await;
            drop(waited_on);
            let _ = done_tx.send(());
            flag
        }));
        done_rx.await.expect("finished");
        assert!(
            freed.load(Ordering::SeqCst),
            "the finished task's cell was freed while the task it polled still waits"
        );
        release.send(()).expect("still waiting");
    });
}

/// Two idle tasks, each holding a destructor that wakes the other, on one and two workers.
/// They are registered without supervision, so the tree's abort does not wake them first:
/// teardown's drop of one wakes the other while it is still idle, on a closing worker, and
/// the runnable that wake makes is discarded. Both destructors run their wake (the count),
/// and the pool ends clean: no runnable or cell outlives the runner (the weak count), which
/// is what catches a runnable that teardown's wake left behind.
#[test]
fn wake_from_a_destructor_during_teardown_leaves_no_runnable() {
    use crate::context::LabelPath;
    use crate::pool::Home;
    use crate::supervision::TaskNode;
    use crate::task::cell::{Runnable, Task};
    struct WakeOther(Arc<Mutex<Option<Waker>>>, Arc<AtomicUsize>);
    impl Drop for WakeOther {
        fn drop(&mut self) {
            if let Some(waker) = self.0.lock().unwrap().take() {
                self.1.fetch_add(1, Ordering::SeqCst);
                waker.wake();
            }
        }
    }
    for workers in [1, 2] {
        let woken = Arc::new(AtomicUsize::new(0));
        let pool = Runner::new(config().with_worker_threads(workers)).start(|context| {
            let woken = woken.clone();
            async move {
                let shared = context.runtime().clone();
                let slots = [(); 2].map(|_| Arc::new(Mutex::new(None::<Waker>)));
                for (own, other) in [(0, 1), (1, 0)] {
                    let own = slots[own].clone();
                    let guard = WakeOther(slots[other].clone(), woken.clone());
                    let future = futures::future::poll_fn(move |cx| {
                        let _ = &guard;
                        *own.lock().unwrap() = Some(cx.waker().clone());
                        Poll::<()>::Pending
                    });
                    let owner = TaskNode::<LabelPath>::unsupervised(Home::Pool(Arc::downgrade(
                        &shared.pool,
                    )));
                    let (task, runnable) = Task::new(future, owner);
                    assert!(shared.tasks.admit(task, runnable, Runnable::spawn).is_ok());
                }
                yield_until(|| slots.iter().all(|slot| slot.lock().unwrap().is_some())).await;
                shared.pool.clone()
            }
        });
        assert_eq!(
            woken.load(Ordering::SeqCst),
            2,
            "{workers} workers: each destructor woke the other task"
        );
        assert!(pool.is_clean());
        assert_eq!(Arc::strong_count(&pool), 1);
        assert_eq!(
            Arc::weak_count(&pool),
            0,
            "{workers} workers: no runnable or cell outlived the runner"
        );
    }
}

/// A foreign spawn whose runnable is still queued at shutdown is dropped unpolled, with its
/// worker's state unborrowed; its destructor's panic is contained and the handle is `Closed`.
#[test]
#[allow(clippy::async_yields_async)] // the root returns the handle on purpose: it escapes
fn queued_foreign_task_disposal_is_contained_at_shutdown() {
    for catch in [false, true] {
        let drops = Drops::default();
        let polled = Arc::new(AtomicBool::new(false));
        let handle = Runner::new(config().with_catch_panics(catch)).start(|context| {
            let bomb = drops.bomb();
            let polled = polled.clone();
            async move {
                // Joining only the publisher leaves the runnable in the global queue when
                // the root finishes its first poll.
                let remote = context.child("queued_foreign");
                thread::spawn(move || {
                    remote.spawn(move |_| async move {
                        let _bomb = bomb;
                        polled.store(true, Ordering::SeqCst);
                    })
                })
                .join()
                .unwrap()
            }
        });
        assert!(
            !polled.load(Ordering::SeqCst),
            "catch {catch}: never polled"
        );
        assert_eq!(drops.count(), 1, "catch {catch}: dropped once");
        assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
    }
}

/// A pool worker whose timer waker panics when its table is cleared at shutdown fails the
/// runner, and the pool ends clean: released by every worker, with no task cell left.
#[test]
fn pool_worker_failure_during_shutdown_fails_the_runner() {
    struct Bad;
    impl std::task::Wake for Bad {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for Bad {
        fn drop(&mut self) {
            panic!("injected pool worker failure during shutdown");
        }
    }
    let kept = Arc::new(Mutex::new(None));
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config().with_worker_threads(2)).start(|context| {
            let kept = kept.clone();
            async move {
                *kept.lock().unwrap() = Some(context.runtime().pool.clone());
                // Worker zero stays busy with the root (blocked below) so that the foreign
                // spawn claims parked worker one.
                let (tx, rx) = mpsc::channel();
                spawn_on_worker_one(&context, move |_| async move {
                    let waker = Waker::from(Arc::new(Bad));
                    let sleep = registered_sleep(Duration::from_secs(3600), &waker);
                    drop(waker);
                    // The sleep escapes the task so that only the table holds the waker.
                    std::mem::forget(sleep);
                    tx.send(()).unwrap();
                });
                rx.recv_timeout(TEST_TIMEOUT).unwrap();
            }
        })
    }));
    assert_eq!(
        panic_text(result),
        "injected pool worker failure during shutdown"
    );
    let pool = kept.lock().unwrap().take().unwrap();
    assert!(pool.is_clean());
    assert_eq!(Arc::strong_count(&pool), 1);
    assert_eq!(Arc::weak_count(&pool), 0, "every task cell was freed");
}

/// Completed dedicated and blocking workers release their leases, eight in a row each, and
/// leave the registry open: every later launch, a nested dedicated one included, is accepted
/// and releases its lease too. A dedicated spawn always launches a new thread; a blocking
/// one may reuse a parked thread (our design), which must release the lease just the same.
#[test]
fn completed_workers_release_tracking_and_leave_the_registry_open() {
    Runner::new(config()).start(|context| async move {
        let released = || context.runtime().workers.state.lock().active == 0;
        for mode in Mode::THREADED {
            for _ in 0..8 {
                let handle = mode
                    .place(context.child("completed"))
                    .spawn(|_| async { 1 });
                assert_eq!(handle.await, Ok(1));
                // The handle may resolve before the worker's cleanup: wait for the lease.
                yield_until(released).await;
                assert!(!context.runtime().workers.state.lock().closed);
            }
        }
        let nested = context
            .child("outer")
            .dedicated()
            .spawn(|context| async move {
                context
                    .child("inner")
                    .dedicated()
                    .spawn(|_| async { 11 })
                    .await
                    .unwrap()
            })
            .await;
        assert_eq!(nested, Ok(11));
        yield_until(released).await;
        assert!(!context.runtime().workers.state.lock().closed);
    });
}

/// With only the registry closed, dedicated and blocking spawns are refused without calling
/// the factory or counting a lease.
#[test]
fn closed_registry_skips_dedicated_factories() {
    Runner::new(config()).start(|context| async move {
        context.runtime().workers.close();
        for mode in Mode::THREADED {
            assert_refused(mode.place(context.clone()));
        }
        assert_eq!(context.runtime().workers.state.lock().active, 0);
    });
}

/// A foreign thread's TLS destructor that runs after the runtime's own TLS key was destroyed
/// on that thread can still wake the root and a task: neither wake panics (caught inside the
/// destructor, so a regression fails the test instead of aborting the process), and both
/// woken futures finish.
#[test]
fn foreign_tls_destructor_can_wake_after_current_key_destruction() {
    struct OnExit {
        waker: Waker,
        result: mpsc::Sender<bool>,
    }
    impl Drop for OnExit {
        fn drop(&mut self) {
            let panicked = catch_unwind(AssertUnwindSafe(|| self.waker.wake_by_ref())).is_err();
            let _ = self.result.send(panicked);
        }
    }
    thread_local! {
        static EXIT: std::cell::RefCell<Option<OnExit>> = const { std::cell::RefCell::new(None) };
    }
    /// Wakes `waker` from a foreign thread whose TLS is then destroyed, the runtime's key
    /// (initialized by the first wake) before `EXIT` (initialized before it). Returns whether
    /// the wake in `EXIT`'s destructor panicked.
    fn wake_from_exiting_thread(waker: Waker) -> bool {
        let (result, received) = mpsc::channel();
        thread::spawn(move || {
            EXIT.with(|slot| {
                *slot.borrow_mut() = Some(OnExit {
                    waker: waker.clone(),
                    result,
                })
            });
            waker.wake_by_ref();
        })
        .join()
        .unwrap();
        received.recv_timeout(TEST_TIMEOUT).unwrap()
    }
    // The root's waker: the runner stays alive through the thread's TLS destruction.
    let root_panicked = Runner::new(config()).start(|_| {
        futures::future::poll_fn(|cx| Poll::Ready(wake_from_exiting_thread(cx.waker().clone())))
    });
    assert!(!root_panicked, "a root wake touched destroyed runtime TLS");
    // A task's waker.
    Runner::new(config()).start(|context| async move {
        let (task_waker_tx, task_waker_rx) = oneshot::channel();
        let task = context.child("woken").spawn(move |_| async move {
            let mut tx = Some(task_waker_tx);
            futures::future::poll_fn(|cx| match tx.take() {
                Some(tx) => {
                    tx.send(cx.waker().clone()).ok().unwrap();
                    Poll::Pending
                }
                None => Poll::Ready(()),
            })
            .await
        });
        let waker = task_waker_rx.await.unwrap();
        assert!(
            !wake_from_exiting_thread(waker),
            "a task wake touched destroyed runtime TLS"
        );
        assert_eq!(task.await, Ok(()));
    });
}

/// Whether the root returns or panics, shutdown drops every task future on a runtime worker
/// thread, each one suspended on a pending sleep, and `start` fails exactly when the root
/// panicked.
#[test]
fn shutdown_destroys_tasks_on_a_worker() {
    struct OnWorker(Arc<AtomicUsize>, Arc<AtomicUsize>);
    impl Drop for OnWorker {
        fn drop(&mut self) {
            if Local::current().is_some() {
                self.0.fetch_add(1, Ordering::SeqCst);
            } else {
                self.1.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    for root_panics in [false, true] {
        let on_worker = Arc::new(AtomicUsize::new(0));
        let elsewhere = Arc::new(AtomicUsize::new(0));
        let result = catch_unwind(AssertUnwindSafe(|| {
            Runner::new(config().with_worker_threads(4)).start(|context| {
                let (on_worker, elsewhere) = (on_worker.clone(), elsewhere.clone());
                async move {
                    let mut ready = Vec::new();
                    for _ in 0..12 {
                        let guard = OnWorker(on_worker.clone(), elsewhere.clone());
                        let (started, receiver) = oneshot::channel();
                        ready.push(receiver);
                        drop(context.child("pending").spawn(move |context| async move {
                            let _guard = guard;
                            let mut sleep =
                                std::pin::pin!(context.sleep(Duration::from_secs(3600)));
                            // Registered and pending before the root may end.
                            assert!(futures::poll!(&mut sleep).is_pending());
                            started.send(()).unwrap();
                            sleep.await
                        }));
                    }
                    for receiver in ready {
                        context
                            .timeout(TEST_TIMEOUT, receiver)
                            .await
                            .unwrap()
                            .unwrap();
                    }
                    assert!(!root_panics, "root failure");
                }
            })
        }));
        match result {
            Ok(()) => assert!(!root_panics, "start returned though the root panicked"),
            Err(payload) => assert_eq!(message(&*payload), "root failure"),
        }
        assert_eq!(on_worker.load(Ordering::SeqCst), 12);
        assert_eq!(elsewhere.load(Ordering::SeqCst), 0);
    }
}

/// A timer callback on a pool worker that wakes a task into that worker's own queue and then
/// panics fails the runner under either policy; shutdown discards the queued runnable and the
/// pool ends clean.
#[test]
fn failed_pool_worker_with_queued_runnables_shuts_down() {
    struct WakeThenPanic(Waker);
    impl std::task::Wake for WakeThenPanic {
        fn wake(self: Arc<Self>) {
            self.0.wake_by_ref();
            panic!("injected pool worker callback failure");
        }
    }
    for catch in [false, true] {
        let kept = Arc::new(Mutex::new(None));
        let result = catch_unwind(AssertUnwindSafe(|| {
            Runner::new(config().with_worker_threads(2).with_catch_panics(catch)).start(|context| {
                let kept = kept.clone();
                async move {
                    *kept.lock().unwrap() = Some(context.runtime().pool.clone());
                    let (armed, armed_rx) = mpsc::channel();
                    spawn_on_worker_one(&context, move |context| async move {
                        // Task A: idle, woken by the callback into this worker's queue.
                        let (a_waker_tx, a_waker_rx) = mpsc::channel();
                        drop(context.clone().spawn(move |_| {
                            futures::future::poll_fn(move |cx| {
                                let _ = a_waker_tx.send(cx.waker().clone());
                                Poll::<()>::Pending
                            })
                        }));
                        reschedule().await;
                        let a_waker = a_waker_rx.recv_timeout(TEST_TIMEOUT).unwrap();
                        let callback = Waker::from(Arc::new(WakeThenPanic(a_waker)));
                        let sleep = registered_sleep(Duration::from_millis(1), &callback);
                        // Only the table keeps the callback: the sleep escapes unpolled.
                        std::mem::forget(sleep);
                        armed.send(()).unwrap();
                        futures::future::pending::<()>().await;
                    });
                    // Worker zero stays busy here so that the spawn goes to worker one.
                    armed_rx.recv_timeout(TEST_TIMEOUT).unwrap();
                    futures::future::pending::<()>().await
                }
            })
        }));
        assert!(panic_text(result).contains("injected pool worker callback failure"));
        let pool = kept.lock().unwrap().take().unwrap();
        assert!(pool.is_clean());
        assert_eq!(Arc::strong_count(&pool), 1);
        assert_eq!(
            Arc::weak_count(&pool),
            0,
            "no cell left in the failed worker's queue"
        );
        assert!(tls_cleared());
    }
}

/// A dedicated task's thread-local value whose destructor runs after the worker's cleanup
/// spawns ordinary work through a retained context and blocks on it: that thread now behaves
/// like a foreign one, the root keeps working meanwhile (it even starts another dedicated
/// worker), and the wait completes without deadlock or panic.
#[test]
fn finished_worker_tls_can_wait_for_live_root_work() {
    struct WaitOnDrop {
        context: Option<Context>,
        release: Option<oneshot::Receiver<()>>,
        started: Option<oneshot::Sender<()>>,
        done: Option<oneshot::Sender<u32>>,
    }
    impl Drop for WaitOnDrop {
        fn drop(&mut self) {
            assert!(Local::current().is_none(), "the worker's cleanup ran first");
            let release = self.release.take().unwrap();
            let started = self.started.take().unwrap();
            let handle = self.context.take().unwrap().spawn(move |_| async move {
                started.send(()).unwrap();
                release.await.unwrap();
                5
            });
            let output = futures::executor::block_on(handle).unwrap();
            self.done.take().unwrap().send(output).unwrap();
        }
    }
    thread_local! {
        static HELD: std::cell::RefCell<Option<WaitOnDrop>> = const { std::cell::RefCell::new(None) };
    }
    Runner::new(config()).start(|context| async move {
        let (release_tx, release) = oneshot::channel();
        let (started, started_rx) = oneshot::channel();
        let (done, done_rx) = oneshot::channel();
        let retained = context.clone();
        let value = WaitOnDrop {
            context: Some(retained),
            release: Some(release),
            started: Some(started),
            done: Some(done),
        };
        context
            .clone()
            .dedicated()
            .spawn(move |_| async move {
                HELD.with(|held| *held.borrow_mut() = Some(value));
            })
            .await
            .unwrap();
        started_rx.await.unwrap();
        let other = context.clone().dedicated().spawn(|_| async { 11 });
        assert_eq!(other.await, Ok(11));
        release_tx.send(()).unwrap();
        assert_eq!(done_rx.await, Ok(5));
    });
}
