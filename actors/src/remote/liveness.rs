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
//! - `last_beat` is when the node last queued a heartbeat on a connected control connection;
//!   while more than `silence` has passed since, the node is *cut off*: it starts no remote
//!   ask at all (whatever its send time), because it cannot know what its peers decided.
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
}

/// Why a remote ask is not started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its deadline has passed (by this node's clock, less the skew bound).
    Expired,
    /// It was sent before this node came back from being cut off, or the node is cut off
    /// now: its asker may have been told `NodeDown`.
    CutOff,
}

impl Refusal {
    /// The metric's reason label.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::Expired => "expired",
            Refusal::CutOff => "cut_off",
        }
    }
}

impl Liveness {
    pub(crate) fn new(silence: Duration, skew: Duration) -> Liveness {
        Liveness {
            origin: Instant::now(),
            last_beat: AtomicU64::new(0),
            silence,
            returned_millis: AtomicU64::new(0),
            skew_millis: skew.as_millis().try_into().unwrap_or(u64::MAX),
        }
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

    /// A heartbeat was queued on a connected control connection at `now`. If the node was cut
    /// off until now, `returned` runs first (it takes the new incarnation) and the return
    /// time is stored before the beat is published.
    pub(crate) fn beat(&self, now: Instant, returned: impl FnOnce()) {
        if self.cut_off(now) {
            returned();
            self.returned_millis
                .fetch_max(codec::wall_millis(), Ordering::Release);
        }
        self.last_beat.fetch_max(self.nanos(now), Ordering::Release);
    }

    /// Whether an ask with `deadline` may start at `now`, and if not, why.
    pub(crate) fn admits(&self, deadline: &Deadline, now: Instant) -> Result<(), Refusal> {
        if self.cut_off(now) {
            return Err(Refusal::CutOff);
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
    pub(crate) liveness: Arc<Liveness>,
}

impl Ticket {
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        self.liveness.admits(&self.deadline, Instant::now()).err()
    }
}

impl Expiry for Ticket {
    fn expired(&self) -> bool {
        self.refusal().is_some()
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
        let liveness = Liveness::new(Duration::from_secs(60), Duration::ZERO);
        let now = Instant::now();
        liveness.beat(now, || panic!("never cut off"));
        assert_eq!(liveness.admits(&deadline_in(10_000, 5_000), now), Ok(()));
        let past = Deadline {
            at_millis: codec::wall_millis() - 1,
            budget_millis: 100,
        };
        assert_eq!(liveness.admits(&past, now), Err(Refusal::Expired));
    }

    #[test]
    fn a_skew_bound_refuses_asks_that_may_have_expired_by_the_askers_clock() {
        let liveness = Liveness::new(Duration::from_secs(60), Duration::from_secs(5));
        let now = Instant::now();
        liveness.beat(now, || {});
        assert_eq!(
            liveness.admits(&deadline_in(2_000, 5_000), now),
            Err(Refusal::Expired)
        );
        assert_eq!(liveness.admits(&deadline_in(10_000, 5_000), now), Ok(()));
    }

    #[test]
    fn a_node_cut_off_admits_nothing_and_after_its_return_only_what_was_sent_since() {
        let silence = Duration::from_secs(50);
        let liveness = Liveness::new(silence, Duration::ZERO);
        let start = Instant::now();
        liveness.beat(start, || panic!("not cut off yet"));
        let later = start + silence * 3;
        assert!(liveness.cut_off(later));
        // Sent before the node came back, still within its deadline.
        let old = Deadline {
            at_millis: codec::wall_millis() + 60_000,
            budget_millis: 70_000,
        };
        assert_eq!(liveness.admits(&old, later), Err(Refusal::CutOff));
        let mut returned = false;
        liveness.beat(later, || returned = true);
        assert!(returned, "the return ran");
        assert!(!liveness.cut_off(later));
        assert_eq!(liveness.admits(&old, later), Err(Refusal::CutOff));
        let fresh = Deadline {
            at_millis: codec::wall_millis() + 60_000,
            budget_millis: 0,
        };
        assert_eq!(liveness.admits(&fresh, later), Ok(()));
    }

    #[test]
    fn a_node_never_heard_for_its_silence_admits_nothing() {
        let silence = Duration::from_millis(10);
        let liveness = Liveness::new(silence, Duration::ZERO);
        let later = Instant::now() + silence * 2;
        assert_eq!(
            liveness.admits(&deadline_in(10_000, 1), later),
            Err(Refusal::CutOff)
        );
    }
}
