//! The key-value service behind the `kv` and `tour` programs: the Redis protocol (RESP2,
//! and inline commands for `nc` and `telnet`; see [`crate::resp`]) over TCP, connection
//! actors on the pool, one dedicated storage actor owning an append-only log in a paged,
//! checksummed blob, under a supervisor that restarts it on failure, and a `/metrics`
//! endpoint for Prometheus.
//!
//! Commands: `PING`, `ECHO`, `GET`, `SET` (with `NX` or `XX`), `DEL`, `EXISTS`, `INCR`,
//! `DECR`, `INCRBY`, `DECRBY`, `MGET`, `MSET`, `DBSIZE`, `FLUSHALL`, `QUIT`, and enough of
//! `COMMAND`, `HELLO`, `CLIENT`, `CONFIG GET` and `INFO` for `redis-cli` and
//! `redis-benchmark` to start; errors are Redis's (`-ERR unknown command ...`, `-ERR wrong
//! number of arguments ...`, `-ERR value is not an integer or out of range`). Keys and
//! values are UTF-8 here. A malformed frame is answered with its protocol error and closes
//! that connection alone.
//!
//! Durability: a write is answered only after its record is synced, so an acknowledged
//! write survives SIGKILL; writes that arrive while a sync is in flight are committed
//! together by the next one (group commit, see [`Store`]). A read is answered only once
//! what it read is durable, so no answer is undone by a crash. On start the store replays the log, and cuts a
//! record a crash left half written. A write answered `-ERR storage unavailable` (the store
//! failed while handling it) may or may not have been logged: retry it.

use crate::limits::{Slot, setting};
use crate::lines::{LineReader, accept_until_stopped};
use crate::resp::{Decoder, Reply};
use actors::prelude::*;
use actors::supervisor::{
    ChildSpec, DynamicSupervisor, DynamicSupervisorRef, Restart, Strategy, Supervisor,
    SupervisorRef,
};
use runtime::buffer::paged::{CacheRef, Writer};
use runtime::net::{Listener, Sink};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::{NonZeroU16, NonZeroUsize};
use std::sync::Arc;

/// The log's page size and the store's write buffer.
const PAGE: u16 = 4096;
const BUFFER: usize = 64 * (PAGE as usize + runtime::buffer::paged::CHECKSUM_SIZE as usize);

/// Record kinds in the log.
const SET: u8 = 1;
const DEL: u8 = 2;
/// Empties the map (`FLUSHALL`); its key and value are empty.
const FLUSH: u8 = 3;

/// What answers a write once its record is synced.
type Answer = Box<dyn FnOnce() + Send>;

/// What the store's incarnations share: the gate a sync holds while it writes (a new
/// incarnation opens the log only once its predecessor's last sync is done, so no write of
/// an old one can land after a new one has read the log), where syncs run (the service's
/// scope, which outlives incarnations), and the count that numbers incarnations.
pub struct Syncs {
    gate: Arc<futures::lock::Mutex<()>>,
    context: runtime::Context,
    incarnations: std::sync::atomic::AtomicU64,
}

/// The storage actor: the map in memory, and the log that rebuilds it.
///
/// Group commit: a write applies to the map at once and queues its record and its answer
/// (a delegated reply). One sync at a time runs in a task of its own, with every record
/// queued when it started, and answers them all when it is done; writes that arrive
/// meanwhile wait for the next, which starts as soon as that one ends. One sync serves a
/// whole group, so throughput grows with concurrency, and no write is answered before its
/// record is synced. A failed sync fails the actor, which restarts from its log; the writes
/// it carried are answered `Closed` (they may or may not be logged). A sync that finishes
/// after its incarnation ended still answers its writes: they are durable.
#[actor(dedicated, name = "kv_store", mailbox = 256)]
pub struct Store {
    map: HashMap<String, String>,
    /// The log's writer, but while a sync has it.
    writer: Option<Writer>,
    cache: CacheRef,
    syncs: Arc<Syncs>,
    /// This incarnation's number: a sync reports back to the one that started it.
    incarnation: u64,
    /// Records written since the last sync started, and their answers (with those of
    /// replies that read them: see `answer`).
    pending: Vec<u8>,
    answers: Vec<Answer>,
    /// Answers that read what the sync in flight carries, and nothing newer: given when it
    /// is done.
    after_flight: Vec<Answer>,
    /// A sync is in flight (it holds the writer).
    syncing: bool,
}

