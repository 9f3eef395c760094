//! kv's durability under simulated crashes, over seeds: the store, on the deterministic
//! runner's simulated storage, takes writes from a few clients and rewrites of its log (asked
//! for, and automatic past a small size), and the run crashes at a point drawn from the seed:
//! in the middle of a write, a group commit's sync, a rewrite's snapshot, its first commit or
//! the removal of the generation it replaced. Unsynced writes are then lost, kept, torn or
//! kept in part, as the simulated storage draws them. The store starts again over what
//! survived, and must:
//! - start: recovery cuts what a crash left aside and reports it. One shape a lost machine can
//!   leave is refused as damage: a commit that never completed, written out of order, one of
//!   its pages lost and a later one kept, which nothing in the pages tells from damage to
//!   pages an earlier sync made durable. Then the store says to run `--repair`, and the test
//!   does ([`kv::repair`]), as an operator would;
//! - hold, for every key, the last value acknowledged for it or a later one that was written
//!   but not yet acknowledged at the crash: never an older one, never bytes that were not
//!   written.
//!
//! Then it takes more writes and crashes again ([`SEARCH`]: two crashes a seed), each
//! recovery checked the same way.
//!
//! `RUNTIME_SEEDS=0..10000 cargo test --release -p examples --test kv_crash` runs it over
//! more seeds; a failing seed prints itself and replays alone with `RUNTIME_SEED=n`.

use bytes::Bytes;
use examples::kv::store::{Op, Outcome};
use examples::kv::{self, Durability, Expiry, Options, StoreRef, When};
use runtime::deterministic::{Checkpoint, Runner};
use runtime::prelude::*;
use runtime::{Context, random_u64};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Clients writing at once, each to keys of its own (so the order of its writes to a key is
/// the order it issued them).
const CLIENTS: usize = 3;
/// Keys per client.
const KEYS: usize = 4;
/// How a seed's rounds write, crash and rewrite.
#[derive(Clone, Copy, Debug)]
struct Workload {
    /// Crash-and-recover rounds per seed (a final start checks the last).
    rounds: usize,
    /// The longest a round writes before it crashes (the seed draws up to this).
    writing: Duration,
    /// The log is rewritten past this size (and twice the live data).
    rewrite_min_bytes: u64,
    /// A rewrite is asked for every `.0` plus up to `.1` milliseconds.
    rewrite_every: (u64, u64),
}

/// The workload of the seed ranges: two crashes a seed, automatic rewrites now and then,
/// asked-for ones every 10-100 ms (10,000 seeds in about half a minute on two cores).
const SEARCH: Workload = Workload {
    rounds: 2,
    writing: Duration::from_millis(100),
    rewrite_min_bytes: 128 << 10,
    rewrite_every: (10, 90),
};

/// The workload the bugs below were found with: three crashes a seed, rewrites all the time.
/// Their seeds replay them under it.
const FOUND: Workload = Workload {
    rounds: 3,
    writing: Duration::from_millis(150),
    rewrite_min_bytes: 16 << 10,
    rewrite_every: (0, 40),
};

/// What the clients did to each key (`[client][key]`): the last version acknowledged, and the
/// last version issued (acknowledged or not). Version 0 is "never written".
#[derive(Clone, Debug, Default)]
struct Progress {
    acknowledged: [[u64; KEYS]; CLIENTS],
    issued: [[u64; KEYS]; CLIENTS],
}

fn key(client: usize, index: usize) -> Vec<u8> {
    format!("client{client}-key{index}").into_bytes()
}

/// A value naming its version, padded to a length drawn from the seed so that records span
/// pages; the padding repeats the version, so any stray byte shows.
fn value(version: u64) -> Bytes {
    let padding = (random_u64() % 6000) as usize;
    let head = format!("v{version}:");
    let fill = format!("{version:x}");
    let copies = padding.saturating_sub(head.len()).div_ceil(fill.len());
    Bytes::from(head + &fill.repeat(copies))
}

/// The version a value names, checking that the value is exactly what [`value`] wrote.
fn version_of(value: &[u8]) -> u64 {
    let text = std::str::from_utf8(value).expect("a value is the text written");
    let (head, padding) = text
        .strip_prefix('v')
        .and_then(|rest| rest.split_once(':'))
        .unwrap_or_else(|| panic!("a value is `v<version>:<padding>`, not {text:?}"));
    let version: u64 = head.parse().expect("a version");
    let fill = format!("{version:x}");
    assert!(
        padding.len().is_multiple_of(fill.len())
            && padding == fill.repeat(padding.len() / fill.len()),
        "the padding of version {version} is intact"
    );
    version
}

fn options(workload: Workload) -> Options {
    Options {
        durability: Durability::Always,
        // Small, so automatic rewrites happen within a run.
        rewrite_min_bytes: workload.rewrite_min_bytes,
        rewrite_ratio: 2,
        strict: false,
    }
}

/// One client: writes random keys of its own, in order, recording what it issued and what
/// was acknowledged, until the crash stops it.
async fn client(store: StoreRef, client: usize, progress: Arc<Mutex<Progress>>) {
    loop {
        let index = (random_u64() % KEYS as u64) as usize;
        let version = {
            let mut progress = progress.lock().unwrap();
            progress.issued[client][index] += 1;
            progress.issued[client][index]
        };
        let set = Op::Set {
            key: key(client, index),
            value: value(version),
            when: When::Always,
            expiry: Expiry::Never,
            get: false,
        };
        let outcomes = store.run(vec![set]).await.expect("the store answers");
        assert!(
            matches!(
                outcomes.as_slice(),
                [Outcome::Applied(true)] | [Outcome::Done]
            ),
            "a SET is applied: {outcomes:?}"
        );
        let mut progress = progress.lock().unwrap();
        let acknowledged = &mut progress.acknowledged[client][index];
        *acknowledged = (*acknowledged).max(version);
    }
}

/// Asks for a rewrite of the log now and then.
async fn rewriter(context: Context, store: StoreRef, (every, spread): (u64, u64)) {
    loop {
        context
            .sleep(Duration::from_millis(every + random_u64() % spread))
            .await;
        let _ = store.run(vec![Op::Rewrite]).await;
    }
}

/// Checks the recovered store against `progress`: every key holds its last acknowledged
/// version or a later issued one.
async fn check(store: &StoreRef, progress: &Progress) {
    for client in 0..CLIENTS {
        for index in 0..KEYS {
            let outcomes = store
                .run(vec![Op::Get(key(client, index))])
                .await
                .expect("the store answers");
            let found = match outcomes.as_slice() {
                [Outcome::Value(None)] => 0,
                [Outcome::Value(Some(value))] => version_of(value),
                other => panic!("a GET answers a value: {other:?}"),
            };
            let acknowledged = progress.acknowledged[client][index];
            let issued = progress.issued[client][index];
            assert!(
                found >= acknowledged,
                "client {client} key {index}: version {acknowledged} was acknowledged, \
                 recovery has {found}"
            );
            assert!(
                found <= issued,
                "client {client} key {index}: recovery has version {found}, only {issued} \
                 were written"
            );
        }
    }
}

/// Starts of the store that found pages a lost machine wrote out of order in a commit that
/// never completed, which the store cannot tell from damage to synced pages (see `start`).
static REPAIRED: AtomicU64 = AtomicU64::new(0);

/// What the starts of one seed's runs met (a run is one thread, so a thread-local counts
/// them): the shapes each bug test's seed must still produce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Shapes {
    /// Starts that needed `--repair`.
    repairs: u64,
    /// Starts that cut at a synced partial page with pages after it.
    partial_cuts: u64,
    /// Starts that passed over a damaged rewrite for its predecessor.
    fallbacks: u64,
}

