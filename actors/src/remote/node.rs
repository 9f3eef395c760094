//! A node: two NATS connections (data, and a control connection for membership, so that
//! heartbeats never wait behind data a slow consumer holds up), the names it exposes, what it
//! knows of its peers (`membership.rs`), and the asks and monitors that wait on them. This
//! file owns the node's state and its accessors; each job is a file of its own, above it:
//! - `join.rs`: joining (the name check, the connections, the first heartbeat heard back) and
//!   leaving;
//! - `announce.rs`: what the node says of itself (heartbeats, beats, ended exposures, its
//!   departure), in order, under the state lock;
//! - `heartbeat.rs`: the node's own task, which hears its peers and itself and judges who is
//!   up;
//! - `waiting.rs`: the asks and monitors waiting on targets, resolved when a target can no
//!   longer answer;
//! - `expose.rs` and `serve.rs`: exposing a local actor, and serving it;
//! - `remote_ref.rs` and `topic.rs`: reaching actors and topics elsewhere.
//!
//! Subjects, under a prefix (`actors` unless set):
//! - `<prefix>.a.<name>`: messages to a name, subscribed by every node that exposes it in the
//!   queue group of the same name (one of them takes each message);
//! - `<prefix>.n.<node>.<name>`: messages to the actor one node exposes;
//! - `<prefix>.node.<node>`: answered by the node (on its control connection), so a second
//!   node joining under its name is refused;
//! - `<prefix>.announce.<node>`: the node's heartbeats (with the names it exposes), departure
//!   and ended exposures ([`Announcement`](super::codec::Announcement)), on the data
//!   connection, so that they are ordered with its replies (a reply sent as an actor ends
//!   arrives before its end);
//! - `<prefix>.alive.<node>`: the node's beats, on the control connection: liveness that a
//!   held-up data connection cannot hold up. Every node listens to `<prefix>.announce.*` and
//!   `<prefix>.alive.*`, and takes a message only from the subject of the node it names;
//! - `<prefix>.t.<topic>`: a topic spanning nodes.
//!
//! Invariant: the node's state is one lock (`NodeInner::state`). Nothing that can run code of
//! another task (resolving an ask or a monitor, ending an exposure's task) happens under it,
//! but queueing an announcement does, so that announcements go out in the order of the state
//! they describe.

use super::liveness::Liveness;
use super::membership::Peers;
use super::options::NodeOptions;
use super::subjects::Target;
use crate::sync::Mutex;
use crate::{ActorId, Error, ExitReason};
use futures::channel::oneshot;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use runtime::prelude::*;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An ask or a monitor waiting on a target.
pub(super) enum Waiter {
    /// An ask, and the incarnation of its node it was sent to (0: any, the node was not up).
    Ask(oneshot::Sender<Error>, u64),
    /// A monitor, and when it began.
    Monitor(oneshot::Sender<ExitReason>, Instant),
}

impl Waiter {
    /// Resolves it: an ask with `ask`, a monitor with `monitor`.
    pub(super) fn resolve(self, ask: impl FnOnce() -> Error, monitor: impl FnOnce() -> ExitReason) {
        match self {
            Waiter::Ask(sender, _) => {
                let _ = sender.send(ask());
            }
            Waiter::Monitor(sender, _) => {
                let _ = sender.send(monitor());
            }
        }
    }
}

pub(super) struct Exposure {
    pub(super) id: ActorId,
    /// Tells this exposure from a later one of the same name.
    pub(super) token: u64,
    /// Its serving task, taken by a withdrawal that waits for it.
    pub(super) task: Option<runtime::Handle<()>>,
    /// Its two subscriptions', drained by a withdrawal and ended at once when the node
    /// leaves (the task's end may come later).
    pub(super) unsubscribers: [nats::Unsubscriber; 2],
}

