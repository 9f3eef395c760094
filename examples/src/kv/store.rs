//! The storage actor: the data in memory, the log that rebuilds it, group commit, expiry and
//! the rewrite that keeps the log near the size of the live data.
//!
//! Invariants:
//! - **Nothing is answered before it is durable** (with `--durability always`): a write is
//!   answered once the sync that carries its record is done, and a reply that writes
//!   nothing (a read, a refused `SET NX`) once what it read is durable (see `answer`). With
//!   `everysec` and `none` writes are answered at once and synced by a timer (every second)
//!   or never, as Redis does; a crash then loses what was not synced.
//! - **Published when answered**: every change is published to the view the connections
//!   read without the store ([`super::view`]) just before the answers that depend on it are
//!   given (with `always`, after its sync; with `everysec` and `none`, at once), one commit
//!   (or one message) under one lock.
//! - **Group commit, pipelined**: the store runs on the pool, next to the connections (a
//!   batch costs no wake of another thread). A write applies to the data at once and queues
//!   its record and its answer; the first record of a group queues a `commit` behind the
//!   messages already waiting, so the commit takes them too. The commit hands the group's
//!   records to the syncer, a task on a thread of its own that holds the log's writer and
//!   makes the writes and syncs with the system calls directly (no ring round trip, no
//!   io-wq hop). The syncer takes every commit handed to it since its last sync, writes
//!   them in one write and syncs once, then goes straight on to what was handed meanwhile;
//!   the store is told (`synced`) and publishes and answers those commits, in order. One
//!   sync serves everything that arrived during the last, as with Redis's `appendfsync
//!   always`, without the syncer waiting for the store between syncs; commits reach the disk
//!   in the order handed. A read whose data may be in a commit not yet durable is answered
//!   with the last one handed.
//! - **No write outlives its incarnation**: `on_stop` closes the syncer's queue and waits
//!   for it to finish what it was handed, whatever ended the incarnation, so a restarted one
//!   opens a log nobody writes.
//! - **A rewrite never holds what is not in its predecessor** until it is the store: it is
//!   the snapshot of the data at one moment, then every record logged since (kept aside while
//!   it was written), then `Current`, all in the first sync to the new generation. Its
//!   predecessor is removed only when that sync is done, and no answer that depends on a
//!   write to the new generation is given before the removal is done. See [`super::log`].
//! - **A rewrite does not stall the store**: its snapshot shares the data's shards (see
//!   [`super::shards`]), it is encoded and written on a blocking worker, and the removal of
//!   its predecessor (an unlink of a large file takes milliseconds) runs on a blocking worker
//!   too, while the store goes on serving what does not wait for it.
//! - **A transaction is one message**: `EXEC`'s operations are one [`Op::Exec`], run in
//!   one handler call (no other client's operation between them), their records queued
//!   together and made durable by one commit before any of their replies is sent.
//! - **A watched key's change is seen wherever it happens**: every change goes through
//!   `queue`, which marks the sessions watching its key; a flush marks those watching a key
//!   it removed; `EXEC` first removes a watched key that has expired since. Watches live in
//!   one incarnation: after a restart, `EXEC` of a session that watched keys aborts.
//! - **Expired keys never come back**: deadlines are wall-clock milliseconds, stored with the
//!   value; a replay drops what is due; an expired key found by a command or the sweep is
//!   removed and its removal logged.

use super::log::{self, Data, Entry, Record};
use super::recovery::{self, Opened};
use super::view::View;
use actors::prelude::*;
use bytes::Bytes;
use runtime::buffer::paged::{CacheRef, Writer};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// What answers a write once its record is synced.
type Answer = Box<dyn FnOnce() + Send>;

/// When a write is durable, as Redis's `appendfsync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Answered once synced: an acknowledged write survives any crash (the default).
    Always,
    /// Answered at once, synced every second: a crash may lose the last second.
    EverySec,
    /// Answered at once, never synced but by the buffer filling: the OS decides.
    None,
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "always" => Ok(Durability::Always),
            "everysec" => Ok(Durability::EverySec),
            "none" | "no" => Ok(Durability::None),
            other => Err(format!(
                "unknown durability '{other}': it is always (the default), everysec or none"
            )),
        }
    }
}

impl Durability {
    /// Its name, as `CONFIG GET appendfsync` reports it.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::EverySec => "everysec",
            Durability::None => "no",
        }
    }
}

/// How the store keeps its log.
#[derive(Clone, Debug)]
pub struct Options {
    /// When a write is durable.
    pub durability: Durability,
    /// The log is rewritten when it is past both this many bytes and `rewrite_ratio` times
    /// the live data (`KV_REWRITE_MIN_BYTES`, 64 MiB by default).
    pub rewrite_min_bytes: u64,
    /// See `rewrite_min_bytes`.
    pub rewrite_ratio: u64,
    /// Refuse to start when the log ends in a tail that recovery would cut (`--strict`),
    /// rather than cutting it aside and reporting it: for an operator who wants to look at
    /// every cut first.
    pub strict: bool,
}

impl Options {
    /// What opening the log does with a tail it would cut.
    pub fn torn_tail(&self) -> runtime::buffer::paged::TornTail {
        if self.strict {
            runtime::buffer::paged::TornTail::Refuse
        } else {
            runtime::buffer::paged::TornTail::SetAside
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Always,
            rewrite_min_bytes: crate::limits::setting("KV_REWRITE_MIN_BYTES", 64 << 20),
            rewrite_ratio: 2,
            strict: false,
        }
    }
}

/// With `everysec` or `none`, a sync (or write) starts early once this much is queued, so
/// what waits in memory stays bounded.
const QUEUED_BOUND: usize = 1 << 20;

/// How long after a failed rewrite the next may start.
const REWRITE_BACKOFF: Duration = Duration::from_secs(60);

/// Expired keys the sweep removes per tick, and how often it runs.
const SWEEP_KEYS: usize = 256;
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// What the store's incarnations share: where rewrites run (the service's scope, which
/// outlives incarnations), the cache and options, the count that numbers incarnations, and
/// what the service recovered before the first incarnation started.
pub struct Shared {
    pub(super) context: runtime::Context,
    pub(super) cache: CacheRef,
    pub(super) options: Options,
    /// The last opening's report, as metrics.
    recovery_metrics: recovery::ReportMetrics,
    incarnations: std::sync::atomic::AtomicU64,
    recovered: std::sync::Mutex<Option<Opened>>,
    /// Held by a rewrite while it writes its generation: a restarted incarnation opens the
    /// log only once its predecessor's rewrite is done with the file.
    rewriting: Arc<futures::lock::Mutex<()>>,
    /// What has been acknowledged, for the connections to read (see [`super::view`]).
    pub(super) view: Arc<View>,
}

