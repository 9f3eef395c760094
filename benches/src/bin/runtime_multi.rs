//! tokio's `rt_multi_threaded` workloads on two workers: ours (`Config::default()`, worker zero
//! plus one pool thread) against tokio's `multi_thread` runtime with `worker_threads(2)`.
//!
//! Every sample builds a fresh runtime; only the workload is timed. On tokio the workload runs
//! inside a spawned task, so "from inside" means from a worker on both sides (our root runs on
//! worker zero). The runtimes alternate sample by sample in this one process.
//!
//! Run with `cargo run --release -p benches --bin runtime_multi`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use benches::{Workload, run_table};
use futures::channel::oneshot;
use parking_lot::Mutex;
use runtime::Context;
use runtime::prelude::*;

const WARMUPS: usize = 3;
const SAMPLES: usize = 21;

const SPAWNS: usize = 10_000;
const YIELD_TASKS: usize = 200;
const YIELDS_PER_TASK: usize = 1_000;
const PING_PONGS: usize = 1_000;
const CHAIN_DEPTH: usize = 1_000;

/// Runs `f` as the root of a fresh two-worker runtime of ours and returns what it measured.
fn ours<F, Fut>(f: F) -> Duration
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Duration>,
{
    benches::ours(2, f)
}

/// Runs `future` inside a task of a fresh two-worker tokio runtime and returns what it
/// measured.
fn tokio_rt(future: impl Future<Output = Duration> + Send + 'static) -> Duration {
    benches::tokio_multi(2, future)
}

/// A countdown whose last decrement fires a oneshot.
#[derive(Clone)]
struct Countdown {
    left: Arc<AtomicUsize>,
    done: Arc<Mutex<Option<oneshot::Sender<()>>>>,
}

impl Countdown {
    fn new(count: usize) -> (Self, oneshot::Receiver<()>) {
        let (done, finished) = oneshot::channel();
        let countdown = Self {
            left: Arc::new(AtomicUsize::new(count)),
            done: Arc::new(Mutex::new(Some(done))),
        };
        (countdown, finished)
    }

    fn tick(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(done) = self.done.lock().take()
        {
            let _ = done.send(());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// spawn_many_local: 10 000 empty tasks spawned from a worker.

fn ours_spawn_many_local() -> Duration {
    ours(|context| async move {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(SPAWNS);
        for _ in 0..SPAWNS {
            let countdown = countdown.clone();
            drop(
                context
                    .clone()
                    .spawn(move |_| async move { countdown.tick() }),
            );
        }
        finished.await.expect("all ran");
        start.elapsed()
    })
}

fn tokio_spawn_many_local() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(SPAWNS);
        for _ in 0..SPAWNS {
            let countdown = countdown.clone();
            drop(tokio::spawn(async move { countdown.tick() }));
        }
        finished.await.expect("all ran");
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------------
// spawn_await: 10 000 empty tasks spawned from a worker as a user would, each from a labelled
// child context (`context.child("spawn")`, as the README teaches) or from a clone of the root
// context, then every handle awaited.

fn ours_spawn_await(labelled: bool) -> Duration {
    ours(move |context| async move {
        let start = Instant::now();
        let mut handles = Vec::with_capacity(SPAWNS);
        for index in 0..SPAWNS {
            let spawner = if labelled {
                context.child("spawn")
            } else {
                context.clone()
            };
            handles.push(spawner.spawn(move |_| async move { index }));
        }
        for handle in handles {
            handle.await.expect("ran");
        }
        start.elapsed()
    })
}

fn ours_spawn_child_await() -> Duration {
    ours_spawn_await(true)
}

fn ours_spawn_clone_await() -> Duration {
    ours_spawn_await(false)
}

fn tokio_spawn_await() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        let mut handles = Vec::with_capacity(SPAWNS);
        for index in 0..SPAWNS {
            handles.push(tokio::spawn(async move { index }));
        }
        for handle in handles {
            handle.await.expect("ran");
        }
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------------
// spawn_many_remote: 10 000 empty tasks spawned from a thread outside the runtime.

fn ours_spawn_many_remote() -> Duration {
    ours(|context| async move {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(SPAWNS);
        let spawner = std::thread::spawn(move || {
            for _ in 0..SPAWNS {
                let countdown = countdown.clone();
                drop(
                    context
                        .clone()
                        .spawn(move |_| async move { countdown.tick() }),
                );
            }
        });
        finished.await.expect("all ran");
        let elapsed = start.elapsed();
        spawner.join().expect("spawner");
        elapsed
    })
}

fn tokio_spawn_many_remote() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(SPAWNS);
        let handle = tokio::runtime::Handle::current();
        let spawner = std::thread::spawn(move || {
            for _ in 0..SPAWNS {
                let countdown = countdown.clone();
                drop(handle.spawn(async move { countdown.tick() }));
            }
        });
        finished.await.expect("all ran");
        let elapsed = start.elapsed();
        spawner.join().expect("spawner");
        elapsed
    })
}

