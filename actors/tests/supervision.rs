//! Supervision through the public API: each strategy, each restart policy, the restart
//! intensity and escalation (to the runtime and to a parent supervisor), refs that keep
//! working across restarts, shutdown in reverse start order with timeouts, and what an
//! incarnation leaves to the next one (links, stops) and what it does not (a kill that came
//! while it was ending).

use actors::prelude::*;
use actors::supervisor::{ChildSpec, Restart, Strategy, Supervisor};
use actors::{Context, Error};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

type Journal = Arc<Mutex<Vec<String>>>;

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

    /// Which incarnation answers.
    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn fail(&mut self) {
        panic!("{} fails on purpose", self.name);
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }

    /// Links this incarnation to `other`.
    fn link_to(&mut self, ctx: &mut Context<Self>, other: MemberRef) {
        ctx.link(&other);
    }

    /// Never returns: a handler that ignores a stop request. Journals that it started.
    async fn hang(&mut self) {
        let entry = format!("hang {}#{}", self.name, self.incarnation);
        self.journal.lock().push(entry);
        futures::future::pending::<()>().await;
    }
}

/// A spec for member `name`, counting its incarnations from 1.
fn member(name: &'static str, journal: &Journal) -> ChildSpec<Member> {
    let journal = journal.clone();
    let incarnations = AtomicUsize::new(0);
    ChildSpec::new(move || Member {
        name,
        incarnation: incarnations.fetch_add(1, Ordering::SeqCst) + 1,
        journal: journal.clone(),
    })
}

/// Three members under `strategy`; returns the supervisor, their refs and the journal.
fn three(
    context: &runtime::Context,
    strategy: Strategy,
) -> (actors::supervisor::SupervisorRef, [MemberRef; 3], Journal) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("team", strategy).intensity(10, Duration::from_secs(60));
    let a = supervisor.child(member("a", &journal));
    let b = supervisor.child(member("b", &journal));
    let c = supervisor.child(member("c", &journal));
    (supervisor.spawn(context), [a, b, c], journal)
}

async fn incarnations(members: &[MemberRef; 3]) -> [usize; 3] {
    let mut out = [0; 3];
    for (slot, member) in out.iter_mut().zip(members) {
        *slot = member.incarnation().await.unwrap();
    }
    out
}

fn entries(journal: &Journal, from: usize) -> Vec<String> {
    journal.lock()[from..].to_vec()
}

/// One-for-one: only the failed child restarts, its old incarnation's `on_stop` before the
/// new one's `on_start`, and the same ref reaches the new incarnation.
#[runtime::test(timeout = "20s")]
async fn one_for_one_restarts_only_the_failed_child(context: runtime::Context) {
    let (supervisor, members, journal) = three(&context, Strategy::OneForOne);
    assert_eq!(incarnations(&members).await, [1, 1, 1]);
    assert_eq!(
        entries(&journal, 0),
        ["start a#1", "start b#1", "start c#1"]
    );
    assert_eq!(
        members[1].fail().await,
        Err(Error::Panicked { actor: "member" })
    );
    assert_eq!(incarnations(&members).await, [1, 2, 1]);
    assert_eq!(entries(&journal, 3), ["stop b#1", "start b#2"]);
    let restarts = context.encode();
    assert!(
        restarts.contains("actor_restarts_total{actor=\"member\"} 1"),
        "{restarts}"
    );
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    assert_eq!(entries(&journal, 5), ["stop c#1", "stop b#2", "stop a#1"]);
}

/// One-for-all: the others stop in reverse start order, then all start again in order.
#[runtime::test(timeout = "20s")]
async fn one_for_all_restarts_every_child(context: runtime::Context) {
    let (supervisor, members, journal) = three(&context, Strategy::OneForAll);
    assert_eq!(incarnations(&members).await, [1, 1, 1]);
    assert!(members[1].fail().await.is_err());
    assert_eq!(incarnations(&members).await, [2, 2, 2]);
    assert_eq!(
        entries(&journal, 3),
        [
            "stop b#1",
            "stop c#1",
            "stop a#1",
            "start a#2",
            "start b#2",
            "start c#2"
        ]
    );
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
}