/// Shows the options, how many incarnations started and the view (not the recovered data).
impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("options", &self.options)
            .field(
                "incarnations",
                &self.incarnations.load(std::sync::atomic::Ordering::Relaxed),
            )
            .field("view", &self.view)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(super) fn new(
        context: runtime::Context,
        cache: CacheRef,
        options: Options,
        recovered: Opened,
    ) -> Self {
        let recovery_metrics = recovery::ReportMetrics::register(&context);
        // Built before any connection is accepted: a read never finds the view emptier than
        // what the start replayed.
        let view = Arc::new(View::of(&recovered.data));
        let shared = Shared {
            context,
            cache,
            options,
            recovery_metrics,
            incarnations: std::sync::atomic::AtomicU64::new(0),
            recovered: std::sync::Mutex::new(None),
            rewriting: Arc::new(futures::lock::Mutex::new(())),
            view,
        };
        shared.report_recovery(&recovered);
        *shared
            .recovered
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(recovered);
        shared
    }

    /// Prints what opening the log cut (nothing when it was whole) and sets the metrics.
    pub(super) fn report_recovery(&self, opened: &Opened) {
        for line in opened.report.lines() {
            eprintln!("kv: {line}");
        }
        self.recovery_metrics
            .record(&opened.report, opened.writer.size());
    }
}

/// A rewrite under way: the records logged since its snapshot.
struct Rewrite {
    since: Vec<u8>,
}

/// A commit handed to the syncer: the records to append (to `switch`, a rewrite's new
/// generation, from this one on), and whether to sync them.
struct Job {
    number: u64,
    records: Vec<u8>,
    sync: bool,
    switch: Option<Writer>,
}

/// A commit handed to the syncer, not yet durable: what waits for it.
struct InFlight {
    number: u64,
    answers: Vec<Answer>,
    /// With `always`, its changes, published when its answers are given.
    changes: Vec<Record>,
    /// The generation to remove once it is done (a rewrite's first commit).
    retiring: Option<u64>,
}

/// The syncer: takes every commit handed to it since its last sync, appends their records in
/// one write and syncs them once (if any asked for a sync), tells the store the last one
/// done, and goes straight on to what was handed meanwhile, without waiting for the store.
/// On a thread of its own, so the writes and the sync are system calls made there (no ring
/// round trip, no io-wq hop; see `runtime::storage`), while the store goes on serving on
/// the pool. Publishes the log's size in `size`, and the last commit done in `durable`
/// before it tells the store (without waiting: a full mailbox loses the message, and the
/// store then finds `durable` on its next message or tick). Ends when the store's
/// incarnation drops its sender, having done every commit handed to it, and then resolves
/// `done`; a failed write or sync ends the process (see `sync_failed`).
async fn sync_jobs(
    mut writer: Writer,
    mut jobs: futures::channel::mpsc::UnboundedReceiver<Job>,
    store: actors::WeakRef<Store>,
    incarnation: u64,
    size: Arc<std::sync::atomic::AtomicU64>,
    durable: Arc<std::sync::atomic::AtomicU64>,
    done: futures::channel::oneshot::Sender<()>,
) {
    use futures::StreamExt as _;
    let (mut records, mut sync) = (Vec::new(), false);
    while let Some(first) = jobs.next().await {
        let mut last = first.number;
        let mut next = Some(first);
        while let Some(job) = next {
            if let Some(switch) = job.switch {
                // What the old generation has waiting is written and synced first: the
                // commits before the switch are answered from it.
                let old = std::mem::replace(&mut writer, switch);
                drop(write(old, &mut records, &mut sync).await);
            }
            records.extend_from_slice(&job.records);
            sync |= job.sync;
            last = job.number;
            next = jobs.try_recv().ok();
        }
        writer = write(writer, &mut records, &mut sync).await;
        size.store(writer.size(), std::sync::atomic::Ordering::Relaxed);
        // Release: pairs with the store's Acquire in `catch_up` (the sync is done before).
        durable.store(last, std::sync::atomic::Ordering::Release);
        // Never waits for room: waiting could hold the syncer while the store, stopping,
        // waits for the syncer.
        if let Some(store) = store.upgrade() {
            let _ = store.try_synced(incarnation, last);
        }
    }
    let _ = done.send(());
}

/// Appends `records` (emptied) to the log, and syncs if `sync` (reset).
async fn write(writer: Writer, records: &mut Vec<u8>, sync: &mut bool) -> Writer {
    if records.is_empty() && !*sync {
        return writer;
    }
    let written = if records.is_empty() {
        writer.sync().await
    } else {
        match writer.append(records).await {
            Ok((writer, _)) if *sync => writer.sync().await,
            Ok((writer, _)) => Ok(writer),
            Err(error) => Err(error),
        }
    };
    records.clear();
    *sync = false;
    written.unwrap_or_else(|error| sync_failed(&error))
}

/// The storage actor. See the [module](self) for what it guarantees.
#[actor(name = "kv_store", mailbox = 256)]
pub struct Store {
    data: Data,
    /// The log's generation.
    generation: u64,
    shared: Arc<Shared>,
    /// This incarnation's number: a sync or rewrite reports back to the one that started it.
    incarnation: u64,
    /// Records queued since the last commit, and the answers waiting for them.
    pending: Vec<u8>,
    answers: Vec<Answer>,
    /// The changes queued and not yet published to the view: published just before the
    /// answers that depend on them are given (see [`super::view`]).
    unpublished: Vec<Record>,
    /// A `commit` is queued in the mailbox.
    commit_queued: bool,
    /// Where commits go to be written and synced: a task on a thread of its own that holds
    /// the log's writer (see the [module](self)); `None` only before `on_start` and after
    /// `on_stop`. It resolves `syncer_done` when it has ended.
    syncer: Option<futures::channel::mpsc::UnboundedSender<Job>>,
    syncer_done: Option<futures::channel::oneshot::Receiver<()>>,
    /// The log's size, as the syncer last wrote it, and the last commit it made durable.
    log_size: Arc<std::sync::atomic::AtomicU64>,
    durable: Arc<std::sync::atomic::AtomicU64>,
    /// The commits handed to the syncer and not yet durable, in order, and the commits
    /// numbered.
    in_flight: std::collections::VecDeque<InFlight>,
    commits: u64,
    rewrite: Option<Rewrite>,
    /// The generation to remove once the next commit (the new one's first) is done.
    retiring: Option<u64>,
    /// After a failed rewrite, none starts before this.
    rewrite_after: Option<std::time::Instant>,
    /// The removal of the generation a rewrite replaced, running on a blocking worker (an
    /// unlink of a large file takes milliseconds the store's thread does not wait for): until
    /// it is done, no answer that depends on a write to the new generation is given. Resolves
    /// once the generation is gone (an error if the removal never finished); the store is
    /// told separately (`retired`), and `on_stop` waits for this alone, never for a message
    /// to its own mailbox.
    removal: Option<futures::channel::oneshot::Receiver<()>>,
    /// Answers waiting for `removal`, in order, and (with `always`) the changes they publish.
    held: Vec<Answer>,
    held_changes: Vec<Record>,
    /// `BGREWRITEAOF` asked for a rewrite, whatever the log's size: started at the end of
    /// the message that asked (or, if an earlier incarnation's rewrite still writes, later).
    rewrite_asked: bool,
    /// What sessions watch (`WATCH`): this incarnation's only; see `Op::Exec`.
    watches: Watches,
    /// `RANDOMKEY`'s state.
    seed: u64,
    /// Syncs of the log this incarnation made (`INFO persistence`).
    syncs: u64,
}

