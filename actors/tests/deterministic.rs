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
use runtime::Spawner as _;
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
    (deterministic::random_u64() % bound as u64) as usize
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
    times: Arc<Mutex<Vec<(&'static str, usize, Duration)>>>,
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
    [Strategy::OneForOne, Strategy::OneForAll, Strategy::RestForOne][(seed % 3) as usize]
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
#[runtime::test(deterministic, seeds = 0..300)]
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
#[runtime::test(deterministic, seeds = 0..300)]
async fn racing_failures_keep_every_strategy_consistent(context: runtime::Context) {
    let strategy = strategy_of_seed();
    let (supervisor, members, journal) = team(&context, strategy, 1000);
    let mut fails = vec![0usize; NAMES.len()];
    let mut tasks = Vec::new();
    for _ in 0..(2 + draw(7)) {
        let victim = draw(NAMES.len());
        fails[victim] += 1;
        let member = members[victim].clone();
        tasks.push(context.clone().spawn(move |_| async move { member.fail().await }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Err(Error::Panicked { actor: "member" }));
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
            answered.iter().all(|incarnation| *incarnation == answered[0]) && answered[0] > 1,
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
#[runtime::test(deterministic, seeds = 0..300)]
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
#[runtime::test(deterministic, seeds = 0..200)]
async fn backoff_waits_the_exponential_delays_in_virtual_time(context: runtime::Context) {
    let min = Duration::from_millis(100 * (1 + draw(10) as u64));
    let max = min * 8;
    let backoff = Backoff::exponential(min, max).jitter(0.0);
    let (journal, times) = (Journal::default(), Times::default());
    let mut supervisor = Supervisor::new("backing", Strategy::OneForOne)
        .intensity(100, WINDOW)
        .backoff(backoff.clone());
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
    assert!(delay >= min && delay < min + SLACK, "after a reset: {delay:?}");
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
            .backoff(backoff.clone());
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
            assert!(delay <= ceiling + SLACK && delay >= ceiling.mul_f64(0.8), "{delay:?}");
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
#[runtime::test(deterministic, seeds = 0..300)]
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
