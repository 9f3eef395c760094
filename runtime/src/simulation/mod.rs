//! The state of a deterministic run that every layer may read: the seed and its one
//! generator ([`Rng`]), the [`Auditor`], the virtual clock, and the run's logical task ids.
//! Built and driven by `crate::deterministic` (the runner above every layer); found through a
//! thread-local by the pieces below it (the clock, the spawn path, the simulated network and
//! storage), so the native path never carries it: with the `deterministic` feature off this
//! module does not exist, and with it on a native worker's thread simply has none.
//!
//! Invariants:
//! - A simulation is installed on exactly one thread, the one that drives it, for the whole
//!   run; every task of the run is polled there, so every draw, record and clock read of the
//!   run happens in one order that depends only on the seed.
//! - Virtual time never goes back: it moves forward only when the runner advances it (a cycle
//!   per scheduling round, or a jump to the next deadline when every task waits).
//! - The state that outlives a simulated crash (generator, auditor, virtual time, next task
//!   id, the [`Disk`] as the crash left it) is carried as a whole by [`Carried`]; nothing
//!   else of a run survives it.
//! - After [`Simulation::crash`] the disk is frozen: nothing a task still dropping does can
//!   change what the next incarnation starts from.

mod auditor;
pub(crate) mod disk;
pub(crate) mod network;

pub use crate::random::Rng;
pub use auditor::Auditor;
pub(crate) use disk::Disk;

use crate::sync::Mutex;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

thread_local! {
    static CURRENT: RefCell<Option<Arc<Simulation>>> = const { RefCell::new(None) };
}

/// The wall-clock time a simulation starts at: 2023-11-14T22:13:20Z, a fixed point so that
/// `Clock::current` reads the same in every run of a seed.
const START: Duration = Duration::from_secs(1_700_000_000);

/// What a deterministic run keeps across a simulated crash.
#[derive(Clone, Debug)]
pub(crate) struct Carried {
    pub(crate) rng: Rng,
    pub(crate) auditor: Auditor,
    pub(crate) elapsed: Duration,
    pub(crate) next_task: u64,
    pub(crate) disk: Disk,
}

impl Carried {
    /// The state a run of `seed` starts from.
    pub(crate) fn fresh(seed: u64) -> Self {
        Self {
            rng: Rng::seeded(seed),
            auditor: Auditor::default(),
            elapsed: Duration::ZERO,
            next_task: 1,
            disk: Disk::new(),
        }
    }
}

/// One deterministic run's shared state.
pub(crate) struct Simulation {
    seed: u64,
    /// The real instant virtual time is counted from: a virtual `Instant` is `base` plus the
    /// virtual time elapsed. Only differences of instants are ever used, so the real value of
    /// `base` never shows.
    base: Instant,
    state: Mutex<Carried>,
    /// The simulated network: not carried across a crash (its connections die with it).
    network: network::Network,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Simulation {
    /// A run of `seed` starting from `carried`.
    pub(crate) fn new(seed: u64, carried: Carried) -> Arc<Self> {
        Arc::new(Self {
            seed,
            base: Instant::now(),
            state: Mutex::new(carried),
            network: network::Network::default(),
        })
    }

    /// The seed of the run.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// The virtual monotonic time.
    pub(crate) fn now(&self) -> Instant {
        self.base + self.state.lock().elapsed
    }

    /// The virtual wall-clock time.
    pub(crate) fn system_now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + START + self.state.lock().elapsed
    }

    /// Virtual time elapsed since the run (its first incarnation, across crashes) began.
    pub(crate) fn elapsed(&self) -> Duration {
        self.state.lock().elapsed
    }

    /// Moves virtual time forward by `by`.
    pub(crate) fn advance(&self, by: Duration) {
        self.state.lock().elapsed += by;
    }

    /// Moves virtual time forward to `instant`, if it lies ahead.
    pub(crate) fn advance_to(&self, instant: Instant) {
        let target = instant.saturating_duration_since(self.base);
        let mut state = self.state.lock();
        if target > state.elapsed {
            state.elapsed = target;
        }
    }

    /// Records an event in the auditor (see [`Auditor::record`]).
    pub(crate) fn record(&self, kind: &str, fields: &[&[u8]]) {
        self.state.lock().auditor.record(kind, fields);
    }

    /// The auditor's digest so far.
    pub(crate) fn digest(&self) -> u64 {
        self.state.lock().auditor.digest()
    }

    /// Runs `f` with the generator; the draw is recorded in the auditor under `kind`.
    pub(crate) fn draw<R>(&self, kind: &str, f: impl FnOnce(&mut Rng) -> R) -> R {
        let mut state = self.state.lock();
        state.auditor.record("draw", &[kind.as_bytes()]);
        f(&mut state.rng)
    }

    /// The run's simulated network.
    pub(crate) fn network(&self) -> &network::Network {
        &self.network
    }

    /// A new logical task id: the run's tasks are numbered in spawn order.
    pub(crate) fn next_task(&self) -> u64 {
        let mut state = self.state.lock();
        let id = state.next_task;
        state.next_task += 1;
        id
    }

    /// The crash of a [`start_and_recover`](crate::deterministic::Runner::start_and_recover)
    /// run, the moment its root returned: recorded, and from then on nothing of the run is
    /// durable that was not already.
    pub(crate) fn crash(&self) {
        let mut state = self.state.lock();
        let Carried {
            rng, auditor, disk, ..
        } = &mut *state;
        let survived = disk.crash(rng);
        auditor.record("crash", &[&survived.to_le_bytes()]);
    }

    /// Runs `f` with the run's disk.
    pub(crate) fn with_disk<R>(&self, f: impl FnOnce(&mut Disk) -> R) -> R {
        f(&mut self.state.lock().disk)
    }

    /// What a crash carries into the next incarnation of the run: its disk thawed.
    pub(crate) fn carried(&self) -> Carried {
        let mut carried = self.state.lock().clone();
        carried.disk.thaw();
        carried
    }

    /// Installs `simulation` as this thread's until the guard is dropped.
    pub(crate) fn enter(simulation: Arc<Simulation>) -> Entered {
        CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            assert!(
                current.is_none(),
                "a deterministic run already runs on this thread"
            );
            *current = Some(simulation);
        });
        Entered(())
    }
}

/// Keeps a simulation installed on this thread; removes it when dropped.
pub(crate) struct Entered(());

impl Drop for Entered {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|current| current.borrow_mut().take());
    }
}

/// Runs `f` with the simulation this thread drives, if any.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(&Arc<Simulation>) -> R) -> Option<R> {
    CURRENT
        .try_with(|current| current.borrow().as_ref().map(f))
        .ok()
        .flatten()
}
