//! Supervision's edges: a temporary sibling under one-for-all and rest-for-one, a ref's
//! `stop()` while a static supervisor waits out a backoff (the cancelled restart not counted,
//! the wait ended), requests to a nested dynamic supervisor that ended for good, and a
//! `start_child` dropped before it was taken.
//!
//! Waits that detect a hang use `Clock::timeout` with a bound far above what the correct
//! behaviour needs (milliseconds): a timeout here is the failure, never synchronization.

use actors::prelude::*;
use actors::supervisor::{Backoff, ChildSpec, DynamicSupervisor, Restart, Strategy, Supervisor};
use actors::{Context, Error, ExitReason};
use futures::channel::oneshot;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Long enough that no restart in a test leaves the intensity window.
const WINDOW: Duration = Duration::from_secs(3600);
const SHUTDOWN: Duration = Duration::from_secs(5);
/// A backoff no test waits out.
const FOREVER: Duration = Duration::from_secs(600);
/// Far longer than anything correct here takes; reaching it means a hang.
const HANG: Duration = Duration::from_secs(5);

#[actor(mailbox = 16)]
struct Member {
    incarnation: usize,
}

#[actor]
impl Member {
    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn fail(&mut self) {
        panic!("fails on purpose");
    }

    /// Fails, leaving a task in this incarnation's scope that holds `reported`: once the
    /// receiver sees it dropped, the incarnation's report is queued at its supervisor.
    fn fail_reported(&mut self, ctx: &mut Context<Self>, reported: oneshot::Sender<()>) {
        drop(ctx.runtime().clone().spawn(move |_| async move {
            let _reported = reported;
            futures::future::pending::<()>().await
        }));
        panic!("fails on purpose");
    }
}

fn numbered() -> impl FnMut() -> Member + Send + 'static {
    let made = AtomicUsize::new(0);
    move || Member {
        incarnation: made.fetch_add(1, Ordering::SeqCst) + 1,
    }
}

fn member() -> ChildSpec<Member> {
    ChildSpec::new(numbered())
}

/// Fails `member` and returns once its report is queued at its supervisor.
async fn fail_reported(member: &MemberRef) {
    let (reported, is_reported) = oneshot::channel();
    assert!(member.fail_reported(reported).await.is_err());
    assert!(is_reported.await.is_err());
}

/// The `Restart` table says a `Temporary` child is "Never" restarted, in every column, and
/// OTP's one_for_all / rest_for_one drop temporary siblings instead of restarting them. Here a
/// temporary child running beside a failing permanent one is stopped and started again.
#[runtime::test(timeout = "20s")]
async fn a_temporary_sibling_is_not_restarted_by_one_for_all(context: runtime::Context) {
    for strategy in [Strategy::OneForAll, Strategy::RestForOne] {
        let mut supervisor = Supervisor::new("temporaries", strategy).intensity(5, WINDOW);
        let failing = supervisor.child(member());
        let temporary = supervisor.child(member().restart(Restart::Temporary));
        let supervisor = supervisor.spawn(&context);
        assert_eq!(temporary.incarnation().await, Ok(1));
        assert!(failing.fail().await.is_err());
        assert_eq!(failing.incarnation().await, Ok(2));
        assert_eq!(
            temporary.incarnation().await,
            Err(Error::Closed),
            "{strategy:?}: a temporary child is never restarted"
        );
        assert_eq!(supervisor.stop().await, ExitReason::Stopped);
    }
}

/// A static supervisor's restart cancelled by a ref's `stop()` during its backoff does not
/// count against the intensity (the `Restart` docs: "A restart cancelled before it happened
/// (the child terminated while it waited out a backoff) does not count"): the next failure,
/// one within an intensity of one, is waited out, not given up on.
#[runtime::test(timeout = "20s")]
async fn a_static_restart_cancelled_during_its_backoff_does_not_count(context: runtime::Context) {
    let mut supervisor = Supervisor::new("static_patient", Strategy::OneForOne)
        .intensity(1, WINDOW)
        .backoff(Backoff::exponential(FOREVER, FOREVER));
    let first = supervisor.child(member());
    let second = supervisor.child(member());
    let supervisor = supervisor.spawn(&context);
    fail_reported(&first).await;
    // Withdrawn during its ten-minute wait: its restart never happens.
    assert_eq!(first.stop().await, ExitReason::Stopped);
    fail_reported(&second).await;
    // Read after that report (one channel, in order): a supervisor that counted the
    // cancelled restart gave up on it, and its stop hears `Panicked`; one that did not waits
    // out the second child's backoff, and stops at once.
    assert_eq!(
        supervisor.stop().await,
        ExitReason::Stopped,
        "the cancelled restart counted: the supervisor gave up"
    );
    assert_eq!(second.join().await, ExitReason::Stopped);
}

