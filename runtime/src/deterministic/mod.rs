//! Deterministic simulation: the same [`Context`], the same spawn, supervision, timers and
//! metrics, on one thread whose every choice is drawn from a seed.
//!
//! A run of [`Runner::seeded`]`(n)` polls one task at a time on the calling thread. Each
//! scheduling round takes every ready task (dedicated and blocking ones included: they are
//! polled on the same thread), shuffles them with the seed's generator and polls each once;
//! time is virtual, advancing one [`cycle`](Runner::with_cycle) per round and jumping to the
//! next deadline when every task waits. No io_uring is set up: the network and the storage a
//! context reaches are simulated (in memory, with the faults the seed draws). Everything that
//! could differ between two runs of a seed (every poll, timer firing, network and storage event,
//! and draw of the generator) is hashed by an auditor: [`digest`] at any point of a run, or
//! [`Checkpoint::digest`] after it, is equal for two runs of one seed on one build.
//!
//! When to use it: for a test whose outcome depends on an interleaving, a timeout, a crash or
//! a fault, and that should be replayed exactly when it fails. A failing run prints its seed
//! and the line that replays it (`RUNTIME_SEED=n`); `#[runtime::test(deterministic, seeds =
//! 0..1000)]` runs a test over a range of seeds.
//!
//! What is not simulated: threads the program starts itself (`std::thread::spawn`), blocking
//! calls (a blocking lock held across another task's poll deadlocks the run, which then fails
//! as stalled), signals, and clocks read around the runtime (`Instant::now` instead of
//! [`crate::clock::now`]).
//!
//! Invariants:
//! - A run is one thread: the runner installs itself on the calling thread and every task of
//!   the run is polled there; a second run on that thread, or a native runner inside a run, is
//!   refused.
//! - A run ends (output, panic, stall or timeout) with every task dropped and the thread free
//!   again; a failure unwinds out of [`Runner::start`] after printing the seed.
//! - A crash ([`Runner::start_and_recover`]) is taken the moment the root returns: no task
//!   polls, writes or syncs after it; what a [`Checkpoint`] carries (generator, auditor,
//!   virtual time, the storage that survived) is all that the next run starts from.

mod network;
mod seeds;

pub use network::{Link, NetworkControl, NetworkFaults, OnHost, network, on_host};
pub use seeds::{run_seeds, seeds_from_env};

use crate::Context;
use crate::config::Config;
use crate::simulation::{Carried, Simulation};
use crate::worker::simulated::Pace;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::Duration;

/// The default virtual time a scheduling round takes.
pub const DEFAULT_CYCLE: Duration = Duration::from_micros(100);

/// The default limit of a run's virtual time.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// Starts a deterministic run (see the module).
#[derive(Debug)]
pub struct Runner {
    seed: u64,
    cycle: Duration,
    timeout: Duration,
    config: Config,
    carried: Option<Carried>,
    network: NetworkFaults,
}

impl Runner {
    /// A run of `seed`: the one value every choice of the run is drawn from.
    pub fn seeded(seed: u64) -> Self {
        Self {
            seed,
            cycle: DEFAULT_CYCLE,
            timeout: DEFAULT_TIMEOUT,
            config: Config::default().with_worker_threads(1),
            carried: None,
            network: NetworkFaults::default(),
        }
    }

    /// The run that recovers from `checkpoint`: the same seed and generator, virtual time and
    /// auditor going on from where the crash left them, and the storage that survived it.
    pub fn recover(checkpoint: Checkpoint) -> Self {
        Self {
            seed: checkpoint.seed,
            cycle: checkpoint.cycle,
            timeout: checkpoint.timeout,
            config: checkpoint.config,
            carried: Some(checkpoint.carried),
            network: checkpoint.network,
        }
    }

    /// The virtual time each scheduling round takes ([`DEFAULT_CYCLE`] unless set): a task
    /// that yields in a loop sees this much time pass per turn. Must not be zero.
    pub fn with_cycle(mut self, cycle: Duration) -> Self {
        self.cycle = cycle;
        self
    }

    /// The virtual time after which the run fails with a timeout ([`DEFAULT_TIMEOUT`] unless
    /// set; counted from the start of the first run, across crashes).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether a task's panic is only its handle's (`true`) or fails the run (`false`, the
    /// default), as [`Config::with_catch_panics`].
    pub fn with_catch_panics(mut self, catch_panics: bool) -> Self {
        self.config = self.config.with_catch_panics(catch_panics);
        self
    }

    /// The faults and the default link of the run's simulated network (fault-free with a
    /// 1 ms link unless set; see [`NetworkFaults`]).
    pub fn with_network(mut self, faults: NetworkFaults) -> Self {
        self.network = faults;
        self
    }