/// Rest-for-one: the failed child and those started after it restart; earlier ones stay.
#[runtime::test(timeout = "20s")]
async fn rest_for_one_restarts_the_child_and_those_after_it(context: runtime::Context) {
    let (supervisor, members, journal) = three(&context, Strategy::RestForOne);
    assert_eq!(incarnations(&members).await, [1, 1, 1]);
    assert!(members[1].fail().await.is_err());
    assert_eq!(incarnations(&members).await, [1, 2, 2]);
    assert_eq!(
        entries(&journal, 3),
        ["stop b#1", "stop c#1", "start b#2", "start c#2"]
    );
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
}

/// Messages sent while a child restarts wait in its mailbox for the new incarnation.
#[runtime::test(timeout = "20s")]
async fn messages_sent_during_a_restart_reach_the_new_incarnation(context: runtime::Context) {
    let (supervisor, members, _journal) = three(&context, Strategy::OneForOne);
    let b = &members[1];
    b.tell_fail().await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(b.incarnation().await);
    }
    assert_eq!(answers, vec![Ok(2); 5]);
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
}

/// Permanent children restart even when they stop themselves; transient ones only when they
/// fail; temporary ones never. A child not restarted answers `Closed`.
#[runtime::test(timeout = "20s")]
async fn restart_policies_decide_which_ends_restart(context: runtime::Context) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("policies", Strategy::OneForOne);
    let permanent = supervisor.child(member("permanent", &journal));
    let transient = supervisor.child(member("transient", &journal).restart(Restart::Transient));
    let stopping = supervisor.child(member("stopping", &journal).restart(Restart::Transient));
    let temporary = supervisor.child(member("temporary", &journal).restart(Restart::Temporary));
    let supervisor = supervisor.spawn(&context);

    permanent.finish().await.unwrap();
    assert_eq!(permanent.incarnation().await, Ok(2));
    assert!(transient.fail().await.is_err());
    assert_eq!(transient.incarnation().await, Ok(2));
    stopping.finish().await.unwrap();
    assert_eq!(stopping.incarnation().await, Err(Error::Closed));
    assert!(temporary.fail().await.is_err());
    assert_eq!(temporary.incarnation().await, Err(Error::Closed));

    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    assert_eq!(permanent.incarnation().await, Err(Error::Closed));
}

/// More restarts than the intensity allows: the supervisor stops every child and gives up,
/// ending `Panicked`; the children's refs see `Closed`, and the program goes on (task panics
/// are not caught here, so a give-up that failed the runner would fail this test).
#[runtime::test(timeout = "20s")]
async fn exceeding_the_intensity_ends_a_top_level_supervisor_and_not_the_program(
    context: runtime::Context,
) {
    let journal = Journal::default();
    let mut supervisor =
        Supervisor::new("fragile", Strategy::OneForOne).intensity(2, Duration::from_secs(60));
    let a = supervisor.child(member("a", &journal));
    let b = supervisor.child(member("b", &journal));
    let supervisor = supervisor.spawn(&context);
    for incarnation in 1..=2 {
        assert_eq!(b.incarnation().await, Ok(incarnation));
        assert!(b.fail().await.is_err());
    }
    assert_eq!(b.incarnation().await, Ok(3));
    assert!(b.fail().await.is_err());
    match supervisor.join().await {
        actors::ExitReason::Panicked(message) => {
            assert!(message.contains("`fragile` gave up"), "{message}")
        }
        other => panic!("the supervisor gave up, not {other:?}"),
    }
    assert_eq!(a.incarnation().await, Err(Error::Closed));
    assert_eq!(b.incarnation().await, Err(Error::Closed));
    // The sibling was stopped; the child that made it give up keeps its failure.
    assert_eq!(a.join().await, actors::ExitReason::Stopped);
    assert!(
        matches!(b.join().await, actors::ExitReason::Panicked(_)),
        "b ends with its failure"
    );
    let journal = journal.lock().clone();
    assert_eq!(
        journal.last().map(String::as_str),
        Some("stop a#1"),
        "{journal:?}"
    );
    use runtime::Spawner as _;
    assert_eq!(context.spawn(|_| async { "goes on" }).await, Ok("goes on"));
}

