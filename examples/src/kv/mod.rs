//! The key-value service behind the `kv` and `tour` programs: the Redis protocol (RESP2,
//! and inline commands for `nc` and `telnet`; see [`crate::resp`]) over TCP, connection
//! actors on the pool under a dynamic supervisor, one storage actor owning an append-only
//! log in a paged, checksummed blob (its syncs made by a task on a thread of its own),
//! under a supervisor that restarts it on failure, a view of the acknowledged data that
//! connections read without the store ([`view`]), and a `/metrics` endpoint for Prometheus.
//!
//! Commands, answered as redis-server 7.0 answers them (replies and error wording; the
//! differential test `examples/tests/redis_diff.rs` compares them byte for byte, and the
//! README lists the few intended differences):
//! - strings: `GET`, `SET` (`NX`/`XX`, `GET`, `EX`/`PX`/`EXAT`/`PXAT`/`KEEPTTL`), `GETSET`,
//!   `SETNX`, `SETEX`, `PSETEX`, `GETDEL`, `GETEX`, `MGET`, `MSET`, `MSETNX`, `APPEND`,
//!   `STRLEN`, `GETRANGE`, `SETRANGE`, `INCR`, `DECR`, `INCRBY`, `DECRBY`, `INCRBYFLOAT`
//!   (Redis's long-double arithmetic and printing, see [`float`]);
//! - keys: `DEL`, `UNLINK`, `EXISTS`, `TOUCH`, `TYPE`, `RENAME`, `RENAMENX`, `KEYS` (Redis's
//!   globs, see [`pattern`]), `SCAN` (`MATCH`, `COUNT`, `TYPE`; see [`shards`] for its cursor),
//!   `RANDOMKEY`, `DBSIZE`, `FLUSHALL`, `FLUSHDB`;
//! - expiry: `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` (with `NX`, `XX`, `GT`, `LT`),
//!   `PERSIST`, `TTL`, `PTTL`, `EXPIRETIME`, `PEXPIRETIME`;
//! - transactions: `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH` (see [`session`]);
//! - connection and server: `PING`, `ECHO`, `QUIT`, `SELECT` (0 only: one database),
//!   `HELLO` (RESP2; RESP3 refused with `NOPROTO`, on which clients fall back), `CLIENT`
//!   (`SETNAME`, `GETNAME`, `SETINFO`, `ID`), `COMMAND` (`COUNT`, `DOCS`: kv's own
//!   commands), `CONFIG GET`, `INFO` (`server`, `persistence` with the log's sync count
//!   and whether a rewrite is under way, `keyspace`), `BGREWRITEAOF` (a rewrite of the log
//!   now, whatever its size).
//!
//! Keys and values are any bytes. A malformed frame is answered with its protocol error and
//! closes that connection alone. Every write is a record of the log (see [`log`]): `APPEND`,
//! `SETRANGE`, `INCRBYFLOAT`, `RENAME` and the rest log the resulting `Set`, `Del` or
//! `Expire`, so a restart rebuilds them like any `SET`.
//!
//! Durability (see [`store`]): with `always` (the default) a write is answered only after
//! its record is synced, so an acknowledged write survives SIGKILL, and writes that arrive
//! while a sync is in flight are committed together by the next one (group commit); a read
//! is answered once what it read is durable: from the view, which holds only acknowledged
//! writes, or from the store behind the connection's own writes. `everysec` and `none`
//! answer at once, as Redis's do. On start the store replays its log; a tail that a crash can leave (and damage
//! can imitate) is copied beside the log, cut, printed and counted in the `kv_recovery_*`
//! metrics (`--strict` refuses it instead), and damage anywhere else is refused with the file
//! and offset (see [`recovery`]); `--repair` keeps every record that verifies. The rewrite's
//! snapshot shares the data shard by shard ([`shards`]), so taking it does not stall the
//! store. The log is rewritten from the live data in the
//! background when it grows past twice its size. A write answered `-ERR storage
//! unavailable` (the store failed while handling it) may or may not have been logged: retry
//! it.

