//! Runtime-level tests of the runtime's behaviours (configuration, the root, spawning and
//! refusal, supervision, shutdown, dedicated workers, panics, the pool, timers and I/O), using
//! the crate's private hooks where a race must be forced. Public-API-only tests live in
//! `runtime/tests/`.

use crate::driver::{Request, RequestOutput};
use crate::hooks::{BEFORE_ABORT, FAIL_STARTUP, FORBID_PARK};
use crate::panic::message;
use crate::pool::Message;
use crate::prelude::*;
use crate::worker::Local;
use crate::worker::Operation;
use crate::{Config, Context, Error, Runner, SpinnerConfig, reschedule};
use futures::FutureExt;
use futures::channel::oneshot;
use std::cell::Cell;
use std::os::fd::{FromRawFd, OwnedFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context as TaskContext, Poll, Waker};
use std::thread;
use std::time::Duration;

/// One worker, no spinner: every ordinary task runs on the runner's thread.
fn config() -> Config {
    Config::new()
        .with_worker_threads(1)
        .with_idle_spinner(SpinnerConfig::disabled())
}

/// How long a wait that must make progress may take before the test fails instead of hanging.
const TEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Spins on the calling thread until `done` holds, failing with `what` after the timeout.
/// Spinning (rather than yielding to the runtime) keeps the calling worker busy.
fn spin_until(done: impl Fn() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + TEST_TIMEOUT;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::hint::spin_loop();
    }
}

/// Every way a spawn can be placed, with the default told apart from an explicit
/// `shared(false)`: both are ordinary and must behave alike.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Default,
    Ordinary,
    Dedicated,
    Blocking,
}

impl Mode {
    /// Every mode, the default and an explicit ordinary placement told apart.
    const ALL: [Mode; 4] = [
        Mode::Default,
        Mode::Ordinary,
        Mode::Dedicated,
        Mode::Blocking,
    ];
    /// One mode per execution: ordinary (the default), dedicated and blocking.
    const EACH: [Mode; 3] = [Mode::Default, Mode::Dedicated, Mode::Blocking];
    /// The modes that get a thread of their own.
    const THREADED: [Mode; 2] = [Mode::Dedicated, Mode::Blocking];

    fn place(self, context: Context) -> Context {
        match self {
            Mode::Default => context,
            Mode::Ordinary => context.shared(false),
            Mode::Dedicated => context.dedicated(),
            Mode::Blocking => context.shared(true),
        }
    }

    /// Whether a task placed this way runs on the pool.
    fn is_ordinary(self) -> bool {
        matches!(self, Mode::Default | Mode::Ordinary)
    }
}

/// A pipe: its read end, shareable with registrations, and its write end.
fn pipe() -> (Arc<OwnedFd>, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `pipe2` writes two descriptors into the array on success.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are fresh and owned by us from here on.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (Arc::new(read), write)
}

/// A sleep registered on this thread's worker with `waker`: its first poll is pending, so the
/// worker's timer table holds `waker` until the sleep fires, is dropped or the table closes.
fn registered_sleep(duration: Duration, waker: &Waker) -> crate::worker::Sleep {
    let mut sleep = crate::worker::Sleep::new(duration);
    assert!(
        sleep
            .poll_unpin(&mut TaskContext::from_waker(waker))
            .is_pending()
    );
    sleep
}

/// Takes the storage directory's `.hold` lock, which must be free, and returns the file that
/// holds it.
fn assert_storage_lock_free(directory: &std::path::Path) -> std::fs::File {
    let contender = std::fs::File::options()
        .write(true)
        .open(directory.join(".hold"))
        .unwrap();
    contender.try_lock().expect("the storage lock is free");
    contender
}

/// Writes `b"ping"` into a pipe's write end.
fn write_ping(write: &OwnedFd) {
    // SAFETY: writing 4 bytes from a live buffer to a descriptor we own.
    let written = unsafe {
        libc::write(
            std::os::fd::AsRawFd::as_raw_fd(write),
            b"ping".as_ptr().cast(),
            4,
        )
    };
    assert_eq!(written, 4);
}

/// Spawns `body` from a foreign thread onto pool worker one. The caller, the root, keeps
/// worker zero busy (blocked) until the body signals it, so the foreign push claims parked
/// worker one. The foreign thread is joined before this returns, so its context clone (which
/// keeps the runtime alive) is gone before the runner can finish.
fn spawn_on_worker_one<F, Fut>(context: &Context, body: F)
where
    F: FnOnce(Context) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let foreign = context.clone();
    thread::spawn(move || {
        drop(foreign.spawn(move |context| async move {
            assert_eq!(thread::current().name(), Some("iouring-pool-1"));
            body(context).await
        }))
    })
    .join()
    .unwrap();
}

/// Makes the next ring service of this thread's worker that reaps a completion fail.
fn fail_next_service() {
    let local = Local::current().expect("called on a worker");
    local
        .state()
        .borrow_mut()
        .driver
        .as_mut()
        .expect("the worker has a ring")
        .fail_next_service = Some("injected service failure after completion");
}

/// Asserts that a spawn through `context` is refused at once, without calling the factory.
fn assert_refused(context: Context) {
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let handle = context.spawn(move |_| {
        flag.store(true, Ordering::SeqCst);
        async {}
    });
    assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
    assert!(
        !called.load(Ordering::SeqCst),
        "a refused spawn never calls its factory"
    );
}

