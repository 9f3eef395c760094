//! CRC-32C (Castagnoli), the checksum of every page, and the page trailer that carries it.
//!
//! Invariants:
//! - [`update`] computes the standard CRC-32C (`crc32c(b"123456789") == 0xE306_9283`) on
//!   every machine, by the fastest path the CPU has: folding with VPCLMULQDQ (AVX-512) from
//!   256 bytes, else the SSE 4.2 CRC instruction, else a table-driven loop. Each path is
//!   checked against a bit-at-a-time reference (the folding one where the CPU has it).
//! - The CRC instruction splits long inputs into three lanes that the CPU runs in parallel;
//!   the lanes are joined with the CRC's linearity (`shift`), so the split never changes the
//!   value.
//! - A trailer slot whose six bytes are all zero is empty: an all-zero trailer (a hole, or a
//!   page never written) never validates, whatever the page holds. Any other slot is present,
//!   and valid only if its checksum matches: a slot of length 0 is the end page's (a blob
//!   whose bytes end at a page boundary is closed by a page that holds none), whose checksum
//!   covers the length and page number, so it is not zero.

/// Reflected CRC-32C polynomial.
const POLY: u32 = 0x82F6_3B78;

/// The CRC-32C of `data`, by the fastest path the CPU has: the checksum of every page, for
/// layers above that frame records of their own.
pub fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// The CRC-32C of `a ++ data`, given `crc32c(a)`: for a checksum over several pieces
/// without joining them.
pub fn crc32c_extend(crc: u32, data: &[u8]) -> u32 {
    !update(!crc, data)
}

/// Feeds `data` into the raw (unconditioned) CRC state `state`.
pub(crate) fn update(state: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2, checked just above.
        return unsafe { hardware::update(state, data) };
    }
    software::update(state, data)
}

/// `state` as if followed by `len` zero bytes: multiplication by `x^(8 len)` modulo the
/// polynomial. A raw state is linear, so `update(s, a ++ b) == shift(update(s, a), b.len()) ^
/// update(0, b)`.
#[cfg(test)]
fn shift(state: u32, len: usize) -> u32 {
    multiply(x_pow_8n(len as u64), state)
}

/// `a * b` modulo the polynomial, both in reflected form (bit 31 is `x^0`). Branch-free: the
/// bits of a checksum are unpredictable.
const fn multiply(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 32;
    while bit > 0 {
        bit -= 1;
        product ^= b & 0u32.wrapping_sub((a >> bit) & 1);
        b = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
    }
    product
}

/// `x^(8 n)` modulo the polynomial, by squaring: `x^(2^k)` for the set bits of `8 n`.
const fn x_pow_8n(n: u64) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut square = 1u32 << 30; // x^1
    let mut exponent = n.wrapping_mul(8);
    while exponent != 0 {
        if exponent & 1 != 0 {
            result = multiply(square, result);
        }
        square = multiply(square, square);
        exponent >>= 1;
    }
    result
}

mod software {
    use super::POLY;

    /// Eight tables of 256 entries: slicing-by-8, computed at compile time.
    static TABLES: [[u32; 256]; 8] = tables();

    const fn tables() -> [[u32; 256]; 8] {
        let mut tables = [[0u32; 256]; 8];
        let mut byte = 0;
        while byte < 256 {
            let mut crc = byte as u32;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
                bit += 1;
            }
            tables[0][byte] = crc;
            byte += 1;
        }
        let mut table = 1;
        while table < 8 {
            let mut byte = 0;
            while byte < 256 {
                let previous = tables[table - 1][byte];
                tables[table][byte] = (previous >> 8) ^ tables[0][(previous & 0xff) as usize];
                byte += 1;
            }
            table += 1;
        }
        tables
    }

    pub(super) fn update(mut state: u32, data: &[u8]) -> u32 {
        let mut words = data.chunks_exact(8);
        for word in &mut words {
            let low = u32::from_le_bytes([word[0], word[1], word[2], word[3]]) ^ state;
            let high = u32::from_le_bytes([word[4], word[5], word[6], word[7]]);
            state = TABLES[7][(low & 0xff) as usize]
                ^ TABLES[6][((low >> 8) & 0xff) as usize]
                ^ TABLES[5][((low >> 16) & 0xff) as usize]
                ^ TABLES[4][(low >> 24) as usize]
                ^ TABLES[3][(high & 0xff) as usize]
                ^ TABLES[2][((high >> 8) & 0xff) as usize]
                ^ TABLES[1][((high >> 16) & 0xff) as usize]
                ^ TABLES[0][(high >> 24) as usize];
        }
        for &byte in words.remainder() {
            state = (state >> 8) ^ TABLES[0][((state ^ u32::from(byte)) & 0xff) as usize];
        }
        state
    }
}

