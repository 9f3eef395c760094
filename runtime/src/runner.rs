//! `Runner::start`: validate, lock storage, start the workers, run the root on the caller's
//! thread, shut down.
//!
//! Startup, in order: validate the config (nothing exists yet); create and lock the storage
//! directory; build [`RunnerState`]; start worker zero's ring on this thread; launch the pool
//! workers one at a time, each reporting its startup before the next; spawn the service task;
//! call the root builder.
//!
//! Shutdown, in order: drop the root (a `Drop` may still spawn); stop observing task panics;
//! close the pool; close the dedicated registry; abort the supervision tree (every handle
//! closes and every running metric finishes before any future is dropped); close and drain the
//! task set on this thread; join the pool workers; wait for the registry; close worker zero
//! (ring drained, timers closed, callbacks run) with its `Local` still installed; remove it;
//! release `RunnerState`; release the storage lock.
//!
//! The result is the root's panic if it panicked, else the first worker failure, else the
//! root's output.

use crate::Error;
use crate::config::Config;
use crate::context::Context;
use crate::driver::Driver;
use crate::metrics::RuntimeMetrics;
use crate::panic::{Panicker, Panics, Payload};
use crate::pool::Pool;
use crate::stop::Stopper;
use crate::task::Tasks;
use crate::traits::{Clock, Spawner};
use crate::worker::dedicated::registry::ThreadRegistry;
use crate::worker::{Local, RootWake, RunnerState, Seat, Worker};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The open `.hold` file whose exclusive lock marks the storage directory as a runner's. Held
/// by `start` itself, not by the shared state, so that contexts or handles that outlive the
/// runner never keep the directory locked.
///
/// Released when dropped, and then what this runner created is cleaned up:
/// - the fresh temporary directory of a default config (no directory chosen) is removed with
///   everything in it, whichever runner made it (a clone of the config names the same
///   directory: each runner on it starts from what the last one left, which is nothing);
/// - a chosen directory this runner created and left with nothing but the lock file in it is
///   removed, so runs that store nothing leave nothing behind; one with data stays.
///
/// The cleanup runs while the lock is still held, and the lock file goes last: a runner that
/// takes the directory over meanwhile either waits on this lock (and is told the directory
/// is in use) or locks a `.hold` that was unlinked under it, which [`lock_storage`] notices
/// (the path no longer names the file it locked) and starts over from. So a finishing runner
/// never removes what a runner that took over has stored.
struct StorageLock {
    file: Option<File>,
    directory: PathBuf,
    created: bool,
    generated: bool,
}

impl Drop for StorageLock {
    fn drop(&mut self) {
        if self.created || self.generated {
            if self.generated {
                remove_all_but_the_lock(&self.directory);
            }
            let only_the_lock = std::fs::read_dir(&self.directory).is_ok_and(|mut entries| {
                entries.all(|entry| entry.is_ok_and(|entry| entry.file_name() == ".hold"))
            });
            if only_the_lock {
                let _ = std::fs::remove_file(self.directory.join(".hold"));
                let _ = std::fs::remove_dir(&self.directory);
            }
        }
        drop(self.file.take());
    }
}

/// Removes every entry of `directory` but its `.hold`, while the lock on it is held.
fn remove_all_but_the_lock(directory: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name() == ".hold" {
            continue;
        }
        let path = entry.path();
        let _ = match entry.file_type() {
            Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
    }
}

/// Starts a runtime and runs a root future on the calling thread.
#[derive(Debug)]
pub struct Runner {
    config: Config,
}

impl Runner {
    /// A runner with `config`; nothing is checked or created until [`start`](Self::start).
    pub fn new(config: Config) -> Self {
        Self { config }
    }

    /// Runs the root future built by `f` on this thread (worker zero) and returns its output.
    ///
    /// The root need be neither `Send` nor `'static`. When `start` returns, every task has been
    /// cancelled and dropped, every worker joined and the storage directory released.
    ///
    /// # Panics
    ///
    /// If the config is invalid (before anything is created or `f` is called), if the storage
    /// directory is in use by another runner, if io_uring cannot be set up (with the cause and
    /// the fix), and with the first failure of the root, a task (unless panics are caught) or
    /// a worker.
    pub fn start<F, Fut>(self, f: F) -> Fut::Output
    where
        F: FnOnce(Context) -> Fut,
        Fut: Future,
    {
        match self.try_start(f) {
            Ok(output) => output,
            // Printed once here by the panic hook, where the failure is reported.
            Err(error) => panic!("{error}"),
        }
    }