/// Yields to the runtime until `done` holds (for states that change on other threads without
/// waking anyone, such as the registry's counts). Fails the test after [`TEST_TIMEOUT`], so a
/// state that never comes fails instead of hanging.
async fn yield_until(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + TEST_TIMEOUT;
    futures::future::poll_fn(|cx| {
        if done() {
            Poll::Ready(())
        } else {
            assert!(
                std::time::Instant::now() < deadline,
                "the awaited state never came"
            );
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

fn tls_cleared() -> bool {
    Local::current().is_none()
}

/// Counts drops of whatever holds it.
#[derive(Clone, Default)]
struct Drops(Arc<AtomicUsize>);
impl Drops {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    fn guard(&self) -> DropGuard {
        DropGuard(self.clone(), false)
    }
    fn bomb(&self) -> DropGuard {
        DropGuard(self.clone(), true)
    }
}
/// Counts its drop; a bomb then panics. A bomb first borrows the state of the worker it is
/// dropped on, so a disposal that runs while that state is borrowed panics before counting
/// (and the containment it relies on would hide that double borrow if it counted first).
struct DropGuard(Drops, bool);
impl Drop for DropGuard {
    fn drop(&mut self) {
        if self.1
            && let Some(local) = Local::current()
        {
            drop(local.state().borrow_mut());
        }
        (self.0).0.fetch_add(1, Ordering::SeqCst);
        if self.1 {
            panic!("destructor failure");
        }
    }
}

fn panic_text(result: thread::Result<impl Sized>) -> String {
    match result {
        Ok(_) => panic!("expected a panic"),
        Err(payload) => message(&*payload),
    }
}

/// The root builder and future need be neither `Send` nor `'static`, they are polled on the
/// calling thread even after a suspension, and the output may borrow from the caller.
#[test]
fn root_borrows_non_send_state_across_pending_poll() {
    let text = String::from("borrowed output");
    let local = Rc::new(Cell::new(1));
    let caller = thread::current().id();
    let output: &str = Runner::new(config()).start(|context| {
        let local = local.clone();
        let text = &text;
        async move {
            assert_eq!(thread::current().id(), caller);
            context.sleep(Duration::from_millis(1)).await;
            assert_eq!(thread::current().id(), caller);
            local.set(local.get() + 1);
            text.as_str()
        }
    });
    assert_eq!(output, "borrowed output");
    assert_eq!(local.get(), 2);
    assert!(tls_cleared());
}

/// A root that wakes itself and returns `Pending` is polled again, every time.
#[test]
fn root_self_wake_survives_pending_poll() {
    struct SelfWaking(usize);
    impl std::future::Future for SelfWaking {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<usize> {
            if self.0 == 1_000 {
                return Poll::Ready(self.0);
            }
            self.0 += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    assert_eq!(Runner::new(config()).start(|_| SelfWaking(0)), 1_000);
}

/// A builder that spawns and then panics: `start` re-raises, the child is dropped once and
/// never polled, TLS is cleared, and the thread can run a new runner.
#[test]
fn root_constructor_panic_drops_unpolled_tasks_and_clears_scope() {
    let drops = Drops::default();
    let polled = Arc::new(AtomicBool::new(false));
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config()).start(|context| {
            let guard = drops.guard();
            let polled = polled.clone();
            drop(context.spawn(move |_| async move {
                polled.store(true, Ordering::SeqCst);
                drop(guard);
            }));
            panic!("builder failure");
            #[allow(unreachable_code)]
            async {}
        })
    }));
    assert_eq!(panic_text(result), "builder failure");
    assert_eq!(drops.count(), 1);
    assert!(!polled.load(Ordering::SeqCst));
    assert!(tls_cleared());
    assert_eq!(Runner::new(config()).start(|_| async { 9 }), 9);
}

/// A root poll panic fails `start` with exactly that message, the root is dropped once and
/// its drop adds nothing; a root whose drop panics after `Ready` fails with the drop's message.
#[test]
fn root_poll_or_drop_panic_clears_scope() {
    struct Root {
        fail_poll: bool,
        drops: Drops,
    }
    impl std::future::Future for Root {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<()> {
            if self.fail_poll {
                panic!("primary root poll failure");
            }
            Poll::Ready(())
        }
    }
    impl Drop for Root {
        fn drop(&mut self) {
            self.drops.0.fetch_add(1, Ordering::SeqCst);
            if !self.fail_poll {
                panic!("root destruction failure");
            }
        }
    }
    let drops = Drops::default();
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config()).start(|_| Root {
            fail_poll: true,
            drops: drops.clone(),
        })
    }));
    assert_eq!(panic_text(result), "primary root poll failure");
    assert_eq!(drops.count(), 1);
    assert!(tls_cleared());

    let drops = Drops::default();
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config()).start(|_| Root {
            fail_poll: false,
            drops: drops.clone(),
        })
    }));
    assert_eq!(panic_text(result), "root destruction failure");
    assert_eq!(drops.count(), 1);
    assert!(tls_cleared());
}

/// A root's `Drop` runs before shutdown closes spawning: a spawn from it, through a context
/// the root owns (ordinary or dedicated), calls its factory, and shutdown then cancels that
/// child and drops its captures once. The root is a future that is `Ready` at its first poll
/// and spawns only in its destructor, after the runner has taken its output.
#[test]
fn root_destruction_can_spawn_work_before_shutdown() {
    struct SpawnOnDrop {
        context: Option<Context>,
        factory: Arc<AtomicBool>,
        drops: Drops,
    }
    impl std::future::Future for SpawnOnDrop {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<()> {
            Poll::Ready(())
        }
    }
    impl Drop for SpawnOnDrop {
        fn drop(&mut self) {
            let factory = self.factory.clone();
            let guard = self.drops.guard();
            drop(self.context.take().unwrap().spawn(move |_| {
                factory.store(true, Ordering::SeqCst);
                async move {
                    let _guard = guard;
                    futures::future::pending::<()>().await;
                }
            }));
        }
    }
    for dedicated in [false, true] {
        let factory = Arc::new(AtomicBool::new(false));
        let drops = Drops::default();
        Runner::new(config()).start(|context| {
            let context = context.child("root_drop");
            SpawnOnDrop {
                context: Some(if dedicated {
                    context.dedicated()
                } else {
                    context
                }),
                factory: factory.clone(),
                drops: drops.clone(),
            }
        });
        assert!(
            factory.load(Ordering::SeqCst),
            "dedicated {dedicated}: the destructor's spawn was accepted"
        );
        assert_eq!(
            drops.count(),
            1,
            "dedicated {dedicated}: shutdown dropped the child once"
        );
        assert!(tls_cleared());
    }
}

/// A failure published before the root's first poll interrupts the root: it is never polled
/// and `start` panics with that payload.
#[test]
fn failure_queued_before_root_poll_interrupts_root() {
    let polled = Arc::new(AtomicBool::new(false));
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config()).start(|context| {
            context
                .runtime()
                .panicker
                .notify(Box::new("queued worker panic"));
            let polled = polled.clone();
            async move { polled.store(true, Ordering::SeqCst) }
        })
    }));
    assert_eq!(panic_text(result), "queued worker panic");
    assert!(!polled.load(Ordering::SeqCst));
}