#[cfg(target_arch = "x86_64")]
mod hardware {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};

    /// Below this, one lane: joining three costs more than it saves.
    const THREE_LANES_FROM: usize = 768;

    /// # Safety
    /// The CPU must have SSE 4.2.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn update(state: u32, data: &[u8]) -> u32 {
        if data.len() >= fold::FROM && fold::available() {
            // SAFETY: the CPU has AVX-512F, VPCLMULQDQ and PCLMULQDQ (`available`), and SSE
            // 4.2, which this function requires.
            return unsafe { fold::update(state, data) };
        }
        // SAFETY: this function requires SSE 4.2 too.
        unsafe { instruction(state, data) }
    }

    /// The CRC instruction alone: one lane, or three for long inputs.
    ///
    /// # Safety
    /// The CPU must have SSE 4.2.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn instruction(state: u32, data: &[u8]) -> u32 {
        if data.len() < THREE_LANES_FROM {
            return one_lane(state, data);
        }
        // Three lanes of whole words; the instruction's latency is three cycles and its
        // throughput one per cycle, so three independent chains keep it busy.
        let lane = data.len() / 24 * 8;
        let (first, rest) = data.split_at(lane);
        let (second, rest) = rest.split_at(lane);
        let (third, tail) = rest.split_at(lane);
        let (mut a, mut b, mut c) = (u64::from(state), 0u64, 0u64);
        for ((x, y), z) in first
            .chunks_exact(8)
            .zip(second.chunks_exact(8))
            .zip(third.chunks_exact(8))
        {
            a = _mm_crc32_u64(a, word(x));
            b = _mm_crc32_u64(b, word(y));
            c = _mm_crc32_u64(c, word(z));
        }
        let (two_lanes, one_lane_k) = lane_constants(lane);
        let joined = super::multiply(two_lanes, a as u32) ^ super::multiply(one_lane_k, b as u32);
        one_lane(joined ^ c as u32, tail)
    }

    /// `x^(8 * 2 lane)` and `x^(8 lane)`: the shifts joining the lanes. Pages have one size,
    /// so the last lane length seen on this thread is almost always the next one.
    fn lane_constants(lane: usize) -> (u32, u32) {
        use std::cell::Cell;
        thread_local! {
            static LAST: Cell<(usize, u32, u32)> = const { Cell::new((0, 0, 0)) };
        }
        LAST.with(|last| {
            let (cached, two_lanes, one_lane) = last.get();
            if cached == lane {
                return (two_lanes, one_lane);
            }
            let constants = (
                super::x_pow_8n(2 * lane as u64),
                super::x_pow_8n(lane as u64),
            );
            last.set((lane, constants.0, constants.1));
            constants
        })
    }

    #[target_feature(enable = "sse4.2")]
    fn one_lane(state: u32, data: &[u8]) -> u32 {
        let mut state = u64::from(state);
        let mut words = data.chunks_exact(8);
        for chunk in &mut words {
            state = _mm_crc32_u64(state, word(chunk));
        }
        let mut state = state as u32;
        for &byte in words.remainder() {
            state = _mm_crc32_u8(state, byte);
        }
        state
    }

    #[inline(always)]
    fn word(bytes: &[u8]) -> u64 {
        u64::from_le_bytes(bytes.try_into().expect("eight bytes"))
    }

    /// Folding with carry-less multiplication, four 512-bit accumulators wide: 256 bytes per
    /// step, several times the speed of the CRC instruction.
    ///
    /// A 128-bit block `A` (little-endian, reflected: bit `i` is `x^(127 - i)`) that lies `D`
    /// bits before block `B` contributes `A * x^D` to the CRC; its high-degree half (the low
    /// 64 bits) times `x^(D + 32)` and its low-degree half times `x^(D - 32)`, each constant
    /// reflected and shifted left by one, is congruent to that and fits in 128 bits aligned
    /// with `B`, so it is XORed into `B`. Folding keeps the remaining message congruent to the
    /// original; the last 16 bytes then go through the CRC instruction, which reduces them.
    pub(super) mod fold {
        use std::arch::x86_64::*;

        pub(in super::super) const FROM: usize = 256;

        /// Whether the CPU has every feature folding uses (a virtual machine may report some
        /// without the others).
        pub(in super::super) fn available() -> bool {
            std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("vpclmulqdq")
                && std::is_x86_feature_detected!("pclmulqdq")
                && std::is_x86_feature_detected!("sse4.2")
        }

        /// The pair folding a block `distance` bits forward: low lane for the low 64 bits.
        const fn constants(distance: u64) -> (i64, i64) {
            let high = (super::super::x_pow_8n((distance + 32) / 8) as u64) << 1;
            let low = (super::super::x_pow_8n((distance - 32) / 8) as u64) << 1;
            (high as i64, low as i64)
        }

        const BY_2048: (i64, i64) = constants(2048);
        const BY_512: (i64, i64) = constants(512);
        const BY_128: (i64, i64) = constants(128);

        /// # Safety
        /// The CPU must have AVX-512F, VPCLMULQDQ and SSE 4.2, and `data` at least `FROM` bytes.
        #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
        pub(in super::super) unsafe fn update(state: u32, data: &[u8]) -> u32 {
            assert!(data.len() >= FROM);
            let k2048 = _mm512_set_epi64(
                BY_2048.1, BY_2048.0, BY_2048.1, BY_2048.0, BY_2048.1, BY_2048.0, BY_2048.1,
                BY_2048.0,
            );
            let k512 = _mm512_set_epi64(
                BY_512.1, BY_512.0, BY_512.1, BY_512.0, BY_512.1, BY_512.0, BY_512.1, BY_512.0,
            );
            let k128 = _mm_set_epi64x(BY_128.1, BY_128.0);

            let mut blocks = data.chunks_exact(64);
            let mut next = || {
                let block = blocks.next().expect("counted");
                // SAFETY: `block` is 64 readable bytes; the load is unaligned.
                unsafe { _mm512_loadu_si512(block.as_ptr().cast()) }
            };
            let initial = _mm512_zextsi128_si512(_mm_cvtsi32_si128(state as i32));
            let mut x0 = _mm512_xor_si512(next(), initial);
            let mut x1 = next();
            let mut x2 = next();
            let mut x3 = next();
            let mut left = data.len() / 64 - 4;
            while left >= 4 {
                x0 = fold512(x0, k2048, next());
                x1 = fold512(x1, k2048, next());
                x2 = fold512(x2, k2048, next());
                x3 = fold512(x3, k2048, next());
                left -= 4;
            }
            let mut x = fold512(x0, k512, x1);
            x = fold512(x, k512, x2);
            x = fold512(x, k512, x3);
            for _ in 0..left {
                x = fold512(x, k512, next());
            }

            let mut y = _mm512_extracti32x4_epi32::<0>(x);
            y = fold128(y, k128, _mm512_extracti32x4_epi32::<1>(x));
            y = fold128(y, k128, _mm512_extracti32x4_epi32::<2>(x));
            y = fold128(y, k128, _mm512_extracti32x4_epi32::<3>(x));
            let low = _mm_cvtsi128_si64(y) as u64;
            let high = _mm_extract_epi64::<1>(y) as u64;
            let state = _mm_crc32_u64(_mm_crc32_u64(0, low), high) as u32;
            super::one_lane(state, &data[data.len() / 64 * 64..])
        }

        #[inline]
        #[target_feature(enable = "avx512f,vpclmulqdq")]
        fn fold512(a: __m512i, keys: __m512i, b: __m512i) -> __m512i {
            let low = _mm512_clmulepi64_epi128::<0x00>(a, keys);
            let high = _mm512_clmulepi64_epi128::<0x11>(a, keys);
            _mm512_ternarylogic_epi64::<0x96>(low, high, b)
        }

        #[inline]
        #[target_feature(enable = "pclmulqdq,sse2")]
        fn fold128(a: __m128i, keys: __m128i, b: __m128i) -> __m128i {
            let low = _mm_clmulepi64_si128::<0x00>(a, keys);
            let high = _mm_clmulepi64_si128::<0x11>(a, keys);
            _mm_xor_si128(_mm_xor_si128(low, high), b)
        }
    }
}

