//! Joining a cluster and leaving it: the node's two connections, the check that its name is
//! free, its subscriptions (refused ones fail the join), its state, its task, and the wait
//! for its own first beat to come back (a join fails if it does not within a silence: a node
//! that cannot hear itself would look up once, then down for good).

use super::announce::{incarnation, nonce};
use super::codec;
use super::heartbeat;
use super::liveness::Liveness;
use super::membership::{Limits, Peers};
use super::node::{Metrics, Node, NodeInner, State};
use super::options::{JoinError, NodeOptions};
use crate::sync::Mutex;
use crate::{Error, ExitReason};
use runtime::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
                heartbeat::run(
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
}
