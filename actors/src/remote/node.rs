//! A node: two NATS connections (data, and a control connection for membership, so that
//! heartbeats never wait behind data a slow consumer holds up), the names it exposes, what it
//! knows of its peers (`membership.rs`), and the asks and monitors that wait on them.
//!
//! Subjects, under a prefix (`actors` unless set):
//! - `<prefix>.a.<name>`: messages to a name, subscribed by every node that exposes it in the
//!   queue group of the same name (one of them takes each message);
//! - `<prefix>.n.<node>.<name>`: messages to the actor one node exposes;
//! - `<prefix>.node.<node>`: answered by the node (on its control connection), so a second
//!   node joining under its name is refused;
//! - `<prefix>.announce.<node>`: the node's heartbeats (with the names it exposes), departure
//!   and ended exposures ([`Announcement`]), on the data connection, so that they are
//!   ordered with its replies (a reply sent as an actor ends arrives before its end);
//! - `<prefix>.alive.<node>`: the node's beats, on the control connection: liveness that a
//!   held-up data connection cannot hold up. Every node listens to `<prefix>.announce.*` and
//!   `<prefix>.alive.*`, and takes a message only from the subject of the node it names;
//! - `<prefix>.t.<topic>`: a topic spanning nodes.
//!
//! Invariants:
//! - A peer is up from its first admitted heartbeat until it misses `misses` in a row (by its
//!   announced interval, capped locally), leaves, or comes back as a new incarnation (it
//!   restarted: the old one is down). Being cut off from NATS makes every peer miss its
//!   heartbeats: a partitioned node sees the others down, as they see it.
//! - A node that could not heartbeat for its own silence (paused, cut off, starved) assumes
//!   its peers saw it down: it starts no remote ask until it heartbeats again, then takes a
//!   new incarnation and starts no ask sent before its return (`liveness.rs`). Nor does it
//!   judge its peers by a silence it caused: they get a whole silence from its return.
//! - When a peer goes down, every waiting ask and monitor whose target can no longer answer
//!   is resolved at once (one node's actor: that node is down; a name: no live node, this
//!   one included, exposes it any more), each exactly once, outside the state lock. Asks
//!   and monitors made later for a node known down resolve `NodeDown` at once.
//! - An exposure ends when its actor ends, when it is withdrawn, or when the node leaves;
//!   its end is announced so that monitors elsewhere resolve with the actor's exit reason.
//! - Announcements go out in the order their state was read: each is encoded and queued
//!   under the state lock, with the next sequence number of the current incarnation.
//! - One name, one node (with a membership secret, which makes claims unforgeable): a node
//!   that hears another node under its own name (another nonce),
//!   in an announcement sent after its own join and younger than `max_peer_silence`,
//!   compares how long each has been present without a break (since its join, or since it
//!   found itself cut off: a node that is cut off counts its presence from then on, and says
//!   so in every announcement). The one present for less time leaves the cluster: it is the
//!   node that was cut off, or paused, and replaced meanwhile (what it announced before it
//!   found itself cut off was sent before its replacement joined, and is not looked at). The
//!   other stays, and if the newcomer's incarnation is above its own, takes one above it (at
//!   most once an interval), so that peers that took the newcomer's take it back.
//! - A node is heard (its `Liveness`) only through its own beats coming back, on a
//!   subscription of their own, read first, in increasing sequence; a join fails if they do
//!   not come back within a silence. Peers count a node alive from its beats alone, so a
//!   node that cannot beat is down for them as it is cut off for itself.

use super::auth::Key;
use super::codec::{self, Announcement, Body, Exit};
use super::liveness::Liveness;
use super::membership::{self, Change, Limits, Peers};
use super::remote_ref::Target;
use super::serve;
use super::{Exposable, RemoteHandle, Served};
use crate::{ActorId, Error, ExitReason};
use futures::StreamExt;
use futures::channel::oneshot;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use runtime::prelude::*;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// How a node joins and behaves. Build it with [`NodeOptions::new`] and the `with_` methods.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub(crate) name: String,
    pub(crate) nats: nats::Options,
    pub(crate) prefix: String,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) heartbeat_misses: u32,
    pub(crate) ask_timeout: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) max_clock_skew: Duration,
    pub(crate) secret: Option<Key>,
    secret_len: usize,
    pub(crate) max_peers: usize,
    pub(crate) max_names: usize,
    pub(crate) max_peer_silence: Duration,
}

/// Why a node could not join.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JoinError {
    /// The node name or a subject prefix that cannot be used, and what is allowed.
    Invalid(String),
    /// A node of that name is in the cluster already.
    NameTaken(String),
    /// NATS refused or could not be reached.
    Nats(nats::Error),
    /// The node's own beats on `subject` did not come back through the NATS server within
    /// its silence: the account may not publish or subscribe there, or the server is held up.
    Unheard { subject: String },
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Invalid(why) => write!(f, "cannot join: {why}"),
            JoinError::NameTaken(name) => write!(
                f,
                "cannot join: a node named `{name}` is in the cluster already; node names are \
                 unique"
            ),
            JoinError::Nats(error) => write!(f, "cannot join: {error}"),
            JoinError::Unheard { subject } => write!(
                f,
                "cannot join: the node's own beats on `{subject}` did not come back through \
                 the NATS server within its heartbeat silence; the account must be allowed to \
                 publish and subscribe there"
            ),
        }
    }
}

impl std::error::Error for JoinError {}

impl From<nats::Error> for JoinError {
    fn from(error: nats::Error) -> Self {
        JoinError::Nats(error)
    }
}

/// Whether `text` is one subject token: letters, digits, `_` and `-`.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `name` is a node name: one token of at most 64 bytes (a dot would make
/// `<prefix>.n.<node>.<name>` another node's subject).
pub(crate) fn check_node_name(name: &str) -> Result<(), Error> {
    if is_token(name) && name.len() <= 64 {
        return Ok(());
    }
    Err(Error::Remote(
        format!("`{name}` is not a valid node name: use 1 to 64 letters, digits, `_` and `-`")
            .into(),
    ))
}

