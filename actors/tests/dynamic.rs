//! Dynamic supervision and restart backoff through the public API: children of two actor
//! types under one `DynamicSupervisor`, each restart type, intensity and escalation,
//! `max_children`, terminating children (and unknown ids), a ref's `stop()` on a supervised
//! child, and backoff delays on both supervisors, observed in order and above their lower
//! bounds.

use actors::prelude::*;
use actors::supervisor::{Backoff, ChildSpec, DynamicSupervisor, Restart, Strategy, Supervisor};
use actors::{Context, Error, ExitReason};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// When each incarnation started and ended.
type Timeline = Arc<Mutex<Vec<(&'static str, usize, Instant)>>>;

#[actor(mailbox = 16)]
struct Worker {
    incarnation: usize,
    timeline: Timeline,
}

#[actor]
impl Worker {
    fn on_start(&mut self) {
        self.timeline
            .lock()
            .push(("start", self.incarnation, Instant::now()));
    }

    fn on_stop(&mut self) {
        self.timeline
            .lock()
            .push(("stop", self.incarnation, Instant::now()));
    }

    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn fail(&mut self) {
        panic!("worker fails");
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// A second actor type, under the same supervisor.
#[actor]
struct Greeter {
    name: String,
}

#[actor]
impl Greeter {
    fn greet(&self) -> String {
        format!("hello from {}", self.name)
    }
}

/// A spec for a worker, counting its incarnations from 1.
fn worker(restart: Restart, timeline: &Timeline) -> ChildSpec<Worker> {
    let timeline = timeline.clone();
    let incarnations = AtomicUsize::new(0);
    ChildSpec::new(move || Worker {
        incarnation: incarnations.fetch_add(1, Ordering::SeqCst) + 1,
        timeline: timeline.clone(),
    })
    .restart(restart)
}

/// Children of two actor types run under one supervisor, are listed in start order and
/// counted; terminating one ends it for good (`Stopped`, refs closed) and removes it, and
/// terminating an id that is not a child is an error that names it.
#[runtime::test(timeout = "20s")]
async fn children_of_two_types_start_list_and_terminate(context: runtime::Context) {
    let timeline = Timeline::default();
    let supervisor = DynamicSupervisor::new("mixed").spawn(&context);
    let worker = supervisor
        .start_child(worker(Restart::Permanent, &timeline))
        .await
        .unwrap();
    let greeter = supervisor
        .start_child(ChildSpec::new(|| Greeter { name: "ada".into() }))
        .await
        .unwrap();
    assert_eq!(worker.incarnation().await, Ok(1));
    assert_eq!(greeter.greet().await.unwrap(), "hello from ada");
    assert_eq!(supervisor.count(), 2);
    assert_eq!(supervisor.children(), [worker.id(), greeter.id()]);

    supervisor.terminate_child(worker.id()).await.unwrap();
    assert_eq!(worker.join().await, ExitReason::Stopped);
    assert_eq!(worker.incarnation().await, Err(Error::Closed));
    assert_eq!(supervisor.children(), [greeter.id()]);
    let unknown = worker.id();
    assert_eq!(
        supervisor.terminate_child(unknown).await,
        Err(Error::NoSuchChild {
            supervisor: "mixed",
            id: unknown
        })
    );
    let error = supervisor.terminate_child(unknown).await.unwrap_err();
    assert!(error.to_string().contains(&unknown.to_string()), "{error}");

    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    assert_eq!(greeter.join().await, ExitReason::Stopped);
    assert_eq!(
        supervisor
            .start_child(ChildSpec::new(|| Greeter {
                name: "late".into()
            }))
            .await
            .unwrap_err(),
        Error::Closed
    );
}

/// Each restart type: a permanent child restarts after a panic and after stopping itself; a
/// transient one after a panic only; a temporary one never (it leaves with its reason).
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn each_restart_type_decides_which_ends_restart(context: runtime::Context) {
    let timeline = Timeline::default();
    let supervisor = DynamicSupervisor::new("types")
        .intensity(10, Duration::from_secs(60))
        .spawn(&context);
    let start = |restart| supervisor.start_child(worker(restart, &timeline));

    let permanent = start(Restart::Permanent).await.unwrap();
    assert!(permanent.fail().await.is_err());
    assert_eq!(permanent.incarnation().await, Ok(2));
    permanent.tell_finish().await.unwrap();
    assert_eq!(permanent.incarnation().await, Ok(3));

    let transient = start(Restart::Transient).await.unwrap();
    assert!(transient.fail().await.is_err());
    assert_eq!(transient.incarnation().await, Ok(2));
    transient.tell_finish().await.unwrap();
    assert_eq!(transient.join().await, ExitReason::Normal);

    let temporary = start(Restart::Temporary).await.unwrap();
    assert!(temporary.fail().await.is_err());
    assert_eq!(
        temporary.join().await,
        ExitReason::Panicked("worker fails".to_string())
    );
    assert_eq!(temporary.incarnation().await, Err(Error::Closed));

    // Only the permanent child is left (the others' ends were read before their joins
    // resolved).
    assert_eq!(supervisor.children(), [permanent.id()]);
    // A ref's stop is for good, whatever the policy.
    assert_eq!(permanent.stop().await, ExitReason::Stopped);
    assert_eq!(permanent.incarnation().await, Err(Error::Closed));
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    assert_eq!(supervisor.count(), 0);
}

/// Past its intensity the supervisor stops every child and gives up: it ends `Panicked`, its
/// children's refs see `Closed`, and the program goes on (task panics are not caught here, so
/// a give-up that failed the runner would fail this test).
#[runtime::test(timeout = "20s")]
async fn exceeding_the_intensity_ends_the_supervisor_and_not_the_program(
    context: runtime::Context,
) {
    let timeline = Timeline::default();
    let supervisor = DynamicSupervisor::new("fragile_pool")
        .intensity(1, Duration::from_secs(60))
        .spawn(&context);
    let steady = supervisor
        .start_child(worker(Restart::Permanent, &timeline))
        .await
        .unwrap();
    let failing = supervisor
        .start_child(worker(Restart::Permanent, &timeline))
        .await
        .unwrap();
    assert!(failing.fail().await.is_err());
    assert_eq!(failing.incarnation().await, Ok(2));
    assert!(failing.fail().await.is_err());
    match supervisor.join().await {
        ExitReason::Panicked(message) => {
            assert!(message.contains("`fragile_pool` gave up"), "{message}")
        }
        other => panic!("the supervisor gave up, not {other:?}"),
    }
    assert_eq!(steady.incarnation().await, Err(Error::Closed));
    assert_eq!(failing.incarnation().await, Err(Error::Closed));
    assert_eq!(steady.join().await, ExitReason::Stopped);
    // The child that made it give up keeps its failure.
    assert_eq!(
        failing.join().await,
        ExitReason::Panicked("worker fails".to_string())
    );
    use runtime::Spawner as _;
    assert_eq!(context.spawn(|_| async { "goes on" }).await, Ok("goes on"));
}

/// `max_children` refuses one more child with a clear error, starting nothing; room made by
/// a child's end is usable again.
#[runtime::test(timeout = "20s")]
async fn max_children_refuses_with_a_clear_error(context: runtime::Context) {
    let timeline = Timeline::default();
    let supervisor = DynamicSupervisor::new("bounded")
        .max_children(2)
        .spawn(&context);
    let first = supervisor
        .start_child(worker(Restart::Temporary, &timeline))
        .await
        .unwrap();
    let _second = supervisor
        .start_child(worker(Restart::Temporary, &timeline))
        .await
        .unwrap();
    let refused = supervisor
        .start_child(worker(Restart::Temporary, &timeline))
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        Error::TooManyChildren {
            supervisor: "bounded",
            max: 2
        }
    );
    assert!(refused.to_string().contains("max_children"), "{refused}");
    assert_eq!(timeline.lock().len(), 2, "the refused child never started");
    first.tell_finish().await.unwrap();
    assert_eq!(first.join().await, ExitReason::Normal);
    let _third = supervisor
        .start_child(worker(Restart::Temporary, &timeline))
        .await
        .unwrap();
    assert_eq!(supervisor.count(), 2);
}

/// A child whose `on_start` panics is not admitted: `start_child` says so, once the
/// child's `on_stop` has run (its mailbox ends after it, as every actor's does).
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_child_that_fails_to_start_is_refused(context: runtime::Context) {
    #[actor]
    struct Broken {
        stopped: Arc<Mutex<Option<ExitReason>>>,
    }

    #[actor]
    impl Broken {
        fn on_start(&mut self) {
            panic!("broken on start");
        }

        fn on_stop(&mut self, reason: &ExitReason) {
            *self.stopped.lock() = Some(reason.clone());
        }
    }

    let stopped = Arc::new(Mutex::new(None));
    let made = Arc::new(AtomicUsize::new(0));
    let supervisor = DynamicSupervisor::new("careful").spawn(&context);
    let spec = {
        let (stopped, made) = (stopped.clone(), made.clone());
        ChildSpec::new(move || {
            made.fetch_add(1, Ordering::SeqCst);
            Broken {
                stopped: stopped.clone(),
            }
        })
        .restart(Restart::Permanent)
    };
    assert_eq!(
        supervisor.start_child(spec).await.unwrap_err(),
        Error::Panicked { actor: "broken" }
    );
    assert_eq!(
        *stopped.lock(),
        Some(ExitReason::Panicked("broken on start".to_string()))
    );
    assert_eq!(supervisor.count(), 0);
    assert_eq!(supervisor.children(), []);
    // Refused, not restarted, though it is permanent: a greeter started next is the only
    // child (a restart would have been made before this request was read).
    let greeter = supervisor
        .start_child(ChildSpec::new(|| Greeter {
            name: "next".into(),
        }))
        .await
        .unwrap();
    assert_eq!(supervisor.children(), [greeter.id()]);
    assert_eq!(made.load(Ordering::SeqCst), 1);
}

/// A child whose `on_start` failed is out of `children()` while its `on_stop` still runs,
/// and terminating it then is `NoSuchChild`: it never started. Its end keeps its panic.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_refused_child_cannot_be_terminated(context: runtime::Context) {
    use futures::channel::oneshot;

    #[actor]
    struct Lingering {
        stopping: Option<oneshot::Sender<actors::ActorId>>,
        go: Option<oneshot::Receiver<()>>,
    }

    #[actor]
    impl Lingering {
        fn on_start(&mut self) {
            panic!("lingering fails to start");
        }

        async fn on_stop(&mut self, ctx: &mut Context<Self>) {
            let _ = self.stopping.take().expect("one stop").send(ctx.id());
            let _ = self.go.take().expect("one stop").await;
        }
    }

    /// One turn of the scheduler.
    async fn yield_once() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                std::task::Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        })
        .await
    }

    let supervisor = DynamicSupervisor::new("lingering_pool").spawn(&context);
    let (stopping, stopped) = oneshot::channel();
    let (go, gone) = oneshot::channel();
    let slots = Arc::new(Mutex::new(Some((stopping, gone))));
    let spec = ChildSpec::new(move || {
        let (stopping, go) = slots.lock().take().expect("made once");
        Lingering {
            stopping: Some(stopping),
            go: Some(go),
        }
    });
    let starting = {
        let supervisor = supervisor.clone();
        context.spawn(move |_| async move { supervisor.start_child(spec).await.map(|_| ()) })
    };
    let id = stopped.await.unwrap();
    // The caller heard of the failure and took the child out of the registry.
    while supervisor.count() != 0 {
        yield_once().await;
    }
    assert_eq!(
        supervisor.terminate_child(id).await,
        Err(Error::NoSuchChild {
            supervisor: "lingering_pool",
            id
        })
    );
    go.send(()).unwrap();
    assert_eq!(
        starting.await.unwrap(),
        Err(Error::Panicked { actor: "lingering" })
    );
    assert_eq!(supervisor.count(), 0);
}