/// A failure published while the finished root is being dropped is ignored.
#[test]
fn task_panic_during_root_destruction_is_not_observed() {
    for workers in [1, 2] {
        struct Root(Context);
        impl std::future::Future for Root {
            type Output = i32;
            fn poll(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<i32> {
                Poll::Ready(7)
            }
        }
        impl Drop for Root {
            fn drop(&mut self) {
                self.0
                    .runtime()
                    .panicker
                    .notify(Box::new("late task panic"));
            }
        }
        let output = Runner::new(config().with_worker_threads(workers)).start(Root);
        assert_eq!(output, 7);
    }
}

/// Factories run synchronously on the calling thread, for every placement of the spawn and
/// from a parent of every placement, with panics caught or not. A factory panic unwinds into
/// the caller, which can keep spawning.
#[test]
fn factories_execute_synchronously_on_the_caller() {
    for catch in [false, true] {
        Runner::new(config().with_catch_panics(catch)).start(|context| async move {
            for parent in Mode::ALL {
                parent
                    .place(context.child("parent"))
                    .spawn(move |context| async move {
                        let caller = thread::current().id();
                        for mode in Mode::ALL {
                            let invoked = Arc::new(AtomicBool::new(false));
                            let observed = invoked.clone();
                            let handle = mode.place(context.child("factory")).spawn(move |_| {
                                assert_eq!(thread::current().id(), caller, "factory thread");
                                invoked.store(true, Ordering::SeqCst);
                                async { 1 }
                            });
                            assert!(
                                observed.load(Ordering::SeqCst),
                                "{parent:?} parent, {mode:?} child: the factory ran before spawn returned"
                            );
                            assert_eq!(handle.await, Ok(1));

                            let result = catch_unwind(AssertUnwindSafe(|| {
                                mode.place(context.child("panic")).spawn(
                                    |_| -> std::future::Ready<()> { panic!("factory failed") },
                                )
                            }));
                            assert_eq!(panic_text(result), "factory failed");
                            assert_eq!(
                                context.child("sibling").spawn(|_| async { 7 }).await,
                                Ok(7),
                                "{parent:?} parent, {mode:?} child: the caller still spawns"
                            );
                        }
                    })
                    .await
                    .unwrap();
            }
        });
    }
}

/// Placement is per spawn and not inherited. From a parent of every placement, ordinary
/// children (default or explicit `shared(false)`) run on the pool, here the runner's thread;
/// dedicated and blocking children each get a thread other than the pool's and their
/// parent's, and their own ordinary children run on the pool again. Only ordinary parents
/// run on the pool.
#[test]
fn execution_modes_share_ordinary_descendants() {
    let pool = thread::current().id();
    Runner::new(config()).start(|context| async move {
        for mode in Mode::ALL {
            let parent = mode
                .place(context.child("mode"))
                .spawn(move |context| async move {
                    let parent = thread::current().id();
                    for child in [Mode::Default, Mode::Ordinary] {
                        let ran_on = child
                            .place(context.child("ordinary_child"))
                            .spawn(|_| async { thread::current().id() })
                            .await
                            .unwrap();
                        assert_eq!(ran_on, pool, "{mode:?} parent, {child:?} child");
                    }
                    for nested in [Mode::Dedicated, Mode::Blocking] {
                        nested
                            .place(context.child("threaded"))
                            .spawn(move |context| async move {
                                let own = thread::current().id();
                                assert_ne!(own, pool, "{mode:?} parent, {nested:?} child");
                                assert_ne!(own, parent, "{mode:?} parent, {nested:?} child");
                                let grandchild = context
                                    .child("ordinary")
                                    .spawn(|_| async { thread::current().id() })
                                    .await
                                    .unwrap();
                                assert_eq!(grandchild, pool, "{mode:?}, {nested:?}, grandchild");
                            })
                            .await
                            .unwrap();
                    }
                    parent
                })
                .await
                .unwrap();
            assert_eq!(
                parent == pool,
                mode.is_ordinary(),
                "{mode:?} parent's thread"
            );
        }
    });
}

/// A dedicated or blocking task may block its thread on an ordinary child (default or
/// explicit `shared(false)`), which runs on the pool meanwhile: the parent runs off the
/// runner's thread and the child on it. The wait is bounded, so a deadlock fails the test.
#[test]
fn blocking_parents_can_wait_for_ordinary_descendants() {
    let pool = thread::current().id();
    Runner::new(config()).start(|context| async move {
        for parent in [Mode::Dedicated, Mode::Blocking] {
            parent
                .place(context.child("parent"))
                .spawn(move |context| async move {
                    assert_ne!(thread::current().id(), pool, "{parent:?} parent's thread");
                    for child in [Mode::Default, Mode::Ordinary] {
                        let (sender, receiver) = mpsc::channel();
                        drop(
                            child
                                .place(context.child("child"))
                                .spawn(move |_| async move {
                                    sender.send(thread::current().id()).unwrap();
                                }),
                        );
                        // The root awaits this parent without blocking, so the pool's only
                        // worker is free to run the child while this thread blocks.
                        assert_eq!(
                            receiver.recv_timeout(TEST_TIMEOUT).unwrap(),
                            pool,
                            "{parent:?} parent, {child:?} child"
                        );
                    }
                })
                .await
                .unwrap();
        }
    });
}

/// After an abort of a context's node, spawn returns an immediately closed handle for every
/// placement and never calls the factory: from the aborted node itself, and from a child
/// made after the abort. With the root's own node aborted, the root keeps running and the
/// runner shuts down normally; no dedicated or blocking lease was taken.
#[test]
fn aborted_context_skips_factories_for_every_placement() {
    Runner::new(config()).start(|context| async move {
        let scope = context.child("scope");
        scope.tree.abort();
        for mode in Mode::EACH {
            assert_refused(mode.place(scope.clone()));
            assert_refused(mode.place(scope.child("late")));
        }
        context.tree.abort();
        for mode in Mode::ALL {
            assert_refused(mode.place(context.child("rejected")));
        }
        assert_eq!(context.runtime().workers.state.lock().active, 0);
    });
}

/// With the task set closed, ordinary spawns from a worker and from a foreign thread return
/// an immediate `Closed` without calling the factory.
#[test]
fn closed_task_set_skips_local_and_foreign_factories() {
    Runner::new(config()).start(|context| async move {
        context.runtime().tasks.close();
        let called = Arc::new(AtomicUsize::new(0));
        let spawn = |context: Context, called: Arc<AtomicUsize>| {
            context.spawn(move |_| {
                called.fetch_add(1, Ordering::SeqCst);
                async {}
            })
        };
        assert_eq!(
            spawn(context.clone(), called.clone()).now_or_never(),
            Some(Err(Error::Closed))
        );
        let foreign = {
            let (context, called) = (context.clone(), called.clone());
            thread::spawn(move || spawn(context, called).now_or_never())
        };
        assert_eq!(foreign.join().unwrap(), Some(Err(Error::Closed)));
        assert_eq!(called.load(Ordering::SeqCst), 0);
    });
}

/// A spawn whose factory closes the task set is refused by it: the set is closed, the handle
/// is `Closed` at once, and the future is dropped exactly once, on the caller's thread,
/// before `spawn` returns, whether the caller is a worker or a foreign thread.
#[test]
fn spawn_refused_by_the_closed_task_set_is_disposed_on_its_caller() {
    struct DroppedOn(Arc<Mutex<Vec<thread::ThreadId>>>);
    impl Drop for DroppedOn {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(thread::current().id());
        }
    }
    for foreign in [false, true] {
        let dropped_on = Arc::new(Mutex::new(Vec::new()));
        Runner::new(config()).start(|context| {
            let dropped_on = dropped_on.clone();
            async move {
                let shared = context.runtime().clone();
                let spawner = context.child("refused");
                let spawn = move || {
                    let payload = DroppedOn(dropped_on.clone());
                    let closing = shared.clone();
                    let handle = spawner.spawn(move |_| {
                        closing.tasks.close();
                        async move {
                            let _payload = payload;
                            futures::future::pending::<()>().await
                        }
                    });
                    assert!(shared.tasks.is_closed());
                    assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
                    assert_eq!(
                        *dropped_on.lock().unwrap(),
                        [thread::current().id()],
                        "foreign {foreign}: dropped once, on the caller, before spawn returned"
                    );
                };
                if foreign {
                    thread::spawn(spawn).join().unwrap();
                } else {
                    spawn();
                }
            }
        });
        assert_eq!(dropped_on.lock().unwrap().len(), 1, "foreign {foreign}");
    }
}

/// A context that escaped a finished runner refuses spawns: the factory is not called and
/// its captures are dropped once.
#[test]
fn closed_runner_rejects_payload_without_invoking_closure() {
    let context = Runner::new(config()).start(|context| async move { context });
    for mode in Mode::EACH {
        let drops = Drops::default();
        let guard = drops.guard();
        let called = Arc::new(AtomicBool::new(false));
        let flag = called.clone();
        let handle = mode.place(context.clone()).spawn(move |_| {
            flag.store(true, Ordering::SeqCst);
            drop(guard);
            async {}
        });
        assert_eq!(futures::executor::block_on(handle), Err(Error::Closed));
        assert!(!called.load(Ordering::SeqCst));
        assert_eq!(drops.count(), 1);
    }
}

