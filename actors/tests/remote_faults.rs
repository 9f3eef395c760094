//! A fault suite for remote actors: a real `nats-server` per test, serving nodes as separate
//! processes (this test binary re-executed as [`node_host`]), and faults injected from
//! outside. Each test asserts the behaviour the remote layer promises, so a fault it
//! detects fails it:
//! - the server restarted, or paused past the asks' deadline; the serving node paused past
//!   the silence window (within the deadline, and past it): no failed ask has its handler
//!   start afterwards (the serving node prints `ran <id> <unix micros>` as each handler
//!   starts; the asker records when each failed ask resolved, on the same machine's clock),
//!   no handler runs twice, every ask resolves, and asks succeed again after the fault;
//! - a killed node: seen down within a bound, its pending asks fail `NodeDown`, a new ask to
//!   it fails `NodeDown` at once, and a node restarted under its name at once joins;
//! - a subscriber that never reads everything, or a reply subject nobody reads: no node is
//!   seen down, every ask is answered;
//! - forged and garbage announcements: no live node is seen down, the peer list stays
//!   bounded, a monitor of nothing still resolves `NotFound`, memory does not grow.
//!
//! The tests run one at a time (a lock): each injects timing faults, and two at once on a
//! small machine would disturb each other's heartbeats. Nothing waits on a timer in place of
//! an event: a fault lasts a set time (that is the fault), and everything else waits for
//! what it can observe (a printed line, a peer list, a reply) within a generous bound.

use actors::Error;
use actors::ExitReason;
use actors::prelude::*;
use actors::remote::nats::server::Server;
use actors::remote::{Node, NodeOptions};
use futures::future::{BoxFuture, Either, select};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::pin::pin;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------------
// Settings shared by the parent and the node processes.
// ---------------------------------------------------------------------------------------

/// Quick heartbeats, so that a silent node is down within about half a second.
const HEARTBEAT: Duration = Duration::from_millis(100);
/// Heartbeats a peer may miss before it is down.
const MISSES: u32 = 5;
/// The subject prefix of every node here.
const PREFIX: &str = "faults";
/// The name the ledger is exposed under.
const LEDGER: &str = "ledger";
/// How long a whole test may run.
const TEST_TIMEOUT: Duration = Duration::from_secs(90);
/// A generous bound for anything observable to happen (a line, a peer, a reply).
const BOUND: Duration = Duration::from_secs(15);

/// How long a peer may stay silent before it is down: its misses, and half an interval.
fn silence() -> Duration {
    HEARTBEAT * MISSES + HEARTBEAT / 2
}

const ENV_URL: &str = "REMOTE_FAULTS_NODE_URL";
const ENV_NAME: &str = "REMOTE_FAULTS_NODE_NAME";
const ENV_HEARTBEAT_MS: &str = "REMOTE_FAULTS_NODE_HEARTBEAT_MS";
const ENV_MISSES: &str = "REMOTE_FAULTS_NODE_MISSES";
const ENV_PREFIX: &str = "REMOTE_FAULTS_NODE_PREFIX";
const ENV_EXPOSE: &str = "REMOTE_FAULTS_NODE_EXPOSE";
const ENV_STORAGE: &str = "REMOTE_FAULTS_NODE_STORAGE";
/// Peers whose name starts with this are printed (`up <name>`) once first seen.
const ENV_WATCH: &str = "REMOTE_FAULTS_NODE_WATCH";
/// The membership secret, when the node authenticates membership.
const ENV_SECRET: &str = "REMOTE_FAULTS_NODE_SECRET";

fn unix_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_micros()
}

/// The options of every node here: quick heartbeats and reconnects.
fn options(url: &str, name: &str, heartbeat: Duration, misses: u32, prefix: &str) -> NodeOptions {
    NodeOptions::new([url], name)
        .expect("valid node options")
        .with_heartbeat(heartbeat, misses)
        .with_subject_prefix(prefix)
        .with_nats(|nats| {
            nats.with_reconnect_delay(Duration::from_millis(5), Duration::from_millis(50))
        })
}

/// A node of the test process, joined with the suite's settings.
async fn join(context: &runtime::Context, server: &Server, name: &str) -> Node {
    Node::join_with(
        context,
        options(&server.url(), name, HEARTBEAT, MISSES, PREFIX),
    )
    .await
    .unwrap_or_else(|error| panic!("node {name} joins: {error}"))
}

// ---------------------------------------------------------------------------------------
// The served actor.
// ---------------------------------------------------------------------------------------

/// One line to stdout, flushed at once (the parent reads it as it comes).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Records the asks it handles. In a node process it prints `ran <id> <unix micros>` as
/// each handler starts.
#[actor(mailbox = 4096)]
struct Ledger {
    print: bool,
    /// `fill`s handled.
    filled: Arc<AtomicU64>,
    applied: Vec<u64>,
}

impl Ledger {
    fn new(print: bool) -> Self {
        Ledger {
            print,
            filled: Arc::default(),
            applied: Vec::new(),
        }
    }

    fn started(&mut self, id: u64) {
        let at = unix_micros();
        if self.print {
            say(&format!("ran {id} {at}"));
        }
    }
}

#[actor(remote)]
impl Ledger {
    /// Records `id` and returns it.
    fn apply(&mut self, id: u64) -> u64 {
        self.started(id);
        self.applied.push(id);
        id
    }

    /// Holds the actor for `millis`, then returns `id`.
    async fn slow(&mut self, ctx: &mut actors::Context<Self>, id: u64, millis: u64) -> u64 {
        self.started(id);
        ctx.runtime().sleep(Duration::from_millis(millis)).await;
        id
    }

    /// Takes a large argument; returns `id`.
    fn note(&mut self, id: u64, text: String) -> u64 {
        self.started(id);
        drop(text);
        id
    }

    /// A reply of `len` bytes.
    fn fill(&mut self, id: u64, len: u32) -> String {
        self.started(id);
        self.filled.fetch_add(1, Ordering::SeqCst);
        "x".repeat(len as usize)
    }
}

// ---------------------------------------------------------------------------------------
// Nodes as separate processes.
// ---------------------------------------------------------------------------------------

/// Not a test: the body of a node process. The suite re-executes its own binary with
/// `--exact node_host` and the `REMOTE_FAULTS_NODE_*` variables; without them (a plain
/// `cargo test`) this returns at once.
#[test]
fn node_host() {
    let Ok(url) = std::env::var(ENV_URL) else {
        return;
    };
    let setting = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let name = setting(ENV_NAME);
    let heartbeat = Duration::from_millis(setting(ENV_HEARTBEAT_MS).parse().expect("millis"));
    let misses: u32 = setting(ENV_MISSES).parse().expect("misses");
    let prefix = setting(ENV_PREFIX);
    let expose = setting(ENV_EXPOSE);
    let storage = setting(ENV_STORAGE);
    let watch = std::env::var(ENV_WATCH).ok();
    let secret = std::env::var(ENV_SECRET).ok();
    // The parent holds our stdin: when it goes away (however it ended), so do we.
    std::thread::spawn(|| {
        let mut stdin = std::io::stdin().lock();
        let mut sink = [0u8; 64];
        while matches!(stdin.read(&mut sink), Ok(read) if read > 0) {}
        std::process::exit(0);
    });
    // Ends the line the test harness started (`test node_host ... `).
    say("");
    runtime::Runner::new(runtime::Config::new().with_storage_directory(storage)).start(
        move |context| async move {
            let mut options = options(&url, &name, heartbeat, misses, &prefix);
            if let Some(secret) = secret {
                options = options.with_secret(secret);
            }
            let node = match Node::join_with(&context, options).await {
                Ok(node) => node,
                Err(error) => {
                    say(&format!("join-failed {error:?}"));
                    std::process::exit(3);
                }
            };
            let ledger = Ledger::new(true).spawn(&context);
            node.expose(&expose, &ledger)
                .await
                .expect("the ledger is exposed");
            say("ready");
            let Some(watch) = watch else {
                return futures::future::pending::<()>().await;
            };
            let mut seen = HashSet::new();
            loop {
                for peer in node.peers() {
                    if peer.starts_with(&watch) && seen.insert(peer.clone()) {
                        say(&format!("up {peer}"));
                    }
                }
                context.sleep(Duration::from_millis(20)).await;
            }
        },
    );
}

