//! What a node hears, and its own task: heartbeats out every interval; peers' heartbeats,
//! beats, departures and ended exposures in; its own beats coming back; claims to its name by
//! another process; and, at each tick, the peers judged by their silence.
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
//!   subscription of their own, read first, in increasing sequence. Peers count a node alive
//!   from its beats alone, so a node that cannot beat is down for them as it is cut off for
//!   itself.

use super::announce::incarnation;
use super::codec::{self, Announcement, Body};
use super::membership;
use super::node::{NodeInner, Waiter};
use super::subjects::Target;
use crate::{Error, ExitReason};
use futures::StreamExt;
use runtime::prelude::*;
use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// The longest beat taken (a beat is a few dozen bytes, and a tag): longer ones are dropped
/// before anything is computed over them.
const MAX_BEAT: usize = 512;

impl NodeInner {
    /// An announcement received on `subject`.
    pub(super) fn on_announcement(&self, subject: &str, payload: &[u8]) {
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
    pub(super) fn own_beat_heard(&self, incarnation: u64, seq: u64) {
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
    pub(super) fn heard_own_name(&self, claim: &Announcement) {
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
    pub(super) fn step_down(&self) {
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

    /// The beat in `payload` received on `subject`, or `None` (counted as forged) when it is
    /// not one.
    pub(super) fn decode_beat(&self, subject: &str, payload: &[u8]) -> Option<Announcement> {
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
    pub(super) fn on_own_beat(&self, subject: &str, payload: &[u8]) {
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
    pub(super) fn on_beat(&self, subject: &str, payload: &[u8]) {
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
    pub(super) fn check_peers(&self, beats_lost: bool) {
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
}

/// The node's own task: heartbeats out, announcements in, peers checked, and its name's
/// control subject answered.
pub(super) async fn run(
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
