//! OTP-shaped supervision trees through the public API: `Supervisor::supervisor` nesting a
//! `Supervisor`, a `DynamicSupervisor` and a `Pool`; start order and reverse stop order across
//! nested levels; each strategy applied to a nested supervisor; escalation at every level of a
//! three-level tree (top `Supervisor` -> middle `Supervisor` -> `DynamicSupervisor` -> workers,
//! with a `Pool` beside the dynamic one); what a restart keeps of each kind; a nested ref's
//! `stop()` and `join()`; supervisors owning their children; and a restart cancelled during
//! its backoff not counting against the intensity.
//!
//! Restart windows are held open by a `Keeper` child whose `on_start` waits for the test, so
//! what happens "while it restarts" is forced, not hoped for.

use actors::prelude::*;
use actors::supervisor::{
    Backoff, ChildSpec, DynamicSupervisor, DynamicSupervisorRef, Restart, Strategy, Supervisor,
    SupervisorRef,
};
use actors::{Context, Error, ExitReason, Pool};
use futures::channel::oneshot;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

type Journal = Arc<Mutex<Vec<String>>>;

/// Long enough that no restart in a test leaves the intensity window.
const WINDOW: Duration = Duration::from_secs(3600);
/// A shutdown timeout no well-behaved child comes near.
const SHUTDOWN: Duration = Duration::from_secs(5);
/// A backoff no test waits out: whatever must happen during it has to happen at once.
const FOREVER: Duration = Duration::from_secs(600);

#[actor(mailbox = 16)]
struct Member {
    name: &'static str,
    incarnation: usize,
    journal: Journal,
}

#[actor]
impl Member {
    fn on_start(&mut self) {
        let entry = format!("start {}#{}", self.name, self.incarnation);
        self.journal.lock().push(entry);
    }

    fn on_stop(&mut self) {
        let entry = format!("stop {}#{}", self.name, self.incarnation);
        self.journal.lock().push(entry);
    }

    /// Which incarnation answers (for a pool member: which member, by order of making).
    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn fail(&mut self) {
        panic!("{} fails on purpose", self.name);
    }

    /// Fails, leaving a task in this incarnation's scope that holds `reported`. The runtime
    /// ends an incarnation's scope only once its future returned, which is after it reported
    /// its end to its supervisor: when the receiver sees the sender dropped, that report is
    /// already queued, so whatever the test sends the supervisor next is read after it.
    fn fail_reported(&mut self, ctx: &mut Context<Self>, reported: oneshot::Sender<()>) {
        drop(ctx.runtime().clone().spawn(move |_| async move {
            let _reported = reported;
            futures::future::pending::<()>().await
        }));
        panic!("{} fails on purpose", self.name);
    }

    /// Never returns, ignoring stop requests; says on `entered` that it is in the handler.
    async fn hang(&mut self, entered: oneshot::Sender<()>) {
        let entry = format!("hang {}#{}", self.name, self.incarnation);
        self.journal.lock().push(entry);
        let _ = entered.send(());
        futures::future::pending::<()>().await;
    }
}

/// Makes members named `name`, numbered from 1 (a child's incarnations, a pool's members).
fn numbered(name: &'static str, journal: &Journal) -> impl FnMut() -> Member + Send + 'static {
    let journal = journal.clone();
    let made = AtomicUsize::new(0);
    move || Member {
        name,
        incarnation: made.fetch_add(1, Ordering::SeqCst) + 1,
        journal: journal.clone(),
    }
}

fn member(name: &'static str, journal: &Journal) -> ChildSpec<Member> {
    ChildSpec::new(numbered(name, journal))
}

/// The next `Keeper` incarnation to start takes what is in it: it says so on the first
/// channel, then waits in its `on_start` until the second is sent to or dropped.
type Hold = Arc<Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>>;

/// A child that holds its supervisor's (re)start open when the test arms its hold: children
/// start one at a time, so those after it wait, and those it restarts with are already
/// stopped.
#[actor]
struct Keeper {
    incarnation: usize,
    hold: Hold,
}

#[actor]
impl Keeper {
    async fn on_start(&mut self) {
        let held = self.hold.lock().take();
        if let Some((entered, open)) = held {
            let _ = entered.send(());
            let _ = open.await;
        }
    }

    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn fail(&mut self) {
        panic!("keeper fails on purpose");
    }
}

/// Makes keepers sharing `hold`, numbered from 1.
fn keepers(hold: &Hold) -> impl FnMut() -> Keeper + Send + 'static {
    let hold = hold.clone();
    let made = AtomicUsize::new(0);
    move || Keeper {
        incarnation: made.fetch_add(1, Ordering::SeqCst) + 1,
        hold: hold.clone(),
    }
}

fn keeper(hold: &Hold) -> ChildSpec<Keeper> {
    ChildSpec::new(keepers(hold))
}

/// Arms `hold`: returns what says the next keeper incarnation is in its `on_start`, and what
/// lets it go on.
fn arm(hold: &Hold) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
    let (entered, is_entered) = oneshot::channel();
    let (open, opened) = oneshot::channel();
    *hold.lock() = Some((entered, opened));
    (is_entered, open)
}

fn entries(journal: &Journal, from: usize) -> Vec<String> {
    journal.lock()[from..].to_vec()
}

fn started(journal: &Journal, who: &str) -> usize {
    journal
        .lock()
        .iter()
        .filter(|entry| entry.starts_with(&format!("start {who}#")))
        .count()
}

fn assert_gave_up(reason: ExitReason, kind_and_label: &str) {
    match reason {
        ExitReason::Panicked(message) => assert!(
            message.starts_with(&format!("{kind_and_label} gave up: ")),
            "{message}"
        ),
        other => panic!("{kind_and_label} gave up, not {other:?}"),
    }
}

fn assert_restarts(context: &runtime::Context, label: &str, count: u64) {
    let text = context.encode();
    let line = format!("actor_restarts_total{{actor=\"{label}\"}} {count}\n");
    assert!(text.contains(&line), "no `{}` in:\n{text}", line.trim());
}

/// The three-level tree of the escalation tests:
///
/// ```text
/// top (one for one): sibling, middle
/// middle (rest for one): before, jobs (dynamic), crew (pool of 2), after
/// ```
struct Tree {
    top: SupervisorRef,
    sibling: MemberRef,
    middle: SupervisorRef,
    before: MemberRef,
    jobs: DynamicSupervisorRef,
    crew: MemberPoolRef,
    after: MemberRef,
    journal: Journal,
}