/// Whether `name` is an actor or topic name: tokens joined by dots, at most 128 bytes.
pub(crate) fn check_name(name: &str, what: &str) -> Result<(), Error> {
    if name.len() <= 128 && name.split('.').all(is_token) {
        return Ok(());
    }
    Err(Error::Remote(
        format!(
            "`{name}` is not a valid {what} name: use letters, digits, `_` and `-`, in tokens \
             joined by `.`, at most 128 bytes"
        )
        .into(),
    ))
}

impl NodeOptions {
    /// Options for the node `name` (letters, digits, `_` and `-`), connecting to the NATS
    /// servers of `servers` (`nats://[user:password@]host:port`, see [`nats::Options::new`]).
    pub fn new<I, S>(servers: I, name: &str) -> Result<Self, JoinError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        if !is_token(name) || name.len() > 64 {
            return Err(JoinError::Invalid(format!(
                "`{name}` is not a valid node name: use 1 to 64 letters, digits, `_` and `-`"
            )));
        }
        let nats = nats::Options::new(servers)?.with_name(format!("actors node {name}"));
        Ok(Self {
            name: name.to_string(),
            nats,
            prefix: "actors".into(),
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_misses: 3,
            ask_timeout: Duration::from_secs(5),
            max_in_flight: 4096,
            max_clock_skew: Duration::ZERO,
            secret: None,
            secret_len: 0,
            max_peers: 1024,
            max_names: 65_536,
            max_peer_silence: Duration::from_secs(30),
        })
    }

    /// How far apart the nodes' wall clocks may be (default 0: one machine, or clocks kept
    /// in step well below the asks' deadlines). An ask's deadline travels as a wall-clock
    /// time, and a serving node starts it only while its own clock, plus this bound, is
    /// before the deadline: so an ask never starts after its asker gave up, as long as the
    /// clocks differ by no more than this. Asks whose whole deadline is shorter than the
    /// bound never start. Must be below the heartbeat silence.
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// Authenticates membership (heartbeats, departures, ended exposures) with a secret every
    /// node of the cluster shares, at least 16 bytes: each announcement carries an
    /// HMAC-SHA-256 tag over its subject and bytes, a sequence number and a send time, and
    /// nodes take only announcements that verify, in order, and younger than
    /// `max_peer_silence`. Without it, membership trusts whoever may publish on
    /// `<prefix>.announce.<node>`: restrict that with NATS permissions per node (see the
    /// crate's remote documentation), or expect a client on the same subjects to be able to
    /// forge a node's departure.
    pub fn with_secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(Key::new(secret.as_ref()));
        self.secret_len = secret.as_ref().len();
        self
    }

    /// Bounds what peers may make this node keep: at most `max_peers` peers up (default
    /// 1024), `max_names` names exposed over all of them (default 65,536), and a silence of
    /// at most `max_silence` before a peer counts as down, whatever it announces (default
    /// 30 s). What does not fit is refused and counted (`Node::dropped`).
    pub fn with_peer_limits(
        mut self,
        max_peers: usize,
        max_names: usize,
        max_silence: Duration,
    ) -> Self {
        self.max_peers = max_peers;
        self.max_names = max_names;
        self.max_peer_silence = max_silence;
        self
    }

    /// This node's silence: how long its peers wait for a heartbeat before it counts as
    /// down (its interval times its misses, plus half an interval).
    pub(crate) fn silence(&self) -> Duration {
        self.heartbeat_interval * self.heartbeat_misses + self.heartbeat_interval / 2
    }

    /// Changes the NATS options (credentials, reconnects, limits).
    pub fn with_nats(mut self, change: impl FnOnce(nats::Options) -> nats::Options) -> Self {
        self.nats = change(self.nats);
        self
    }

    /// How often the node heartbeats (default 500 ms), and how many heartbeats in a row a
    /// peer may miss before it is down (default 3).
    pub fn with_heartbeat(mut self, interval: Duration, misses: u32) -> Self {
        self.heartbeat_interval = interval;
        self.heartbeat_misses = misses;
        self
    }

    /// The deadline of asks that set none (default 5 s).
    pub fn with_ask_timeout(mut self, timeout: Duration) -> Self {
        self.ask_timeout = timeout;
        self
    }

    /// The subject prefix (default `actors`; one token): clusters with different prefixes
    /// share a NATS server without seeing each other.
    pub fn with_subject_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    /// The asks an exposed actor may have in flight (default 4096): beyond, new ones are
    /// answered [`Error::Full`].
    pub fn with_max_in_flight(mut self, asks: usize) -> Self {
        self.max_in_flight = asks;
        self
    }

    fn validate(&self) -> Result<(), JoinError> {
        // One token: with dots, one cluster's prefix could be another's actor subject.
        if !is_token(&self.prefix) {
            return Err(JoinError::Invalid(format!(
                "`{}` is not a valid subject prefix: use one token of letters, digits, `_` \
                 and `-`",
                self.prefix
            )));
        }
        if self.heartbeat_interval < Duration::from_millis(10) || self.heartbeat_misses < 2 {
            return Err(JoinError::Invalid(
                "the heartbeat interval must be at least 10 ms and misses at least 2 (a node \
                 must hear its own beat come back within its silence)"
                    .into(),
            ));
        }
        if self.ask_timeout.is_zero() || self.max_in_flight == 0 {
            return Err(JoinError::Invalid(
                "the ask timeout and max_in_flight must be above zero".into(),
            ));
        }
        let silence = self.silence();
        if self.max_clock_skew >= silence {
            return Err(JoinError::Invalid(format!(
                "the clock skew bound of {:?} must be below the heartbeat silence of {silence:?}",
                self.max_clock_skew
            )));
        }
        if self.max_peers == 0 || self.max_names == 0 || self.max_peer_silence < silence {
            return Err(JoinError::Invalid(format!(
                "the peer limits must allow at least one peer and one name, and a silence of at \
                 least this node's own ({silence:?})"
            )));
        }
        if self.secret.is_some() && self.secret_len < 16 {
            return Err(JoinError::Invalid(
                "the membership secret must be at least 16 bytes".into(),
            ));
        }
        Ok(())
    }
}

/// An ask or a monitor waiting on a target.
enum Waiter {
    /// An ask, and the incarnation of its node it was sent to (0: any, the node was not up).
    Ask(oneshot::Sender<Error>, u64),
    /// A monitor, and when it began.
    Monitor(oneshot::Sender<ExitReason>, Instant),
}