impl Store {
    fn new(cache: CacheRef, syncs: Arc<Syncs>) -> Self {
        let incarnation = syncs
            .incarnations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Store {
            map: HashMap::new(),
            writer: None,
            cache,
            syncs,
            incarnation,
            pending: Vec::new(),
            answers: Vec::new(),
            after_flight: Vec::new(),
            syncing: false,
        }
    }

    /// Gives a reply that writes nothing (a read, a conditional write that did not apply)
    /// once what it read is durable: at once if nothing is waiting to be synced, else with
    /// the sync that carries the newest change it may have seen. Otherwise a crash could
    /// undo what the reply told (a `DEL` answered `0` for a key whose own deletion was
    /// never synced, a `SET NX` refused by a key that comes back absent).
    fn answer(&mut self, answer: impl FnOnce() + Send + 'static) {
        if !self.answers.is_empty() {
            self.answers.push(Box::new(answer));
        } else if self.syncing {
            self.after_flight.push(Box::new(answer));
        } else {
            answer();
        }
    }

    /// Queues `records` and their `answer` for the next sync, and starts it if none is in
    /// flight.
    fn log(
        &mut self,
        ctx: &mut actors::Context<Self>,
        records: Vec<u8>,
        answer: impl FnOnce() + Send + 'static,
    ) {
        self.pending.extend(records);
        self.answers.push(Box::new(answer));
        self.commit(ctx);
    }

    /// Starts a sync of what is pending, unless one is in flight or nothing is.
    fn commit(&mut self, ctx: &mut actors::Context<Self>) {
        if self.syncing || self.answers.is_empty() {
            return;
        }
        // Taken here, before the task exists: from now until the sync is done, a later
        // incarnation cannot open the log. Free: this incarnation opened the log after its
        // predecessor's last sync, and has no other sync in flight.
        let gate = self
            .syncs
            .gate
            .try_lock_owned()
            .expect("one sync in flight at a time");
        let writer = self.writer.take().expect("opened in on_start");
        let records = std::mem::take(&mut self.pending);
        let answers = std::mem::take(&mut self.answers);
        self.syncing = true;
        let (store, incarnation) = (ctx.actor_ref(), self.incarnation);
        drop(self.syncs.context.clone().spawn(move |_| async move {
            let synced = match writer.append(&records).await {
                Ok((writer, _)) => writer.sync().await,
                Err(error) => Err(error),
            };
            drop(gate);
            let _ = match synced {
                Ok(writer) => store.tell_synced(incarnation, writer, answers).await,
                Err(error) => store.tell_sync_failed(incarnation, error.to_string()).await,
            };
        }));
    }
}

