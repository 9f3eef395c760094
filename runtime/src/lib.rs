//! A native io_uring, work-stealing async runtime with supervised task trees.
//!
//! Start a runtime with [`Runner::start`]; the root future runs on the calling thread (worker
//! zero) and receives a [`Context`], whose capability traits spawn supervised tasks
//! ([`Spawner`]), tell time ([`Clock`]), speak TCP ([`Network`], [`Listener`], [`Sink`],
//! [`Stream`]), resolve host names ([`Resolver`]), store durable blobs ([`Storage`], [`Blob`])
//! and export Prometheus metrics ([`Metrics`]). `use runtime::prelude::*` brings them all into
//! scope:
//!
//! ```
//! use runtime::prelude::*;
//! use std::time::Duration;
//!
//! let output = runtime::Runner::new(runtime::Config::default()).start(|context| async move {
//!     let handle = context.clone().spawn(|context| async move {
//!         context.sleep(Duration::from_millis(1)).await;
//!         6
//!     });
//!     handle.await.unwrap() + 1
//! });
//! assert_eq!(output, 7);
//! ```
//!
//! Programs and tests usually start it through the attributes `#[runtime::main]` (on
//! `async fn main`) and `#[runtime::test]` (on `async fn` tests, each with a fresh storage
//! directory and an optional `timeout`); both may take the root `Context`.
//!
//! Every native worker owns one io_uring ring (`SINGLE_ISSUER | DEFER_TASKRUN`, Linux 6.1+).
//! No other executor runs underneath: the task cells, queues, timers and rings are this
//! crate's own.

#![warn(missing_docs, missing_debug_implementations)]
// Under `--cfg loom` only the models run; the rest of the crate is compiled but not exercised.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub mod buffer;
mod config;
mod context;
#[cfg(feature = "deterministic")]
pub mod deterministic;
mod driver;
mod error;
mod extensions;
#[doc(hidden)]
pub mod __private {
    //! Support for the macros' expansions; not a public interface.
    pub use crate::macro_support::run_test;
    #[cfg(feature = "deterministic")]
    pub use crate::macro_support::{TestOutput, run_deterministic_test};
    /// The lock the actors crate shares with the runtime (`std`'s under Miri; see `sync`).
    pub use crate::sync::{Mutex, MutexGuard};
}
/// A test hook's call site, one line in the path it marks: `test_hook!(before_park())` calls
/// `hooks::before_park()` in the crate's own tests and is nothing in every other build.
macro_rules! test_hook {
    ($hook:ident($($argument:expr),* $(,)?)) => {
        #[cfg(test)]
        crate::hooks::$hook($($argument),*);
    };
}

/// A park point of a worker's turn (`park_point!(self, BeforeWait)`): the `at_park` hook in the
/// crate's own tests, nothing in every other build.
macro_rules! park_point {
    ($worker:expr, $point:ident) => {
        #[cfg(test)]
        crate::hooks::at_park(
            $worker.pool(),
            $worker.index,
            crate::hooks::ParkPoint::$point,
        );
    };
}

#[cfg(test)]
mod hooks;
mod macro_support;
mod metrics;
pub mod net;
mod panic;
mod pool;
mod random;
mod resolver;
mod runner;
mod sharded;
mod signal;
#[cfg(feature = "deterministic")]
mod simulation;
mod slab;
mod stop;
pub mod storage;
mod supervision;
mod sync;
mod task;
mod time;
mod traits;
mod worker;

#[cfg(all(test, not(loom)))]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

/// Runs `async fn main` on the runtime; see the `runtime-macros` crate for its options.
pub use runtime_macros::main;
/// Runs an `async fn` test on a fresh runtime; see the `runtime-macros` crate for its options.
pub use runtime_macros::test;

pub use buffer::{IoBuf, IoBufMut, IoBufs, IoBufsMut};
pub use config::{Config, MAX_RING_SIZE, MAX_WORKERS, RingConfig, SpinnerConfig};
pub use context::Context;
pub use error::Error;
pub use random::Rng;
pub use runner::Runner;
pub use signal::{Signal, SignalWait};
pub use stop::Stopped;
pub use task::{Execution, Handle};
pub use time::TimeoutWheel;
pub use traits::{
    Blob, Clock, Listener, Metrics, Network, ReadOptions, Resolver, Sink, Spawner, Storage, Stream,
    WriteOptions,
};
pub use worker::Sleep;

/// The clocks the runtime reads, for code that needs an `Instant` or a `SystemTime` without a
/// [`Context`] at hand: real on a native runtime, virtual in a deterministic run (see
/// `runtime::deterministic`, with the `deterministic` feature), so that a
/// deadline or a backoff computed from them follows the run's clock either way.
pub mod clock {
    pub use crate::time::clock::{now, system_now};
}

/// The capability traits, imported anonymously so their methods work without clashing with
/// other names.
pub mod prelude {
    pub use crate::Blob as _;
    pub use crate::Clock as _;
    pub use crate::Listener as _;
    pub use crate::Metrics as _;
    pub use crate::Network as _;
    pub use crate::Resolver as _;
    pub use crate::Sink as _;
    pub use crate::Spawner as _;
    pub use crate::Storage as _;
    pub use crate::Stream as _;
}

/// 64 random bits: from the deterministic run's generator in a deterministic run (recorded by
/// its auditor, so a seed replays them), from a per-thread generator seeded by the clock
/// elsewhere. For choices a program makes at random (jitter, sampling, hash keys) that a
/// simulation must replay. Not cryptographic.
pub fn random_u64() -> u64 {
    #[cfg(feature = "deterministic")]
    if let Some(value) =
        simulation::with_current(|simulation| simulation.draw("random", Rng::next_u64))
    {
        return value;
    }
    random::thread_random()
}

/// A future that yields once: it wakes itself and returns `Pending`, so the task runs again
/// behind the work already queued.
pub fn reschedule() -> Reschedule {
    Reschedule { yielded: false }
}

/// The future of [`reschedule`].
#[derive(Debug)]
pub struct Reschedule {
    yielded: bool,
}

impl Future for Reschedule {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
