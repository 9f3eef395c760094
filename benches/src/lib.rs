//! The harness shared by the benchmark binaries: alternate the runtimes sample by sample in one
//! process, take medians, and print a markdown table of medians and ratios.

#![warn(missing_docs, missing_debug_implementations)]

use std::time::{Duration, Instant};

use futures::channel::oneshot;
use runtime::prelude::*;
use runtime::{Config, Context, Runner};

/// One workload: a name and a timed run on each runtime. Each run returns the time it
/// measured inside its root (runtime start and shutdown excluded).
#[derive(Debug)]
pub struct Workload {
    /// The row's name.
    pub name: &'static str,
    /// The run on our runtime.
    pub ours: fn() -> Duration,
    /// The same run on the peer runtime.
    pub peer: fn() -> Duration,
}

/// The median of `samples`.
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    let middle = samples.len() / 2;
    if samples.len() % 2 == 1 {
        samples[middle]
    } else {
        (samples[middle - 1] + samples[middle]) / 2
    }
}

/// Formats both medians of a row in one unit: microseconds if the larger is below 10 ms,
/// milliseconds otherwise.
pub fn format_pair(ours: Duration, peer: Duration) -> (String, String) {
    let in_micros = ours.max(peer) < Duration::from_millis(10);
    let format = |duration: Duration| {
        let micros = duration.as_secs_f64() * 1e6;
        if in_micros {
            format!("{micros:.1} µs")
        } else {
            format!("{:.2} ms", micros / 1_000.0)
        }
    };
    (format(ours), format(peer))
}

/// The median and range of a few values: what every table prints for a ratio measured over
/// several rounds, so that a reader rerunning it can tell whether they landed inside.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    /// The median value.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` if there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = match sorted.len() {
            0 => return None,
            len if len % 2 == 1 => sorted[middle],
            _ => (sorted[middle - 1] + sorted[middle]) / 2.0,
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        })
    }
}

impl std::fmt::Display for Spread {
    /// `median (min – max)`, with the precision given (two decimals by default).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = f.precision().unwrap_or(2);
        write!(
            f,
            "{:.digits$} ({:.digits$} – {:.digits$})",
            self.median, self.min, self.max
        )
    }
}

/// A positive count from the environment variable `name`, else `default`; at least one.
fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
        .max(1)
}

/// How many timed samples a table takes per round: `BENCH_SAMPLES`, else `default`.
pub fn samples(default: usize) -> usize {
    count_from_env("BENCH_SAMPLES", default)
}

/// How many rounds a table runs: `BENCH_ROUNDS`, else `default`.
pub fn rounds(default: usize) -> usize {
    count_from_env("BENCH_ROUNDS", default)
}

/// Prints the line above a table that says how its cells are made from `rounds` rounds.
pub fn print_rounds_caption(rounds: usize, extra: &str) {
    println!(
        "Each cell: the median over {rounds} rounds of each round's median, and their range{extra}.\n"
    );
}

/// The rounds every table runs unless `BENCH_ROUNDS` says otherwise.
pub const ROUNDS: usize = 3;

/// Runs the table in [`rounds`] rounds (three by default): each round runs every workload in
/// turn, `warmups` times untimed and `samples` times timed on each runtime, alternating. A
/// round is thus a whole rerun of the table, minutes after the last on a long table, which is
/// the variation a reader rerunning it meets. One row per workload:
///
/// - each side's median over the samples of every round;
/// - the paired ratio, as the median and the range over the rounds of each round's median of
///   per-pair ratios (sample `i` of ours over sample `i` of the peer, taken back to back: this
///   cancels the slow drifts of a shared machine, which move both samples of a pair together).
///
/// `BENCH_FILTER=<text>` keeps only the workloads whose name contains `<text>`,
/// `BENCH_SIDE=ours` or `BENCH_SIDE=peer` runs only that side (both for profiling),
/// `BENCH_SAMPLES=<n>` overrides `samples` and `BENCH_ROUNDS=<n>` the rounds.
pub fn run_table(workloads: &[Workload], peer: &str, warmups: usize, samples: usize) {
    let filter = std::env::var("BENCH_FILTER").unwrap_or_default();
    let side = std::env::var("BENCH_SIDE").unwrap_or_default();
    let samples = crate::samples(samples);
    let rounds = rounds(ROUNDS);
    let run_ours = side != "peer";
    let run_peer = side != "ours";
    let workloads: Vec<&Workload> = workloads
        .iter()
        .filter(|w| w.name.contains(filter.as_str()))
        .collect();
    // Per workload: every sample of each side, and each round's median paired ratio.
    let mut ours_samples = vec![Vec::new(); workloads.len()];
    let mut peer_samples = vec![Vec::new(); workloads.len()];
    let mut round_ratios = vec![Vec::new(); workloads.len()];
    for _ in 0..rounds {
        for (index, workload) in workloads.iter().enumerate() {
            let ours = || {
                if run_ours {
                    (workload.ours)()
                } else {
                    Duration::ZERO
                }
            };
            let peer = || {
                if run_peer {
                    (workload.peer)()
                } else {
                    Duration::ZERO
                }
            };
            for _ in 0..warmups {
                ours();
                peer();
            }
            let mut paired = Vec::with_capacity(samples);
            for _ in 0..samples {
                let (ours, peer) = (ours(), peer());
                ours_samples[index].push(ours);
                peer_samples[index].push(peer);
                paired.push(ours.as_secs_f64() / peer.as_secs_f64());
            }
            if let Some(round) = Spread::of(&paired) {
                round_ratios[index].push(round.median);
            }
        }
    }
    println!(
        "| workload | ours median | {peer} median | ratio of medians | paired ratio, median (range) of {rounds} rounds |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (index, workload) in workloads.iter().enumerate() {
        let ours_median = median(&mut ours_samples[index]);
        let peer_median = median(&mut peer_samples[index]);
        let ratio = ours_median.as_secs_f64() / peer_median.as_secs_f64();
        let paired = Spread::of(&round_ratios[index]).expect("at least one round");
        let (ours_text, peer_text) = format_pair(ours_median, peer_median);
        println!(
            "| {} | {ours_text} | {peer_text} | {ratio:.2} | {paired} |",
            workload.name
        );
    }
}