/// Shows the generation, the incarnation, how many keys and how much is pending (not the
/// data or the pending bytes).
impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("generation", &self.generation)
            .field("incarnation", &self.incarnation)
            .field("keys", &self.data.len())
            .field("pending_bytes", &self.pending.len())
            .field("answers", &self.answers.len())
            .field("commits", &self.commits)
            .finish_non_exhaustive()
    }
}

impl Store {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let incarnation = shared
            .incarnations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Store {
            data: Data::default(),
            generation: 0,
            shared,
            incarnation,
            pending: Vec::new(),
            answers: Vec::new(),
            unpublished: Vec::new(),
            commit_queued: false,
            syncer: None,
            syncer_done: None,
            log_size: Arc::default(),
            durable: Arc::default(),
            in_flight: std::collections::VecDeque::new(),
            commits: 0,
            rewrite: None,
            retiring: None,
            rewrite_after: None,
            rewrite_asked: false,
            removal: None,
            held: Vec::new(),
            held_changes: Vec::new(),
            watches: Watches::default(),
            // Any odd start will do; varied by incarnation.
            seed: 0x9e37_79b9_7f4a_7c15 ^ (incarnation << 1) | 1,
            syncs: 0,
        }
    }

    fn durability(&self) -> Durability {
        self.shared.options.durability
    }

    /// Gives a reply that writes nothing once what it read is durable: at once if nothing
    /// is waiting to be synced, else with the next commit. Otherwise a crash could undo
    /// what the reply told (a `DEL` answered `0` for a key whose own deletion was never
    /// synced, a `SET NX` refused by a key that comes back absent). With `everysec` and
    /// `none`, at once.
    /// While the generation a rewrite replaced is being removed, an answer that would follow
    /// one waiting for that removal waits too, so answers keep their order.
    /// With `everysec` and `none`, what is queued is published to the view first: it is
    /// acknowledged now.
    fn answer(&mut self, ctx: &mut actors::Context<Self>, answer: impl FnOnce() + Send + 'static) {
        if self.durability() != Durability::Always {
            self.publish();
            answer();
        } else if let (true, Some(in_flight)) = (self.pending.is_empty(), self.in_flight.back_mut())
        {
            // What it read may be in the last commit in flight: answered with it.
            in_flight.answers.push(Box::new(answer));
        } else if self.pending.is_empty() && self.held.is_empty() {
            answer();
        } else if self.pending.is_empty() {
            self.held.push(Box::new(answer));
        } else {
            self.answers.push(Box::new(answer));
            self.want_commit(ctx);
        }
    }

    /// Queues `record` for the next sync, and for the rewrite under way.
    /// Every change goes through here: it is where a watched key is seen to change.
    fn queue(&mut self, record: &Record) {
        if let Record::Set { key, .. } | Record::Del { key } | Record::Expire { key, .. } = record {
            self.watches.touch(key);
        }
        let start = self.pending.len();
        record.encode(&mut self.pending);
        self.unpublished.push(record.clone());
        if let Some(rewrite) = &mut self.rewrite {
            rewrite.since.extend_from_slice(&self.pending[start..]);
        }
    }

    /// Queues a `commit` behind the messages waiting now, unless one is queued. A full
    /// mailbox refuses it: the next message handled asks again (one always comes, or the
    /// mailbox would not be full).
    fn want_commit(&mut self, ctx: &mut actors::Context<Self>) {
        if !self.commit_queued && !self.pending.is_empty() {
            self.commit_queued = ctx.actor_ref().try_commit().is_ok();
        }
    }

    /// Hands what is queued to the syncer (see the [module](self)), with the answers waiting
    /// for it and (with `always`) the changes they publish, given when the syncer says it is
    /// done ([`synced`](Self::synced)). Synced unless the durability is `none` (a rewrite's
    /// first commit is synced whatever the durability: the generation it replaces is removed
    /// next); `switch`: a rewrite's new generation, which takes it and what follows.
    fn start_commit(&mut self) {
        self.hand(None, false);
    }

    /// [`start_commit`](Self::start_commit), to `switch` if a rewrite's generation takes
    /// over here; `last`: the clean stop's commit, synced whatever the durability, even if
    /// nothing is queued.
    fn hand(&mut self, switch: Option<Writer>, last: bool) {
        if self.pending.is_empty() && !last {
            return;
        }
        let Some(syncer) = &self.syncer else {
            return;
        };
        let records = std::mem::take(&mut self.pending);
        let retiring = self.retiring.take();
        let sync = last || self.durability() != Durability::None || retiring.is_some();
        self.commits += 1;
        let job = Job {
            number: self.commits,
            records,
            sync,
            switch,
        };
        if syncer.unbounded_send(job).is_err() {
            // The syncer ended: the runtime is stopping. Nothing queued is answered. (A
            // syncer that panicked fails the runner: kv runs with uncaught panics, so this
            // is never a store carrying on without its log.)
            return;
        }
        if sync {
            self.syncs += 1;
        }
        // With `everysec` and `none` what is queued is published already (or now: a sweep's
        // removals): it was answered at once.
        let changes = if self.durability() == Durability::Always {
            std::mem::take(&mut self.unpublished)
        } else {
            self.publish();
            Vec::new()
        };
        self.in_flight.push_back(InFlight {
            number: self.commits,
            answers: std::mem::take(&mut self.answers),
            changes,
            retiring,
        });
    }

    /// Finishes the commits the syncer has made durable, if its `synced` was lost to a full
    /// mailbox: checked on every batch and every sweep tick.
    fn catch_up(&mut self, ctx: &mut actors::Context<Self>) {
        // Acquire: pairs with the syncer's Release store.
        let durable = self.durable.load(std::sync::atomic::Ordering::Acquire);
        if self
            .in_flight
            .front()
            .is_some_and(|in_flight| in_flight.number <= durable)
        {
            self.finish_commits(ctx, durable);
        }
    }

    /// Commit `number` and those before it are durable: a rewrite's first commit starts the
    /// removal of the generation it replaced, and each commit's changes are published and
    /// its answers given, in order (held, with their changes, while a removal runs).
    fn finish_commits(&mut self, ctx: &mut actors::Context<Self>, number: u64) {
        while self
            .in_flight
            .front()
            .is_some_and(|in_flight| in_flight.number <= number)
        {
            let in_flight = self.in_flight.pop_front().expect("checked");
            // Nobody is answered from the new generation before its predecessor is removed:
            // while that exists, no write was acknowledged from the new one alone (see
            // `recovery::open`).
            if let Some(old) = in_flight.retiring {
                self.start_removal(ctx, old);
            }
            let (answers, mut changes) = (in_flight.answers, in_flight.changes);
            if self.removal.is_some() {
                // Published with the held answers, once the removal is done, before what
                // was queued since.
                self.held.extend(answers);
                self.held_changes.append(&mut changes);
            } else {
                self.shared.view.publish(&mut changes);
                for answer in answers {
                    answer();
                }
            }
        }
    }

    /// Publishes what is queued to the view: called just before the answers that depend on
    /// it are given (see [`super::view`]).
    fn publish(&mut self) {
        self.shared.view.publish(&mut self.unpublished);
    }

    /// Removes generation `old` on a blocking worker, and has the store told when it is gone.
    fn start_removal(&mut self, ctx: &mut actors::Context<Self>, old: u64) {
        let (store, incarnation) = (ctx.actor_ref(), self.incarnation);
        let removing = self.shared.context.clone().shared(true);
        let (removed, finished) = futures::channel::oneshot::channel();
        self.removal = Some(finished);
        drop(removing.spawn(move |runtime| async move {
            if let Err(error) = recovery::remove_generation(&runtime, old).await {
                removal_failed(&error);
            }
            let _ = removed.send(());
            let _ = store.tell_retired(incarnation).await;
        }));
    }

    /// Runs one operation: the data changes at once, and its records are queued.
    fn apply_op(&mut self, op: Op) -> Outcome {
        match op {
            Op::Get(key) => Outcome::Value(self.value(&key)),
            Op::GetMany(keys) => Outcome::Values(keys.iter().map(|key| self.value(key)).collect()),
            Op::Exists(keys) => {
                Outcome::Count(keys.iter().filter(|key| self.live(key).is_some()).count() as i64)
            }
            Op::Set {
                key,
                value,
                when,
                expiry,
                get,
            } => {
                let current = self
                    .live(&key)
                    .map(|entry| (entry.value.clone(), entry.expires));
                let previous = current.as_ref().map(|(value, _)| value.clone());
                let allowed = match when {
                    When::Always => true,
                    When::Absent => current.is_none(),
                    When::Present => current.is_some(),
                };
                if allowed {
                    let expires = match expiry {
                        Expiry::Never => None,
                        Expiry::Keep => current.and_then(|(_, expires)| expires),
                        Expiry::At(deadline) => Some(deadline),
                    };
                    self.put(key, value, expires);
                }
                if get {
                    Outcome::Value(previous)
                } else {
                    Outcome::Applied(allowed)
                }
            }
            Op::SetMany { pairs, absent } => {
                if absent && pairs.iter().any(|(key, _)| self.live(key).is_some()) {
                    return Outcome::Applied(false);
                }
                for (key, value) in pairs {
                    self.put(key, value, None);
                }
                Outcome::Applied(true)
            }
            Op::Add(key, by) => {
                let (current, expires) = match self.live(&key) {
                    None => (Some(0), None),
                    Some(entry) => (super::commands::parse_integer(&entry.value), entry.expires),
                };
                let Some(current) = current else {
                    return Outcome::error("value is not an integer or out of range");
                };
                let Some(next) = current.checked_add(by) else {
                    return Outcome::error("increment or decrement would overflow");
                };
                self.put(key, next.to_string().into_bytes().into(), expires);
                Outcome::Count(next)
            }
            Op::AddFloat(key, by) => {
                let (current, expires) = match self.live(&key) {
                    None => (Some(super::float::LongDouble::ZERO), None),
                    Some(entry) => (super::float::LongDouble::parse(&entry.value), entry.expires),
                };
                let (Some(current), Some(by)) = (current, super::float::LongDouble::parse(&by))
                else {
                    return Outcome::error("value is not a valid float");
                };
                let Some(sum) = current.plus(by).finite() else {
                    return Outcome::error("increment would produce NaN or Infinity");
                };
                let text = Bytes::from(sum.to_human().into_bytes());
                self.put(key, text.clone(), expires);
                Outcome::Value(Some(text))
            }
            Op::Append(key, suffix) => {
                let (mut value, expires) = match self.live(&key) {
                    None => (Vec::new(), None),
                    Some(entry) => (entry.value.to_vec(), entry.expires),
                };
                if value.len() + suffix.len() > log::MAX_FIELD {
                    return too_long();
                }
                value.extend_from_slice(&suffix);
                let length = value.len() as i64;
                self.put(key, value.into(), expires);
                Outcome::Count(length)
            }
            Op::SetRange(key, offset, patch) => {
                let current = self
                    .live(&key)
                    .map(|entry| (entry.value.clone(), entry.expires));
                // Nothing to write: the length as it is, and nothing changes (as Redis).
                if patch.is_empty() {
                    return Outcome::Count(current.map_or(0, |(value, _)| value.len() as i64));
                }
                let end = offset.saturating_add(patch.len());
                if end > log::MAX_FIELD {
                    return too_long();
                }
                let (old, expires) = current.unwrap_or_default();
                let mut value = old.to_vec();
                if value.len() < end {
                    value.resize(end, 0);
                }
                value[offset..end].copy_from_slice(&patch);
                let length = value.len() as i64;
                self.put(key, value.into(), expires);
                Outcome::Count(length)
            }
            Op::GetRange(key, start, end) => {
                let value = self.value(&key).unwrap_or_default();
                Outcome::Value(Some(range(&value, start, end)))
            }
            Op::Strlen(key) => {
                Outcome::Count(self.value(&key).map_or(0, |value| value.len() as i64))
            }
            Op::GetDel(key) => {
                let value = self.value(&key);
                if value.is_some() {
                    self.remove(key);
                }
                Outcome::Value(value)
            }
            Op::GetEx(key, change) => {
                let Some(value) = self.value(&key) else {
                    return Outcome::Value(None);
                };
                match change {
                    // Checked only once the key is found, as Redis does.
                    Err(error) => return Outcome::Error(error),
                    Ok(ExpiryChange::Keep) => {}
                    Ok(ExpiryChange::Persist) => {
                        if self
                            .data
                            .get(&key)
                            .is_some_and(|entry| entry.expires.is_some())
                        {
                            self.set_expiry(key, None);
                        }
                    }
                    Ok(ExpiryChange::At(deadline)) => self.expire_at(key, deadline),
                }
                Outcome::Value(Some(value))
            }
            Op::Del(keys) => {
                let mut count = 0;
                for key in keys {
                    if self.live(&key).is_some() {
                        self.remove(key);
                        count += 1;
                    }
                }
                Outcome::Count(count)
            }
            Op::Expire { key, at, condition } => {
                let Some(current) = self.live(&key).map(|entry| entry.expires) else {
                    return Outcome::Applied(false);
                };
                if !condition.allows(current.map(|deadline| deadline as i64), at) {
                    return Outcome::Applied(false);
                }
                self.expire_at(key, at);
                Outcome::Applied(true)
            }
            Op::Persist(key) => {
                let Some(current) = self.live(&key).map(|entry| entry.expires) else {
                    return Outcome::Applied(false);
                };
                if current.is_none() {
                    return Outcome::Applied(false);
                }
                self.set_expiry(key, None);
                Outcome::Applied(true)
            }
            Op::TimeToLive(key) => {
                Outcome::Count(match self.live(&key).map(|entry| entry.expires) {
                    None => -2,
                    Some(None) => -1,
                    Some(Some(deadline)) => deadline.saturating_sub(log::now_ms()) as i64,
                })
            }
            Op::ExpireTime(key) => {
                Outcome::Count(match self.live(&key).map(|entry| entry.expires) {
                    None => -2,
                    Some(None) => -1,
                    Some(Some(deadline)) => deadline as i64,
                })
            }
            Op::Type(key) => Outcome::Applied(self.live(&key).is_some()),
            Op::Rename { from, to, absent } => {
                let Some((value, expires)) = self
                    .live(&from)
                    .map(|entry| (entry.value.clone(), entry.expires))
                else {
                    return Outcome::error("no such key");
                };
                if from == to {
                    return Outcome::Applied(!absent);
                }
                if absent && self.live(&to).is_some() {
                    return Outcome::Applied(false);
                }
                self.put(to, value, expires);
                self.remove(from);
                Outcome::Applied(true)
            }
            Op::Keys(pattern) => {
                let now = log::now_ms();
                let keys = self
                    .data
                    .entries()
                    .filter(|(key, entry)| {
                        entry.expires.is_none_or(|deadline| deadline > now)
                            && (super::pattern::all(&pattern)
                                || super::pattern::matches(&pattern, key))
                    })
                    .map(|(key, _)| key.clone())
                    .collect();
                Outcome::Keys(keys)
            }
            Op::Scan {
                cursor,
                pattern,
                count,
                strings,
            } => {
                let (next, keys) = self.data.scan(cursor, count, log::now_ms());
                let keys = keys
                    .into_iter()
                    .filter(|key| {
                        strings
                            && pattern
                                .as_ref()
                                .is_none_or(|pattern| super::pattern::matches(pattern, key))
                    })
                    .collect();
                Outcome::Scanned(next, keys)
            }
            Op::RandomKey => {
                self.sweep(usize::MAX);
                if self.data.is_empty() {
                    return Outcome::Value(None);
                }
                let at = self.random() as usize % self.data.len();
                let key = self.data.nth(at).map(|(key, _)| key.clone());
                Outcome::Value(key.map(Bytes::from))
            }
            Op::Flush => {
                self.watches.flushed(&self.data);
                self.data = Data::default();
                self.queue(&Record::Flush);
                Outcome::Done
            }
            Op::Size => {
                self.sweep(usize::MAX);
                Outcome::Size(self.data.len(), self.data.expiring())
            }
            Op::Info => {
                self.sweep(usize::MAX);
                Outcome::Info {
                    keys: self.data.len(),
                    expires: self.data.expiring(),
                    syncs: self.syncs,
                    rewriting: self.rewrite.is_some()
                        || self.rewrite_asked
                        || self.removal.is_some(),
                }
            }
            Op::Rewrite => {
                if self.rewrite.is_some() || self.rewrite_asked {
                    return Outcome::Applied(false);
                }
                self.rewrite_asked = true;
                Outcome::Applied(true)
            }
            Op::Durability => Outcome::Durability(self.durability().name()),
            Op::Watch(session, keys) => {
                for key in &keys {
                    // An expired key is removed first: its removal is not a change after the
                    // WATCH (Redis's rule for a key already expired when watched).
                    self.live(key);
                }
                self.watches.watch(session, keys);
                Outcome::Done
            }
            Op::Unwatch(session) => {
                self.watches.unwatch(session);
                Outcome::Done
            }
            Op::Exec {
                session,
                watched,
                ops,
            } => {
                // A watched key that has expired since changed: found (and removed) here.
                for key in self.watches.keys_of(session) {
                    self.live(&key);
                }
                // Watched, but unknown here: this incarnation started after the WATCH, and
                // cannot tell what changed since; the transaction is refused.
                let clean = match self.watches.unwatch(session) {
                    Some(dirty) => !dirty,
                    None => !watched,
                };
                if !clean {
                    return Outcome::Exec(None);
                }
                Outcome::Exec(Some(ops.into_iter().map(|op| self.apply_op(op)).collect()))
            }
        }
    }

    /// The live value at `key`.
    fn value(&mut self, key: &[u8]) -> Option<Bytes> {
        self.live(key).map(|entry| entry.value.clone())
    }

    /// Sets `key` to `value` until `expires`, logged; a deadline already due removes it
    /// instead (an `EXAT` in the past: set, and gone at once, as in Redis).
    fn put(&mut self, key: Vec<u8>, value: Bytes, expires: Option<u64>) {
        if expires.is_some_and(|deadline| deadline <= log::now_ms()) {
            // Logged even if the key was absent: it was set (a change a `WATCH` sees, as in
            // Redis), and is gone.
            self.data.remove(&key);
            self.queue(&Record::Del { key });
        } else {
            self.record(Record::Set {
                key,
                value,
                expires,
            });
        }
    }

    /// Removes `key`, logged (if it is there).
    fn remove(&mut self, key: Vec<u8>) {
        if self.data.remove(&key).is_some() {
            self.queue(&Record::Del { key });
        }
    }

    /// Gives the present `key` the deadline `at` (milliseconds since the epoch, possibly
    /// negative): one at or before now removes it, as Redis does.
    fn expire_at(&mut self, key: Vec<u8>, at: i64) {
        if at <= log::now_ms() as i64 {
            self.remove(key);
        } else {
            self.set_expiry(key, Some(at as u64));
        }
    }

    /// Changes the present `key`'s expiry, logged.
    fn set_expiry(&mut self, key: Vec<u8>, expires: Option<u64>) {
        self.data.set_expiry(&key, expires);
        self.queue(&Record::Expire { key, expires });
    }

    /// The next of the store's pseudo-random numbers (xorshift; `RANDOMKEY` needs no more).
    fn random(&mut self) -> u64 {
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed = x;
        x
    }

    /// Queues `record` and applies it to the data.
    fn record(&mut self, record: Record) {
        self.queue(&record);
        self.data.apply(record);
    }

    /// Removes `key` because it expired, and logs it.
    fn expire(&mut self, key: &[u8]) {
        if self.data.remove(key).is_some() {
            self.queue(&Record::Del { key: key.to_vec() });
        }
    }

    /// The live entry at `key`: an expired one is removed first.
    fn live(&mut self, key: &[u8]) -> Option<&Entry> {
        if self.data.expiring() == 0 {
            // Nothing expires: one lookup.
            return self.data.get(key);
        }
        let expired = self
            .data
            .get(key)?
            .expires
            .is_some_and(|deadline| deadline <= log::now_ms());
        if expired {
            self.expire(key);
            return None;
        }
        self.data.get(key)
    }

    /// Removes what is due, at most `limit` keys.
    fn sweep(&mut self, limit: usize) {
        for key in self.data.expired(log::now_ms(), limit) {
            self.expire(&key);
        }
    }

    /// Starts a rewrite if the log has grown past its bound and none is under way.
    fn consider_rewrite(&mut self, ctx: &mut actors::Context<Self>) {
        let options = &self.shared.options;
        if self.syncer.is_none() {
            return;
        }
        let size = self.log_size.load(std::sync::atomic::Ordering::Relaxed);
        let live = self.data.live_bytes() as u64;
        let grown = size >= options.rewrite_min_bytes
            && size >= live.saturating_mul(options.rewrite_ratio)
            && self
                .rewrite_after
                .is_none_or(|after| runtime::clock::now() >= after);
        if self.rewrite.is_some() || self.removal.is_some() || !(grown || self.rewrite_asked) {
            return;
        }
        // Taken here, before the task exists, so a restarted incarnation that finds it free
        // knows no rewrite of its predecessor is still to write; busy (an earlier
        // incarnation's rewrite still writing), this one waits for a later commit.
        let Some(writing) = self.shared.rewriting.clone().try_lock_owned() else {
            return;
        };
        self.rewrite_asked = false;
        self.rewrite = Some(Rewrite { since: Vec::new() });
        // The snapshot: shared with the data shard by shard (a shard is copied when a write
        // changes it), so taking it costs no copy of the keys, and writes go on meanwhile.
        let snapshot = self.data.snapshot();
        let generation = self.generation + 1;
        let (store, incarnation, shared) = (ctx.actor_ref(), self.incarnation, self.shared.clone());
        // On a thread of its own, at a low priority: encoding a large snapshot takes the
        // CPU for a while, which the connection actors and the store must not wait behind.
        drop(
            self.shared
                .context
                .clone()
                .dedicated()
                .spawn(move |runtime| async move {
                    lower_this_threads_priority();
                    let written =
                        recovery::write_generation(&runtime, &shared.cache, generation, &snapshot)
                            .await;
                    // Released before the report: a restarted incarnation waits for it, and
                    // takes no message until it has it.
                    drop(writing);
                    let _ = match written {
                        Ok(writer) => store.tell_rewritten(incarnation, generation, writer).await,
                        Err(error) => {
                            store
                                .tell_rewrite_failed(incarnation, error.to_string())
                                .await
                        }
                    };
                }),
        );
    }
}