    /// [`start`](Self::start), refusing what stops the runner from starting with an error
    /// instead of a panic: an invalid config ([`Error::ConfigInvalid`], before anything is
    /// created), a thread that already runs a runtime worker, a storage directory that cannot
    /// be created or is in use, or io_uring that cannot be set up ([`Error::StartFailed`],
    /// with the cause and the fix). In every
    /// such case `f` is dropped without being called and nothing is left behind. Once the
    /// root runs, its output is `Ok`; a failure of the root, a task (unless panics are
    /// caught) or a worker still unwinds out of this call, as from `start`.
    pub fn try_start<F, Fut>(self, f: F) -> Result<Fut::Output, Error>
    where
        F: FnOnce(Context) -> Fut,
        Fut: Future,
    {
        let mut config = self.config;
        config.try_validate()?;
        let storage_lock = lock_storage(&config).map_err(Error::StartFailed)?;
        // Checked before any worker or ring exists (the lock, dropped on the way out, removes
        // a directory it made), and after the lock, so that a nested runner on its parent's
        // directory is told the directory is in use.
        if crate::worker::local::Local::with_current(|_| ()).is_some() {
            return Err(Error::StartFailed(
                "this thread already runs a runtime worker (a runner's root or a task): start \
                 the runner from a thread of its own (`std::thread::spawn`)"
                    .into(),
            ));
        }
        let started = start_workers(config).map_err(Error::StartFailed)?;
        let output = run(started, f);
        // Every worker has been joined and every ring drained: the directory is free again,
        // whatever contexts or handles the caller kept. (An unwind out of `run` drops the lock
        // on its way too.)
        drop(storage_lock);
        Ok(output)
    }
}

/// How many times [`lock_storage`] starts over when the lock file it locked was unlinked under
/// it (a finishing runner cleaning up); each round is a finishing runner's cleanup, which ends.
const LOCK_ATTEMPTS: usize = 16;

fn lock_storage(config: &Config) -> Result<StorageLock, String> {
    let directory = config.storage_directory();
    let existed = directory.exists();
    for _ in 0..LOCK_ATTEMPTS {
        match try_lock_storage(config, directory) {
            Ok(Some(mut lock)) => {
                lock.created = !existed;
                return Ok(lock);
            }
            Ok(None) => continue,
            Err(message) => {
                if !existed {
                    // Nothing of ours is in it: leave nothing behind (a runner that raced
                    // us to it keeps its directory, which is not empty then).
                    let _ = std::fs::remove_dir(directory);
                }
                return Err(message);
            }
        }
    }
    Err(format!(
        "the storage directory {} kept being removed while this runner took it; give each \
         runner its own directory",
        directory.display()
    ))
}

/// One attempt: the lock, or `None` when the lock file was unlinked under this attempt (a
/// finishing runner removed it after this one opened it) and the caller should start over.
fn try_lock_storage(config: &Config, directory: &PathBuf) -> Result<Option<StorageLock>, String> {
    match std::fs::create_dir_all(directory) {
        Ok(()) => {}
        // Made and removed meanwhile by a finishing runner's cleanup: start over.
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotFound
            ) && !directory.is_file() =>
        {
            return Ok(None);
        }
        Err(error) => {
            return Err(format!(
                "cannot create the storage directory {}: {error}",
                directory.display()
            ));
        }
    }
    let hold = directory.join(".hold");
    let file = match OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&hold)
    {
        Ok(file) => file,
        // The directory went between `create_dir_all` and `open` (a finishing runner's
        // cleanup): start over.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot open {}: {error}", hold.display())),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(format!(
                "the storage directory {} is in use by another runner; give each runner its \
                 own directory",
                directory.display()
            ));
        }
        Err(std::fs::TryLockError::Error(error)) => {
            return Err(format!("cannot lock {}: {error}", hold.display()));
        }
    }
    // The lock is ours only if the path still names the file locked: a finishing runner
    // unlinks its `.hold` under its lock, and a file opened before that is locked afterwards
    // by nobody else's rules.
    use std::os::unix::fs::MetadataExt as _;
    let locked = file
        .metadata()
        .map_err(|error| format!("cannot inspect {}: {error}", hold.display()))?;
    match std::fs::metadata(&hold) {
        Ok(named) if (named.dev(), named.ino()) == (locked.dev(), locked.ino()) => {
            Ok(Some(StorageLock {
                file: Some(file),
                directory: directory.clone(),
                created: false,
                generated: config.has_generated_storage_directory(),
            }))
        }
        _ => Ok(None),
    }
}

