//! The ractor_cluster side of `remote_actors`: the same Echo actor as ours (`ping(u64) -> u64`,
//! `note(u64)`, `count() -> u64`), running in a server process, and a driver process that reaches
//! it over a direct ractor_cluster TCP session on loopback (no broker in between).
//!
//! - `serve` (server process): a `NodeServer` on 127.0.0.1:`port` and the Echo actor joined to
//!   the process group `bench-echo`, which is how ractor_cluster advertises an actor to peers.
//! - `drive` (driver process, once per round): its own `NodeServer` on 127.0.0.1:`port + 1`,
//!   connects to the server, waits until the group shows the remote Echo, then times
//!   - asks: `asks` sequential `call!(Ping(i))`, each checked to echo `i`;
//!   - tells: `tells` `cast!(Note(i))`, then `call!(Count)` (polled at most every 1 ms) until the
//!     server has counted every note this process sent, mirroring ours (tells timed until an
//!     ask sent after them sees them all).
//!
//! Both sides use a tokio multi_thread runtime with 2 workers, like ours uses 2 workers.

use ractor::{Actor, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort};
use ractor_cluster::{NodeServer, RactorClusterMessage};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The process group the server's Echo joins and the driver looks up.
const GROUP: &str = "bench-echo";
/// The magic cookie both nodes authenticate with.
const COOKIE: &str = "bench";
/// Warm-up pings before the timed asks.
const WARM_UP: u64 = 100;

/// Notes cast by this process so far, over every `drive` round (the server's count is
/// cumulative, since its Echo lives for the whole run).
static NOTES_SENT: AtomicU64 = AtomicU64::new(0);
/// Rounds driven by this process, to give each round's node a distinct name.
static ROUNDS: AtomicU64 = AtomicU64::new(0);

/// Echo's messages. The derive makes them serializable, so the actor can be reached from
/// another node; `#[rpc]` marks the variants carrying a reply port.
#[derive(RactorClusterMessage)]
pub enum EchoMessage {
    #[rpc]
    Ping(u64, RpcReplyPort<u64>),
    Note(u64),
    #[rpc]
    Count(RpcReplyPort<u64>),
}

/// The Echo actor; its state is the number of notes received.
struct Echo;

impl Actor for Echo {
    type Msg = EchoMessage;
    type State = u64;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _arguments: (),
    ) -> Result<u64, ActorProcessingErr> {
        Ok(0)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        notes: &mut u64,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            EchoMessage::Ping(value, reply) => {
                let _ = reply.send(value);
            }
            EchoMessage::Note(_) => *notes += 1,
            EchoMessage::Count(reply) => {
                let _ = reply.send(*notes);
            }
        }
        Ok(())
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
}

