//! The actors on the deterministic runner, over hundreds of seeds each: supervision (every
//! strategy, the restart intensity, backoff in virtual time, nesting, dynamic supervisors and
//! pools), monitors and links, ask deadlines, timers, and one seed's run replaying exactly.
//!
//! Every seed orders the polls of a round differently, and the tests draw their own choices
//! (which child fails, how long a handler takes) from the run's generator
//! (`deterministic::random_u64`), so a failure replays with `RUNTIME_SEED=n`. Nothing waits
//! on real time: the sleeps below are virtual and are the behaviour under test (a timer's
//! period, a backoff, an intensity window, a slow handler).

use actors::prelude::*;
use actors::supervisor::{
    Backoff, ChildSpec, DynamicSupervisor, Restart, Strategy, Supervisor, SupervisorRef,
};
use actors::{ActorId, Context, Error, ExitReason, Monitor, Pool, Routing, Timer};
use futures::FutureExt as _;
use futures::StreamExt as _;
use futures::channel::mpsc;
use parking_lot::Mutex;
use runtime::deterministic::{self, Runner};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

type Journal = Arc<Mutex<Vec<String>>>;

/// Long enough that no restart of a test leaves the intensity window, unless it waits on
/// purpose.
const WINDOW: Duration = Duration::from_secs(3600);
/// A shutdown timeout no well-behaved child comes near.
const SHUTDOWN: Duration = Duration::from_secs(5);
/// How much virtual time the scheduling around an event may take (a round is 100 µs).
const SLACK: Duration = Duration::from_millis(20);

/// A number in `0..bound` drawn from the run's generator.
fn draw(bound: usize) -> usize {
    (runtime::random_u64() % bound as u64) as usize
}

/// The virtual time since the run began.
fn now() -> Duration {
    deterministic::elapsed().expect("a deterministic run")
}

// ---------------------------------------------------------------------------------------
// Supervision
// ---------------------------------------------------------------------------------------

#[actor(mailbox = 32)]
struct Member {
    name: &'static str,
    incarnation: usize,
    journal: Journal,
    /// When each incarnation started and failed, in virtual time.
    times: Times,
}