/// A nested supervisor that exceeds its intensity escalates to its parent, which restarts it
/// (here one-for-one): its children start again, and their refs keep working.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_escalates_to_its_parent(context: runtime::Context) {
    let journal = Journal::default();
    let mut inner =
        Supervisor::new("inner", Strategy::OneForOne).intensity(1, Duration::from_secs(60));
    let worker = inner.child(member("worker", &journal));
    let mut outer = Supervisor::new("outer", Strategy::OneForOne);
    let sibling = outer.child(member("sibling", &journal));
    outer.supervisor(inner, Restart::Permanent, Duration::from_secs(5));
    let outer = outer.spawn(&context);

    assert_eq!(worker.incarnation().await, Ok(1));
    assert!(worker.fail().await.is_err());
    assert_eq!(
        worker.incarnation().await,
        Ok(2),
        "restarted by the inner supervisor"
    );
    assert!(worker.fail().await.is_err());
    // The inner supervisor gave up; the outer one restarted it, and with it the worker.
    assert_eq!(worker.incarnation().await, Ok(3));
    assert_eq!(
        sibling.incarnation().await,
        Ok(1),
        "one-for-one: the sibling stays"
    );
    outer.stop();
    assert_eq!(outer.join().await, actors::ExitReason::Stopped);
    assert_eq!(worker.incarnation().await, Err(Error::Closed));
}

/// A child stuck in a handler past its shutdown timeout is aborted; the others still stop in
/// reverse order, and the supervisor ends.
#[runtime::test(timeout = "20s")]
async fn a_child_past_its_shutdown_timeout_is_aborted(context: runtime::Context) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("stuck", Strategy::OneForOne);
    let a = supervisor.child(member("a", &journal));
    let b = supervisor.child(member("b", &journal).shutdown_timeout(Duration::from_millis(50)));
    let c = supervisor.child(member("c", &journal));
    let supervisor = supervisor.spawn(&context);
    for member in [&a, &b, &c] {
        member.incarnation().await.unwrap();
    }
    b.tell_hang().await.unwrap();
    // A stop request is taken before queued messages: stop only once b is in the handler.
    while !journal.lock().iter().any(|entry| entry == "hang b#1") {
        runtime::reschedule().await;
    }
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    // b never ran `on_stop`: it was aborted mid-handler.
    assert_eq!(entries(&journal, 3), ["hang b#1", "stop c#1", "stop a#1"]);
    assert_eq!(b.incarnation().await, Err(Error::Closed));
}

/// A nested supervisor restarted by its parent's strategy (one-for-all, after a sibling
/// failed) starts its children again: their refs keep working.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_restarted_by_its_parent_keeps_its_children(context: runtime::Context) {
    let journal = Journal::default();
    let mut inner = Supervisor::new("inner", Strategy::OneForOne);
    let worker = inner.child(member("worker", &journal));
    let mut outer = Supervisor::new("outer", Strategy::OneForAll);
    let sibling = outer.child(member("sibling", &journal));
    outer.supervisor(inner, Restart::Permanent, Duration::from_secs(5));
    let outer = outer.spawn(&context);

    assert_eq!(worker.incarnation().await, Ok(1));
    assert!(sibling.fail().await.is_err());
    assert_eq!(sibling.incarnation().await, Ok(2));
    assert_eq!(
        worker.incarnation().await,
        Ok(2),
        "restarted with its supervisor"
    );
    outer.stop();
    assert_eq!(outer.join().await, actors::ExitReason::Stopped);
    assert_eq!(worker.incarnation().await, Err(Error::Closed));
}

/// A nested supervisor aborted past its shutdown timeout (its child is stuck in a handler)
/// and restarted: it waits until the stuck incarnation is gone, then starts the child again.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_aborted_mid_shutdown_restarts_cleanly(context: runtime::Context) {
    let journal = Journal::default();
    let mut inner = Supervisor::new("inner", Strategy::OneForOne);
    let stuck = inner.child(member("stuck", &journal));
    let mut outer = Supervisor::new("outer", Strategy::OneForAll);
    let sibling = outer.child(member("sibling", &journal));
    outer.supervisor(inner, Restart::Permanent, Duration::from_millis(50));
    let outer = outer.spawn(&context);

    assert_eq!(stuck.incarnation().await, Ok(1));
    stuck.tell_hang().await.unwrap();
    // A stop request is taken before queued messages (which wait for the next incarnation):
    // fail the sibling only once the child is in the handler, or the hang would move on.
    while !journal.lock().iter().any(|entry| entry == "hang stuck#1") {
        runtime::reschedule().await;
    }
    assert!(sibling.fail().await.is_err());
    assert_eq!(sibling.incarnation().await, Ok(2));
    assert_eq!(
        stuck.incarnation().await,
        Ok(2),
        "the stuck child started again"
    );
    let stopped = journal.lock().iter().any(|entry| entry == "stop stuck#1");
    assert!(
        !stopped,
        "the stuck incarnation was aborted, not stopped: {:?}",
        journal.lock()
    );
    outer.stop();
    assert_eq!(outer.join().await, actors::ExitReason::Stopped);
}