pub mod commands;
mod connection;
pub mod float;
pub mod log;
pub mod pattern;
pub mod recovery;
pub mod session;
pub mod shards;
pub mod store;
pub mod view;

pub use commands::{execute, parse_integer};
pub use recovery::StartError;
pub use store::{Durability, Expiry, Options, Store, StoreRef, When};

use crate::limits::{Slot, setting};
use crate::lines::{LineReader, accept_until_stopped};
use crate::refusal::{Refusal, refuse};
use crate::resp::Reply;
use actors::prelude::*;
use actors::supervisor::{
    ChildSpec, DynamicSupervisor, DynamicSupervisorRef, Restart, Strategy, Supervisor,
    SupervisorRef,
};
use runtime::buffer::paged::CacheRef;
use runtime::net::Listener;
use std::net::SocketAddr;
use std::num::{NonZeroU16, NonZeroUsize};
use std::sync::Arc;

/// Connections served at once by default (`KV_MAX_CONNECTIONS` sets it): one more is told
/// so (`-ERR max number of clients reached`, as Redis says it) and closed.
pub const MAX_CONNECTIONS: usize = 10_000;

/// Connections served at once: `KV_MAX_CONNECTIONS`, [`MAX_CONNECTIONS`] by default.
fn max_connections() -> usize {
    setting("KV_MAX_CONNECTIONS", MAX_CONNECTIONS)
}

/// What a connection past the limit is told (Redis's words).
const MAX_CLIENTS_REACHED: &str = "max number of clients reached";

/// A running service: its store, its supervisors and where it listens.
#[derive(Debug)]
pub struct Service {
    /// The storage actor.
    pub store: StoreRef,
    /// The supervisor of the store.
    pub supervisor: SupervisorRef,
    /// The connection actors: temporary children, so a connection that fails (a panic) is
    /// counted in `actor_exits_total{actor="kv_connection",reason="panicked"}` and removed,
    /// and the service goes on.
    pub connections: DynamicSupervisorRef,
    /// Where the service listens for clients.
    pub address: SocketAddr,
    /// Where it serves its Prometheus metrics.
    pub metrics: SocketAddr,
}

/// The store's page cache.
fn cache() -> CacheRef {
    CacheRef::new(
        NonZeroU16::new(recovery::PAGE).expect("non-zero"),
        NonZeroUsize::new(256).expect("non-zero"),
    )
}

/// Repairs a damaged log before the service starts (`kv --repair`): see
/// [`recovery::repair`]. `None` if the log is not damaged.
pub async fn repair(context: &runtime::Context) -> Result<Option<recovery::Repaired>, StartError> {
    recovery::repair(context, &cache()).await
}