/// Bytes after each page's data: two slots of (length `u16`, checksum `u32`), little-endian.
pub const CHECKSUM_SIZE: u16 = 12;

/// One trailer slot: a page's first `len` bytes and their checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) len: u16,
    pub(crate) crc: u32,
}

impl Slot {
    /// The slot for `data` (the page's first `data.len()` bytes) of page number `page`.
    /// The checksum also covers the length and the page number, so a slot copied to another
    /// page, or one whose length was torn, does not validate.
    pub(crate) fn compute(page: u64, data: &[u8]) -> Self {
        let len = u16::try_from(data.len()).expect("a page holds at most u16::MAX bytes");
        let mut state = update(!0, data);
        state = update(state, &len.to_le_bytes());
        state = update(state, &page.to_le_bytes());
        Self { len, crc: !state }
    }

    pub(crate) fn is_valid_for(self, page: u64, data: &[u8]) -> bool {
        usize::from(self.len) <= data.len()
            && Slot::compute(page, &data[..usize::from(self.len)]) == self
    }
}

/// A page trailer: two slots, so that rewriting a partial page (to add bytes) keeps the slot
/// of its previous, durable state intact. A torn rewrite then still validates through the old
/// slot, whose bytes the rewrite did not change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Trailer {
    pub(crate) slots: [Option<Slot>; 2],
}