/// A task's retained child context is closed before the task's handle resolves, and the
/// task's running gauge is back to zero.
#[test]
fn retained_descendant_context_is_closed_before_parent_result() {
    Runner::new(config()).start(|context| async move {
        let retained = context
            .child("parent")
            .spawn(|context| async move { context.child("retained") })
            .await
            .unwrap();
        let called = Arc::new(AtomicBool::new(false));
        let flag = called.clone();
        let handle = retained.spawn(move |_| {
            flag.store(true, Ordering::SeqCst);
            async {}
        });
        assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
        assert!(!called.load(Ordering::SeqCst));
        let encoded = context.encode();
        let lines: Vec<_> = encoded
            .lines()
            .filter(|line| line.starts_with("runtime_tasks_running{") && line.contains("parent"))
            .collect();
        assert!(!lines.is_empty(), "{encoded}");
        assert!(lines.iter().all(|line| line.ends_with(" 0")), "{lines:?}");
        assert!(encoded.ends_with("# EOF\n"));
    });
}

/// When a dedicated or blocking parent completes, its pending descendants (an ordinary child
/// on the pool and a dedicated child) are aborted.
#[test]
fn dedicated_completion_cancels_local_and_remote_descendants() {
    Runner::new(config()).start(|context| async move {
        for mode in Mode::THREADED {
            let (ordinary, dedicated) = mode
                .place(context.clone())
                .spawn(|context| async move {
                    let ordinary = context.clone().spawn(|_| futures::future::pending::<()>());
                    let dedicated = context
                        .dedicated()
                        .spawn(|_| futures::future::pending::<()>());
                    (ordinary, dedicated)
                })
                .await
                .unwrap();
            assert_eq!(ordinary.await, Err(Error::Closed));
            assert_eq!(dedicated.await, Err(Error::Closed));
            assert_eq!(context.clone().spawn(|_| async { 7 }).await, Ok(7));
        }
    });
}

/// The root's end cancels a dedicated task and its descendants wherever they run: an
/// ordinary child (on worker zero with one worker, usually on another worker with two) and a
/// blocking child. Every handle is `Closed` once `start` returns.
#[test]
fn root_shutdown_cancels_descendants_across_workers() {
    for workers in [1, 2] {
        let handles =
            Runner::new(config().with_worker_threads(workers)).start(|context| async move {
                let (tx, rx) = oneshot::channel();
                let parent = context
                    .child("parent")
                    .dedicated()
                    .spawn(|context| async move {
                        let ordinary = context
                            .child("ordinary")
                            .spawn(|_| futures::future::pending::<()>());
                        let blocking = context
                            .child("blocking")
                            .shared(true)
                            .spawn(|_| futures::future::pending::<()>());
                        tx.send((ordinary, blocking)).ok().unwrap();
                        futures::future::pending::<()>().await
                    });
                let (ordinary, blocking) = rx.await.unwrap();
                (parent, ordinary, blocking)
            });
        assert_eq!(
            handles.0.now_or_never(),
            Some(Err(Error::Closed)),
            "{workers}: parent"
        );
        assert_eq!(
            handles.1.now_or_never(),
            Some(Err(Error::Closed)),
            "{workers}: ordinary"
        );
        assert_eq!(
            handles.2.now_or_never(),
            Some(Err(Error::Closed)),
            "{workers}: blocking"
        );
    }
}

/// Shutdown aborts the whole tree and finishes every running metric before it drops any
/// future, whether the tasks were registered on worker zero and never polled, registered from
/// a foreign thread with their first runnable still in the global queue, or polled once and
/// suspended. Each case has a task of a scope and a task of a descendant scope nested in it;
/// each future, when dropped, finds that descendant closed and every running gauge of both
/// scopes at zero. With two workers, worker zero waits between the pool's close and the abort
/// until worker one has finished its cleanup, so a worker dropping futures before the abort
/// would be caught. Every future is dropped exactly once, the gauges stay at zero, and every
/// handle is `Closed`.
#[test]
fn shutdown_cancels_tasks_before_destruction() {
    /// How far the tasks get before the root returns.
    #[derive(Clone, Copy, Debug)]
    enum Placement {
        /// Spawned on worker zero and never polled.
        Local,
        /// Spawned from a foreign thread: the first runnable waits in the global queue.
        Foreign,
        /// Polled once and suspended.
        Pending,
    }
    /// Whether the running gauges of the `victims` scope and its descendant exist and are
    /// all zero.
    fn gauges_finished(context: &Context) -> bool {
        let encoded = context.encode();
        let lines: Vec<_> = encoded
            .lines()
            .filter(|line| line.starts_with("runtime_tasks_running{name=\"victims"))
            .collect();
        !lines.is_empty() && lines.iter().all(|line| line.ends_with(" 0"))
    }
    /// Held by each future: counts its drop, and whether the drop found the descendant scope
    /// closed and the gauges finished. It counts rather than asserts, as a panic here would be
    /// contained by the task's disposal.
    struct Cleanup {
        descendant: Context,
        drops: Drops,
        cancelled: Drops,
    }
    impl Drop for Cleanup {
        fn drop(&mut self) {
            if self.descendant.tree.is_aborted() && gauges_finished(&self.descendant) {
                self.cancelled.0.fetch_add(1, Ordering::SeqCst);
            }
            self.drops.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    for workers in [1, 2] {
        for placement in [Placement::Local, Placement::Foreign, Placement::Pending] {
            let case = format!("workers={workers} placement={placement:?}");
            let drops = Drops::default();
            let cancelled = Drops::default();
            let (handles, victims) =
                Runner::new(config().with_worker_threads(workers)).start(|context| {
                    if workers > 1 {
                        let shared_pool = context.runtime().pool.clone();
                        BEFORE_ABORT.with(|hook| {
                            *hook.borrow_mut() = Some(Box::new(move || {
                                // The pool is closed: worker one leaves its loop, discards its
                                // queue and cleans up, then closes its mailbox, which from then
                                // on refuses messages (a message before that is harmless).
                                spin_until(
                                    || {
                                        thread::yield_now();
                                        shared_pool.mailbox(1).send(Message::WakeRoot).is_err()
                                    },
                                    "worker one must finish its cleanup",
                                );
                            }))
                        });
                    }
                    let (drops, cancelled) = (drops.clone(), cancelled.clone());
                    async move {
                        let victims = context.child("victims");
                        let descendant = victims.child("descendant");
                        let mut handles = Vec::new();
                        let mut polled = Vec::new();
                        for scope in [victims.clone(), descendant.clone()] {
                            let cleanup = Cleanup {
                                descendant: descendant.clone(),
                                drops: drops.clone(),
                                cancelled: cancelled.clone(),
                            };
                            let (started, ready) = oneshot::channel::<()>();
                            let body = move |_: Context| async move {
                                let _cleanup = cleanup;
                                let _ = started.send(());
                                futures::future::pending::<()>().await
                            };
                            let handle = match placement {
                                Placement::Foreign => {
                                    thread::spawn(move || scope.spawn(body)).join().unwrap()
                                }
                                Placement::Local | Placement::Pending => scope.spawn(body),
                            };
                            handles.push(handle);
                            polled.push(ready);
                        }
                        if let Placement::Pending = placement {
                            for ready in polled {
                                ready.await.unwrap();
                            }
                        }
                        (handles, victims)
                    }
                });
            assert_eq!(
                drops.count(),
                2,
                "{case}: every future is dropped exactly once"
            );
            assert_eq!(
                cancelled.count(),
                2,
                "{case}: every future is dropped after the abort and the gauges' finish"
            );
            assert!(gauges_finished(&victims), "{case}: the gauges stay at zero");
            for handle in handles {
                assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)), "{case}");
            }
            drop(victims);
        }
    }
}

