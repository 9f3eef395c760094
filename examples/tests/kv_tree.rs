//! The `kv` service as one supervision tree, in process: `kv` (one for one) over the store,
//! `kv_connections`, the acceptor and the metrics endpoint. A failed acceptor is restarted
//! alone, on its listener, while the connections it handed on go on; stopping the root
//! stops the children in reverse start order and closes the ports.

use actors::ExitReason;
use actors::prelude::*;
use actors::supervisor::{ChildSpec, Restart};
use examples::kv::{self, StoreRef};
use examples::resp::Reply;
use futures::StreamExt as _;
use futures::channel::mpsc;
use futures::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use std::net::SocketAddr;

/// A client speaking inline commands, as `nc` would.
struct Client {
    sink: runtime::net::Sink,
    stream: runtime::net::Stream,
}

impl Client {
    async fn connect(context: &runtime::Context, address: SocketAddr) -> Client {
        let (sink, stream) = context.dial(address).await.expect("kv accepts");
        Client { sink, stream }
    }

    /// Sends `command` and reads the first line of its reply.
    async fn ask(&mut self, command: &str) -> String {
        self.sink
            .write_all(format!("{command}\r\n").as_bytes())
            .await
            .expect("sent");
        self.sink.flush().await.expect("sent");
        let mut line = String::new();
        self.stream.read_line(&mut line).await.expect("a reply");
        line
    }

    /// Whether the server closed the connection: the next read finds its end.
    async fn closed(&mut self) -> bool {
        let mut line = String::new();
        matches!(self.stream.read_line(&mut line).await, Ok(0) | Err(_))
    }
}

/// The service on loopback ports the kernel picks.
async fn serve(context: &runtime::Context) -> kv::Service {
    let loopback = "127.0.0.1:0".parse().unwrap();
    kv::serve(context, loopback, loopback)
        .await
        .expect("kv starts")
}

/// How often `actor`'s supervisor restarted it, from the runtime's metrics.
fn restarts(context: &runtime::Context, actor: &str) -> u64 {
    let series = format!("actor_restarts_total{{actor=\"{actor}\"}} ");
    context
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0)
}

/// The acceptor is a permanent child of `kv`: made to fail, it is restarted alone (one for
/// one) and accepts again, on the same address; the client connected before it failed is
/// still served by its connection, which `kv_connections` kept.
#[runtime::test(timeout = "60s")]
async fn a_failed_acceptor_is_restarted_alone_and_its_clients_stay(context: runtime::Context) {
    let service = serve(&context).await;
    let mut before = Client::connect(&context, service.address).await;
    assert_eq!(before.ask("PING").await, "+PONG\r\n");

    assert!(service.acceptor.fail().await.is_err(), "it panicked");
    // Asked after the failure, so answered by the next incarnation (messages wait for it):
    // the restart has happened.
    assert_eq!(service.acceptor.address().await, Ok(service.address));
    assert_eq!(restarts(&context, "kv_acceptor"), 1);
    for other in ["kv_store", "kv_connections", "kv_metrics"] {
        assert_eq!(restarts(&context, other), 0, "{other} was not restarted");
    }

    assert_eq!(
        before.ask("ECHO still-here").await,
        "$10\r\n",
        "the connection outlived the acceptor's incarnation"
    );
    let mut after = Client::connect(&context, service.address).await;
    assert_eq!(after.ask("PING").await, "+PONG\r\n");
    assert_eq!(service.connections.count(), 2);
    assert_eq!(service.supervisor.stop().await, ExitReason::Stopped);
}

/// A child of `kv_connections` beside the clients' connections whose `on_stop` asks the
/// store for a key and says what it heard.
#[actor]
struct LastWords {
    store: StoreRef,
    said: mpsc::UnboundedSender<Reply>,
}

#[actor]
impl LastWords {
    async fn on_stop(&mut self) {
        let (reply, _) =
            kv::execute(&self.store, vec![b"GET".to_vec(), b"greeting".to_vec()]).await;
        let _ = self.said.unbounded_send(reply);
    }
}

/// Stopping `kv` stops its children in reverse start order: the connections close while
/// the store still answers them (a connection's last request is served: the store stops
/// after), then the store stops; every child ends for good, and both ports are closed
/// once the tree has ended.
#[runtime::test(timeout = "60s")]
async fn stopping_the_tree_closes_the_connections_before_the_store_stops(
    context: runtime::Context,
) {
    let service = serve(&context).await;
    let mut client = Client::connect(&context, service.address).await;
    assert_eq!(client.ask("SET greeting hello").await, "+OK\r\n");
    let (said, mut heard) = mpsc::unbounded();
    let store = service.store.clone();
    let last_words = service
        .connections
        .start_child(
            ChildSpec::new(move || LastWords {
                store: store.clone(),
                said: said.clone(),
            })
            .restart(Restart::Temporary),
        )
        .await
        .expect("a child of kv_connections");

    assert_eq!(service.supervisor.stop().await, ExitReason::Stopped);
    assert_eq!(
        heard.next().await,
        Some(Reply::Bulk(Some("hello".into()))),
        "the store answered a connection that was stopping"
    );
    assert_eq!(last_words.join().await, ExitReason::Stopped);
    assert!(client.closed().await, "the client's connection was closed");
    assert_eq!(service.connections.join().await, ExitReason::Stopped);
    assert_eq!(service.acceptor.join().await, ExitReason::Stopped);
    assert_eq!(service.store.join().await, ExitReason::Stopped);
    for address in [service.address, service.metrics] {
        assert!(
            context.dial(address).await.is_err(),
            "{address} was closed with the tree"
        );
    }
}

/// An acceptor stopped for good by its ref closes its port while the tree runs on: its
/// supervisor drops the child's spec (and the listener its factory holds) once it is done
/// with the child, so no connection is accepted into a backlog nobody serves.
#[runtime::test(timeout = "60s")]
async fn an_acceptor_stopped_for_good_closes_its_port(context: runtime::Context) {
    let loopback = "127.0.0.1:0".parse().unwrap();
    let service = kv::serve(&context, loopback, loopback)
        .await
        .expect("kv starts");
    assert_eq!(service.acceptor.stop().await, ExitReason::Stopped);
    assert_eq!(
        service.acceptor.address().await,
        Err(actors::Error::Closed),
        "done for good"
    );
    let dialed = context.dial(service.address).await;
    assert!(
        dialed.is_err(),
        "{} still accepts connections that nobody serves",
        service.address
    );
    assert_eq!(service.supervisor.stop().await, ExitReason::Stopped);
}
