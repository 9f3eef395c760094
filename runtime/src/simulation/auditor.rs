//! [`Auditor`]: a hash chain over every event of a deterministic run that could differ between
//! two runs of one seed: which task was polled, which timer fired, what the network and the
//! storage did and with which bytes, every draw of the generator. Two runs of one seed on one
//! build end with equal digests; the first event that differs changes every digest after it.
//!
//! Every field is written with its length first, so `("a", "bc")` and `("ab", "c")` hash
//! apart. The hash folds eight bytes at a time into two 64-bit lanes by multiplication and
//! rotation (fixed constants, the same on every machine and build): a run hashes every byte
//! its storage and network move, so the hash must cost about a cycle a byte, which SipHash
//! (four times that) did not. It is not a cryptographic digest: it tells runs apart, it does
//! not resist someone choosing events to collide.

/// The running digest of a deterministic run.
#[derive(Clone, Debug)]
pub struct Auditor {
    lanes: [u64; 2],
    events: u64,
}

impl Default for Auditor {
    fn default() -> Self {
        Self {
            lanes: [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344],
            events: 0,
        }
    }
}

const K0: u64 = 0x9e37_79b9_7f4a_7c15;
const K1: u64 = 0xc2b2_ae3d_27d4_eb4f;

impl Auditor {
    /// Records one event: its kind and its fields, each length-prefixed.
    pub fn record(&mut self, kind: &str, fields: &[&[u8]]) {
        self.events += 1;
        self.word(kind.len() as u64);
        self.bytes(kind.as_bytes());
        self.word(fields.len() as u64);
        for field in fields {
            self.word(field.len() as u64);
            self.bytes(field);
        }
    }

    fn word(&mut self, word: u64) {
        let [a, b] = &mut self.lanes;
        *a = (*a ^ word).wrapping_mul(K0).rotate_left(31);
        *b = (b.wrapping_add(word) ^ *a).wrapping_mul(K1).rotate_left(27);
    }

    /// `bytes`, eight at a time; the last few padded with zeros (the length written before
    /// them tells `[1]` from `[1, 0]`).
    fn bytes(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.word(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(last));
        }
    }

    /// The digest of every event so far.
    pub fn digest(&self) -> u64 {
        let [a, b] = self.lanes;
        let mut z = a ^ b.rotate_left(17) ^ self.events.wrapping_mul(K1);
        z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        z ^ (z >> 33)
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