/// The loop does not wait for a child's `on_start`: a child may start a sibling through its
/// own supervisor while it starts (waiting there would deadlock a loop that waited for it).
#[runtime::test(timeout = "20s")]
async fn a_child_may_call_its_supervisor_while_it_starts(context: runtime::Context) {
    #[actor]
    struct Founder {
        supervisor: actors::supervisor::DynamicSupervisorRef,
        sibling: Option<GreeterRef>,
    }

    #[actor]
    impl Founder {
        async fn on_start(&mut self) {
            let sibling = self
                .supervisor
                .start_child(ChildSpec::new(|| Greeter {
                    name: "sibling".into(),
                }))
                .await
                .expect("the supervisor answers while this child starts");
            self.sibling = Some(sibling);
        }

        fn sibling(&self) -> Option<GreeterRef> {
            self.sibling.clone()
        }
    }

    let supervisor = DynamicSupervisor::new("founders").spawn(&context);
    let founder = {
        let handle = supervisor.clone();
        supervisor
            .start_child(ChildSpec::new(move || Founder {
                supervisor: handle.clone(),
                sibling: None,
            }))
            .await
            .unwrap()
    };
    let sibling = founder
        .sibling()
        .await
        .unwrap()
        .expect("started in on_start");
    assert_eq!(sibling.greet().await.unwrap(), "hello from sibling");
    assert_eq!(supervisor.children(), [founder.id(), sibling.id()]);
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
}