/// Builds and spawns the tree with these restart intensities (restarts within `WINDOW`).
fn three_levels(context: &runtime::Context, top: usize, middle: usize, jobs: usize) -> Tree {
    let journal = Journal::default();
    let jobs = DynamicSupervisor::new("jobs").intensity(jobs, WINDOW);
    let mut middle = Supervisor::new("middle", Strategy::RestForOne).intensity(middle, WINDOW);
    let before = middle.child(member("before", &journal));
    let jobs = middle.supervisor(jobs, Restart::Permanent, SHUTDOWN);
    let crew = Pool::new("crew", 2, numbered("crew", &journal)).intensity(10, WINDOW);
    let crew: MemberPoolRef = middle.supervisor(crew, Restart::Permanent, SHUTDOWN).into();
    let after = middle.child(member("after", &journal));
    let mut top = Supervisor::new("top", Strategy::OneForOne).intensity(top, WINDOW);
    let sibling = top.child(member("sibling", &journal));
    let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    Tree {
        top: top.spawn(context),
        sibling,
        middle,
        before,
        jobs,
        crew,
        after,
        journal,
    }
}

impl Tree {
    /// A new worker `name` under `jobs`, answering.
    async fn worker(&self, name: &'static str) -> MemberRef {
        let worker = self
            .jobs
            .start_child(member(name, &self.journal))
            .await
            .unwrap();
        assert_eq!(worker.incarnation().await, Ok(1));
        worker
    }

    /// Once the jobs' last incarnation ended, waits until the middle restarted them (or
    /// its whole new incarnation started), and `after` answers from `incarnation`: a
    /// `probe` started now waits for the jobs' next incarnation, which comes only after
    /// the middle stopped `after` (rest for one stops in reverse start order, `after` first),
    /// and `after` starts again last. Returns the probe, the jobs' one child.
    async fn restarted(&self, incarnation: usize) -> MemberRef {
        let probe = self.worker("probe").await;
        assert_eq!(self.after.incarnation().await, Ok(incarnation));
        probe
    }
}

/// `Supervisor::supervisor` takes each kind of supervisor and hands back its ref before
/// anything runs: a start_child made then waits for the dynamic supervisor's first
/// incarnation, and a message routed by a pool that never ran waits in its member's mailbox.
/// Once spawned, every kind works through the refs it gave.
#[runtime::test(timeout = "20s")]
async fn supervisor_nests_each_kind_and_returns_its_ref_at_once(context: runtime::Context) {
    let journal = Journal::default();
    let mut inner = Supervisor::new("inner", Strategy::OneForOne);
    let worker = inner.child(member("worker", &journal));
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let inner: SupervisorRef = top.supervisor(inner, Restart::Permanent, SHUTDOWN);
    let jobs: DynamicSupervisorRef =
        top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let crew: actors::PoolRef<Member> = top.supervisor(
        Pool::new("crew", 3, numbered("crew", &journal)),
        Restart::Permanent,
        SHUTDOWN,
    );
    let crew = MemberPoolRef::from(crew);
    let last = top.child(member("last", &journal));

    let ids = [inner.id(), jobs.id(), crew.as_pool().id()];
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    // Routed before anything runs: it waits for the member's first incarnation.
    let mut waiting = Box::pin(crew.incarnation());
    assert!(futures::poll!(&mut waiting).is_pending(), "never ran");
    // Made before anything runs: it waits for the first incarnation rather than failing.
    let mut early = Box::pin(jobs.start_child(member("early", &journal)));
    assert!(futures::poll!(&mut early).is_pending());
    assert!(journal.lock().is_empty(), "nothing runs before the spawn");

    let top = top.spawn(&context);
    let early = early.await.unwrap();
    assert_eq!(early.incarnation().await, Ok(1));
    let answer = waiting.await;
    assert!(matches!(answer, Ok(1..=3)), "{answer:?}");
    // The last child starts once the pool's members run.
    assert_eq!(last.incarnation().await, Ok(1));
    assert_eq!(worker.incarnation().await, Ok(1));
    assert_eq!(crew.as_pool().size(), 3);
    let mut made: Vec<usize> = Vec::new();
    for member in crew.as_pool().all() {
        made.push(member.incarnation().await.unwrap());
    }
    made.sort_unstable();
    assert_eq!(made, [1, 2, 3]);
    assert_eq!(jobs.children(), [early.id()]);
    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(inner.join().await, ExitReason::Stopped);
    assert_eq!(jobs.join().await, ExitReason::Stopped);
    // Already ended with its parent: its stop only hears how.
    assert_eq!(crew.as_pool().stop().await, ExitReason::Stopped);
}

/// Children start in order across a nested level (the nested supervisor's own children
/// before the next sibling; a pool's members before it counts as started), and stop in
/// reverse start order, a nested supervisor's children (its dynamic children in their
/// supervisor's place) before the siblings started before it.
#[runtime::test(timeout = "20s")]
async fn children_start_in_order_and_stop_in_reverse_across_nested_levels(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    let b = middle.child(member("b", &journal));
    let jobs = middle.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let c = middle.child(member("c", &journal));
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let a = top.child(member("a", &journal));
    let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    let crew = Pool::new("crew", 1, numbered("crew", &journal));
    let crew: MemberPoolRef = top.supervisor(crew, Restart::Permanent, SHUTDOWN).into();
    let d = top.child(member("d", &journal));
    let top = top.spawn(&context);

    // The last child answers once it started, and it starts last.
    assert_eq!(d.incarnation().await, Ok(1));
    let x = jobs.start_child(member("x", &journal)).await.unwrap();
    assert_eq!(
        entries(&journal, 0),
        [
            "start a#1",
            "start b#1",
            "start c#1",
            "start crew#1",
            "start d#1",
            "start x#1"
        ]
    );
    assert_eq!(crew.incarnation().await, Ok(1));

    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(
        entries(&journal, 6),
        [
            "stop d#1",
            "stop crew#1",
            "stop c#1",
            "stop x#1",
            "stop b#1",
            "stop a#1"
        ]
    );
    for joined in [
        middle.join(),
        jobs.join(),
        x.join(),
        a.join(),
        b.join(),
        c.join(),
    ] {
        assert_eq!(joined.await, ExitReason::Stopped);
    }
}

/// A nested supervisor is stopped within its own shutdown timeout: one whose child is stuck
/// in a handler (with a far longer timeout of its own) is aborted with that child, and its
/// parent goes on stopping the siblings started before it. The test's timeout is far below
/// the stuck child's hour.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_past_its_shutdown_timeout_is_aborted_with_its_children(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    let stuck = middle.child(member("stuck", &journal).shutdown_timeout(WINDOW));
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let a = top.child(member("a", &journal));
    let middle = top.supervisor(middle, Restart::Permanent, Duration::from_millis(100));
    let d = top.child(member("d", &journal));
    let top = top.spawn(&context);
    assert_eq!(d.incarnation().await, Ok(1));
    let (entered, is_entered) = oneshot::channel();
    stuck.tell_hang(entered).await.unwrap();
    is_entered.await.unwrap();

    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(
        entries(&journal, 3),
        ["hang stuck#1", "stop d#1", "stop a#1"],
        "the stuck child was aborted, not stopped"
    );
    assert_eq!(middle.join().await, ExitReason::Shutdown);
    assert_eq!(stuck.incarnation().await, Err(Error::Closed));
    assert_eq!(a.incarnation().await, Err(Error::Closed));
}

