//! Layout of the wheel that times out socket connects, reads and writes.
//!
//! The wheel has one slot per `tick` up to the longest configured timeout. Validation happens
//! here, once, so a layout whose slot arithmetic would overflow, or that would need more than
//! [`TimeoutWheel::MAX_SLOTS`] slots, is rejected before a runner starts.

use std::time::Duration;

/// The I/O timeout wheel's limits.
#[derive(Debug)]
pub struct TimeoutWheel;

impl TimeoutWheel {
    /// The longest connect or read/write timeout a runner accepts: one day.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

    /// The most slots a wheel may have; bounds the memory each worker spends on it.
    pub const MAX_SLOTS: u64 = 1 << 16;

    /// Number of slots needed to time out `longest` with the given `tick`, or why the layout
    /// cannot be built.
    pub(crate) fn layout(tick: Duration, longest: Duration) -> Result<u64, String> {
        if tick.is_zero() {
            return Err("the tick is 0, allowed is more than 0".into());
        }
        if tick > Self::MAX_TIMEOUT {
            return Err(format!(
                "the tick is {tick:?}, allowed is at most TimeoutWheel::MAX_TIMEOUT ({:?})",
                Self::MAX_TIMEOUT
            ));
        }
        // Both values are at most MAX_TIMEOUT here, so the nanosecond counts fit in u128 with
        // room to spare; `div_ceil` plus the slot for "now" is the layout.
        let slots = longest.as_nanos().div_ceil(tick.as_nanos()) + 1;
        if slots > u128::from(Self::MAX_SLOTS) {
            let smallest = longest.as_nanos().div_ceil(u128::from(Self::MAX_SLOTS - 1));
            return Err(format!(
                "the tick is {tick:?}, which needs {slots} slots for a {longest:?} timeout; \
                 allowed is at most {} slots, so use a tick of at least {:?}",
                Self::MAX_SLOTS,
                Duration::from_nanos(smallest as u64)
            ));
        }
        Ok(slots as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_counts_slots_up_to_the_longest_timeout() {
        let tick = Duration::from_millis(10);
        assert_eq!(TimeoutWheel::layout(tick, Duration::from_secs(1)), Ok(101));
        assert_eq!(
            TimeoutWheel::layout(Duration::from_secs(3600), TimeoutWheel::MAX_TIMEOUT),
            Ok(25)
        );
    }

    #[test]
    fn layout_rejects_ticks_that_cannot_be_represented() {
        let longest = Duration::from_secs(60);
        for tick in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
            let error = TimeoutWheel::layout(tick, longest).unwrap_err();
            assert!(error.contains("tick"), "{error}");
        }
    }
}