// ---------------------------------------------------------------------------------------------
// yield_many: 200 tasks each yielding 1 000 times.

fn ours_yield_many() -> Duration {
    ours(|context| async move {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(YIELD_TASKS);
        for _ in 0..YIELD_TASKS {
            let countdown = countdown.clone();
            drop(context.clone().spawn(move |_| async move {
                for _ in 0..YIELDS_PER_TASK {
                    runtime::reschedule().await;
                }
                countdown.tick();
            }));
        }
        finished.await.expect("all ran");
        start.elapsed()
    })
}

fn tokio_yield_many() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(YIELD_TASKS);
        for _ in 0..YIELD_TASKS {
            let countdown = countdown.clone();
            drop(tokio::spawn(async move {
                for _ in 0..YIELDS_PER_TASK {
                    tokio::task::yield_now().await;
                }
                countdown.tick();
            }));
        }
        finished.await.expect("all ran");
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------------
// ping_pong: 1 000 tasks, each spawning a partner and exchanging a ping and a pong with it
// over oneshots.

/// The ping-pong workload on ours; each side is spawned from a labelled child (`"ping"` under
/// the root, `"pong"` under the pinging task) if `labelled`, else from a context clone.
fn ours_ping_pong(labelled: bool) -> Duration {
    let spawner = move |context: &Context, label: &'static str| {
        if labelled {
            context.child(label)
        } else {
            context.clone()
        }
    };
    ours(move |context| async move {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(PING_PONGS);
        for _ in 0..PING_PONGS {
            let countdown = countdown.clone();
            drop(spawner(&context, "ping").spawn(move |context| async move {
                let (ping, pinged) = oneshot::channel::<()>();
                let (pong, ponged) = oneshot::channel::<()>();
                drop(spawner(&context, "pong").spawn(move |_| async move {
                    pinged.await.expect("ping");
                    pong.send(()).expect("pong");
                }));
                ping.send(()).expect("ping");
                ponged.await.expect("pong");
                countdown.tick();
            }));
        }
        finished.await.expect("all ran");
        start.elapsed()
    })
}

fn ours_ping_pong_clone() -> Duration {
    ours_ping_pong(false)
}

fn ours_ping_pong_child() -> Duration {
    ours_ping_pong(true)
}

fn tokio_ping_pong() -> Duration {
    tokio_rt(async {
        let start = Instant::now();
        let (countdown, finished) = Countdown::new(PING_PONGS);
        for _ in 0..PING_PONGS {
            let countdown = countdown.clone();
            drop(tokio::spawn(async move {
                let (ping, pinged) = oneshot::channel::<()>();
                let (pong, ponged) = oneshot::channel::<()>();
                drop(tokio::spawn(async move {
                    pinged.await.expect("ping");
                    pong.send(()).expect("pong");
                }));
                ping.send(()).expect("ping");
                ponged.await.expect("pong");
                countdown.tick();
            }));
        }
        finished.await.expect("all ran");
        start.elapsed()
    })
}