/// A task that wakes itself during its poll runs again only after work already queued, and
/// completed tasks leave the set (only the service task remains).
#[test]
fn self_woken_task_requeues_behind_queued_work() {
    Runner::new(config()).start(|context| async move {
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = {
            let order = order.clone();
            context.clone().spawn(move |_| async move {
                order.lock().unwrap().push("first");
                reschedule().await;
                order.lock().unwrap().push("first again");
            })
        };
        let second = {
            let order = order.clone();
            context
                .clone()
                .spawn(move |_| async move { order.lock().unwrap().push("second") })
        };
        first.await.unwrap();
        second.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["first", "second", "first again"]);
        assert_eq!(context.runtime().tasks.live(), 1);
    });
}

/// A foreign spawn is counted in the set as soon as `spawn` returns.
#[test]
fn foreign_spawn_joins_the_task_set_before_its_worker_runs() {
    Runner::new(config()).start(|context| async move {
        assert_eq!(context.runtime().tasks.live(), 1);
        let foreign = context.clone();
        let (handle, live) = thread::spawn(move || {
            let shared = foreign.runtime().clone();
            let handle = foreign.spawn(|_| async { 3 });
            (handle, shared.tasks.live())
        })
        .join()
        .unwrap();
        assert_eq!(live, 2);
        assert_eq!(handle.await, Ok(3));
        assert_eq!(context.runtime().tasks.live(), 1);
    });
}