#[actor]
impl Store {
    /// Takes what the service recovered (the first incarnation), or recovers the log (a
    /// restarted one), and starts the timers.
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let recovered = self
            .shared
            .recovered
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        let opened = match recovered {
            Some(opened) => opened,
            // A restart: the previous incarnation's writes were made by its own thread, all
            // done before it ended; its rewrite, if one is running, finishes with the file
            // first.
            None => {
                drop(self.shared.rewriting.lock().await);
                let opened = recovery::open(
                    ctx.runtime(),
                    &self.shared.cache,
                    self.shared.options.torn_tail(),
                )
                .await
                .unwrap_or_else(|error| panic!("kv: {error}"));
                self.shared.report_recovery(&opened);
                // What the predecessor published is all in the log; what it queued and did
                // not publish may be too (synced, not yet answered): the view starts again
                // from the replay.
                self.shared.view.reset(&opened.data);
                opened
            }
        };
        self.data = opened.data;
        self.generation = opened.generation;
        let writer = opened.writer;
        self.log_size
            .store(writer.size(), std::sync::atomic::Ordering::Relaxed);
        let (jobs, queue) = futures::channel::mpsc::unbounded();
        let (done, syncer_done) = futures::channel::oneshot::channel();
        self.syncer = Some(jobs);
        self.syncer_done = Some(syncer_done);
        let (store, incarnation) = (ctx.weak_ref(), self.incarnation);
        let (size, durable) = (self.log_size.clone(), self.durable.clone());
        // In the service's scope, not the actor's: it finishes the commits handed to it,
        // which `on_stop` waits for, whatever ends the incarnation.
        drop(
            self.shared
                .context
                .clone()
                .dedicated()
                .spawn(move |_| sync_jobs(writer, queue, store, incarnation, size, durable, done)),
        );
        ctx.run_every(SWEEP_EVERY, |store: &mut Store, ctx| {
            store.catch_up(ctx);
            store.sweep(SWEEP_KEYS);
            store.want_commit(ctx);
        });
        if self.durability() != Durability::Always {
            ctx.run_every(Duration::from_secs(1), |store: &mut Store, ctx| {
                store.want_commit(ctx)
            });
        }
    }

    /// A clean stop syncs what is queued (with `everysec` and `none` too), and gives the
    /// answers waiting for it (and for a removal still running). After a panic nothing queued
    /// is synced: it may be half of a transaction. Either way the syncer finishes what it was
    /// handed first: a restarted incarnation opens the log only once no write of this one is
    /// under way.
    async fn on_stop(&mut self, _ctx: &mut actors::Context<Self>, reason: &actors::ExitReason) {
        let panicked = matches!(reason, actors::ExitReason::Panicked(_));
        if !panicked {
            self.hand(None, true);
        }
        // What is queued after a panic may be half a transaction (a panic in the middle of
        // `EXEC`): never made durable. It was not acknowledged (or, with `everysec` and
        // `none`, is what a crash may lose); the restarted store replays the log as it is.
        self.syncer = None;
        let Some(done) = self.syncer_done.take() else {
            return;
        };
        if done.await.is_err() || panicked {
            // The syncer was dropped with the runtime: nothing more is answered.
            return;
        }
        // Every commit handed is durable now. One that a rewrite's generation took over is
        // not answered, nor anything after it: its predecessor is not removed (a fresh start
        // removes it).
        if self
            .in_flight
            .iter()
            .any(|in_flight| in_flight.retiring.is_some())
        {
            return;
        }
        // Answers that wait for a removal still running are given once it is done; if it
        // never finishes (the runtime stopping aborted it), they are dropped: their askers see
        // an error, as after a failure.
        if let Some(finished) = self.removal.take()
            && finished.await.is_err()
        {
            return;
        }
        self.shared.view.publish(&mut self.held_changes);
        for answer in std::mem::take(&mut self.held) {
            answer();
        }
        for in_flight in std::mem::take(&mut self.in_flight) {
            let mut changes = in_flight.changes;
            self.shared.view.publish(&mut changes);
            for answer in in_flight.answers {
                answer();
            }
        }
    }

    /// Hands what is queued to the syncer: queued by the first record of a group (see the
    /// [module](self)), and by the timers.
    async fn commit(&mut self, _ctx: &mut actors::Context<Self>) {
        self.commit_queued = false;
        self.start_commit();
    }

    /// The syncer is done with commit `number` and those before it: their answers are given.
    async fn synced(&mut self, ctx: &mut actors::Context<Self>, incarnation: u64, number: u64) {
        if incarnation != self.incarnation {
            return;
        }
        self.finish_commits(ctx, number);
        self.consider_rewrite(ctx);
    }

    /// Runs `ops` in order, as one message, and replies with their outcomes, in order, once
    /// what they wrote and read is durable (see `answer`): a pipeline's commands, or one.
    pub async fn run(
        &mut self,
        ctx: &mut actors::Context<Self>,
        ops: Vec<Op>,
        reply: actors::Reply<Vec<Outcome>>,
    ) {
        self.catch_up(ctx);
        let outcomes: Vec<Outcome> = ops.into_iter().map(|op| self.apply_op(op)).collect();
        if self.durability() != Durability::Always && self.pending.len() >= QUEUED_BOUND {
            self.want_commit(ctx);
        }
        self.answer(ctx, move || reply.send(outcomes));
        if self.rewrite_asked {
            self.consider_rewrite(ctx);
        }
        if !self.commit_queued && !self.answers.is_empty() {
            // The mailbox is full, so the group is large already: committed now rather
            // than behind senders that may keep winning the freed places.
            self.start_commit();
        }
    }

    /// A rewrite is written: it becomes the log now. Its first commit carries what was
    /// logged since its snapshot (everything queued included), then `Current`; the
    /// generation it replaces is removed once that commit is done.
    async fn rewritten(
        &mut self,
        _ctx: &mut actors::Context<Self>,
        incarnation: u64,
        generation: u64,
        writer: Writer,
    ) {
        if incarnation != self.incarnation {
            // A rewrite of an earlier incarnation: the next start discards it, never having
            // been the store.
            return;
        }
        let Some(Rewrite { since }) = self.rewrite.take() else {
            return;
        };
        // What is queued is a suffix of `since`, or was logged before the snapshot (which
        // holds its effect): the new log takes `since`, then `Current`.
        self.pending = since;
        Record::Current.encode(&mut self.pending);
        self.retiring = Some(self.generation);
        self.generation = generation;
        self.hand(Some(writer), false);
    }

    /// The generation a rewrite replaced is gone: the answers that waited for it are given.
    fn retired(&mut self, ctx: &mut actors::Context<Self>, incarnation: u64) {
        if incarnation != self.incarnation {
            return;
        }
        self.removal = None;
        self.shared.view.publish(&mut self.held_changes);
        for answer in std::mem::take(&mut self.held) {
            answer();
        }
        // A `BGREWRITEAOF` that came while the removal ran.
        self.consider_rewrite(ctx);
    }

    /// A rewrite failed: the log stays as it is, and a later one may try again.
    fn rewrite_failed(&mut self, incarnation: u64, error: String) {
        if incarnation == self.incarnation {
            eprintln!(
                "kv: rewriting the log failed ({error}); it stays as it is, and the next \
                 rewrite waits a minute"
            );
            self.rewrite = None;
            self.rewrite_after = Some(runtime::clock::now() + REWRITE_BACKOFF);
        }
    }

    /// Fails on purpose: for showing a supervised restart.
    pub fn fail(&mut self) {
        panic!("kv store failing on purpose");
    }
}