/// The idle spinner `OURS_SPIN_US=budget,max,quick` asks for (microseconds), if set: a knob for
/// tuning the spinner's defaults, not for the reported tables.
pub fn spinner_from_env() -> Option<runtime::SpinnerConfig> {
    let spin = std::env::var("OURS_SPIN_US").ok()?;
    let values: Vec<u64> = spin
        .split(',')
        .map(|value| value.parse().expect("OURS_SPIN_US: microseconds"))
        .collect();
    assert_eq!(
        values.len(),
        3,
        "OURS_SPIN_US: budget,max,quick in microseconds"
    );
    Some(runtime::SpinnerConfig {
        budget_us: values[0],
        max_budget_us: values[1],
        quick_wake_us: values[2],
    })
}

/// Runs `f` as the root of a fresh runtime of ours with `workers` workers and returns what
/// it measured. `OURS_SPIN_US=budget,max,quick` overrides the idle spinner (for tuning its
/// defaults). The storage directory each default config picks is removed afterwards.
pub fn ours<F, Fut>(workers: usize, f: F) -> Duration
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Duration>,
{
    let mut config = Config::default().with_worker_threads(workers);
    if let Some(spinner) = spinner_from_env() {
        config = config.with_idle_spinner(spinner);
    }
    // The runner removes its fresh storage directory itself.
    Runner::new(config).start(f)
}

/// Runs `future` inside a task of a fresh tokio `multi_thread` runtime with `workers` workers
/// and returns its output (so the workload runs on a worker, as our root does).
pub fn tokio_multi<T: Send + 'static>(
    workers: usize,
    future: impl Future<Output = T> + Send + 'static,
) -> T {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async { tokio::spawn(future).await.expect("workload") })
}

/// Spawns link `remaining` of a chain where each task spawns the next; the last link fires
/// `done`. Every link is spawned from the root context (from `root.child("chain")` if
/// `labelled`, as the README teaches), so the links are siblings and one finishing does not
/// abort the next.
fn ours_chain_link(root: Context, labelled: bool, remaining: usize, done: oneshot::Sender<()>) {
    let spawner = if labelled {
        root.child("chain")
    } else {
        root.clone()
    };
    // Dropping the handle detaches the task.
    drop(spawner.spawn(move |_| async move {
        if remaining == 0 {
            let _ = done.send(());
        } else {
            ours_chain_link(root, labelled, remaining - 1, done);
        }
    }));
}

/// The chained-spawn workload on ours: a chain `depth` tasks deep, timed from the first spawn
/// to the last link's signal; each link spawns from a labelled child of the root if
/// `labelled`, else from a clone of it.
pub async fn ours_chained_spawn(context: Context, depth: usize, labelled: bool) -> Duration {
    let start = Instant::now();
    let (done, finished) = oneshot::channel();
    ours_chain_link(context, labelled, depth - 1, done);
    finished.await.expect("chain finished");
    start.elapsed()
}

fn tokio_chain_link(remaining: usize, done: oneshot::Sender<()>) {
    drop(tokio::spawn(async move {
        if remaining == 0 {
            let _ = done.send(());
        } else {
            tokio_chain_link(remaining - 1, done);
        }
    }));
}

/// The chained-spawn workload on tokio (inside a runtime).
pub async fn tokio_chained_spawn(depth: usize) -> Duration {
    let start = Instant::now();
    let (done, finished) = oneshot::channel();
    tokio_chain_link(depth - 1, done);
    finished.await.expect("chain finished");
    start.elapsed()
}