/// Teardown drops every future on a worker thread, with `Local` installed and not borrowed,
/// while the worker's timer table is still open.
#[test]
fn teardown_drops_every_future_before_clearing_timers() {
    struct Probe(Drops);
    impl Drop for Probe {
        fn drop(&mut self) {
            let local = Local::current().expect("dropped on a worker");
            let mut state = local
                .state()
                .try_borrow_mut()
                .expect("Local is not borrowed");
            assert!(state.timers.next_deadline().is_some(), "timers still open");
            self.0.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let drops = Drops::default();
    let escaped = Arc::new(Mutex::new(None));
    Runner::new(config()).start(|context| {
        let drops = drops.clone();
        let escaped = escaped.clone();
        async move {
            // A registration that outlives every task keeps the timer table non-empty until
            // the worker closes it.
            let keeper = registered_sleep(Duration::from_secs(3600), Waker::noop());
            *escaped.lock().unwrap() = Some(keeper);
            let mut wakers = Vec::new();
            for index in 0..32 {
                let probe = Probe(drops.clone());
                let (tx, rx) = mpsc::channel();
                let body = move |context: Context| async move {
                    let _probe = probe;
                    let sleep = context.sleep(Duration::from_secs(3600));
                    futures::pin_mut!(sleep);
                    futures::future::poll_fn(|cx| {
                        let _ = tx.send(cx.waker().clone());
                        sleep.as_mut().poll(cx)
                    })
                    .await
                };
                if index % 2 == 0 {
                    drop(context.clone().spawn(body));
                } else {
                    let context = context.clone();
                    thread::spawn(move || drop(context.spawn(body)))
                        .join()
                        .unwrap();
                }
                wakers.push(rx);
            }
            // Let every task register its sleep, then wake half of them so that they sit queued.
            let mut registered = Vec::new();
            while registered.len() < 32 {
                reschedule().await;
                for rx in &wakers {
                    if let Ok(waker) = rx.try_recv() {
                        registered.push(waker);
                    }
                }
            }
            for waker in registered.iter().step_by(2) {
                waker.wake_by_ref();
            }
        }
    });
    assert_eq!(drops.count(), 32);
    drop(escaped.lock().unwrap().take());
}

/// A task left unpolled at shutdown whose future panics on drop: shutdown drops it without
/// polling it, with its worker's state unborrowed, the panic is contained and `start` returns
/// normally.
#[test]
fn unpolled_task_disposal_is_contained() {
    for catch in [false, true] {
        let drops = Drops::default();
        let polled = Arc::new(AtomicBool::new(false));
        let output = Runner::new(Config::default().with_catch_panics(catch)).start(|context| {
            let bomb = drops.bomb();
            let polled = polled.clone();
            async move {
                // The root returns without yielding, so the task is never polled.
                drop(context.child("unpolled").spawn(move |_| async move {
                    let _bomb = bomb;
                    polled.store(true, Ordering::SeqCst);
                    futures::future::pending::<()>().await
                }));
                5
            }
        });
        assert_eq!(output, 5);
        assert!(
            !polled.load(Ordering::SeqCst),
            "catch {catch}: never polled"
        );
        assert_eq!(drops.count(), 1, "catch {catch}: dropped once");
    }
}

/// Aborting a suspended task whose future panics on drop, for every placement: the handle
/// is `Closed`, the task's subtree is closed before the handle resolves, the panic never
/// fails the runner, which keeps spawning, and the destructor runs once with its worker's
/// state unborrowed.
#[test]
fn cancelled_task_disposal_is_contained() {
    for catch in [false, true] {
        for mode in Mode::EACH {
            let drops = Drops::default();
            let bomb = drops.bomb();
            Runner::new(Config::default().with_catch_panics(catch)).start(|context| async move {
                let (tx, rx) = oneshot::channel();
                let handle =
                    mode.place(context.child("cancelled"))
                        .spawn(move |context| async move {
                            let _bomb = bomb;
                            tx.send(context.child("retained")).ok().unwrap();
                            futures::future::pending::<()>().await
                        });
                // Abort once the task holds its bomb and is suspended.
                let retained = rx.await.unwrap();
                handle.abort();
                assert_eq!(handle.await, Err(Error::Closed));
                let called = Arc::new(AtomicBool::new(false));
                let flag = called.clone();
                let late = retained.spawn(move |_| {
                    flag.store(true, Ordering::SeqCst);
                    async {}
                });
                assert_eq!(late.now_or_never(), Some(Err(Error::Closed)));
                assert!(!called.load(Ordering::SeqCst));
                assert_eq!(
                    context.child("survivor").spawn(|_| async { 3 }).await,
                    Ok(3)
                );
            });
            assert_eq!(drops.count(), 1, "catch {catch}: dropped once");
        }
    }
}

/// A future that is ready on its first poll but panics on drop resolves its handle to
/// `Closed`; the runner stays usable.
#[test]
fn ready_future_destructor_closes_handle_and_leaves_runner_usable() {
    for catch in [false, true] {
        for mode in [Mode::Default, Mode::Dedicated] {
            struct ReadyThenBomb(Arc<AtomicUsize>, #[allow(dead_code)] DropGuard);
            impl std::future::Future for ReadyThenBomb {
                type Output = i32;
                fn poll(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<i32> {
                    self.0.fetch_add(1, Ordering::SeqCst);
                    Poll::Ready(1)
                }
            }
            Runner::new(config().with_catch_panics(catch)).start(|context| async move {
                let drops = Drops::default();
                let bomb = drops.bomb();
                let polls = Arc::new(AtomicUsize::new(0));
                let counted = polls.clone();
                let handle = mode
                    .place(context.clone())
                    .spawn(move |_| ReadyThenBomb(counted, bomb));
                assert_eq!(handle.await, Err(Error::Closed));
                assert_eq!(polls.load(Ordering::SeqCst), 1);
                assert_eq!(drops.count(), 1);
                assert_eq!(context.clone().spawn(|_| async { 7 }).await, Ok(7));
            });
        }
    }
}

/// A task panic: caught, only its handle sees `Exited`; uncaught, it fails the runner.
#[test]
fn task_panic_respects_policy() {
    for workers in [1, 2] {
        let output = Runner::new(
            config()
                .with_worker_threads(workers)
                .with_catch_panics(true),
        )
        .start(|context| async move {
            let failed = context.clone().spawn(|_| async { panic!("task failure") });
            assert_eq!(failed.await, Err(Error::Exited));
            context.spawn(|_| async { 7 }).await.unwrap()
        });
        assert_eq!(output, 7);

        let result = catch_unwind(AssertUnwindSafe(|| {
            Runner::new(config().with_worker_threads(workers)).start(|context| async move {
                drop(context.clone().spawn(|_| async { panic!("task failure") }));
                futures::future::pending::<()>().await
            })
        }));
        assert_eq!(panic_text(result), "task failure");
        assert!(tls_cleared());
    }
}

/// Deferred callbacks that produce runnable work keep the worker from parking: it runs the
/// callbacks until none are left and looks for work again. The last callback of a chain (of
/// one or three) makes the root ready and wakes it, or spawns a task that sends the root its
/// readiness; the worker must never reach the idle path while the root waits, with or without
/// an idle spinner (our default spins not at all, so the spinning case sets a budget). The park
/// ban holds from the root's first poll until it finishes.
#[test]
fn callback_generated_work_prevents_parking() {
    /// The progress the last callback of a chain produces.
    enum Work {
        /// Mark the root ready and wake its registered waker.
        Wake(Waker, Arc<AtomicBool>),
        /// Spawn a task that sends the root its readiness through a channel.
        Spawn(Context, oneshot::Sender<()>),
    }
    /// A deferred drop that defers `remaining` more before it produces the work.
    struct Chained {
        remaining: usize,
        work: Option<Work>,
    }
    impl std::task::Wake for Chained {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for Chained {
        fn drop(&mut self) {
            let work = self.work.take().expect("the work is handed down the chain");
            if self.remaining > 0 {
                let next = Waker::from(Arc::new(Chained {
                    remaining: self.remaining - 1,
                    work: Some(work),
                }));
                let local = Local::current().unwrap();
                local.state().borrow_mut().deferred.drops.push(next);
                return;
            }
            match work {
                Work::Wake(root, ready) => {
                    ready.store(true, Ordering::SeqCst);
                    root.wake();
                }
                Work::Spawn(context, ready) => {
                    drop(context.spawn(move |_| async move { ready.send(()).unwrap() }));
                }
            }
        }
    }
    /// Forbids parking on this thread until dropped, unwinding included.
    struct ParkBan;
    impl ParkBan {
        fn new() -> Self {
            assert!(
                !FORBID_PARK.with(|forbid| forbid.replace(true)),
                "a park ban is already installed"
            );
            ParkBan
        }
    }
    impl Drop for ParkBan {
        fn drop(&mut self) {
            FORBID_PARK.with(|forbid| forbid.set(false));
        }
    }
    let spinning = SpinnerConfig {
        budget_us: 20,
        max_budget_us: 200,
        quick_wake_us: 50,
    };
    for spinner in [SpinnerConfig::disabled(), spinning] {
        for spawn in [false, true] {
            for chain in [0, 2] {
                let config = config().with_idle_spinner(spinner);
                Runner::new(config).start(|context| async move {
                    let _ban = ParkBan::new();
                    let (sender, mut receiver) = oneshot::channel::<()>();
                    let mut sender = Some(sender);
                    let ready = Arc::new(AtomicBool::new(false));
                    let mut queued = false;
                    futures::future::poll_fn(|cx| {
                        if !queued {
                            queued = true;
                            let work = if spawn {
                                Work::Spawn(context.child("callback_work"), sender.take().unwrap())
                            } else {
                                Work::Wake(cx.waker().clone(), ready.clone())
                            };
                            let waker = Waker::from(Arc::new(Chained {
                                remaining: chain,
                                work: Some(work),
                            }));
                            let local = Local::current().unwrap();
                            local.state().borrow_mut().deferred.drops.push(waker);
                        }
                        if spawn {
                            Pin::new(&mut receiver).poll(cx).map(Result::unwrap)
                        } else if ready.load(Ordering::SeqCst) {
                            Poll::Ready(())
                        } else {
                            Poll::Pending
                        }
                    })
                    .await;
                });
            }
        }
    }
}

/// Worker zero's final timer callbacks run before its TLS is removed, whether the root
/// returned or panicked: a timer's waker dropped at the table's close finds `Local`
/// installed, closing and unborrowed, and a sleep polled there is refused. The callback's
/// panic fails the runner only when the root returned (its output is then dropped once);
/// a root panic stays the result, with no output to drop.
#[test]
fn final_callbacks_finish_before_tls_removal() {
    struct Callback(Arc<AtomicUsize>);
    impl std::task::Wake for Callback {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for Callback {
        fn drop(&mut self) {
            let local = Local::current().expect("Local is still installed");
            assert!(local.is_closing());
            assert!(
                local.state().try_borrow_mut().is_ok(),
                "Local is not borrowed"
            );
            let sleep = crate::worker::Sleep::new(Duration::from_secs(1));
            let text = panic_text(catch_unwind(AssertUnwindSafe(|| {
                futures::pin_mut!(sleep);
                let _ = sleep.poll_unpin(&mut TaskContext::from_waker(Waker::noop()));
            })));
            assert_eq!(text, "io_uring sleep polled after its worker closed");
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("terminal callback panic");
        }
    }
    struct Output(Drops);
    impl Drop for Output {
        fn drop(&mut self) {
            self.0.0.fetch_add(1, Ordering::SeqCst);
            panic!("root output drop panic");
        }
    }
    for root_panics in [true, false] {
        let calls = Arc::new(AtomicUsize::new(0));
        let output_drops = Drops::default();
        let escaped = Arc::new(Mutex::new(None));
        let result = catch_unwind(AssertUnwindSafe(|| {
            Runner::new(config()).start(|_| {
                let calls = calls.clone();
                let escaped = escaped.clone();
                let output_drops = output_drops.clone();
                async move {
                    let waker = Waker::from(Arc::new(Callback(calls)));
                    let sleep = registered_sleep(Duration::from_secs(60), &waker);
                    drop(waker);
                    *escaped.lock().unwrap() = Some(sleep);
                    if root_panics {
                        panic!("primary root panic");
                    }
                    Output(output_drops)
                }
            })
        }));
        let expected = if root_panics {
            "primary root panic"
        } else {
            "terminal callback panic"
        };
        assert_eq!(panic_text(result), expected);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "root panics {root_panics}");
        assert_eq!(output_drops.count(), usize::from(!root_panics));
        drop(escaped.lock().unwrap().take());
        assert!(tls_cleared());
    }
}

/// A sleep registered on a worker that closed panics when polled again.
#[test]
fn sleep_polled_after_its_worker_closed_panics() {
    let mut escaped = Runner::new(config())
        .start(|_| async move { Some(registered_sleep(Duration::from_secs(60), Waker::noop())) });
    let mut sleep = escaped.take().unwrap();
    let text = panic_text(catch_unwind(AssertUnwindSafe(|| {
        let _ = sleep.poll_unpin(&mut TaskContext::from_waker(Waker::noop()));
    })));
    assert_eq!(text, "io_uring sleep polled after its worker closed");
}

/// An unwind between the root and the tree's abort (the `BEFORE_ABORT` hook panics) still
/// stops the pool workers: `start` fails with that panic within the test's timeout instead
/// of waiting for them forever, and the pool ends clean.
#[test]
fn unwind_before_shutdown_stops_the_pool() {
    let kept = Arc::new(Mutex::new(None));
    let (finished, result) = mpsc::channel();
    {
        let kept = kept.clone();
        // The runner runs on a thread of its own so that a hang fails the test below.
        thread::spawn(move || {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                Runner::new(config().with_worker_threads(2)).start(|context| {
                    *kept.lock().unwrap() = Some(context.runtime().pool.clone());
                    BEFORE_ABORT.with(|hook| {
                        *hook.borrow_mut() = Some(Box::new(|| panic!("injected abort failure")))
                    });
                    async {}
                })
            }));
            let _ = finished.send(panic_text(outcome));
        });
    }
    let text = result
        .recv_timeout(TEST_TIMEOUT)
        .expect("worker zero stops the pool workers");
    assert_eq!(text, "injected abort failure");
    let pool = kept.lock().unwrap().take().unwrap();
    assert!(pool.is_clean());
    assert_eq!(
        Arc::strong_count(&pool),
        1,
        "every worker let go of the pool"
    );
    assert_eq!(
        Arc::weak_count(&pool),
        0,
        "no task cell outlived the runner"
    );
}

/// The runner's pool is released with no task cell left behind.
#[test]
fn pool_is_clean_after_shutdown() {
    for workers in [1, 2] {
        let pool = Runner::new(config().with_worker_threads(workers)).start(|context| async move {
            for _ in 0..100 {
                drop(context.clone().spawn(|context| async move {
                    context.sleep(Duration::from_secs(3600)).await
                }));
            }
            reschedule().await;
            context.runtime().pool.clone()
        });
        assert!(pool.is_clean());
        assert_eq!(Arc::strong_count(&pool), 1);
        assert_eq!(Arc::weak_count(&pool), 0);
    }
}

/// When worker zero's ring cannot be created, `start` fails with the cause, never calls the
/// builder, and drops it before panicking.
#[test]
fn startup_failure_drops_the_root_builder_outside_any_unwind() {
    struct Builder(Arc<AtomicBool>);
    impl Drop for Builder {
        fn drop(&mut self) {
            self.0.store(thread::panicking(), Ordering::SeqCst);
        }
    }
    let panicking_at_drop = Arc::new(AtomicBool::new(true));
    let builder = Builder(panicking_at_drop.clone());
    FAIL_STARTUP.with(|fail| {
        *fail.borrow_mut() = Some("injected native worker initialization failure".into())
    });
    let result = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(config()).start(move |_| {
            let _builder = builder;
            async {}
        })
    }));
    let text = panic_text(result);
    assert!(
        text.contains("failed to create native io_uring worker"),
        "{text}"
    );
    assert!(
        text.contains("injected native worker initialization failure"),
        "{text}"
    );
    assert!(!panicking_at_drop.load(Ordering::SeqCst));
    assert!(tls_cleared());
}

