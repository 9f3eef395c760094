//! Authenticating membership messages with a secret the cluster's nodes share: HMAC-SHA-256
//! (RFC 2104 over FIPS 180-4), written here rather than pulled in as a dependency because
//! membership needs only this one function over messages of a few hundred bytes.
//!
//! Invariants:
//! - A tag is the whole 32-byte HMAC of the subject, a zero byte, and the message: a message
//!   signed for one node's subject does not verify on another's.
//! - Tags are compared in constant time.
//! - Without the secret, a tag cannot be made for new bytes (HMAC-SHA-256's unforgeability);
//!   replays of genuine messages are stopped by the membership rules (sequence numbers and
//!   send times, see `membership.rs`), not here.

/// The length of a tag.
pub(crate) const TAG: usize = 32;

/// The cluster's shared secret, ready to sign and verify.
#[derive(Clone)]
pub(crate) struct Key {
    /// The secret, hashed down when longer than a block, zero-padded to one block.
    block: [u8; 64],
}

impl Key {
    pub(crate) fn new(secret: &[u8]) -> Key {
        let mut block = [0u8; 64];
        if secret.len() > 64 {
            block[..32].copy_from_slice(&sha256(&[secret]));
        } else {
            block[..secret.len()].copy_from_slice(secret);
        }
        Key { block }
    }

    /// The tag of `message` sent on `subject`.
    pub(crate) fn sign(&self, subject: &str, message: &[u8]) -> [u8; TAG] {
        self.mac(&[subject.as_bytes(), &[0], message])
    }

    /// Whether `tag` is the tag of `message` sent on `subject`.
    pub(crate) fn verify(&self, subject: &str, message: &[u8], tag: &[u8]) -> bool {
        let expected = self.sign(subject, message);
        tag.len() == TAG
            && expected
                .iter()
                .zip(tag)
                .fold(0u8, |difference, (a, b)| difference | (a ^ b))
                == 0
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; TAG] {
        let inner_pad = self.block.map(|byte| byte ^ 0x36);
        let outer_pad = self.block.map(|byte| byte ^ 0x5c);
        let mut inner: Vec<&[u8]> = vec![&inner_pad];
        inner.extend_from_slice(parts);
        let inner = sha256(&inner);
        sha256(&[&outer_pad, &inner])
    }
}

impl std::fmt::Debug for Key {
    // The secret stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

const ROUND: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256 of the concatenation of `parts`.
fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut state: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let length: usize = parts.iter().map(|part| part.len()).sum();
    let mut block = [0u8; 64];
    let mut filled = 0;
    let padding_length = (length as u64).wrapping_mul(8).to_be_bytes();
    let padding: [&[u8]; 3] = [
        &[0x80],
        &[0; 64][..(119 - length % 64) % 64],
        &padding_length,
    ];
    for part in parts.iter().chain(padding.iter()) {
        for &byte in *part {
            block[filled] = byte;
            filled += 1;
            if filled == 64 {
                compress(&mut state, &block);
                filled = 0;
            }
        }
    }
    debug_assert_eq!(filled, 0, "the padding ends on a block boundary");
    let mut digest = [0u8; 32];
    for (chunk, word) in digest.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    digest
}

fn compress(state: &mut [u32; 8], block: &[u8; 64]) {
    let mut schedule = [0u32; 64];
    for (word, bytes) in schedule.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_be_bytes(bytes.try_into().expect("four bytes"));
    }
    for at in 16..64 {
        let (w15, w2) = (schedule[at - 15], schedule[at - 2]);
        let s0 = w15.rotate_right(7) ^ w15.rotate_right(18) ^ (w15 >> 3);
        let s1 = w2.rotate_right(17) ^ w2.rotate_right(19) ^ (w2 >> 10);
        schedule[at] = schedule[at - 16]
            .wrapping_add(s0)
            .wrapping_add(schedule[at - 7])
            .wrapping_add(s1);
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
    for (round, word) in ROUND.iter().zip(schedule) {
        let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let choice = (e & f) ^ (!e & g);
        let t1 = h
            .wrapping_add(s1)
            .wrapping_add(choice)
            .wrapping_add(*round)
            .wrapping_add(word);
        let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let majority = (a & b) ^ (a & c) ^ (b & c);
        let t2 = s0.wrapping_add(majority);
        h = g;
        g = f;
        f = e;
        e = d.wrapping_add(t1);
        d = c;
        c = b;
        b = a;
        a = t1.wrapping_add(t2);
    }
    for (word, add) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
        *word = word.wrapping_add(add);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn sha256_matches_the_standards_vectors() {
        assert_eq!(
            hex(&sha256(&[b""])),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(&sha256(&[b"abc"])),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let two_blocks = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(
            hex(&sha256(&[two_blocks])),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        // Split anywhere, the same digest.
        for at in 0..two_blocks.len() {
            assert_eq!(
                sha256(&[&two_blocks[..at], &two_blocks[at..]]),
                sha256(&[two_blocks])
            );
        }
    }

    /// Many blocks (too slow under Miri, which runs the short vectors above).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn sha256_of_a_million_bytes_matches_the_standards_vector() {
        let million = vec![b'a'; 1_000_000];
        assert_eq!(
            hex(&sha256(&[&million])),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2 and 6 (a key longer than a block).
        let cases: [(&[u8], &[u8], &str); 3] = [
            (
                &[0x0b; 20],
                b"Hi There",
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
        ];
        for (key, data, expected) in cases {
            assert_eq!(hex(&Key::new(key).mac(&[data])), expected);
        }
    }

    #[test]
    fn a_tag_verifies_only_its_own_subject_message_and_key() {
        let key = Key::new(b"cluster secret");
        let tag = key.sign("actors.announce.a", b"heartbeat");
        assert!(key.verify("actors.announce.a", b"heartbeat", &tag));
        assert!(!key.verify("actors.announce.b", b"heartbeat", &tag));
        assert!(!key.verify("actors.announce.a", b"heartbeaT", &tag));
        assert!(!key.verify("actors.announce.a", b"heartbeat", &tag[..31]));
        assert!(!Key::new(b"other").verify("actors.announce.a", b"heartbeat", &tag));
        let mut flipped = tag;
        flipped[7] ^= 1;
        assert!(!key.verify("actors.announce.a", b"heartbeat", &flipped));
    }
}