pub(crate) struct Started {
    shared: Arc<RunnerState>,
    local: std::rc::Rc<Local>,
    pool_workers: PoolWorkers,
}

/// The pool worker threads; closing the pool and joining them happens even if worker zero
/// unwinds.
struct PoolWorkers {
    pool: Arc<Pool>,
    threads: Vec<JoinHandle<()>>,
}

impl PoolWorkers {
    fn stop_and_join(&mut self) {
        self.pool.close();
        for thread in self.threads.drain(..) {
            // A pool worker reports its own failures to the panicker; a join error here would
            // be a failure in reporting, already printed.
            let _ = thread.join();
        }
    }
}

impl Drop for PoolWorkers {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// What every worker and context of a new runner over `pool` shares.
fn runner_state(
    config: Config,
    pool: &Arc<Pool>,
    #[cfg(feature = "deterministic")] simulation: Option<Arc<crate::simulation::Simulation>>,
) -> Arc<RunnerState> {
    Arc::new(RunnerState {
        pool: pool.clone(),
        workers: Arc::new(ThreadRegistry::default()),
        tasks: Tasks::default(),
        panicker: Panicker::default(),
        metrics: RuntimeMetrics::new(),
        stopper: Stopper::default(),
        extensions: Default::default(),
        #[cfg(feature = "deterministic")]
        simulation,
        config,
    })
}

fn start_workers(config: Config) -> Result<Started, String> {
    let pool = Arc::new(
        Pool::new(config.worker_threads, config.global_queue_interval)
            .map_err(|error| format!("failed to create native io_uring worker: {error}"))?,
    );
    let shared = runner_state(
        config,
        &pool,
        #[cfg(feature = "deterministic")]
        None,
    );
    let driver = create_driver(&shared, 0)
        .map_err(|error| format!("failed to create native io_uring worker: {error}"))?;
    let local = Local::new(
        Some(Seat {
            pool: pool.clone(),
            index: 0,
        }),
        driver,
    );
    let mut pool_workers = PoolWorkers {
        pool: pool.clone(),
        threads: Vec::new(),
    };
    for index in 1..shared.config.worker_threads {
        let (report, reported) = mpsc::channel();
        let worker_shared = shared.clone();
        #[cfg(test)]
        before_pool_launch(&shared, index)
            .map_err(|error| format!("failed to spawn thread: {error}"))?;
        let thread = std::thread::Builder::new()
            .name(format!("iouring-pool-{index}"))
            .spawn(move || pool_worker(worker_shared, index, report))
            .map_err(|error| format!("failed to spawn thread: {error}"))?;
        pool_workers.threads.push(thread);
        match reported.recv() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                return Err(format!("failed to create native io_uring worker: {error}"));
            }
            Err(_) => return Err(format!("pool worker {index} exited during startup")),
        }
    }
    Local::install(local.clone());
    Ok(Started {
        shared,
        local,
        pool_workers,
    })
}

/// Test hook on the pool startup of the runners this thread starts, armed through
/// [`POOL_LAUNCH`]: the launches record the runner's shared services and pool, and launching
/// pool worker `fail_at` fails as a thread that cannot be created does.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct PoolLaunch {
    /// The pool worker whose thread launch fails, once.
    pub(crate) fail_at: Option<usize>,
    /// The shared services of the runner that launched pool workers, not kept alive.
    pub(crate) shared: std::sync::Weak<RunnerState>,
    /// The pool of the runner that launched pool workers, kept past the runner.
    pub(crate) pool: Option<Arc<Pool>>,
}

#[cfg(test)]
thread_local! {
    /// Armed by a test on the thread that calls `start` (startup runs there).
    pub(crate) static POOL_LAUNCH: std::cell::RefCell<Option<PoolLaunch>> =
        const { std::cell::RefCell::new(None) };
}

/// The error text of an injected pool thread launch failure.
#[cfg(test)]
pub(crate) const POOL_LAUNCH_FAILURE: &str = "injected pool thread launch failure";

/// Called on the runner's thread before pool worker `index`'s thread is launched: records the
/// runner if [`POOL_LAUNCH`] is armed, and fails the launch it names.
#[cfg(test)]
fn before_pool_launch(shared: &Arc<RunnerState>, index: usize) -> std::io::Result<()> {
    POOL_LAUNCH.with(|slot| {
        let mut slot = slot.borrow_mut();
        let Some(launch) = slot.as_mut() else {
            return Ok(());
        };
        launch.shared = Arc::downgrade(shared);
        launch.pool = Some(shared.pool.clone());
        if launch.fail_at == Some(index) {
            launch.fail_at = None;
            return Err(std::io::Error::other(POOL_LAUNCH_FAILURE));
        }
        Ok(())
    })
}