/// What a node process printed.
#[derive(Default)]
struct Printed {
    /// `ran <id> <unix micros>` lines.
    ran: Vec<(u64, u128)>,
    /// Every other line.
    lines: Vec<String>,
    /// Its stdout closed (it ended).
    closed: bool,
}

/// A node process, killed (SIGKILL) when dropped.
struct NodeProcess {
    child: Child,
    _stdin: ChildStdin,
    printed: Arc<(Mutex<Printed>, Condvar)>,
    storage: PathBuf,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: signalling a process this test started (and has not reaped).
    let done = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(done, 0, "kill({pid}, {signal})");
}

impl NodeProcess {
    /// Starts a node process that joins through `url` as `name` with the suite's settings
    /// and exposes a ledger as [`LEDGER`]; returns once it printed `ready`, or what it said
    /// instead (it could not join). Blocks: call it through [`blocking`] from a runtime.
    fn start(
        url: &str,
        name: &str,
        watch: Option<&str>,
        secret: Option<&str>,
    ) -> Result<NodeProcess, String> {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let storage = std::env::temp_dir().join(format!(
            "remote-faults-{}-{}-{name}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::SeqCst)
        ));
        let mut command = Command::new(std::env::current_exe().expect("the test binary"));
        command
            .args(["--exact", "node_host", "--nocapture", "--test-threads", "1"])
            .env(ENV_URL, url)
            .env(ENV_NAME, name)
            .env(ENV_HEARTBEAT_MS, HEARTBEAT.as_millis().to_string())
            .env(ENV_MISSES, MISSES.to_string())
            .env(ENV_PREFIX, PREFIX)
            .env(ENV_EXPOSE, LEDGER)
            .env(ENV_STORAGE, &storage)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(watch) = watch {
            command.env(ENV_WATCH, watch);
        }
        if let Some(secret) = secret {
            command.env(ENV_SECRET, secret);
        }
        let mut child = command.spawn().expect("the node process starts");
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let printed: Arc<(Mutex<Printed>, Condvar)> = Arc::default();
        {
            let printed = printed.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let mut seen = lock(&printed.0);
                    let ran = line.strip_prefix("ran ").and_then(|rest| {
                        let (id, at) = rest.split_once(' ')?;
                        Some((id.parse().ok()?, at.parse().ok()?))
                    });
                    match ran {
                        Some(ran) => seen.ran.push(ran),
                        None => seen.lines.push(line),
                    }
                    printed.1.notify_all();
                }
                lock(&printed.0).closed = true;
                printed.1.notify_all();
            });
        }
        let node = NodeProcess {
            child,
            _stdin: stdin,
            printed,
            storage,
        };
        let started = Instant::now();
        let mut seen = lock(&node.printed.0);
        loop {
            if seen.lines.iter().any(|line| line == "ready") {
                drop(seen);
                return Ok(node);
            }
            if let Some(failed) = seen.lines.iter().find(|l| l.starts_with("join-failed")) {
                return Err(failed.clone());
            }
            if seen.closed {
                return Err(format!("it ended before `ready`: {:?}", seen.lines));
            }
            let left = BOUND.checked_sub(started.elapsed()).unwrap_or_else(|| {
                panic!("node {name} not ready within {BOUND:?}: {:?}", seen.lines)
            });
            seen = node.printed.1.wait_timeout(seen, left).unwrap().0;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGSTOP: the process stops, its sockets stay open.
    fn pause(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    /// SIGCONT.
    fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// SIGKILL, and waits for it to end.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it still runs.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The handlers it started: id and unix micros.
    fn ran(&self) -> Vec<(u64, u128)> {
        lock(&self.printed.0).ran.clone()
    }

    /// Whether it printed `line`.
    fn printed(&self, line: &str) -> bool {
        lock(&self.printed.0).lines.iter().any(|l| l == line)
    }

    /// Its resident set in KiB (`VmRSS` of `/proc/<pid>/status`).
    fn rss_kib(&self) -> u64 {
        rss_kib(&format!("/proc/{}/status", self.pid()))
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.storage);
    }
}

fn rss_kib(status: &str) -> u64 {
    let text = std::fs::read_to_string(status).unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

/// Runs `work` on a thread of its own (it blocks), so the runtime's workers go on.
async fn blocking<T: Send + 'static>(
    context: &runtime::Context,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    context
        .clone()
        .shared(true)
        .spawn(move |_| async move { work() })
        .await
        .expect("the blocking work ends")
}

async fn start_node(
    context: &runtime::Context,
    url: String,
    name: &str,
    watch: Option<&str>,
) -> Result<NodeProcess, String> {
    start_node_with(context, url, name, watch, None).await
}

/// [`start_node`], authenticating membership with `secret` if given.
async fn start_node_with(
    context: &runtime::Context,
    url: String,
    name: &str,
    watch: Option<&str>,
    secret: Option<&str>,
) -> Result<NodeProcess, String> {
    let name = name.to_string();
    let watch = watch.map(str::to_string);
    let secret = secret.map(str::to_string);
    blocking(context, move || {
        NodeProcess::start(&url, &name, watch.as_deref(), secret.as_deref())
    })
    .await
}

/// SIGSTOP / SIGCONT of the NATS server.
fn pause_server(server: &Server) {
    signal(server.pid(), libc::SIGSTOP);
}

fn resume_server(server: &Server) {
    signal(server.pid(), libc::SIGCONT);
}

// ---------------------------------------------------------------------------------------
// Waiting on what can be observed.
// ---------------------------------------------------------------------------------------

/// Waits until `done`, looking every 10 ms, for at most `bound`: how long it took, or
/// `None`.
async fn within(
    context: &runtime::Context,
    bound: Duration,
    mut done: impl FnMut() -> bool,
) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if done() {
            return Some(started.elapsed());
        }
        if started.elapsed() >= bound {
            return None;
        }
        context.sleep(Duration::from_millis(10)).await;
    }
}

/// [`within`], failing the test with `what` when the bound passes.
async fn wait_until(
    context: &runtime::Context,
    what: &str,
    bound: Duration,
    done: impl FnMut() -> bool,
) -> Duration {
    within(context, bound, done)
        .await
        .unwrap_or_else(|| panic!("{what}: not within {bound:?}"))
}

/// Runs a fault test: one at a time, with its own `nats-server` (skipped as the other
/// remote tests skip when it is not installed), on a runtime of its own, for at most
/// [`TEST_TIMEOUT`].
fn fault_test<F, Fut>(body: F)
where
    F: FnOnce(runtime::Context, Server) -> Fut,
    Fut: Future<Output = ()>,
{
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = lock(&SERIAL);
    let Some(server) = Server::builder().start_or_skip() else {
        return;
    };
    let storage = std::env::temp_dir().join(format!(
        "remote-faults-{}-{}",
        std::process::id(),
        unix_micros()
    ));
    let config = runtime::Config::new().with_storage_directory(&storage);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime::Runner::new(config).start(move |context| async move {
            let deadline = context.sleep(TEST_TIMEOUT);
            match select(pin!(body(context.clone(), server)), pin!(deadline)).await {
                Either::Left(((), _)) => {}
                Either::Right(_) => panic!("the test ran past {TEST_TIMEOUT:?}"),
            }
        })
    }));
    let _ = std::fs::remove_dir_all(&storage);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

// ---------------------------------------------------------------------------------------
// Asks and what became of them.
// ---------------------------------------------------------------------------------------

/// One ask and how it ended.
#[derive(Clone, Debug)]
struct Outcome {
    id: u64,
    via: &'static str,
    sent: u128,
    resolved: u128,
    result: Result<u64, Error>,
}

