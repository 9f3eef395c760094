//! [`Auditor`]: a hash chain over every event of a deterministic run that could differ between
//! two runs of one seed: which task was polled, which timer fired, what the network and the
//! storage did and with which bytes, every draw of the generator. Two runs of one seed on one
//! build end with equal digests; the first event that differs changes every digest after it.
//!
//! Every field is written with its length first, so `("a", "bc")` and `("ab", "c")` hash
//! apart. The hash is SipHash-1-3 with fixed keys (`DefaultHasher::new`): stable for one build
//! of the program, which is what replaying a seed needs; it is not a cryptographic digest.

use std::hash::{DefaultHasher, Hasher};

/// The running digest of a deterministic run.
#[derive(Clone, Debug)]
pub struct Auditor {
    hasher: DefaultHasher,
    events: u64,
}

impl Default for Auditor {
    fn default() -> Self {
        Self {
            hasher: DefaultHasher::new(),
            events: 0,
        }
    }
}

impl Auditor {
    /// Records one event: its kind and its fields, each length-prefixed.
    pub fn record(&mut self, kind: &str, fields: &[&[u8]]) {
        self.events += 1;
        self.hasher.write_usize(kind.len());
        self.hasher.write(kind.as_bytes());
        self.hasher.write_usize(fields.len());
        for field in fields {
            self.hasher.write_usize(field.len());
            self.hasher.write(field);
        }
    }

    /// The digest of every event so far.
    pub fn digest(&self) -> u64 {
        self.hasher.finish()
    }

    /// How many events were recorded.
    pub fn events(&self) -> u64 {
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_events_give_equal_digests_and_fields_do_not_run_together() {
        let digest = |events: &[(&str, &[&[u8]])]| {
            let mut auditor = Auditor::default();
            for (kind, fields) in events {
                auditor.record(kind, fields);
            }
            auditor.digest()
        };
        let a = digest(&[("poll", &[b"1"]), ("fire", &[b"2", b"3"])]);
        assert_eq!(a, digest(&[("poll", &[b"1"]), ("fire", &[b"2", b"3"])]));
        assert_ne!(a, digest(&[("poll", &[b"1"]), ("fire", &[b"23"])]));
        assert_ne!(a, digest(&[("fire", &[b"2", b"3"]), ("poll", &[b"1"])]));
        assert_ne!(
            digest(&[("a", &[b"bc"])]),
            digest(&[("ab", &[b"c"])]),
            "the kind and its fields are length-prefixed"
        );
    }
}
