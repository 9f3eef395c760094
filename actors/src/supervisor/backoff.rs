//! Restart backoff: how long a supervisor waits before it restarts a child that failed again.
//!
//! Invariants:
//! - The n-th consecutive delayed restart of a child (counting from 0) waits
//!   `min(max, min_delay * 2^n)` less a random part of at most `jitter` of it, and never less
//!   than the minimum delay: delays grow, spread apart so that children failing together do
//!   not restart in lockstep, and are bounded above by the maximum.
//! - The count resets once an incarnation has run for longer than [`Backoff::reset_after`]
//!   (the maximum delay unless set): a child that recovered starts again from the minimum.

use std::time::{Duration, Instant};

/// How long a supervisor waits before restarting a child: not at all (the default), or
/// exponentially longer for each consecutive restart, between a minimum and a maximum, with
/// jitter.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    jitter: f64,
    /// How long an incarnation must run for the count to start over; `None`: `max`.
    reset_after: Option<Duration>,
}

impl Backoff {
    /// No delay: restart at once (OTP's behaviour).
    pub fn none() -> Self {
        Backoff {
            min: Duration::ZERO,
            max: Duration::ZERO,
            jitter: 0.0,
            reset_after: None,
        }
    }

    /// `min` before the first restart, doubling for each consecutive one up to `max` (a `max`
    /// below `min` is taken as `min`), each made up to 20% shorter at random but never below
    /// `min`.
    pub fn exponential(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            jitter: 0.2,
            reset_after: None,
        }
    }

    /// The random part: each delay is made shorter by up to `fraction` of it (clamped to
    /// 0..=1; 0 makes the delays exact), never below the minimum.
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        self
    }

    /// How long an incarnation must run before the delays start over from the minimum
    /// (default: the maximum delay). A child that fails sooner than this after each restart
    /// keeps climbing towards the maximum; one that ran this long has recovered.
    pub fn reset_after(mut self, run: Duration) -> Self {
        self.reset_after = Some(run);
        self
    }

    /// How long an incarnation must run for the count to start over.
    fn resets_after(&self) -> Duration {
        self.reset_after.unwrap_or(self.max)
    }

    /// The longest the `attempt`-th consecutive restart (from 0) waits: `min * 2^attempt`,
    /// at most `max`. The shortest is this less the jitter, and at least `min`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        // In nanoseconds, wide enough for every `Duration`: doubling goes on until `max`
        // (a narrower factor would stop short of a large `max` from a tiny `min`).
        let ceiling = self.max.as_nanos();
        let nanos = match 1u128.checked_shl(attempt) {
            Some(factor) => self.min.as_nanos().saturating_mul(factor).min(ceiling),
            None => ceiling,
        };
        if nanos == ceiling {
            return self.max;
        }
        // Below `max`, so the seconds fit.
        Duration::new(
            (nanos / 1_000_000_000) as u64,
            (nanos % 1_000_000_000) as u32,
        )
    }

    /// The delay before the `attempt`-th consecutive restart.
    fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        if ceiling.is_zero() || self.jitter == 0.0 {
            return ceiling;
        }
        let shorter = ceiling.mul_f64(self.jitter * unit_random());
        ceiling.saturating_sub(shorter).max(self.min)
    }
}

/// Equal when they wait the same: a `reset_after` equal to the default (the maximum delay)
/// is no difference.
impl PartialEq for Backoff {
    fn eq(&self, other: &Self) -> bool {
        self.min == other.min
            && self.max == other.max
            && self.jitter == other.jitter
            && self.resets_after() == other.resets_after()
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::none()
    }
}

/// A child's consecutive delayed restarts.
#[derive(Default)]
pub(super) struct Attempts {
    count: u32,
    started: Option<Instant>,
}

impl Attempts {
    /// An incarnation starts now.
    pub(super) fn started(&mut self) {
        self.started = Some(runtime::clock::now());
    }

    /// The delay before the next restart, counting it.
    pub(super) fn next_delay(&mut self, backoff: &Backoff) -> Duration {
        if self
            .started
            .is_some_and(|started| runtime::clock::now() - started > backoff.resets_after())
        {
            self.count = 0;
        }
        let delay = backoff.delay(self.count);
        self.count = self.count.saturating_add(1);
        delay
    }
}