// ---------------------------------------------------------------------------------------------
// chained_spawn: each task spawns the next, 1 000 deep; the last signals the root.

fn ours_chained_spawn() -> Duration {
    ours(|context| benches::ours_chained_spawn(context, CHAIN_DEPTH, false))
}

fn ours_chained_spawn_child() -> Duration {
    ours(|context| benches::ours_chained_spawn(context, CHAIN_DEPTH, true))
}

fn tokio_chained_spawn() -> Duration {
    tokio_rt(benches::tokio_chained_spawn(CHAIN_DEPTH))
}

// ---------------------------------------------------------------------------------------------
// wake_latency: a thread outside the runtime wakes an idle task and waits for its answer, 1 000
// times in a row: the round trip of waking a parked worker, where an idle spinner pays off.

const ROUND_TRIPS: usize = 1_000;

type Requests = futures::channel::mpsc::UnboundedSender<oneshot::Sender<()>>;
type Inbox = futures::channel::mpsc::UnboundedReceiver<oneshot::Sender<()>>;

/// The foreign side of `wake_latency`: sends a request (waking the server task), blocks until
/// the answer, `ROUND_TRIPS` times, then reports how long that took; the root awaits the
/// report without blocking its worker.
fn wake_latency_client(requests: Requests) -> oneshot::Receiver<Duration> {
    let (report, reported) = oneshot::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        for _ in 0..ROUND_TRIPS {
            let (answer, answered) = oneshot::channel();
            requests.unbounded_send(answer).expect("server");
            futures::executor::block_on(answered).expect("answer");
        }
        let _ = report.send(start.elapsed());
    });
    reported
}

/// The server task: answers every request.
async fn wake_latency_server(mut inbox: Inbox) {
    use futures::StreamExt;
    while let Some(answer) = inbox.next().await {
        let _ = answer.send(());
    }
}

fn ours_wake_latency() -> Duration {
    ours(|context| async move {
        let (requests, inbox) = futures::channel::mpsc::unbounded();
        let server = context.spawn(move |_| wake_latency_server(inbox));
        let elapsed = wake_latency_client(requests).await.expect("client");
        server.await.expect("server");
        elapsed
    })
}

fn tokio_wake_latency() -> Duration {
    tokio_rt(async {
        let (requests, inbox) = futures::channel::mpsc::unbounded();
        let server = tokio::spawn(wake_latency_server(inbox));
        let elapsed = wake_latency_client(requests).await.expect("client");
        server.await.expect("server");
        elapsed
    })
}

fn main() {
    let workloads = [
        Workload {
            name: "spawn_many_local_10k",
            ours: ours_spawn_many_local,
            peer: tokio_spawn_many_local,
        },
        Workload {
            name: "spawn_many_remote_10k",
            ours: ours_spawn_many_remote,
            peer: tokio_spawn_many_remote,
        },
        Workload {
            name: "spawn_child_await_10k",
            ours: ours_spawn_child_await,
            peer: tokio_spawn_await,
        },
        Workload {
            name: "spawn_clone_await_10k",
            ours: ours_spawn_clone_await,
            peer: tokio_spawn_await,
        },
        Workload {
            name: "yield_many_200x1000",
            ours: ours_yield_many,
            peer: tokio_yield_many,
        },
        Workload {
            name: "ping_pong_1000",
            ours: ours_ping_pong_clone,
            peer: tokio_ping_pong,
        },
        Workload {
            name: "ping_pong_child_1000",
            ours: ours_ping_pong_child,
            peer: tokio_ping_pong,
        },
        Workload {
            name: "chained_spawn_1000",
            ours: ours_chained_spawn,
            peer: tokio_chained_spawn,
        },
        Workload {
            name: "chained_spawn_child_1000",
            ours: ours_chained_spawn_child,
            peer: tokio_chained_spawn,
        },
        Workload {
            name: "wake_latency_1000",
            ours: ours_wake_latency,
            peer: tokio_wake_latency,
        },
    ];
    run_table(&workloads, "tokio", WARMUPS, SAMPLES);
}
