//! [`ActorId`]: the name of one actor for its whole life, shown as `label#n`.
//!
//! An id belongs to the actor, not to an incarnation: a supervised child keeps its id (like
//! its refs and its mailbox) across restarts. Serials come from one process-wide counter, so
//! ids are unique per runtime (and across runtimes of one process) and never reused.

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