/// A child terminated while it waits out a restart's backoff ends `Stopped` (it was asked
/// to), not with the failure it was about to be restarted from.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn terminating_a_child_during_its_backoff_stops_it(context: runtime::Context) {
    let timeline = Timeline::default();
    let supervisor = DynamicSupervisor::new("halting")
        .backoff(Backoff::exponential(
            Duration::from_secs(600),
            Duration::from_secs(600),
        ))
        .spawn(&context);
    let child = supervisor
        .start_child(worker(Restart::Permanent, &timeline))
        .await
        .unwrap();
    assert!(child.fail().await.is_err());
    // Still listed while it waits for its restart.
    assert_eq!(supervisor.children(), [child.id()]);
    supervisor.terminate_child(child.id()).await.unwrap();
    assert_eq!(child.join().await, ExitReason::Stopped);
    assert_eq!(supervisor.count(), 0);
}

/// The gaps between each failure and the next start, from a timeline.
fn restart_gaps(timeline: &Timeline) -> Vec<Duration> {
    let timeline = timeline.lock();
    timeline
        .windows(2)
        .filter(|pair| pair[0].0 == "stop" && pair[1].0 == "start")
        .map(|pair| {
            assert_eq!(pair[1].1, pair[0].1 + 1, "incarnations in order");
            pair[1].2 - pair[0].2
        })
        .collect()
}