/// When a `SET` applies: always, or only if the key is absent (`NX`) or present (`XX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Whatever the key holds.
    Always,
    /// Only if the key is absent (`NX`).
    Absent,
    /// Only if the key is present (`XX`).
    Present,
}

/// The expiry a `SET` gives its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// None (a plain `SET` clears any).
    Never,
    /// The key's current one (`KEEPTTL`).
    Keep,
    /// At this many milliseconds since the Unix epoch (`EX`, `PX`, `EXAT`, `PXAT`).
    At(u64),
}

/// What `GETEX` does to the expiry of the key it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryChange {
    /// Nothing (no option).
    Keep,
    /// Removes it (`PERSIST`).
    Persist,
    /// At this many milliseconds since the epoch (`EX`, `PX`, `EXAT`, `PXAT`).
    At(i64),
}

/// The condition of an `EXPIRE` (`NX`, `XX`, `GT`, `LT`), as Redis 7 reads it: no expiry
/// counts as an infinite one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Condition {
    /// Only if the key has no expiry (`NX`).
    pub nx: bool,
    /// Only if the key has an expiry (`XX`).
    pub xx: bool,
    /// Only if the new expiry is later (`GT`).
    pub gt: bool,
    /// Only if the new expiry is earlier (`LT`).
    pub lt: bool,
}

