//! Adversarial review of "Supervision trees as OTP builds them": each test asserts the
//! behaviour the docs promise (or OTP has), and fails on the bug it is named for.
//!
//! Waits that detect a hang use `Clock::timeout` with a bound far above what the correct
//! behaviour needs (milliseconds): a timeout here is the failure, never synchronization.

use actors::prelude::*;
use actors::supervisor::{Backoff, ChildSpec, DynamicSupervisor, Restart, Strategy, Supervisor};
use actors::{Context, Error, ExitReason, Pool, PoolRef};
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

/// A static supervisor's restart cancelled by a ref's `stop()` during its backoff must not
/// count against the intensity (the `Restart` docs: "A restart cancelled before it happened
/// (the child terminated while it waited out a backoff) does not count"). Only the dynamic
/// supervisor calls `Intensity::cancel`; the static one keeps the cancelled restart and gives
/// up on the next failure.
#[runtime::test(timeout = "20s")]
async fn a_static_restart_cancelled_during_its_backoff_does_not_count(context: runtime::Context) {
    let backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_millis(100));
    let mut supervisor = Supervisor::new("static_patient", Strategy::OneForOne)
        .intensity(1, WINDOW)
        .backoff(backoff);
    let first = supervisor.child(member());
    let second = supervisor.child(member());
    let supervisor = supervisor.spawn(&context);
    fail_reported(&first).await;
    // Withdrawn during the 100 ms wait: its restart never happens.
    assert_eq!(first.stop().await, ExitReason::Stopped);
    // One failure within an intensity of one: restarted after its backoff.
    fail_reported(&second).await;
    assert_eq!(
        second.incarnation().await,
        Ok(2),
        "the cancelled restart counted: the supervisor gave up ({:?})",
        supervisor.join().now_or_never_reason()
    );
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
}

/// Once every child a static supervisor waited out a backoff for was withdrawn by its ref,
/// nothing is left to wait for, yet the loop goes on sleeping the whole backoff, reading
/// nothing but stops and withdrawals: a sibling that fails meanwhile is not restarted (its
/// messages wait) for ten minutes.
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
    // Nothing waits for a restart now. A sibling's failure is a first failure: with the
    // same backoff, it would wait out its own ten minutes; so check instead that its report
    // is read at all: `which_children` shows it restarting, not running.
    fail_reported(&sibling).await;
    let read = context
        .timeout(HANG, async {
            loop {
                let status = supervisor.which_children()[1].status;
                if status != actors::supervisor::ChildStatus::Running {
                    return status;
                }
                futures::pending!();
            }
        })
        .await;
    assert_eq!(
        read,
        Ok(actors::supervisor::ChildStatus::Restarting),
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

/// Held by a pool member's `on_stop` when armed: it says so on the first channel, then
/// waits until the second is sent to or dropped.
type Hold = Arc<Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>>;

#[actor]
struct Lingerer {
    hold: Hold,
}

#[actor]
impl Lingerer {
    async fn on_stop(&mut self) {
        let held = self.hold.lock().take();
        if let Some((entered, open)) = held {
            let _ = entered.send(());
            let _ = open.await;
        }
    }

    fn ping(&self) {}
}

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

/// A resize of a nested pool sent while the pool's incarnation is stopping (its loop has
/// left its event loop and waits for its members' `on_stop`) puts an `Event::Start` in the
/// pool's control channel; the resize task is then aborted with the incarnation, but the
/// request stays queued, and the next incarnation admits and starts that member after its
/// `fill` looked for members no routing reaches. The member runs for the pool's whole life,
/// owned by its supervisor and never routed to. (If the aborted resize still holds the
/// `resizing` lock when `fill` runs, `fill` reads the table late and ends the member; the
/// gate before the pool keeps the restart back until the abort is through.)
#[runtime::test(timeout = "20s")]
async fn a_resize_racing_a_nested_pools_restart_leaves_no_unrouted_member(
    context: runtime::Context,
) {
    let lingering = Hold::default();
    let gating = Hold::default();
    let mut top = Supervisor::new("top", Strategy::OneForAll).intensity(5, WINDOW);
    let trigger = top.child(member());
    top.child(ChildSpec::new({
        let hold = gating.clone();
        move || Gate { hold: hold.clone() }
    }));
    let pool: PoolRef<Lingerer> = top.supervisor(
        Pool::new("lingering", 1, {
            let hold = lingering.clone();
            move || Lingerer { hold: hold.clone() }
        }),
        Restart::Permanent,
        SHUTDOWN,
    );
    let top = top.spawn(&context);
    for member in pool.all() {
        member.ping().await.unwrap();
    }

    let (is_lingering, linger_on) = arm(&lingering);
    let (is_gated, gate_open) = arm(&gating);
    // One for all: the pool is stopped first; its member lingers in `on_stop`.
    assert!(trigger.fail().await.is_err());
    is_lingering.await.unwrap();
    // The pool's incarnation is still running (in its stop), so the resize is spawned in
    // its scope and sends its start request to the loop that no longer reads it.
    let mut resizing = Box::pin(pool.resize(2));
    assert!(futures::poll!(&mut resizing).is_pending());
    // Only lets the resize task, already spawned, reach its send; if it has not by then,
    // this test passes for the wrong reason, never fails for it.
    context.sleep(Duration::from_millis(200)).await;
    linger_on.send(()).unwrap();
    assert_eq!(resizing.await, Err(Error::Closed), "cut short by the restart");
    // The top restarts the gate before the pool, and the gate holds it: the aborted resize's
    // future is dropped meanwhile (its handle resolved first).
    is_gated.await.unwrap();
    context.sleep(Duration::from_millis(200)).await;
    gate_open.send(()).unwrap();
    assert_eq!(trigger.incarnation().await, Ok(2));
    // Answered by the pool's next incarnation, which has taken its scope for resizes.
    for member in pool.all() {
        member.ping().await.unwrap();
    }
    // A resize now is read after the stale request (one channel, in order).
    assert_eq!(pool.resize(2).await, Ok(()));
    for member in pool.all() {
        member.ping().await.unwrap();
    }
    assert_eq!(pool.size(), 2);
    assert_eq!(
        pool.which_children().len(),
        pool.size(),
        "a member no routing reaches runs under the pool: {:?}",
        pool.which_children()
    );
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// What a join would say now, for a message.
trait NowOrNever {
    fn now_or_never_reason(self) -> Option<ExitReason>;
}

impl NowOrNever for actors::Join {
    fn now_or_never_reason(self) -> Option<ExitReason> {
        futures::FutureExt::now_or_never(self)
    }
}