    /// The connect timeout of the run's dials, as [`Config::with_connect_timeout`] (virtual
    /// time).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.config = self.config.with_connect_timeout(timeout);
        self
    }

    /// The read/write timeout of the run's sends and receives, as
    /// [`Config::with_read_write_timeout`] (virtual time).
    pub fn with_read_write_timeout(mut self, timeout: Duration) -> Self {
        self.config = self.config.with_read_write_timeout(timeout);
        self
    }

    /// The seed of the run.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Runs the root future built by `f` and returns its output.
    ///
    /// # Panics
    ///
    /// With the first failure of the run (the root's panic, a task's unless panics are caught,
    /// a stall, a timeout), after printing the seed and how to replay it; if this thread
    /// already runs a runtime.
    pub fn start<F, Fut>(self, f: F) -> Fut::Output
    where
        F: FnOnce(Context) -> Fut,
        Fut: Future,
    {
        self.run(f, false).0
    }

    /// Runs the root future built by `f`, then crashes: the moment the root returns, every
    /// task stops where it is and the storage keeps what a crash keeps (see the storage's
    /// fault model). Returns the root's output and the [`Checkpoint`] a [`Runner::recover`]
    /// starts over from. Panics as [`start`](Self::start).
    pub fn start_and_recover<F, Fut>(self, f: F) -> (Fut::Output, Checkpoint)
    where
        F: FnOnce(Context) -> Fut,
        Fut: Future,
    {
        let (output, checkpoint) = self.run(f, true);
        (
            output,
            checkpoint.expect("a crashing run leaves a checkpoint"),
        )
    }

    fn run<F, Fut>(self, f: F, crash: bool) -> (Fut::Output, Option<Checkpoint>)
    where
        F: FnOnce(Context) -> Fut,
        Fut: Future,
    {
        assert!(
            !self.cycle.is_zero(),
            "a deterministic run's cycle must not be zero: virtual time would never pass \
             while tasks are ready"
        );
        let seed = self.seed;
        let carried = self.carried.unwrap_or_else(|| Carried::fresh(seed));
        let simulation = Simulation::new(seed, carried);
        simulation.network().configure(self.network);
        let pace = Pace {
            cycle: self.cycle,
            limit: self.timeout,
        };
        let config = self.config.clone();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let entered = Simulation::enter(simulation.clone());
            let started = crate::runner::start_simulated(config, simulation.clone())
                .unwrap_or_else(|error| panic!("{error}"));
            let output = crate::runner::run_with(started, f, false, |worker, root, wake| {
                let output = worker.block_on_simulated::<crate::context::LabelPath, _>(
                    root,
                    wake,
                    &simulation,
                    pace,
                );
                if crash {
                    simulation.crash();
                }
                output
            });
            drop(entered);
            output
        }));
        match outcome {
            Ok(output) => {
                let checkpoint = crash.then(|| Checkpoint {
                    seed,
                    cycle: self.cycle,
                    timeout: self.timeout,
                    config: self.config,
                    carried: simulation.carried(),
                    network: self.network,
                });
                (output, checkpoint)
            }
            Err(payload) => {
                eprintln!(
                    "deterministic run failed with seed {seed} after {:?} of virtual time; \
                     replay it with RUNTIME_SEED={seed}",
                    simulation.elapsed()
                );
                resume_unwind(payload)
            }
        }
    }
}

/// What a crashed run leaves for [`Runner::recover`]: its seed and settings, the generator,
/// the auditor and virtual time where the crash left them, and the storage that survived.
#[derive(Debug)]
pub struct Checkpoint {
    seed: u64,
    cycle: Duration,
    timeout: Duration,
    config: Config,
    carried: Carried,
    network: NetworkFaults,
}

impl Checkpoint {
    /// The auditor's digest at the crash: equal for two runs of one seed.
    pub fn digest(&self) -> u64 {
        self.carried.auditor.digest()
    }

    /// The seed of the run.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// How many events the auditor recorded up to the crash, since the first run began.
    pub fn events(&self) -> u64 {
        self.carried.auditor.events()
    }

    /// The virtual time elapsed at the crash, since the first run began.
    pub fn elapsed(&self) -> Duration {
        self.carried.elapsed
    }
}

/// The seed of the deterministic run on this thread, if one runs here.
pub fn seed() -> Option<u64> {
    crate::simulation::with_current(|simulation| simulation.seed())
}

/// The auditor's digest of the deterministic run on this thread so far, if one runs here.
pub fn digest() -> Option<u64> {
    crate::simulation::with_current(|simulation| simulation.digest())
}

/// The virtual time elapsed in the deterministic run on this thread, if one runs here.
pub fn elapsed() -> Option<Duration> {
    crate::simulation::with_current(|simulation| simulation.elapsed())
}