/// One-for-all over a nested supervisor: a sibling's failure stops the nested supervisor
/// with everything under it (in reverse start order) and starts it again in its place; its
/// static children come back on the same refs, its dynamic supervisor empty.
#[runtime::test(timeout = "20s")]
async fn one_for_all_restarts_a_nested_supervisor_with_everything_under_it(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    let b = middle.child(member("b", &journal));
    let jobs = middle.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let mut top = Supervisor::new("top", Strategy::OneForAll);
    let a = top.child(member("a", &journal));
    top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    let d = top.child(member("d", &journal));
    let top = top.spawn(&context);
    assert_eq!(d.incarnation().await, Ok(1));
    let x = jobs.start_child(member("x", &journal)).await.unwrap();
    let from = journal.lock().len();

    assert!(d.fail().await.is_err());
    // Sent once d failed: answered by d's next incarnation, which starts last.
    assert_eq!(d.incarnation().await, Ok(2));
    assert_eq!(
        entries(&journal, from),
        [
            "stop d#1",
            "stop x#1",
            "stop b#1",
            "stop a#1",
            "start a#2",
            "start b#2",
            "start d#2"
        ]
    );
    assert_eq!(b.incarnation().await, Ok(2));
    assert_eq!(x.join().await, ExitReason::Stopped);
    assert_eq!(x.incarnation().await, Err(Error::Closed));
    assert_eq!(jobs.count(), 0, "a dynamic supervisor comes back empty");
    let y = jobs.start_child(member("y", &journal)).await.unwrap();
    assert_eq!(y.incarnation().await, Ok(1));
    assert_eq!(a.incarnation().await, Ok(2));
    assert_restarts(&context, "middle", 1);
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// Rest-for-one over a nested supervisor: when it gives up, it and the children started after
/// it restart, not those before; when an earlier sibling fails, it restarts with the rest.
#[runtime::test(timeout = "20s")]
async fn rest_for_one_restarts_a_nested_supervisor_and_those_after_it(context: runtime::Context) {
    let journal = Journal::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne).intensity(0, WINDOW);
    let b = middle.child(member("b", &journal));
    let mut top = Supervisor::new("top", Strategy::RestForOne).intensity(10, WINDOW);
    let a = top.child(member("a", &journal));
    let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    let d = top.child(member("d", &journal));
    let top = top.spawn(&context);
    assert_eq!(d.incarnation().await, Ok(1));

    let from = journal.lock().len();
    assert!(b.fail().await.is_err());
    // Sent once b failed, this waits for b's next incarnation, which starts with the
    // middle's next one, once the top stopped d; d starts after it.
    assert_eq!(b.incarnation().await, Ok(2));
    assert_eq!(d.incarnation().await, Ok(2));
    assert_eq!(
        entries(&journal, from),
        ["stop b#1", "stop d#1", "start b#2", "start d#2"],
        "the middle gave up at once (intensity 0) and was restarted with d, not a"
    );
    assert_eq!(a.incarnation().await, Ok(1));

    let from = journal.lock().len();
    assert!(a.fail().await.is_err());
    // a's next incarnation starts once the rest was stopped; d starts last.
    assert_eq!(a.incarnation().await, Ok(2));
    assert_eq!(d.incarnation().await, Ok(3));
    assert_eq!(
        entries(&journal, from),
        [
            "stop a#1",
            "stop d#2",
            "stop b#2",
            "start a#2",
            "start b#3",
            "start d#3"
        ]
    );
    let mut join = middle.join();
    assert!(
        futures::poll!(&mut join).is_pending(),
        "restarted, not ended"
    );
    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(join.await, ExitReason::Stopped);
}

/// The members of a pool now, by number (order of making), each asked.
async fn made(pool: &MemberPoolRef) -> Vec<usize> {
    let mut made = Vec::new();
    for member in pool.as_pool().all() {
        made.push(member.incarnation().await.unwrap());
    }
    made.sort_unstable();
    made
}

/// Fails `member` and returns once its report is queued at its supervisor (see
/// `Member::fail_reported`).
async fn fail_reported(member: &MemberRef) {
    let (reported, is_reported) = oneshot::channel();
    assert!(member.fail_reported(reported).await.is_err());
    assert!(
        is_reported.await.is_err(),
        "nothing is ever sent: it is dropped"
    );
}

/// (a) The dynamic supervisor at the bottom gives up: the middle restarts it, with the pool
/// and the child after it (rest for one), not the child before it. It comes back empty: its
/// old workers' refs see `Closed` and its ref starts workers again. The pool's members come
/// back on the same refs and mailboxes, as new incarnations. Neither ended for good: their
/// joins wait.
#[runtime::test(timeout = "20s")]
async fn escalation_a_a_dynamic_supervisor_that_gives_up_is_restarted_by_the_middle(
    context: runtime::Context,
) {
    let tree = three_levels(&context, 5, 5, 1);
    let worker = tree.worker("worker").await;
    let spare = tree.worker("spare").await;
    let crew = tree.crew.as_pool().all();
    let mut jobs_join = tree.jobs.join();
    let mut middle_join = tree.middle.join();

    assert!(worker.fail().await.is_err());
    assert_eq!(
        worker.incarnation().await,
        Ok(2),
        "within the jobs' intensity"
    );
    assert!(worker.fail().await.is_err());
    // One restart too many: the jobs give up. The worker that made them keeps its failure;
    // the spare was stopped.
    assert_eq!(
        worker.join().await,
        ExitReason::Panicked("worker fails on purpose".into())
    );
    assert_eq!(spare.join().await, ExitReason::Stopped);
    let fresh = tree.restarted(2).await;
    assert_eq!(
        tree.before.incarnation().await,
        Ok(1),
        "started before the jobs"
    );
    assert_eq!(started(&tree.journal, "before"), 1);
    assert_eq!(tree.sibling.incarnation().await, Ok(1), "a level up");

    assert_eq!(worker.incarnation().await, Err(Error::Closed));
    assert_eq!(spare.incarnation().await, Err(Error::Closed));
    assert_eq!(
        tree.jobs.children(),
        [fresh.id()],
        "a dynamic supervisor comes back empty"
    );

    assert_eq!(tree.crew.as_pool().size(), 2);
    assert_eq!(
        made(&tree.crew).await,
        [3, 4],
        "the members' new incarnations"
    );
    for _ in 0..4 {
        let answer = tree.crew.incarnation().await;
        assert!(matches!(answer, Ok(3 | 4)), "{answer:?}");
    }
    let ids = |members: &[MemberRef]| members.iter().map(|m| m.id()).collect::<Vec<_>>();
    assert_eq!(
        ids(&tree.crew.as_pool().all()),
        ids(&crew),
        "the same members"
    );
    for old in &crew {
        let answer = old.incarnation().await;
        assert!(matches!(answer, Ok(3 | 4)), "{answer:?}");
    }

    assert!(
        futures::poll!(&mut jobs_join).is_pending(),
        "restarted, not ended"
    );
    assert!(futures::poll!(&mut middle_join).is_pending());
    assert_restarts(&context, "jobs", 1);
    assert_restarts(&context, "crew", 1);
    assert_restarts(&context, "middle", 0);
    assert_eq!(tree.top.stop().await, ExitReason::Stopped);
    assert_eq!(jobs_join.await, ExitReason::Stopped);
    assert_eq!(middle_join.await, ExitReason::Stopped);
    assert_eq!(fresh.incarnation().await, Err(Error::Closed));
}