#[actor]
impl Member {
    fn on_start(&mut self) {
        let entry = format!("start {}#{}", self.name, self.incarnation);
        self.journal.lock().push(entry);
        self.times.lock().push(("start", self.incarnation, now()));
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
        self.times.lock().push(("fail", self.incarnation, now()));
        panic!("{} fails on purpose", self.name);
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

type Times = Arc<Mutex<Vec<(&'static str, usize, Duration)>>>;

/// Makes incarnations of member `name`, numbered from 1.
fn numbered(
    name: &'static str,
    journal: &Journal,
    times: &Times,
) -> impl FnMut() -> Member + Send + 'static {
    let (journal, times) = (journal.clone(), times.clone());
    let made = AtomicUsize::new(0);
    move || Member {
        name,
        incarnation: made.fetch_add(1, Ordering::SeqCst) + 1,
        journal: journal.clone(),
        times: times.clone(),
    }
}

fn member(name: &'static str, journal: &Journal) -> ChildSpec<Member> {
    ChildSpec::new(numbered(name, journal, &Times::default()))
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// Four members `a` to `d` under `strategy`, started in that order.
fn team(
    context: &runtime::Context,
    strategy: Strategy,
    restarts: usize,
) -> (SupervisorRef, Vec<MemberRef>, Journal) {
    let journal = Journal::default();
    let mut supervisor = Supervisor::new("team", strategy).intensity(restarts, WINDOW);
    let members = NAMES
        .iter()
        .map(|name| supervisor.child(member(name, &journal)))
        .collect();
    (supervisor.spawn(context), members, journal)
}

fn strategy_of_seed() -> Strategy {
    let seed = deterministic::seed().expect("a deterministic run");
    [
        Strategy::OneForOne,
        Strategy::OneForAll,
        Strategy::RestForOne,
    ][(seed % 3) as usize]
}

/// Which children a failure of `victim` restarts under `strategy`, in start order.
fn restarted_with(strategy: Strategy, victim: usize) -> Vec<usize> {
    match strategy {
        Strategy::OneForOne => vec![victim],
        Strategy::OneForAll => (0..NAMES.len()).collect(),
        Strategy::RestForOne => (victim..NAMES.len()).collect(),
    }
}

fn restarts_metric(context: &runtime::Context, label: &str) -> Option<u64> {
    let text = context.encode();
    let prefix = format!("actor_restarts_total{{actor=\"{label}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|count| count.trim().parse().unwrap())
}

/// Each strategy (the seed picks it) restarts exactly the children it names, one failure at
/// a time at a child the seed picks: the failed child's `on_stop`, the others to restart
/// stopped in reverse start order, then all of them started in order; the rest untouched;
/// every ref reaching its child's newest incarnation. A stop then ends them in reverse order.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn each_strategy_restarts_exactly_the_children_it_names(context: runtime::Context) {
    let strategy = strategy_of_seed();
    let (supervisor, members, journal) = team(&context, strategy, 100);
    let mut model = vec![1usize; NAMES.len()];
    let mut expected: Vec<String> = NAMES.iter().map(|name| format!("start {name}#1")).collect();
    for member in &members {
        assert_eq!(member.incarnation().await, Ok(1));
    }
    assert_eq!(*journal.lock(), expected);
    let mut restarts = 0;
    for _ in 0..6 {
        let victim = draw(NAMES.len());
        assert_eq!(
            members[victim].fail().await,
            Err(Error::Panicked { actor: "member" })
        );
        let restarted = restarted_with(strategy, victim);
        expected.push(format!("stop {}#{}", NAMES[victim], model[victim]));
        for &other in restarted.iter().rev().filter(|other| **other != victim) {
            expected.push(format!("stop {}#{}", NAMES[other], model[other]));
        }
        for &child in &restarted {
            model[child] += 1;
            expected.push(format!("start {}#{}", NAMES[child], model[child]));
        }
        restarts += restarted.len() as u64;
        // The victim first: once its new incarnation answers, the supervisor handled the
        // failure, so every sibling to restart has been stopped and waits for its next one.
        assert_eq!(members[victim].incarnation().await, Ok(model[victim]));
        for (index, member) in members.iter().enumerate() {
            assert_eq!(member.incarnation().await, Ok(model[index]), "{strategy:?}");
        }
        assert_eq!(*journal.lock(), expected, "{strategy:?}");
    }
    assert_eq!(restarts_metric(&context, "member"), Some(restarts));
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
    for index in (0..NAMES.len()).rev() {
        expected.push(format!("stop {}#{}", NAMES[index], model[index]));
    }
    assert_eq!(*journal.lock(), expected);
    for member in &members {
        assert_eq!(member.incarnation().await, Err(Error::Closed));
    }
}

/// Checks that each child's incarnations started and stopped in turn, numbered from 1 with
/// none skipped; returns how many each had.
fn well_formed(journal: &[String]) -> Vec<usize> {
    let mut counts = Vec::new();
    for name in NAMES {
        let own: Vec<&String> = journal
            .iter()
            .filter(|entry| entry.contains(&format!(" {name}#")))
            .collect();
        for (index, entry) in own.iter().enumerate() {
            let incarnation = index / 2 + 1;
            let verb = if index % 2 == 0 { "start" } else { "stop" };
            assert_eq!(
                **entry,
                format!("{verb} {name}#{incarnation}"),
                "{name}'s incarnations in {journal:?}"
            );
        }
        assert_eq!(own.len() % 2, 0, "{name} stopped last: {journal:?}");
        counts.push(own.len() / 2);
    }
    counts
}

/// Failures that race: several tasks ask children (picked by the seed) to fail at once, so
/// failures reach the supervisor while it restarts for another. Each `fail` is handled by
/// exactly one incarnation (a restart keeps the mailbox), the journal stays well-formed
/// (each child's incarnations start and stop in turn, none skipped), and what each strategy
/// promises holds: one-for-one restarts a child once per failure, one-for-all keeps every
/// child at the same incarnation, rest-for-one never leaves a later child behind an earlier.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn racing_failures_keep_every_strategy_consistent(context: runtime::Context) {
    let strategy = strategy_of_seed();
    let (supervisor, members, journal) = team(&context, strategy, 1000);
    let mut fails = vec![0usize; NAMES.len()];
    let mut tasks = Vec::new();
    for _ in 0..(2 + draw(7)) {
        let victim = draw(NAMES.len());
        fails[victim] += 1;
        let member = members[victim].clone();
        tasks.push(
            context
                .clone()
                .spawn(move |_| async move { member.fail().await }),
        );
    }
    for task in tasks {
        assert_eq!(
            task.await.unwrap(),
            Err(Error::Panicked { actor: "member" })
        );
    }
    // The children that failed first: each answers from an incarnation started after the
    // supervisor handled its last failure, so once all have answered, every failure has been
    // handled and the answers of a second pass are final.
    for (member, fails) in members.iter().zip(&fails) {
        if *fails > 0 {
            member.incarnation().await.unwrap();
        }
    }
    let mut answered = Vec::new();
    for member in &members {
        answered.push(member.incarnation().await.unwrap());
    }
    match strategy {
        Strategy::OneForOne => {
            let expected: Vec<usize> = fails.iter().map(|fails| fails + 1).collect();
            assert_eq!(answered, expected);
        }
        Strategy::OneForAll => assert!(
            answered
                .iter()
                .all(|incarnation| *incarnation == answered[0])
                && answered[0] > 1,
            "{answered:?}"
        ),
        Strategy::RestForOne => assert!(
            answered.windows(2).all(|pair| pair[0] <= pair[1]),
            "{answered:?} after {fails:?}"
        ),
    }
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
    let journal = journal.lock().clone();
    assert_eq!(well_formed(&journal), answered, "{journal:?}");
    let last: Vec<&str> = journal[journal.len() - NAMES.len()..]
        .iter()
        .map(String::as_str)
        .collect();
    let expected_last: Vec<String> = (0..NAMES.len())
        .rev()
        .map(|index| format!("stop {}#{}", NAMES[index], answered[index]))
        .collect();
    assert_eq!(last, expected_last);
}

fn assert_gave_up(reason: ExitReason, label: &str) {
    match reason {
        ExitReason::Panicked(message) => {
            assert!(message.contains(&format!("`{label}` gave up")), "{message}")
        }
        other => panic!("{label} gave up, not {other:?}"),
    }
}

/// The restart intensity: with a limit of `n` restarts (the seed picks it) within the window,
/// `n` failures are restarted and the next one makes the supervisor give up, stopping the
/// other children; failures spaced wider than the window (virtual time) never add up.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn intensity_gives_up_on_the_failure_past_its_limit(context: runtime::Context) {
    let limit = 1 + draw(4);
    let window = Duration::from_secs(10);
    let journal = Journal::default();
    let mut fragile = Supervisor::new("fragile", Strategy::OneForOne).intensity(limit, window);
    let steady = fragile.child(member("steady", &journal));
    let flaky = fragile.child(member("flaky", &journal));
    let fragile = fragile.spawn(&context);
    for incarnation in 1..=limit {
        assert_eq!(flaky.incarnation().await, Ok(incarnation));
        assert!(flaky.fail().await.is_err());
    }
    assert_eq!(flaky.incarnation().await, Ok(limit + 1));
    assert!(flaky.fail().await.is_err());
    assert_gave_up(fragile.join().await, "fragile");
    assert_eq!(steady.join().await, ExitReason::Stopped);
    assert!(matches!(flaky.join().await, ExitReason::Panicked(_)));
    assert_eq!(flaky.incarnation().await, Err(Error::Closed));
    assert_eq!(restarts_metric(&context, "member"), Some(limit as u64));

    // Spaced out: a window passes between failures, so none of them is one too many.
    let mut patient = Supervisor::new("patient", Strategy::OneForOne).intensity(limit, window);
    let flaky = patient.child(member("flaky", &journal));
    let patient = patient.spawn(&context);
    for incarnation in 1..=3 * limit + 1 {
        assert_eq!(flaky.incarnation().await, Ok(incarnation));
        assert!(flaky.fail().await.is_err());
        if incarnation % limit == 0 {
            context.sleep(window + SLACK).await;
        }
    }
    assert_eq!(flaky.incarnation().await, Ok(3 * limit + 2));
    assert_eq!(patient.stop().await, ExitReason::Stopped);
}

/// Backoff in virtual time: without jitter each restart waits exactly `min * 2^n` (up to
/// `max`) after the failure, give or take the scheduling around it; an incarnation that ran
/// longer than `reset_after` starts the delays over from the minimum.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn backoff_waits_the_exponential_delays_in_virtual_time(context: runtime::Context) {
    let min = Duration::from_millis(100 * (1 + draw(10) as u64));
    let max = min * 8;
    let backoff = Backoff::exponential(min, max).jitter(0.0);
    let (journal, times) = (Journal::default(), Times::default());
    let mut supervisor = Supervisor::new("backing", Strategy::OneForOne)
        .intensity(100, WINDOW)
        .backoff(backoff);
    let flaky = supervisor.child(ChildSpec::new(numbered("flaky", &journal, &times)));
    let supervisor = supervisor.spawn(&context);
    let delay_of = |incarnation: usize| {
        let times = times.lock();
        let failed = times
            .iter()
            .find(|(what, of, _)| *what == "fail" && *of == incarnation)
            .expect("failed")
            .2;
        let started = times
            .iter()
            .find(|(what, of, _)| *what == "start" && *of == incarnation + 1)
            .expect("restarted")
            .2;
        started - failed
    };
    let mut incarnation = 1;
    for attempt in 0..6u32 {
        assert_eq!(flaky.incarnation().await, Ok(incarnation));
        assert!(flaky.fail().await.is_err());
        assert_eq!(flaky.incarnation().await, Ok(incarnation + 1));
        let (delay, expected) = (delay_of(incarnation), backoff.ceiling(attempt));
        assert!(
            delay >= expected && delay < expected + SLACK,
            "attempt {attempt}: {delay:?}, not {expected:?}"
        );
        incarnation += 1;
    }
    // Running longer than `reset_after` (the maximum delay) starts them over.
    context.sleep(max + SLACK).await;
    assert!(flaky.fail().await.is_err());
    assert_eq!(flaky.incarnation().await, Ok(incarnation + 1));
    let delay = delay_of(incarnation);
    assert!(
        delay >= min && delay < min + SLACK,
        "after a reset: {delay:?}"
    );
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
}