impl Trailer {
    pub(crate) fn encode(self, out: &mut [u8]) {
        assert_eq!(out.len(), usize::from(CHECKSUM_SIZE));
        for (slot, out) in self.slots.iter().zip(out.chunks_exact_mut(6)) {
            let (len, crc) = slot.map_or((0, 0), |slot| (slot.len, slot.crc));
            out[..2].copy_from_slice(&len.to_le_bytes());
            out[2..].copy_from_slice(&crc.to_le_bytes());
        }
    }

    pub(crate) fn decode(bytes: &[u8]) -> Self {
        assert_eq!(bytes.len(), usize::from(CHECKSUM_SIZE));
        let mut trailer = Trailer::default();
        for (slot, bytes) in trailer.slots.iter_mut().zip(bytes.chunks_exact(6)) {
            let len = u16::from_le_bytes([bytes[0], bytes[1]]);
            let crc = u32::from_le_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
            // A slot with any byte set is present, even one whose length reads 0: a flipped bit
            // in a length must make the slot fail, not vanish.
            *slot = (len != 0 || crc != 0).then_some(Slot { len, crc });
        }
        trailer
    }

    /// The valid slot with the most bytes, and its index: the page's latest durable state.
    /// Appends only ever lengthen a page, so the longest valid slot is the newest.
    pub(crate) fn best(self, page: u64, data: &[u8]) -> Option<(usize, Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| Some((index, (*slot)?)))
            .filter(|(_, slot)| slot.is_valid_for(page, data))
            .max_by_key(|(_, slot)| slot.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit at a time, straight from the definition.
    fn reference(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn pattern(len: usize) -> Vec<u8> {
        let mut x = 0x9E37_79B9u32;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    #[test]
    fn matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(reference(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    /// Each path this CPU has, against the reference: every length to 1100 (each tail and
    /// lane split of the folding and three-lane paths), then longer ones, from several states.
    #[test]
    fn every_path_agrees_with_the_reference_at_every_length() {
        let data = pattern(10_000);
        // Miri interprets every step: there, a spread of the short lengths and two long ones.
        let lengths: Vec<usize> = if cfg!(miri) {
            (0..300).step_by(7).chain([1099, 4097]).collect()
        } else {
            (0..1100).chain([4095, 4096, 4097, 8191, 10_000]).collect()
        };
        for len in lengths {
            let data = &data[..len];
            let expected = reference(data);
            assert_eq!(crc32c(data), expected, "len {len}");
            assert_eq!(!software::update(!0, data), expected, "software, len {len}");
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("sse4.2") {
                    // SAFETY: the CPU has SSE 4.2.
                    let instruction = unsafe { hardware::instruction(!0, data) };
                    assert_eq!(!instruction, expected, "crc instruction, len {len}");
                }
                if hardware::fold::available() && len >= hardware::fold::FROM {
                    // SAFETY: the CPU has the features, and the input is long enough.
                    let folded = unsafe { hardware::fold::update(!0, data) };
                    assert_eq!(!folded, expected, "folding, len {len}");
                }
            }
        }
        // A raw state carried in from earlier bytes, on every path.
        let (head, tail) = data.split_at(777);
        assert_eq!(!update(update(!0, head), tail), reference(&data));
    }

    #[test]
    fn extending_a_checksum_equals_the_checksum_of_the_joined_bytes() {
        let data = pattern(1000);
        for split in [0, 1, 7, 256, 999, 1000] {
            let (a, b) = data.split_at(split);
            assert_eq!(crc32c_extend(crc32c(a), b), crc32c(&data), "split {split}");
        }
    }

    #[test]
    fn shift_joins_two_states() {
        let len = if cfg!(miri) { 600 } else { 3000 };
        let data = pattern(len);
        for split in [0, 1, 7, 8, len / 2, len - 1, len] {
            let (a, b) = data.split_at(split);
            let joined = shift(update(!0, a), b.len()) ^ update(0, b);
            assert_eq!(!joined, reference(&data), "split at {split}");
        }
    }

    #[test]
    fn a_slot_binds_bytes_length_and_page() {
        let data = pattern(64);
        let slot = Slot::compute(3, &data[..40]);
        assert!(slot.is_valid_for(3, &data));
        assert!(!slot.is_valid_for(4, &data), "another page");
        let mut flipped = data.clone();
        flipped[39] ^= 1;
        assert!(!slot.is_valid_for(3, &flipped), "a flipped bit");
        flipped = data.clone();
        flipped[40] ^= 1;
        assert!(
            slot.is_valid_for(3, &flipped),
            "bytes past the slot's length are not covered"
        );
        assert!(
            !slot.is_valid_for(3, &data[..39]),
            "a page shorter than the slot"
        );
    }

    #[test]
    fn trailers_round_trip_and_zeros_never_validate() {
        let data = pattern(64);
        let trailer = Trailer {
            slots: [
                Some(Slot::compute(0, &data[..10])),
                Some(Slot::compute(0, &data)),
            ],
        };
        let mut bytes = [0u8; CHECKSUM_SIZE as usize];
        trailer.encode(&mut bytes);
        let decoded = Trailer::decode(&bytes);
        assert_eq!(decoded, trailer);
        assert_eq!(decoded.best(0, &data).map(|(index, _)| index), Some(1));

        // The newer slot torn: the older one still validates.
        let mut torn = bytes;
        torn[8] ^= 0xff;
        let best = Trailer::decode(&torn).best(0, &data);
        assert_eq!(best.map(|(index, slot)| (index, slot.len)), Some((0, 10)));

        let zeros = Trailer::decode(&[0; CHECKSUM_SIZE as usize]);
        assert_eq!(zeros, Trailer::default(), "all zero: both slots empty");
        assert_eq!(zeros.best(0, &[0; 64]), None);
    }

    /// The end page's slot holds no bytes and still binds its page: it validates for its own
    /// page only, and its checksum is not zero (so it is never taken for an empty slot).
    #[test]
    fn an_empty_slot_validates_its_page_only() {
        for page in 0..256 {
            let slot = Slot::compute(page, &[]);
            assert_eq!(slot.len, 0);
            assert_ne!(slot.crc, 0, "page {page}");
            assert!(slot.is_valid_for(page, &[0; 64]));
            assert!(!slot.is_valid_for(page + 1, &[0; 64]));
        }
    }

    /// The one page number below 2^32 whose end-page slot has a zero checksum (the CRC over
    /// the page number's low four bytes is a bijection): its end slot encodes as all zero and
    /// reads as empty, as the recovery module documents.
    #[test]
    fn one_page_below_two_to_the_32_has_an_end_slot_of_zeros() {
        assert_eq!(Slot::compute(785_815_615, &[]).crc, 0);
        assert_ne!(Slot::compute(785_815_614, &[]).crc, 0);
    }

    /// A length flipped to zero leaves a slot that is present and fails: it does not vanish,
    /// so a damaged newest slot is never mistaken for one never written.
    #[test]
    fn a_length_flipped_to_zero_is_a_failing_slot() {
        let data = pattern(64);
        let slot = Slot::compute(0, &data[..16]);
        let trailer = Trailer {
            slots: [Some(slot), None],
        };
        let mut bytes = [0u8; CHECKSUM_SIZE as usize];
        trailer.encode(&mut bytes);
        bytes[0] ^= 16;
        let decoded = Trailer::decode(&bytes);
        let damaged = decoded.slots[0].expect("present");
        assert_eq!(damaged.len, 0);
        assert!(!damaged.is_valid_for(0, &data));
    }
}