/// (b) The middle gives up: each time the jobs give up counts against its intensity, and one
/// past it (here the second), it stops everything under it and fails. The top restarts it
/// (one for one: not its sibling), and with it every child under it: the child before the
/// jobs too, the jobs empty, the pool's members as new incarnations.
#[runtime::test(timeout = "20s")]
async fn escalation_b_a_middle_supervisor_that_gives_up_is_restarted_by_the_top(
    context: runtime::Context,
) {
    let tree = three_levels(&context, 5, 1, 0);
    let mut middle_join = tree.middle.join();
    let mut jobs_join = tree.jobs.join();

    let first = tree.worker("first").await;
    assert!(first.fail().await.is_err());
    // The jobs give up at once (intensity 0); the middle restarts them: its first restart.
    assert_eq!(
        first.join().await,
        ExitReason::Panicked("first fails on purpose".into())
    );
    tree.restarted(2).await;
    assert_eq!(tree.before.incarnation().await, Ok(1));

    let second = tree.worker("second").await;
    assert!(second.fail().await.is_err());
    // The jobs give up again: the middle's second restart, one past its intensity.
    assert_eq!(
        second.join().await,
        ExitReason::Panicked("second fails on purpose".into())
    );
    // `after` is stopped when the middle gives up, and starts with its next incarnation.
    let third = tree.restarted(3).await;
    assert_eq!(
        tree.before.incarnation().await,
        Ok(2),
        "restarted with the middle"
    );
    assert_eq!(
        entries(&tree.journal, 0)
            .iter()
            .filter(|entry| *entry == "stop before#1")
            .count(),
        1
    );
    assert_eq!(
        tree.sibling.incarnation().await,
        Ok(1),
        "one for one at the top"
    );
    assert_eq!(
        tree.jobs.children(),
        [third.id()],
        "the jobs came back empty"
    );
    assert_eq!(tree.crew.as_pool().size(), 2);
    assert_eq!(made(&tree.crew).await, [5, 6]);

    assert!(
        futures::poll!(&mut middle_join).is_pending(),
        "restarted, not ended"
    );
    assert!(futures::poll!(&mut jobs_join).is_pending());
    assert_restarts(&context, "middle", 1);
    assert_restarts(&context, "jobs", 1);
    assert_eq!(tree.top.stop().await, ExitReason::Stopped);
    assert_eq!(middle_join.await, ExitReason::Stopped);
    assert_eq!(jobs_join.await, ExitReason::Stopped);
}

/// (c) The top gives up: a worker's failure makes every level give up in turn, and the
/// second time that reaches the top it is one past its intensity. The top ends `Panicked`
/// saying so, each nested supervisor's join says why it gave up, every ref under the top sees
/// `Closed`, and the program goes on.
#[runtime::test(timeout = "20s")]
async fn escalation_c_a_top_supervisor_that_gives_up_ends_and_closes_everything_under_it(
    context: runtime::Context,
) {
    let tree = three_levels(&context, 1, 0, 0);
    let first = tree.worker("first").await;
    assert!(first.fail().await.is_err());
    // The jobs and the middle give up at once; the top restarts the middle: its first.
    assert_eq!(
        first.join().await,
        ExitReason::Panicked("first fails on purpose".into())
    );
    tree.restarted(2).await;
    assert_eq!(tree.before.incarnation().await, Ok(2));
    assert_restarts(&context, "middle", 1);

    let second = tree.worker("second").await;
    let crew = tree.crew.as_pool().all();
    assert!(second.fail().await.is_err());
    assert_gave_up(tree.top.join().await, "supervisor `top`");
    assert_gave_up(tree.middle.join().await, "supervisor `middle`");
    assert_gave_up(tree.jobs.join().await, "dynamic supervisor `jobs`");
    assert_eq!(
        second.join().await,
        ExitReason::Panicked("second fails on purpose".into())
    );
    assert_eq!(tree.sibling.join().await, ExitReason::Stopped);

    for member in [&tree.sibling, &tree.before, &tree.after, &first, &second]
        .into_iter()
        .chain(&crew)
    {
        assert_eq!(member.incarnation().await, Err(Error::Closed));
    }
    assert_eq!(tree.crew.incarnation().await, Err(Error::Closed));
    assert_eq!(tree.crew.as_pool().resize(3).await, Err(Error::Closed));
    assert_eq!(
        tree.jobs
            .start_child(member("late", &tree.journal))
            .await
            .unwrap_err(),
        Error::Closed
    );
    // Task panics are not caught here: a give-up that failed the runner fails this test.
    assert_eq!(context.spawn(|_| async { "goes on" }).await, Ok("goes on"));
}

/// A nested pool restarted by its parent keeps its members (its last resize included): the
/// same refs and mailboxes, new incarnations. While it restarts (held open here), what is
/// routed to it waits for them, and a resize is refused with `Closed`.
#[runtime::test(timeout = "20s")]
async fn a_nested_pools_members_keep_their_mailboxes_across_its_restart(context: runtime::Context) {
    let journal = Journal::default();
    let hold = Hold::default();
    let mut top = Supervisor::new("top", Strategy::RestForOne);
    let keeper = top.child(keeper(&hold));
    let crew = Pool::new("crew", 2, numbered("crew", &journal));
    let crew: MemberPoolRef = top.supervisor(crew, Restart::Permanent, SHUTDOWN).into();
    let after = top.child(member("after", &journal));
    let top = top.spawn(&context);
    assert_eq!(after.incarnation().await, Ok(1));
    crew.as_pool().resize(3).await.unwrap();
    let old = crew.as_pool().all();
    assert_eq!(made(&crew).await, [1, 2, 3]);

    let (is_entered, open) = arm(&hold);
    assert!(keeper.fail().await.is_err());
    is_entered.await.unwrap();
    // The pool was stopped before the keeper started again, and waits behind it: its
    // members' incarnations ended, the members did not.
    for number in 1..=3 {
        assert!(entries(&journal, 0).contains(&format!("stop crew#{number}")));
    }
    let mut routed = Box::pin(crew.incarnation());
    assert!(
        futures::poll!(&mut routed).is_pending(),
        "waits for the restart"
    );
    let mut direct = Box::pin(old[0].incarnation());
    assert!(futures::poll!(&mut direct).is_pending());
    assert_eq!(crew.as_pool().resize(5).await, Err(Error::Closed));
    open.send(()).unwrap();

    assert_eq!(direct.await, Ok(4), "the first member's next incarnation");
    let answer = routed.await;
    assert!(matches!(answer, Ok(4..=6)), "{answer:?}");
    assert_eq!(after.incarnation().await, Ok(2), "started after the pool");
    assert_eq!(crew.as_pool().size(), 3);
    assert_eq!(made(&crew).await, [4, 5, 6]);
    let ids = |members: &[MemberRef]| members.iter().map(|m| m.id()).collect::<Vec<_>>();
    assert_eq!(ids(&crew.as_pool().all()), ids(&old));
    assert_restarts(&context, "crew", 1);
    assert_eq!(top.stop().await, ExitReason::Stopped);
    for member in &old {
        assert_eq!(
            member.join().await,
            ExitReason::Stopped,
            "ended with the pool"
        );
    }
}

