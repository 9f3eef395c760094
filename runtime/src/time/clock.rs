//! The time every part of the runtime reads: the real clocks on a native worker, the run's
//! virtual clock on the thread of a deterministic run. With the `deterministic` feature off
//! these are `Instant::now` and `SystemTime::now` and nothing else.

use std::time::{Instant, SystemTime};

/// The monotonic time: virtual in a deterministic run, real otherwise.
#[inline]
pub fn now() -> Instant {
    #[cfg(feature = "deterministic")]
    if let Some(now) = crate::simulation::with_current(|simulation| simulation.now()) {
        return now;
    }
    Instant::now()
}

/// The wall-clock time: virtual in a deterministic run (it starts at a fixed moment), real
/// otherwise.
#[inline]
pub fn system_now() -> SystemTime {
    #[cfg(feature = "deterministic")]
    if let Some(now) = crate::simulation::with_current(|simulation| simulation.system_now()) {
        return now;
    }
    SystemTime::now()
}