thread_local! {
    static SHAPES: std::cell::Cell<Shapes> = const {
        std::cell::Cell::new(Shapes { repairs: 0, partial_cuts: 0, fallbacks: 0 })
    };
}

fn count(change: impl FnOnce(&mut Shapes)) {
    SHAPES.with(|shapes| {
        let mut now = shapes.get();
        change(&mut now);
        shapes.set(now);
    });
}

/// Starts the store after a crash. It starts by itself, except when a lost machine wrote an
/// unfinished commit's pages out of order, losing one and keeping a later one: nothing in the
/// pages tells that from damage to pages an earlier sync made durable, so the store refuses
/// with the file and offset, as redis-server refuses an AOF damaged anywhere but at its end.
/// Then `--repair` ([`kv::repair`]) must keep every acknowledged write, which `check` sees.
async fn start(
    context: &Context,
    workload: Workload,
) -> (StoreRef, actors::supervisor::SupervisorRef) {
    let (store, supervisor, report) = match kv::start_store(context, options(workload)).await {
        Ok(started) => started,
        Err(error @ kv::StartError::Damaged { .. }) => {
            eprintln!("kv_crash: repairing, as the store says: {error}");
            REPAIRED.fetch_add(1, Ordering::Relaxed);
            count(|shapes| shapes.repairs += 1);
            kv::repair(context)
                .await
                .unwrap_or_else(|error| panic!("the damaged log is repaired: {error}"));
            kv::start_store(context, options(workload))
                .await
                .unwrap_or_else(|error| panic!("the store starts after a repair: {error}"))
        }
        Err(error) => panic!("the store starts after a crash: {error}"),
    };
    let partial_cuts = report
        .logs
        .iter()
        .filter(|log| log.out_of_order.is_some())
        .count() as u64;
    let fallbacks = report
        .notes
        .iter()
        .filter(|note| note.contains("a rewrite a crash interrupted during its first commit"))
        .count() as u64;
    count(|shapes| {
        shapes.partial_cuts += partial_cuts;
        shapes.fallbacks += fallbacks;
    });
    (store, supervisor)
}