impl Exposure {
    /// Stops serving: no more messages are taken, and the task ends.
    pub(super) fn end(self) {
        for unsubscriber in &self.unsubscribers {
            unsubscriber.unsubscribe();
        }
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

pub(super) struct State {
    pub(super) peers: Peers,
    /// This node's incarnation (a new one after it was cut off), and the sequence number of
    /// its last announcement in it.
    pub(super) incarnation: u64,
    /// Since when it has been present without a break (wall-clock milliseconds).
    pub(super) since_millis: u64,
    /// The sequence number of its own latest beat heard back (in the current incarnation).
    pub(super) echoed_seq: u64,
    /// When it last took an incarnation above another node's claim to its name.
    pub(super) last_bump: Option<Instant>,
    pub(super) seq: u64,
    pub(super) beat_seq: u64,
    pub(super) exposed: HashMap<String, Exposure>,
    pub(super) next_exposure: u64,
    pub(super) spanned: HashSet<String>,
    pub(super) waiting: HashMap<u64, (Target, Waiter)>,
    pub(super) next_waiter: u64,
    pub(super) left: bool,
    pub(super) heartbeat: Option<runtime::Handle<()>>,
}

impl State {
    /// Takes `incarnation` after the current one: its sequence numbers start again.
    pub(super) fn take_incarnation(&mut self, incarnation: u64) {
        self.incarnation = incarnation;
        self.seq = 0;
        self.beat_seq = 0;
        self.echoed_seq = 0;
    }

    /// Whether a live node (this one included) exposes `name`.
    pub(super) fn exposed_anywhere(&self, name: &str) -> bool {
        self.exposed.contains_key(name) || self.peers.expose(name)
    }

    /// Whether `target` is known to run now: its node is up (or is `me`) and exposes it.
    pub(super) fn alive(&self, me: &str, target: &Target) -> bool {
        match target {
            Target::Name(name) => self.exposed_anywhere(name),
            Target::Node { node, name } if node == me => self.exposed.contains_key(name),
            Target::Node { node, name } => self
                .peers
                .get(node)
                .is_some_and(|peer| peer.exposed.contains(name)),
        }
    }
}

/// Metrics of the remote layer, one family per runtime.
#[derive(Clone, Default)]
pub(super) struct Metrics {
    pub(super) dropped: Family<[(&'static str, String); 2], Counter>,
}

/// What every handle of a node shares (its `Node` clones, its remote refs and topics, its
/// tasks): the connections, the node's liveness and its state.
pub(crate) struct NodeInner {
    pub(crate) name: String,
    pub(crate) options: NodeOptions,
    /// Data: asks, tells, replies, topics.
    pub(crate) client: nats::Client,
    /// Membership: heartbeats, announcements and the name's control subject, which a
    /// consumer that holds up the data connection cannot hold up.
    pub(super) control: nats::Client,
    /// Whether this node's heartbeats have been flowing (read by every served ask).
    pub(crate) liveness: Arc<Liveness>,
    pub(super) announce_prefix: String,
    pub(super) alive_prefix: String,
    /// Random per node: its own announcements carry it.
    pub(super) nonce: u64,
    /// When it joined (wall-clock milliseconds): claims to its name sent before are not
    /// looked at.
    pub(super) joined_millis: u64,
    /// When the node joined: peers are heard from only after.
    pub(super) joined: Instant,
    /// The node's scope: its tasks run here.
    pub(crate) context: runtime::Context,
    pub(super) state: Mutex<State>,
    pub(super) metrics: Metrics,
}

/// A member of a cluster of nodes that reach each other's actors over NATS. Cheap to clone.
///
/// Its tasks (heartbeats, serving exposed actors) run in a child scope of the context given
/// to [`join`](Self::join): they end when that context's task ends, or at
/// [`leave`](Self::leave).
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_lock`: Debug never waits, and never deadlocks on the state lock its own thread
        // holds (a `{:?}` of the node inside a job's critical section).
        let peers = self.inner.state.try_lock().map(|state| {
            let mut peers: Vec<String> = state.peers.iter().map(|(node, _)| node.clone()).collect();
            peers.sort();
            peers
        });
        f.debug_struct("Node")
            .field("name", &self.inner.name)
            .field("peers", &peers)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The peers up now, by name.
    pub fn peers(&self) -> Vec<String> {
        let mut peers: Vec<_> = self
            .inner
            .state
            .lock()
            .peers
            .iter()
            .map(|(node, _)| node.clone())
            .collect();
        peers.sort();
        peers
    }

    /// The live nodes (this one included) that expose `name` now, by name.
    pub fn exposed_by(&self, name: &str) -> Vec<String> {
        let state = self.inner.state.lock();
        let mut nodes: Vec<_> = state
            .peers
            .iter()
            .filter(|(_, peer)| peer.exposed.contains(name))
            .map(|(node, _)| node.clone())
            .collect();
        if state.exposed.contains_key(name) {
            nodes.push(self.inner.name.clone());
        }
        nodes.sort();
        nodes
    }

    /// The names this node exposes now.
    pub fn exposed(&self) -> Vec<String> {
        let mut names: Vec<_> = self.inner.state.lock().exposed.keys().cloned().collect();
        names.sort();
        names
    }

    /// Remote messages this node dropped for `reason` (`full`: the mailbox had no room;
    /// `busy`: too many asks in flight; `decode`: bytes that are not the actor's message;
    /// `expired`: asks whose deadline had passed before they could start; `cut_off`: asks
    /// sent while this node was cut off, which their askers may have failed as `NodeDown`;
    /// `old_incarnation`, `other_incarnation`: asks sent to an incarnation of this node's
    /// name that is gone, or that is another node's; `beats_lost`: ticks at which peers were
    /// not judged because their beats were dropped by a full queue;
    /// `heartbeat`: its own heartbeats it could not queue), and announcements it refused
    /// (`forged`: not from the subject of the node it names, or a tag that does not verify;
    /// `stale`, `replayed`, `conflict`: from an incarnation that is gone, a replay, or a
    /// restart claimed while the known incarnation still heartbeats; `peer_table_full`,
    /// `names_full`, `invalid_name`: past the peer limits).
    pub fn dropped(&self, reason: &'static str) -> u64 {
        self.inner.count(reason, 0)
    }

    /// The NATS client the node uses.
    pub fn client(&self) -> &nats::Client {
        &self.inner.client
    }

    /// Waits until `node` is up (its heartbeat was heard), for at most `timeout`.
    pub async fn wait_for_peer(&self, node: &str, timeout: Duration) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            if self.inner.state.lock().peers.contains(node) {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout);
            }
            // Heartbeats come every interval: look again after a fraction of one.
            self.inner
                .context
                .sleep(self.inner.options.heartbeat_interval / 4)
                .await;
        }
    }
}

impl NodeInner {
    /// Counts `add` drops for `reason` and returns the total.
    pub(crate) fn count(&self, reason: &'static str, add: u64) -> u64 {
        let counter = self
            .metrics
            .dropped
            .get_or_create(&[("node", self.name.clone()), ("reason", reason.to_string())]);
        counter.inc_by(add) + add
    }
}
