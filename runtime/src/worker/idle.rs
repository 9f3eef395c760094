//! What a worker keeps for its idle path: its role in the pool's idle protocol and the spin
//! it allows itself before it sleeps. The path itself is in `park`.

use std::time::{Duration, Instant};

/// Where a worker stands in the pool's idle protocol (see [`crate::pool::idle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IdleRole {
    /// Neither searching nor published: running work, or about to look for it.
    Working,
    /// Holds a search count: one it took to search, or one a claim took for it.
    Searching,
    /// Its bit is (or was, until a claim cleared it) set in the idle set; it holds no count.
    Published,
}

/// An idle worker's spin before it sleeps. The budget starts at `budget_us` and doubles (up to
/// `max_budget_us`) after each sleep that a wake ended within `quick_wake_us`, since a
/// spinning worker answers such a wake in well under a microsecond while waking a sleeping CPU
/// costs tens; a longer sleep resets it.
pub(super) struct Spinner {
    budget: Duration,
    base: Duration,
    max: Duration,
    quick: Duration,
}

impl Spinner {
    pub(super) fn new(config: &crate::config::SpinnerConfig) -> Self {
        let base = Duration::from_micros(config.budget_us);
        Self {
            budget: base,
            base,
            max: Duration::from_micros(config.max_budget_us),
            quick: Duration::from_micros(config.quick_wake_us),
        }
    }

    /// Spins until `waker` is signalled (consuming the signal; returns true), `ready` says the
    /// ring has completions to reap (returns true), or the budget or `deadline` runs out
    /// (returns false).
    pub(super) fn spin(
        &self,
        waker: &crate::pool::wake::WakeState,
        deadline: Option<Instant>,
        mut ready: impl FnMut() -> bool,
    ) -> bool {
        if self.budget.is_zero() {
            return false;
        }
        let mut until = Instant::now() + self.budget;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        loop {
            if waker.is_signalled() {
                waker.consume();
                return true;
            }
            if ready() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        }
    }

    /// Adapts the budget to how long the last sleep lasted.
    pub(super) fn adapt(&mut self, slept: Duration) {
        self.budget = if slept < self.quick && !self.base.is_zero() {
            (self.budget * 2).min(self.max).max(self.base)
        } else {
            self.base
        };
    }
}