/// One round: recover (checking what the last round acknowledged), write for a stretch of
/// virtual time drawn from the seed, crash.
async fn round(context: Context, before: Progress, workload: Workload) -> Progress {
    let (store, _supervisor) = start(&context, workload).await;
    check(&store, &before).await;
    let progress = Arc::new(Mutex::new(before));
    for id in 0..CLIENTS {
        let (store, progress) = (store.clone(), progress.clone());
        drop(
            context
                .child("client")
                .spawn(move |_| client(store, id, progress)),
        );
    }
    let rewrites = store.clone();
    drop(
        context
            .child("rewriter")
            .spawn(move |context| rewriter(context, rewrites, workload.rewrite_every)),
    );
    context
        .sleep(Duration::from_micros(
            random_u64() % workload.writing.as_micros() as u64,
        ))
        .await;
    progress.lock().unwrap().clone()
}

/// Runs seed `seed`'s rounds and final check; returns what its starts met.
fn crash_and_recover(seed: u64, workload: Workload) -> Shapes {
    let before = SHAPES.with(|shapes| shapes.replace(Shapes::default()));
    let mut progress = Progress::default();
    let mut checkpoint: Option<Checkpoint> = None;
    for _ in 0..workload.rounds {
        let runner = match checkpoint.take() {
            None => Runner::seeded(seed),
            Some(checkpoint) => Runner::recover(checkpoint),
        };
        let before = progress.clone();
        let (after, crashed) =
            runner.start_and_recover(move |context| round(context, before, workload));
        progress = after;
        checkpoint = Some(crashed);
    }
    let last = progress;
    Runner::recover(checkpoint.expect("crashed")).start(move |context| async move {
        let (store, _supervisor) = start(&context, workload).await;
        check(&store, &last).await;
    });
    SHAPES.with(|shapes| shapes.replace(before))
}

/// The durability property over a thousand seeds (see the module).
#[test]
fn no_acknowledged_write_is_lost_over_a_thousand_seeded_crashes() {
    runtime::deterministic::run_seeds(0..1000, |seed| {
        crash_and_recover(seed, SEARCH);
    });
    println!(
        "starts that needed --repair (a commit's pages written out of order): {}",
        REPAIRED.load(Ordering::Relaxed)
    );
}

/// Seed 384 found it: the last commit before the crash wrote pages 16 to 19 of the log, and
/// the crash kept page 19 (its partial end) and lost 16 to 18. The store refuses to start,
/// naming the file and the page; the repair keeps every acknowledged write.
#[test]
fn seed_384_a_commit_written_out_of_order_is_repaired_without_loss() {
    let shapes = crash_and_recover(384, FOUND);
    assert_eq!(shapes.repairs, 1, "one start needed the repair: {shapes:?}");
}

/// Seed 777 found it: a crash kept pages a commit wrote after the last sync's partial page,
/// but not that page's rewrite, which only the synced bytes of the page verified. The store
/// refused to start (only `--repair` got it going); it now cuts at the end of the synced
/// bytes, copying the rest aside and reporting it, and starts by itself with every
/// acknowledged write.
#[test]
fn seed_777_a_synced_partial_page_before_kept_pages_starts_without_repair() {
    let shapes = crash_and_recover(777, FOUND);
    assert!(shapes.partial_cuts > 0, "the shape happened: {shapes:?}");
    assert_eq!(shapes.repairs, 0, "no start needed the repair: {shapes:?}");
}

/// Seed 2708 found it: a crash in a rewrite's first commit kept the page holding `Current`
/// and lost one before it. The store refused to start, and `--repair`, which salvages the
/// newest generation, lost an acknowledged write that only its predecessor held. The
/// predecessor is now the store, since nothing was answered from a generation while its
/// predecessor exists.
#[test]
fn seed_2708_a_damaged_first_commit_falls_back_to_its_predecessor() {
    let shapes = crash_and_recover(2708, FOUND);
    assert!(shapes.fallbacks > 0, "the shape happened: {shapes:?}");
    assert_eq!(shapes.repairs, 0, "no start needed the repair: {shapes:?}");
}

/// Two runs of one seed crash at the same point with the same storage: their checkpoints'
/// digests are equal.
#[test]
fn a_seed_replays_its_crash() {
    let digest = |seed| {
        Runner::seeded(seed)
            .start_and_recover(|context| round(context, Progress::default(), SEARCH))
            .1
            .digest()
    };
    for seed in 0..20 {
        assert_eq!(digest(seed), digest(seed), "seed {seed}");
    }
}
