//! The storage actor: the data in memory, the log that rebuilds it, group commit, expiry and
//! the rewrite that keeps the log near the size of the live data.
//!
//! Invariants:
//! - **Nothing is answered before it is durable** (with `--durability always`): a write is
//!   answered once the sync that carries its record is done, and a reply that writes
//!   nothing (a read, a refused `SET NX`) once what it read is durable (see `answer`). With
//!   `everysec` and `none` writes are answered at once and synced by a timer (every second)
//!   or never, as Redis does; a crash then loses what was not synced.
//! - **One sync at a time**, in a task of its own that takes the writer and every record
//!   queued when it started, answers them when the sync is done, and hands the writer back.
//!   Writes that arrive meanwhile wait for the next sync, which starts when that one ends:
//!   one sync serves a whole group.
//! - **The gate**: a sync holds `Shared::gate` from before its task exists until its sync is
//!   done, and an incarnation opens the log only with the gate, so no write of an old
//!   incarnation lands after a new one read the log.
//! - **A rewrite never holds what is not in its predecessor** until it is the store: it is
//!   the snapshot of the data at one moment, then every record logged since (kept aside while
//!   it was written), then `Current`, all in the first sync to the new generation. Its
//!   predecessor is removed only when that sync is done. See [`super::log`].
//! - **Expired keys never come back**: deadlines are wall-clock milliseconds, stored with the
//!   value; a replay drops what is due; an expired key found by a command or the sweep is
//!   removed and its removal logged.

use super::log::{self, Data, Entry, Record};
use super::recovery::{self, Opened};
use actors::prelude::*;
use runtime::buffer::paged::{CacheRef, Writer};
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
    pub durability: Durability,
    /// The log is rewritten when it is past both this many bytes and `rewrite_ratio` times
    /// the live data (`KV_REWRITE_MIN_BYTES`, 64 MiB by default).
    pub rewrite_min_bytes: u64,
    pub rewrite_ratio: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Always,
            rewrite_min_bytes: crate::limits::setting("KV_REWRITE_MIN_BYTES", 64 << 20),
            rewrite_ratio: 2,
        }
    }
}

/// With `everysec` or `none`, a sync (or write) starts early once this much is queued, so
/// what waits in memory stays bounded.
const QUEUED_BOUND: usize = 1 << 20;

/// Expired keys the sweep removes per tick, and how often it runs.
const SWEEP_KEYS: usize = 256;
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// What the store's incarnations share: the gate, where syncs and rewrites run (the
/// service's scope, which outlives incarnations), the count that numbers incarnations, the
/// writer while no incarnation holds it, and what the service recovered before the first
/// incarnation started.
pub struct Shared {
    pub(super) gate: Arc<futures::lock::Mutex<()>>,
    pub(super) context: runtime::Context,
    pub(super) cache: CacheRef,
    pub(super) options: Options,
    incarnations: std::sync::atomic::AtomicU64,
    /// The writer, put back by a sync when it is done, for the next one or for `on_stop`.
    parked: std::sync::Mutex<Option<Writer>>,
    recovered: std::sync::Mutex<Option<Opened>>,
}

impl Shared {
    pub(super) fn new(
        context: runtime::Context,
        cache: CacheRef,
        options: Options,
        recovered: Opened,
    ) -> Self {
        Shared {
            gate: Arc::new(futures::lock::Mutex::new(())),
            context,
            cache,
            options,
            incarnations: std::sync::atomic::AtomicU64::new(0),
            parked: std::sync::Mutex::new(None),
            recovered: std::sync::Mutex::new(Some(recovered)),
        }
    }

    fn park(&self, writer: Writer) {
        *self
            .parked
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(writer);
    }

    fn unpark(&self) -> Option<Writer> {
        self.parked
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take()
    }
}

/// Answers given when a sync is done, and those that arrive while it runs (reads that saw
/// only what it carries): the sync gives them, or, once it is done, whoever brings one.
#[derive(Default)]
struct Flight {
    state: std::sync::Mutex<(bool, Vec<Answer>)>,
}