/// Refs handed out by a supervisor that is dropped without being spawned see `Closed`
/// rather than wait for children that never start.
#[runtime::test(timeout = "20s")]
async fn refs_of_an_unspawned_supervisor_see_closed(_context: runtime::Context) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("never", Strategy::OneForOne);
    let member = supervisor.child(member("member", &journal));
    drop(supervisor);
    assert_eq!(member.incarnation().await, Err(Error::Closed));
}

/// A child done for good (temporary, failed) stays done when its nested supervisor is
/// restarted by its parent: its factory does not run again and its refs keep seeing
/// `Closed`, while its siblings start again.
#[runtime::test(timeout = "20s")]
async fn a_finished_child_stays_finished_across_its_supervisors_restart(context: runtime::Context) {
    let journal = Journal::default();
    let mut inner = Supervisor::new("inner", Strategy::OneForOne);
    let temporary = inner.child(member("temporary", &journal).restart(Restart::Temporary));
    let kept = inner.child(member("kept", &journal));
    let mut outer = Supervisor::new("outer", Strategy::OneForAll);
    let sibling = outer.child(member("sibling", &journal));
    outer.supervisor(inner, Restart::Permanent, Duration::from_secs(5));
    let outer = outer.spawn(&context);

    assert!(temporary.fail().await.is_err());
    assert_eq!(temporary.incarnation().await, Err(Error::Closed));
    assert!(sibling.fail().await.is_err());
    assert_eq!(
        kept.incarnation().await,
        Ok(2),
        "restarted with its supervisor"
    );
    assert_eq!(temporary.incarnation().await, Err(Error::Closed));
    let starts = journal
        .lock()
        .iter()
        .filter(|entry| entry.starts_with("start temporary"))
        .count();
    assert_eq!(starts, 1, "the finished child never started again");
    outer.stop();
    assert_eq!(outer.join().await, actors::ExitReason::Stopped);
}

/// A stop of a top-level supervisor is bounded by its children's shutdown timeouts: a
/// blocking child stuck in a blocking call is aborted and left to end on its own thread.
#[runtime::test(timeout = "20s")]
async fn a_stop_is_bounded_by_shutdown_timeouts_even_for_blocked_threads(
    context: runtime::Context,
) {
    type Gate = std::sync::Arc<parking_lot::Mutex<std::sync::mpsc::Receiver<()>>>;

    #[actor(blocking)]
    struct Sleeper {
        gate: Gate,
    }

    #[actor]
    impl Sleeper {
        fn block(&mut self, blocking: futures::channel::oneshot::Sender<()>) {
            let _ = blocking.send(());
            // Holds the thread until the test drops the gate's sender.
            let _ = self.gate.lock().recv();
        }

        fn ping(&self) {}
    }

    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate: Gate = std::sync::Arc::new(parking_lot::Mutex::new(gate));
    let mut supervisor = Supervisor::new("sleepers", Strategy::OneForOne);
    let sleeper = supervisor.child(
        ChildSpec::new({
            let gate = gate.clone();
            move || Sleeper { gate: gate.clone() }
        })
        .shutdown_timeout(Duration::from_millis(50)),
    );
    let supervisor = supervisor.spawn(&context);
    let (blocking, is_blocking) = futures::channel::oneshot::channel();
    sleeper.tell_block(blocking).await.unwrap();
    is_blocking.await.unwrap();
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    drop(release);
    assert_eq!(sleeper.ping().await, Err(Error::Closed));
}

