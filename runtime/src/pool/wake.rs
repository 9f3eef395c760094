//! A worker's wake-state word: how another thread gets a sleeping or spinning worker to look
//! again.
//!
//! Bits:
//! - `FUTEX` (bit 0): the worker sleeps on this word with `futex_wait` (nothing in flight);
//! - `RING` (bit 1): the worker waits inside `io_uring_enter` with a read of `eventfd` armed;
//! - `SIGNAL` (bit 2): a wake is pending; it ends a spin and makes the next wait return.
//!
//! Invariants:
//! - A waiter enters a wait only by a compare-and-swap from `0`, so a `SIGNAL` set before it
//!   waits is always seen; a waker sets `SIGNAL` first and then interrupts whichever wait bit
//!   it found, so a signal set during the wait always interrupts it.
//! - The waiter clears its wait bit and consumes `SIGNAL` when it returns: a stale signal makes
//!   at most one wait return early.

use crate::sync::AtomicU32;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

const FUTEX: u32 = 1;
const RING: u32 = 2;
const SIGNAL: u32 = 4;

/// The wake-state word of one worker, with the eventfd that interrupts its ring wait.
pub struct WakeState {
    word: AtomicU32,
    eventfd: OwnedFd,
    /// Under loom, the futex and the eventfd are modelled by these flags.
    #[cfg(loom)]
    model: os::Model,
}