impl Flight {
    /// Gives `answer` once the sync is done: later, or now if it is.
    fn after(&self, answer: Answer) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if state.0 {
            drop(state);
            answer();
        } else {
            state.1.push(answer);
        }
    }

    /// The sync is done: gives what waits.
    fn land(&self) {
        let waiting = {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            state.0 = true;
            std::mem::take(&mut state.1)
        };
        for answer in waiting {
            answer();
        }
    }
}

/// A rewrite under way: the records logged since its snapshot, and its generation once
/// written.
struct Rewrite {
    since: Vec<u8>,
    ready: Option<(u64, Writer)>,
}

/// The storage actor. See the [module](self) for what it guarantees.
#[actor(dedicated, name = "kv_store", mailbox = 256)]
pub struct Store {
    data: Data,
    /// The log's writer, but while a sync has it.
    writer: Option<Writer>,
    /// The log's generation.
    generation: u64,
    shared: Arc<Shared>,
    /// This incarnation's number: a sync or rewrite reports back to the one that started it.
    incarnation: u64,
    /// Records queued since the last sync started, and the answers waiting for them.
    pending: Vec<u8>,
    answers: Vec<Answer>,
    /// The sync in flight, if any (it holds the writer).
    flight: Option<Arc<Flight>>,
    rewrite: Option<Rewrite>,
    /// The generation to remove once the sync in flight (the new one's first) is done.
    retiring: Option<u64>,
}

