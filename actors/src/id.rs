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
    label: &'static str,
}

impl ActorId {
    /// A fresh id for an actor labelled `label`.
    pub(crate) fn next(label: &'static str) -> Self {
        // Relaxed: only uniqueness matters, which the RMW's total order gives.
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        ActorId {
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            label,
        }
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

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;

    /// Ids are unique, keep their label, and show as `label#n`.
    #[test]
    fn ids_are_unique_and_show_their_label() {
        let first = ActorId::next("worker");
        let second = ActorId::next("worker");
        assert_ne!(first, second);
        assert!(second.serial() > first.serial());
        assert_eq!(first.label(), "worker");
        assert_eq!(first.to_string(), format!("worker#{}", first.serial()));
        assert_eq!(format!("{second:?}"), second.to_string());
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