/// A nested pool that gives up (past its own intensity) fails, and its parent restarts it:
/// its members come back on the same refs, as new incarnations; what was routed to them
/// while it restarted is answered then.
#[runtime::test(timeout = "20s")]
async fn a_nested_pool_that_gives_up_is_restarted_by_its_parent(context: runtime::Context) {
    let journal = Journal::default();
    let hold = Hold::default();
    let mut top = Supervisor::new("top", Strategy::OneForAll);
    let keeper = top.child(keeper(&hold));
    let crew = Pool::new("crew", 2, numbered("crew", &journal)).intensity(0, WINDOW);
    let crew: MemberPoolRef = top.supervisor(crew, Restart::Permanent, SHUTDOWN).into();
    let after = top.child(member("after", &journal));
    let top = top.spawn(&context);
    assert_eq!(after.incarnation().await, Ok(1));
    let old = crew.as_pool().all();
    let mut joined = Box::pin(old[1].join());

    // Held at the keeper's restart: the parent took the pool's failure and stopped the rest.
    let (is_entered, open) = arm(&hold);
    assert!(old[0].fail().await.is_err());
    is_entered.await.unwrap();
    assert!(entries(&journal, 0).contains(&"stop crew#2".to_string()));
    let mut routed = Box::pin(crew.incarnation());
    assert!(futures::poll!(&mut routed).is_pending());
    open.send(()).unwrap();

    // `after` was stopped before the keeper started again, and starts after the pool.
    assert_eq!(after.incarnation().await, Ok(2));
    assert_eq!(keeper.incarnation().await, Ok(2));
    let answer = routed.await;
    assert!(matches!(answer, Ok(3 | 4)), "{answer:?}");
    assert_eq!(crew.as_pool().size(), 2);
    assert_eq!(made(&crew).await, [3, 4]);
    assert_eq!(old[0].incarnation().await, Ok(3));
    assert!(
        futures::poll!(&mut joined).is_pending(),
        "a member lives on"
    );
    assert_restarts(&context, "crew", 1);
    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(joined.await, ExitReason::Stopped);
}