/// A node server named `name@127.0.0.1`, listening on 127.0.0.1:`port` only, raw TCP,
/// isolated connection mode (no transitive connects).
fn node_server(port: u16, name: String) -> NodeServer {
    NodeServer::new(
        port,
        COOKIE.to_string(),
        name,
        "127.0.0.1".to_string(),
        None,
        None,
    )
    .with_listen_addr(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Stops an actor and waits (bounded) for it to exit, so that its process-group and registry
/// entries (process-global in ractor) are gone before the next round.
async fn stop<M>(actor: ActorRef<M>, handle: tokio::task::JoinHandle<()>) {
    actor.stop(None);
    let _ = tokio::time::timeout(Duration::from_secs(2), handle).await;
}

/// Runs the ractor_cluster server process: a tokio multi_thread runtime with 2 workers, a
/// NodeServer listening on 127.0.0.1:`port` with cookie "bench", an Echo actor (remote-capable)
/// joined to the process group "bench-echo". Prints the line `ready` on stdout (flushed) once the
/// node server listens and the actor is in its group, then waits until stdin reaches EOF, then
/// returns.
pub fn serve(port: u16) {
    let runtime = runtime();
    let (node, node_handle, echo, echo_handle) = runtime.block_on(async move {
        // The listener binds in the NodeServer's `pre_start`, so it listens once spawn returns.
        let (node, node_handle) =
            Actor::spawn(None, node_server(port, "bench-server".to_string()), ())
                .await
                .expect("the ractor_cluster node server starts");
        let (echo, echo_handle) = Actor::spawn(None, Echo, ())
            .await
            .expect("the Echo actor starts");
        // Only actors in a process group (with serializable messages) are synced to peers.
        ractor::pg::join(GROUP.to_string(), vec![echo.get_cell()]);
        (node, node_handle, echo, echo_handle)
    });
    println!("ready");
    let _ = std::io::stdout().flush();
    // The runtime's workers keep serving while this thread waits for the driver to close stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    runtime.block_on(async move {
        stop(echo, echo_handle).await;
        stop(node, node_handle).await;
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// Runs the driver side: a tokio multi_thread runtime with 2 workers, its own NodeServer on
/// 127.0.0.1:`port + 1` with cookie "bench", connects to the server node at 127.0.0.1:`port`, waits
/// (polling every 10 ms, at most 30 s, panicking with a clear message after) until the group
/// "bench-echo" has a remote member, then: 100 warm-up pings; times `asks` sequential rpc calls
/// `Ping(i) -> i` (asserting each reply equals i); then times `tells` casts `Note(i)` followed by rpc
/// calls `Count` repeated until the count reaches the number of notes sent so far in this
/// process's lifetime (casts are not lost on a healthy TCP link, so this terminates; poll Count
/// at most every 1 ms). Returns (time for the asks, time for the tells including the final count wait).
pub fn drive(port: u16, asks: u64, tells: u64) -> (Duration, Duration) {
    let round = ROUNDS.fetch_add(1, Ordering::Relaxed);
    let runtime = runtime();
    let result = runtime.block_on(async move {
        // Node names must differ from the server's (ractor_cluster drops self-connections), and
        // per round, so a lingering session of the previous round cannot clash with this one.
        let name = format!("bench-driver-{round}");
        let (node, node_handle) = Actor::spawn(None, node_server(port + 1, name), ())
            .await
            .expect("the driver's ractor_cluster node server starts");
        ractor_cluster::client_connect(&node, format!("127.0.0.1:{port}"))
            .await
            .expect("the driver connects to the ractor_cluster server node");

        // The server's Echo appears here once the session has authenticated and synced groups.
        let group = GROUP.to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        let cell = loop {
            let remote = ractor::pg::get_members(&group).into_iter().find(|cell| {
                !cell.get_id().is_local() && cell.get_status() == ActorStatus::Running
            });
            if let Some(cell) = remote {
                break cell;
            }
            if Instant::now() >= deadline {
                panic!(
                    "ractor_cluster: no remote member of process group `{GROUP}` after 30 s \
                     (server node at 127.0.0.1:{port}); the session did not authenticate or sync"
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let echo = ActorRef::<EchoMessage>::from(cell);

        for value in 0..WARM_UP {
            let reply = ractor::call!(echo, EchoMessage::Ping, value).expect("a warm-up ping");
            assert_eq!(reply, value, "the remote Echo answered a wrong ping");
        }

        let started = Instant::now();
        for value in 0..asks {
            let reply = ractor::call!(echo, EchoMessage::Ping, value).expect("a ping");
            assert_eq!(reply, value, "the remote Echo answered a wrong ping");
        }
        let ask = started.elapsed();

        let started = Instant::now();
        for value in 0..tells {
            ractor::cast!(echo, EchoMessage::Note(value)).expect("a note");
        }
        let target = NOTES_SENT.fetch_add(tells, Ordering::Relaxed) + tells;
        loop {
            let seen = ractor::call!(echo, EchoMessage::Count).expect("a count");
            if seen >= target {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let tell = started.elapsed();

        // Stopping the node server stops its sessions and their remote-actor shims, which
        // removes the remote Echo from this process's (global) process group.
        drop(echo);
        stop(node, node_handle).await;
        (ask, tell)
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}
