//! The timeout wheel of one ring: deadlines of connects, sends and receives, quantized to the
//! configured tick, laid out as [`TimeoutWheel::layout`](crate::TimeoutWheel) validated.
//!
//! Each entry names an operation (its slot in the driver and the id it had when the deadline
//! was set). The driver removes an entry when its operation completes, so the wheel holds only
//! operations in flight; an entry that expires is handed back for the driver to cancel.
//!
//! Invariants:
//! - An entry sits in the slot of its tick modulo the slot count; its tick is later than the
//!   last tick the wheel advanced to, so advancing never skips it. A deadline further away than
//!   the wheel's span (only possible beyond the configured timeouts) is parked in the last slot
//!   of the span and re-filed when that slot comes round.
//! - `occupied` has bit `s` set exactly when slot `s` holds an entry, so the next deadline is
//!   found without visiting empty slots one by one.
//! - Every entry's position is mirrored in its operation (`Position`), so removal is O(1):
//!   the entry moved into the hole by `swap_remove` has its position rewritten by the caller.
//! - `earliest` is never later than the earliest filed tick: inserts lower it, removals leave it
//!   (at worst early, which costs one early look), and advancing past it rescans, so a worker
//!   asking for its next deadline on every idle turn does not scan the wheel each time.

use std::time::{Duration, Instant};

/// Where an entry sits: its slot and its index in the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    slot: u32,
    index: u32,
}

/// An operation whose deadline passed: its driver slot and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expired {
    pub(crate) token: usize,
    pub(crate) id: u64,
}

#[derive(Clone, Copy)]
struct Entry {
    token: usize,
    id: u64,
    tick: u64,
}

/// A wheel of deadline slots.
pub(crate) struct Deadlines {
    tick: Duration,
    origin: Instant,
    /// The last tick advanced to: every entry's tick is later.
    now_tick: u64,
    slots: Vec<Vec<Entry>>,
    occupied: Vec<u64>,
    len: usize,
    /// A tick no later than the earliest filed one (see the module invariants).
    earliest: Option<u64>,
}

impl Deadlines {
    /// A wheel of `slots` slots of `tick` each (`slots` from the validated layout).
    pub(crate) fn new(tick: Duration, slots: u64) -> Self {
        let slots = slots.max(2) as usize;
        Self {
            tick,
            origin: Instant::now(),
            now_tick: 0,
            slots: (0..slots).map(|_| Vec::new()).collect(),
            occupied: vec![0; slots.div_ceil(64)],
            len: 0,
            earliest: None,
        }
    }