/// Makes an ask of an id with a deadline.
type AskFn = Arc<dyn Fn(u64, Duration) -> BoxFuture<'static, Result<u64, Error>> + Send + Sync>;

/// `apply(id)` through `remote`.
fn apply_through(remote: &LedgerRemoteRef) -> AskFn {
    let remote = remote.clone();
    Arc::new(move |id, deadline| Box::pin(remote.apply(id).timeout(deadline)))
}

/// Asks once and records the outcome.
async fn ask_once(via: &'static str, ask: &AskFn, id: u64, deadline: Duration) -> Outcome {
    let sent = unix_micros();
    let result = ask(id, deadline).await;
    Outcome {
        id,
        via,
        sent,
        resolved: unix_micros(),
        result,
    }
}

/// How asks are fired.
#[derive(Clone, Copy)]
enum Pace {
    /// One new ask every interval, whatever the others do.
    Every(Duration),
    /// This many loops, each asking again as soon as its last ask resolved.
    Loops(usize),
}

/// Asks fired until stopped; each outcome recorded as it resolves.
struct Traffic {
    shared: Arc<Firing>,
    task: runtime::Handle<()>,
}

/// What the tasks of a [`Traffic`] share.
struct Firing {
    stop: AtomicBool,
    fired: AtomicU64,
    ids: Arc<AtomicU64>,
    targets: Vec<(&'static str, AskFn)>,
    deadline: Duration,
    outcomes: Mutex<Vec<Outcome>>,
}

impl Firing {
    /// One ask through the `turn`th target (round robin), recorded when it resolves.
    async fn ask(&self, turn: usize) {
        let (via, ask) = &self.targets[turn % self.targets.len()];
        let id = self.ids.fetch_add(1, Ordering::SeqCst);
        self.fired.fetch_add(1, Ordering::SeqCst);
        let outcome = ask_once(via, ask, id, self.deadline).await;
        lock(&self.outcomes).push(outcome);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

impl Traffic {
    fn start(
        context: &runtime::Context,
        ids: &Arc<AtomicU64>,
        targets: Vec<(&'static str, AskFn)>,
        pace: Pace,
        deadline: Duration,
    ) -> Traffic {
        let shared = Arc::new(Firing {
            stop: AtomicBool::new(false),
            fired: AtomicU64::new(0),
            ids: ids.clone(),
            targets,
            deadline,
            outcomes: Mutex::default(),
        });
        let task = {
            let shared = shared.clone();
            context.clone().spawn(move |context| async move {
                let mut handles = Vec::new();
                match pace {
                    Pace::Every(interval) => {
                        let mut turn = 0;
                        while !shared.stopped() {
                            let shared = shared.clone();
                            handles.push(
                                context
                                    .clone()
                                    .spawn(move |_| async move { shared.ask(turn).await }),
                            );
                            turn += 1;
                            context.sleep(interval).await;
                        }
                    }
                    Pace::Loops(loops) => {
                        for lane in 0..loops {
                            let shared = shared.clone();
                            handles.push(context.clone().spawn(move |_| async move {
                                let mut turn = lane;
                                while !shared.stopped() {
                                    shared.ask(turn).await;
                                    turn += loops;
                                }
                            }));
                        }
                    }
                }
                // Every ask has a deadline: each resolves by then (checked in `finish`).
                for handle in handles {
                    let _ = context.timeout(deadline + BOUND, handle).await;
                }
            })
        };
        Traffic { shared, task }
    }

    fn outcomes(&self) -> Vec<Outcome> {
        lock(&self.shared.outcomes).clone()
    }

    fn successes(&self) -> usize {
        lock(&self.shared.outcomes)
            .iter()
            .filter(|o| o.result.is_ok())
            .count()
    }

    /// Stops firing and waits for every ask fired to resolve; fails the test if one never
    /// does.
    async fn finish(self) -> Vec<Outcome> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let outcomes = lock(&self.shared.outcomes).clone();
        let fired = self.shared.fired.load(Ordering::SeqCst);
        assert_eq!(
            outcomes.len() as u64,
            fired,
            "every ask resolves: {} of {fired} did",
            outcomes.len(),
        );
        outcomes
    }
}

/// When asks succeed again after `since` (unix micros): the latest, over the targets, of
/// the first success of an ask sent after it.
fn recovered_at(outcomes: &[Outcome], vias: &[&str], since: u128) -> Option<u128> {
    vias.iter()
        .map(|via| {
            outcomes
                .iter()
                .filter(|o| o.via == *via && o.sent >= since && o.result.is_ok())
                .map(|o| o.resolved)
                .min()
        })
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .max()
}

/// Failures counted by kind, for messages.
fn tally(outcomes: &[Outcome]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for outcome in outcomes {
        let kind = match &outcome.result {
            Ok(_) => "ok".to_string(),
            Err(Error::Remote(why)) => format!("Remote({})", &why[..why.len().min(40)]),
            Err(Error::NodeDown { .. }) => "NodeDown".into(),
            Err(Error::NotExposed { .. }) => "NotExposed".into(),
            Err(other) => format!("{other:?}"),
        };
        *counts.entry(kind).or_insert(0) += 1;
    }
    counts
}

/// What went wrong between the asks' outcomes and the handlers that ran: a failed ask
/// whose handler started after it failed (equal clocks allowed), a handler that ran twice,
/// a success with another value.
fn ledger_problems(outcomes: &[Outcome], ran: &[(u64, u128)]) -> Vec<String> {
    let mut problems = Vec::new();
    let by_id: HashMap<u64, &Outcome> = outcomes.iter().map(|o| (o.id, o)).collect();
    let mut runs: HashMap<u64, usize> = HashMap::new();
    for (id, started) in ran {
        *runs.entry(*id).or_insert(0) += 1;
        let Some(outcome) = by_id.get(id) else {
            continue;
        };
        if let Err(error) = &outcome.result
            && *started > outcome.resolved
        {
            problems.push(format!(
                "ask {id} ({}) failed with {error:?} {} ms after it was sent, and its handler \
                 started {:.1} ms after it failed",
                outcome.via,
                (outcome.resolved - outcome.sent) / 1000,
                (*started - outcome.resolved) as f64 / 1000.0
            ));
        }
    }
    for (id, count) in runs {
        if count > 1 {
            problems.push(format!("the handler of ask {id} ran {count} times"));
        }
    }
    for outcome in outcomes {
        if let Ok(value) = outcome.result
            && value != outcome.id
        {
            problems.push(format!("ask {} answered {value}", outcome.id));
        }
    }
    problems
}

/// Asks once more through each target until one succeeds (so that everything sent before
/// has reached the actor, in order per target), then waits until the node printed those
/// handlers: after this, every handler of an earlier ask that was going to run has.
async fn settle(
    context: &runtime::Context,
    node: &NodeProcess,
    ids: &Arc<AtomicU64>,
    targets: &[(&'static str, AskFn)],
    outcomes: &mut Vec<Outcome>,
) {
    for (via, ask) in targets {
        let started = Instant::now();
        let id = loop {
            let id = ids.fetch_add(1, Ordering::SeqCst);
            let outcome = ask_once(via, ask, id, Duration::from_secs(2)).await;
            let ok = outcome.result.is_ok();
            outcomes.push(outcome);
            if ok {
                break id;
            }
            assert!(
                started.elapsed() < BOUND,
                "no ask through {via} succeeds within {BOUND:?} after the fault: {:?}",
                tally(outcomes)
            );
            context.sleep(Duration::from_millis(50)).await;
        };
        wait_until(
            context,
            "the settling ask's handler is printed",
            BOUND,
            || node.ran().iter().any(|(ran, _)| *ran == id),
        )
        .await;
    }
}

/// A task watching a node's peer list every 10 ms: when `peer` is missing, and the most
/// peers seen at once.
struct PeerWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Watched>>,
    task: Option<runtime::Handle<()>>,
}

#[derive(Default)]
struct Watched {
    /// (unix micros, whether the peer was listed), at each change (the first sample too).
    changes: Vec<(u128, bool)>,
    most: usize,
}

impl PeerWatch {
    fn start(context: &runtime::Context, node: &Node, peer: &str) -> PeerWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<Watched>> = Arc::default();
        let task = {
            let (stop, seen, node, peer) =
                (stop.clone(), seen.clone(), node.clone(), peer.to_string());
            context.clone().spawn(move |context| async move {
                while !stop.load(Ordering::SeqCst) {
                    let peers = node.peers();
                    let listed = peers.contains(&peer);
                    {
                        let mut seen = lock(&seen);
                        seen.most = seen.most.max(peers.len());
                        if seen.changes.last().is_none_or(|(_, was)| *was != listed) {
                            seen.changes.push((unix_micros(), listed));
                        }
                    }
                    context.sleep(Duration::from_millis(10)).await;
                }
            })
        };
        PeerWatch {
            stop,
            seen,
            task: Some(task),
        }
    }

    /// The times (unix micros) it was seen missing.
    fn missing_since(&self) -> Vec<u128> {
        lock(&self.seen)
            .changes
            .iter()
            .filter(|(_, listed)| !listed)
            .map(|(at, _)| *at)
            .collect()
    }

    fn changes(&self) -> Vec<(u128, bool)> {
        lock(&self.seen).changes.clone()
    }

    fn most(&self) -> usize {
        lock(&self.seen).most
    }

    async fn finish(mut self) -> Self {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self
    }
}

// ---------------------------------------------------------------------------------------
// A raw NATS client, for what a node would never do.
// ---------------------------------------------------------------------------------------

/// A message a raw client read.
struct RawMessage {
    reply: Option<String>,
    payload: Vec<u8>,
}

/// A NATS client over a plain `TcpStream`, speaking the text protocol: it can subscribe
/// and then never read, publish with any reply subject, and publish anything at all.
struct RawClient {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl RawClient {
    fn connect(server: &Server) -> RawClient {
        Self::connect_port(server.port())
    }

    fn connect_port(port: u16) -> RawClient {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connects");
        stream.set_read_timeout(Some(BOUND)).unwrap();
        let mut client = RawClient {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        };
        let info = client.line();
        assert!(info.starts_with("INFO "), "{info}");
        client.write(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
        client.flush();
        client
    }

    /// A receive buffer of a few KiB, so the server's writes to an unread client back up
    /// soon.
    fn shrink_receive_buffer(&self) {
        use std::os::fd::AsRawFd;
        let size: libc::c_int = 4096;
        // SAFETY: a valid socket and a c_int option of its size.
        let done = unsafe {
            libc::setsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(done, 0, "setsockopt(SO_RCVBUF)");
    }

    fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("the raw client writes");
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        let read = self
            .reader
            .read_line(&mut line)
            .expect("the raw client reads");
        assert!(read > 0, "the server closed the raw client");
        line.trim_end().to_string()
    }

    fn subscribe(&mut self, subject: &str, sid: u32) {
        self.write(format!("SUB {subject} {sid}\r\n").as_bytes());
    }

    /// `PUB` of `payload` to `subject`, with `reply` as its reply subject.
    fn publish_frame(out: &mut Vec<u8>, subject: &str, reply: Option<&str>, payload: &[u8]) {
        match reply {
            Some(reply) => out.extend_from_slice(
                format!("PUB {subject} {reply} {}\r\n", payload.len()).as_bytes(),
            ),
            None => {
                out.extend_from_slice(format!("PUB {subject} {}\r\n", payload.len()).as_bytes())
            }
        }
        out.extend_from_slice(payload);
        out.extend_from_slice(b"\r\n");
    }

    /// PING, and reads until its PONG: the server has processed everything sent before.
    /// Messages read meanwhile are dropped.
    fn flush(&mut self) {
        self.write(b"PING\r\n");
        loop {
            let line = self.line();
            if line == "PONG" {
                return;
            }
            self.other(&line);
        }
    }

    /// A line that is not what is waited for: answers a PING, skips a message's payload.
    fn other(&mut self, line: &str) {
        if line == "PING" {
            self.write(b"PONG\r\n");
        } else if line.starts_with("MSG ") {
            let _ = self.payload(line);
        } else {
            assert!(!line.starts_with("-ERR"), "the server refused: {line}");
        }
    }

    fn payload(&mut self, header: &str) -> Vec<u8> {
        let size: usize = header
            .rsplit(' ')
            .next()
            .and_then(|size| size.parse().ok())
            .unwrap_or_else(|| panic!("a MSG line: {header}"));
        let mut payload = vec![0; size + 2];
        self.reader.read_exact(&mut payload).expect("the payload");
        payload.truncate(size);
        payload
    }

    /// The next message (answering PINGs on the way).
    fn next_message(&mut self) -> RawMessage {
        loop {
            let line = self.line();
            if line.starts_with("MSG ") {
                // MSG <subject> <sid> [reply] <size>
                let fields: Vec<&str> = line.split(' ').collect();
                let reply = (fields.len() == 5).then(|| fields[3].to_string());
                let payload = self.payload(&line);
                return RawMessage { reply, payload };
            }
            self.other(&line);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The nodes' announcements. What a forger claims (`Announcement`), and how
// `actors/src/remote/codec.rs` puts it on the wire (`Wire`: postcard, fields in order, an
// enum's variant by its index). Copied, not imported: the codec is private.
// ---------------------------------------------------------------------------------------

#[derive(Serialize)]
struct Wire {
    node: String,
    nonce: u64,
    incarnation: u64,
    since_millis: u64,
    seq: u64,
    sent_millis: u64,
    body: WireBody,
}

#[derive(Serialize)]
enum WireBody {
    #[allow(dead_code)]
    Beat,
    Heartbeat {
        interval_ms: u32,
        misses: u32,
        exposed: Vec<String>,
    },
    Leaving,
    Exited {
        name: String,
        exit: Exit,
    },
}

/// `announcement` in the codec's format, as sent now by a forger who claims its node has been
/// present since the epoch (so that a node heeding unauthenticated claims to its own name
/// would leave), with a huge sequence number.
fn encode(announcement: &Announcement) -> Vec<u8> {
    let (node, incarnation, body) = match announcement.clone() {
        Announcement::Heartbeat {
            node,
            incarnation,
            interval_ms,
            misses,
            exposed,
        } => (
            node,
            incarnation,
            WireBody::Heartbeat {
                interval_ms,
                misses,
                exposed,
            },
        ),
        Announcement::Leaving { node, incarnation } => (node, incarnation, WireBody::Leaving),
        Announcement::Exited {
            node,
            incarnation,
            name,
            exit,
        } => (node, incarnation, WireBody::Exited { name, exit }),
    };
    let wire = Wire {
        node,
        nonce: 0x5eed,
        incarnation,
        since_millis: 0,
        seq: u64::MAX,
        sent_millis: (unix_micros() / 1000) as u64,
        body,
    };
    postcard::to_allocvec(&wire).expect("encodes")
}

#[derive(Clone, Debug, Serialize)]
enum Announcement {
    Heartbeat {
        node: String,
        incarnation: u64,
        interval_ms: u32,
        misses: u32,
        exposed: Vec<String>,
    },
    Leaving {
        node: String,
        incarnation: u64,
    },
    #[allow(dead_code)]
    Exited {
        node: String,
        incarnation: u64,
        name: String,
        exit: Exit,
    },
}

#[derive(Clone, Debug, Serialize)]
#[allow(dead_code)]
enum Exit {
    Normal,
    Stopped,
    Panicked(String),
    Shutdown,
    Other(String),
}

/// Where a forger sends what claims to come from `node`: the announcement subject of today
/// and a per-node one (`<prefix>.announce.<node>`), where heartbeats may move.
fn announce_subjects(node: &str) -> [String; 3] {
    [
        format!("{PREFIX}.announce"),
        format!("{PREFIX}.announce.{node}"),
        format!("{PREFIX}.alive.{node}"),
    ]
}

fn forge(out: &mut Vec<u8>, claimed: &str, announcement: &Announcement) {
    let bytes = encode(announcement);
    for subject in announce_subjects(claimed) {
        RawClient::publish_frame(out, &subject, None, &bytes);
    }
}

/// A few kinds of bytes that are not announcements.
fn garbage(seed: u64) -> Vec<Vec<u8>> {
    let mut state = seed | 1;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut all = vec![
        Vec::new(),
        vec![0],
        vec![0xff; 16],
        // A heartbeat whose node name claims 2^62 bytes.
        vec![0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40],
    ];
    // A heartbeat cut short, and one claiming 2^62 exposed names.
    let heartbeat = encode(&Announcement::Heartbeat {
        node: "cut".into(),
        incarnation: 1,
        interval_ms: 100,
        misses: 3,
        exposed: vec!["a".into()],
    });
    all.push(heartbeat[..heartbeat.len() - 3].to_vec());
    let mut huge = heartbeat[..heartbeat.len() - 3].to_vec();
    huge.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
    all.push(huge);
    for _ in 0..40 {
        let len = (random() % 600) as usize;
        all.push((0..len).map(|_| random() as u8).collect());
    }
    all
}

// ---------------------------------------------------------------------------------------
// a, b, c: faults of the server or the serving node; no failed ask runs afterwards.
// ---------------------------------------------------------------------------------------

/// A serving node process and an asking node of this process that sees it up.
struct Cluster {
    serving: NodeProcess,
    asking: Node,
    targets: Vec<(&'static str, AskFn)>,
    ids: Arc<AtomicU64>,
}

/// A cluster whose asking node reconnects after `reconnect` (the serving node within 50
/// ms), or as quickly as the serving node.
async fn cluster(
    context: &runtime::Context,
    server: &Server,
    reconnect: Option<Duration>,
) -> Cluster {
    let serving = start_node(context, server.url(), "serving", None)
        .await
        .expect("the serving node joins");
    let mut asking = options(&server.url(), "asking", HEARTBEAT, MISSES, PREFIX);
    if let Some(delay) = reconnect {
        asking = asking.with_nats(|nats| nats.with_reconnect_delay(delay, delay));
    }
    let asking = Node::join_with(context, asking)
        .await
        .expect("the asking node joins");
    asking
        .wait_for_peer("serving", BOUND)
        .await
        .expect("the asking node sees the serving node");
    let by_node: LedgerRemoteRef = asking.lookup_on("serving", LEDGER);
    let by_name: LedgerRemoteRef = asking.lookup(LEDGER);
    let ids = Arc::new(AtomicU64::new(1));
    assert_eq!(by_node.apply(0).await, Ok(0));
    Cluster {
        serving,
        asking,
        targets: vec![
            ("by node", apply_through(&by_node)),
            ("by name", apply_through(&by_name)),
        ],
        ids,
    }
}

/// Asks every 10 ms while `fault` runs (once 20 have succeeded), until asks have succeeded
/// again through every target and 30 more have resolved; then settles. Returns what `fault`
/// returned (it returns when the fault is over) and the problems: a failed ask whose
/// handler started after it failed, a handler that ran twice, an ask sent once the cluster
/// answered again that failed.
async fn asks_across<T>(
    context: &runtime::Context,
    cluster: &Cluster,
    deadline: Duration,
    fault: impl Future<Output = T>,
) -> (T, Vec<String>) {
    let traffic = Traffic::start(
        context,
        &cluster.ids,
        cluster.targets.clone(),
        Pace::Every(Duration::from_millis(10)),
        deadline,
    );
    wait_until(context, "20 asks succeed before the fault", BOUND, || {
        traffic.successes() >= 20
    })
    .await;
    let faulted = fault.await;
    let over = unix_micros();
    let vias: Vec<&str> = cluster.targets.iter().map(|(via, _)| *via).collect();
    let recovered = within(context, BOUND + deadline, || {
        let outcomes = traffic.outcomes();
        recovered_at(&outcomes, &vias, over)
            .is_some_and(|at| outcomes.iter().filter(|o| o.sent > at).count() >= 30)
    })
    .await;
    let mut outcomes = traffic.finish().await;
    if recovered.is_none() {
        let mut problems = vec![format!("the asks: {:?}", tally(&outcomes))];
        for via in &vias {
            let after: Vec<_> = outcomes
                .iter()
                .filter(|o| o.via == *via && o.sent >= over)
                .cloned()
                .collect();
            problems.push(format!(
                "asks through {via} did not succeed again within {:?} after the fault: \
                 those sent after it: {:?}",
                BOUND + deadline,
                tally(&after)
            ));
        }
        problems.push(format!(
            "the asking node's peers now: {:?}",
            cluster.asking.peers()
        ));
        problems.extend(ledger_problems(&outcomes, &cluster.serving.ran()));
        return (faulted, problems);
    }
    settle(
        context,
        &cluster.serving,
        &cluster.ids,
        &cluster.targets,
        &mut outcomes,
    )
    .await;
    let mut problems = ledger_problems(&outcomes, &cluster.serving.ran());
    let at = recovered_at(&outcomes, &vias, over).expect("recovered");
    for outcome in outcomes.iter().filter(|o| o.sent > at) {
        if let Err(error) = &outcome.result {
            problems.push(format!(
                "ask {} ({}), sent once the cluster answered again, failed: {error:?}",
                outcome.id, outcome.via
            ));
        }
    }
    if !problems.is_empty() {
        problems.insert(0, format!("the asks: {:?}", tally(&outcomes)));
    }
    (faulted, problems)
}

/// Fails the test listing the problems (the first 12, and how many more).
fn assert_no_problems(problems: &[String]) {
    const SHOWN: usize = 12;
    let mut shown = problems[..problems.len().min(SHOWN)].join("\n");
    if problems.len() > SHOWN {
        shown.push_str(&format!("\n... and {} more", problems.len() - SHOWN));
    }
    assert!(problems.is_empty(), "{} problems:\n{shown}", problems.len());
}

#[test]
fn server_restart_mid_traffic_never_runs_a_failed_ask_and_later_asks_succeed() {
    fault_test(|context, server| async move {
        // The asking node reconnects last: what it queued while disconnected then finds
        // the serving node subscribed again.
        let cluster = cluster(&context, &server, Some(Duration::from_millis(300))).await;
        let server = Arc::new(Mutex::new(server));
        let ((), problems) = asks_across(&context, &cluster, Duration::from_secs(2), async {
            let killed = server.clone();
            blocking(&context, move || lock(&killed).kill()).await;
            // The outage.
            context.sleep(Duration::from_millis(2500)).await;
            let restarted = server.clone();
            blocking(&context, move || {
                lock(&restarted).restart().expect("the server restarts")
            })
            .await;
        })
        .await;
        assert_no_problems(&problems);
    });
}

#[test]
fn server_paused_past_the_deadline_never_runs_a_failed_ask() {
    fault_test(|context, server| async move {
        let cluster = cluster(&context, &server, None).await;
        let deadline = Duration::from_secs(2);
        let ((), problems) = asks_across(&context, &cluster, deadline, async {
            pause_server(&server);
            context.sleep(deadline + Duration::from_millis(1500)).await;
            resume_server(&server);
        })
        .await;
        assert_no_problems(&problems);
    });
}

/// The serving node paused for `pause`, asks with `deadline`: seen down during the pause,
/// up after, and no failed ask runs after it failed.
async fn serving_node_paused(
    context: runtime::Context,
    server: Server,
    pause: Duration,
    deadline: Duration,
) {
    let cluster = cluster(&context, &server, None).await;
    let listed = || cluster.asking.peers().contains(&"serving".to_string());
    let watch = PeerWatch::start(&context, &cluster.asking, "serving");
    let ((paused_at, resumed_at, up), mut problems) =
        asks_across(&context, &cluster, deadline, async {
            let paused_at = unix_micros();
            let started = Instant::now();
            cluster.serving.pause();
            // Seen down while paused (or not: checked below, from the watch).
            let _ = within(&context, pause, || !listed()).await;
            if let Some(left) = pause.checked_sub(started.elapsed()) {
                context.sleep(left).await;
            }
            cluster.serving.resume();
            let resumed_at = unix_micros();
            let up = within(&context, BOUND, listed).await;
            (paused_at, resumed_at, up)
        })
        .await;
    let watch = watch.finish().await;
    let changes = watch.changes();
    if !changes
        .iter()
        .any(|(at, listed)| !listed && (paused_at..=resumed_at).contains(at))
    {
        problems.push(format!(
            "the serving node, paused for {pause:?} (silence window {:?}), was not seen down \
             during the pause: {changes:?}",
            silence()
        ));
    }
    if up.is_none()
        || !changes
            .last()
            .is_some_and(|(at, listed)| *listed && *at >= resumed_at)
    {
        problems.push(format!(
            "the serving node was not seen up again after the pause: {changes:?}"
        ));
    }
    assert_no_problems(&problems);
}

#[test]
fn serving_node_paused_past_the_silence_window_never_runs_a_failed_ask() {
    fault_test(|context, server| async move {
        // Past the silence window (0.55 s), within the deadline.
        serving_node_paused(
            context,
            server,
            Duration::from_millis(1500),
            Duration::from_secs(3),
        )
        .await;
    });
}

#[test]
fn serving_node_paused_past_the_deadline_never_runs_a_failed_ask() {
    fault_test(|context, server| async move {
        serving_node_paused(
            context,
            server,
            Duration::from_millis(4000),
            Duration::from_secs(2),
        )
        .await;
    });
}

// ---------------------------------------------------------------------------------------
// d: a killed node.
// ---------------------------------------------------------------------------------------

#[test]
fn killed_node_is_down_fails_its_asks_at_once_and_its_name_can_rejoin_at_once() {
    fault_test(|context, server| async move {
        let mut victim = start_node(&context, server.url(), "victim", None)
            .await
            .expect("the victim joins");
        let asking = join(&context, &server, "asking").await;
        asking.wait_for_peer("victim", BOUND).await.unwrap();
        let by_node: LedgerRemoteRef = asking.lookup_on("victim", LEDGER);
        let by_name: LedgerRemoteRef = asking.lookup(LEDGER);
        assert_eq!(by_node.apply(1).await, Ok(1));
        // Asks the victim takes and holds (the first holds the actor; the rest queue).
        let mut pending: Vec<_> = (10..15u64)
            .map(|id| {
                let remote = if id % 2 == 0 { &by_node } else { &by_name };
                Box::pin(remote.slow(id, 60_000).timeout(Duration::from_secs(30)))
            })
            .collect();
        for ask in &mut pending {
            assert!(futures::poll!(ask.as_mut()).is_pending());
        }
        asking.client().flush().await.unwrap();
        wait_until(&context, "the victim starts a held ask", BOUND, || {
            !victim.ran().is_empty()
        })
        .await;
        let mut problems = Vec::new();
        let killed = Instant::now();
        victim.kill();
        let seen_down = within(&context, BOUND, || {
            !asking.peers().contains(&"victim".to_string())
        })
        .await;
        match seen_down {
            Some(after) if after < Duration::from_secs(5) => {}
            other => problems.push(format!(
                "the killed node was seen down after {other:?} (silence window {:?}, bound 5 s)",
                silence()
            )),
        }
        for ask in pending {
            let result = context.timeout(BOUND, ask).await;
            if !matches!(&result, Ok(Err(Error::NodeDown { node })) if &**node == "victim") {
                problems.push(format!(
                    "an ask pending on the killed node ended {result:?} {:?} after the kill, \
                     not NodeDown",
                    killed.elapsed()
                ));
            }
        }
        // Known down now: a new ask to it fails at once, saying so.
        let fresh: LedgerRemoteRef = asking.lookup_on("victim", LEDGER);
        let asked = Instant::now();
        let result = fresh.apply(2).timeout(Duration::from_secs(10)).await;
        let took = asked.elapsed();
        if !matches!(&result, Err(Error::NodeDown { node }) if &**node == "victim")
            || took >= Duration::from_secs(1)
        {
            problems.push(format!(
                "a new ask to the node known down ended {result:?} after {took:?}, not \
                 NodeDown within 1 s"
            ));
        }
        // A node restarted under the same name at once after SIGKILL joins.
        let mut phoenix = start_node(&context, server.url(), "phoenix", None)
            .await
            .expect("the first phoenix joins");
        for round in 1..=8 {
            phoenix.kill();
            match start_node(&context, server.url(), "phoenix", None).await {
                Ok(next) => phoenix = next,
                Err(why) => {
                    problems.push(format!(
                        "round {round}: a node restarted as `phoenix` at once after SIGKILL \
                         could not join: {why}"
                    ));
                    // It must join once the old one is surely gone.
                    let started = Instant::now();
                    phoenix = loop {
                        match start_node(&context, server.url(), "phoenix", None).await {
                            Ok(next) => break next,
                            Err(why) => {
                                assert!(started.elapsed() < BOUND, "{why}");
                                // A pause between attempts (each one a process).
                                context.sleep(Duration::from_millis(100)).await;
                            }
                        }
                    };
                }
            }
        }
        // The last one answers.
        let last: LedgerRemoteRef = asking.lookup_on("phoenix", LEDGER);
        let started = Instant::now();
        loop {
            match last.apply(3).timeout(Duration::from_secs(2)).await {
                Ok(3) => break,
                other => {
                    if started.elapsed() > BOUND {
                        problems.push(format!("the last phoenix never answered: {other:?}"));
                        break;
                    }
                    context.sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(phoenix);
        assert_no_problems(&problems);
    });
}

// ---------------------------------------------------------------------------------------
// e, f: clients that never read.
// ---------------------------------------------------------------------------------------

/// Checks that `node` never saw `peer` missing and that `monitor` has not resolved.
fn watch_problems(
    node: &str,
    peer: &str,
    watch: &PeerWatch,
    monitor_resolved: Option<ExitReason>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let missing = watch.missing_since();
    if !missing.is_empty() {
        problems.push(format!(
            "{node} saw {peer} missing from its peers {} times: {:?}",
            missing.len(),
            watch.changes()
        ));
    }
    if let Some(reason) = monitor_resolved {
        problems.push(format!(
            "{node}'s monitor of {peer}'s ledger resolved: {reason:?}"
        ));
    }
    problems
}

/// Polls a monitor once: its reason if it resolved.
async fn resolved(
    monitor: &mut std::pin::Pin<Box<actors::remote::RemoteMonitor>>,
) -> Option<ExitReason> {
    match futures::poll!(monitor.as_mut()) {
        std::task::Poll::Ready(reason) => Some(reason),
        std::task::Poll::Pending => None,
    }
}

#[test]
fn a_subscriber_that_never_reads_causes_no_false_node_down() {
    fault_test(|context, server| async move {
        let serving = join(&context, &server, "serving").await;
        let asking = join(&context, &server, "asking").await;
        serving
            .expose(LEDGER, &Ledger::new(false).spawn(&context))
            .await
            .unwrap();
        asking
            .expose(LEDGER, &Ledger::new(false).spawn(&context))
            .await
            .unwrap();
        serving.wait_for_peer("asking", BOUND).await.unwrap();
        asking.wait_for_peer("serving", BOUND).await.unwrap();
        let remote: LedgerRemoteRef = asking.lookup_on("serving", LEDGER);
        assert_eq!(remote.apply(0).await, Ok(0));
        // Subscribed to everything, read up to its first PONG, and then never again.
        let mut hostile = RawClient::connect(&server);
        hostile.shrink_receive_buffer();
        hostile.subscribe(">", 1);
        hostile.flush();
        let mut on_serving = Box::pin(remote.monitor());
        let mut on_asking = Box::pin(
            serving
                .lookup_on::<LedgerRemoteRef>("asking", LEDGER)
                .monitor(),
        );
        let watch_asking = PeerWatch::start(&context, &asking, "serving");
        let watch_serving = PeerWatch::start(&context, &serving, "asking");
        let text = "y".repeat(128 * 1024);
        let note: AskFn = {
            let remote = remote.clone();
            Arc::new(move |id, deadline| Box::pin(remote.note(id, text.clone()).timeout(deadline)))
        };
        let ids = Arc::new(AtomicU64::new(1));
        let traffic = Traffic::start(
            &context,
            &ids,
            vec![("note", note)],
            Pace::Loops(4),
            Duration::from_secs(5),
        );
        // The flow, for a few seconds.
        context.sleep(Duration::from_secs(4)).await;
        let outcomes = traffic.finish().await;
        let watch_asking = watch_asking.finish().await;
        let watch_serving = watch_serving.finish().await;
        let mut problems = watch_problems(
            "asking",
            "serving",
            &watch_asking,
            resolved(&mut on_serving).await,
        );
        problems.extend(watch_problems(
            "serving",
            "asking",
            &watch_serving,
            resolved(&mut on_asking).await,
        ));
        let failed: Vec<_> = outcomes.iter().filter(|o| o.result.is_err()).collect();
        if !failed.is_empty() {
            problems.push(format!(
                "{} of {} asks failed: {:?}; the first: {:?}",
                failed.len(),
                outcomes.len(),
                tally(&outcomes),
                failed[0]
            ));
        }
        drop(hostile);
        assert_no_problems(&problems);
    });
}

#[test]
fn replies_to_a_subject_nobody_reads_cause_no_false_node_down() {
    fault_test(|context, server| async move {
        let serving = join(&context, &server, "serving").await;
        let ledger = Ledger::new(false);
        let filled = ledger.filled.clone();
        serving
            .expose(LEDGER, &ledger.spawn(&context))
            .await
            .unwrap();
        let third = join(&context, &server, "third").await;
        third
            .expose(LEDGER, &Ledger::new(false).spawn(&context))
            .await
            .unwrap();
        third.wait_for_peer("serving", BOUND).await.unwrap();
        serving.wait_for_peer("third", BOUND).await.unwrap();
        let remote: LedgerRemoteRef = third.lookup_on("serving", LEDGER);
        let back: LedgerRemoteRef = serving.lookup_on("third", LEDGER);
        assert_eq!(remote.apply(0).await, Ok(0));
        assert_eq!(back.apply(0).await, Ok(0));
        // Subscribed to the reply subject, and never reading it.
        let mut unread = RawClient::connect(&server);
        unread.shrink_receive_buffer();
        unread.subscribe("unread.replies", 1);
        unread.flush();
        // A real request for a 256 KiB reply, as a node sends it, captured off the wire.
        let subject = format!("{PREFIX}.n.serving.{LEDGER}");
        let mut sniffer = RawClient::connect(&server);
        sniffer.subscribe(&subject, 1);
        sniffer.flush();
        let captured = context
            .clone()
            .shared(true)
            .spawn(move |_| async move { sniffer.next_message() });
        let reply = remote
            .fill(0, 256 * 1024)
            .timeout(Duration::from_secs(30))
            .await;
        assert_eq!(reply.map(|text| text.len()), Ok(256 * 1024));
        let request = captured.await.unwrap();
        assert!(request.reply.is_some());
        let mut on_serving = Box::pin(remote.monitor());
        let watch = PeerWatch::start(&context, &third, "serving");
        let ids = Arc::new(AtomicU64::new(1));
        // The third node's asks to the serving node, and the serving node's own asks to it.
        let vias = ["third to serving", "serving to third"];
        let traffic = Traffic::start(
            &context,
            &ids,
            vec![
                (vias[0], apply_through(&remote)),
                (vias[1], apply_through(&back)),
            ],
            Pace::Every(Duration::from_millis(10)),
            Duration::from_secs(5),
        );
        wait_until(&context, "asks flow", BOUND, || traffic.successes() >= 20).await;
        // 300 such requests whose replies go to the unread subject: 75 MiB.
        let requests = 300;
        let before = filled.load(Ordering::SeqCst);
        let publish = {
            let server_port = server.port();
            let payload = request.payload;
            blocking(&context, move || {
                let mut publisher = RawClient::connect_port(server_port);
                let mut out = Vec::new();
                for _ in 0..requests {
                    RawClient::publish_frame(&mut out, &subject, Some("unread.replies"), &payload);
                }
                publisher.write(&out);
                publisher.flush();
                publisher
            })
        };
        let publisher = publish.await;
        let handled_all = within(&context, BOUND, || {
            filled.load(Ordering::SeqCst) >= before + requests
        })
        .await;
        // The flood has been handled; its replies may still be on their way. Asks through
        // both directions are answered again (they may have timed out while the server held up the connection)...
        let handled_at = unix_micros();
        let answered_again = within(&context, Duration::from_secs(30), || {
            recovered_at(&traffic.outcomes(), &vias, handled_at).is_some()
        })
        .await;
        // ... and a silence window more, for a down to be noticed.
        context.sleep(silence() * 2).await;
        let outcomes = traffic.finish().await;
        let watch = watch.finish().await;
        let mut problems =
            watch_problems("third", "serving", &watch, resolved(&mut on_serving).await);
        if handled_all.is_none() {
            problems.push(format!(
                "the serving node handled {} of the {requests} requests within {BOUND:?}",
                filled.load(Ordering::SeqCst) - before
            ));
        }
        if answered_again.is_none() {
            problems.push("asks were not answered again within 30 s of the flood".into());
        }
        // While the NATS server holds up the serving node's data connection (it throttles a
        // producer whose consumer does not read, until that consumer is cut off), asks over
        // it may time out: that is the broker's flow control, not a failure of the node.
        // Anything else (a `NodeDown` above all) is a false failure.
        for via in vias {
            let through: Vec<_> = outcomes.iter().filter(|o| o.via == via).cloned().collect();
            let failed: Vec<_> = through
                .iter()
                .filter(|o| o.result.is_err() && o.result != Err(Error::Timeout))
                .collect();
            if let (Some(first), Some(last)) = (failed.first(), failed.last()) {
                problems.push(format!(
                    "{} of {} asks {via} failed, sent over {} ms: {:?}; the first: {first:?}",
                    failed.len(),
                    through.len(),
                    (last.sent - first.sent) / 1000,
                    tally(&through),
                ));
            }
        }
        drop((unread, publisher));
        assert_no_problems(&problems);
    });
}

// ---------------------------------------------------------------------------------------
// g: forged and garbage control messages.
// ---------------------------------------------------------------------------------------

/// The most peers a node may list while 10,000 fake nodes claim to exist: far fewer than
/// they. (Two real nodes, the forged ones it may still admit, and the syncing ones.)
const PEER_BOUND: usize = 1024;
/// How much a node process's resident set may grow across the flood, once warm.
const RSS_GROWTH_KIB: u64 = 8 * 1024;

/// Incarnations a forger could guess for a node that started between `from` and `to`
/// (unix milliseconds): its start millisecond with the random low bits zero, and the
/// extremes.
fn guesses(from: u128, to: u128) -> Vec<u64> {
    let mut guesses: Vec<u64> = (from.saturating_sub(20)..=to + 20)
        .map(|millis| (millis as u64) << 16)
        .collect();
    guesses.extend([0, 1, u64::MAX]);
    guesses
}

#[test]
fn forged_and_garbage_announcements_neither_down_live_nodes_nor_grow_without_bound() {
    fault_test(|context, server| async move {
        let before_target = unix_micros() / 1000;
        let mut target = start_node(&context, server.url(), "target", Some("sync-"))
            .await
            .expect("the target joins");
        let after_target = unix_micros() / 1000;
        let observer = join(&context, &server, "observer").await;
        let after_observer = unix_micros() / 1000;
        observer.wait_for_peer("target", BOUND).await.unwrap();
        let remote: LedgerRemoteRef = observer.lookup_on("target", LEDGER);
        assert_eq!(remote.apply(0).await, Ok(0));
        let mut on_target = Box::pin(remote.monitor());
        let watch = PeerWatch::start(&context, &observer, "target");
        let mut forger = RawClient::connect(&server);
        let mut problems = Vec::new();
        let names: Vec<String> = (0..64).map(|n| format!("n{n}")).collect();
        let (rounds, fakes) = (4u64, 2_500);
        let mut rss = Vec::new();
        for round in 1..=rounds {
            let mut out = Vec::new();
            for bytes in garbage(round) {
                for subject in announce_subjects("garbage") {
                    RawClient::publish_frame(&mut out, &subject, None, &bytes);
                }
            }
            // (1) A node that claims it may stay silent for ever.
            let silent = Announcement::Heartbeat {
                node: "forged-silent".into(),
                incarnation: 1,
                interval_ms: u32::MAX,
                misses: u32::MAX,
                exposed: vec!["ghost".into()],
            };
            forge(&mut out, "forged-silent", &silent);
            // (3) The live nodes' names, as a later incarnation that exposes nothing.
            for live in ["target", "observer"] {
                let restarted = Announcement::Heartbeat {
                    node: live.into(),
                    incarnation: u64::MAX - 10 + round,
                    interval_ms: HEARTBEAT.as_millis() as u32,
                    misses: MISSES,
                    exposed: Vec::new(),
                };
                forge(&mut out, live, &restarted);
            }
            // (4) The live nodes leaving, under guessed incarnations.
            for (live, from, to) in [
                ("target", before_target, after_target),
                ("observer", after_target, after_observer),
            ] {
                for incarnation in guesses(from, to) {
                    let leaving = Announcement::Leaving {
                        node: live.into(),
                        incarnation,
                    };
                    forge(&mut out, live, &leaving);
                }
            }
            // (2) Thousands of nodes that do not exist, each exposing many names.
            for fake in 0..fakes {
                let node = format!("fake-{round}-{fake}");
                let heartbeat = Announcement::Heartbeat {
                    node: node.clone(),
                    incarnation: 1,
                    interval_ms: 10_000,
                    misses: 3,
                    exposed: names.clone(),
                };
                forge(&mut out, &node, &heartbeat);
            }
            forger = blocking(&context, move || {
                forger.write(&out);
                forger.flush();
                forger
            })
            .await;
            // Both nodes have read the round once they see a node that joined after it.
            let sync = format!("sync-{round}");
            let syncing = join(&context, &server, &sync).await;
            let seen = within(&context, BOUND, || {
                observer.peers().contains(&sync) && target.printed(&format!("up {sync}"))
            })
            .await;
            syncing.leave().await;
            if seen.is_none() {
                problems.push(format!(
                    "round {round}: a node that joined after the flood was not seen within \
                     {BOUND:?}"
                ));
            }
            rss.push(target.rss_kib());
        }
        // A monitor of a name nobody exposes resolves, whatever the forged silences.
        for (what, nowhere) in [
            (
                "by name",
                observer.lookup::<LedgerRemoteRef>("nobody-has-this"),
            ),
            (
                "by node",
                observer.lookup_on::<LedgerRemoteRef>("nowhere", "nobody-has-this"),
            ),
        ] {
            let started = Instant::now();
            let reason = context
                .timeout(Duration::from_secs(5), nowhere.monitor())
                .await;
            if !matches!(reason, Ok(ExitReason::NotFound)) {
                problems.push(format!(
                    "a monitor of a never-exposed name ({what}) ended {reason:?} after {:?}, \
                     not NotFound within 5 s",
                    started.elapsed()
                ));
            }
        }
        if !target.alive() {
            problems.push("the target process died".into());
        }
        match remote.apply(1).timeout(Duration::from_secs(5)).await {
            Ok(1) => {}
            other => problems.push(format!("an ask to the target after the flood: {other:?}")),
        }
        let watch = watch.finish().await;
        problems.extend(watch_problems(
            "observer",
            "target",
            &watch,
            resolved(&mut on_target).await,
        ));
        if watch.most() > PEER_BOUND {
            problems.push(format!(
                "the observer listed up to {} peers at once (bound {PEER_BOUND}); {} now",
                watch.most(),
                observer.peers().len()
            ));
        }
        let growth = rss.last().unwrap().saturating_sub(rss[0]);
        if growth > RSS_GROWTH_KIB {
            problems.push(format!(
                "the target's resident set grew by {growth} KiB over rounds 2 to {rounds} \
                 (bound {RSS_GROWTH_KIB} KiB): {rss:?} KiB after each round"
            ));
        }
        drop(forger);
        assert_no_problems(&problems);
    });
}

// ---------------------------------------------------------------------------------------
// h: a node replaced under its name while it was paused.
// ---------------------------------------------------------------------------------------

/// A node paused past its silence and replaced under its name meanwhile runs none of the
/// name's asks once it comes back: without a membership secret because asks carry the
/// incarnation they are for (the returned node's is another), with one because it leaves (of
/// two nodes holding one name, the one present longer keeps it). Afterwards every ask to the
/// name's node runs once, on the replacement, never on both.
#[test]
fn a_node_replaced_while_paused_runs_none_of_the_names_asks_when_it_comes_back() {
    replaced_while_paused(None);
}

/// [`a_node_replaced_while_paused_runs_none_of_the_names_asks_when_it_comes_back`], with a
/// membership secret, where the returned node leaves instead.
#[test]
fn with_a_secret_a_node_replaced_while_paused_also_runs_none_of_the_names_asks() {
    replaced_while_paused(Some("the fault suite's shared membership secret"));
}

fn replaced_while_paused(secret: Option<&'static str>) {
    fault_test(move |context, server| async move {
        let mut asking_options = options(&server.url(), "asking", HEARTBEAT, MISSES, PREFIX);
        if let Some(secret) = secret {
            asking_options = asking_options.with_secret(secret);
        }
        let asking = Node::join_with(&context, asking_options).await.unwrap();
        let zombie = start_node_with(&context, server.url(), "twin", None, secret)
            .await
            .unwrap();
        asking.wait_for_peer("twin", BOUND).await.unwrap();
        zombie.pause();
        wait_until(&context, "the paused twin is down", BOUND, || {
            !asking.peers().contains(&"twin".to_string())
        })
        .await;
        // Its name is taken over once its holder has not answered for a silence.
        let replacement = start_node_with(&context, server.url(), "twin", None, secret)
            .await
            .unwrap();
        asking.wait_for_peer("twin", BOUND).await.unwrap();
        zombie.resume();
        let remote: LedgerRemoteRef = asking.lookup_on("twin", LEDGER);
        // Asks until 20 in a row ran on the replacement alone (both would take each one while
        // the returned node still served the name: plain subscriptions both receive).
        let mut next = 1_000;
        let mut alone = 0;
        let started = Instant::now();
        while alone < 20 {
            assert!(
                started.elapsed() < BOUND,
                "the returned node still runs asks to the name: {:?}",
                zombie.ran().iter().rev().take(3).collect::<Vec<_>>()
            );
            next += 1;
            if remote.apply(next).await.is_ok() && !zombie.ran().iter().any(|(id, _)| *id == next) {
                alone += 1;
            } else {
                alone = 0;
            }
        }
        // From then on, each ask runs once, on the replacement.
        let first = next + 1;
        for id in first..first + 50 {
            assert_eq!(remote.apply(id).await, Ok(id));
        }
        let on_zombie: Vec<u64> = zombie.ran().iter().map(|(id, _)| *id).collect();
        let on_replacement: Vec<u64> = replacement.ran().iter().map(|(id, _)| *id).collect();
        for id in first..first + 50 {
            assert!(!on_zombie.contains(&id), "{id} ran on the returned node");
            assert_eq!(
                on_replacement.iter().filter(|ran| **ran == id).count(),
                1,
                "{id} on the replacement"
            );
        }
    });
}