fn create_driver(shared: &RunnerState, index: usize) -> std::io::Result<Driver> {
    #[cfg(test)]
    crate::hooks::before_startup(shared, Some(index))?;
    Driver::new(
        &shared.config.ring_config,
        shared.pool.mailbox(index).waker.eventfd().as_raw_fd(),
        shared.metrics.ring(),
        shared.config.wheel_layout(),
    )
}

fn pool_worker(shared: Arc<RunnerState>, index: usize, report: mpsc::Sender<std::io::Result<()>>) {
    let driver = match create_driver(&shared, index) {
        Ok(driver) => driver,
        Err(error) => {
            let _ = report.send(Err(error));
            return;
        }
    };
    let local = Local::new(
        Some(Seat {
            pool: shared.pool.clone(),
            index,
        }),
        driver,
    );
    Local::install(local.clone());
    let _ = report.send(Ok(()));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Worker::new(local.clone(), shared.clone(), index).run();
    }));
    // `run` left the idle set and returned its count, unwinding included.
    if let Err(payload) = outcome {
        shared.panicker.worker_failed(payload);
        // Keep the pool's queue drained even after a failure.
        // SAFETY: this thread is worker `index`, the queue's only producer.
        while let Some(runnable) = unsafe { shared.pool.queue(index).pop() } {
            drop(runnable);
        }
    }
    if let Some(payload) = crate::worker::close(&local) {
        shared.panicker.worker_failed(payload);
    }
    shared.pool.mailbox(index).close();
    drop(Local::uninstall());
}

/// A deterministic run's runner, started: worker zero alone on this thread, without a ring,
/// its state naming the run (see `crate::deterministic`).
#[cfg(feature = "deterministic")]
pub(crate) fn start_simulated(
    config: Config,
    simulation: Arc<crate::simulation::Simulation>,
) -> Result<Started, String> {
    let pool = Arc::new(
        Pool::new(1, config.global_queue_interval)
            .map_err(|error| format!("failed to create the simulated worker: {error}"))?,
    );
    let shared = runner_state(config, &pool, Some(simulation));
    let local = Local::without_ring(Seat {
        pool: pool.clone(),
        index: 0,
    });
    Local::install(local.clone());
    Ok(Started {
        shared,
        local,
        pool_workers: PoolWorkers {
            pool,
            threads: Vec::new(),
        },
    })
}

fn run<F, Fut>(started: Started, f: F) -> Fut::Output
where
    F: FnOnce(Context) -> Fut,
    Fut: Future,
{
    run_with(started, f, true, |worker, root, wake| {
        worker.block_on(root, wake)
    })
}

/// Runs the root built by `f` on worker zero, driven by `drive`, then shuts the runner down in
/// the order of the module's documentation. `service` starts the runner's service task (a
/// deterministic run has none: its periodic sleep would hide a stall). `drive` is how worker
/// zero runs the root until it completes: generic, so the native runner's is compiled in
/// place, as it was before there was another.
pub(crate) fn run_with<F, Fut, D>(started: Started, f: F, service: bool, drive: D) -> Fut::Output
where
    F: FnOnce(Context) -> Fut,
    Fut: Future,
    D: FnOnce(&mut Worker, Pin<&mut Fut>, &Arc<RootWake>) -> Fut::Output,
{
    let Started {
        shared,
        local,
        mut pool_workers,
    } = started;
    let context = Context::root(shared.clone());
    let root_tree = context.tree.clone();
    if service {
        spawn_service(&context);
    }
    let mut worker = Worker::new(local.clone(), shared.clone(), 0);

    let (output, mut root_failure) = run_root(&mut worker, &shared, context, f, drive);
    // Shutdown, phase by phase, in the order of the module's documentation.
    stop_observing_task_panics(&shared);
    let teardown = close_pool_and_registry(&shared);
    root_tree.abort();
    drain_task_set(&shared, &mut worker);
    pool_workers.stop_and_join();
    shared.workers.wait();
    if let Err(payload) = teardown
        && root_failure.is_none()
    {
        root_failure = Some(payload);
    }
    close_worker_zero(&shared, worker, local);
    let worker_failure = shared.panicker.take();
    // The root node carries the root label path, which holds the runner's state: release both
    // here, before `start` releases the storage lock and returns or unwinds.
    drop(root_tree);
    drop(shared);
    outcome(output, root_failure, worker_failure)
}

