//! The key-value service behind the `kv` and `tour` programs: the Redis protocol (RESP2,
//! and inline commands for `nc` and `telnet`; see [`crate::resp`]) over TCP, connection
//! actors on the pool under a dynamic supervisor, one storage actor owning an append-only
//! log in a paged, checksummed blob (its syncs made by a task on a thread of its own), a
//! view of the acknowledged data that connections read without the store ([`view`]), and a
//! `/metrics` endpoint for Prometheus.
//!
//! The service is one supervision tree, as OTP would draw it (started top to bottom,
//! stopped bottom to top; see [`serve_with`] for why one for one):
//!
//! ```text
//! kv                    Supervisor, one_for_one
//! ├── kv_store          the store (actor, permanent)
//! ├── kv_connections    DynamicSupervisor (permanent; restarts empty)
//! │   └── kv_connection ...   one per client (actors, temporary), at most KV_MAX_CONNECTIONS
//! ├── kv_acceptor       accepts clients, hands each to kv_connections (actor, permanent)
//! └── kv_metrics        the /metrics endpoint's acceptor (actor, permanent)
//! ```
//!
//! Each acceptor owns its accept loop (a task in its own scope) and keeps its listener
//! across restarts: the next incarnation takes the same socket, or binds the same address
//! again if the socket broke (see [`acceptor`]). Stopping the tree's root
//! ([`Service::supervisor`]) stops accepting, closes every connection, stops the store, and
//! closes both ports.
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

pub mod acceptor;
pub mod commands;
mod connection;
pub mod float;
pub mod log;
pub mod metrics;
pub mod pattern;
pub mod recovery;
pub mod session;
pub mod shards;
pub mod store;
pub mod view;

pub use acceptor::{Acceptor, AcceptorRef};
pub use commands::{execute, parse_integer};
pub use metrics::{MetricsEndpoint, MetricsEndpointRef};
pub use recovery::StartError;
pub use store::{Durability, Expiry, Options, Store, StoreRef, When};

