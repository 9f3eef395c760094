//! Runner configuration and its validation.
//!
//! Invariants kept here:
//! - [`Config::validate`] is the only gate: `Runner::start` calls it before it creates the
//!   storage directory, a ring, a thread or calls user code, so an invalid setting never leaves
//!   anything behind.
//! - Every rejection names the field, the value given and the range allowed.
//! - After validation `ring_config.size` is a power of two in `1..=MAX_RING_SIZE`, and the
//!   timeout wheel described by `ring_config.timeout_wheel_tick` can represent both I/O timeouts.

use crate::time::TimeoutWheel;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The largest number of pool workers a runner may have: one bit each in the idle set's word,
/// whose top byte counts the searching workers.
pub const MAX_WORKERS: usize = crate::pool::idle::MAX_WORKERS;

/// The largest io_uring submission queue a worker may ask for.
pub const MAX_RING_SIZE: u32 = 32_768;

/// The smallest and largest provided receive buffer ([`RingConfig::receive_buffer_size`]).
const MIN_RECEIVE_BUFFER: u32 = 64;
const MAX_RECEIVE_BUFFER: u32 = 1 << 20;

/// Settings of each worker's io_uring ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Submission queue entries. Rounded up to a power of two; `1..=32768` after rounding.
    /// Submissions beyond it wait in a backlog, so even a one-slot ring works.
    pub size: u32,
    /// Granularity of the wheel that times out connects, reads and writes. It must lay out the
    /// configured timeouts in at most [`TimeoutWheel::MAX_SLOTS`] slots.
    pub timeout_wheel_tick: Duration,
    /// Buffers each ring provides to the kernel for multishot TCP receives: `0` (the default:
    /// none), or a power of two up to 32768.
    ///
    /// With buffers, a stream arms one multishot receive that stays armed across `recv` calls,
    /// so a message costs one completion and no submission; its bytes are copied out of the
    /// buffer, which goes back to the kernel at once, so a few buffers serve every connection
    /// of a ring. The receive stays on the ring of the worker that armed it until it pauses or
    /// ends, and every arrival wakes the connection's task on that worker. Measured on two
    /// workers (`benches/README.md`, `runtime_io`), that cut the 99th percentile round trip
    /// 5 to 18 times at 16 and 64 connections and cost 20 to 30 % more CPU per request:
    /// the connections stay on the worker that accepted them instead of spreading as their
    /// tasks are stolen. Use it where tail latency matters more than CPU, or on one worker.
    /// With `0` (or if the kernel refuses the buffers, which
    /// `runtime_ring_receive_buffers_refused_total` counts), each `recv` that must wait
    /// submits one receive on the ring of the worker running it.
    ///
    /// Each ring that receives (every worker's, and every dedicated or blocking thread's)
    /// maps `receive_buffers * receive_buffer_size` bytes at its first multishot receive, and
    /// the kernel pins its `receive_buffers * 16`-byte entry ring. Per connection, at most
    /// 128 KiB plus one ring's buffers is received ahead of what the reader asked for.
    pub receive_buffers: u16,
    /// Bytes in each provided receive buffer: `64..=1048576`. One completion carries at most
    /// this many bytes.
    pub receive_buffer_size: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            size: 256,
            timeout_wheel_tick: Duration::from_millis(10),
            receive_buffers: 0,
            receive_buffer_size: 16 * 1024,
        }
    }
}

/// How long an idle worker spins, watching its wake signal, before it sleeps in the kernel.
///
/// Waking a sleeping CPU costs tens of microseconds on common machines while a spinning worker
/// answers in well under one, so a spin buys latency for bursty work *when the machine has
/// cores to spare*. The default does not spin: measured on two-core machines (see
/// `benches/README.md`), a spinning worker takes the core that the thread feeding it (a spawner,
/// a client) needs, and every workload of `runtime_multi` ran as fast or faster without it.
/// Give it a budget when workers have cores of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinnerConfig {
    /// Spin budget of an idle worker, in microseconds. `0` disables spinning.
    pub budget_us: u64,
    /// Upper bound for the budget when it adapts to quick wakes; at least `budget_us`.
    pub max_budget_us: u64,
    /// A wake that arrives this soon after a worker went to sleep counts as "quick": the worker
    /// doubles its budget (up to `max_budget_us`) so that the next such wake finds it spinning.
    pub quick_wake_us: u64,
}