impl Store {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let incarnation = shared
            .incarnations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Store {
            data: Data::default(),
            writer: None,
            generation: 0,
            shared,
            incarnation,
            pending: Vec::new(),
            answers: Vec::new(),
            flight: None,
            rewrite: None,
            retiring: None,
        }
    }

    fn durability(&self) -> Durability {
        self.shared.options.durability
    }

    /// Gives a reply that writes nothing once what it read is durable: at once if nothing
    /// is waiting to be synced, else with the sync that carries the newest change it may
    /// have seen. Otherwise a crash could undo what the reply told (a `DEL` answered `0`
    /// for a key whose own deletion was never synced, a `SET NX` refused by a key that comes
    /// back absent). With `everysec` and `none`, at once.
    fn answer(&mut self, answer: impl FnOnce() + Send + 'static) {
        if self.durability() != Durability::Always {
            answer();
        } else if !self.answers.is_empty() {
            self.answers.push(Box::new(answer));
        } else if let Some(flight) = &self.flight {
            flight.after(Box::new(answer));
        } else {
            answer();
        }
    }

    /// Queues `record` for the next sync, and for the rewrite under way.
    fn queue(&mut self, record: &Record) {
        let start = self.pending.len();
        record.encode(&mut self.pending);
        if let Some(rewrite) = &mut self.rewrite {
            rewrite.since.extend_from_slice(&self.pending[start..]);
        }
    }

    /// Logs `records`; `answer` is given once they are durable (with `always`), else now.
    fn log(
        &mut self,
        ctx: &mut actors::Context<Self>,
        records: &[Record],
        answer: impl FnOnce() + Send + 'static,
    ) {
        for record in records {
            self.queue(record);
        }
        if self.durability() == Durability::Always {
            self.answers.push(Box::new(answer));
            self.commit(ctx);
        } else {
            answer();
            if self.pending.len() >= QUEUED_BOUND {
                self.commit(ctx);
            }
        }
    }

    /// Starts a sync of what is queued, unless one is in flight or nothing is queued.
    fn commit(&mut self, ctx: &mut actors::Context<Self>) {
        if self.flight.is_some() || self.pending.is_empty() {
            return;
        }
        // Taken here, before the task exists: from now until the sync is done, a later
        // incarnation cannot open the log. Free: this incarnation opened the log after its
        // predecessor's last sync, and has no other sync in flight.
        let gate = self
            .shared
            .gate
            .clone()
            .try_lock_owned()
            .expect("one sync in flight at a time");
        let writer = self
            .writer
            .take()
            .expect("no sync in flight holds the writer");
        let records = std::mem::take(&mut self.pending);
        let answers = std::mem::take(&mut self.answers);
        let flight = Arc::new(Flight::default());
        self.flight = Some(flight.clone());
        let sync = self.durability() != Durability::None;
        let (store, incarnation, shared) = (ctx.actor_ref(), self.incarnation, self.shared.clone());
        drop(self.shared.context.clone().spawn(move |_| async move {
            let written = match writer.append(&records).await {
                Ok((writer, _)) if sync => writer.sync().await,
                Ok((writer, _)) => Ok(writer),
                Err(error) => Err(error),
            };
            match written {
                Ok(writer) => {
                    // Durable: answered here, whichever incarnation queued them.
                    for answer in answers {
                        answer();
                    }
                    flight.land();
                    shared.park(writer);
                    drop(gate);
                    let _ = store.tell_synced(incarnation).await;
                }
                Err(error) => {
                    drop(gate);
                    let _ = store.tell_sync_failed(incarnation, error.to_string()).await;
                }
            }
        }));
    }

    /// Removes `key` because it expired, and logs it.
    fn expire(&mut self, key: &[u8]) {
        if self.data.remove(key).is_some() {
            self.queue(&Record::Del { key: key.to_vec() });
        }
    }

    /// The live entry at `key`: an expired one is removed first.
    fn live(&mut self, key: &[u8]) -> Option<&Entry> {
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
        let Some(writer) = &self.writer else {
            return;
        };
        let size = writer.size();
        let live = self.data.live_bytes() as u64;
        if self.rewrite.is_some()
            || size < options.rewrite_min_bytes
            || size < live.saturating_mul(options.rewrite_ratio)
        {
            return;
        }
        self.rewrite = Some(Rewrite {
            since: Vec::new(),
            ready: None,
        });
        // The snapshot: a copy, so writes go on while it is written.
        let snapshot = self.data.clone();
        let generation = self.generation + 1;
        let (store, incarnation, shared) = (ctx.actor_ref(), self.incarnation, self.shared.clone());
        drop(
            self.shared
                .context
                .clone()
                .spawn(move |runtime| async move {
                    let written =
                        recovery::write_generation(&runtime, &shared.cache, generation, &snapshot)
                            .await;
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

    /// Makes the written rewrite the log, if one is ready and no sync is in flight: its
    /// first sync carries what was logged since its snapshot and `Current`.
    fn switch_if_ready(&mut self) {
        if self.flight.is_some() {
            return;
        }
        let Some(Rewrite {
            since,
            ready: Some((generation, writer)),
        }) = self.rewrite.take_if(|rewrite| rewrite.ready.is_some())
        else {
            return;
        };
        // What is queued is a suffix of `since`, or was logged before the snapshot (which
        // holds its effect): the new log takes `since`, then `Current`.
        self.pending = since;
        Record::Current.encode(&mut self.pending);
        self.retiring = Some(self.generation);
        self.generation = generation;
        self.writer = Some(writer);
    }
}

#[actor]
impl Store {
    /// Takes what the service recovered (the first incarnation), or recovers the log (a
    /// restarted one), and starts the timers.
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        // After a restart: the last incarnation's sync, if one is in flight, ends first.
        drop(self.shared.gate.lock().await);
        let recovered = self
            .shared
            .recovered
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        let opened = match recovered {
            Some(opened) => opened,
            None => {
                // The previous incarnation's writer, if parked, is let go first: the log is
                // opened afresh from what is on the disk.
                drop(self.shared.unpark());
                recovery::open(ctx.runtime(), &self.shared.cache)
                    .await
                    .unwrap_or_else(|error| panic!("kv: {error}"))
            }
        };
        self.data = opened.data;
        self.generation = opened.generation;
        self.writer = Some(opened.writer);
        ctx.run_every(SWEEP_EVERY, |store: &mut Store, ctx| {
            store.sweep(SWEEP_KEYS);
            if store.durability() == Durability::Always {
                store.commit(ctx);
            }
        });
        if self.durability() != Durability::Always {
            ctx.run_every(Duration::from_secs(1), |store: &mut Store, ctx| {
                store.commit(ctx)
            });
        }
    }

    /// A clean stop syncs what is queued (with `everysec` and `none` too).
    async fn on_stop(&mut self, _ctx: &mut actors::Context<Self>, _reason: &actors::ExitReason) {
        // The sync in flight, if any, ends and parks the writer.
        let gate = self.shared.gate.lock().await;
        let Some(writer) = self.writer.take().or_else(|| self.shared.unpark()) else {
            return;
        };
        let records = std::mem::take(&mut self.pending);
        let synced = match writer.append(&records).await {
            Ok((writer, _)) => writer.sync().await,
            Err(error) => Err(error),
        };
        drop(gate);
        if synced.is_ok() {
            for answer in std::mem::take(&mut self.answers) {
                answer();
            }
        }
    }

    /// Sets `key` to `value` if `when` allows, with `expiry`; replies whether it did.
    pub fn set(
        &mut self,
        ctx: &mut actors::Context<Self>,
        key: Vec<u8>,
        value: Vec<u8>,
        when: When,
        expiry: Expiry,
        reply: actors::Reply<bool>,
    ) {
        let current = self.live(&key).map(|entry| entry.expires);
        let allowed = match when {
            When::Always => true,
            When::Absent => current.is_none(),
            When::Present => current.is_some(),
        };
        if !allowed {
            return self.answer(move || reply.send(false));
        }
        let expires = match expiry {
            Expiry::Never => None,
            Expiry::Keep => current.flatten(),
            Expiry::At(deadline) => Some(deadline),
        };
        if expires.is_some_and(|deadline| deadline <= log::now_ms()) {
            // Already due (an `EXAT` in the past): set, and gone at once, as in Redis.
            self.data.remove(&key);
            return self.log(ctx, &[Record::Del { key }], move || reply.send(true));
        }
        let record = Record::Set {
            key,
            value,
            expires,
        };
        self.log(ctx, std::slice::from_ref(&record), move || reply.send(true));
        self.data.apply(record);
    }

    /// Sets every pair, with one sync for all (`MSET`); clears their expiry.
    pub fn set_many(
        &mut self,
        ctx: &mut actors::Context<Self>,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        reply: actors::Reply<()>,
    ) {
        let records: Vec<Record> = pairs
            .into_iter()
            .map(|(key, value)| Record::Set {
                key,
                value,
                expires: None,
            })
            .collect();
        self.log(ctx, &records, move || reply.send(()));
        for record in records {
            self.data.apply(record);
        }
    }

    /// Adds `by` to the integer at `key` (0 if absent), keeping its expiry; the new value,
    /// or Redis's error.
    pub fn add(
        &mut self,
        ctx: &mut actors::Context<Self>,
        key: Vec<u8>,
        by: i64,
        reply: actors::Reply<Result<i64, String>>,
    ) {
        let (current, expires) = match self.live(&key) {
            None => (Some(0), None),
            Some(entry) => (super::commands::parse_integer(&entry.value), entry.expires),
        };
        let Some(current) = current else {
            let error = "ERR value is not an integer or out of range".to_string();
            return self.answer(move || reply.send(Err(error)));
        };
        let Some(next) = current.checked_add(by) else {
            let error = "ERR increment or decrement would overflow".to_string();
            return self.answer(move || reply.send(Err(error)));
        };
        let record = Record::Set {
            key,
            value: next.to_string().into_bytes(),
            expires,
        };
        self.log(ctx, std::slice::from_ref(&record), move || {
            reply.send(Ok(next))
        });
        self.data.apply(record);
    }

    /// The value at `key`.
    pub fn get(&mut self, key: Vec<u8>, reply: actors::Reply<Option<Vec<u8>>>) {
        let value = self.live(&key).map(|entry| entry.value.clone());
        self.answer(move || reply.send(value));
    }

    /// The values at `keys` (`MGET`).
    pub fn get_many(&mut self, keys: Vec<Vec<u8>>, reply: actors::Reply<Vec<Option<Vec<u8>>>>) {
        let values = keys
            .iter()
            .map(|key| self.live(key).map(|entry| entry.value.clone()))
            .collect();
        self.answer(move || reply.send(values));
    }

    /// How many of `keys` exist, a key counted as often as named (`EXISTS`).
    pub fn exists(&mut self, keys: Vec<Vec<u8>>, reply: actors::Reply<i64>) {
        let count = keys.iter().filter(|key| self.live(key).is_some()).count() as i64;
        self.answer(move || reply.send(count));
    }

    /// Removes `keys`; replies how many were there (`DEL`).
    pub fn del(
        &mut self,
        ctx: &mut actors::Context<Self>,
        keys: Vec<Vec<u8>>,
        reply: actors::Reply<i64>,
    ) {
        let mut removed = Vec::new();
        for key in keys {
            if self.live(&key).is_some() {
                self.data.remove(&key);
                removed.push(Record::Del { key });
            }
        }
        let count = removed.len() as i64;
        if removed.is_empty() {
            return self.answer(move || reply.send(0));
        }
        self.log(ctx, &removed, move || reply.send(count));
    }

    /// Sets or clears the expiry of `key`; replies whether the key exists (`EXPIRE`,
    /// `PERSIST`: for `PERSIST`, whether it had one).
    pub fn expire_at(
        &mut self,
        ctx: &mut actors::Context<Self>,
        key: Vec<u8>,
        expires: Option<u64>,
        reply: actors::Reply<bool>,
    ) {
        let Some(current) = self.live(&key).map(|entry| entry.expires) else {
            return self.answer(move || reply.send(false));
        };
        if expires.is_none() && current.is_none() {
            return self.answer(move || reply.send(false));
        }
        if expires.is_some_and(|deadline| deadline <= log::now_ms()) {
            self.data.remove(&key);
            return self.log(ctx, &[Record::Del { key }], move || reply.send(true));
        }
        self.data.set_expiry(&key, expires);
        self.log(ctx, &[Record::Expire { key, expires }], move || {
            reply.send(true)
        });
    }

    /// Milliseconds `key` has left: `-2` if absent, `-1` if it never expires (`PTTL`).
    pub fn time_to_live(&mut self, key: Vec<u8>, reply: actors::Reply<i64>) {
        let left = match self.live(&key).map(|entry| entry.expires) {
            None => -2,
            Some(None) => -1,
            Some(Some(deadline)) => deadline.saturating_sub(log::now_ms()) as i64,
        };
        self.answer(move || reply.send(left));
    }

    /// Empties the store (`FLUSHALL`).
    pub fn flush(&mut self, ctx: &mut actors::Context<Self>, reply: actors::Reply<()>) {
        self.data = Data::default();
        self.log(ctx, &[Record::Flush], move || reply.send(()));
    }

    /// The number of keys, and of those with an expiry, after removing what is due.
    pub fn size(&mut self, reply: actors::Reply<(usize, usize)>) {
        self.sweep(usize::MAX);
        let size = (self.data.len(), self.data.expiring());
        self.answer(move || reply.send(size));
    }

    /// The durability this store keeps (`CONFIG GET appendfsync`).
    pub fn durability_name(&mut self) -> &'static str {
        self.durability().name()
    }

    /// A sync is done and its writer parked: the next group starts, a rewrite ready to take
    /// over does, a generation it replaced is removed, and a new rewrite may start.
    async fn synced(&mut self, ctx: &mut actors::Context<Self>, incarnation: u64) {
        if incarnation != self.incarnation {
            return;
        }
        self.flight = None;
        self.writer = self.shared.unpark();
        if let Some(old) = self.retiring.take() {
            recovery::remove_generation(ctx.runtime(), old).await;
        }
        self.switch_if_ready();
        self.commit(ctx);
        self.consider_rewrite(ctx);
    }

    /// A sync failed: the store fails (if it was this incarnation's), and restarts from its
    /// log.
    fn sync_failed(&mut self, incarnation: u64, error: String) {
        if incarnation == self.incarnation {
            panic!("kv log sync failed: {error}");
        }
    }

    /// A rewrite is written: it takes over at the next moment no sync is in flight.
    fn rewritten(
        &mut self,
        ctx: &mut actors::Context<Self>,
        incarnation: u64,
        generation: u64,
        writer: Writer,
    ) {
        if incarnation != self.incarnation {
            // A rewrite of an earlier incarnation: the next start discards it, never having
            // been the store.
            return;
        }
        if let Some(rewrite) = &mut self.rewrite {
            rewrite.ready = Some((generation, writer));
        }
        self.switch_if_ready();
        self.commit(ctx);
    }

    /// A rewrite failed: the log stays as it is, and a later one may try again.
    fn rewrite_failed(&mut self, incarnation: u64, error: String) {
        if incarnation == self.incarnation {
            eprintln!("kv: rewriting the log failed ({error}); it stays as it is");
            self.rewrite = None;
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
    Always,
    Absent,
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
