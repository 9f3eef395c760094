//! What a node knows of its own standing in the cluster, read without its state lock by every
//! request it serves: whether its heartbeats have been flowing, and since when requests can
//! no longer have been failed by their askers as sent to a node that was down.
//!
//! A node's peers judge it down once they have not heard a heartbeat of it for its silence
//! (its interval times its misses, plus half an interval). So a node that could not heartbeat
//! for that long (its process was paused, its connection to NATS was down, its heartbeat task
//! was starved) must assume that its peers failed every ask they had sent it with
//! `NodeDown`: running one of those later would run an ask whose asker was told it failed.
//!
//! Invariants:
//! - `last_beat` is when the node last heard its own beat come back through the NATS server
//!   (what its peers hear, not what it queued: a paused server or a stalled connection keeps
//!   a client "connected"); while more than `silence` has passed since, the node is *cut
//!   off*: it starts no remote ask at all (whatever its send time), because it cannot know
//!   what its peers decided, and it judges no peer.
//! - When the node heartbeats again after being cut off, it first takes a new incarnation and
//!   stores the wall-clock time of that return in `returned_millis`, then publishes
//!   `last_beat` (release/acquire): whoever sees the new beat sees the new return time, and
//!   asks sent before it (by their senders' clocks, within the node's clock-skew bound) are
//!   not started.
//! - An ask is also not started once its deadline has passed by this node's clock minus the
//!   skew bound, so it never starts after its asker gave up at its deadline.

use super::codec::{self, Deadline};
use crate::oneshot::Expiry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Liveness {
    origin: Instant,
    /// Nanoseconds from `origin` to the last heartbeat queued while connected.
    last_beat: AtomicU64,
    silence: Duration,
    /// The wall-clock millisecond the node came back after being cut off (0: never was).
    returned_millis: AtomicU64,
    skew_millis: u64,
    /// The node's current incarnation: an ask addressed to another one is refused.
    incarnation: AtomicU64,
    /// Its first incarnation, and the ones it had since before the current one (the latest
    /// few): an ask to one of those, or to one older than the first (a process before this
    /// one), is this node's to refuse out loud.
    first_incarnation: u64,
    past: crate::sync::Mutex<Vec<u64>>,
}

/// Why a remote ask is not started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its deadline has passed (by this node's clock, less the skew bound).
    Expired,
    /// It was sent before this node came back from being cut off, or the node is cut off
    /// now: its asker may have been told `NodeDown`.
    CutOff,
    /// It was sent to an incarnation of this node's name that is gone: one it had, or one
    /// of a process before it. Answered `NodeDown`.
    OldIncarnation,
    /// It was sent to an incarnation this node never had and that is not older than it:
    /// another node holding the name, which answers it. Not answered at all.
    OtherIncarnation,
}

impl Refusal {
    /// The metric's reason label.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::Expired => "expired",
            Refusal::CutOff => "cut_off",
            Refusal::OldIncarnation => "old_incarnation",
            Refusal::OtherIncarnation => "other_incarnation",
        }
    }
}

impl Liveness {
    pub(crate) fn new(silence: Duration, skew: Duration, incarnation: u64) -> Liveness {
        Liveness {
            origin: Instant::now(),
            last_beat: AtomicU64::new(0),
            silence,
            returned_millis: AtomicU64::new(0),
            skew_millis: skew.as_millis().try_into().unwrap_or(u64::MAX),
            incarnation: AtomicU64::new(incarnation),
            first_incarnation: incarnation,
            past: crate::sync::Mutex::new(Vec::new()),
        }
    }

    /// The node's current incarnation.
    pub(crate) fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Acquire)
    }

    /// The node took a new incarnation (under its state lock, before it publishes anything
    /// in it).
    pub(crate) fn set_incarnation(&self, incarnation: u64) {
        let mut past = self.past.lock();
        past.push(self.incarnation.load(Ordering::Acquire));
        if past.len() > 16 {
            past.remove(0);
        }
        self.incarnation.store(incarnation, Ordering::Release);
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin)
            .as_nanos()
            .try_into()
            .unwrap_or(u64::MAX)
    }

    /// Whether more than the silence has passed since the last heartbeat at `now`.
    pub(crate) fn cut_off(&self, now: Instant) -> bool {
        let last = self.last_beat.load(Ordering::Acquire);
        self.nanos(now).saturating_sub(last) > self.silence.as_nanos() as u64
    }

    /// The node heard its own beat come back at `now`. If the node was cut off until now,
    /// `returned` runs first (it takes the new incarnation) and the return time is stored
    /// before the beat is published.
    pub(crate) fn beat(&self, now: Instant, returned: impl FnOnce()) {
        if self.cut_off(now) {
            returned();
            self.returned_millis
                .fetch_max(codec::wall_millis(), Ordering::Release);
        }
        self.last_beat
            .fetch_max(self.nanos(now).max(1), Ordering::Release);
    }

    /// Whether the node has heard its own beat come back at least once.
    pub(crate) fn heard(&self) -> bool {
        self.last_beat.load(Ordering::Acquire) > 0
    }

    /// Whether an ask with `deadline`, sent to incarnation `to` of this node (0: any), may
    /// start at `now`, and if not, why.
    pub(crate) fn admits(&self, deadline: &Deadline, to: u64, now: Instant) -> Result<(), Refusal> {
        if self.cut_off(now) {
            return Err(Refusal::CutOff);
        }
        if to != 0 && to != self.incarnation() {
            let old = to < self.first_incarnation || self.past.lock().contains(&to);
            return Err(if old {
                Refusal::OldIncarnation
            } else {
                Refusal::OtherIncarnation
            });
        }
        let returned = self.returned_millis.load(Ordering::Acquire);
        if returned > 0 && deadline.sent_millis() < returned.saturating_add(self.skew_millis) {
            return Err(Refusal::CutOff);
        }
        if codec::wall_millis().saturating_add(self.skew_millis) >= deadline.at_millis {
            return Err(Refusal::Expired);
        }
        Ok(())
    }

    /// The local instant by which an ask with `deadline` must have started, by this node's
    /// clock less the skew bound.
    pub(crate) fn local_deadline(&self, deadline: &Deadline) -> Instant {
        let left = deadline
            .at_millis
            .saturating_sub(codec::wall_millis().saturating_add(self.skew_millis));
        Instant::now() + Duration::from_millis(left)
    }
}