/// A number in [0, 1) from the runtime's generator: jitter needs spread, not
/// unpredictability, and a deterministic run must replay it (a generator of this thread's own
/// would go on from one run to the next, so two runs of one seed would wait differently).
fn unit_random() -> f64 {
    (runtime::random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;

    /// No backoff waits nothing, however many restarts.
    #[test]
    fn none_waits_nothing() {
        let mut attempts = Attempts::default();
        for _ in 0..5 {
            assert_eq!(attempts.next_delay(&Backoff::none()), Duration::ZERO);
        }
    }

    /// Exponential delays double from the minimum up to the maximum, each within its jitter
    /// band and never below the minimum.
    #[test]
    fn exponential_delays_double_within_their_bounds() {
        let min = Duration::from_millis(10);
        let max = Duration::from_millis(100);
        let backoff = Backoff::exponential(min, max);
        let ceilings: Vec<_> = (0..6).map(|n| backoff.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [10, 20, 40, 80, 100, 100]);
        let mut attempts = Attempts::default();
        for n in 0..6 {
            let delay = attempts.next_delay(&backoff);
            let ceiling = backoff.ceiling(n);
            assert!(delay <= ceiling, "attempt {n}: {delay:?} above {ceiling:?}");
            assert!(delay >= min, "attempt {n}: {delay:?} below the minimum");
            assert!(
                delay >= ceiling.mul_f64(0.8),
                "attempt {n}: {delay:?} past the jitter"
            );
        }
        let exact = backoff.jitter(0.0);
        assert_eq!(exact.delay(2), Duration::from_millis(40));
        assert_eq!(
            Backoff::exponential(max, min).ceiling(0),
            max,
            "max below min is min"
        );
        assert_eq!(backoff.ceiling(u32::MAX), max, "no overflow");
    }

    /// A child that ran longer than the maximum delay starts again from the minimum.
    /// Doubling from a tiny minimum still reaches a large maximum (it saturates instead of
    /// stopping at `min * 2^31`), and a huge minimum saturates at the maximum.
    #[test]
    fn ceilings_reach_the_maximum_from_any_minimum() {
        let max = Duration::from_secs(10);
        let backoff = Backoff::exponential(Duration::from_nanos(1), max);
        assert_eq!(backoff.ceiling(40), max);
        assert_eq!(backoff.ceiling(u32::MAX), max);
        assert_eq!(backoff.ceiling(33), Duration::from_nanos(1 << 33));
        let huge = Backoff::exponential(Duration::MAX, Duration::MAX);
        assert_eq!(huge.ceiling(0), Duration::MAX);
        assert_eq!(huge.ceiling(5), Duration::MAX);
    }

    #[test]
    fn a_long_run_resets_the_count() {
        let backoff =
            Backoff::exponential(Duration::from_nanos(1), Duration::from_nanos(2)).jitter(0.0);
        let mut attempts = Attempts::default();
        assert_eq!(attempts.next_delay(&backoff), Duration::from_nanos(1));
        assert_eq!(attempts.next_delay(&backoff), Duration::from_nanos(2));
        attempts.started = Some(Instant::now() - Duration::from_millis(1));
        assert_eq!(attempts.next_delay(&backoff), Duration::from_nanos(1));
    }

    #[test]
    fn backoffs_that_wait_the_same_are_equal() {
        let (min, max) = (Duration::from_millis(1), Duration::from_millis(8));
        assert_eq!(
            Backoff::exponential(min, max),
            Backoff::exponential(min, max).reset_after(max)
        );
        assert_ne!(
            Backoff::exponential(min, max),
            Backoff::exponential(min, max).reset_after(min)
        );
    }

    /// `reset_after` moves the threshold: a run longer than the maximum delay but shorter than
    /// it keeps the count, a longer one resets it.
    #[test]
    fn reset_after_sets_how_long_a_run_resets_the_count() {
        let backoff = Backoff::exponential(Duration::from_nanos(1), Duration::from_nanos(4))
            .jitter(0.0)
            .reset_after(Duration::from_secs(3600));
        let mut attempts = Attempts::default();
        assert_eq!(attempts.next_delay(&backoff), Duration::from_nanos(1));
        attempts.started = Some(Instant::now() - Duration::from_millis(1));
        assert_eq!(attempts.next_delay(&backoff), Duration::from_nanos(2));
        attempts.started = Some(Instant::now() - Duration::from_secs(3601));
        assert_eq!(attempts.next_delay(&backoff), Duration::from_nanos(1));
    }
}