#[actor]
impl Store {
    /// Opens the log and replays it into the map.
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        // After a restart: the last incarnation's sync, if one is in flight, ends first.
        let gate = self.syncs.gate.lock().await;
        drop(gate);
        let (blob, size) = ctx
            .runtime()
            .open("kv", b"log")
            .await
            .unwrap_or_else(|error| panic!("kv: opening the log failed: {error}"));
        let writer = Writer::new(blob, size, BUFFER, self.cache.clone())
            .await
            .unwrap_or_else(|error| panic!("kv: recovering the log failed: {error}"));
        // Page by page: after a lost machine a page may be missing in the middle of the log
        // (see `runtime::buffer::paged`); everything before it is kept, the rest cut.
        let size = writer.size();
        let mut bytes = Vec::with_capacity(size as usize);
        while (bytes.len() as u64) < size {
            let offset = bytes.len() as u64;
            let len = (size - offset).min(u64::from(PAGE)) as usize;
            match writer.read_at(offset, len).await {
                Ok(page) => bytes.extend_from_slice(&page),
                Err(runtime::Error::BlobCorrupt { .. }) => {
                    eprintln!("kv: the log is damaged at byte {offset}; keeping what precedes it");
                    break;
                }
                Err(error) => panic!("kv: reading the log failed: {error}"),
            }
        }
        let valid = replay(&bytes, &mut self.map);
        // A record a crash left half written is cut, so appends continue after the last
        // whole one.
        let writer = if (valid as u64) < size {
            writer
                .truncate(valid as u64)
                .await
                .unwrap_or_else(|error| panic!("kv: cutting a torn record failed: {error}"))
        } else {
            writer
        };
        self.writer = Some(writer);
    }

    /// Sets `key` to `value` if `when` allows; replies whether it did.
    pub fn set(
        &mut self,
        ctx: &mut actors::Context<Self>,
        key: String,
        value: String,
        when: When,
        reply: actors::Reply<bool>,
    ) {
        let present = self.map.contains_key(&key);
        let allowed = match when {
            When::Always => true,
            When::Absent => !present,
            When::Present => present,
        };
        if !allowed {
            return self.answer(move || reply.send(false));
        }
        let records = record(SET, &key, &value);
        self.map.insert(key, value);
        self.log(ctx, records, move || reply.send(true));
    }

    /// A sync is done: its writes are answered (they are durable, whichever incarnation
    /// queued them), and, if it was this incarnation's, the next group starts.
    fn synced(
        &mut self,
        ctx: &mut actors::Context<Self>,
        incarnation: u64,
        writer: Writer,
        answers: Vec<Answer>,
    ) {
        for answer in answers {
            answer();
        }
        if incarnation != self.incarnation {
            // An earlier incarnation's writer: this one opened its own.
            return;
        }
        for answer in std::mem::take(&mut self.after_flight) {
            answer();
        }
        self.writer = Some(writer);
        self.syncing = false;
        self.commit(ctx);
    }

    /// A sync failed: the store fails (if it was this incarnation's), and restarts from its
    /// log.
    fn sync_failed(&mut self, incarnation: u64, error: String) {
        if incarnation == self.incarnation {
            panic!("kv log sync failed: {error}");
        }
    }

    /// Sets every pair, with one sync for all (`MSET`).
    pub fn set_many(
        &mut self,
        ctx: &mut actors::Context<Self>,
        pairs: Vec<(String, String)>,
        reply: actors::Reply<()>,
    ) {
        let mut records = Vec::new();
        for (key, value) in &pairs {
            records.extend(record(SET, key, value));
        }
        self.map.extend(pairs);
        self.log(ctx, records, move || reply.send(()));
    }

    /// Adds `by` to the integer at `key` (0 if absent); the new value, or Redis's error.
    pub fn add(
        &mut self,
        ctx: &mut actors::Context<Self>,
        key: String,
        by: i64,
        reply: actors::Reply<Result<i64, String>>,
    ) {
        let current = match self.map.get(&key) {
            None => Some(0),
            Some(value) => parse_integer(value.as_bytes()),
        };
        let Some(current) = current else {
            let error = "ERR value is not an integer or out of range".to_string();
            return self.answer(move || reply.send(Err(error)));
        };
        let Some(next) = current.checked_add(by) else {
            let error = "ERR increment or decrement would overflow".to_string();
            return self.answer(move || reply.send(Err(error)));
        };
        let value = next.to_string();
        let records = record(SET, &key, &value);
        self.map.insert(key, value);
        self.log(ctx, records, move || reply.send(Ok(next)));
    }

    /// The values at `keys` (`MGET`).
    pub fn get_many(&mut self, keys: Vec<String>, reply: actors::Reply<Vec<Option<String>>>) {
        let values = keys.iter().map(|key| self.map.get(key).cloned()).collect();
        self.answer(move || reply.send(values));
    }

    /// Empties the store (`FLUSHALL`).
    pub fn flush(&mut self, ctx: &mut actors::Context<Self>, reply: actors::Reply<()>) {
        self.map.clear();
        self.log(ctx, record(FLUSH, "", ""), move || reply.send(()));
    }

    pub fn exists(&mut self, key: String, reply: actors::Reply<bool>) {
        let exists = self.map.contains_key(&key);
        self.answer(move || reply.send(exists));
    }

    /// The number of keys.
    pub fn size(&mut self, reply: actors::Reply<usize>) {
        let size = self.map.len();
        self.answer(move || reply.send(size));
    }

    pub fn get(&mut self, key: String, reply: actors::Reply<Option<String>>) {
        let value = self.map.get(&key).cloned();
        self.answer(move || reply.send(value));
    }

    /// Removes `key`; replies whether it was there.
    pub fn del(
        &mut self,
        ctx: &mut actors::Context<Self>,
        key: String,
        reply: actors::Reply<bool>,
    ) {
        if self.map.remove(&key).is_none() {
            return self.answer(move || reply.send(false));
        }
        self.log(ctx, record(DEL, &key, ""), move || reply.send(true));
    }

    /// Fails on purpose: for showing a supervised restart.
    pub fn fail(&mut self) {
        panic!("kv store failing on purpose");
    }
}