/// What the jittered backoff program of `seed` observed: each restart's delay, and the
/// run's digest.
fn jittered_backoff(seed: u64) -> (Vec<Duration>, u64) {
    Runner::seeded(seed).start(|context| async move {
        let backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(3));
        let (journal, times) = (Journal::default(), Times::default());
        let mut supervisor = Supervisor::new("jittered", Strategy::OneForOne)
            .intensity(100, WINDOW)
            .backoff(backoff);
        let flaky = supervisor.child(ChildSpec::new(numbered("flaky", &journal, &times)));
        let supervisor = supervisor.spawn(&context);
        let mut delays = Vec::new();
        for incarnation in 1..=5 {
            assert!(flaky.fail().await.is_err());
            assert_eq!(flaky.incarnation().await, Ok(incarnation + 1));
            let times = times.lock();
            let at = |what: &str, of: usize| {
                times
                    .iter()
                    .find(|(seen, seen_of, _)| *seen == what && *seen_of == of)
                    .unwrap()
                    .2
            };
            let delay = at("start", incarnation + 1) - at("fail", incarnation);
            let ceiling = backoff.ceiling(incarnation as u32 - 1);
            assert!(
                delay <= ceiling + SLACK && delay >= ceiling.mul_f64(0.8),
                "{delay:?}"
            );
            delays.push(delay);
        }
        assert_eq!(supervisor.stop().await, ExitReason::Stopped);
        (delays, deterministic::digest().unwrap())
    })
}

/// A jittered backoff is random, but drawn so that a seed replays it: two runs of one seed
/// (on one thread, one after the other) wait the same delays and end with the same digest.
#[test]
fn a_jittered_backoff_replays_with_its_seed() {
    for seed in 0..10 {
        let first = jittered_backoff(seed);
        assert_eq!(jittered_backoff(seed), first, "seed {seed}");
    }
}