/// One row of a table that compares several frameworks: a name and one timed run per
/// framework, in the table's column order (ours first). A framework that cannot run the
/// workload comparably returns [`NOT_COMPARABLE`].
#[derive(Debug)]
pub struct FrameworkRow<const N: usize> {
    /// The row's name.
    pub name: &'static str,
    /// One run per framework, in the table's column order.
    pub runs: [fn() -> Duration; N],
}

/// What a framework's run returns when it has no comparable way to do the workload.
pub const NOT_COMPARABLE: Duration = Duration::from_nanos(1);

/// A ratio column of a framework table: the fastest of the frameworks at `peers` (column
/// indices, ours being 0) over ours, taken per round.
#[derive(Debug)]
pub struct RatioColumn {
    /// The column's title.
    pub title: &'static str,
    /// The columns of the peers compared with ours.
    pub peers: &'static [usize],
}

/// Formats a spread of milliseconds: `median (min – max) ms`, with the precision the median's
/// size needs.
fn format_millis(spread: Spread) -> String {
    let digits = if spread.median < 10.0 { 2 } else { 1 };
    format!("{spread:.digits$} ms")
}

/// Runs a table of frameworks in [`rounds`] rounds (three by default): each round runs every
/// row, each framework taking its turn sample by sample (`warmups` untimed runs each, then
/// `samples` timed ones). Prints, per row and framework, the median and range over the rounds
/// of each round's median; and per ratio column, the median and range over the rounds of that
/// round's ratio (the fastest peer's median over ours). A round is a whole pass over the table,
/// so the ranges show what a rerun meets.
///
/// `BENCH_FILTER=<text>` keeps the rows whose name contains `<text>`, `BENCH_SAMPLES` and
/// `BENCH_ROUNDS` override the samples and rounds, and `BENCH_ONLY=<framework>` runs one
/// framework (for profiling; the others print `—`).
pub fn run_frameworks<const N: usize>(
    rows: &[FrameworkRow<N>],
    names: [&str; N],
    ratios: &[RatioColumn],
    warmups: usize,
    samples: usize,
) {
    let filter = std::env::var("BENCH_FILTER").unwrap_or_default();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let samples = crate::samples(samples);
    let rounds = rounds(ROUNDS);
    let runs = |index: usize| only.is_empty() || only == names[index];
    let rows: Vec<&FrameworkRow<N>> = rows
        .iter()
        .filter(|row| row.name.contains(filter.as_str()))
        .collect();
    // Per row, per framework: each round's median in milliseconds, `None` for a round where
    // it was not run or not comparable (so that rounds stay aligned across frameworks).
    let mut medians: Vec<[Vec<Option<f64>>; N]> = rows
        .iter()
        .map(|_| std::array::from_fn(|_| Vec::new()))
        .collect();
    for _ in 0..rounds {
        for (row_index, row) in rows.iter().enumerate() {
            for _ in 0..warmups {
                for (index, run) in row.runs.iter().enumerate() {
                    if runs(index) {
                        run();
                    }
                }
            }
            let mut samples_of: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::new());
            for _ in 0..samples {
                for (index, run) in row.runs.iter().enumerate() {
                    if runs(index) {
                        samples_of[index].push(run());
                    }
                }
            }
            for (index, samples) in samples_of.iter_mut().enumerate() {
                let round = (!samples.is_empty())
                    .then(|| median(samples))
                    .filter(|round| *round > NOT_COMPARABLE)
                    .map(|round| round.as_secs_f64() * 1e3);
                medians[row_index][index].push(round);
            }
        }
    }
    let mut header = String::from("| workload |");
    let mut rule = String::from("|---|");
    for name in names {
        header.push_str(&format!(" {name} |"));
        rule.push_str("---:|");
    }
    for ratio in ratios {
        header.push_str(&format!(" {} |", ratio.title));
        rule.push_str("---:|");
    }
    print_rounds_caption(rounds, "");
    println!("{header}");
    println!("{rule}");
    for (row_index, row) in rows.iter().enumerate() {
        let of = &medians[row_index];
        let mut line = format!("| {} |", row.name);
        for framework in of {
            let measured: Vec<f64> = framework.iter().flatten().copied().collect();
            match Spread::of(&measured) {
                Some(spread) => line.push_str(&format!(" {} |", format_millis(spread))),
                None => line.push_str(" — |"),
            }
        }
        for ratio in ratios {
            // Per round: the fastest comparable peer's median over ours.
            let per_round: Vec<f64> = (0..rounds)
                .filter_map(|round| {
                    let ours = of[0][round]?;
                    let best = ratio
                        .peers
                        .iter()
                        .filter_map(|&peer| of[peer][round])
                        .min_by(f64::total_cmp)?;
                    Some(best / ours)
                })
                .collect();
            match Spread::of(&per_round) {
                Some(spread) => line.push_str(&format!(" {spread} |")),
                None => line.push_str(" — |"),
            }
        }
        println!("{line}");
    }
}