/// A remote ask being served: asked again right before its handler runs (through the reply
/// channel's [`Expiry`]), so an ask whose asker gave up, or that was sent before the node was
/// cut off, is not run even when it was already in the mailbox.
pub(crate) struct Ticket {
    pub(crate) deadline: Deadline,
    /// The incarnation of this node the ask was sent to (0: any).
    pub(crate) to: u64,
    pub(crate) liveness: Arc<Liveness>,
    /// Set once the handler was let run: a reply dropped after that was not refused.
    started: std::sync::atomic::AtomicBool,
}

impl Ticket {
    pub(crate) fn new(deadline: Deadline, to: u64, liveness: Arc<Liveness>) -> Ticket {
        Ticket {
            deadline,
            to,
            liveness,
            started: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Why the ask may not start now, if it may not.
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        self.liveness
            .admits(&self.deadline, self.to, Instant::now())
            .err()
    }

    /// Why the ask was not run, once its reply was dropped unanswered: `None` if its
    /// handler was let run (it then ended without answering).
    pub(crate) fn not_run(&self) -> Option<Refusal> {
        if self.started.load(Ordering::Acquire) {
            return None;
        }
        self.refusal()
    }
}

impl Expiry for Ticket {
    fn expired(&self) -> bool {
        let refused = self.refusal().is_some();
        if !refused {
            self.started.store(true, Ordering::Release);
        }
        refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadline_in(millis: u64, budget: u32) -> Deadline {
        Deadline {
            at_millis: codec::wall_millis() + millis,
            budget_millis: budget,
        }
    }

    #[test]
    fn a_node_that_heartbeats_admits_asks_until_their_deadline() {
        let liveness = Liveness::new(Duration::from_secs(60), Duration::ZERO, 7);
        let now = Instant::now();
        liveness.beat(now, || panic!("never cut off"));
        assert_eq!(liveness.admits(&deadline_in(10_000, 5_000), 0, now), Ok(()));
        let past = Deadline {
            at_millis: codec::wall_millis() - 1,
            budget_millis: 100,
        };
        assert_eq!(liveness.admits(&past, 0, now), Err(Refusal::Expired));
        // Sent to this incarnation, or to any: admitted; to another: refused.
        let live = deadline_in(10_000, 5_000);
        assert_eq!(liveness.admits(&live, 7, now), Ok(()));
        assert_eq!(liveness.admits(&live, 6, now), Err(Refusal::OldIncarnation));
        assert_eq!(
            liveness.admits(&live, 8, now),
            Err(Refusal::OtherIncarnation)
        );
        liveness.set_incarnation(9);
        assert_eq!(liveness.admits(&live, 7, now), Err(Refusal::OldIncarnation));
        assert_eq!(liveness.admits(&live, 9, now), Ok(()));
    }

    #[test]
    fn a_skew_bound_refuses_asks_that_may_have_expired_by_the_askers_clock() {
        let liveness = Liveness::new(Duration::from_secs(60), Duration::from_secs(5), 7);
        let now = Instant::now();
        liveness.beat(now, || {});
        assert_eq!(
            liveness.admits(&deadline_in(2_000, 5_000), 0, now),
            Err(Refusal::Expired)
        );
        assert_eq!(liveness.admits(&deadline_in(10_000, 5_000), 0, now), Ok(()));
    }

    #[test]
    fn a_node_cut_off_admits_nothing_and_after_its_return_only_what_was_sent_since() {
        let silence = Duration::from_secs(50);
        let liveness = Liveness::new(silence, Duration::ZERO, 7);
        let start = Instant::now();
        liveness.beat(start, || panic!("not cut off yet"));
        let later = start + silence * 3;
        assert!(liveness.cut_off(later));
        // Sent before the node came back, still within its deadline.
        let old = Deadline {
            at_millis: codec::wall_millis() + 60_000,
            budget_millis: 70_000,
        };
        assert_eq!(liveness.admits(&old, 0, later), Err(Refusal::CutOff));
        let mut returned = false;
        liveness.beat(later, || returned = true);
        assert!(returned, "the return ran");
        assert!(!liveness.cut_off(later));
        assert_eq!(liveness.admits(&old, 0, later), Err(Refusal::CutOff));
        let fresh = Deadline {
            at_millis: codec::wall_millis() + 60_000,
            budget_millis: 0,
        };
        assert_eq!(liveness.admits(&fresh, 0, later), Ok(()));
    }

    #[test]
    fn a_node_never_heard_for_its_silence_admits_nothing() {
        let silence = Duration::from_millis(10);
        let liveness = Liveness::new(silence, Duration::ZERO, 7);
        let later = Instant::now() + silence * 2;
        assert_eq!(
            liveness.admits(&deadline_in(10_000, 1), 0, later),
            Err(Refusal::CutOff)
        );
    }
}