/// A nested supervisor that fails past its own intensity escalates to its parent, whose
/// strategy (the seed picks it) restarts it with its children; the sibling is restarted
/// with it only if the strategy says so. Refs reach the new incarnations.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn a_nested_supervisor_escalates_to_its_parent(context: runtime::Context) {
    let strategy = strategy_of_seed();
    let journal = Journal::default();
    let mut inner = Supervisor::new("inner", Strategy::OneForOne).intensity(1, WINDOW);
    let worker = inner.child(member("worker", &journal));
    let mut outer = Supervisor::new("outer", strategy).intensity(10, WINDOW);
    let before = outer.child(member("before", &journal));
    let inner = outer.supervisor(inner, Restart::Permanent, SHUTDOWN);
    let after = outer.child(member("after", &journal));
    let outer = outer.spawn(&context);

    assert_eq!(after.incarnation().await, Ok(1));
    for incarnation in 1..=2 {
        assert_eq!(worker.incarnation().await, Ok(incarnation));
        assert!(worker.fail().await.is_err());
    }
    // The inner supervisor gave up; the outer one restarted it, and with it the worker.
    assert_eq!(worker.incarnation().await, Ok(3));
    let restarted = |index: usize| 1 + restarted_with(strategy, 1).contains(&index) as usize;
    assert_eq!(before.incarnation().await, Ok(restarted(0)));
    assert_eq!(after.incarnation().await, Ok(restarted(2)));
    assert_eq!(inner.join().now_or_never(), None, "restarted, not ended");
    assert_eq!(outer.stop().await, ExitReason::Stopped);
    assert_eq!(inner.join().await, ExitReason::Stopped);
    assert_eq!(worker.incarnation().await, Err(Error::Closed));
    let journal = journal.lock().clone();
    assert_eq!(
        journal[journal.len() - 3..],
        [
            format!("stop after#{}", restarted(2)),
            "stop worker#3".to_string(),
            format!("stop before#{}", restarted(0)),
        ]
    );
}

/// A dynamic supervisor under operations the seed picks (start a child of each restart type,
/// fail one, have one stop itself, terminate one): each child is restarted or ended as its
/// restart type says, refs reach the newest incarnation, `max_children` refuses what is past
/// it, and the supervisor's children are always exactly those the model holds.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn a_dynamic_supervisor_follows_each_childs_restart_type(context: runtime::Context) {
    const MAX: usize = 4;
    let journal = Journal::default();
    let jobs = DynamicSupervisor::new("jobs")
        .intensity(1000, WINDOW)
        .max_children(MAX)
        .spawn(&context);
    // The children alive, with their restart type and newest incarnation.
    let mut model: Vec<(MemberRef, Restart, usize)> = Vec::new();
    for _ in 0..16 {
        match draw(4) {
            0 => {
                let restart = [Restart::Permanent, Restart::Transient, Restart::Temporary][draw(3)];
                let started = jobs
                    .start_child(member("job", &journal).restart(restart))
                    .await;
                if model.len() == MAX {
                    assert_eq!(
                        started.map(|child| child.id()),
                        Err(Error::TooManyChildren {
                            supervisor: "jobs",
                            max: MAX
                        })
                    );
                } else {
                    let child = started.unwrap();
                    assert_eq!(child.incarnation().await, Ok(1));
                    model.push((child, restart, 1));
                }
            }
            1 if !model.is_empty() => {
                let index = draw(model.len());
                let (child, restart, incarnation) = &mut model[index];
                assert_eq!(child.fail().await, Err(Error::Panicked { actor: "member" }));
                if *restart == Restart::Temporary {
                    assert!(matches!(child.join().await, ExitReason::Panicked(_)));
                    assert_eq!(child.incarnation().await, Err(Error::Closed));
                    model.remove(index);
                } else {
                    *incarnation += 1;
                    assert_eq!(child.incarnation().await, Ok(*incarnation));
                }
            }
            2 if !model.is_empty() => {
                let index = draw(model.len());
                let (child, restart, incarnation) = &mut model[index];
                child.finish().await.unwrap();
                if *restart == Restart::Permanent {
                    *incarnation += 1;
                    assert_eq!(child.incarnation().await, Ok(*incarnation));
                } else {
                    assert_eq!(child.join().await, ExitReason::Normal);
                    assert_eq!(child.incarnation().await, Err(Error::Closed));
                    model.remove(index);
                }
            }
            3 if !model.is_empty() => {
                let (child, _, _) = model.remove(draw(model.len()));
                assert_eq!(jobs.terminate_child(child.id()).await, Ok(()));
                assert_eq!(child.join().await, ExitReason::Stopped);
                assert!(matches!(
                    jobs.terminate_child(child.id()).await,
                    Err(Error::NoSuchChild { .. })
                ));
            }
            _ => {}
        }
        let mut children = jobs.children();
        children.sort_unstable();
        let mut expected: Vec<ActorId> = model.iter().map(|(child, _, _)| child.id()).collect();
        expected.sort_unstable();
        assert_eq!(children, expected);
        assert_eq!(jobs.count(), model.len());
    }
    assert_eq!(jobs.stop().await, ExitReason::Stopped);
    for (child, _, _) in &model {
        assert_eq!(child.join().await, ExitReason::Stopped);
    }
}

/// A `terminate_child` that races a failed child's backoff (it may reach the dynamic
/// supervisor before or after the failure does): the child is never started again, however
/// long virtual time runs, and the restart that did not happen does not count against the
/// intensity, so a later failure of another child within the window is still restarted.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn a_restart_cancelled_during_its_backoff_never_happens(context: runtime::Context) {
    let journal = Journal::default();
    let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(8)).jitter(0.0);
    let jobs = DynamicSupervisor::new("jobs")
        .intensity(1, WINDOW)
        .backoff(backoff)
        .spawn(&context);
    let doomed = jobs.start_child(member("doomed", &journal)).await.unwrap();
    assert!(doomed.fail().await.is_err());
    if draw(2) == 0 {
        // Well into the backoff, the failure surely handled.
        context.sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(jobs.terminate_child(doomed.id()).await, Ok(()));
    let reason = doomed.join().await;
    assert!(
        matches!(reason, ExitReason::Stopped | ExitReason::Panicked(_)),
        "{reason:?}"
    );
    context.sleep(Duration::from_secs(20)).await;
    assert_eq!(doomed.incarnation().await, Err(Error::Closed));
    assert_eq!(jobs.count(), 0);
    let next = jobs.start_child(member("next", &journal)).await.unwrap();
    assert!(next.fail().await.is_err());
    assert_eq!(next.incarnation().await, Ok(2), "within the intensity");
    assert_eq!(
        *journal.lock(),
        [
            "start doomed#1",
            "stop doomed#1",
            "start next#1",
            "stop next#1",
            "start next#2"
        ]
    );
    assert_eq!(jobs.stop().await, ExitReason::Stopped);
}