impl Condition {
    /// Whether a key whose deadline is `current` (`None`: none) may take `at`.
    pub fn allows(self, current: Option<i64>, at: i64) -> bool {
        !(self.nx && current.is_some()
            || self.xx && current.is_none()
            || self.gt && current.is_none_or(|current| at <= current)
            || self.lt && current.is_some_and(|current| at >= current))
    }
}

/// One operation of [`Store::run`]: what a command asks of the store.
#[derive(Debug)]
pub enum Op {
    /// `GET`.
    Get(Vec<u8>),
    /// `MGET`.
    GetMany(Vec<Vec<u8>>),
    /// `EXISTS`: a key counted as often as named.
    Exists(Vec<Vec<u8>>),
    /// `SET`, if `when` allows, with `expiry`; answered with the previous value if `get`.
    Set {
        /// The key.
        key: Vec<u8>,
        /// Its new value.
        value: Bytes,
        /// When the `SET` applies.
        when: When,
        /// The expiry it gives the key.
        expiry: Expiry,
        /// Answer with the previous value (`GET`).
        get: bool,
    },
    /// `MSET` (every pair, their expiry cleared), or `MSETNX` (`absent`: all of them only
    /// if none is there).
    SetMany {
        /// The keys and their values.
        pairs: Vec<(Vec<u8>, Bytes)>,
        /// All of them only if none is there (`MSETNX`).
        absent: bool,
    },
    /// `INCRBY`: adds to the integer at the key (0 if absent), keeping its expiry.
    Add(Vec<u8>, i64),
    /// `INCRBYFLOAT`: adds the number written (as Redis reads one) to the key's, keeping
    /// its expiry.
    AddFloat(Vec<u8>, Vec<u8>),
    /// `APPEND`, keeping the expiry.
    Append(Vec<u8>, Vec<u8>),
    /// `SETRANGE`: the bytes written at the offset, zeros before them if the value is
    /// shorter, keeping the expiry.
    SetRange(Vec<u8>, usize, Vec<u8>),
    /// `GETRANGE`, with Redis's reading of negative and out-of-range indexes.
    GetRange(Vec<u8>, i64, i64),
    /// `STRLEN`.
    Strlen(Vec<u8>),
    /// `GETDEL`.
    GetDel(Vec<u8>),
    /// `GETEX`: the value, and its expiry changed; the error (a bad expire time) is the
    /// answer only if the key is there, as in Redis.
    GetEx(Vec<u8>, Result<ExpiryChange, String>),
    /// `DEL` and `UNLINK`.
    Del(Vec<Vec<u8>>),
    /// `EXPIRE` and its kin: the deadline in milliseconds since the epoch (at or before now
    /// removes the key), if `condition` allows.
    Expire {
        /// The key.
        key: Vec<u8>,
        /// The deadline, in milliseconds since the Unix epoch.
        at: i64,
        /// When the new expiry applies.
        condition: Condition,
    },
    /// `PERSIST`.
    Persist(Vec<u8>),
    /// `PTTL`: milliseconds left.
    TimeToLive(Vec<u8>),
    /// `PEXPIRETIME`: the deadline in milliseconds since the epoch.
    ExpireTime(Vec<u8>),
    /// `TYPE`: whether the key is there (every value is a string).
    Type(Vec<u8>),
    /// `RENAME`, or `RENAMENX` (`absent`), keeping the expiry.
    Rename {
        /// The key renamed.
        from: Vec<u8>,
        /// Its new name.
        to: Vec<u8>,
        /// Only if the new name is free (`RENAMENX`).
        absent: bool,
    },
    /// `KEYS`: the live keys matching the pattern.
    Keys(Vec<u8>),
    /// `SCAN`: a page of `count` live keys from `cursor` (see
    /// [`Shards::scan`](super::shards::Shards::scan)), those matching `pattern` answered
    /// (none unless `strings`: the `TYPE` asked for).
    Scan {
        /// Where the page starts.
        cursor: u64,
        /// The keys' pattern, if any.
        pattern: Option<Vec<u8>>,
        /// How many keys the page visits.
        count: usize,
        /// Whether the keys are answered (the `TYPE` asked for was `string`, or none).
        strings: bool,
    },
    /// `RANDOMKEY`.
    RandomKey,
    /// `FLUSHALL`.
    Flush,
    /// `DBSIZE`: keys and keys with an expiry, what is due removed first.
    Size,
    /// `INFO`: as `Size`, and the syncs of the log so far.
    Info,
    /// `BGREWRITEAOF`: a rewrite now, whatever the log's size; `Applied(false)` if one is
    /// under way.
    Rewrite,
    /// The durability kept (`CONFIG GET appendfsync`).
    Durability,
    /// `WATCH`: the session's keys, any change to which from now aborts its `EXEC`.
    Watch(u64, Vec<Vec<u8>>),
    /// `UNWATCH` (and `DISCARD`, and a connection leaving).
    Unwatch(u64),
    /// `EXEC`: the queued operations run as one unit (no other operation between them,
    /// their records in one commit), unless a key the session watched changed. `watched`:
    /// the session watched keys (a store restarted since has no record of them).
    Exec {
        /// The session's id.
        session: u64,
        /// Whether the session watched keys.
        watched: bool,
        /// The queued operations, in order.
        ops: Vec<Op>,
    },
}