/// A resize of a nested pool cut short by its parent's restart (its new member held in
/// `on_start`, the pool aborted past its shutdown timeout) fails with `Closed`, and the pool
/// comes back with the size it had before that resize.
#[runtime::test(timeout = "20s")]
async fn a_resize_cut_short_by_a_restart_leaves_a_nested_pool_its_size(context: runtime::Context) {
    let journal = Journal::default();
    let hold = Hold::default();
    let mut top = Supervisor::new("top", Strategy::OneForAll);
    let sibling = top.child(member("sibling", &journal));
    let crew = Pool::new("crew", 2, keepers(&hold));
    let crew: KeeperPoolRef = top
        .supervisor(crew, Restart::Permanent, Duration::from_millis(200))
        .into();
    let last = top.child(member("last", &journal));
    let top = top.spawn(&context);
    assert_eq!(last.incarnation().await, Ok(1));

    // Kept open to the end: the third member never leaves its `on_start`.
    let (is_entered, _open) = arm(&hold);
    let resize = context.clone().spawn({
        let crew = crew.clone();
        move |_| async move { crew.as_pool().resize(3).await }
    });
    is_entered.await.unwrap();
    assert!(sibling.fail().await.is_err());
    assert_eq!(resize.await.unwrap(), Err(Error::Closed));
    assert_eq!(sibling.incarnation().await, Ok(2));
    assert_eq!(last.incarnation().await, Ok(2), "started after the pool");
    assert_eq!(crew.as_pool().size(), 2);
    let mut made = Vec::new();
    for member in crew.as_pool().all() {
        made.push(member.incarnation().await.unwrap());
    }
    made.sort_unstable();
    assert_eq!(
        made,
        [4, 5],
        "two new members (the third was made for the resize)"
    );
    // The member the cut-short resize started was never routed to: it is gone.
    assert_eq!(crew.as_pool().which_children().len(), 2);
    assert_eq!(crew.as_pool().count_children().active, 2);
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// A start_child made while its nested dynamic supervisor restarts (stopped, not yet started
/// again: held open here) waits for the next incarnation, and its child runs there.
#[runtime::test(timeout = "20s")]
async fn a_start_child_during_a_restart_waits_for_the_next_incarnation(context: runtime::Context) {
    let journal = Journal::default();
    let hold = Hold::default();
    let mut top = Supervisor::new("top", Strategy::RestForOne);
    let keeper = top.child(keeper(&hold));
    let jobs = top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let top = top.spawn(&context);
    let x = jobs.start_child(member("x", &journal)).await.unwrap();

    let (is_entered, open) = arm(&hold);
    assert!(keeper.fail().await.is_err());
    is_entered.await.unwrap();
    assert_eq!(
        x.join().await,
        ExitReason::Stopped,
        "stopped with its supervisor"
    );
    let mut starting = Box::pin(jobs.start_child(member("y", &journal)));
    assert!(futures::poll!(&mut starting).is_pending());
    assert_eq!(jobs.count(), 0);
    open.send(()).unwrap();

    let y = starting.await.unwrap();
    assert_eq!(y.incarnation().await, Ok(1));
    assert_eq!(jobs.children(), [y.id()]);
    assert_eq!(keeper.incarnation().await, Ok(2));
    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(y.join().await, ExitReason::Stopped);
}

/// `stop()` on a nested supervisor's ref ends it for good, whatever its restart policy: a
/// permanent nested Supervisor, DynamicSupervisor and Pool stopped so are not started again,
/// not even when a one-for-all sibling's failure restarts the rest. One stopped before its
/// parent runs never starts.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisors_stop_ends_it_for_good(context: runtime::Context) {
    let journal = Journal::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    let b = middle.child(member("b", &journal));
    let mut top = Supervisor::new("top", Strategy::OneForAll);
    let a = top.child(member("a", &journal));
    let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    let jobs = top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let crew = Pool::new("crew", 2, numbered("crew", &journal));
    let crew: MemberPoolRef = top.supervisor(crew, Restart::Permanent, SHUTDOWN).into();
    let early = top.supervisor(
        DynamicSupervisor::new("early"),
        Restart::Permanent,
        SHUTDOWN,
    );
    let stopping_early = early.stop();
    let top = top.spawn(&context);
    assert_eq!(stopping_early.await, ExitReason::Stopped);
    assert_eq!(
        early.start_child(member("x", &journal)).await.unwrap_err(),
        Error::Closed
    );
    let x = jobs.start_child(member("x", &journal)).await.unwrap();
    assert_eq!(made(&crew).await, [1, 2]);

    assert_eq!(middle.stop().await, ExitReason::Stopped);
    assert_eq!(jobs.stop().await, ExitReason::Stopped);
    assert_eq!(crew.as_pool().stop().await, ExitReason::Stopped);
    assert_eq!(b.incarnation().await, Err(Error::Closed));
    assert_eq!(x.incarnation().await, Err(Error::Closed));
    assert_eq!(crew.incarnation().await, Err(Error::Closed));

    assert!(a.fail().await.is_err());
    assert_eq!(
        a.incarnation().await,
        Ok(2),
        "one for all restarts what is left"
    );
    assert_eq!(started(&journal, "b"), 1);
    assert_eq!(
        started(&journal, "crew"),
        2,
        "the pool's two first members only"
    );
    assert_eq!(
        jobs.start_child(member("y", &journal)).await.unwrap_err(),
        Error::Closed
    );
    assert_eq!(crew.incarnation().await, Err(Error::Closed));
    assert_eq!(middle.join().await, ExitReason::Stopped);
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// A nested supervisor's ref stopped while its parent restarts it (stopped, not yet started
/// again: held open here) is done for good: its parent does not start it again, and its
/// stop resolves `Stopped` once the parent got to it.
#[runtime::test(timeout = "20s")]
async fn a_stop_during_its_parents_restart_ends_a_nested_supervisor_for_good(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let hold = Hold::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    let b = middle.child(member("b", &journal));
    let mut top = Supervisor::new("top", Strategy::RestForOne);
    let keeper = top.child(keeper(&hold));
    let jobs = top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    let crew = Pool::new("crew", 1, numbered("crew", &journal));
    let crew: MemberPoolRef = top.supervisor(crew, Restart::Permanent, SHUTDOWN).into();
    let top = top.spawn(&context);
    let x = jobs.start_child(member("x", &journal)).await.unwrap();
    assert_eq!(crew.incarnation().await, Ok(1));

    let (is_entered, open) = arm(&hold);
    assert!(keeper.fail().await.is_err());
    is_entered.await.unwrap();
    assert_eq!(x.join().await, ExitReason::Stopped);
    let jobs_stop = jobs.stop();
    let middle_stop = middle.stop();
    // An `async fn`: the request is made when first polled.
    let mut crew_stop = Box::pin(crew.as_pool().stop());
    assert!(futures::poll!(&mut crew_stop).is_pending());
    open.send(()).unwrap();

    assert_eq!(jobs_stop.await, ExitReason::Stopped);
    assert_eq!(middle_stop.await, ExitReason::Stopped);
    assert_eq!(crew_stop.await, ExitReason::Stopped);
    assert_eq!(keeper.incarnation().await, Ok(2));
    assert_eq!(
        jobs.start_child(member("y", &journal)).await.unwrap_err(),
        Error::Closed
    );
    assert_eq!(b.incarnation().await, Err(Error::Closed));
    assert_eq!(crew.incarnation().await, Err(Error::Closed));
    assert_eq!(started(&journal, "b"), 1);
    assert_eq!(started(&journal, "crew"), 1);
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// A nested supervisor's stop racing its parent's restart of it, with nothing held (whichever
/// comes first, round after round), always ends it for good: `Stopped`, not started again,
/// and the parent goes on.
#[runtime::test(timeout = "20s")]
async fn a_stop_racing_a_restart_ends_a_nested_supervisor_for_good(context: runtime::Context) {
    for _round in 0..10 {
        let journal = Journal::default();
        let mut middle = Supervisor::new("middle", Strategy::OneForOne);
        let b = middle.child(member("b", &journal));
        let mut top = Supervisor::new("top", Strategy::OneForAll).intensity(5, WINDOW);
        let a = top.child(member("a", &journal));
        let jobs = top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
        let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
        let top = top.spawn(&context);
        let x = jobs.start_child(member("x", &journal)).await.unwrap();
        assert_eq!(b.incarnation().await, Ok(1));

        a.tell_fail().await.unwrap();
        let jobs_stop = jobs.stop();
        let middle_stop = middle.stop();
        assert_eq!(jobs_stop.await, ExitReason::Stopped);
        assert_eq!(middle_stop.await, ExitReason::Stopped);
        assert_eq!(a.incarnation().await, Ok(2));
        assert_eq!(x.incarnation().await, Err(Error::Closed));
        assert_eq!(b.incarnation().await, Err(Error::Closed));
        assert_eq!(
            jobs.start_child(member("y", &journal)).await.unwrap_err(),
            Error::Closed
        );
        assert_eq!(top.stop().await, ExitReason::Stopped);
    }
}

/// `join()` on a nested supervisor's ref resolves when its parent is done with it for good,
/// not when the parent restarts it.
#[runtime::test(timeout = "20s")]
async fn joining_a_nested_supervisor_waits_through_its_restarts(context: runtime::Context) {
    let journal = Journal::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    let b = middle.child(member("b", &journal));
    let mut top = Supervisor::new("top", Strategy::OneForAll).intensity(5, WINDOW);
    let a = top.child(member("a", &journal));
    let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    let jobs = top.supervisor(DynamicSupervisor::new("jobs"), Restart::Permanent, SHUTDOWN);
    let z = top.child(member("z", &journal));
    let top = top.spawn(&context);
    assert_eq!(z.incarnation().await, Ok(1));
    let mut middle_join = middle.join();
    let mut jobs_join = jobs.join();

    for restart in 1..=2 {
        let x = jobs.start_child(member("x", &journal)).await.unwrap();
        assert!(a.fail().await.is_err());
        // a's next incarnation starts once the others were stopped; z starts last: once it
        // answers, the restart is over.
        assert_eq!(a.incarnation().await, Ok(restart + 1));
        assert_eq!(z.incarnation().await, Ok(restart + 1));
        assert_eq!(b.incarnation().await, Ok(restart + 1));
        assert_eq!(x.join().await, ExitReason::Stopped);
        assert!(
            futures::poll!(&mut middle_join).is_pending(),
            "restart {restart}"
        );
        assert!(
            futures::poll!(&mut jobs_join).is_pending(),
            "restart {restart}"
        );
    }
    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(middle_join.await, ExitReason::Stopped);
    assert_eq!(jobs_join.await, ExitReason::Stopped);
}

/// A supervisor owns its permanent and transient children: with every strong ref dropped, a
/// `WeakRef` still upgrades and the child answers. A temporary child ends `Normal` when its
/// last ref goes (one dropped before its supervisor ran too), and is not restarted.
#[runtime::test(timeout = "20s")]
async fn a_supervisor_owns_its_permanent_and_transient_children(context: runtime::Context) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("owner", Strategy::OneForOne);
    let permanent = supervisor.child(member("permanent", &journal));
    let transient = supervisor.child(member("transient", &journal).restart(Restart::Transient));
    let temporary = supervisor.child(member("temporary", &journal).restart(Restart::Temporary));
    let early = supervisor.child(member("early", &journal).restart(Restart::Temporary));
    let early_weak = early.downgrade();
    drop(early);
    let supervisor = supervisor.spawn(&context);
    assert_eq!(temporary.incarnation().await, Ok(1));
    let weak = [permanent.downgrade(), transient.downgrade()];
    let temporary_weak = temporary.downgrade();
    drop((permanent, transient, temporary));

    assert_eq!(temporary_weak.join().await, ExitReason::Normal);
    assert!(temporary_weak.upgrade().is_none());
    assert_eq!(early_weak.join().await, ExitReason::Normal);
    for weak in &weak {
        let child = weak.upgrade().expect("owned by its supervisor");
        assert_eq!(child.incarnation().await, Ok(1));
    }
    assert_eq!(started(&journal, "temporary"), 1, "not restarted");
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
    for weak in &weak {
        assert_eq!(weak.join().await, ExitReason::Stopped);
    }
}

/// The same for a dynamic supervisor's children, top-level or nested: permanent and transient
/// ones live on without refs; a temporary one ends `Normal` with its last ref, and leaves.
#[runtime::test(timeout = "20s")]
async fn a_dynamic_supervisor_owns_its_permanent_and_transient_children(context: runtime::Context) {
    let journal = Journal::default();
    let loose = DynamicSupervisor::new("loose").spawn(&context);
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let nested = top.supervisor(
        DynamicSupervisor::new("nested"),
        Restart::Permanent,
        SHUTDOWN,
    );
    let top = top.spawn(&context);
    for jobs in [&loose, &nested] {
        let permanent = jobs
            .start_child(member("permanent", &journal))
            .await
            .unwrap();
        let transient = jobs
            .start_child(member("transient", &journal).restart(Restart::Transient))
            .await
            .unwrap();
        let temporary = jobs
            .start_child(member("temporary", &journal).restart(Restart::Temporary))
            .await
            .unwrap();
        let weak = [permanent.downgrade(), transient.downgrade()];
        let temporary_weak = temporary.downgrade();
        drop((permanent, transient, temporary));

        assert_eq!(temporary_weak.join().await, ExitReason::Normal);
        assert_eq!(jobs.count(), 2, "the temporary child left");
        for weak in &weak {
            let child = weak.upgrade().expect("owned by its supervisor");
            assert_eq!(child.incarnation().await, Ok(1));
        }
        assert_eq!(jobs.stop().await, ExitReason::Stopped);
        for weak in &weak {
            assert_eq!(weak.join().await, ExitReason::Stopped);
        }
    }
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// A top-level pool stops when its last ref goes (nobody can route to it any more); a nested
/// one lives on without refs, its parent's to end.
#[runtime::test(timeout = "20s")]
async fn a_top_level_pool_stops_with_its_last_ref_and_a_nested_one_lives_on(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let loose: MemberPoolRef = Pool::new("loose", 2, numbered("loose", &journal))
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let members: Vec<_> = loose
        .as_pool()
        .all()
        .iter()
        .map(|m| m.downgrade())
        .collect();
    let last = loose.clone();
    drop(loose);
    for member in &members {
        let member = member.upgrade().expect("one pool ref is left");
        assert!(member.incarnation().await.is_ok());
    }
    drop(last);
    for member in &members {
        assert_eq!(member.join().await, ExitReason::Stopped);
    }

    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let crew = Pool::new("crew", 2, numbered("crew", &journal));
    let crew: MemberPoolRef = top.supervisor(crew, Restart::Permanent, SHUTDOWN).into();
    let last = top.child(member("last", &journal));
    let top = top.spawn(&context);
    // The last child starts once the pool's members run.
    assert_eq!(last.incarnation().await, Ok(1));
    assert_eq!(made(&crew).await, [1, 2]);
    let members: Vec<_> = crew.as_pool().all().iter().map(|m| m.downgrade()).collect();
    drop(crew);
    for member in &members {
        let member = member.upgrade().expect("owned by the parent");
        assert!(member.incarnation().await.is_ok());
    }
    assert_eq!(top.stop().await, ExitReason::Stopped);
    for member in &members {
        assert_eq!(member.join().await, ExitReason::Stopped);
    }
}

/// A restart cancelled by `terminate_child` while the child waits out its backoff does not
/// count against the intensity. With an intensity of one, two failures waiting out their
/// backoff are one too many (the control); with the first terminated during its wait, the
/// second is within the intensity and waits its own backoff.
#[runtime::test(timeout = "20s")]
async fn a_restart_cancelled_during_its_backoff_does_not_count(context: runtime::Context) {
    let journal = Journal::default();
    let backoff = Backoff::exponential(FOREVER, FOREVER);
    let control = DynamicSupervisor::new("control")
        .intensity(1, WINDOW)
        .backoff(backoff)
        .spawn(&context);
    for name in ["first", "second"] {
        let child = control.start_child(member(name, &journal)).await.unwrap();
        fail_reported(&child).await;
    }
    assert_gave_up(control.join().await, "dynamic supervisor `control`");

    let patient = DynamicSupervisor::new("patient")
        .intensity(1, WINDOW)
        .backoff(backoff)
        .spawn(&context);
    let first = patient
        .start_child(member("first", &journal))
        .await
        .unwrap();
    // Its failure is read before the terminate: its restart is waiting out the backoff.
    fail_reported(&first).await;
    assert_eq!(patient.terminate_child(first.id()).await, Ok(()));
    assert_eq!(first.join().await, ExitReason::Stopped);
    let second = patient
        .start_child(member("second", &journal))
        .await
        .unwrap();
    fail_reported(&second).await;
    // Read after the second failure: the supervisor did not give up.
    assert_eq!(patient.children(), [second.id()]);
    assert_eq!(patient.terminate_child(second.id()).await, Ok(()));
    assert_eq!(second.join().await, ExitReason::Stopped);
    let mut join = patient.join();
    assert!(futures::poll!(&mut join).is_pending());
    assert_eq!(patient.stop().await, ExitReason::Stopped);
}

/// A nested supervisor waiting out its own backoff before restarting a child is stopped at
/// once, by its ref or by its parent: the stop does not wait out the ten minutes, and the
/// child ends `Stopped` (it was asked to), not with the failure it waited to restart from.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_waiting_out_its_own_backoff_stops_at_once(context: runtime::Context) {
    let journal = Journal::default();
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let a = top.child(member("a", &journal));
    let mut handles = Vec::new();
    for label in ["by_ref", "by_parent"] {
        let mut middle = Supervisor::new(label, Strategy::OneForOne)
            .backoff(Backoff::exponential(FOREVER, FOREVER));
        let b = middle.child(member("b", &journal));
        handles.push((top.supervisor(middle, Restart::Permanent, SHUTDOWN), b));
    }
    let top = top.spawn(&context);
    for (_, b) in &handles {
        fail_reported(b).await;
    }
    let (by_ref, b) = &handles[0];
    assert_eq!(by_ref.stop().await, ExitReason::Stopped);
    assert_eq!(b.join().await, ExitReason::Stopped);
    assert_eq!(a.incarnation().await, Ok(1), "the parent goes on");
    let (by_parent, b) = &handles[1];
    assert_eq!(top.stop().await, ExitReason::Stopped);
    assert_eq!(by_parent.join().await, ExitReason::Stopped);
    assert_eq!(b.join().await, ExitReason::Stopped);
}

/// A nested supervisor whose parent waits out a backoff before restarting it (it gave up),
/// stopped by its ref meanwhile, ends for good at once: its stop resolves `Stopped` without
/// waiting out the parent's ten-minute backoff, as `terminate_child` ends a dynamic child
/// waiting out its backoff, and the parent does not restart it.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_stopped_while_its_parent_backs_off_ends_at_once(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let mut top = Supervisor::new("top", Strategy::OneForOne)
        .intensity(5, WINDOW)
        .backoff(Backoff::exponential(FOREVER, FOREVER));
    let a = top.child(member("a", &journal));
    let jobs = top.supervisor(
        DynamicSupervisor::new("jobs").intensity(0, WINDOW),
        Restart::Permanent,
        SHUTDOWN,
    );
    let top = top.spawn(&context);
    let x = jobs.start_child(member("x", &journal)).await.unwrap();
    assert!(x.fail().await.is_err());
    // The jobs gave up; the top waits ten minutes before restarting them.
    assert_eq!(
        x.join().await,
        ExitReason::Panicked("x fails on purpose".into())
    );
    assert_eq!(jobs.stop().await, ExitReason::Stopped);
    assert_eq!(
        jobs.start_child(member("y", &journal)).await.unwrap_err(),
        Error::Closed
    );
    assert_eq!(a.incarnation().await, Ok(1));
    assert_eq!(top.stop().await, ExitReason::Stopped);
}