impl Default for SpinnerConfig {
    /// No spinning (the same as [`SpinnerConfig::disabled`]); see the type's documentation.
    fn default() -> Self {
        Self::disabled()
    }
}

impl SpinnerConfig {
    /// No spinning: an idle worker sleeps at once.
    pub const fn disabled() -> Self {
        Self {
            budget_us: 0,
            max_budget_us: 0,
            quick_wake_us: 0,
        }
    }
}

/// Configuration of a [`Runner`](crate::Runner).
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) worker_threads: usize,
    pub(crate) global_queue_interval: u32,
    pub(crate) ring_config: RingConfig,
    pub(crate) idle_spinner: SpinnerConfig,
    pub(crate) catch_panics: bool,
    pub(crate) storage_directory: PathBuf,
    /// The directory is the fresh temporary one `new` picked (not one the user chose).
    generated_directory: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_write_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

/// A directory name under the system temp dir that no other runner of this process (or, with
/// the pid and the clock in it, of another) picks.
fn fresh_storage_directory() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let sequence = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "runtime-storage-{}-{nanos}-{sequence}",
        std::process::id()
    ))
}

impl Config {
    /// The defaults: 2 workers, a global queue interval of 31, 256-entry rings, the default
    /// spinner, uncaught panics, a fresh storage directory, 60 s connect and 30 s read/write
    /// timeouts.
    pub fn new() -> Self {
        Self {
            worker_threads: 2,
            global_queue_interval: 31,
            ring_config: RingConfig::default(),
            idle_spinner: SpinnerConfig::default(),
            catch_panics: false,
            storage_directory: fresh_storage_directory(),
            generated_directory: true,
            connect_timeout: Duration::from_secs(60),
            read_write_timeout: Duration::from_secs(30),
        }
    }

    /// Number of pool workers, the caller's thread included (`1..=MAX_WORKERS`).
    pub fn with_worker_threads(mut self, workers: usize) -> Self {
        self.worker_threads = workers;
        self
    }

    /// A busy worker takes from the global queue on every `interval`-th poll (at least 1).
    pub fn with_global_queue_interval(mut self, interval: u32) -> Self {
        self.global_queue_interval = interval;
        self
    }

    /// Ring size and timeout wheel granularity of every worker.
    pub fn with_ring_config(mut self, ring_config: RingConfig) -> Self {
        self.ring_config = ring_config;
        self
    }

    /// How idle workers spin before they sleep.
    pub fn with_idle_spinner(mut self, spinner: SpinnerConfig) -> Self {
        self.idle_spinner = spinner;
        self
    }

    /// When true, a task panic resolves its handle to `Error::Exited` and the runner carries
    /// on; when false (the default) it fails the runner.
    pub fn with_catch_panics(mut self, catch_panics: bool) -> Self {
        self.catch_panics = catch_panics;
        self
    }

    /// Where blobs live. `start` creates it and holds an exclusive lock on it while it runs;
    /// what is stored there stays after the runner ends (a directory it created and left
    /// empty is removed).
    ///
    /// Without this setting, each config picks a fresh directory under the system temp dir,
    /// which the runner removes, data and all, when it ends (a clone of the config names the
    /// same directory, so a runner restarted on a clone starts empty): set a directory to keep
    /// data from one run to the next.
    pub fn with_storage_directory(mut self, directory: impl Into<PathBuf>) -> Self {
        self.storage_directory = directory.into();
        self.generated_directory = false;
        self
    }

    /// How long a dial may take (`(0, TimeoutWheel::MAX_TIMEOUT]`); past it the dial fails
    /// with an error of kind `TimedOut`. Counted on the ring's timeout wheel, so it ends within
    /// one `timeout_wheel_tick` after the deadline.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one `send` or `recv` call may take, from its first poll
    /// (`(0, TimeoutWheel::MAX_TIMEOUT]`); past it the call fails with an error of kind
    /// `TimedOut`, and bytes already received stay for the next `recv`. Counted on the ring's
    /// timeout wheel, so it ends within one `timeout_wheel_tick` after the deadline.
    pub fn with_read_write_timeout(mut self, timeout: Duration) -> Self {
        self.read_write_timeout = timeout;
        self
    }

    /// Number of pool workers, the caller's thread included.
    pub fn worker_threads(&self) -> usize {
        self.worker_threads
    }

