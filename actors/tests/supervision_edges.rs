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