/// The same edge for an actor child, as the `Restart` table and `Supervisor::backoff` have it
/// (a ref's `stop()` ends a child for good; a stop during the wait is handled at once): a
/// child stopped by its ref while its supervisor waits out a ten-minute backoff before
/// restarting it ends `Stopped` at once, and its sibling goes on.
#[runtime::test(timeout = "20s")]
async fn a_child_stopped_by_its_ref_while_its_supervisor_backs_off_ends_at_once(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("patient", Strategy::OneForOne)
        .intensity(5, WINDOW)
        .backoff(Backoff::exponential(FOREVER, FOREVER));
    let child = supervisor.child(member("child", &journal));
    let sibling = supervisor.child(member("sibling", &journal));
    let supervisor = supervisor.spawn(&context);
    // Its failure is read before anything sent next: it waits out the backoff.
    fail_reported(&child).await;
    assert_eq!(child.stop().await, ExitReason::Stopped);
    assert_eq!(child.incarnation().await, Err(Error::Closed));
    assert_eq!(sibling.incarnation().await, Ok(1));
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
}

/// A nested pool of size zero (at any depth) or past `MAX_POOL_SIZE` is refused by its
/// parent's `try_spawn` with `InvalidPoolSize` naming it, before anything starts; the refs
/// handed out see `Closed`.
#[runtime::test(timeout = "20s")]
async fn a_nested_pool_of_invalid_size_is_refused_by_try_spawn(context: runtime::Context) {
    let journal = Journal::default();
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    let b = middle.child(member("b", &journal));
    let empty = Pool::new("empty", 0, numbered("empty", &journal));
    let empty: MemberPoolRef = middle
        .supervisor(empty, Restart::Permanent, SHUTDOWN)
        .into();
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let a = top.child(member("a", &journal));
    let middle = top.supervisor(middle, Restart::Permanent, SHUTDOWN);
    assert_eq!(
        top.try_spawn(&context).unwrap_err(),
        Error::InvalidPoolSize {
            pool: "empty",
            size: 0
        }
    );
    assert_eq!(a.incarnation().await, Err(Error::Closed));
    assert_eq!(b.incarnation().await, Err(Error::Closed));
    assert_eq!(empty.incarnation().await, Err(Error::Closed));
    assert_eq!(middle.join().await, ExitReason::Shutdown);
    assert!(journal.lock().is_empty(), "nothing started");

    let huge = actors::pool::MAX_POOL_SIZE + 1;
    let mut top = Supervisor::new("top", Strategy::OneForOne);
    let pool = Pool::new("huge", huge, numbered("huge", &journal));
    let _: actors::PoolRef<Member> = top.supervisor(pool, Restart::Permanent, SHUTDOWN);
    assert_eq!(
        top.try_spawn(&context).unwrap_err(),
        Error::InvalidPoolSize {
            pool: "huge",
            size: huge
        }
    );
}