/// Once every child a static supervisor waited out a backoff for was withdrawn by its ref,
/// the wait is over: a sibling that fails next is read at once and waits out its own backoff,
/// during which its ref's `stop()` ends it at once too. (Were the loop still sleeping out the
/// withdrawn child's backoff, the sibling's report would wait behind it, and so would its
/// stop.)
#[runtime::test(timeout = "20s")]
async fn a_static_supervisor_stops_waiting_once_the_child_it_waited_for_is_withdrawn(
    context: runtime::Context,
) {
    let mut supervisor = Supervisor::new("static_waiting", Strategy::OneForOne)
        .intensity(5, WINDOW)
        .backoff(Backoff::exponential(FOREVER, FOREVER));
    let first = supervisor.child(member());
    let sibling = supervisor.child(member());
    let supervisor = supervisor.spawn(&context);
    fail_reported(&first).await;
    assert_eq!(first.stop().await, ExitReason::Stopped);
    fail_reported(&sibling).await;
    let stopped = context.timeout(HANG, sibling.stop()).await;
    assert_eq!(
        stopped,
        Ok(ExitReason::Stopped),
        "the sibling's failure was not read: the loop still sleeps out a withdrawn child's backoff"
    );
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
}

/// `terminate_child` on a nested dynamic supervisor that has ended for good (stopped by its
/// ref) while its parent runs must answer (`Closed` or `NoSuchChild`). Its control channel's
/// receiver lives on in the parent's slot, so the request is queued where no loop will ever
/// read it, and the call never resolves.
#[runtime::test(timeout = "20s")]
async fn terminate_child_on_a_nested_dynamic_supervisor_ended_for_good_answers(
    context: runtime::Context,
) {
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let a = top.child(member());
    let jobs = top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let top = top.spawn(&context);
    let x = jobs.start_child(member()).await.unwrap();
    assert_eq!(jobs.stop().await, ExitReason::Stopped);
    assert_eq!(x.join().await, ExitReason::Stopped);
    let answer = context.timeout(HANG, jobs.terminate_child(x.id())).await;
    assert!(
        matches!(answer, Ok(Err(Error::Closed | Error::NoSuchChild { .. }))),
        "terminate_child on a supervisor that ended hangs: {answer:?}"
    );
    assert_eq!(a.incarnation().await, Ok(1));
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// The next `Gate` incarnation to start takes what is in it: it says so on the first
/// channel, then waits in its `on_start` until the second is sent to or dropped.
type Hold = Arc<Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>>;

/// Holds its supervisor's (re)start open in its `on_start` when armed.
#[actor]
struct Gate {
    hold: Hold,
}

#[actor]
impl Gate {
    async fn on_start(&mut self) {
        let held = self.hold.lock().take();
        if let Some((entered, open)) = held {
            let _ = entered.send(());
            let _ = open.await;
        }
    }
}

/// Arms `hold`: what says it was entered, and what lets it go on.
fn arm(hold: &Hold) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
    let (entered, is_entered) = oneshot::channel();
    let (open, opened) = oneshot::channel();
    *hold.lock() = Some((entered, opened));
    (is_entered, open)
}