/// What an [`Op`] gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A value, or nil.
    Value(Option<Bytes>),
    /// Values, each or nil.
    Values(Vec<Option<Bytes>>),
    /// Whether a `SET` or an `EXPIRE` applied.
    Applied(bool),
    /// A count, or an integer.
    Count(i64),
    /// Done, nothing to answer.
    Done,
    /// Keys, and keys with an expiry.
    Size(usize, usize),
    /// What `INFO` reports.
    Info {
        /// How many keys there are.
        keys: usize,
        /// How many of them have an expiry.
        expires: usize,
        /// How many syncs of the log so far.
        syncs: u64,
        /// A rewrite is under way or asked for.
        rewriting: bool,
    },
    /// The durability kept (`appendfsync`).
    Durability(&'static str),
    /// Keys.
    Keys(Vec<Vec<u8>>),
    /// The next cursor, and the page's keys.
    Scanned(u64, Vec<Vec<u8>>),
    /// Redis's error, its whole text (`ERR ...`).
    Error(String),
    /// The outcomes of a transaction's operations, or `None` if a watched key changed.
    Exec(Option<Vec<Outcome>>),
}

impl Outcome {
    /// `-ERR <text>`.
    fn error(text: &str) -> Outcome {
        Outcome::Error(format!("ERR {text}"))
    }
}

