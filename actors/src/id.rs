//! [`ActorId`]: the name of one actor for its whole life, shown as `label#n`.
//!
//! An id belongs to the actor, not to an incarnation: a supervised child keeps its id (like
//! its refs and its mailbox) across restarts. Serials come from one process-wide counter, so
//! ids are unique per runtime (and across runtimes of one process) and never reused.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// The identity of an actor: its label and a serial number, unique in the process.
///
/// Cheap to copy, compare and hash; use it as a map key for the actors a supervisor or a
/// monitor tracks. Displayed as `label#n`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId {
    serial: u64,
    /// One pointer, not a string's two words: an id is in every actor's mailbox (and in
    /// every down notification). Compared, hashed and ordered as the string it points to.
    label: &'static &'static str,
}

impl ActorId {
    /// A fresh id for an actor labelled `label` (an actor type's `&A::LABEL`, a promoted
    /// constant).
    pub(crate) fn next(label: &'static &'static str) -> Self {
        // Relaxed: only uniqueness matters, which the RMW's total order gives.
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        ActorId {
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            label,
        }
    }

    /// A fresh id for a label known only at run time (a supervisor's name): the label is
    /// interned once, in a process-wide list that grows only with the distinct labels used
    /// (they are `'static` strings already, so the list adds a pointer to each).
    pub(crate) fn next_named(label: &'static str) -> Self {
        static LABELS: crate::sync::StaticMutex<Vec<&'static &'static str>> =
            crate::sync::StaticMutex::new(Vec::new());
        let mut labels = LABELS.lock();
        let interned = match labels.iter().find(|known| ***known == label) {
            Some(known) => *known,
            None => {
                let leaked: &'static &'static str = Box::leak(Box::new(label));
                labels.push(leaked);
                leaked
            }
        };
        drop(labels);
        Self::next(interned)
    }

    /// The actor's label (its type's, or the one given with `#[actor(name = "...")]`).
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// The serial number after the `#`.
    pub fn serial(&self) -> u64 {
        self.serial
    }
}

impl std::fmt::Display for ActorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.label, self.serial)
    }
}

impl std::fmt::Debug for ActorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A map keyed by a process-wide counter (an actor's serial, a monitor id, a supervisor's
/// child key): a watcher of 10k actors finds each down's monitor in constant time, where a
/// list made every notification a scan.
pub(crate) type Serials<V> = HashMap<u64, V, BuildHasherDefault<SerialHasher>>;

/// Monitor ids and actor serials are unique counters: a multiply by an odd constant spreads
/// them over the table (its high bits too) without SipHash's cost. Nobody outside the
/// process picks them, so there is no flooding to defend against.
#[derive(Default)]
pub(crate) struct SerialHasher(u64);

impl Hasher for SerialHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by serial that keeps a single entry in place: most actors are watched by one
/// monitor, hold one or none, and link to one partner, so the common case allocates no table
/// (and frees none when the actor ends, often on another thread than the one that made it).
#[derive(Default)]
pub(crate) enum Few<V> {
    #[default]
    Empty,
    One(u64, V),
    Many(Serials<V>),
}

impl<V> Few<V> {
    pub(crate) fn insert(&mut self, key: u64, value: V) {
        match self {
            Few::Empty => *self = Few::One(key, value),
            Few::One(held, slot) if *held == key => *slot = value,
            Few::One(..) => {
                let Few::One(held, first) = std::mem::take(self) else {
                    unreachable!("matched just above")
                };
                let mut many = Serials::default();
                many.insert(held, first);
                many.insert(key, value);
                *self = Few::Many(many);
            }
            Few::Many(many) => {
                many.insert(key, value);
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<V> {
        match self {
            Few::One(held, _) if held == key => match std::mem::take(self) {
                Few::One(_, value) => Some(value),
                _ => unreachable!("matched just above"),
            },
            Few::Many(many) => many.remove(key),
            _ => None,
        }
    }

    pub(crate) fn contains_key(&self, key: &u64) -> bool {
        match self {
            Few::Empty => false,
            Few::One(held, _) => held == key,
            Few::Many(many) => many.contains_key(key),
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Few::Empty => true,
            Few::One(..) => false,
            Few::Many(many) => many.is_empty(),
        }
    }
}

impl<V> IntoIterator for Few<V> {
    type Item = (u64, V);
    type IntoIter = FewEntries<V>;

    fn into_iter(self) -> FewEntries<V> {
        match self {
            Few::Empty => FewEntries::One(None),
            Few::One(key, value) => FewEntries::One(Some((key, value))),
            Few::Many(many) => FewEntries::Many(many.into_iter()),
        }
    }
}

/// The entries of a [`Few`], taken out.
pub(crate) enum FewEntries<V> {
    One(Option<(u64, V)>),
    Many(std::collections::hash_map::IntoIter<u64, V>),
}

impl<V> Iterator for FewEntries<V> {
    type Item = (u64, V);

    fn next(&mut self) -> Option<(u64, V)> {
        match self {
            FewEntries::One(entry) => entry.take(),
            FewEntries::Many(entries) => entries.next(),
        }
    }
}

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;

    /// Ids are unique, keep their label, and show as `label#n`.
    #[test]
    fn ids_are_unique_and_show_their_label() {
        let first = ActorId::next(&"worker");
        let second = ActorId::next(&"worker");
        assert_ne!(first, second);
        assert!(second.serial() > first.serial());
        assert_eq!(first.label(), "worker");
        assert_eq!(first.to_string(), format!("worker#{}", first.serial()));
        assert_eq!(format!("{second:?}"), second.to_string());
    }

    /// `Few` keeps one entry in place, moves to a table at the second, and keeps every
    /// entry either way.
    #[test]
    fn few_keeps_every_entry_in_place_or_in_a_table() {
        let mut few = Few::default();
        assert!(few.is_empty());
        few.insert(1, "a");
        few.insert(1, "a again");
        assert!(matches!(few, Few::One(1, "a again")));
        few.insert(2, "b");
        few.insert(3, "c");
        assert!(few.contains_key(&2) && !few.contains_key(&4));
        assert_eq!(few.remove(&2), Some("b"));
        assert_eq!(few.remove(&2), None);
        let mut entries: Vec<_> = few.into_iter().collect();
        entries.sort_unstable();
        assert_eq!(entries, [(1, "a again"), (3, "c")]);
        let mut one = Few::default();
        one.insert(7, ());
        assert_eq!(one.remove(&7), Some(()));
        assert!(one.is_empty());
        assert_eq!(one.into_iter().count(), 0);
    }
}