/// A `start_child` whose future is dropped before its nested dynamic supervisor takes it
/// (here: made while the supervisor waits to be restarted) starts nothing: nobody would get
/// the child's ref. (A pool's resize cut short by the pool's restart is such a request: its
/// member would otherwise run under the pool with no routing to it.)
#[runtime::test(timeout = "20s")]
async fn a_start_child_dropped_before_it_is_taken_starts_nothing(context: runtime::Context) {
    let gating = Hold::default();
    let mut top = Supervisor::new("top", Strategy::OneForAll).intensity(5, WINDOW);
    let trigger = top.child(member());
    top.child(ChildSpec::new({
        let hold = gating.clone();
        move || Gate { hold: hold.clone() }
    }));
    let jobs = top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let top = top.spawn(&context);
    assert_eq!(trigger.incarnation().await, Ok(1));

    // One for all: the jobs are stopped, and wait behind the gate to start again.
    let (is_gated, gate_open) = arm(&gating);
    assert!(trigger.fail().await.is_err());
    is_gated.await.unwrap();
    let mut dropped = Box::pin(jobs.start_child(member()));
    assert!(futures::poll!(&mut dropped).is_pending(), "sent, not taken");
    drop(dropped);
    gate_open.send(()).unwrap();
    // Taken after the dropped request (one channel, in order).
    let taken = jobs.start_child(member()).await.unwrap();
    assert_eq!(jobs.children(), [taken.id()], "{:?}", jobs.which_children());
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

// ---- Second review (3674607..af84df3): the table written only on a change, the spec
// dropped at `close`. ----

/// Hangs in `hang` until its task is aborted.
#[actor]
struct Hanger;

#[actor]
impl Hanger {
    /// Never returns; says on `entered` that it runs.
    async fn hang(&mut self, entered: oneshot::Sender<()>) {
        let _ = entered.send(());
        futures::future::pending::<()>().await;
    }
}

fn statuses(children: &[actors::supervisor::ChildInfo]) -> Vec<actors::supervisor::ChildStatus> {
    children.iter().map(|child| child.status).collect()
}

/// A nested supervisor whose stop outlasts its shutdown timeout (a child hangs in a handler
/// with a far longer timeout of its own) is aborted by its parent, then ended for good with
/// it. Its loop never reached the end of its stop, so nothing wrote its children's entries:
/// `close_all` ends them for good without saying so in the table. Once they have ended (their
/// joiners heard `Shutdown`), `which_children` must not say they run.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_aborted_past_its_shutdown_timeout_shows_its_children_stopped(
    context: runtime::Context,
) {
    use actors::supervisor::ChildStatus;
    let mut inner = Supervisor::new("inner", Strategy::OneForOne);
    let first = inner.child(member());
    let hanging = inner.child(ChildSpec::new(|| Hanger).shutdown_timeout(FOREVER));
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let inner = top.supervisor(inner, Restart::Permanent, Duration::from_millis(50));
    let top = top.spawn(&context);
    assert_eq!(first.incarnation().await, Ok(1));
    let (entered, is_entered) = oneshot::channel();
    hanging.tell_hang(entered).await.unwrap();
    is_entered.await.unwrap();
    // `inner` waits ten minutes for `hanging`; `top` aborts it after 50ms, and is done.
    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(
        context.timeout(HANG, hanging.join()).await,
        Ok(ExitReason::Shutdown)
    );
    assert_eq!(
        context.timeout(HANG, first.join()).await,
        Ok(ExitReason::Shutdown)
    );
    let children = inner.which_children();
    assert_eq!(
        statuses(&children),
        [ChildStatus::Stopped, ChildStatus::Stopped],
        "children ended for good are shown running: {children:?}"
    );
    assert_eq!(inner.count_children().active, 0);
}

/// Spawns what `spawn` makes inside a task of its own, which the test aborts; returns the
/// task's handle and what `spawn` returned.
async fn in_a_task<R: Send + 'static>(
    context: &runtime::Context,
    spawn: impl FnOnce(&runtime::Context) -> R + Send + 'static,
) -> (runtime::Handle<()>, R) {
    let (made, is_made) = oneshot::channel();
    let task = context.clone().spawn(move |scope| async move {
        let _ = made.send(spawn(&scope));
        futures::future::pending::<()>().await;
    });
    (
        task,
        is_made.await.expect("the task spawned the supervisor"),
    )
}

/// The same at the top: a supervisor whose scope ends (its task aborted) ends `Shutdown`
/// with its children, whose entries still say `Running` after everything ended.
#[runtime::test(timeout = "20s")]
async fn a_supervisor_whose_scope_ended_shows_its_children_stopped(context: runtime::Context) {
    use actors::supervisor::ChildStatus;
    let (task, (supervisor, child)) = in_a_task(&context, |scope| {
        let mut supervisor = Supervisor::new("scoped", Strategy::OneForOne);
        let child = supervisor.child(member());
        (supervisor.spawn(scope), child)
    })
    .await;
    assert_eq!(child.incarnation().await, Ok(1));
    task.abort();
    assert_eq!(supervisor.join().await, ExitReason::Shutdown);
    assert_eq!(child.join().await, ExitReason::Shutdown);
    let children = supervisor.which_children();
    assert_eq!(
        statuses(&children),
        [ChildStatus::Stopped],
        "a child of a supervisor that ended is shown running: {children:?}"
    );
}