/// Validation rounds a ring size up to a power of two (3 becomes 4), and a runner started
/// with such a size gives its workers the rounded one. The crate-level half of the seed's
/// `config_validation_before_startup`, whose other checks `tests/public_api.rs` makes through
/// the public API (which cannot see the validated size).
#[test]
fn config_validation_rounds_the_ring_size_up_to_a_power_of_two() {
    let three = crate::RingConfig {
        size: 3,
        ..crate::RingConfig::default()
    };
    let mut rounded = config().with_ring_config(three);
    rounded.validate();
    assert_eq!(rounded.ring_config.size, 4, "validation rounds 3 up to 4");
    let size = Runner::new(config().with_ring_config(three))
        .start(|context| async move { context.runtime().config.ring_config.size });
    assert_eq!(size, 4, "the runner uses the validated size");
}

/// A second runner on a directory in use fails before its closure; the outer runner keeps
/// its TLS, its storage and its scheduling.
#[test]
fn nested_same_directory_rejected_before_closure_and_outer_remains_usable() {
    let config = config();
    let directory = config.storage_directory().clone();
    Runner::new(config).start(|context| async move {
        let called = Arc::new(AtomicBool::new(false));
        let flag = called.clone();
        let result = catch_unwind(AssertUnwindSafe(|| {
            Runner::new(Config::new().with_storage_directory(directory)).start(move |_| {
                flag.store(true, Ordering::SeqCst);
                async {}
            })
        }));
        assert!(panic_text(result).contains("in use by another runner"));
        assert!(!called.load(Ordering::SeqCst));
        assert!(Local::current().is_some());
        assert_eq!(context.clone().spawn(|_| async { 7 }).await, Ok(7));
        context.sleep(Duration::from_millis(1)).await;
    });
    assert!(tls_cleared());
}

/// A read in flight makes the worker wait inside io_uring; a wake from a foreign thread
/// interrupts that wait, and the read's completion wakes its task.
#[test]
fn a_ring_wait_is_interrupted_by_foreign_wakes_and_completions() {
    let (read, write) = pipe();
    Runner::new(config()).start(|context| async move {
        let reader = context.clone().spawn(move |_| async move {
            let RequestOutput::Read(result) =
                Operation::register(Request::Read { fd: read, len: 4 }).await
            else {
                unreachable!("a read answers with a read")
            };
            result.unwrap()
        });
        reschedule().await;
        assert_eq!(context.runtime().metrics.pending_operations.get(), 1);
        // The root now waits with a read in flight; a foreign thread wakes it via a spawn.
        let foreign = context.clone();
        let (tx, rx) = oneshot::channel();
        thread::spawn(move || {
            drop(foreign.spawn(move |_| async move { tx.send(()).unwrap() }));
        });
        rx.await.unwrap();
        let writer = thread::spawn(move || {
            write_ping(&write);
            write
        });
        assert_eq!(reader.await.unwrap(), b"ping");
        drop(writer.join().unwrap());
        assert_eq!(context.runtime().metrics.pending_operations.get(), 0);
    });
}