/// A decimal integer as Redis reads one for `INCR`: optional `-`, no `+`, no leading zero,
/// within `i64`.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let canonical = !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits == b"0" || digits[0] != b'0')
        && bytes != b"-0";
    if !canonical {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// When a `SET` applies: always, or only if the key is absent (`NX`) or present (`XX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Always,
    Absent,
    Present,
}

/// A log record: kind, key length and key, value length and value (lengths `u32` LE).
fn record(kind: u8, key: &str, value: &str) -> Vec<u8> {
    let mut record = Vec::with_capacity(9 + key.len() + value.len());
    record.push(kind);
    record.extend_from_slice(&(key.len() as u32).to_le_bytes());
    record.extend_from_slice(key.as_bytes());
    record.extend_from_slice(&(value.len() as u32).to_le_bytes());
    record.extend_from_slice(value.as_bytes());
    record
}

/// Applies every whole record of `log` to `map`; returns where the whole records end.
fn replay(log: &[u8], map: &mut HashMap<String, String>) -> usize {
    let mut at = 0;
    loop {
        let Some((kind, key, value, next)) = parse(log, at) else {
            return at;
        };
        match kind {
            SET => {
                map.insert(key, value);
            }
            FLUSH => map.clear(),
            _ => {
                map.remove(&key);
            }
        }
        at = next;
    }
}

fn parse(log: &[u8], at: usize) -> Option<(u8, String, String, usize)> {
    let kind = *log.get(at)?;
    if !matches!(kind, SET | DEL | FLUSH) {
        return None;
    }
    let field = |at: usize| -> Option<(String, usize)> {
        let len = u32::from_le_bytes(log.get(at..at + 4)?.try_into().ok()?) as usize;
        let bytes = log.get(at + 4..at + 4 + len)?;
        Some((String::from_utf8(bytes.to_vec()).ok()?, at + 4 + len))
    };
    let (key, next) = field(at + 1)?;
    let (value, next) = field(next)?;
    Some((kind, key, value, next))
}

/// One client connection: its reader task decodes commands, and it runs them one at a time,
/// answering in order (pipelining to any depth the client sends).
#[actor(name = "kv_connection")]
struct Connection {
    sink: Sink,
    store: StoreRef,
    stream: Option<runtime::net::Stream>,
}

#[actor]
impl Connection {
    fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let connection = ctx.actor_ref();
        let mut stream = self.stream.take().expect("set by the acceptor");
        drop(ctx.runtime().clone().spawn(move |_| async move {
            let mut decoder = Decoder::default();
            loop {
                loop {
                    match decoder.next_command() {
                        Ok(Some(command)) => {
                            if connection.tell_command(command).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => break,
                        Err(error) => {
                            let _ = connection.tell_refuse(error.to_string()).await;
                            return;
                        }
                    }
                }
                // What the decoder can use: the rest of a bulk string at once, else a byte
                // (the stream reads ahead, so most come from its buffer).
                let wanted = decoder.wanted().min(64 * 1024);
                match runtime::Stream::recv(&mut stream, wanted).await {
                    Ok(byte) => decoder.feed(&byte.coalesce()),
                    // The runtime's read timeout: a quiet client is not a gone one.
                    Err(runtime::Error::RecvFailed(error))
                        if error.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => {
                        let _ = connection.tell_quit().await;
                        return;
                    }
                }
            }
        }));
    }

    async fn command(&mut self, ctx: &mut actors::Context<Self>, command: Vec<Vec<u8>>) {
        let (reply, quit) = execute(&self.store, command).await;
        let mut bytes = Vec::new();
        reply.encode(&mut bytes);
        if self.sink.send(bytes).await.is_err() || quit {
            ctx.stop();
        }
    }