/// Why the service did not start.
#[derive(Debug)]
pub enum ServeError {
    /// An address could not be bound.
    Bind(runtime::Error),
    /// The store could not open its log.
    Start(StartError),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Bind(error) => write!(f, "{error}"),
            ServeError::Start(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Starts the service with the default [`Options`]: see [`serve_with`].
pub async fn serve(
    context: &runtime::Context,
    address: SocketAddr,
    metrics: SocketAddr,
) -> Result<Service, ServeError> {
    serve_with(context, address, metrics, Options::default()).await
}

/// Starts the service: opens the store's log (refusing damage, see [`recovery`]), then the
/// supervised store, the protocol on `address` and `/metrics` on `metrics`. The listeners
/// run until the runtime stops.
pub async fn serve_with(
    context: &runtime::Context,
    address: SocketAddr,
    metrics: SocketAddr,
    options: Options,
) -> Result<Service, ServeError> {
    let cache = cache();
    let opened = recovery::open(context, &cache, options.torn_tail())
        .await
        .map_err(ServeError::Start)?;
    let listener = context.bind(address).await.map_err(ServeError::Bind)?;
    let metrics_listener = context.bind(metrics).await.map_err(ServeError::Bind)?;
    let mut supervisor = Supervisor::new("kv", Strategy::OneForOne);
    let shared = Arc::new(store::Shared::new(context.clone(), cache, options, opened));
    let view = shared.view.clone();
    let store = supervisor.child(ChildSpec::new(move || Store::new(shared.clone())));
    let supervisor = supervisor.spawn(context);
    let max = max_connections();
    // The acceptor admits at most `max` connections (a slot each, held by the connection
    // until it is dropped); the supervisor's own bound is a backstop above it, since it
    // counts a child until it hears of its end, a little after its slot is free.
    let connections = DynamicSupervisor::new("kv_connections")
        .max_children(max.saturating_mul(2))
        .spawn(context);
    let bound = |listener: &Listener, address| {
        listener
            .local_addr()
            .map_err(|error| ServeError::Bind(runtime::Error::BindFailed(address, error)))
    };
    let service = Service {
        store: store.clone(),
        supervisor,
        connections: connections.clone(),
        address: bound(&listener, address)?,
        metrics: bound(&metrics_listener, metrics)?,
    };
    let accepting = context.clone();
    drop(context.clone().spawn(move |_| async move {
        accept(accepting, listener, store, view, connections, max).await;
    }));
    let exposing = context.clone();
    drop(context.clone().spawn(move |_| async move {
        serve_metrics(exposing, metrics_listener).await;
    }));
    Ok(service)
}

/// Accepts connections, each a temporary child of `connections`, at most `max` at once: the
/// admission is decided here, at the accept, by taking a slot (so a burst cannot slip past
/// it), and a connection past it is refused with its error line (see
/// [`crate::refusal`]).
async fn accept(
    context: runtime::Context,
    mut listener: Listener,
    store: StoreRef,
    view: Arc<view::View>,
    connections: DynamicSupervisorRef,
    max: usize,
) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    accept_until_stopped(&context, &mut listener, "kv", |sink, stream| {
        let Some(slot) = Slot::take(&open, max) else {
            return Some(refusal(sink, stream, MAX_CLIENTS_REACHED));
        };
        let connections = connections.clone();
        let store = store.clone();
        let view = view.clone();
        drop(context.clone().spawn(move |clock| async move {
            // Started once (temporary): the factory takes the socket and the slot. If the
            // child is refused (the service is stopping), they are taken back here.
            let socket = Arc::new(parking_lot::Mutex::new(Some((sink, stream, slot))));
            let spec = ChildSpec::new({
                let socket = socket.clone();
                move || {
                    let (sink, stream, slot) =
                        socket.lock().take().expect("a temporary child starts once");
                    connection::Connection {
                        sink: Some(sink),
                        stream: Some(stream),
                        store: store.clone(),
                        view: view.clone(),
                        _slot: slot,
                    }
                }
            })
            .restart(Restart::Temporary);
            let Err(error) = connections.start_child(spec).await else {
                return;
            };
            let Some((sink, stream, _slot)) = socket.lock().take() else {
                // It started, and failed in `on_start`: the socket went with it.
                return;
            };
            let why = match error {
                actors::Error::TooManyChildren { .. } => MAX_CLIENTS_REACHED,
                _ => "the server is stopping",
            };
            // Bounded by the slot, held until the refusal ends.
            refuse(&clock, refusal(sink, stream, why)).await;
        }));
        None
    })
    .await;
}

/// The refusal of a connection, with Redis's error line saying `why`.
fn refusal(sink: runtime::net::Sink, stream: runtime::net::Stream, why: &str) -> Refusal {
    let mut line = Vec::new();
    Reply::error(why).encode(&mut line);
    Refusal { sink, stream, line }
}

/// Answers `GET /metrics` with the runtime's Prometheus exposition, anything else with 404;
/// one request per connection.
async fn serve_metrics(context: runtime::Context, mut listener: Listener) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    accept_until_stopped(&context, &mut listener, "kv metrics", |mut sink, stream| {
        // Bounded: a flood of connections that never finish a request holds at most this
        // many, each for at most the request deadline; one more is answered 503.
        let Some(slot) = Slot::take(&open, MAX_METRICS_CONNECTIONS) else {
            return Some(Refusal {
                sink,
                stream,
                line: b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\
                        Connection: close\r\n\r\n"
                    .to_vec(),
            });
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
        None
    })
    .await;
}

/// `/metrics` connections open at once; past it a new one is answered 503 and closed.
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