/// A read still in flight when its worker closes is cancelled and completes with an error;
/// the pending-operations gauge returns to zero.
#[test]
fn closing_a_worker_cancels_reads_in_flight() {
    let (read, write) = pipe();
    let (shared, operation) = Runner::new(config()).start(|context| async move {
        let mut operation = Operation::register(Request::Read { fd: read, len: 4 });
        assert!(
            operation
                .poll_unpin(&mut TaskContext::from_waker(Waker::noop()))
                .is_pending()
        );
        (context.runtime().clone(), operation)
    });
    assert_eq!(shared.metrics.pending_operations.get(), 0);
    let mut operation = operation;
    match operation.poll_unpin(&mut TaskContext::from_waker(Waker::noop())) {
        Poll::Ready(RequestOutput::Read(Err(_))) => {}
        other => panic!("expected a cancelled read, got {other:?}"),
    }
    drop(write);
}

/// `Message::WakeRoot` sent to worker zero's mailbox polls the root again.
#[test]
fn wake_root_message_polls_the_root() {
    Runner::new(config()).start(|context| async move {
        let mut polls = 0;
        futures::future::poll_fn(|_| {
            polls += 1;
            if polls == 1 {
                let shared = context.runtime().clone();
                thread::spawn(move || shared.pool.mailbox(0).send(Message::WakeRoot));
                return Poll::Pending;
            }
            Poll::Ready(())
        })
        .await;
        assert_eq!(polls, 2);
    });
}

mod dedicated;
mod failures;
mod io;
mod pool;
mod shutdown;

/// With several workers the root's tasks all complete on at most that many threads; a quiet
/// worker zero keeps the first spawn (its queue's kept item), and the rest are stolen from its
/// queue: while the root holds worker zero, the other workers start every one of them, so none
/// runs on worker zero. With one worker every task runs on the root's thread.
#[test]
fn tasks_spread_across_workers_and_complete() {
    for workers in [1, 2, 4] {
        let config = config().with_worker_threads(workers);
        assert_eq!(config.worker_threads(), workers);
        let local = Rc::new(Cell::new(0));
        let threads = Runner::new(config).start(|context| {
            let local = local.clone();
            async move {
                let root = thread::current().id();
                let started = Arc::new(AtomicUsize::new(0));
                let handles: Vec<_> = (0..3 * workers)
                    .map(|_| {
                        let started = started.clone();
                        context.child("worker").spawn(move |_| async move {
                            started.fetch_add(1, Ordering::SeqCst);
                            thread::current().id()
                        })
                    })
                    .collect();
                if workers > 1 {
                    // The root holds worker zero: only the other workers can start the
                    // spawns queued behind its kept one, by stealing them.
                    spin_until(
                        || started.load(Ordering::SeqCst) >= 3 * workers - 1,
                        "the spawns behind the kept one must start on the other workers",
                    );
                }
                let mut threads = Vec::new();
                for handle in handles {
                    threads.push(handle.await.unwrap());
                }
                local.set(1);
                if workers == 1 {
                    assert!(threads.iter().all(|thread| *thread == root));
                } else {
                    assert_eq!(threads[0], root, "a quiet worker keeps its first spawn");
                    assert!(
                        threads[1..].iter().all(|thread| *thread != root),
                        "every other spawn runs off worker zero: {threads:?}"
                    );
                }
                threads
            }
        });
        let distinct: std::collections::HashSet<_> = threads.into_iter().collect();
        assert!(distinct.len() <= workers);
        assert_eq!(local.get(), 1);
        assert!(tls_cleared());
    }
}

/// A storage directory the runner created and left empty is removed when it shuts down; one
/// that existed before, or that holds anything besides the lock file, is kept.
#[test]
fn storage_directory_left_empty_by_its_creator_is_removed() {
    let config = config();
    let directory = config.storage_directory().clone();
    Runner::new(config).start(|_| async {});
    assert!(
        !directory.exists(),
        "an empty directory the runner made is gone"
    );

    std::fs::create_dir_all(&directory).unwrap();
    Runner::new(Config::new().with_storage_directory(&directory)).start(|_| async {});
    assert!(
        directory.exists(),
        "a directory that existed before is kept"
    );
    std::fs::remove_dir_all(&directory).unwrap();

    let config = Config::new().with_storage_directory(&directory);
    Runner::new(config).start(|_| async {
        std::fs::write(directory.join("kept"), b"data").unwrap();
    });
    assert!(
        directory.join("kept").exists(),
        "a directory with data is kept"
    );
    assert!(directory.join(".hold").exists());
    std::fs::remove_dir_all(&directory).unwrap();
}

/// Wakes from many threads racing the task's own polls on two workers: no wake is lost (the
/// task sees every increment), and the task is never polled by two threads at once.
#[test]
fn racing_wakes_are_never_lost_and_never_poll_twice_at_once() {
    const THREADS: usize = 4;
    const WAKES: usize = 2_000;
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let counter = Arc::new(AtomicUsize::new(0));
        let polling = Arc::new(AtomicBool::new(false));
        let polls = Arc::new(AtomicUsize::new(0));
        let (waker_tx, mut waker_rx) = futures::channel::mpsc::unbounded::<Waker>();
        let task = {
            let (counter, polling, polls) = (counter.clone(), polling.clone(), polls.clone());
            context.clone().spawn(move |_| {
                futures::future::poll_fn(move |cx| {
                    assert!(!polling.swap(true, Ordering::SeqCst), "two polls at once");
                    polls.fetch_add(1, Ordering::SeqCst);
                    let _ = waker_tx.unbounded_send(cx.waker().clone());
                    let seen = counter.load(Ordering::SeqCst);
                    polling.store(false, Ordering::SeqCst);
                    if seen == THREADS * WAKES {
                        Poll::Ready(seen)
                    } else {
                        Poll::Pending
                    }
                })
            })
        };
        let waker = futures::StreamExt::next(&mut waker_rx).await.unwrap();
        let wakers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (waker, counter) = (waker.clone(), counter.clone());
                thread::spawn(move || {
                    for _ in 0..WAKES {
                        counter.fetch_add(1, Ordering::SeqCst);
                        waker.wake_by_ref();
                    }
                })
            })
            .collect();
        assert_eq!(task.await, Ok(THREADS * WAKES));
        for thread in wakers {
            thread.join().unwrap();
        }
        assert!(polls.load(Ordering::SeqCst) >= 2);
    });
}

/// Contexts and handles kept after `start` returned do not keep the storage directory locked:
/// a second runner on the same directory starts.
#[test]
fn escaped_contexts_and_handles_do_not_hold_the_storage_directory() {
    let config = config();
    let directory = config.storage_directory().clone();
    let (context, handle) = Runner::new(config).start(|context| async move {
        let handle = context.clone().spawn(|_| futures::future::pending::<()>());
        (context, handle)
    });
    let reused = Runner::new(
        Config::new()
            .with_storage_directory(&directory)
            .with_worker_threads(1),
    )
    .start(|_| async { 3 });
    assert_eq!(reused, 3);
    assert_eq!(handle.now_or_never(), Some(Err(Error::Closed)));
    drop(context);
}