impl Waiter {
    /// Resolves it: an ask with `ask`, a monitor with `monitor`.
    fn resolve(self, ask: impl FnOnce() -> Error, monitor: impl FnOnce() -> ExitReason) {
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

struct Exposure {
    id: ActorId,
    /// Tells this exposure from a later one of the same name.
    token: u64,
    /// Its serving task, taken by a withdrawal that waits for it.
    task: Option<runtime::Handle<()>>,
    /// Its two subscriptions', ended at once on withdrawal (the task's end may come later).
    unsubscribers: [nats::Unsubscriber; 2],
}

impl Exposure {
    /// Stops serving: no more messages are taken, and the task ends.
    fn end(self) {
        for unsubscriber in &self.unsubscribers {
            unsubscriber.unsubscribe();
        }
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

struct State {
    peers: Peers,
    /// This node's incarnation (a new one after it was cut off), and the sequence number of
    /// its last announcement in it.
    incarnation: u64,
    /// Since when it has been present without a break (wall-clock milliseconds).
    since_millis: u64,
    /// The sequence number of its own latest beat heard back (in the current incarnation).
    echoed_seq: u64,
    /// When it last took an incarnation above another node's claim to its name.
    last_bump: Option<Instant>,
    seq: u64,
    beat_seq: u64,
    exposed: HashMap<String, Exposure>,
    next_exposure: u64,
    spanned: HashSet<String>,
    waiting: HashMap<u64, (Target, Waiter)>,
    next_waiter: u64,
    left: bool,
    heartbeat: Option<runtime::Handle<()>>,
}

impl State {
    /// Takes `incarnation` after the current one: its sequence numbers start again.
    fn take_incarnation(&mut self, incarnation: u64) {
        self.incarnation = incarnation;
        self.seq = 0;
        self.beat_seq = 0;
        self.echoed_seq = 0;
    }

    /// Whether a live node (this one included) exposes `name`.
    fn exposed_anywhere(&self, name: &str) -> bool {
        self.exposed.contains_key(name) || self.peers.expose(name)
    }

    /// Whether `target` is known to run now: its node is up (or is `me`) and exposes it.
    fn alive(&self, me: &str, target: &Target) -> bool {
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
struct Metrics {
    dropped: Family<[(&'static str, String); 2], Counter>,
}

pub(crate) struct NodeInner {
    pub(crate) name: String,
    pub(crate) options: NodeOptions,
    /// Data: asks, tells, replies, topics.
    pub(crate) client: nats::Client,
    /// Membership: heartbeats, announcements and the name's control subject, which a
    /// consumer that holds up the data connection cannot hold up.
    control: nats::Client,
    /// Whether this node's heartbeats have been flowing (read by every served ask).
    pub(crate) liveness: Arc<Liveness>,
    announce_prefix: String,
    alive_prefix: String,
    /// Random per node: its own announcements carry it.
    nonce: u64,
    /// When it joined (wall-clock milliseconds): claims to its name sent before are not
    /// looked at.
    joined_millis: u64,
    /// When the node joined: peers are heard from only after.
    joined: Instant,
    /// The node's scope: its tasks run here.
    pub(crate) context: runtime::Context,
    state: Mutex<State>,
    metrics: Metrics,
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
        f.debug_struct("Node")
            .field("name", &self.inner.name)
            .field("peers", &self.peers())
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Joins the cluster reachable through the NATS servers `servers` as `name`: one call,
    /// with the defaults of [`NodeOptions`].
    pub async fn join<I, S>(
        context: &runtime::Context,
        servers: I,
        name: &str,
    ) -> Result<Node, JoinError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::join_with(context, NodeOptions::new(servers, name)?).await
    }

    /// Joins with options.
    pub async fn join_with(
        context: &runtime::Context,
        options: NodeOptions,
    ) -> Result<Node, JoinError> {
        options.validate()?;
        let scope = context.child("node");
        let client = nats::Client::connect(&scope, options.nats.clone()).await?;
        let control = nats::Client::connect(
            &scope,
            options
                .nats
                .clone()
                .with_name(format!("actors node {} (control)", options.name)),
        )
        .await?;
        let control_subject = format!("{}.node.{}", options.prefix, options.name);
        check_name_free(&control, &control_subject, &options).await?;
        let joined_millis = codec::wall_millis();
        let control_subscription = control.subscribe(&control_subject)?;
        let announce_prefix = format!("{}.announce.", options.prefix);
        let alive_prefix = format!("{}.alive.", options.prefix);
        let announcements = client.subscribe(&format!("{announce_prefix}*"))?;
        let beats = control.subscribe(&format!("{alive_prefix}*"))?;
        // Its own beats on a subscription of their own, read first: a flood on the others
        // cannot keep them waiting or push them out of a full queue.
        let own_beats = control.subscribe(&format!("{alive_prefix}{}", options.name))?;
        // The server refuses a subscription its permissions forbid after taking it: once it
        // answered a ping sent after them, a refusal has arrived. A node that cannot hear its
        // cluster must not join it (it would look up once, then down for good).
        client.flush().await?;
        control.flush().await?;
        for subscription in [&control_subscription, &announcements, &beats, &own_beats] {
            if let Some(error) = subscription.error() {
                return Err(JoinError::Nats(error));
            }
        }
        let metrics = scope.extension(|registry| {
            let metrics = Metrics::default();
            registry.register(
                "remote_dropped",
                "Remote messages dropped by the serving node, and announcements refused, by \
                 node and reason",
                metrics.dropped.clone(),
            );
            metrics
        });
        let limits = Limits {
            max_peers: options.max_peers,
            max_names: options.max_names,
            max_silence: options.max_peer_silence,
            interval: options.heartbeat_interval,
            silence: options.silence(),
            authenticated: options.secret.is_some(),
            skew: options.max_clock_skew,
        };
        let first_incarnation = incarnation();
        let state = State {
            peers: Peers::new(&options.name, limits),
            incarnation: first_incarnation,
            since_millis: joined_millis,
            echoed_seq: 0,
            last_bump: None,
            seq: 0,
            beat_seq: 0,
            exposed: HashMap::new(),
            next_exposure: 0,
            spanned: HashSet::new(),
            waiting: HashMap::new(),
            next_waiter: 0,
            left: false,
            heartbeat: None,
        };
        let inner = Arc::new(NodeInner {
            name: options.name.clone(),
            joined: Instant::now(),
            liveness: Arc::new(Liveness::new(
                options.silence(),
                options.max_clock_skew,
                first_incarnation,
            )),
            announce_prefix,
            alive_prefix,
            nonce: nonce(),
            joined_millis,
            options,
            client,
            control,
            context: scope.clone(),
            state: Mutex::new(state),
            metrics: (*metrics).clone(),
        });
        let node = Node {
            inner: inner.clone(),
        };
        inner.announce_heartbeat();
        let heartbeat = {
            let inner = inner.clone();
            scope.child("heartbeat").spawn(move |context| {
                run(
                    inner,
                    context,
                    control_subscription,
                    announcements,
                    beats,
                    own_beats,
                )
            })
        };
        node.inner.state.lock().heartbeat = Some(heartbeat);
        // Its beats must reach the server and come back (the account may publish and
        // subscribe on its subject), or it would join deaf to itself.
        let silence = node.inner.options.silence();
        let waited = Instant::now();
        while !node.inner.liveness.heard() {
            if waited.elapsed() > silence {
                let subject = format!("{}{}", node.inner.alive_prefix, node.inner.name);
                node.clone().leave().await;
                return Err(JoinError::Unheard { subject });
            }
            scope.sleep(node.inner.options.heartbeat_interval / 4).await;
        }
        Ok(node)
    }

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

    /// Serves `actor` under `name` (tokens of letters, digits, `_` and `-` joined by `.`)
    /// until it ends, [`withdraw`](Self::withdraw) or [`leave`](Self::leave). Nodes
    /// exposing one name share its messages. The exposure holds a ref, so the actor runs
    /// while exposed even when no local ref is left. Fails if this node exposes `name`
    /// already, or the actor has ended. Once it returns, the NATS server routes the name's
    /// messages here.
    pub async fn expose<R: Exposable>(&self, name: &str, actor: &R) -> Result<(), Error> {
        let token = self.start_exposing(name, actor)?;
        // The subscriptions are in place once the server answered a ping sent after them, and
        // a refusal of either (the account's permissions) has arrived by then.
        let flushed = self.inner.client.flush().await.and_then(|()| {
            let state = self.inner.state.lock();
            let refused = state
                .exposed
                .get(name)
                .filter(|e| e.token == token)
                .and_then(|exposure| {
                    exposure
                        .unsubscribers
                        .iter()
                        .find_map(nats::Unsubscriber::error)
                });
            refused.map_or(Ok(()), Err)
        });
        if let Err(error) = flushed {
            // Not known to be served: not exposed (unless exposed again meanwhile).
            let removed = {
                let mut state = self.inner.state.lock();
                match state.exposed.get(name) {
                    Some(exposure) if exposure.token == token => {
                        let removed = state.exposed.remove(name);
                        self.inner.announce_exit(&mut state, name, Exit::Shutdown);
                        removed
                    }
                    _ => None,
                }
            };
            if let Some(exposure) = removed {
                exposure.end();
            }
            return Err(remote_error(error));
        }
        Ok(())
    }

    /// Subscribes and starts serving; the exposure's token.
    fn start_exposing<R: Exposable>(&self, name: &str, actor: &R) -> Result<u64, Error> {
        check_name(name, "actor")?;
        let served = actor.__served();
        if served.__is_closed() {
            return Err(Error::Closed);
        }
        let inner = &self.inner;
        let prefix = &inner.options.prefix;
        let mut state = inner.state.lock();
        if state.left {
            return Err(Error::Closed);
        }
        if let Some(exposure) = state.exposed.get(name) {
            return Err(Error::NameTaken {
                name: name.into(),
                holder: exposure.id,
            });
        }
        // Heartbeats list every exposed name: they must stay within the server's limit.
        let listed: usize = state.exposed.keys().map(|name| name.len() + 2).sum();
        if listed + name.len() + 256 > inner.client.max_payload() {
            return Err(Error::Remote(
                format!(
                    "this node exposes too many names for its heartbeat to fit the server's \
                     max_payload of {} bytes",
                    inner.client.max_payload()
                )
                .into(),
            ));
        }
        let shared_subject = format!("{prefix}.a.{name}");
        let shared = inner
            .client
            .queue_subscribe(&shared_subject, &shared_subject)
            .map_err(remote_error)?;
        let direct = inner
            .client
            .subscribe(&format!("{prefix}.n.{}.{name}", inner.name))
            .map_err(remote_error)?;
        let (id, join) = super::join_of(&served);
        let unsubscribers = [shared.unsubscriber(), direct.unsubscriber()];
        state.next_exposure += 1;
        let token = state.next_exposure;
        let task = {
            let inner = inner.clone();
            let name = name.to_string();
            inner
                .context
                .child("exposed")
                .spawn(move |_| serve::run(inner, name, token, served, join, shared, direct))
        };
        state.exposed.insert(
            name.to_string(),
            Exposure {
                id,
                token,
                task: Some(task),
                unsubscribers,
            },
        );
        drop(state);
        // Peers learn of the name with the next heartbeat; send it now.
        inner.announce_heartbeat();
        Ok(token)
    }

    /// Stops serving `name` (messages already put in the mailbox are still handled); false
    /// if this node did not expose it. Once it returns, the NATS server routes the name's
    /// messages here no more.
    ///
    /// It returns once the asks already taken have been answered (or their deadlines
    /// passed), and only then is the end announced: an asker is never told `Closed` for an
    /// ask that still runs.
    pub async fn withdraw(&self, name: &str) -> bool {
        let taken = {
            let mut state = self.inner.state.lock();
            state.exposed.get_mut(name).map(|exposure| {
                for unsubscriber in &exposure.unsubscribers {
                    unsubscriber.unsubscribe();
                }
                exposure.task.take()
            })
        };
        let Some(task) = taken else {
            return false;
        };
        // The UNSUBs are processed once the server answers a ping sent after them (a dropped
        // connection forgets the subscriptions anyway).
        let _ = self.inner.client.flush().await;
        // Its messages end, so the serving task answers what it took and announces the end
        // (a second withdrawal meanwhile finds no task and returns at once).
        if let Some(task) = task {
            let _ = task.await;
        }
        true
    }

    /// A ref to the actor exposed as `name` on any node (each message goes to one of them).
    pub fn lookup<H: RemoteHandle>(&self, name: &str) -> H {
        H::__new(self, Target::Name(name.to_string()))
    }

    /// A ref to the actor the node `node` exposes as `name`.
    pub fn lookup_on<H: RemoteHandle>(&self, node: &str, name: &str) -> H {
        H::__new(
            self,
            Target::Node {
                node: node.to_string(),
                name: name.to_string(),
            },
        )
    }

    /// Leaves the cluster: peers see this node down at once, exposures end, this node's
    /// waiting asks fail with [`Error::Closed`] and its monitors resolve with
    /// [`ExitReason::Shutdown`], and the NATS connection closes after what was queued is
    /// sent.
    pub async fn leave(self) {
        let inner = &self.inner;
        let (tasks, waiting) = inner.depart();
        for task in tasks {
            task.abort();
        }
        for waiter in waiting {
            waiter.resolve(|| Error::Closed, || ExitReason::Shutdown);
        }
        inner.client.close().await;
        inner.control.close().await;
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

/// The longest beat taken (a beat is a few dozen bytes, and a tag): longer ones are dropped
/// before anything is computed over them.
const MAX_BEAT: usize = 512;

/// A random number for this node's announcements.
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// This node's incarnation: its start time in milliseconds, with 16 random bits below, so a
/// node restarted under its name has a larger one (clocks permitting) and a late heartbeat
/// of the old one is recognised as stale.
fn incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (millis << 16) | (random & 0xffff)
}

/// A NATS error as an actor error.
pub(crate) fn remote_error(error: nats::Error) -> Error {
    match error {
        nats::Error::Closed => Error::Closed,
        nats::Error::WouldBlock => Error::Full,
        nats::Error::Timeout(_) => Error::Timeout,
        nats::Error::Disconnected => Error::Remote(
            "the NATS connection dropped before the reply came; the message may or may not \
             have been handled"
                .into(),
        ),
        other => Error::Remote(other.to_string().into()),
    }
}

/// Whether the node name of `subject` (its control subject) is free: nobody answers on it,
/// or its holder does not answer. A holder that answers has it. One that does not answer within a whole silence (its process just died and its
/// connection has not closed yet, or it is paused or cut off) is down for its peers too, so
/// the name is taken over.
async fn check_name_free(
    control: &nats::Client,
    subject: &str,
    options: &NodeOptions,
) -> Result<(), JoinError> {
    let give_up = Instant::now() + options.silence();
    let attempt = (options.heartbeat_interval / 2).max(Duration::from_millis(50));
    loop {
        match control.request_with_timeout(subject, b"", attempt).await {
            Err(nats::Error::NoResponders { .. }) => return Ok(()),
            Ok(_) => return Err(JoinError::NameTaken(options.name.clone())),
            Err(nats::Error::Timeout(_) | nats::Error::Disconnected) => {
                if Instant::now() >= give_up {
                    return Ok(());
                }
            }
            Err(error) => return Err(JoinError::Nats(error)),
        }
    }
}

impl NodeInner {
    /// Queues an announcement of `body` on this node's subject with the next sequence number,
    /// under the state lock (`state`) so that announcements go out in the order of the
    /// state they describe; past a congested write buffer (a node that could not heartbeat
    /// under load would look dead).
    fn announce(&self, state: &mut State, body: Body) -> Result<(), nats::Error> {
        state.seq += 1;
        self.publish(&self.client, &self.announce_prefix, state, state.seq, body)
    }

    /// Queues a beat on the control connection (under the state lock, like `announce`).
    fn beat(&self, state: &mut State) -> Result<(), nats::Error> {
        state.beat_seq += 1;
        self.publish(
            &self.control,
            &self.alive_prefix,
            state,
            state.beat_seq,
            Body::Beat,
        )
    }

    fn publish(
        &self,
        client: &nats::Client,
        prefix: &str,
        state: &State,
        seq: u64,
        body: Body,
    ) -> Result<(), nats::Error> {
        let announcement = Announcement {
            node: self.name.clone(),
            nonce: self.nonce,
            incarnation: state.incarnation,
            since_millis: state.since_millis,
            seq,
            sent_millis: codec::wall_millis(),
            body,
        };
        let subject = format!("{prefix}{}", self.name);
        let bytes = codec::announcement(&announcement, &subject, self.options.secret.as_ref());
        client.publish_urgent(&subject, bytes)
    }

    /// Counts `add` drops for `reason` and returns the total.
    pub(crate) fn count(&self, reason: &'static str, add: u64) -> u64 {
        let counter = self
            .metrics
            .dropped
            .get_or_create(&[("node", self.name.clone()), ("reason", reason.to_string())]);
        counter.inc_by(add) + add
    }

    /// Sends a heartbeat now, unless the node has left. The list of names is taken and the
    /// heartbeat queued under one hold of the state lock (then the client's), so heartbeats
    /// go out in the order their lists were taken, and none after `Leaving`.
    fn announce_heartbeat(&self) {
        let mut state = self.state.lock();
        if state.left {
            return;
        }
        // Cut off, its presence is broken: it counts from now in what it announces.
        if self.liveness.cut_off(Instant::now()) {
            state.since_millis = state.since_millis.max(codec::wall_millis());
        }
        let mut exposed: Vec<_> = state.exposed.keys().cloned().collect();
        exposed.sort();
        let heartbeat = Body::Heartbeat {
            interval_ms: self.options.heartbeat_interval.as_millis() as u32,
            misses: self.options.heartbeat_misses,
            exposed,
        };
        let beat = self.beat(&mut state);
        let announced = self.announce(&mut state, heartbeat);
        if beat.is_err() || announced.is_err() {
            self.count("heartbeat", 1);
        }
    }

    /// Announces that `name`'s exposure ended. Called with the state lock held, so that it is
    /// ordered with the heartbeats (queued under the same lock): a heartbeat of a later
    /// exposure of the name never goes out before it.
    fn announce_exit(&self, state: &mut State, name: &str, exit: Exit) {
        let _ = self.announce(
            state,
            Body::Exited {
                name: name.to_string(),
                exit,
            },
        );
    }

    /// The exposure `token` of `name` ended because its actor ended with `reason` (unless it
    /// was withdrawn and the name exposed again meanwhile): no longer listed or announced.
    pub(crate) fn exposure_ended(&self, name: &str, token: u64, reason: &ExitReason) {
        let mut state = self.state.lock();
        if state.exposed.get(name).is_none_or(|e| e.token != token) {
            return;
        }
        state.exposed.remove(name);
        self.announce_exit(&mut state, name, Exit::from(reason));
    }

    /// Marks `name` spanned here; false if it was already.
    pub(crate) fn span(&self, name: &str) -> bool {
        self.state.lock().spanned.insert(name.to_string())
    }

    /// Unmarks `name` (its span failed).
    pub(crate) fn unspan(&self, name: &str) {
        self.state.lock().spanned.remove(name);
    }

    /// Registers an ask or monitor on `target`; the guard withdraws it when dropped. On a
    /// node that has left it resolves at once.
    fn watch(self: &Arc<Self>, target: &Target, waiter: Waiter) -> WatchGuard {
        self.watch_with(target, |_| waiter)
    }

    /// [`watch`](Self::watch), with the waiter made under the same hold of the lock.
    fn watch_with(
        self: &Arc<Self>,
        target: &Target,
        make: impl FnOnce(&State) -> Waiter,
    ) -> WatchGuard {
        let mut state = self.state.lock();
        let waiter = make(&state);
        state.next_waiter += 1;
        let id = state.next_waiter;
        if state.left {
            drop(state);
            waiter.resolve(|| Error::Closed, || ExitReason::Shutdown);
        } else if let Some(node) = self.known_down(&state, target) {
            drop(state);
            waiter.resolve(
                || Error::NodeDown {
                    node: node.as_str().into(),
                },
                || ExitReason::NodeDown { node: node.clone() },
            );
        } else {
            state.waiting.insert(id, (target.clone(), waiter));
        }
        WatchGuard {
            node: self.clone(),
            id,
        }
    }

    /// Resolves the waiters `matches` picks, outside the lock.
    fn resolve(
        &self,
        mut state: parking_lot::MutexGuard<'_, State>,
        matches: impl Fn(&State, &Target, &Waiter) -> bool,
        ask: impl Fn() -> Error,
        monitor: impl Fn() -> ExitReason,
    ) {
        let ids: Vec<u64> = state
            .waiting
            .iter()
            .filter(|(_, (target, waiter))| matches(&state, target, waiter))
            .map(|(id, _)| *id)
            .collect();
        let resolved: Vec<_> = ids
            .into_iter()
            .filter_map(|id| state.waiting.remove(&id))
            .collect();
        drop(state);
        for (_, waiter) in resolved {
            waiter.resolve(&ask, &monitor);
        }
    }

    /// The node of `target`, when it is another node known down (it was up, and has not come
    /// back): an ask to it cannot be answered.
    fn known_down(&self, state: &State, target: &Target) -> Option<String> {
        match target {
            Target::Node { node, .. } if *node != self.name && state.peers.known_down(node) => {
                Some(node.clone())
            }
            _ => None,
        }
    }

    /// Resolves what waited on what `changes` ended, outside the lock.
    fn apply<'a>(&'a self, state: parking_lot::MutexGuard<'a, State>, changes: Vec<Change>) {
        let mut state = Some(state);
        for change in changes {
            let state = state.take().unwrap_or_else(|| self.state.lock());
            match change {
                Change::Down {
                    node,
                    incarnation,
                    exposed,
                } => {
                    self.resolve(
                        state,
                        |state, target, waiter| match target {
                            // An ask sent to another incarnation than the one down is that
                            // one's to answer (or refuse).
                            Target::Node { node: on, .. } => {
                                *on == node
                                    && match waiter {
                                        Waiter::Ask(_, to) => *to == 0 || *to == incarnation,
                                        Waiter::Monitor(..) => true,
                                    }
                            }
                            Target::Name(name) => {
                                exposed.contains(name) && !state.exposed_anywhere(name)
                            }
                        },
                        || Error::NodeDown {
                            node: node.as_str().into(),
                        },
                        || ExitReason::NodeDown { node: node.clone() },
                    );
                }
                // Names it stopped exposing without an `Exited` (lost on the way): its actor
                // there ended, for a reason lost with it; a name nobody exposes any more ended
                // everywhere.
                Change::Withdrawn { node, names } => {
                    self.resolve(
                        state,
                        |state, target, _| match target {
                            Target::Node { node: on, name } => *on == node && names.contains(name),
                            Target::Name(name) => {
                                names.contains(name) && !state.exposed_anywhere(name)
                            }
                        },
                        || Error::Closed,
                        || ExitReason::Shutdown,
                    );
                }
            }
        }
    }

    /// An announcement received on `subject`.
    fn on_announcement(&self, subject: &str, payload: &[u8]) {
        let Some(announcement) = codec::decode_announcement(
            payload,
            subject,
            &self.announce_prefix,
            self.options.secret.as_ref(),
            usize::MAX,
        ) else {
            self.count("forged", 1);
            return;
        };
        if announcement.node == self.name {
            if announcement.nonce != self.nonce {
                self.heard_own_name(&announcement);
            }
            return;
        }
        let sender = membership::Sender::of(&announcement);
        let now = Instant::now();
        let now_millis = codec::wall_millis();
        let mut state = self.state.lock();
        match announcement.body {
            // Beats come on their own subject.
            Body::Beat => {
                drop(state);
                self.count("forged", 1);
            }
            Body::Heartbeat {
                interval_ms,
                misses,
                exposed,
            } => {
                let interval = Duration::from_millis(interval_ms.into());
                match state
                    .peers
                    .heartbeat(&sender, interval, misses, exposed, now, now_millis)
                {
                    Ok(heard) => {
                        if let Some(reason) = heard.trimmed {
                            self.count(reason, 1);
                        }
                        self.apply(state, heard.changes);
                    }
                    Err("own") => {}
                    Err(reason) => {
                        drop(state);
                        self.count(reason, 1);
                    }
                }
            }
            Body::Leaving => match state.peers.leaving(&sender, now, now_millis) {
                Ok(change) => self.apply(state, change.into_iter().collect()),
                Err("own") => {}
                Err(reason) => {
                    drop(state);
                    self.count(reason, 1);
                }
            },
            Body::Exited { name, exit } => match state.peers.exited(&sender, &name, now_millis) {
                Ok(()) => {
                    let node = sender.node;
                    let reason = ExitReason::from(exit);
                    let anywhere = state.exposed_anywhere(&name);
                    self.resolve(
                        state,
                        |_, target, _| match target {
                            Target::Node { node: on, name: of } => *on == node && *of == name,
                            Target::Name(of) => *of == name && !anywhere,
                        },
                        || Error::Closed,
                        || reason.clone(),
                    );
                }
                Err("own") => {}
                Err(reason) => {
                    drop(state);
                    self.count(reason, 1);
                }
            },
        }
    }

    /// This node's own beat of `incarnation` came back through the NATS server: its beats
    /// reach its peers (not merely its write buffer), which is what [`Liveness`] counts. After
    /// a silence of its own the node takes a new incarnation first: its peers have judged
    /// the old one down.
    fn own_beat_heard(&self, incarnation: u64, seq: u64) {
        let mut state = self.state.lock();
        // Only its current incarnation's beats, in order: a replay of an older one says
        // nothing of whether its beats get through now.
        if state.left || incarnation != state.incarnation || seq <= state.echoed_seq {
            return;
        }
        state.echoed_seq = seq;
        let now = Instant::now();
        let mut returned = false;
        self.liveness.beat(now, || {
            let next = self::incarnation().max(state.incarnation.saturating_add(1));
            state.take_incarnation(next);
            self.liveness.set_incarnation(next);
            state.since_millis = codec::wall_millis();
            // It could not hear its peers either: they get a whole silence from now.
            state.peers.heard_all(now);
            returned = true;
        });
        drop(state);
        if returned {
            // Peers learn the new incarnation now rather than at the next tick.
            self.announce_heartbeat();
        }
    }

    /// An announcement of this node's name by another node (another nonce): see the
    /// module's invariants.
    fn heard_own_name(&self, claim: &Announcement) {
        // Without authentication anyone may claim this node's name: acting on a claim would
        // let a forger make it leave, or take incarnations its peers see as restarts. Asks
        // carry the incarnation they are for, so another node under this name runs none of
        // this one's (and this one none of its).
        if self.options.secret.is_none() {
            self.count("name_claimed", 1);
            return;
        }
        let now_millis = codec::wall_millis();
        let skew = self.options.max_clock_skew.as_millis() as u64;
        let oldest = (self.options.max_peer_silence.as_millis() as u64).saturating_add(skew);
        // Sent before this node joined (a silent holder's, from before it found itself cut
        // off), or a replay of an old one: not a live claim.
        if claim.sent_millis.saturating_add(skew) < self.joined_millis
            || claim.sent_millis.saturating_add(oldest) < now_millis
        {
            self.count("stale_claim", 1);
            return;
        }
        let mut state = self.state.lock();
        if state.left {
            return;
        }
        if (claim.since_millis, claim.incarnation) < (state.since_millis, state.incarnation) {
            drop(state);
            self.count("name_held_elsewhere", 1);
            self.step_down();
            return;
        }
        let interval = self.options.heartbeat_interval;
        let may_bump = state
            .last_bump
            .is_none_or(|last| last.elapsed() >= interval);
        if claim.incarnation >= state.incarnation && may_bump {
            let next = self::incarnation().max(claim.incarnation.saturating_add(1));
            state.take_incarnation(next);
            state.last_bump = Some(Instant::now());
            self.liveness.set_incarnation(next);
            drop(state);
            self.announce_heartbeat();
        }
    }

    /// Leaves the cluster because another node holds this one's name (it was cut off and
    /// replaced): what `Node::leave` does, with the connections closed by a task of their
    /// own.
    fn step_down(&self) {
        let (tasks, waiting) = self.depart();
        for task in tasks {
            task.abort();
        }
        for waiter in waiting {
            waiter.resolve(|| Error::Closed, || ExitReason::Shutdown);
        }
        let client = self.client.clone();
        let control = self.control.clone();
        drop(self.context.clone().spawn(move |_| async move {
            client.close().await;
            control.close().await;
        }));
    }

    /// Marks the node left, ends its exposures and announces its departure, under the state
    /// lock: the tasks to abort and the waiters to resolve, for after it.
    fn depart(&self) -> (Vec<runtime::Handle<()>>, Vec<Waiter>) {
        let mut state = self.state.lock();
        if state.left {
            return (Vec::new(), Vec::new());
        }
        state.left = true;
        for (_, exposure) in state.exposed.drain() {
            exposure.end();
        }
        let tasks: Vec<_> = state.heartbeat.take().into_iter().collect();
        let waiting: Vec<_> = state.waiting.drain().map(|(_, (_, w))| w).collect();
        // Queued under the lock that `left` was set under: no heartbeat follows it.
        if self.announce(&mut state, Body::Leaving).is_err() {
            // Peers then see this node down when its heartbeats stop instead.
            self.count("heartbeat", 1);
        }
        (tasks, waiting)
    }

    /// The beat in `payload` received on `subject`, or `None` (counted as forged) when it is
    /// not one.
    fn decode_beat(&self, subject: &str, payload: &[u8]) -> Option<Announcement> {
        let beat = codec::decode_announcement(
            payload,
            subject,
            &self.alive_prefix,
            self.options.secret.as_ref(),
            MAX_BEAT,
        )
        .filter(|beat| beat.body == Body::Beat);
        if beat.is_none() {
            self.count("forged", 1);
        }
        beat
    }

    /// A beat on this node's own subject: its own coming back, or another node's under its
    /// name.
    fn on_own_beat(&self, subject: &str, payload: &[u8]) {
        let Some(beat) = self.decode_beat(subject, payload) else {
            return;
        };
        if beat.nonce == self.nonce {
            self.own_beat_heard(beat.incarnation, beat.seq);
        } else {
            self.heard_own_name(&beat);
        }
    }

    /// A beat received on `subject`.
    fn on_beat(&self, subject: &str, payload: &[u8]) {
        let Some(beat) = self.decode_beat(subject, payload) else {
            return;
        };
        if beat.node == self.name {
            // Its own subject is read on a subscription of its own (`on_own_beat`).
            return;
        }
        let sender = membership::Sender::of(&beat);
        let refused = self
            .state
            .lock()
            .peers
            .beat(&sender, Instant::now(), codec::wall_millis());
        match refused {
            Ok(()) | Err("own" | "unknown") => {}
            Err(reason) => {
                self.count(reason, 1);
            }
        }
    }

    /// Peers unheard for longer than their silence are down; monitors whose target has not
    /// been seen running for a whole silence of this node's resolve `NotFound`.
    /// `beats_lost`: its queue of peers' beats dropped some since the last tick, so a silence
    /// may be its own doing: it judges nobody this time.
    fn check_peers(&self, beats_lost: bool) {
        let now = Instant::now();
        if beats_lost {
            self.count("beats_lost", 1);
            self.state.lock().peers.heard_all(now);
            return;
        }
        // Cut off itself (its own beats do not come back), the node cannot tell a silent
        // peer from its own deafness: it judges nobody, and its asks wait for their deadlines
        // (a peer that is fine may still run them).
        if self.liveness.cut_off(now) {
            return;
        }
        let mut state = self.state.lock();
        let changes = state.peers.silent(now);
        self.apply(state, changes);
        let mut state = self.state.lock();
        // Long enough for every known peer (and one of this node's own settings) to have
        // heartbeated, counted from the later of the monitor and this node's join.
        let grace = state
            .peers
            .longest_silence()
            .unwrap_or_default()
            .max(self.options.silence());
        let joined = self.joined;
        let missing: Vec<u64> = state
            .waiting
            .iter()
            .filter(|(_, (target, waiter))| {
                matches!(waiter, Waiter::Monitor(_, since)
                    if now.duration_since((*since).max(joined)) > grace)
                    && !state.alive(&self.name, target)
            })
            .map(|(id, _)| *id)
            .collect();
        let resolved: Vec<_> = missing
            .into_iter()
            .filter_map(|id| state.waiting.remove(&id))
            .collect();
        drop(state);
        for (_, waiter) in resolved {
            waiter.resolve(|| Error::Closed, || ExitReason::NotFound);
        }
    }

    /// Registers a pending ask on `target`: the receiver gets why it will not be answered
    /// (at once when its node is known down or this node has left).
    /// Also gives the incarnation of its node the ask goes to (0 when the node is not up, or
    /// for a name), for the request's header.
    pub(crate) fn watch_ask(
        self: &Arc<Self>,
        target: &Target,
    ) -> (WatchGuard, oneshot::Receiver<Error>, u64) {
        let (sender, receiver) = oneshot::channel();
        let mut incarnation = 0;
        let guard = self.watch_with(target, |state| {
            incarnation = match target {
                Target::Node { node, .. } if *node == self.name => state.incarnation,
                Target::Node { node, .. } => state.peers.get(node).map_or(0, |p| p.incarnation),
                Target::Name(_) => 0,
            };
            Waiter::Ask(sender, incarnation)
        });
        (guard, receiver, incarnation)
    }

    pub(crate) fn watch_monitor(
        self: &Arc<Self>,
        target: &Target,
    ) -> (WatchGuard, oneshot::Receiver<ExitReason>) {
        let (sender, receiver) = oneshot::channel();
        (
            self.watch(target, Waiter::Monitor(sender, Instant::now())),
            receiver,
        )
    }
}

/// Withdraws an ask's or monitor's registration when dropped.
pub(crate) struct WatchGuard {
    node: Arc<NodeInner>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.node.state.lock().waiting.remove(&self.id);
    }
}

/// The node's own task: heartbeats out, announcements in, peers checked, and its name's
/// control subject answered.
async fn run(
    inner: Arc<NodeInner>,
    context: runtime::Context,
    mut control: nats::Subscription,
    mut announcements: nats::Subscription,
    mut beats: nats::Subscription,
    mut own_beats: nats::Subscription,
) {
    let interval = inner.options.heartbeat_interval;
    let mut tick = Box::pin(context.sleep(interval));
    // Peers' beats its queue dropped so far (a full queue: they were sent, not unsent).
    let mut beats_dropped = 0;
    enum Next {
        Tick,
        Control(Option<nats::Message>),
        Announcement(Option<nats::Message>),
        Beat(Option<nats::Message>),
        OwnBeat(Option<nats::Message>),
    }
    loop {
        let next = poll_fn(|cx| {
            if tick.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Next::Tick);
            }
            // Its own beats first, then the others': a flood on the other subjects must not
            // keep them waiting.
            if let Poll::Ready(message) = own_beats.poll_next_unpin(cx) {
                return Poll::Ready(Next::OwnBeat(message));
            }
            if let Poll::Ready(message) = beats.poll_next_unpin(cx) {
                return Poll::Ready(Next::Beat(message));
            }
            if let Poll::Ready(message) = control.poll_next_unpin(cx) {
                return Poll::Ready(Next::Control(message));
            }
            if let Poll::Ready(message) = announcements.poll_next_unpin(cx) {
                return Poll::Ready(Next::Announcement(message));
            }
            Poll::Pending
        })
        .await;
        match next {
            Next::Tick => {
                tick = Box::pin(context.sleep(interval));
                inner.announce_heartbeat();
                // Heartbeats that arrived while this task waited count before any peer is
                // judged silent.
                // Every beat already received (the queues are bounded), then announcements.
                while let Some(message) = own_beats.try_next() {
                    inner.on_own_beat(&message.subject, &message.payload);
                }
                while let Some(message) = beats.try_next() {
                    inner.on_beat(&message.subject, &message.payload);
                }
                for _ in 0..4096 {
                    let Some(message) = announcements.try_next() else {
                        break;
                    };
                    inner.on_announcement(&message.subject, &message.payload);
                }
                let dropped = beats.dropped();
                inner.check_peers(dropped != beats_dropped);
                beats_dropped = dropped;
            }
            Next::Control(Some(message)) => {
                if let Some(reply) = message.reply {
                    let _ = inner
                        .control
                        .try_publish(&reply, None, inner.name.as_bytes());
                }
            }
            Next::Announcement(Some(message)) => {
                inner.on_announcement(&message.subject, &message.payload);
            }
            Next::Beat(Some(message)) => inner.on_beat(&message.subject, &message.payload),
            Next::OwnBeat(Some(message)) => {
                inner.on_own_beat(&message.subject, &message.payload);
            }
            // A client closed: the node has left.
            Next::Control(None)
            | Next::Announcement(None)
            | Next::Beat(None)
            | Next::OwnBeat(None) => return,
        }
    }
}