/// A failing child, and the lower bounds of its first three restart delays.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_millis(80);

/// The tests' schedule. Its count never resets within a test (an incarnation would have to
/// run an hour), so the n-th restart waits the n-th delay however slow the machine: a reset
/// after a run longer than the maximum delay is `Backoff`'s unit tests' to check.
fn backoff() -> Backoff {
    Backoff::exponential(BACKOFF_MIN, BACKOFF_MAX).reset_after(Duration::from_secs(3600))
}

/// Asserts each restart waited at least its delay's lower bound (never an upper bound).
fn assert_backed_off(gaps: &[Duration]) {
    let backoff = backoff();
    assert_eq!(gaps.len(), 3, "{gaps:?}");
    for (attempt, gap) in gaps.iter().enumerate() {
        let floor = backoff
            .ceiling(attempt as u32)
            .mul_f64(0.8)
            .max(BACKOFF_MIN);
        assert!(*gap >= floor, "restart {attempt}: {gap:?} < {floor:?}");
    }
}

/// Restarts of a dynamic child wait their backoff, in order, each at least its lower bound;
/// a message sent meanwhile waits in the mailbox and reaches the next incarnation.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn dynamic_restarts_back_off(context: runtime::Context) {
    let timeline = Timeline::default();
    let supervisor = DynamicSupervisor::new("patient")
        .intensity(10, Duration::from_secs(60))
        .backoff(backoff())
        .spawn(&context);
    let child = supervisor
        .start_child(worker(Restart::Permanent, &timeline))
        .await
        .unwrap();
    for incarnation in 1..=3 {
        assert!(child.fail().await.is_err());
        // Sent during the delay: answered by the next incarnation.
        assert_eq!(child.incarnation().await, Ok(incarnation + 1));
    }
    assert_backed_off(&restart_gaps(&timeline));
}