    /// A malformed frame: its error, then the connection closes (the stream is out of step).
    async fn refuse(&mut self, ctx: &mut actors::Context<Self>, error: String) {
        let mut bytes = Vec::new();
        Reply::error(error).encode(&mut bytes);
        let _ = self.sink.send(bytes).await;
        ctx.stop();
    }

    fn quit(&mut self, ctx: &mut actors::Context<Self>) {
        ctx.stop();
    }
}

/// Runs one command on `store`: the reply, and whether the client asked to close.
pub async fn execute(store: &StoreRef, command: Vec<Vec<u8>>) -> (Reply, bool) {
    let mut arguments = command.into_iter();
    let Some(name) = arguments.next() else {
        return (Reply::error("empty command"), false);
    };
    let arguments: Vec<Vec<u8>> = arguments.collect();
    let upper = name.to_ascii_uppercase();
    let lower = String::from_utf8_lossy(&name).to_lowercase();
    let wrong = || Reply::error(format!("wrong number of arguments for '{lower}' command"));
    let failed =
        |error: actors::Error| Reply::error(format!("storage unavailable ({error}); try again"));
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec());
    let not_utf8 = || Reply::error("keys and values are UTF-8 here");
    let reply = match (upper.as_slice(), arguments.as_slice()) {
        (b"PING", []) => Reply::Simple("PONG".into()),
        (b"PING", [message]) | (b"ECHO", [message]) => Reply::Bulk(Some(message.clone())),
        (b"PING", _) | (b"ECHO", _) => wrong(),
        (b"QUIT", _) => return (Reply::ok(), true),
        (b"COMMAND", _) => Reply::Array(Some(Vec::new())),
        (b"GET", [key]) => match text(key) {
            Err(_) => not_utf8(),
            Ok(key) => match store.get(key).await {
                Ok(value) => Reply::Bulk(value.map(String::into_bytes)),
                Err(error) => failed(error),
            },
        },
        (b"GET", _) => wrong(),
        (b"SET", [key, value, options @ ..]) => {
            let mut when = When::Always;
            let mut bad = None;
            for option in options {
                if bad.is_some() {
                    break;
                }
                match option.to_ascii_uppercase().as_slice() {
                    b"NX" if when == When::Always => when = When::Absent,
                    b"XX" if when == When::Always => when = When::Present,
                    b"EX" | b"PX" | b"EXAT" | b"PXAT" | b"KEEPTTL" | b"GET" => {
                        bad = Some(Reply::error(format!(
                            "SET {} is not supported yet",
                            String::from_utf8_lossy(option).to_uppercase()
                        )));
                    }
                    _ => bad = Some(Reply::error("syntax error")),
                }
            }
            match (bad, text(key), text(value)) {
                (Some(bad), _, _) => bad,
                (None, Ok(key), Ok(value)) => match store.set(key, value, when).await {
                    Ok(true) => Reply::ok(),
                    Ok(false) => Reply::Bulk(None),
                    Err(error) => failed(error),
                },
                _ => not_utf8(),
            }
        }
        (b"SET", _) => wrong(),
        (b"DEL", keys) | (b"EXISTS", keys) if !keys.is_empty() => {
            let delete = upper.as_slice() == b"DEL";
            let mut count = 0;
            for key in keys {
                let Ok(key) = text(key) else {
                    return (not_utf8(), false);
                };
                let found = if delete {
                    store.del(key).await
                } else {
                    store.exists(key).await
                };
                match found {
                    Ok(true) => count += 1,
                    Ok(false) => {}
                    Err(error) => return (failed(error), false),
                }
            }
            Reply::Integer(count)
        }
        (b"DEL", _) | (b"EXISTS", _) => wrong(),
        (b"INCR" | b"DECR", [key]) | (b"INCRBY" | b"DECRBY", [key, _]) => {
            let by = match arguments.get(1) {
                None => Some(1),
                Some(by) => parse_integer(by),
            };
            let negate = matches!(upper.as_slice(), b"DECR" | b"DECRBY");
            let by = by.and_then(|by| if negate { by.checked_neg() } else { Some(by) });
            match (by, text(key)) {
                (None, _) => Reply::error("value is not an integer or out of range"),
                (_, Err(_)) => not_utf8(),
                (Some(by), Ok(key)) => match store.add(key, by).await {
                    Ok(Ok(value)) => Reply::Integer(value),
                    Ok(Err(error)) => Reply::Error(error),
                    Err(error) => failed(error),
                },
            }
        }
        (b"INCR" | b"DECR" | b"INCRBY" | b"DECRBY", _) => wrong(),
        (b"MGET", keys) if !keys.is_empty() => {
            let keys: Result<Vec<String>, _> = keys.iter().map(|key| text(key)).collect();
            match keys {
                Err(_) => not_utf8(),
                Ok(keys) => match store.get_many(keys).await {
                    Ok(values) => Reply::Array(Some(
                        values
                            .into_iter()
                            .map(|value| Reply::Bulk(value.map(String::into_bytes)))
                            .collect(),
                    )),
                    Err(error) => failed(error),
                },
            }
        }
        (b"MSET", pairs) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
            let pairs: Result<Vec<(String, String)>, _> = pairs
                .chunks(2)
                .map(|pair| Ok::<_, std::string::FromUtf8Error>((text(&pair[0])?, text(&pair[1])?)))
                .collect();
            match pairs {
                Err(_) => not_utf8(),
                Ok(pairs) => match store.set_many(pairs).await {
                    Ok(()) => Reply::ok(),
                    Err(error) => failed(error),
                },
            }
        }
        (b"MGET" | b"MSET", _) => wrong(),
        (b"FLUSHALL" | b"FLUSHDB", options)
            if options.iter().all(|option| {
                matches!(option.to_ascii_uppercase().as_slice(), b"SYNC" | b"ASYNC")
            }) =>
        {
            match store.flush().await {
                Ok(()) => Reply::ok(),
                Err(error) => failed(error),
            }
        }
        (b"FLUSHALL" | b"FLUSHDB", _) => Reply::error("syntax error"),
        // What clients ask as they start: enough for `redis-cli` and `redis-benchmark`.
        (b"HELLO", []) | (b"HELLO", [_, ..])
            if arguments.first().is_none_or(|version| version == b"2") =>
        {
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"server".to_vec())),
                Reply::Bulk(Some(b"redis".to_vec())),
                Reply::Bulk(Some(b"version".to_vec())),
                Reply::Bulk(Some(REDIS_VERSION.as_bytes().to_vec())),
                Reply::Bulk(Some(b"proto".to_vec())),
                Reply::Integer(2),
                Reply::Bulk(Some(b"mode".to_vec())),
                Reply::Bulk(Some(b"standalone".to_vec())),
                Reply::Bulk(Some(b"role".to_vec())),
                Reply::Bulk(Some(b"master".to_vec())),
                Reply::Bulk(Some(b"modules".to_vec())),
                Reply::Array(Some(Vec::new())),
            ]))
        }
        (b"HELLO", _) => Reply::Error("NOPROTO unsupported protocol version".into()),
        (b"CLIENT", [subcommand, ..]) => match subcommand.to_ascii_uppercase().as_slice() {
            b"SETNAME" | b"SETINFO" => Reply::ok(),
            b"GETNAME" => Reply::Bulk(None),
            b"ID" => Reply::Integer(1),
            _ => Reply::error(format!(
                "unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(subcommand)
            )),
        },
        (b"CONFIG", [subcommand, parameter]) if subcommand.eq_ignore_ascii_case(b"GET") => {
            let value: Option<&[u8]> = match parameter.to_ascii_lowercase().as_slice() {
                b"save" => Some(b""),
                b"appendonly" => Some(b"yes"),
                b"appendfsync" => Some(b"always"),
                b"databases" => Some(b"1"),
                _ => None,
            };
            Reply::Array(Some(match value {
                Some(value) => vec![
                    Reply::Bulk(Some(parameter.to_ascii_lowercase())),
                    Reply::Bulk(Some(value.to_vec())),
                ],
                None => Vec::new(),
            }))
        }
        (b"CONFIG", _) => Reply::error("CONFIG answers GET parameter only here"),
        (b"INFO", _) => match store.size().await {
            Ok(keys) => Reply::Bulk(Some(
                format!(
                    "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\n\
                     # Persistence\r\naof_enabled:1\r\n# Keyspace\r\n\
                     db0:keys={keys},expires=0,avg_ttl=0\r\n"
                )
                .into_bytes(),
            )),
            Err(error) => failed(error),
        },
        (b"DBSIZE", []) => match store.size().await {
            Ok(size) => Reply::Integer(i64::try_from(size).unwrap_or(i64::MAX)),
            Err(error) => failed(error),
        },
        (b"DBSIZE", _) => wrong(),
        _ => {
            // As Redis words it: the name cut at 128 characters, then arguments while what
            // is listed stays under 128.
            let clip = |bytes: &[u8], at: usize| -> String {
                String::from_utf8_lossy(bytes).chars().take(at).collect()
            };
            let mut beginning = String::new();
            for argument in &arguments {
                let room = 128usize.saturating_sub(beginning.len());
                if room == 0 {
                    break;
                }
                beginning.push_str(&format!("'{}' ", clip(argument, room)));
            }
            Reply::error(format!(
                "unknown command '{}', with args beginning with: {beginning}",
                clip(&name, 128)
            ))
        }
    };
    (reply, false)
}