/// Three tasks join one supervisor, each through its own clone of the ref, registered while
/// it runs: all hear the same reason, as does `stop()` itself and a join made after the end.
#[runtime::test(timeout = "20s")]
async fn every_joiner_of_a_supervisor_hears_its_end(context: runtime::Context) {
    let (supervisor, members, _journal) = three(&context, Strategy::OneForOne);
    let mut joins = Vec::new();
    for _ in 0..3 {
        let mut join = supervisor.clone().join();
        assert!(futures::poll!(&mut join).is_pending(), "it runs");
        joins.push(context.clone().spawn(move |_| join));
    }
    assert_eq!(supervisor.stop().await, actors::ExitReason::Stopped);
    for join in joins {
        assert_eq!(join.await.unwrap(), actors::ExitReason::Stopped);
    }
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    // Its children ended for good before it did.
    for member in &members {
        assert!(member.inner().is_closed());
    }
}

/// `stop()` dropped unawaited still stops the supervisor (the fire-and-forget form).
#[runtime::test(timeout = "20s")]
async fn a_dropped_stop_still_stops_the_supervisor(context: runtime::Context) {
    let (supervisor, [a, _, _], _journal) = three(&context, Strategy::OneForOne);
    assert_eq!(a.incarnation().await, Ok(1));
    drop(supervisor.stop());
    assert_eq!(a.join().await, actors::ExitReason::Stopped);
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
}

/// A nested supervisor's `stop()` ends it for good, whatever its restart policy: its parent
/// does not restart it, its children end, and its joiners hear `Stopped`; the parent and its
/// other children go on.
#[runtime::test(timeout = "20s")]
async fn a_nested_supervisor_stopped_by_its_ref_is_done_for_good(context: runtime::Context) {
    let journal = Journal::default();
    let mut inner = Supervisor::new("inner", Strategy::OneForOne);
    let worker = inner.child(member("worker", &journal));
    let mut outer = Supervisor::new("outer", Strategy::OneForOne);
    let sibling = outer.child(member("sibling", &journal));
    let inner = outer.supervisor(inner, Restart::Permanent, Duration::from_secs(5));
    let outer = outer.spawn(&context);
    assert_eq!(worker.incarnation().await, Ok(1));
    assert_ne!(inner.id(), outer.id());
    assert_eq!(inner.stop().await, actors::ExitReason::Stopped);
    assert_eq!(worker.incarnation().await, Err(Error::Closed));
    assert_eq!(sibling.incarnation().await, Ok(1));
    assert_eq!(outer.stop().await, actors::ExitReason::Stopped);
    assert_eq!(inner.join().await, actors::ExitReason::Stopped);
}

/// `Restart::Transient` restarts a child that ended abnormally because a linked actor did
/// (`Linked`), not only one that panicked; a normal end is not restarted.
#[runtime::test(timeout = "20s")]
async fn a_transient_child_restarts_after_a_linked_exit(context: runtime::Context) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("linked", Strategy::OneForOne);
    let transient = supervisor.child(member("transient", &journal).restart(Restart::Transient));
    let supervisor = supervisor.spawn(&context);
    assert_eq!(transient.incarnation().await, Ok(1));
    let partner = member("partner", &journal).restart(Restart::Temporary);
    let mut partners = Supervisor::new("partners", Strategy::OneForOne);
    let partner = partners.child(partner);
    let partners = partners.spawn(&context);
    transient.link_to(partner.clone()).await.unwrap();
    assert!(partner.fail().await.is_err());
    assert!(matches!(
        partner.join().await,
        actors::ExitReason::Panicked(_)
    ));
    assert_eq!(
        transient.incarnation().await,
        Ok(2),
        "restarted after the linked exit"
    );
    assert_eq!(supervisor.stop().await, actors::ExitReason::Stopped);
    assert_eq!(partners.stop().await, actors::ExitReason::Stopped);
}

/// A one-off pause in a hook: the incarnation that takes it says so on `reached`, then waits
/// for `resume`. A slot holds at most one; the test arms it when the incarnation it means
/// comes next.
struct Pause {
    reached: futures::channel::oneshot::Sender<()>,
    resume: futures::channel::oneshot::Receiver<()>,
}

type PauseSlot = Arc<Mutex<Option<Pause>>>;