impl WakeState {
    pub(crate) fn new() -> std::io::Result<Self> {
        // Blocking on purpose: only the ring reads it, and an io_uring read of an `O_NONBLOCK`
        // file may complete at once with EAGAIN on some kernels instead of waiting, which would
        // turn every ring wait into a spin. A write blocks only if the counter would overflow.
        // SAFETY: eventfd has no memory preconditions; the result is checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            word: AtomicU32::new(0),
            // SAFETY: `fd` is a fresh descriptor we own.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
            #[cfg(loom)]
            model: os::Model::default(),
        })
    }

    /// The eventfd a ring wait keeps a read armed on.
    pub(crate) fn eventfd(&self) -> &OwnedFd {
        &self.eventfd
    }

    /// Makes the worker look again: ends its spin, or interrupts its futex or ring wait.
    pub(crate) fn wake(&self) {
        let previous = self.word.fetch_or(SIGNAL, Ordering::SeqCst);
        if previous & FUTEX != 0 {
            self.futex_wake();
        }
        if previous & RING != 0 {
            self.eventfd_write();
        }
    }

    /// Whether a wake is pending (for a spinning worker).
    pub(crate) fn is_signalled(&self) -> bool {
        self.word.load(Ordering::Acquire) & SIGNAL != 0
    }

    /// Consumes a pending wake. Returns whether there was one.
    pub(crate) fn consume(&self) -> bool {
        self.word.fetch_and(!SIGNAL, Ordering::AcqRel) & SIGNAL != 0
    }

    /// Sleeps on the futex until woken or `timeout` passes. Returns at once, consuming the
    /// signal, if a wake is already pending.
    pub(crate) fn sleep(&self, timeout: Option<Duration>) {
        if self
            .word
            .compare_exchange(0, FUTEX, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.consume();
            return;
        }
        self.futex_wait(timeout);
        self.word.fetch_and(!(FUTEX | SIGNAL), Ordering::SeqCst);
    }

    /// Announces a wait inside io_uring. Returns false, consuming the signal, if a wake is
    /// already pending (the caller must not wait then).
    pub(crate) fn begin_ring_wait(&self) -> bool {
        if self
            .word
            .compare_exchange(0, RING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.consume();
            return false;
        }
        true
    }

    /// Ends a ring wait and consumes any signal it got.
    pub(crate) fn end_ring_wait(&self) {
        self.word.fetch_and(!(RING | SIGNAL), Ordering::SeqCst);
    }

    /// Whether the worker waits inside io_uring now, for tests.
    #[cfg(test)]
    pub(crate) fn in_ring_wait(&self) -> bool {
        self.word.load(Ordering::SeqCst) & RING != 0
    }

    /// The raw bits, for tests.
    #[cfg(test)]
    pub(crate) fn bits(&self) -> u32 {
        self.word.load(Ordering::SeqCst)
    }

    #[cfg(not(loom))]
    fn futex_wake(&self) {
        // SAFETY: FUTEX_WAKE on a live, aligned u32 has no other precondition.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }

    #[cfg(not(loom))]
    fn futex_wait(&self, timeout: Option<Duration>) {
        let timespec = timeout.map(|timeout| libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        });
        let timespec_ptr = timespec.as_ref().map_or(std::ptr::null(), |timespec| {
            timespec as *const libc::timespec
        });
        // SAFETY: FUTEX_WAIT on our live word, expecting the value we stored; the timeout
        // pointer is null or points to a live timespec. Spurious returns are fine: the worker
        // loop looks again.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                FUTEX,
                timespec_ptr,
            );
        }
    }

    #[cfg(not(loom))]
    fn eventfd_write(&self) {
        use std::os::fd::AsRawFd;
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to our eventfd. The counter only needs to be
        // non-zero; it would take 2^64 wakes between two ring reads to fill it and block.
        unsafe {
            libc::write(
                self.eventfd.as_raw_fd(),
                (&raw const one).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }

    #[cfg(loom)]
    fn futex_wake(&self) {
        self.model.futex.store(true, Ordering::SeqCst);
    }

    #[cfg(loom)]
    fn futex_wait(&self, _timeout: Option<Duration>) {
        // A real FUTEX_WAIT returns only when woken; the model waits for the flag a
        // `futex_wake` sets, so a lost wake shows up as a model that never finishes.
        while !self.model.futex.load(Ordering::SeqCst) {
            loom::thread::yield_now();
        }
        self.model.futex.store(false, Ordering::SeqCst);
    }

    #[cfg(loom)]
    fn eventfd_write(&self) {
        self.model.eventfd.store(true, Ordering::SeqCst);
    }

    /// Under loom: waits until an eventfd write interrupts a ring wait.
    #[cfg(loom)]
    pub(crate) fn model_ring_wait(&self) {
        while !self.model.eventfd.load(Ordering::SeqCst) {
            loom::thread::yield_now();
        }
        self.model.eventfd.store(false, Ordering::SeqCst);
    }
}

#[cfg(loom)]
mod os {
    #[derive(Default)]
    pub(super) struct Model {
        pub(super) futex: loom::sync::atomic::AtomicBool,
        pub(super) eventfd: loom::sync::atomic::AtomicBool,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_signal_before_the_wait_makes_it_return_at_once_and_is_consumed() {
        let state = WakeState::new().unwrap();
        state.wake();
        assert!(state.is_signalled());
        let started = Instant::now();
        state.sleep(None);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(state.bits(), 0, "the signal is consumed");
        assert!(
            state.begin_ring_wait(),
            "no stale signal blocks the next wait"
        );
        state.end_ring_wait();
    }

    #[test]
    fn a_wake_interrupts_a_futex_sleep() {
        let state = Arc::new(WakeState::new().unwrap());
        let sleeper = {
            let state = state.clone();
            std::thread::spawn(move || state.sleep(None))
        };
        // Wait until the sleeper has announced its futex wait, then wake it.
        while state.bits() & FUTEX == 0 {
            std::thread::yield_now();
        }
        state.wake();
        sleeper.join().unwrap();
        assert_eq!(state.bits(), 0);
    }
}

#[cfg(all(test, loom))]
mod models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A wake racing a futex sleep: the sleeper either sees the signal before it waits or is
    /// woken out of the wait; the signal is consumed either way.
    #[test]
    fn a_wake_racing_a_futex_sleep_is_never_lost() {
        crate::sync::model(|| {
            let state = Arc::new(WakeState::new().unwrap());
            let waker = {
                let state = state.clone();
                thread::spawn(move || state.wake())
            };
            state.sleep(None);
            waker.join().unwrap();
            let bits = state.bits();
            assert!(bits & (FUTEX | RING) == 0, "the wait bit is cleared");
            // A wake that landed after the sleep returned leaves one stale signal, which the
            // next wait consumes.
            if bits & SIGNAL != 0 {
                assert!(!state.begin_ring_wait());
            }
            assert_eq!(state.bits(), 0);
        });
    }

    /// A wake racing a ring wait: either the wait is refused, or the wake writes the eventfd.
    #[test]
    fn a_wake_racing_a_ring_wait_is_never_lost() {
        crate::sync::model(|| {
            let state = Arc::new(WakeState::new().unwrap());
            let waker = {
                let state = state.clone();
                thread::spawn(move || state.wake())
            };
            if state.begin_ring_wait() {
                state.model_ring_wait();
                state.end_ring_wait();
            }
            waker.join().unwrap();
            assert_eq!(state.bits() & RING, 0);
        });
    }
}