/// The Redis version `HELLO` and `INFO` report: the protocol this service follows.
const REDIS_VERSION: &str = "7.0.0";

/// Connections served at once; one more is told so and closed.
pub const MAX_CONNECTIONS: usize = 10_000;

/// A running service: its store, its supervisors and where it listens.
pub struct Service {
    pub store: StoreRef,
    pub supervisor: SupervisorRef,
    /// The connection actors: temporary children, so a connection that fails (a panic) is
    /// counted in `actor_exits_total{actor="kv_connection",reason="panicked"}` and removed,
    /// and the service goes on.
    pub connections: DynamicSupervisorRef,
    pub address: SocketAddr,
    pub metrics: SocketAddr,
}

/// Starts the service: the supervised store, the protocol on `address` and `/metrics` on
/// `metrics`. The listeners run until the runtime stops.
pub async fn serve(
    context: &runtime::Context,
    address: SocketAddr,
    metrics: SocketAddr,
) -> Result<Service, runtime::Error> {
    let cache = CacheRef::new(
        NonZeroU16::new(PAGE).expect("non-zero"),
        NonZeroUsize::new(256).expect("non-zero"),
    );
    let listener = context.bind(address).await?;
    let metrics_listener = context.bind(metrics).await?;
    let mut supervisor = Supervisor::new("kv", Strategy::OneForOne);
    let syncs = Arc::new(Syncs {
        gate: Arc::new(futures::lock::Mutex::new(())),
        context: context.clone(),
        incarnations: std::sync::atomic::AtomicU64::new(0),
    });
    let store = supervisor.child(ChildSpec::new(move || {
        Store::new(cache.clone(), syncs.clone())
    }));
    let supervisor = supervisor.spawn(context);
    let connections = DynamicSupervisor::new("kv_connections")
        .max_children(MAX_CONNECTIONS)
        .spawn(context);
    let service = Service {
        store: store.clone(),
        supervisor,
        connections: connections.clone(),
        address: listener
            .local_addr()
            .map_err(|error| runtime::Error::BindFailed(address, error))?,
        metrics: metrics_listener
            .local_addr()
            .map_err(|error| runtime::Error::BindFailed(metrics, error))?,
    };
    let accepting = context.clone();
    drop(context.clone().spawn(move |_| async move {
        accept(accepting, listener, store, connections).await;
    }));
    let exposing = context.clone();
    drop(context.clone().spawn(move |_| async move {
        serve_metrics(exposing, metrics_listener).await;
    }));
    Ok(service)
}