    /// Every how many polls a busy worker looks at the global queue first.
    pub fn global_queue_interval(&self) -> u32 {
        self.global_queue_interval
    }

    /// Whether task panics are caught.
    pub fn catch_panics(&self) -> bool {
        self.catch_panics
    }

    /// Whether the storage directory is the fresh temporary one this config picked, rather than
    /// one set with [`Config::with_storage_directory`].
    pub(crate) fn has_generated_storage_directory(&self) -> bool {
        self.generated_directory
    }

    /// The storage directory.
    pub fn storage_directory(&self) -> &PathBuf {
        &self.storage_directory
    }

    /// The I/O timeout wheel's tick and slot count (valid once the config is validated).
    pub(crate) fn wheel_layout(&self) -> (Duration, u64) {
        let tick = self.ring_config.timeout_wheel_tick;
        let longest = self.connect_timeout.max(self.read_write_timeout);
        let slots = TimeoutWheel::layout(tick, longest).expect("validated before use");
        (tick, slots)
    }

    /// Checks every setting and rounds the ring size up to a power of two.
    ///
    /// # Panics
    ///
    /// On the first invalid setting, with a message that names the field, the value given and
    /// what is allowed.
    pub fn validate(&mut self) {
        if let Err(error) = self.try_validate() {
            panic!("{error}");
        }
    }

    /// [`validate`](Self::validate), refusing the first invalid setting with
    /// [`Error::ConfigInvalid`](crate::Error::ConfigInvalid) (which names the field, the
    /// value given and what is allowed) instead of panicking. What
    /// [`Runner::try_start`](crate::Runner::try_start) calls.
    pub fn try_validate(&mut self) -> Result<(), crate::Error> {
        self.check().map_err(crate::Error::ConfigInvalid)
    }

    fn check(&mut self) -> Result<(), String> {
        if !(1..=MAX_WORKERS).contains(&self.worker_threads) {
            return Err(format!(
                "worker_threads is {}, allowed is 1..={MAX_WORKERS}",
                self.worker_threads
            ));
        }
        if self.global_queue_interval == 0 {
            return Err("global_queue_interval is 0, allowed is 1 or more".into());
        }
        let size = self.ring_config.size;
        let rounded = size.checked_next_power_of_two();
        match rounded {
            Some(rounded) if size != 0 && rounded <= MAX_RING_SIZE => {
                self.ring_config.size = rounded;
            }
            _ => {
                return Err(format!(
                    "ring_config.size is {size}, allowed is 1..={MAX_RING_SIZE} after rounding \
                     up to a power of two"
                ));
            }
        }
        for (field, timeout) in [
            ("connect_timeout", self.connect_timeout),
            ("read_write_timeout", self.read_write_timeout),
        ] {
            if timeout.is_zero() || timeout > TimeoutWheel::MAX_TIMEOUT {
                return Err(format!(
                    "{field} is {timeout:?}, allowed is more than 0 and at most {:?}",
                    TimeoutWheel::MAX_TIMEOUT
                ));
            }
        }
        let buffers = self.ring_config.receive_buffers;
        if buffers != 0 && (!buffers.is_power_of_two() || buffers > 32_768) {
            return Err(format!(
                "ring_config.receive_buffers is {buffers}, allowed is 0 (none) or a power of two \
                 up to 32768"
            ));
        }
        let buffer_size = self.ring_config.receive_buffer_size;
        if !(MIN_RECEIVE_BUFFER..=MAX_RECEIVE_BUFFER).contains(&buffer_size) {
            return Err(format!(
                "ring_config.receive_buffer_size is {buffer_size}, allowed is \
                 {MIN_RECEIVE_BUFFER}..={MAX_RECEIVE_BUFFER}"
            ));
        }
        let longest = self.connect_timeout.max(self.read_write_timeout);
        TimeoutWheel::layout(self.ring_config.timeout_wheel_tick, longest)
            .map_err(|why| format!("ring_config.timeout_wheel_tick: {why}"))?;
        let spinner = self.idle_spinner;
        if spinner.budget_us > spinner.max_budget_us {
            return Err(format!(
                "idle_spinner.budget_us is {}, allowed is at most idle_spinner.max_budget_us ({})",
                spinner.budget_us, spinner.max_budget_us
            ));
        }
        Ok(())
    }
}
