//! Remote actors over NATS (feature `remote`): the same asks, tells and `try_` sends to actors
//! on other processes and machines.
//!
//! ```no_run
//! use actors::prelude::*;
//! use actors::remote::Node;
//!
//! #[actor]
//! struct Counter {
//!     total: u64,
//! }
//!
//! #[actor(remote)]
//! impl Counter {
//!     fn add(&mut self, by: u64) -> u64 {
//!         self.total += by;
//!         self.total
//!     }
//! }
//!
//! # async fn nodes(context: runtime::Context) -> Result<(), Box<dyn std::error::Error>> {
//! // On one node:
//! let node = Node::join(&context, ["nats://127.0.0.1:4222"], "node-a").await?;
//! node.expose("counter", &Counter { total: 0 }.spawn(&context))
//!     .await?;
//! // On another:
//! let node = Node::join(&context, ["nats://127.0.0.1:4222"], "node-b").await?;
//! let counter: CounterRemoteRef = node.lookup("counter");
//! assert_eq!(counter.add(2).await?, 2);
//! # Ok(())
//! # }
//! ```
//!
//! - `#[actor(remote)]` on an actor's handler impl generates, besides the local ref,
//!   `<Name>RemoteRef`, with the same `handler(args)` asks, `tell_handler(args)` and
//!   `try_handler(args)` sends and the same [`Error`]s. Handler arguments and
//!   replies travel serialized with serde in postcard's compact binary format, so they must
//!   be `Serialize + DeserializeOwned`. Both nodes must run the same handlers: every request
//!   carries a hash of the actor's (or interface's) name and its handlers' names, argument
//!   and reply types as written, in order, and a node whose handlers differ that way (added, removed, reordered, renamed,
//!   retyped, or compiled out by other features) refuses it with
//!   [`Error::Remote`] rather than run the wrong one. What the hash
//!   cannot see (a type alias's target, a struct's fields, serde attributes) must agree by
//!   deployment; bytes that then do not parse are an `Error::Remote` too.
//! - `#[interface(remote)]` does the same for an interface: `<Trait>RemoteRef`, and any
//!   implementing actor's interface ref (`<Trait>Ref`) can be exposed, so nodes may serve one
//!   name with different actor types behind it.
//! - [`Node::join`] connects a node (one NATS connection) under a name unique in the cluster.
//!   [`Node::expose`] serves a local actor under a name: every node exposing one name shares
//!   its load through a NATS queue group. [`Node::lookup`] gives a remote ref to a name
//!   (whichever node takes each message), [`Node::lookup_on`] to the actor one node
//!   exposes.
//!
//! Guarantees, exactly:
//! - **At most once.** A message is handled once or not at all; nothing is retried. A tell
//!   that NATS or a full mailbox drops is lost and not reported to the sender; the serving
//!   node counts what it drops (`Node::dropped`, metric `remote_dropped_total`: a full
//!   mailbox, too many asks in flight, bytes that are not the actor's message, asks too late
//!   to start), and NATS reports what a slow subscription drops as a slow-consumer event.
//! - **A failed ask never starts later.** An ask's deadline travels as a wall-clock time.
//!   The serving node starts an ask (puts it in the mailbox, and again right before its
//!   handler runs) only while its clock plus [`NodeOptions::with_max_clock_skew`] is before
//!   that deadline, so an ask that resolved [`Error::Timeout`] is never started afterwards
//!   wherever it waited (a reconnect buffer, the NATS server, a paused node's socket, a
//!   mailbox), as long as the nodes' clocks differ by no more than the bound. An ask whose
//!   NATS connection drops after it was sent may already be running: it resolves `Timeout`
//!   at its deadline rather than fail at once. A node that could not heartbeat for its own
//!   silence (paused, cut off from NATS) assumes its peers failed their asks to it with
//!   [`Error::NodeDown`]: it starts none until it heartbeats again, then comes back as a new
//!   incarnation and starts only asks sent after its return. An ask that resolved (answered,
//!   failed, dropped) while its node was disconnected from NATS is cut from the reconnect
//!   buffer and never sent. What no node can promise: an ask that *started* before its
//!   deadline may finish after it, so a `Timeout` means "not known to have run", never "did
//!   not run".
//! - **FIFO per sender and target while the connection holds.** Messages one node sends to
//!   one exposed actor reach its mailbox in the order sent, as long as neither node's NATS
//!   connection drops in between (NATS keeps order per publisher and subscription).
//!   Messages to a name served by several nodes are ordered per serving node only. A reply
//!   sent as an actor ends reaches its asker before the end is announced.
//! - **A full remote mailbox never blocks the node.** The serving side puts each message in
//!   the mailbox without waiting: when it is full, a tell is dropped and counted and an ask
//!   answers [`Error::Full`] at once. Each exposed actor has its own
//!   subscription, so one slow actor does not hold up the others or the connection.
//! - **Asks always have a deadline**: 5 s unless `.timeout(d)` or the node's option says
//!   otherwise, and the serving node drops a reply whose asker has given up. An ask to a
//!   name nobody exposes fails at once with [`Error::NotExposed`], one to a node known down
//!   with [`Error::NodeDown`], and one that the NATS account's permissions forbid with an
//!   [`Error::Remote`] naming the operation and subject.
//! - **Failure is visible, and only real failure.** Nodes heartbeat every
//!   `heartbeat_interval` (500 ms by default) on a NATS connection of their own, apart from
//!   data, so a consumer that stops reading (which makes the NATS server hold up its
//!   producers) does not make a healthy node look down. A node missing `heartbeat_misses`
//!   (3) in a row, or leaving, is down. Asks pending on a down node fail at once with
//!   [`Error::NodeDown`], and [`RemoteRef::monitor`]s resolve with
//!   [`ExitReason::NodeDown`](crate::ExitReason::NodeDown): for a ref to one node's actor
//!   when that node is down; for a ref to a name, when no node that exposed it is left. An
//!   ask to a name served by several nodes, taken by one that dies, waits for its deadline
//!   (NATS does not say which member of a queue group took a message).
//! - **One name, one node.** A node restarted under its name joins at once (a holder that
//!   does not answer its name check for a whole silence is taken over). A node that was cut
//!   off and replaced meanwhile runs none of its name's asks when it comes back: asks carry
//!   the incarnation they are for, and a node answers none sent to another. With a
//!   membership secret it also leaves the cluster when it hears the replacement (the node
//!   present longer keeps the name); its calls then fail [`Error::Closed`]. (Without one it
//!   does not: anyone could claim its name.)
//! - **Bounded trust in peers.** What a peer announces is capped by the local configuration
//!   ([`NodeOptions::with_peer_limits`]): its silence, the number of peers and of exposed
//!   names; invalid names are dropped. A newer incarnation of a node replaces a live one only
//!   once the old one stops heartbeating, unless membership is authenticated.
//!
//! Securing membership: announcements travel on `<prefix>.announce.<node>` and
//! `<prefix>.alive.<node>`, and a node takes one only from the subject of the node it names.
//! Either give every node a NATS user whose permissions let it speak only for itself, as in
//! this `nats-server` configuration for node `a` (prefix `actors`):
//!
//! ```text
//! { user: a, password: "...", permissions: {
//!     publish: { allow: ["actors.announce.a", "actors.alive.a", "actors.node.*",
//!                        "actors.a.>", "actors.n.>", "actors.t.>", "_INBOX.>"] },
//!     subscribe: { allow: ["actors.announce.*", "actors.alive.*", "actors.node.a",
//!                          "actors.a.>", "actors.n.a.>", "actors.t.>", "_INBOX.>"] } } }
//! ```
//!
//! or set one secret on every node with [`NodeOptions::with_secret`]: announcements are then
//! signed (HMAC-SHA-256), numbered and dated, and a client without the secret can neither
//! forge nor replay one. Without either, any client that may publish on the cluster's
//! subjects can claim that a node left.
//!
//! - Tells need no reply, so a tell to a name nobody exposes is dropped by NATS unseen.

mod announce;
mod auth;
mod codec;
mod expose;
mod heartbeat;
mod join;
mod liveness;
mod membership;
mod nats_error;
mod node;
mod options;
mod protocol;
mod remote_ref;
mod responder;
mod serve;
mod subjects;
mod topic;
mod waiting;

pub use node::Node;
pub use options::{JoinError, NodeOptions};
pub use protocol::{__schema_mix, Exposable, Protocol, Remote, Served};
pub use remote_ref::{RemoteAsk, RemoteHandle, RemoteMonitor, RemoteRef};
pub use responder::Responder;
pub use subjects::Target;
pub use topic::RemoteTopic;

/// The NATS client a node uses, for what the node does not wrap.
pub use nats;

// The documentation above links to the errors by name.
#[cfg(doc)]
use crate::Error;