/// Accepts connections, each a temporary child of `connections`, at most `MAX_CONNECTIONS`
/// at once.
async fn accept(
    context: runtime::Context,
    mut listener: Listener,
    store: StoreRef,
    connections: DynamicSupervisorRef,
) {
    accept_until_stopped(&context, &mut listener, "kv", |mut sink, stream| {
        let connections = connections.clone();
        let store = store.clone();
        drop(context.clone().spawn(move |_| async move {
            if connections.count() >= MAX_CONNECTIONS {
                let mut refusal = Vec::new();
                Reply::error(format!("max number of clients reached ({MAX_CONNECTIONS})"))
                    .encode(&mut refusal);
                let _ = sink.send(refusal).await;
                return;
            }
            // Started once (temporary): the factory hands over the socket.
            let mut socket = Some((sink, stream));
            let spec = ChildSpec::new(move || {
                let (sink, stream) = socket.take().expect("a temporary child starts once");
                Connection {
                    sink,
                    store: store.clone(),
                    stream: Some(stream),
                }
            })
            .restart(Restart::Temporary);
            // Refused (full, or the service stopping): the socket closes with the spec.
            let _ = connections.start_child(spec).await;
        }));
    })
    .await;
}

/// Answers `GET /metrics` with the runtime's Prometheus exposition, anything else with 404;
/// one request per connection.
async fn serve_metrics(context: runtime::Context, mut listener: Listener) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    accept_until_stopped(&context, &mut listener, "kv metrics", |mut sink, stream| {
        // Bounded: a flood of connections that never finish a request holds at most this
        // many, each for at most the request deadline.
        let Some(slot) = Slot::take(&open, MAX_METRICS_CONNECTIONS) else {
            return;
        };
        let exposition = context.clone();
        drop(context.clone().spawn(move |runtime| async move {
            let _slot = slot;
            let mut lines = LineReader::new(stream);
            let read = runtime.timeout(metrics_request_deadline(), read_request(&mut lines));
            let (status, body) = match read.await {
                Err(_) => return,
                Ok(Err(refusal)) => (refusal, format!("{refusal}\n")),
                Ok(Ok(request)) if request.starts_with(b"GET /metrics ") => {
                    ("200 OK", exposition.encode())
                }
                Ok(Ok(_)) => (
                    "404 Not Found",
                    "only GET /metrics is served here\n".to_string(),
                ),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; \
                 charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = runtime
                .timeout(metrics_request_deadline(), sink.send(response.into_bytes()))
                .await;
            drop(sink);
            // What the client still sends is read (and dropped) until it closes or the
            // deadline passes: closing with it unread would reset the connection, and the
            // client might lose the answer.
            let _ = runtime
                .timeout(metrics_request_deadline(), async {
                    while let Ok(Some(_)) = lines.next_line().await {}
                })
                .await;
        }));
    })
    .await;
}