// ---------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------

#[actor(mailbox = 8)]
struct Worker {
    handled: Arc<Mutex<Vec<u64>>>,
}

#[actor]
impl Worker {
    /// Handles job `tag`; the job `u64::MAX` fails instead.
    fn job(&mut self, tag: u64) -> u64 {
        assert_ne!(tag, u64::MAX, "worker fails on its job");
        self.handled.lock().push(tag);
        tag
    }
}

fn routed(context: &runtime::Context, pool: &str) -> Vec<u64> {
    let prefix = format!("pool_routed_total{{pool=\"{pool}\",member=\"");
    let mut counts: Vec<(usize, u64)> = context
        .encode()
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rest| {
            let (member, count) = rest.split_once("\"} ").unwrap();
            (member.parse().unwrap(), count.trim().parse().unwrap())
        })
        .collect();
    counts.sort_unstable();
    counts.into_iter().map(|(_, count)| count).collect()
}

/// A pool of a size and a routing the seed picks, asked by several tasks at once, some jobs
/// failing their member: every job is handled exactly once (a failed member restarts behind
/// the same ref, and what was routed to it waits for its next incarnation), and round-robin
/// routes the same number of messages to every member, give or take one.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn a_pool_handles_every_message_once_across_member_failures(context: runtime::Context) {
    let size = 2 + draw(4);
    let routing = [Routing::RoundRobin, Routing::LeastLoaded][draw(2)];
    let handled = Arc::new(Mutex::new(Vec::new()));
    let factory = {
        let handled = handled.clone();
        move || Worker {
            handled: handled.clone(),
        }
    };
    let pool: WorkerPoolRef = Pool::new("crew", size, factory)
        .routing(routing)
        .intensity(1000, WINDOW)
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let (senders, per_sender) = (1 + draw(4), 5 + draw(20));
    let mut failures = 0;
    let mut expected = Vec::new();
    let mut tasks = Vec::new();
    for sender in 0..senders {
        let jobs: Vec<u64> = (0..per_sender)
            .map(|job| {
                if draw(8) == 0 {
                    failures += 1;
                    u64::MAX
                } else {
                    (sender * 1000 + job) as u64
                }
            })
            .collect();
        expected.extend(jobs.iter().copied().filter(|job| *job != u64::MAX));
        let pool = pool.clone();
        tasks.push(context.clone().spawn(move |_| async move {
            for job in jobs {
                let answer = pool.job(job).await;
                if job == u64::MAX {
                    assert_eq!(answer, Err(Error::Panicked { actor: "worker" }));
                } else {
                    assert_eq!(answer, Ok(job));
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Each job handled once: none lost with a failed member, none handled twice.
    let mut handled = handled.lock().clone();
    handled.sort_unstable();
    expected.sort_unstable();
    assert_eq!(handled, expected);
    let sent = senders * per_sender;
    assert_eq!(handled.len() + failures, sent);
    let counts = routed(&context, "crew");
    assert_eq!(counts.len(), size);
    assert_eq!(counts.iter().sum::<u64>(), sent as u64);
    if routing == Routing::RoundRobin {
        let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(most - least <= 1, "round robin takes turns: {counts:?}");
    }
    assert_eq!(pool.as_pool().stop().await, ExitReason::Stopped);
    assert_eq!(pool.job(0).await, Err(Error::Closed));
}

// ---------------------------------------------------------------------------------------
// Monitors and links
// ---------------------------------------------------------------------------------------

#[derive(Debug, PartialEq, Eq, Clone)]
enum Seen {
    Note(ActorId, u32),
    Down(ActorId, ExitReason),
    Exit(ActorId, ExitReason),
}

/// Monitors targets and reports what its mailbox gives it, in order.
#[actor(mailbox = 256)]
struct Watcher {
    seen: mpsc::UnboundedSender<Seen>,
    monitors: Vec<Monitor>,
}

#[actor]
impl Watcher {
    fn watch(&mut self, ctx: &mut Context<Self>, target: TargetRef) {
        let monitor = ctx.monitor(&target);
        self.monitors.push(monitor);
    }

    fn note(&mut self, from: ActorId, note: u32) {
        let _ = self.seen.unbounded_send(Seen::Note(from, note));
    }

    fn on_down(&mut self, id: ActorId, reason: ExitReason) {
        let _ = self.seen.unbounded_send(Seen::Down(id, reason));
    }
}

/// Links to targets, traps their exits and reports them.
#[actor(mailbox = 256)]
struct Trapper {
    seen: mpsc::UnboundedSender<Seen>,
}

#[actor]
impl Trapper {
    fn link_to(&mut self, ctx: &mut Context<Self>, target: TargetRef) {
        ctx.link(&target);
    }

    fn note(&mut self, from: ActorId, note: u32) {
        let _ = self.seen.unbounded_send(Seen::Note(from, note));
    }

    fn on_link_exit(&mut self, id: ActorId, reason: ExitReason) {
        let _ = self.seen.unbounded_send(Seen::Exit(id, reason));
    }
}

#[derive(Clone, Copy, Debug)]
enum End {
    /// It stops itself after its notes: `Normal`.
    Finish,
    /// It panics after its notes.
    Fail,
    /// A ref's `stop()` races its notes: `Stopped`.
    Stopped,
}

#[actor(mailbox = 16)]
struct Target;

#[actor]
impl Target {
    /// Sends `count` notes to each of `to`, then ends as `end` says.
    async fn notes_then(
        &mut self,
        ctx: &mut Context<Self>,
        watcher: WatcherRef,
        trapper: TrapperRef,
        count: u32,
        end: End,
    ) {
        for note in 0..count {
            watcher.tell_note(ctx.id(), note).await.unwrap();
            trapper.tell_note(ctx.id(), note).await.unwrap();
            runtime::reschedule().await;
        }
        match end {
            End::Finish | End::Stopped => ctx.stop(),
            End::Fail => panic!("target fails after its notes"),
        }
    }

    /// Links to `other`, which does not trap exits.
    fn link_to(&mut self, ctx: &mut Context<Self>, other: TargetRef) {
        ctx.link(&other);
    }

    fn ping(&self) {}
}

/// Reads `seen` until `downs` notifications of `kind` came, then checks the stream per
/// target: its notes a prefix `0..n` in order (all `count` of them unless a stop cut them
/// short), then exactly one notification with the reason its end says, then nothing.
async fn check_stream(
    seen: &mut mpsc::UnboundedReceiver<Seen>,
    targets: &[(TargetRef, End)],
    count: u32,
    trapped: bool,
) {
    let mut ended: HashMap<ActorId, ExitReason> = HashMap::new();
    let mut notes: HashMap<ActorId, u32> = HashMap::new();
    while ended.len() < targets.len() {
        let event = seen.next().await.expect("the watcher runs");
        let (id, reason) = match event {
            Seen::Note(id, note) => {
                assert!(!ended.contains_key(&id), "a note after {id}'s end");
                let next = notes.entry(id).or_default();
                assert_eq!(note, *next, "{id}'s notes in order");
                *next += 1;
                continue;
            }
            Seen::Down(id, reason) => {
                assert!(!trapped, "a down at the trapper");
                (id, reason)
            }
            Seen::Exit(id, reason) => {
                assert!(trapped, "an exit at the watcher");
                (id, reason)
            }
        };
        assert!(ended.insert(id, reason).is_none(), "a second end of {id}");
    }
    for (target, end) in targets {
        let reason = &ended[&target.id()];
        let noted = notes.get(&target.id()).copied().unwrap_or(0);
        match end {
            End::Finish => assert_eq!((reason, noted), (&ExitReason::Normal, count)),
            End::Fail => assert_eq!(
                (reason, noted),
                (
                    &ExitReason::Panicked("target fails after its notes".into()),
                    count
                )
            ),
            End::Stopped => {
                assert!(
                    *reason == ExitReason::Stopped
                        || (*reason == ExitReason::Normal && noted == count),
                    "{reason:?} after {noted} notes"
                );
            }
        }
    }
}

/// Targets end concurrently, each in a way the seed picks (stopping itself, panicking, or
/// stopped by a ref while it sends its notes): a monitor delivers exactly one down per target
/// and a trapping link exactly one exit, each after every note that target sent, with the
/// reason of its end; an untrapped partner linked to a target dies `Linked` exactly when
/// the target's end was abnormal. A last note comes right behind: nothing arrives twice.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn monitors_and_links_deliver_each_end_once_in_mailbox_order(context: runtime::Context) {
    let (to_watcher, mut watched) = mpsc::unbounded();
    let watcher = Watcher {
        seen: to_watcher,
        monitors: Vec::new(),
    }
    .spawn(&context);
    let (to_trapper, mut trapped) = mpsc::unbounded();
    let trapper = Trapper { seen: to_trapper }.spawn(&context);
    let count = 1 + draw(6) as u32;
    let mut targets = Vec::new();
    let mut partners = Vec::new();
    for _ in 0..(2 + draw(4)) {
        let end = [End::Finish, End::Fail, End::Stopped][draw(3)];
        let target = Target.spawn(&context);
        watcher.watch(target.clone()).await.unwrap();
        trapper.link_to(target.clone()).await.unwrap();
        let partner = Target.spawn(&context);
        partner.link_to(target.clone()).await.unwrap();
        partners.push(partner);
        targets.push((target, end));
    }
    let mut tasks = Vec::new();
    for (target, end) in &targets {
        let (target, end) = (target.clone(), *end);
        let (watcher, trapper) = (watcher.clone(), trapper.clone());
        tasks.push(context.clone().spawn(move |context| async move {
            let notes = target.notes_then(watcher, trapper, count, end);
            if let End::Stopped = end {
                let stop = context.spawn({
                    let target = target.clone();
                    move |_| async move { target.stop().await }
                });
                let _ = notes.await;
                stop.await.unwrap();
            } else {
                let _ = notes.await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    check_stream(&mut watched, &targets, count, false).await;
    check_stream(&mut trapped, &targets, count, true).await;
    for ((target, _), partner) in targets.iter().zip(&partners) {
        let reason = target.join().await;
        if reason.is_normal() {
            assert_eq!(
                partner.ping().await,
                Ok(()),
                "{reason:?} does not propagate"
            );
        } else {
            assert_eq!(
                partner.join().await,
                ExitReason::Linked {
                    partner: target.id(),
                    reason: Box::new(reason),
                }
            );
        }
    }
    let (watcher_id, trapper_id) = (watcher.id(), trapper.id());
    watcher.note(watcher_id, 99).await.unwrap();
    trapper.note(trapper_id, 99).await.unwrap();
    assert_eq!(watched.next().await, Some(Seen::Note(watcher_id, 99)));
    assert_eq!(trapped.next().await, Some(Seen::Note(trapper_id, 99)));
}

// ---------------------------------------------------------------------------------------
// Ask deadlines
// ---------------------------------------------------------------------------------------

#[actor(mailbox = 64)]
struct Slow;

#[actor]
impl Slow {
    /// Answers after `millis` of virtual time.
    async fn work(&mut self, ctx: &mut Context<Self>, millis: u64) -> u64 {
        ctx.runtime().sleep(Duration::from_millis(millis)).await;
        millis
    }
}

#[actor(ask_timeout = "1s")]
struct Bounded;

#[actor]
impl Bounded {
    async fn work(&mut self, ctx: &mut Context<Self>, millis: u64) -> u64 {
        ctx.runtime().sleep(Duration::from_millis(millis)).await;
        millis
    }
}

/// Two durations in milliseconds at least 50 ms apart, from 10 ms to 3 s.
fn apart() -> (u64, u64) {
    loop {
        let (a, b) = (10 + draw(3000) as u64, 10 + draw(3000) as u64);
        if a.abs_diff(b) >= 50 {
            return (a, b);
        }
    }
}

/// An ask's deadline is virtual time: to a handler slower than the deadline it resolves to
/// `Timeout` exactly when the deadline passes; to a faster one it answers when the handler
/// is done and never times out. Asks queued behind one another count the time of those
/// before them (a timed out ask's message is still handled), and the actor's own
/// `ask_timeout` applies to every ask without one.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn ask_deadlines_follow_virtual_time(context: runtime::Context) {
    let mut timeouts = 0;
    for _ in 0..4 {
        let slow = Slow.spawn(&context);
        let (work, deadline) = apart();
        let asked = now();
        let answer = slow
            .work(work)
            .timeout(Duration::from_millis(deadline))
            .await;
        let took = now() - asked;
        let expected = if work < deadline {
            assert_eq!(answer, Ok(work));
            Duration::from_millis(work)
        } else {
            assert_eq!(answer, Err(Error::Timeout));
            timeouts += 1;
            Duration::from_millis(deadline)
        };
        assert!(
            took >= expected && took < expected + SLACK,
            "{work} ms of work, a {deadline} ms deadline: {took:?}"
        );
    }

    // Queued: the i-th answers once all before it were handled.
    let slow = Slow.spawn(&context);
    let mut asks = Vec::new();
    let mut done = 0;
    for _ in 0..4 {
        let work = 10 + draw(500) as u64;
        done += work;
        let deadline = loop {
            let deadline = 10 + draw(2000) as u64;
            if deadline.abs_diff(done) >= 50 {
                break deadline;
            }
        };
        if deadline < done {
            timeouts += 1;
        }
        let ask = slow.work(work).timeout(Duration::from_millis(deadline));
        asks.push(async move { (ask.await, work, done, deadline) });
    }
    for (answer, work, done, deadline) in futures::future::join_all(asks).await {
        if done < deadline {
            assert_eq!(
                answer,
                Ok(work),
                "done at {done} ms, deadline {deadline} ms"
            );
        } else {
            assert_eq!(
                answer,
                Err(Error::Timeout),
                "done at {done} ms, deadline {deadline} ms"
            );
        }
    }

    let bounded = Bounded.spawn(&context);
    let work = 10 + draw(1980) as u64;
    if work.abs_diff(1000) >= 50 {
        let asked = now();
        let answer = bounded.work(work).await;
        if work < 1000 {
            assert_eq!(answer, Ok(work));
        } else {
            assert_eq!(answer, Err(Error::Timeout));
            assert!(now() - asked < Duration::from_secs(1) + SLACK);
            timeouts += 1;
        }
    }
    let text = context.encode();
    let counted: u64 = text
        .lines()
        .filter(|line| line.starts_with("actor_ask_timeouts_total{"))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, timeouts);
}

// ---------------------------------------------------------------------------------------
// Timers
// ---------------------------------------------------------------------------------------

#[actor]
struct Ticker {
    ticks: Vec<Duration>,
    timer: Option<Timer>,
    fired: Vec<Duration>,
}

#[actor]
impl Ticker {
    fn every(&mut self, ctx: &mut Context<Self>, period: Duration) -> Duration {
        self.timer = Some(ctx.run_every(period, |this, _| this.ticks.push(now())));
        now()
    }

    fn after(&mut self, ctx: &mut Context<Self>, delay: Duration) -> Duration {
        drop(ctx.run_after(delay, |this, _| this.fired.push(now())));
        now()
    }

    fn cancel(&mut self) {
        self.timer.take().expect("a timer").cancel();
    }

    fn ticks(&self) -> Vec<Duration> {
        self.ticks.clone()
    }

    fn fired(&self) -> Vec<Duration> {
        self.fired.clone()
    }
}

/// An interval of a period the seed picks fires exactly `n` times in `n` periods of virtual
/// time, each tick one period after the one before; once cancelled, no more. A one-shot
/// timer fires once, when its delay has passed.
#[runtime::test(deterministic, seeds = 0..1000)]
async fn timers_fire_the_exact_number_of_times_in_virtual_time(context: runtime::Context) {
    let ticker = Ticker {
        ticks: Vec::new(),
        timer: None,
        fired: Vec::new(),
    }
    .spawn(&context);
    let period = Duration::from_millis(10 + draw(990) as u64);
    let periods = 1 + draw(20) as u32;
    let set = ticker.every(period).await.unwrap();
    context.sleep(period * periods + period / 2).await;
    let ticks = ticker.ticks().await.unwrap();
    assert_eq!(ticks.len(), periods as usize, "every {period:?}: {ticks:?}");
    for (index, tick) in ticks.iter().enumerate() {
        let due = set + period * (index as u32 + 1);
        assert!(
            *tick >= due && *tick < due + SLACK,
            "tick {index} at {tick:?}, due {due:?}"
        );
    }
    ticker.cancel().await.unwrap();
    context.sleep(period * 5).await;
    assert_eq!(
        ticker.ticks().await.unwrap().len(),
        periods as usize,
        "cancelled"
    );

    let delay = Duration::from_millis(1 + draw(5000) as u64);
    let set = ticker.after(delay).await.unwrap();
    context.sleep(delay * 3).await;
    let fired = ticker.fired().await.unwrap();
    assert_eq!(fired.len(), 1);
    assert!(
        fired[0] >= set + delay && fired[0] < set + delay + SLACK,
        "{fired:?}"
    );
}

// ---------------------------------------------------------------------------------------
// One seed, one run
// ---------------------------------------------------------------------------------------

#[actor(dedicated, mailbox = 8)]
struct Ledger {
    entries: Vec<String>,
}

#[actor]
impl Ledger {
    fn write(&mut self, entry: String) -> usize {
        self.entries.push(entry);
        self.entries.len()
    }

    fn entries(&self) -> Vec<String> {
        self.entries.clone()
    }
}

#[actor(blocking)]
struct Checker;

#[actor]
impl Checker {
    fn check(&self, value: u64) -> bool {
        value.is_multiple_of(3)
    }
}

/// A program of many actors whose interleaving the seed decides: a supervision tree with a
/// jittered backoff, a pool, a dedicated and a blocking actor, a ticker, monitors, asks
/// with deadlines, failures at random. Returns what it observed and the run's digest.
fn busy_program(seed: u64) -> (Vec<String>, u64, Duration) {
    Runner::seeded(seed).start(|context| async move {
        let journal = Journal::default();
        let mut top = Supervisor::new("top", Strategy::OneForAll)
            .intensity(1000, WINDOW)
            .backoff(Backoff::exponential(
                Duration::from_millis(5),
                Duration::from_millis(200),
            ));
        let members: Vec<MemberRef> = NAMES
            .iter()
            .map(|name| top.child(member(name, &journal)))
            .collect();
        let handled = Arc::new(Mutex::new(Vec::new()));
        let factory = {
            let handled = handled.clone();
            move || Worker {
                handled: handled.clone(),
            }
        };
        let crew: WorkerPoolRef = top
            .supervisor(
                Pool::new("crew", 3, factory).routing(Routing::LeastLoaded),
                Restart::Permanent,
                SHUTDOWN,
            )
            .into();
        let top = top.spawn(&context);
        let ledger = Ledger {
            entries: Vec::new(),
        }
        .spawn(&context);
        let checker = Checker.spawn(&context);
        let ticker = Ticker {
            ticks: Vec::new(),
            timer: None,
            fired: Vec::new(),
        }
        .spawn(&context);
        ticker.every(Duration::from_millis(7)).await.unwrap();
        let (to_watcher, mut watched) = mpsc::unbounded();
        let watcher = Watcher {
            seen: to_watcher,
            monitors: Vec::new(),
        }
        .spawn(&context);
        let mut tasks = Vec::new();
        for task in 0..6u64 {
            let (members, crew, ledger, checker) = (
                members.clone(),
                crew.clone(),
                ledger.clone(),
                checker.clone(),
            );
            tasks.push(context.clone().spawn(move |_| async move {
                for step in 0..8u64 {
                    let value = runtime::random_u64() % 1000;
                    match value % 5 {
                        0 => {
                            let _ = members[(value % 4) as usize].fail().await;
                        }
                        1 => {
                            let _ = members[(value % 4) as usize]
                                .incarnation()
                                .timeout(Duration::from_millis(3))
                                .await;
                        }
                        2 => {
                            let _ = crew.job(task * 100 + step).await;
                        }
                        3 => {
                            let checked = checker.check(value).await.unwrap();
                            ledger
                                .write(format!("{task}.{step}: {checked}"))
                                .await
                                .unwrap();
                        }
                        _ => {
                            let _ = ledger.write(format!("{task}.{step}")).await;
                        }
                    }
                }
            }));
        }
        let target = Target.spawn(&context);
        watcher.watch(target.clone()).await.unwrap();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(target.stop().await, ExitReason::Stopped);
        let down = watched.next().await;
        let mut observed = ledger.entries().await.unwrap();
        observed.extend(journal.lock().iter().cloned());
        observed.extend(handled.lock().iter().map(|job| format!("job {job}")));
        observed.push(format!("{down:?}").replace(&format!("{}", target.id()), "target"));
        observed.push(format!("ticks {}", ticker.ticks().await.unwrap().len()));
        assert_eq!(top.stop().await, ExitReason::Stopped);
        (
            observed,
            deterministic::digest().unwrap(),
            deterministic::elapsed().unwrap(),
        )
    })
}

/// Two runs of one seed of a busy actor program observe the same events in the same order,
/// at the same virtual time, with the same digest; different seeds run differently.
#[test]
fn one_seed_replays_an_actor_program_exactly() {
    let mut digests = std::collections::HashSet::new();
    let mut journals = std::collections::HashSet::new();
    for seed in 0..20 {
        let first = busy_program(seed);
        assert_eq!(
            busy_program(seed),
            first,
            "seed {seed} ran differently twice"
        );
        journals.insert(first.0);
        digests.insert(first.1);
    }
    assert_eq!(digests.len(), 20, "each seed its own run");
    assert!(
        journals.len() > 10,
        "seeds choose interleavings: {}",
        journals.len()
    );
}