/// Drops set `dropped`.
struct Held(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A joiner's waker that samples `dropped` inside the wake the end makes (on the thread that
/// ended the child, while its end tells its joiners): what a joiner hearing of the end can
/// find at the earliest. Passes the wake on to the task that waits.
struct Sampling {
    dropped: Arc<std::sync::atomic::AtomicBool>,
    seen: Mutex<Option<bool>>,
    waiting: Mutex<Option<std::task::Waker>>,
}

impl std::task::Wake for Sampling {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.seen
            .lock()
            .get_or_insert_with(|| self.dropped.load(Ordering::SeqCst));
        if let Some(waiting) = self.waiting.lock().as_ref() {
            waiting.wake_by_ref();
        }
    }
}

/// Registers `join` now (its child must still run) and waits for it: its reason, and whether
/// `dropped` was set when the end woke it.
fn join_sampling(
    join: actors::Join,
    dropped: Arc<std::sync::atomic::AtomicBool>,
) -> impl std::future::Future<Output = (ExitReason, bool)> {
    use std::future::Future as _;
    let sampling = Arc::new(Sampling {
        dropped,
        seen: Mutex::new(None),
        waiting: Mutex::new(None),
    });
    let waker = std::task::Waker::from(sampling.clone());
    let mut join = Box::pin(join);
    assert!(
        join.as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
            .is_pending(),
        "the child still runs"
    );
    async move {
        let reason = std::future::poll_fn(|cx| {
            *sampling.waiting.lock() = Some(cx.waker().clone());
            if sampling.seen.lock().is_none() {
                return std::task::Poll::Pending;
            }
            join.as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
        })
        .await;
        let seen = sampling.seen.lock().take().expect("woken");
        (reason, seen)
    }
}

/// A child done for good drops what its spec held (the kv acceptor's listener) before its
/// joiners hear of its end: otherwise whoever waited for `stop()` (the kv test
/// `an_acceptor_stopped_for_good_closes_its_port`) may still find the port open. `close`
/// ends the mailbox (which wakes the joiners, synchronously) and only then drops the factory.
#[runtime::test(timeout = "20s")]
async fn a_child_done_for_good_drops_its_spec_before_its_joiners_hear(context: runtime::Context) {
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held = Held(dropped.clone());
    let mut supervisor = Supervisor::new("holding", Strategy::OneForOne);
    let child = supervisor.child(ChildSpec::new(move || {
        let _held = &held;
        Member { incarnation: 1 }
    }));
    let supervisor = supervisor.spawn(&context);
    assert_eq!(child.incarnation().await, Ok(1));
    let joined = join_sampling(child.join(), dropped.clone());
    drop(child.stop());
    let (reason, dropped_when_heard) = joined.await;
    assert_eq!(reason, ExitReason::Stopped);
    assert!(
        dropped_when_heard,
        "the joiner heard of the end while the spec (and what it holds) was still there"
    );
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
}

/// A nested supervisor aborted past its shutdown timeout to be restarted (one for all: a
/// sibling failed) waits out its parent's backoff with no incarnation running, yet its table
/// still says its children run: its loop was dropped mid-stop, before anything wrote them
/// (`ChildStatus::Stopped`: "its supervisor is not running (a nested one being restarted)").
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_aborted_for_a_restart_shows_its_children_stopped_meanwhile(
    context: runtime::Context,
) {
    use actors::supervisor::ChildStatus;
    let mut inner = Supervisor::new("inner", Strategy::OneForOne);
    let hanging = inner.child(ChildSpec::new(|| Hanger).shutdown_timeout(FOREVER));
    let mut top = Supervisor::new("top", Strategy::OneForAll)
        .intensity(5, WINDOW)
        .backoff(Backoff::exponential(FOREVER, FOREVER));
    let trigger = top.child(member());
    let inner = top.supervisor(inner, Restart::Permanent, Duration::from_millis(50));
    let top = top.spawn(&context);
    let (entered, is_entered) = oneshot::channel();
    hanging.tell_hang(entered).await.unwrap();
    is_entered.await.unwrap();
    assert!(trigger.fail().await.is_err());
    // `top` stops `inner` (aborted after 50ms, its future gone) and only then shows it
    // restarting, for ten minutes.
    let restarting = context
        .timeout(HANG, async {
            while top.which_children()[1].status != ChildStatus::Restarting {
                runtime::reschedule().await;
            }
        })
        .await;
    assert!(restarting.is_ok(), "{:?}", top.which_children());
    let children = inner.which_children();
    assert_eq!(
        statuses(&children),
        [ChildStatus::Stopped],
        "no incarnation of `inner` runs, yet its child is shown running: {children:?}"
    );
    assert_eq!(top.stop().await, ExitReason::Stopped);
}