/// `/metrics` connections open at once; past it a new one is closed unanswered.
const MAX_METRICS_CONNECTIONS: usize = 64;

/// The most a `/metrics` request line and its headers may weigh.
const MAX_METRICS_REQUEST: usize = 16 * 1024;

/// How long a `/metrics` client has to send its request (and take the answer):
/// `KV_METRICS_DEADLINE_MS`, 5000 by default.
fn metrics_request_deadline() -> std::time::Duration {
    static DEADLINE: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *DEADLINE
        .get_or_init(|| std::time::Duration::from_millis(setting("KV_METRICS_DEADLINE_MS", 5000)))
}

/// Reads an HTTP request line and its headers, up to the blank line: the request line, or
/// the status that refuses it (too large). A connection that ends first has no answer.
async fn read_request(lines: &mut LineReader) -> Result<Vec<u8>, &'static str> {
    const TOO_LARGE: &str = "431 Request Header Fields Too Large";
    let request = match lines.next_line().await {
        Ok(Some(request)) => request,
        Err(crate::lines::LineError::TooLong) => return Err(TOO_LARGE),
        // Gone before a request: answered with nothing a client could take as one.
        _ => return Ok(Vec::new()),
    };
    let mut weight = request.len();
    loop {
        match lines.next_line().await {
            Ok(Some(header)) if header.is_empty() => return Ok(request),
            Ok(Some(header)) => {
                weight += header.len() + 2;
                if weight > MAX_METRICS_REQUEST {
                    return Err(TOO_LARGE);
                }
            }
            Err(crate::lines::LineError::TooLong) => return Err(TOO_LARGE),
            // Ended before the blank line: answered as it stands.
            _ => return Ok(request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_replay_and_a_torn_tail_is_cut() {
        let mut log = record(SET, "a", "1");
        log.extend(record(SET, "b", "two words"));
        log.extend(record(DEL, "a", ""));
        let whole = log.len();
        log.extend(&record(SET, "c", "3")[..5]);
        let mut map = HashMap::new();
        assert_eq!(replay(&log, &mut map), whole);
        assert_eq!(map.len(), 1);
        assert_eq!(map["b"], "two words");
    }
}