/// A value would pass the largest the log takes.
fn too_long() -> Outcome {
    Outcome::Error(format!(
        "ERR string exceeds maximum allowed size ({} bytes here)",
        log::MAX_FIELD
    ))
}

/// `GETRANGE`'s slice of `value`, as Redis computes it: negative indexes count from the
/// end, both are clamped, and an empty range is an empty string.
fn range(value: &Bytes, start: i64, end: i64) -> Bytes {
    let length = value.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Bytes::new();
    }
    let start = if start < 0 { length + start } else { start }.max(0);
    let end = if end < 0 { length + end } else { end }
        .max(0)
        .min(length - 1);
    if start > end || length == 0 {
        return Bytes::new();
    }
    // Shared with the stored value, as every other read's reply is: a reply holds no copy.
    value.slice(start as usize..=end as usize)
}

/// The keys sessions watch, and which sessions saw one change since: what `EXEC` checks.
#[derive(Default)]
struct Watches {
    sessions: HashMap<u64, Watching>,
    by_key: HashMap<Vec<u8>, Vec<u64>>,
}

struct Watching {
    keys: HashSet<Vec<u8>>,
    dirty: bool,
}

impl Watches {
    fn watch(&mut self, session: u64, keys: Vec<Vec<u8>>) {
        let watching = self.sessions.entry(session).or_insert_with(|| Watching {
            keys: HashSet::new(),
            dirty: false,
        });
        for key in keys {
            if watching.keys.insert(key.clone()) {
                self.by_key.entry(key).or_default().push(session);
            }
        }
    }

    /// A change to `key`: every session watching it is dirty.
    fn touch(&mut self, key: &[u8]) {
        if self.by_key.is_empty() {
            return;
        }
        if let Some(sessions) = self.by_key.get(key) {
            for session in sessions {
                if let Some(watching) = self.sessions.get_mut(session) {
                    watching.dirty = true;
                }
            }
        }
    }

    /// A flush: every watched key there now changes.
    fn flushed(&mut self, data: &Data) {
        let present: Vec<Vec<u8>> = self
            .by_key
            .keys()
            .filter(|key| data.get(key).is_some())
            .cloned()
            .collect();
        for key in present {
            self.touch(&key);
        }
    }

    fn keys_of(&self, session: u64) -> Vec<Vec<u8>> {
        self.sessions
            .get(&session)
            .map(|watching| watching.keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets the session's keys: whether one changed, `None` if it watched none here.
    fn unwatch(&mut self, session: u64) -> Option<bool> {
        let watching = self.sessions.remove(&session)?;
        for key in &watching.keys {
            if let Some(sessions) = self.by_key.get_mut(key) {
                sessions.retain(|watcher| *watcher != session);
                if sessions.is_empty() {
                    self.by_key.remove(key);
                }
            }
        }
        Some(watching.dirty)
    }
}

/// Ends the process after the log a rewrite replaced could not be removed: answering from
/// the new generation while the old one exists would let a start that finds the new one
/// damaged take the old one for the store, without the writes answered since. Nothing of
/// the batch was answered; a fresh start finds the new generation (it says `Current`) and
/// removes the old one (or, if removing still fails, refuses to start and says why).
fn removal_failed(error: &runtime::Error) -> ! {
    eprintln!(
        "kv: removing the log a rewrite replaced failed ({error}); stopping before anything \
         is answered from the new log (a fresh start removes the old one, or says why it \
         cannot)"
    );
    std::process::exit(1);
}

/// Gives the calling thread a low scheduling priority (nice 10: about a tenth of a core when
/// it competes with normal threads, so a loaded server still finishes), for a thread that only
/// does background work and ends with it: the rewrite's. Best effort: if the system refuses,
/// the thread runs at its usual priority.
fn lower_this_threads_priority() {
    // SAFETY: `gettid` has no preconditions; `setpriority` with `PRIO_PROCESS` and a thread id
    // changes that thread's nice value and touches no memory of ours.
    unsafe {
        let thread = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, 10);
    }
}

/// Ends the process after a failed write or sync of the log. Not a restart: after a failed
/// sync the kernel may have dropped the pages it could not write while still serving them
/// from its cache, so a restarted store would read back, and build on, bytes that are not on
/// the disk. As Redis and PostgreSQL do, the process ends; a fresh start reads the disk.
fn sync_failed(error: &runtime::Error) -> ! {
    eprintln!(
        "kv: writing or syncing the log failed ({error}); stopping: what was written may not \
         be on the disk, and only a fresh start reads what is"
    );
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::range;
    use bytes::Bytes;

    /// `GETRANGE`'s reply shares the stored bytes (a reply holds no copy), with Redis's
    /// offsets: negative from the end, clamped, empty when inverted.
    #[test]
    fn a_range_shares_the_stored_bytes() {
        let value = Bytes::from(b"hello world".to_vec());
        let part = range(&value, 6, -1);
        assert_eq!(&part[..], b"world");
        assert_eq!(part.as_ptr(), value[6..].as_ptr(), "no copy");
        assert_eq!(&range(&value, -100, 4)[..], b"hello");
        assert!(range(&value, 5, 2).is_empty());
        assert!(range(&value, -1, -100).is_empty());
        assert!(range(&Bytes::new(), 0, -1).is_empty());
    }
}