use crate::limits::setting;
use crate::refusal::Refusal;
use crate::resp::Reply;
use acceptor::{Handoff, Listening};
use actors::supervisor::{
    ChildSpec, DynamicSupervisor, DynamicSupervisorRef, Restart, Strategy, Supervisor,
    SupervisorRef,
};
use metrics::Exposition;
use runtime::Network as _;
use runtime::buffer::paged::CacheRef;
use std::net::SocketAddr;
use std::num::{NonZeroU16, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once by default (`KV_MAX_CONNECTIONS` sets it): one more is told
/// so (`-ERR max number of clients reached`, as Redis says it) and closed.
pub const MAX_CONNECTIONS: usize = 10_000;

/// Connections served at once: `KV_MAX_CONNECTIONS`, [`MAX_CONNECTIONS`] by default.
fn max_connections() -> usize {
    setting("KV_MAX_CONNECTIONS", MAX_CONNECTIONS)
}

/// A running service: its supervision tree (see the module's docs) and where it listens.
#[derive(Debug)]
pub struct Service {
    /// The storage actor.
    pub store: StoreRef,
    /// The root of the service's tree (`kv`): stopping it stops every child, in reverse
    /// start order, and closes the ports.
    pub supervisor: SupervisorRef,
    /// The connection actors' supervisor (`kv_connections`), a child of `kv`: the connections
    /// are temporary children, so a connection that fails (a panic) is counted in
    /// `actor_exits_total{actor="kv_connection",reason="panicked"}` and removed, and the
    /// service goes on.
    pub connections: DynamicSupervisorRef,
    /// The protocol's acceptor (`kv_acceptor`), a child of `kv`.
    pub acceptor: AcceptorRef,
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

/// How long `kv_connections` has to stop: its connections are asked to stop all at once,
/// each within its own 5 s, so this is that and a margin.
const CONNECTIONS_SHUTDOWN: Duration = Duration::from_secs(10);

/// Starts the service: opens the store's log (refusing damage, see [`recovery`]), binds
/// both addresses (so a port 0 resolves, and a bind error is returned here), then spawns
/// the tree drawn in the module's docs. It runs until [`Service::supervisor`] is stopped,
/// or gives up (more restarts than its intensity allows: then it ends, and the program
/// decides), or the runtime stops.
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
    let bind = async |address| {
        let listener = context.bind(address).await?;
        Listening::new(listener, address).map(Arc::new)
    };
    let listening = bind(address).await.map_err(ServeError::Bind)?;
    let metrics_listening = bind(metrics).await.map_err(ServeError::Bind)?;
    let shared = Arc::new(store::Shared::new(context.clone(), cache, options, opened));
    let view = shared.view.clone();
    let max = max_connections();
    // One for one: a child restarts alone, because what the others hold of it outlives its
    // incarnations. Connections reach the store through a ref that reaches every
    // incarnation and read the view the incarnations share, so a store failure costs the
    // requests in flight their answer (`-ERR storage unavailable`), never the clients
    // their connections; rest_for_one, with the store first, would drop every client for
    // it. The acceptor reaches `kv_connections` the same way: a handoff made while it
    // restarts waits for its next incarnation, which rest_for_one's restart of the
    // acceptor after it would only delay. The admission count and the listeners outlive the
    // acceptors' incarnations (see `acceptor`). What the order decides is starting and
    // stopping: each child starts after what it uses (the store, then the supervisor the
    // acceptor hands connections to, then the acceptor; the metrics endpoint last, once
    // there is a service to report on), and they stop in reverse: no client is accepted
    // once the connections are stopping, and the store, which connections write to until
    // they close, stops last.
    let mut supervisor = Supervisor::new("kv", Strategy::OneForOne);
    let store = supervisor.child(ChildSpec::new(move || Store::new(shared.clone())));
    // The acceptor admits at most `max` connections (a slot each, held by the connection
    // until it is dropped); the supervisor's own bound is a backstop above it, since it
    // counts a child until it hears of its end, a little after its slot is free.
    let connections = supervisor.supervisor(
        DynamicSupervisor::new("kv_connections").max_children(max.saturating_mul(2)),
        Restart::Permanent,
        CONNECTIONS_SHUTDOWN,
    );
    let handoff = Arc::new(Handoff {
        service: context.clone(),
        store: store.clone(),
        view,
        connections: connections.clone(),
        open: Arc::default(),
        max,
    });
    let service_address = listening.address();
    let acceptor = supervisor.child(ChildSpec::new(move || {
        Acceptor::new(listening.clone(), handoff.clone())
    }));
    let exposition = Arc::new(Exposition {
        service: context.clone(),
        open: Arc::default(),
    });
    let metrics_address = metrics_listening.address();
    supervisor.child(ChildSpec::new(move || {
        MetricsEndpoint::new(metrics_listening.clone(), exposition.clone())
    }));
    Ok(Service {
        store,
        supervisor: supervisor.spawn(context),
        connections,
        acceptor,
        address: service_address,
        metrics: metrics_address,
    })
}

/// Starts the store alone, without the network: opens its log (refusing damage as
/// [`serve_with`] does) and spawns the store under a one-for-one supervisor of its own
/// (`kv`), which restarts it as the service's would. For a program that embeds the store, and
/// for the deterministic crash tests, which drive it through [`StoreRef::run`] as connections
/// do. Stopping the returned supervisor stops the store. Returns the store, its supervisor
/// and what opening the log found and did (as `kv` prints it on start).
pub async fn start_store(
    context: &runtime::Context,
    options: Options,
) -> Result<(StoreRef, SupervisorRef, recovery::Report), StartError> {
    let cache = cache();
    let opened = recovery::open(context, &cache, options.torn_tail()).await?;
    let report = opened.report.clone();
    let shared = Arc::new(store::Shared::new(context.clone(), cache, options, opened));
    let mut supervisor = Supervisor::new("kv", Strategy::OneForOne);
    let store = supervisor.child(ChildSpec::new(move || Store::new(shared.clone())));
    Ok((store, supervisor.spawn(context), report))
}

/// What a connection past the limit is told (Redis's words).
const MAX_CLIENTS_REACHED: &str = "max number of clients reached";

/// The refusal of a connection, with Redis's error line saying `why`.
fn refusal(sink: runtime::net::Sink, stream: runtime::net::Stream, why: &str) -> Refusal {
    let mut line = Vec::new();
    Reply::error(why).encode(&mut line);
    Refusal { sink, stream, line }
}