    /// Number of deadlines held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn tick_of(&self, at: Instant) -> u64 {
        let elapsed = at.saturating_duration_since(self.origin);
        (elapsed.as_nanos() / self.tick.as_nanos()) as u64
    }

    /// Files the deadline of operation `token`/`id`; returns where it went. A deadline that
    /// has passed expires at the next tick.
    pub(crate) fn insert(&mut self, deadline: Instant, token: usize, id: u64) -> Position {
        // Round up: an operation never times out before its deadline.
        let elapsed = deadline.saturating_duration_since(self.origin);
        let tick = elapsed.as_nanos().div_ceil(self.tick.as_nanos()) as u64;
        let tick = tick.max(self.now_tick + 1);
        self.file(Entry { token, id, tick })
    }

    fn file(&mut self, entry: Entry) -> Position {
        let span = self.slots.len() as u64;
        // Beyond the span: park it in the span's last slot; it is re-filed from there.
        let filed_tick = entry.tick.min(self.now_tick + span - 1);
        let slot = (filed_tick % span) as usize;
        let entries = &mut self.slots[slot];
        entries.push(entry);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.len += 1;
        self.earliest = Some(
            self.earliest
                .map_or(filed_tick, |tick| tick.min(filed_tick)),
        );
        Position {
            slot: slot as u32,
            index: (entries.len() - 1) as u32,
        }
    }

    /// Removes the entry at `position`. Returns the token of the entry moved into its place,
    /// whose position is now `position`.
    pub(crate) fn remove(&mut self, position: Position) -> Option<usize> {
        let slot = position.slot as usize;
        let entries = &mut self.slots[slot];
        let index = position.index as usize;
        entries.swap_remove(index);
        self.len -= 1;
        if entries.is_empty() {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        entries.get(index).map(|moved| moved.token)
    }

    /// Advances to `now`, handing every entry whose tick has come to `expired`; entries parked
    /// beyond the span are re-filed, and their new positions reported to `moved` (as are the
    /// positions of entries a removal shifted).
    pub(crate) fn expire(
        &mut self,
        now: Instant,
        expired: &mut Vec<Expired>,
        moved: &mut Vec<(usize, Position)>,
    ) {
        let current = self.tick_of(now);
        if current <= self.now_tick || self.len == 0 {
            self.now_tick = self.now_tick.max(current);
            self.rescan_if_passed();
            return;
        }
        let span = self.slots.len() as u64;
        let first = self.now_tick + 1;
        let last = current.min(self.now_tick + span);
        let mut refile = Vec::new();
        for tick in first..=last {
            let slot = (tick % span) as usize;
            if self.occupied[slot / 64] & (1 << (slot % 64)) == 0 {
                continue;
            }
            let entries = std::mem::take(&mut self.slots[slot]);
            self.occupied[slot / 64] &= !(1 << (slot % 64));
            self.len -= entries.len();
            for entry in entries {
                if entry.tick <= current {
                    expired.push(Expired {
                        token: entry.token,
                        id: entry.id,
                    });
                } else {
                    refile.push(entry);
                }
            }
        }
        self.now_tick = current;
        for entry in refile {
            let position = self.file(entry);
            moved.push((entry.token, position));
        }
        self.rescan_if_passed();
    }

    /// Recomputes `earliest` once the wheel has advanced past it.
    fn rescan_if_passed(&mut self) {
        if self.earliest.is_some_and(|tick| tick <= self.now_tick) {
            self.earliest = self.scan();
        }
    }

    /// When the earliest slot holding a deadline comes due, if any (possibly a little early:
    /// see the module invariants).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let tick = self.earliest?;
        let nanos = self.tick.as_nanos().saturating_mul(u128::from(tick));
        Some(self.origin + Duration::from_nanos(nanos.min(u128::from(u64::MAX)) as u64))
    }

    /// The tick of the first occupied slot after the current tick, cyclically.
    fn scan(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let span = self.slots.len() as u64;
        let start = self.now_tick + 1;
        // The first occupied slot at or after `start`'s slot, cyclically.
        let start_slot = (start % span) as usize;
        let words = self.occupied.len();
        let mut found = None;
        for step in 0..=words {
            let word_index = (start_slot / 64 + step) % words;
            let mut word = self.occupied[word_index];
            if step == 0 {
                word &= u64::MAX << (start_slot % 64);
            }
            if step == words {
                // Wrapped round to the first word: only bits before the start remain.
                word = self.occupied[word_index] & !(u64::MAX << (start_slot % 64));
            }
            if word != 0 {
                found = Some(word_index * 64 + word.trailing_zeros() as usize);
                break;
            }
        }
        let slot = found? as u64;
        let distance = (slot + span - start % span) % span;
        Some(start + distance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_expire_at_their_tick_and_never_early() {
        let tick = Duration::from_millis(10);
        let mut wheel = Deadlines::new(tick, 101);
        let origin = wheel.origin;
        wheel.insert(origin + Duration::from_millis(25), 1, 10);
        wheel.insert(origin + Duration::from_millis(5), 2, 20);
        assert_eq!(
            wheel.next_deadline(),
            Some(origin + Duration::from_millis(10))
        );
        let (mut expired, mut moved) = (Vec::new(), Vec::new());
        wheel.expire(origin + Duration::from_millis(9), &mut expired, &mut moved);
        assert!(expired.is_empty(), "not before the deadline");
        wheel.expire(origin + Duration::from_millis(10), &mut expired, &mut moved);
        assert_eq!(expired, vec![Expired { token: 2, id: 20 }]);
        assert_eq!(
            wheel.next_deadline(),
            Some(origin + Duration::from_millis(30))
        );
        wheel.expire(origin + Duration::from_millis(29), &mut expired, &mut moved);
        assert_eq!(expired.len(), 1, "25 ms rounds up to the 30 ms tick");
        wheel.expire(origin + Duration::from_millis(30), &mut expired, &mut moved);
        assert_eq!(expired[1], Expired { token: 1, id: 10 });
        assert_eq!(wheel.len(), 0);
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn removal_reports_the_entry_moved_into_the_hole() {
        let tick = Duration::from_millis(10);
        let mut wheel = Deadlines::new(tick, 11);
        let at = wheel.origin + Duration::from_millis(50);
        let first = wheel.insert(at, 1, 1);
        let second = wheel.insert(at, 2, 2);
        assert_eq!(wheel.remove(first), Some(2));
        // The second entry now sits where the first was.
        assert_eq!(wheel.remove(first), None);
        assert_ne!(first, second);
        assert_eq!(wheel.len(), 0);
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn a_removed_earliest_deadline_costs_one_early_look_then_the_next_is_found() {
        let tick = Duration::from_millis(10);
        let mut wheel = Deadlines::new(tick, 101);
        let origin = wheel.origin;
        let soon = wheel.insert(origin + Duration::from_millis(20), 1, 1);
        wheel.insert(origin + Duration::from_millis(500), 2, 2);
        wheel.remove(soon);
        // Early, never late.
        assert_eq!(
            wheel.next_deadline(),
            Some(origin + Duration::from_millis(20))
        );
        let (mut expired, mut moved) = (Vec::new(), Vec::new());
        wheel.expire(origin + Duration::from_millis(20), &mut expired, &mut moved);
        assert!(expired.is_empty());
        assert_eq!(
            wheel.next_deadline(),
            Some(origin + Duration::from_millis(500))
        );
    }

    #[test]
    fn deadlines_beyond_the_span_are_refiled_not_fired_early() {
        let tick = Duration::from_millis(10);
        let mut wheel = Deadlines::new(tick, 4);
        let origin = wheel.origin;
        wheel.insert(origin + Duration::from_millis(100), 7, 70);
        let (mut expired, mut moved) = (Vec::new(), Vec::new());
        let mut now = origin;
        while expired.is_empty() {
            now += tick;
            wheel.expire(now, &mut expired, &mut moved);
            assert!(now <= origin + Duration::from_millis(100));
        }
        assert_eq!(now, origin + Duration::from_millis(100));
        assert!(!moved.is_empty(), "the entry was re-filed on its way");
    }

    #[test]
    fn the_next_deadline_wraps_round_the_wheel() {
        let tick = Duration::from_millis(1);
        let mut wheel = Deadlines::new(tick, 200);
        let origin = wheel.origin;
        let (mut expired, mut moved) = (Vec::new(), Vec::new());
        wheel.expire(
            origin + Duration::from_millis(150),
            &mut expired,
            &mut moved,
        );
        wheel.insert(origin + Duration::from_millis(260), 1, 1);
        assert_eq!(
            wheel.next_deadline(),
            Some(origin + Duration::from_millis(260))
        );
    }
}
