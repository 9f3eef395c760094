//! Running one test over many seeds, and the environment's say in which.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The seeds a test runs when the environment names some: `RUNTIME_SEED=n` replays seed `n`
/// alone, `RUNTIME_SEEDS=a..b` runs the range instead of the test's own. `None` when neither
/// is set.
///
/// # Panics
///
/// If either is set to something else, saying what is allowed.
pub fn seeds_from_env() -> Option<Range<u64>> {
    if let Ok(value) = std::env::var("RUNTIME_SEED") {
        let seed: u64 = value.trim().parse().unwrap_or_else(|_| {
            panic!("RUNTIME_SEED={value:?} is not a seed: give a number, as RUNTIME_SEED=7")
        });
        return Some(seed..seed.saturating_add(1));
    }
    let value = std::env::var("RUNTIME_SEEDS").ok()?;
    let parsed = value.trim().split_once("..").and_then(|(start, end)| {
        Some(start.trim().parse::<u64>().ok()?..end.trim().parse::<u64>().ok()?)
    });
    match parsed {
        Some(range) => Some(range),
        None => panic!(
            "RUNTIME_SEEDS={value:?} is not a range of seeds: give one as RUNTIME_SEEDS=0..1000"
        ),
    }
}

/// Runs `test` once for every seed of `seeds` (or of the environment's, see
/// [`seeds_from_env`]), on as many threads as the machine has cores, each seed a run of its own.
/// Returns once every seed has passed.
///
/// # Panics
///
/// With the failure of the smallest failing seed the threads reached (each stops taking new
/// seeds once one has failed), after printing that seed and how to replay it.
pub fn run_seeds(seeds: Range<u64>, test: impl Fn(u64) + Sync) {
    let seeds = seeds_from_env().unwrap_or(seeds);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(usize::try_from(seeds.end.saturating_sub(seeds.start)).unwrap_or(usize::MAX))
        .max(1);
    let next = AtomicU64::new(seeds.start);
    let failed = AtomicBool::new(false);
    let first_failure: Mutex<Option<(u64, Box<dyn std::any::Any + Send>)>> = Mutex::new(None);
    let work = || {
        loop {
            if failed.load(Ordering::Acquire) {
                return;
            }
            let seed = next.fetch_add(1, Ordering::AcqRel);
            if seed >= seeds.end {
                return;
            }
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| test(seed))) {
                failed.store(true, Ordering::Release);
                let mut first = first_failure.lock().unwrap_or_else(|e| e.into_inner());
                if first.as_ref().is_none_or(|(earlier, _)| seed < *earlier) {
                    *first = Some((seed, payload));
                }
                return;
            }
        }
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(work);
            }
        });
    }
    let failure = first_failure
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((seed, payload)) = failure {
        eprintln!(
            "seed {seed} of {}..{} failed; replay it alone with RUNTIME_SEED={seed}",
            seeds.start, seeds.end
        );
        resume_unwind(payload);
    }
}
