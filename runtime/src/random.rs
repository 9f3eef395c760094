//! Randomness a program can replay: `random_u64` (at the crate's root, above the simulation)
//! draws from the deterministic run's generator when the calling thread runs one, and from
//! [`thread_random`] otherwise; [`Rng`] is the generator of both
//! (xoshiro256**, seeded through splitmix64, as its authors recommend). Not cryptographic:
//! for jitter, sampling and hash keys against accidental collisions, not against an attacker
//! who can read the process.

use std::cell::RefCell;

/// 64 random bits from this thread's generator, seeded by the clock, the thread and the
/// process: what `crate::random_u64` draws outside a deterministic run.
pub(crate) fn thread_random() -> u64 {
    thread_local! {
        static NATIVE: RefCell<Rng> = RefCell::new({
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_nanos() as u64);
            let here = &nanos as *const u64 as u64;
            Rng::seeded(nanos ^ here.rotate_left(32) ^ u64::from(std::process::id()))
        });
    }
    NATIVE.with(|rng| rng.borrow_mut().next_u64())
}

/// A seeded generator. Equal seeds give equal sequences, on every platform and build.
#[derive(Clone, Debug)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// The generator of `seed`.
    pub fn seeded(seed: u64) -> Self {
        let mut mix = seed;
        let mut next = || {
            mix = mix.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = mix;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Self {
            state: [next(), next(), next(), next()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let [a, b, c, d] = &mut self.state;
        let result = b.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = *b << 17;
        *c ^= *a;
        *d ^= *b;
        *b ^= *c;
        *a ^= *d;
        *c ^= t;
        *d = d.rotate_left(45);
        result
    }

    /// A value in `0..bound` (`0` when `bound` is `0`), without modulo bias worth naming
    /// (Lemire's multiply-shift).
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for index in (1..items.len()).rev() {
            let other = self.below(index as u64 + 1) as usize;
            items.swap(index, other);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_seeds_give_equal_sequences_and_different_seeds_differ() {
        let draw = |seed| {
            let mut rng = Rng::seeded(seed);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn below_stays_below_its_bound_and_reaches_every_value() {
        let mut rng = Rng::seeded(1);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let value = rng.below(5);
            assert!(value < 5);
            seen[value as usize] = true;
        }
        assert!(seen.iter().all(|&seen| seen));
        assert_eq!(rng.below(0), 0);
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut rng = Rng::seeded(5);
        let mut items: Vec<u32> = (0..50).collect();
        rng.shuffle(&mut items);
        assert_ne!(items, (0..50).collect::<Vec<_>>());
        items.sort();
        assert_eq!(items, (0..50).collect::<Vec<_>>());
    }
}
