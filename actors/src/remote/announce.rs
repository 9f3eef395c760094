//! What a node says of itself: its heartbeats (the names it exposes) and beats, the ends of
//! its exposures and its departure, each an [`Announcement`] of the node's current
//! incarnation with the next sequence number; and the nonce and incarnations that tell its
//! announcements from those of another process under its name.
//!
//! Invariants:
//! - Announcements go out in the order their state was read: each is encoded and queued
//!   under the state lock, with the next sequence number of the current incarnation (the
//!   NATS client runs no code of others under its own lock, so queueing under this one is
//!   safe).
//! - Nothing is announced after `Leaving`: `left` is set under the lock that queues it, and
//!   every announcement checks it first.
//! - Heartbeats and beats are queued past a congested write buffer (`publish_urgent`): a
//!   node that could not heartbeat under load would look dead.

use super::codec::{self, Announcement, Body, Exit};
use super::node::{NodeInner, State, Waiter};
use std::time::Instant;

/// A random number for this node's announcements.
pub(super) fn nonce() -> u64 {
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
pub(super) fn incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (millis << 16) | (random & 0xffff)
}

impl NodeInner {
    /// Queues an announcement of `body` on this node's subject with the next sequence number,
    /// under the state lock (`state`) so that announcements go out in the order of the
    /// state they describe; past a congested write buffer (a node that could not heartbeat
    /// under load would look dead).
    pub(super) fn announce(&self, state: &mut State, body: Body) -> Result<(), nats::Error> {
        state.seq += 1;
        self.publish(&self.client, &self.announce_prefix, state, state.seq, body)
    }

    /// Queues a beat on the control connection (under the state lock, like `announce`).
    pub(super) fn beat(&self, state: &mut State) -> Result<(), nats::Error> {
        state.beat_seq += 1;
        self.publish(
            &self.control,
            &self.alive_prefix,
            state,
            state.beat_seq,
            Body::Beat,
        )
    }

    pub(super) fn publish(
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

    /// Sends a heartbeat now, unless the node has left. The list of names is taken and the
    /// heartbeat queued under one hold of the state lock (then the client's), so heartbeats
    /// go out in the order their lists were taken, and none after `Leaving`.
    pub(super) fn announce_heartbeat(&self) {
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
    pub(super) fn announce_exit(&self, state: &mut State, name: &str, exit: Exit) {
        let _ = self.announce(
            state,
            Body::Exited {
                name: name.to_string(),
                exit,
            },
        );
    }

    /// Marks the node left, ends its exposures and announces its departure, under the state
    /// lock: the tasks to abort and the waiters to resolve, for after it.
    pub(super) fn depart(&self) -> (Vec<runtime::Handle<()>>, Vec<Waiter>) {
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
}