/// The static supervisor backs off the same way, and a stop during a long delay is handled
/// at once rather than after it.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn static_restarts_back_off_and_stop_during_the_delay(context: runtime::Context) {
    let timeline = Timeline::default();
    let mut supervisor = Supervisor::new("patient_team", Strategy::OneForOne)
        .intensity(10, Duration::from_secs(60))
        .backoff(backoff());
    let child = supervisor.child(worker(Restart::Permanent, &timeline));
    let supervisor = supervisor.spawn(&context);
    for incarnation in 1..=3 {
        assert!(child.fail().await.is_err());
        assert_eq!(child.incarnation().await, Ok(incarnation + 1));
    }
    assert_backed_off(&restart_gaps(&timeline));

    let timeline = Timeline::default();
    let mut supervisor_slow = Supervisor::new("slow_team", Strategy::OneForOne).backoff(
        Backoff::exponential(Duration::from_secs(600), Duration::from_secs(600)),
    );
    let slow = supervisor_slow.child(worker(Restart::Permanent, &timeline));
    let supervisor_slow = supervisor_slow.spawn(&context);
    assert!(slow.fail().await.is_err());
    supervisor_slow.stop();
    // Within the test's timeout, far below the 600 s delay.
    assert_eq!(supervisor_slow.join().await, actors::ExitReason::Stopped);
    // It ends for good because its supervisor stopped, not from the failure it waited to be
    // restarted from.
    assert_eq!(slow.join().await, ExitReason::Stopped);
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
}

/// Stopping a dynamic supervisor asks all its children at once (as OTP's does): two children
/// whose `on_stop` each waits for the other's to begin both end `Stopped`. One at a time,
/// the first would wait out its (long) shutdown timeout.
#[runtime::test(timeout = "20s")]
async fn stopping_the_supervisor_stops_its_children_at_once(context: runtime::Context) {
    use futures::StreamExt as _;
    use futures::channel::mpsc;

    #[actor]
    struct Patient {
        stopping: mpsc::UnboundedSender<()>,
        others: Arc<Mutex<Option<futures::channel::oneshot::Receiver<()>>>>,
    }

    #[actor]
    impl Patient {
        async fn on_stop(&mut self) {
            let _ = self.stopping.unbounded_send(());
            let go = self.others.lock().take().expect("one go per child");
            let _ = go.await;
        }
    }

    let (stopping, mut stopped) = mpsc::unbounded();
    let supervisor = DynamicSupervisor::new("together").spawn(&context);
    let mut goes = Vec::new();
    let mut children = Vec::new();
    for _ in 0..2 {
        let (go, gone) = futures::channel::oneshot::channel();
        goes.push(go);
        let others = Arc::new(Mutex::new(Some(gone)));
        let stopping = stopping.clone();
        let spec = ChildSpec::new(move || Patient {
            stopping: stopping.clone(),
            others: others.clone(),
        })
        .shutdown_timeout(Duration::from_secs(600));
        children.push(supervisor.start_child(spec).await.unwrap());
    }
    supervisor.stop();
    // Both `on_stop`s began before either finished.
    stopped.next().await.unwrap();
    stopped.next().await.unwrap();
    for go in goes {
        go.send(()).unwrap();
    }
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    for child in &children {
        assert_eq!(child.join().await, ExitReason::Stopped);
    }
}

/// Three tasks join one dynamic supervisor, each through its own clone of the ref,
/// registered while it runs: all hear the same reason (not only the first, as when a join
/// took the task's handle), as do `stop()` and a join made after the end.
#[runtime::test(timeout = "20s")]
async fn every_joiner_of_a_dynamic_supervisor_hears_its_end(context: runtime::Context) {
    let supervisor = DynamicSupervisor::new("joined").spawn(&context);
    let child = supervisor
        .start_child(ChildSpec::new(|| Greeter {
            name: "joined".into(),
        }))
        .await
        .unwrap();
    let mut joins = Vec::new();
    for _ in 0..3 {
        let mut join = supervisor.clone().join();
        assert!(futures::poll!(&mut join).is_pending(), "it runs");
        joins.push(context.clone().spawn(move |_| join));
    }
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
    for join in joins {
        assert_eq!(join.await.unwrap(), ExitReason::Stopped);
    }
    assert_eq!(supervisor.join().await, ExitReason::Stopped);
    assert_ne!(supervisor.id(), child.id());
    // Its children ended for good before it did.
    assert!(child.inner().is_closed());
}