/// A dynamic supervisor's child stopped by its ref while it waits out a backoff ends
/// `Stopped` at once and leaves, as `terminate_child` would have it, and that cancelled
/// restart does not count against the intensity.
#[runtime::test(timeout = "20s")]
async fn a_dynamic_child_stopped_by_its_ref_while_it_backs_off_ends_at_once(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let jobs = DynamicSupervisor::new("patient_jobs")
        .intensity(1, WINDOW)
        .backoff(Backoff::exponential(FOREVER, FOREVER))
        .spawn(&context);
    let child = jobs.start_child(member("child", &journal)).await.unwrap();
    let other = jobs.start_child(member("other", &journal)).await.unwrap();
    // Read before the stop below: the child waits out its ten-minute backoff.
    fail_reported(&child).await;
    assert_eq!(child.stop().await, ExitReason::Stopped);
    assert_eq!(jobs.children(), [other.id()]);
    // One more failure is within the intensity of one: the cancelled restart did not count.
    fail_reported(&other).await;
    // Read after that failure's report (one channel, in order): a supervisor that had given
    // up would answer `Closed`.
    assert!(matches!(
        jobs.terminate_child(child.id()).await,
        Err(Error::NoSuchChild { .. })
    ));
    assert_eq!(jobs.children(), [other.id()], "waiting out its backoff");
    assert_eq!(jobs.stop().await, ExitReason::Stopped);
}