/// Builds the root and runs it on worker zero, then drops it while the runtime is still open
/// (its `Drop` may spawn). A panic of the builder, the root's poll, its `Drop` or an
/// interrupt is the returned failure (the first of them).
fn run_root<F, Fut, D>(
    worker: &mut Worker,
    shared: &RunnerState,
    context: Context,
    f: F,
    drive: D,
) -> (Option<Fut::Output>, Option<Payload>)
where
    F: FnOnce(Context) -> Fut,
    Fut: Future,
    D: FnOnce(&mut Worker, Pin<&mut Fut>, &Arc<RootWake>) -> Fut::Output,
{
    let root = match catch_unwind(AssertUnwindSafe(|| f(context))) {
        Err(payload) => return (None, Some(payload)),
        Ok(root) => root,
    };
    let wake = RootWake::new(&shared.pool);
    let mut root = Some(Box::pin(root));
    let (mut output, mut failure) = (None, None);
    let polled = catch_unwind(AssertUnwindSafe(|| {
        drive(worker, root.as_mut().expect("present").as_mut(), &wake)
    }));
    match polled {
        Ok(value) => output = Some(value),
        Err(payload) => failure = Some(payload),
    }
    // Task panics are no longer observed from here on.
    shared.panicker.close_tasks();
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(root))) {
        if failure.is_none() {
            failure = Some(payload);
        } else {
            crate::panic::dispose(payload);
        }
    }
    (output, failure)
}

/// Shutdown's first phase: task panics and root wakes are no longer observed.
fn stop_observing_task_panics(shared: &RunnerState) {
    shared.panicker.close_tasks();
    shared.panicker.set_root_waker(None);
}

/// Closes the pool (no more runnables are queued) and then the registry of dedicated and
/// blocking threads. The registry closes before the tree is aborted: a dedicated task
/// cancelled by the abort starts destroying its future on its own thread at once, and must
/// already see the registry closed (nothing new may start while shutdown waits for it).
/// Returns the failure of the test hook that runs between the two, if any.
fn close_pool_and_registry(shared: &RunnerState) -> Result<(), Payload> {
    shared.pool.close();
    #[cfg(test)]
    let teardown = catch_unwind(crate::hooks::before_abort);
    #[cfg(not(test))]
    let teardown: Result<(), Payload> = Ok(());
    shared.workers.close();
    teardown
}

/// Closes the task set and drops every task left in it on this thread, each clear and each
/// drop's panic contained; then worker zero's own queue.
fn drain_task_set(shared: &RunnerState, worker: &mut Worker) {
    shared.tasks.close();
    for task in shared.tasks.drain() {
        Panics::contain(|| task.clear());
        Panics::contain(move || drop(task));
    }
    worker.discard_queue();
}

/// Closes worker zero with its `Local` still installed (ring drained, timers closed,
/// callbacks run; a failure is reported as a worker failure), then removes it.
fn close_worker_zero(shared: &RunnerState, worker: Worker, local: std::rc::Rc<Local>) {
    if let Some(payload) = crate::worker::close(&local) {
        shared.panicker.worker_failed(payload);
    }
    shared.pool.mailbox(0).close();
    drop(worker);
    drop(Local::uninstall());
    drop(local);
}

/// The run's result: the root's panic if it panicked, else the first worker failure (the
/// root's output then dropped, a destructor panic contained), else the root's output.
fn outcome<T>(
    output: Option<T>,
    root_failure: Option<Payload>,
    worker_failure: Option<Payload>,
) -> T {
    if let Some(payload) = root_failure {
        if let Some(secondary) = worker_failure {
            crate::panic::dispose(secondary);
        }
        resume_unwind(payload);
    }
    if let Some(payload) = worker_failure {
        Panics::contain(move || drop(output));
        resume_unwind(payload);
    }
    output.expect("the root finished without failure")
}

/// How often the service task refreshes the runtime's gauges.
const SERVICE_PERIOD: Duration = Duration::from_secs(10);

/// Spawns the runner's service task: it keeps `runtime_tasks_live` current.
fn spawn_service(context: &Context) {
    drop(context.child("runtime").spawn(|context| async move {
        loop {
            let shared = context.runtime();
            shared.metrics.tasks_live.set(shared.tasks.live() as i64);
            context.sleep(SERVICE_PERIOD).await;
        }
    }));
}