/// Arms `slot`; returns the receiver that hears the pause reached and the sender that ends it.
fn arm(
    slot: &PauseSlot,
) -> (
    futures::channel::oneshot::Receiver<()>,
    futures::channel::oneshot::Sender<()>,
) {
    let (reached, is_reached) = futures::channel::oneshot::channel();
    let (resume, resumed) = futures::channel::oneshot::channel();
    *slot.lock() = Some(Pause {
        reached,
        resume: resumed,
    });
    (is_reached, resume)
}

/// Takes the pause armed in `slot`, if any, and waits in it.
async fn pause_at(slot: &PauseSlot) {
    let pause = slot.lock().take();
    if let Some(Pause { reached, resume }) = pause {
        let _ = reached.send(());
        let _ = resume.await;
    }
}

/// A supervised actor whose `on_start` and `on_stop` can be held (see [`Pause`]), so that
/// a test acts while an incarnation starts or ends.
#[actor]
struct Pausing {
    incarnation: usize,
    on_start: PauseSlot,
    on_stop: PauseSlot,
}

#[actor]
impl Pausing {
    async fn on_start(&mut self) {
        pause_at(&self.on_start).await;
    }

    async fn on_stop(&mut self) {
        pause_at(&self.on_stop).await;
    }

    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn link_to(&mut self, ctx: &mut Context<Self>, other: PartnerRef) {
        ctx.link(&other);
    }

    fn fail(&mut self) {
        panic!("pausing fails on purpose");
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Where a test holds a `Pausing` child's hooks.
#[derive(Clone, Default)]
struct Pauses {
    on_start: PauseSlot,
    on_stop: PauseSlot,
}

/// A permanent `Pausing` child, its incarnations counted from 1.
fn pausing(pauses: &Pauses) -> ChildSpec<Pausing> {
    let pauses = pauses.clone();
    let incarnations = AtomicUsize::new(0);
    ChildSpec::new(move || Pausing {
        incarnation: incarnations.fetch_add(1, Ordering::SeqCst) + 1,
        on_start: pauses.on_start.clone(),
        on_stop: pauses.on_stop.clone(),
    })
}

/// An unsupervised actor that ends abnormally on request: a link's partner.
#[actor]
struct Partner;

#[actor]
impl Partner {
    fn fail(&mut self) {
        panic!("the partner fails on purpose");
    }
}

/// Fails `partner` and waits for its end, which its links hear of before its joiners do.
async fn kill(partner: &PartnerRef) {
    assert_eq!(
        partner.fail().await,
        Err(Error::Panicked { actor: "partner" })
    );
    assert!(matches!(
        partner.join().await,
        actors::ExitReason::Panicked(_)
    ));
}

/// The line of `actor_restarts_total` for `label` in the runtime's metrics.
fn restarts(context: &runtime::Context, label: &str) -> Option<String> {
    let prefix = format!("actor_restarts_total{{actor=\"{label}\"}} ");
    context
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix).map(str::to_string))
}

/// A linked partner's abnormal end that arrives while an incarnation is already ending (in
/// its `on_stop`) ends nothing more: that incarnation ends as it was ending, and the next one
/// is not killed by it on arrival. One restart, not two.
#[runtime::test(timeout = "20s")]
async fn a_kill_arriving_while_an_incarnation_ends_spares_the_next(context: runtime::Context) {
    let pauses = Pauses::default();
    let mut supervisor =
        Supervisor::new("ending", Strategy::OneForOne).intensity(10, Duration::from_secs(60));
    let child = supervisor.child(pausing(&pauses));
    let supervisor = supervisor.spawn(&context);
    let partner = Partner.spawn(&context);
    assert_eq!(child.incarnation().await, Ok(1));
    child.link_to(partner.clone()).await.unwrap();

    let (stopping, resume) = arm(&pauses.on_stop);
    child.tell_finish().await.unwrap();
    stopping.await.unwrap();
    // The first incarnation is in its `on_stop`: the partner's end reaches it there.
    kill(&partner).await;
    resume.send(()).unwrap();

    assert_eq!(
        child.incarnation().await,
        Ok(2),
        "the next incarnation handles messages"
    );
    assert_eq!(restarts(&context, "pausing").as_deref(), Some("1"));
    assert_eq!(supervisor.stop().await, actors::ExitReason::Stopped);
}

