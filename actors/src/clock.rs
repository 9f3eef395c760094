//! A cheap clock for handler time: the CPU's time-stamp counter where it ticks at a constant
//! rate on every core (invariant TSC), nanoseconds of `Instant` elsewhere. Handlers read it
//! twice per busy stretch, so it must cost a few cycles, not a `clock_gettime`; ticks turn
//! into seconds only when metrics are encoded.
//!
//! Invariants:
//! - `ticks` is monotonic per thread and comparable across threads (the invariant TSC is
//!   synchronized across cores by the kernel, which refuses it otherwise).
//! - `seconds` converts with a rate measured once, over a few milliseconds, at the first
//!   encoding; the measurement spins rather than sleeps, so it needs no runtime.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Ticks of the clock now.
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if invariant_tsc() {
        // SAFETY: `rdtsc` exists on every x86_64 CPU and has no preconditions.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    origin().elapsed().as_nanos() as u64
}

/// `ticks` in seconds.
pub(crate) fn seconds(ticks: u64) -> f64 {
    ticks as f64 / ticks_per_second()
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Whether the TSC runs at a constant rate through frequency changes and idle states (CPUID
/// leaf 0x8000_0007, EDX bit 8).
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    static INVARIANT: OnceLock<bool> = OnceLock::new();
    *INVARIANT.get_or_init(|| {
        use core::arch::x86_64::__cpuid;
        // Leaf 0x8000_0000 reports the highest extended leaf, checked before 0x8000_0007 is
        // asked for.
        let highest = __cpuid(0x8000_0000).eax;
        highest >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    })
}

fn ticks_per_second() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let (start, first) = (Instant::now(), ticks());
        while start.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        let (elapsed, last) = (start.elapsed(), ticks());
        (last.wrapping_sub(first)) as f64 / elapsed.as_secs_f64()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_measure_time_in_seconds() {
        let (start, first) = (Instant::now(), ticks());
        std::thread::sleep(Duration::from_millis(30));
        let (elapsed, measured) = (start.elapsed(), seconds(ticks() - first));
        let truth = elapsed.as_secs_f64();
        assert!(
            (measured - truth).abs() < truth * 0.2,
            "measured {measured} s for {truth} s"
        );
    }
}