/// A kill that arrives between incarnations (the child stopped by its supervisor's
/// one-for-all restart, its sibling still starting before it) is not carried into the next
/// incarnation either.
#[runtime::test(timeout = "20s")]
async fn a_kill_arriving_between_incarnations_spares_the_next(context: runtime::Context) {
    let first = Pauses::default();
    let mut supervisor =
        Supervisor::new("between", Strategy::OneForAll).intensity(10, Duration::from_secs(60));
    let sibling = supervisor.child(pausing(&first));
    let child = supervisor.child(pausing(&Pauses::default()));
    let supervisor = supervisor.spawn(&context);
    let partner = Partner.spawn(&context);
    assert_eq!(child.incarnation().await, Ok(1));
    child.link_to(partner.clone()).await.unwrap();

    // The sibling fails: both stop (the child first), then the sibling starts again and is
    // held in its `on_start`, before the child's next incarnation starts.
    let (starting, resume) = arm(&first.on_start);
    assert!(sibling.fail().await.is_err());
    starting.await.unwrap();
    kill(&partner).await;
    resume.send(()).unwrap();

    assert_eq!(sibling.incarnation().await, Ok(2));
    assert_eq!(
        child.incarnation().await,
        Ok(2),
        "the next incarnation handles messages"
    );
    // One restart each.
    assert_eq!(restarts(&context, "pausing").as_deref(), Some("2"));
    assert_eq!(supervisor.stop().await, actors::ExitReason::Stopped);
}

/// Links belong to the actor, not to one incarnation: a partner linked by an earlier
/// incarnation that ends abnormally while the next one starts (in its `on_start`, after its
/// supervisor cleared what the last one left) ends that incarnation, as a link should.
#[runtime::test(timeout = "20s")]
async fn a_kill_arriving_while_the_next_incarnation_starts_ends_it(context: runtime::Context) {
    let pauses = Pauses::default();
    let mut supervisor =
        Supervisor::new("starting", Strategy::OneForOne).intensity(10, Duration::from_secs(60));
    let child = supervisor.child(pausing(&pauses));
    let supervisor = supervisor.spawn(&context);
    let partner = Partner.spawn(&context);
    assert_eq!(child.incarnation().await, Ok(1));
    child.link_to(partner.clone()).await.unwrap();

    let (starting, resume) = arm(&pauses.on_start);
    assert!(child.fail().await.is_err());
    starting.await.unwrap();
    // The second incarnation is in its `on_start`.
    kill(&partner).await;
    resume.send(()).unwrap();

    assert_eq!(
        child.incarnation().await,
        Ok(3),
        "the second incarnation was killed"
    );
    assert_eq!(restarts(&context, "pausing").as_deref(), Some("2"));
    assert_eq!(supervisor.stop().await, actors::ExitReason::Stopped);
}

/// A ref's `stop()` is for the actor, not for one incarnation: asked while an incarnation is
/// ending (to be restarted), it ends the actor for good once the next one has handled what was
/// queued before it.
#[runtime::test(timeout = "20s")]
async fn a_stop_arriving_while_an_incarnation_ends_ends_the_actor(context: runtime::Context) {
    let pauses = Pauses::default();
    let mut supervisor =
        Supervisor::new("stopping", Strategy::OneForOne).intensity(10, Duration::from_secs(60));
    let child = supervisor.child(pausing(&pauses));
    let supervisor = supervisor.spawn(&context);
    assert_eq!(child.incarnation().await, Ok(1));

    let (stopping, resume) = arm(&pauses.on_stop);
    child.tell_finish().await.unwrap();
    stopping.await.unwrap();
    // An ask is sent on its first poll: this one is queued before the stop.
    let mut queued = std::pin::pin!(child.incarnation());
    assert!(futures::poll!(queued.as_mut()).is_pending());
    let stopped = child.stop();
    resume.send(()).unwrap();

    assert_eq!(queued.await, Ok(2), "queued before the stop: handled");
    assert_eq!(stopped.await, actors::ExitReason::Stopped);
    assert_eq!(child.incarnation().await, Err(Error::Closed));
    assert_eq!(supervisor.stop().await, actors::ExitReason::Stopped);
}
