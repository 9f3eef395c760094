//! The pool's scheduling rules: wake locality, global-queue fairness,
//! stealing and kicks, the search count, parking and the spinner, and registrations that
//! stay with the worker that first polled them. Races are forced with the park and overflow
//! hooks, never left to timing.

use super::*;
use crate::Handle;
use crate::context::LabelPath;
use crate::hooks::{ParkPoint, on_next_overflow, on_next_park};
use crate::pool::{BATCH_SIZE, CAPACITY, Home, Pool};
use crate::supervision::TaskNode;
use crate::task::cell::Task;
use crate::worker::Sleep;
use futures::future::{pending, poll_fn};
use std::task::Wake;
use std::thread::ThreadId;
use std::time::Instant;

/// Returns `Pending` once without waking the task, then `Ready`: only someone else's wake
/// (the one a test is about) polls the task again.
pub(super) async fn pending_once_unwoken() {
    let mut yielded = false;
    std::future::poll_fn(|_| {
        if std::mem::replace(&mut yielded, true) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

fn pool_of(context: &Context) -> Arc<Pool> {
    context.runtime().pool.clone()
}

/// Whether worker `index` is published idle and waits on its futex or in its ring.
fn is_waiting(pool: &Pool, index: usize) -> bool {
    const WAITING: u32 = 0b11;
    pool.idle().is_idle(index) && pool.mailbox(index).waker.bits() & WAITING != 0
}

/// Waits in the root until every worker, the root's own included, waits with no count held,
/// seen twice around the scan of the waiting bits (a claimed worker shows its waiting bit
/// until it runs). Once nothing else can wake a task, every task's poll has returned.
async fn every_worker_waits(pool: &Arc<Pool>) {
    let (go, quiet) = oneshot::channel::<()>();
    let watcher = thread::spawn({
        let pool = pool.clone();
        move || {
            let workers = pool.workers();
            let parked = || {
                (0..workers).all(|index| pool.idle().is_idle(index))
                    && pool.idle().search_count() == 0
            };
            let deadline = Instant::now() + TEST_TIMEOUT;
            while !(parked() && (0..workers).all(|index| is_waiting(&pool, index)) && parked()) {
                assert!(Instant::now() < deadline, "every worker must wait");
                thread::yield_now();
            }
            go.send(()).unwrap();
        }
    });
    quiet.await.unwrap();
    watcher.join().unwrap();
}

/// Spawns `future` from a thread outside the pool, so its runnable goes to the global queue,
/// and keeps the calling worker busy until another worker has started it. Returns the
/// handle and the thread that started it.
pub(super) fn spawn_elsewhere<T, Fut>(context: &Context, future: Fut) -> (Handle<T>, ThreadId)
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let started = Arc::new(Mutex::new(None));
    let child = context.child("elsewhere");
    let handle = thread::spawn({
        let started = started.clone();
        move || {
            child.spawn(move |_| async move {
                *started.lock().unwrap() = Some(thread::current().id());
                future.await
            })
        }
    })
    .join()
    .unwrap();
    spin_until(|| started.lock().unwrap().is_some(), "the task must start");
    let thread = started.lock().unwrap().unwrap();
    assert_ne!(
        thread,
        thread::current().id(),
        "the task must start elsewhere"
    );
    (handle, thread)
}

/// A thread, and the address of the pool whose worker runs on it.
type RanOn = (ThreadId, Option<usize>);

/// Idle tasks a test wakes when it chooses: each records its waker on its first poll, then
/// counts its second poll (and where it ran) and completes.
struct Recorded {
    wakers: Arc<Mutex<Vec<Waker>>>,
    ran: Arc<AtomicUsize>,
    /// Where each second poll ran: the thread, and the pool of the worker on it.
    threads: Arc<Mutex<Vec<RanOn>>>,
    tasks: Vec<Handle<()>>,
}

impl Recorded {
    fn spawn(context: &Context, count: usize) -> Self {
        let wakers = Arc::new(Mutex::new(Vec::new()));
        let ran = Arc::new(AtomicUsize::new(0));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..count)
            .map(|_| {
                let (wakers, ran, threads) = (wakers.clone(), ran.clone(), threads.clone());
                let mut polled = false;
                context.child("recorded").spawn(move |_| {
                    poll_fn(move |cx| {
                        if polled {
                            threads
                                .lock()
                                .unwrap()
                                .push((thread::current().id(), current_pool()));
                            ran.fetch_add(1, Ordering::SeqCst);
                            return Poll::Ready(());
                        }
                        polled = true;
                        wakers.lock().unwrap().push(cx.waker().clone());
                        Poll::Pending
                    })
                })
            })
            .collect();
        Self {
            wakers,
            ran,
            threads,
            tasks,
        }
    }

    /// Wakes every task recorded since the last wake, from the calling thread.
    fn wake(&self) {
        for waker in std::mem::take(&mut *self.wakers.lock().unwrap()) {
            waker.wake();
        }
    }

    fn ran(&self) -> usize {
        self.ran.load(Ordering::SeqCst)
    }

    async fn join(self) {
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

/// A callback that wakes the recorded tasks, then blocks until another worker has run one of
/// them. A search count its worker held meanwhile would suppress the kick for that work.
struct WakeAndWait {
    wakers: Arc<Mutex<Vec<Waker>>>,
    ran: Arc<AtomicUsize>,
    done: AtomicBool,
}

impl WakeAndWait {
    fn new(recorded: &Recorded) -> Arc<Self> {
        Arc::new(Self {
            wakers: recorded.wakers.clone(),
            ran: recorded.ran.clone(),
            done: AtomicBool::new(false),
        })
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }
}

impl Wake for WakeAndWait {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap());
        if wakers.is_empty() {
            return;
        }
        for waker in wakers {
            waker.wake();
        }
        spin_until(
            || self.ran.load(Ordering::SeqCst) != 0,
            "another worker must run a task the callback woke",
        );
        self.done.store(true, Ordering::SeqCst);
    }
}

/// Keeps a runner's pool past the runner, to check it is clean afterwards.
#[derive(Clone, Default)]
struct KeptPool(Arc<Mutex<Option<Arc<Pool>>>>);

impl KeptPool {
    fn keep(&self, context: &Context) {
        *self.0.lock().unwrap() = Some(pool_of(context));
    }

    /// Checks the kept pool once the runner has returned or unwound: closed, with every worker
    /// out of the idle set and its counts returned; released by the runner and its workers
    /// (this is the last strong reference); and with every task cell freed (each holds a weak
    /// reference to its pool, so none left means no runnable leaked in a queue or a batch).
    /// Dropping it then runs the pool's own idle-state check outside any unwind.
    fn check(&self) {
        let pool = self.0.lock().unwrap().take().expect("a pool was kept");
        assert!(
            pool.is_clean(),
            "every worker left the idle set with its counts returned"
        );
        assert_eq!(
            Arc::strong_count(&pool),
            1,
            "the runner must release its pool"
        );
        assert_eq!(Arc::weak_count(&pool), 0, "every task cell must be freed");
        drop(pool);
    }
}

/// K: a wake of an idle task queues it on the waker's worker, a wake during a poll leaves the
/// task with its poller, and a lone runnable is never stolen, so a chatty pair converges onto
/// one worker. The responder starts on worker one and goes idle there; the requester starts on
/// worker zero, and from its first request on, every request is sent from worker zero, handled
/// there, and answered from there.
#[test]
fn chatty_pair_converges_onto_one_worker() {
    const MESSAGES: usize = 200;
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let root = thread::current().id();
        // Each request carries the thread it was sent from, each reply the thread that
        // handled the request.
        let (requests, mut inbox) = futures::channel::mpsc::channel::<ThreadId>(1);
        let (replies, mut answers) = futures::channel::mpsc::channel::<ThreadId>(1);
        let (responder, first) = spawn_elsewhere(&context, {
            let mut replies = replies;
            async move {
                use futures::{SinkExt, StreamExt};
                let mut seen = Vec::new();
                while let Some(requester) = inbox.next().await {
                    let here = thread::current().id();
                    seen.push((requester, here));
                    replies.send(here).await.unwrap();
                }
                seen
            }
        });
        assert_ne!(first, root, "the responder's first poll is elsewhere");
        // `spawn_elsewhere` returns once that poll has started; a wake while it still runs
        // would leave the responder with its poller (worker one). Wait until worker one has
        // finished it and gone idle, so the pair starts out with the requester.
        let pool = pool_of(&context);
        spin_until(
            || pool.idle().is_idle(1),
            "worker one ends the responder's first poll and goes idle",
        );
        let requester = context.clone().spawn(move |_| async move {
            use futures::{SinkExt, StreamExt};
            let mut requests = requests;
            let mut seen = Vec::new();
            for _ in 0..MESSAGES {
                let sent_from = thread::current().id();
                requests.send(sent_from).await.unwrap();
                let handled_on = answers.next().await.unwrap();
                seen.push((sent_from, handled_on, thread::current().id()));
            }
            seen
        });
        let requester_seen = requester.await.unwrap();
        let responder_seen = responder.await.unwrap();
        assert_eq!(requester_seen.len(), MESSAGES);
        assert_eq!(responder_seen.len(), MESSAGES);
        assert!(
            requester_seen
                .iter()
                .all(|&(sent_from, handled_on, answered_on)| {
                    sent_from == root && handled_on == root && answered_on == root
                }),
            "every request is sent, handled and answered on the requester's worker: \
             {requester_seen:?}"
        );
        assert!(
            responder_seen
                .iter()
                .all(|&(requester, handled_on)| requester == root && handled_on == root),
            "the responder handles every request, the first included, on the requester's \
             worker: {responder_seen:?}"
        );
    });
}

/// K: a task woken by a task on another worker joins that worker's queue and runs there once
/// the waker's long poll ends; the idle workers neither steal nor get kicked for a lone
/// runnable.
#[test]
fn wake_on_a_pool_worker_keeps_the_task_there() {
    Runner::new(config().with_worker_threads(3)).start(|context| async move {
        let pool = pool_of(&context);
        let woken = Recorded::spawn(&context, 1);
        every_worker_waits(&pool).await;
        let wakers = woken.wakers.clone();
        let (waker_task, waker_thread) = spawn_elsewhere(&context, async move {
            for waker in std::mem::take(&mut *wakers.lock().unwrap()) {
                waker.wake();
            }
            let until = Instant::now() + Duration::from_millis(100);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        });
        let threads = woken.threads.clone();
        woken.join().await;
        waker_task.await.unwrap();
        assert_eq!(threads.lock().unwrap()[0].0, waker_thread);
    });
}

/// K: a wake issued by a worker of another runtime, inside one of its polls, runs the task on
/// its own runtime's workers.
#[test]
fn wake_from_another_runtime_stays_in_its_own_pool() {
    let (waker_tx, waker_rx) = mpsc::channel::<Waker>();
    let other = thread::spawn(move || {
        Runner::new(config().with_worker_threads(2)).start(|context| async move {
            let waker = waker_rx
                .recv_timeout(TEST_TIMEOUT)
                .expect("the first runtime's task must send its waker");
            let other_pool = Arc::as_ptr(&pool_of(&context)) as usize;
            // The wake comes from inside a poll on one of this runtime's workers.
            context
                .clone()
                .spawn(move |_| async move {
                    waker.wake();
                    current_pool()
                })
                .await
                .map(|pool| (pool, other_pool))
        })
    });
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let home = Arc::as_ptr(&pool_of(&context)) as usize;
        let mut waker_tx = Some(waker_tx);
        let polled_in = context
            .clone()
            .spawn(move |_| {
                let mut polled = false;
                poll_fn(move |cx| {
                    if std::mem::replace(&mut polled, true) {
                        return Poll::Ready(current_pool());
                    }
                    waker_tx.take().unwrap().send(cx.waker().clone()).unwrap();
                    Poll::Pending
                })
            })
            .await
            .unwrap();
        let (woke_in, other_pool) = other.join().unwrap().unwrap();
        assert_eq!(
            woke_in,
            Some(other_pool),
            "the wake came from the other runtime"
        );
        assert_ne!(other_pool, home);
        assert_eq!(polled_in, Some(home), "the task ran on its own runtime");
    });
}

/// The address of the pool whose worker runs on this thread, if any.
fn current_pool() -> Option<usize> {
    Local::with_current(|local| local.seat().map(|seat| Arc::as_ptr(&seat.pool) as usize)).flatten()
}

/// K: an ordinary task woken from a dedicated worker runs on a pool worker, never on the
/// dedicated thread.
#[test]
fn wake_from_a_dedicated_worker_goes_to_the_pool() {
    for workers in [1, 2] {
        Runner::new(config().with_worker_threads(workers)).start(|context| async move {
            let home = Arc::as_ptr(&pool_of(&context)) as usize;
            let woken = Recorded::spawn(&context, 1);
            while woken.wakers.lock().unwrap().is_empty() {
                reschedule().await;
            }
            let wakers = woken.wakers.clone();
            let dedicated = context
                .clone()
                .dedicated()
                .spawn(move |_| async move {
                    for waker in std::mem::take(&mut *wakers.lock().unwrap()) {
                        waker.wake();
                    }
                    thread::current().id()
                })
                .await
                .unwrap();
            let threads = woken.threads.clone();
            woken.join().await;
            let (ran_on, pool) = threads.lock().unwrap()[0];
            assert_ne!(ran_on, dedicated, "never on the dedicated thread");
            assert_eq!(pool, Some(home), "on a worker of its own pool");
        });
    }
}

/// Spawns `left` chain tasks one at a time from foreign threads, each while its predecessor
/// polls, so each waits alone in the global queue. Each records `polls` when it starts; the
/// last sends the records.
fn chain_foreign_spawns(
    context: Context,
    polls: Arc<AtomicUsize>,
    mut records: Vec<usize>,
    left: usize,
    done: oneshot::Sender<Vec<usize>>,
) {
    thread::spawn(move || {
        let next = context.child("chain");
        drop(context.spawn(move |_| async move {
            records.push(polls.load(Ordering::SeqCst));
            if left == 1 {
                let _ = done.send(records);
            } else {
                chain_foreign_spawns(next, polls, records, left - 1, done);
            }
        }));
    })
    .join()
    .unwrap();
}

/// Spawns a task that requeues itself, counting its polls, until `stop` is set.
fn requeuer(context: &Context, polls: &Arc<AtomicUsize>, stop: &Arc<AtomicBool>) -> Handle<()> {
    let (polls, stop) = (polls.clone(), stop.clone());
    context.child("requeuer").spawn(move |_| async move {
        while !stop.load(Ordering::SeqCst) {
            polls.fetch_add(1, Ordering::SeqCst);
            reschedule().await;
        }
    })
}

/// L: a busy worker takes from the global queue on exactly every `interval`-th poll, so
/// consecutive chain tasks are separated by exactly `interval - 1` polls of the requeuer; for
/// intervals of 1, 2 and 4 and for the configuration's default.
#[test]
fn busy_worker_checks_the_global_queue_every_interval() {
    for interval in [1, 2, 4, config().global_queue_interval()] {
        Runner::new(config().with_global_queue_interval(interval)).start(|context| async move {
            let polls = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let busy = requeuer(&context, &polls, &stop);
            let (done, records) = oneshot::channel();
            chain_foreign_spawns(context.child("chain"), polls, Vec::new(), 8, done);
            let records = records.await.unwrap();
            stop.store(true, Ordering::SeqCst);
            busy.await.unwrap();
            let gaps: Vec<usize> = records.windows(2).map(|pair| pair[1] - pair[0]).collect();
            assert_eq!(
                gaps,
                vec![interval as usize - 1; 7],
                "interval {interval}: polls between consecutive global tasks"
            );
        });
    }
}

/// L: one take moves a share of the global queue when the local queue is low, and exactly one
/// runnable when it is at least half full; either way no waiter starves.
#[test]
fn busy_worker_takes_a_share_of_the_global_queue_every_interval() {
    const WAITERS: usize = 64;
    let default = config().global_queue_interval();
    for (requeuers, interval) in [(1, default), (1, 4), (200, default), (200, 4)] {
        Runner::new(config().with_global_queue_interval(interval)).start(|context| async move {
            let interval = interval as usize;
            let polls = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let wakers = Arc::new(Mutex::new(Vec::new()));
            let lags = Arc::new(Mutex::new(Vec::new()));
            let waiters: Vec<_> = (0..WAITERS)
                .map(|_| {
                    let (polls, wakers, lags) = (polls.clone(), wakers.clone(), lags.clone());
                    let mut polled = false;
                    context.child("waiter").spawn(move |_| {
                        poll_fn(move |cx| {
                            if std::mem::replace(&mut polled, true) {
                                lags.lock().unwrap().push(polls.load(Ordering::SeqCst));
                                return Poll::Ready(());
                            }
                            wakers.lock().unwrap().push(cx.waker().clone());
                            Poll::Pending
                        })
                    })
                })
                .collect();
            while wakers.lock().unwrap().len() < WAITERS {
                reschedule().await;
            }
            let busy: Vec<_> = (0..requeuers)
                .map(|_| requeuer(&context, &polls, &stop))
                .collect();
            // Every requeuer is queued before the burst.
            while polls.load(Ordering::SeqCst) < requeuers {
                reschedule().await;
            }
            let burst = std::mem::take(&mut *wakers.lock().unwrap());
            let start = polls.load(Ordering::SeqCst);
            // All 64 wakes land in the global queue while the root polls.
            thread::spawn(move || burst.into_iter().for_each(Waker::wake))
                .join()
                .unwrap();
            let limit = if requeuers == 1 { 100_000 } else { 10_000_000 };
            while lags.lock().unwrap().len() < WAITERS {
                assert!(
                    polls.load(Ordering::SeqCst) - start < limit,
                    "a waiter starved"
                );
                reschedule().await;
            }
            stop.store(true, Ordering::SeqCst);
            for task in busy.into_iter().chain(waiters) {
                task.await.unwrap();
            }
            let mut lags: Vec<usize> = lags.lock().unwrap().iter().map(|at| at - start).collect();
            lags.sort_unstable();
            for (k, lag) in lags.into_iter().enumerate() {
                let bound = if requeuers == 1 {
                    2 * interval
                } else {
                    (k + 2) * interval
                };
                assert!(
                    lag <= bound,
                    "{requeuers} requeuers, interval {interval}: waiter {k} lagged {lag} polls, \
                     at most {bound} allowed"
                );
            }
        });
    }
}

/// M: runnables queued behind a long poll wake a parked worker (the push that makes the queue
/// stealable kicks it), which steals half each time it runs dry, so all but the lone last one
/// run elsewhere while the poll lasts.
#[test]
fn tasks_queued_behind_a_long_poll_wake_a_parked_worker_to_steal() {
    for count in [2, 8] {
        Runner::new(config().with_worker_threads(2)).start(|context| async move {
            let root = thread::current().id();
            let pool = pool_of(&context);
            let queued = Recorded::spawn(&context, count);
            every_worker_waits(&pool).await;
            queued.wake();
            let threads = queued.threads.clone();
            spin_until(
                || {
                    let threads = threads.lock().unwrap();
                    threads.iter().filter(|(thread, _)| *thread != root).count() >= count - 1
                },
                "tasks queued behind the long poll must be stolen",
            );
            queued.join().await;
        });
    }
}

/// M: a run queue overflowing while a thief steals from its kept half and the pool closes:
/// the refused batch is discarded, every future is dropped exactly once, at least one stolen
/// task ran, and no runnable is left anywhere.
#[test]
fn overflow_racing_a_thief_and_shutdown_accounts_for_every_runnable() {
    const TASKS: usize = CAPACITY + 1;
    let drops = Drops::default();
    let kept = KeptPool::default();
    let ran = Arc::new(AtomicUsize::new(0));
    Runner::new(config().with_worker_threads(3)).start(|context| {
        let (drops, kept, ran) = (drops.clone(), kept.clone(), ran.clone());
        async move {
            kept.keep(&context);
            let pool = pool_of(&context);
            let wakers = Arc::new(Mutex::new(Vec::new()));
            for _ in 0..TASKS {
                let (wakers, ran, guard) = (wakers.clone(), ran.clone(), drops.guard());
                let mut polled = false;
                drop(context.child("idle").spawn(move |_| {
                    poll_fn(move |cx| {
                        let _guard = &guard;
                        if std::mem::replace(&mut polled, true) {
                            ran.fetch_add(1, Ordering::SeqCst);
                            return Poll::Ready(());
                        }
                        wakers.lock().unwrap().push(cx.waker().clone());
                        Poll::Pending
                    })
                }));
            }
            while wakers.lock().unwrap().len() < TASKS {
                reschedule().await;
            }
            every_worker_waits(&pool).await;

            // Worker one spins in a task until the overflow hook releases it.
            let release = Arc::new(AtomicBool::new(false));
            let (_, spinner) = spawn_elsewhere(&context, {
                let release = release.clone();
                async move { spin_until(|| release.load(Ordering::SeqCst), "released") }
            });
            let finish = Arc::new(AtomicBool::new(false));
            on_next_overflow(&pool, {
                let (pool, ran, finish) = (pool.clone(), ran.clone(), finish.clone());
                move || {
                    release.store(true, Ordering::SeqCst);
                    spin_until(
                        || ran.load(Ordering::SeqCst) > 0,
                        "the thief must poll a task of the kept half",
                    );
                    finish.store(true, Ordering::SeqCst);
                    spin_until(|| pool.is_closed(), "the pool must close");
                }
            });
            // Worker two wakes every task into its own queue; the last push overflows.
            let (_, driver) = spawn_elsewhere(&context, async move {
                for waker in std::mem::take(&mut *wakers.lock().unwrap()) {
                    waker.wake();
                }
            });
            assert_ne!(spinner, driver);
            spin_until(|| finish.load(Ordering::SeqCst), "the overflow must happen");
        }
    });
    assert_eq!(drops.count(), TASKS, "every future is dropped exactly once");
    assert!(ran.load(Ordering::SeqCst) > 0);
    assert!(
        ran.load(Ordering::SeqCst) < TASKS,
        "the refused batch never ran"
    );
    kept.check();
}

/// M: a worker returns its search count before it runs callbacks. A kick claims worker one,
/// which resumes holding that count with an expired timer; the timer's callback wakes two
/// tasks into worker one's queue and blocks until parked worker two has run one.
#[test]
fn callback_waiting_for_a_stolen_task_makes_progress() {
    Runner::new(config().with_worker_threads(3)).start(|context| async move {
        let pool = pool_of(&context);
        let woken = Recorded::spawn(&context, 2);
        let trigger = WakeAndWait::new(&woken);
        let kickers = Recorded::spawn(&context, 2);
        every_worker_waits(&pool).await;

        // At its wait, worker one lets the timer expire and worker two park, then lets the
        // root kick, and waits to be claimed: it resumes holding the kick's count. Armed
        // before the timer exists, so the timer cannot fire in an earlier wait.
        let registered = Arc::new(AtomicBool::new(false));
        let kick = Arc::new(AtomicBool::new(false));
        arm_expired_wait(pool.clone(), registered.clone(), kick.clone());

        // Worker one registers a timer due in 20 ms whose waker is the trigger, then parks.
        let (timer, _) = spawn_elsewhere(&context, {
            let trigger = trigger.clone();
            let registered = registered.clone();
            async move {
                assert_eq!(thread::current().name(), Some("iouring-pool-1"));
                let mut sleep = Box::pin(Sleep::new(Duration::from_millis(20)));
                {
                    let waker = Waker::from(trigger);
                    let mut cx = TaskContext::from_waker(&waker);
                    assert!(sleep.as_mut().poll(&mut cx).is_pending());
                }
                registered.store(true, Ordering::SeqCst);
                pending::<()>().await;
            }
        });
        spin_until(|| kick.load(Ordering::SeqCst), "worker one must park");
        kickers.wake();
        spin_until(|| trigger.is_done(), "the callback must finish");
        woken.join().await;
        kickers.join().await;
        timer.abort();
    });
}

/// Hooks worker one's next wait: once its timer is registered and expired and worker two
/// waits, sets `kick` and blocks until a kick claims worker one. Re-arms itself for waits
/// before the timer exists.
fn arm_expired_wait(pool: Arc<Pool>, registered: Arc<AtomicBool>, kick: Arc<AtomicBool>) {
    on_next_park(&pool.clone(), 1, ParkPoint::BeforeWait, move || {
        if !registered.load(Ordering::SeqCst) {
            return arm_expired_wait(pool, registered, kick);
        }
        thread::sleep(Duration::from_millis(25));
        spin_until(|| is_waiting(&pool, 2), "worker two must park");
        kick.store(true, Ordering::SeqCst);
        spin_until(|| !pool.idle().is_idle(1), "a kick must claim worker one");
    });
}

/// M: a worker claimed by a wake returns the count it inherited before it polls the task, so
/// a kick from inside that poll reaches parked worker two.
#[test]
fn task_poll_returns_an_inherited_count() {
    Runner::new(config().with_worker_threads(3)).start(|context| async move {
        let pool = pool_of(&context);
        let woken = Recorded::spawn(&context, 2);
        every_worker_waits(&pool).await;
        let (wakers, ran) = (woken.wakers.clone(), woken.ran.clone());
        let (task, other) = spawn_elsewhere(&context, async move {
            for waker in std::mem::take(&mut *wakers.lock().unwrap()) {
                waker.wake();
            }
            spin_until(
                || ran.load(Ordering::SeqCst) != 0,
                "a parked worker must take the backlog behind the poll",
            );
        });
        assert_ne!(other, thread::current().id());
        spin_until(|| woken.ran() != 0, "a task must run");
        task.await.unwrap();
        woken.join().await;
    });
}

/// M: a worker claimed by a wake returns its inherited count before it polls its root, so
/// the root's kick reaches a parked worker. Two foreign spawns claim worker zero (published)
/// and then worker one, which runs both; worker zero resumes with only its root to poll.
#[test]
fn root_poll_returns_an_inherited_count() {
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let pool = pool_of(&context);
        let woken = Recorded::spawn(&context, 2);
        every_worker_waits(&pool).await;
        let root_waker = poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        let foreign_ran = Arc::new(AtomicUsize::new(0));
        on_next_park(&pool, 0, ParkPoint::BeforeWait, {
            let pool = pool.clone();
            let context = context.child("foreign");
            move || {
                let spawned = foreign_ran.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        let spawned = spawned.clone();
                        drop(context.child("spawned").spawn(move |_| async move {
                            spawned.fetch_add(1, Ordering::SeqCst);
                        }));
                    }
                })
                .join()
                .unwrap();
                assert!(!pool.idle().is_idle(0), "the first push claims worker zero");
                spin_until(
                    || foreign_ran.load(Ordering::SeqCst) == 2,
                    "worker one must run the foreign spawns",
                );
                spin_until(|| is_waiting(&pool, 1), "worker one must park again");
                root_waker.wake_by_ref();
            }
        });
        // Pending once: the hook wakes the root from worker zero's own park.
        pending_once_unwoken().await;
        woken.wake();
        spin_until(
            || woken.ran() != 0,
            "a parked worker must take the backlog behind the root's poll",
        );
        woken.join().await;
    });
}

/// Wakes the recorded tasks it holds when dropped, then waits a bounded time for one of them
/// to run, recording whether it did. It never panics: it runs while its worker unwinds.
struct WakeOnDrop {
    wakers: Arc<Mutex<Vec<Waker>>>,
    ran: Arc<AtomicUsize>,
    progressed: Arc<AtomicBool>,
}

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap());
        for waker in wakers {
            waker.wake();
        }
        let deadline = Instant::now() + TEST_TIMEOUT;
        while self.ran.load(Ordering::SeqCst) == 0 {
            if Instant::now() >= deadline {
                return;
            }
            std::hint::spin_loop();
        }
        self.progressed.store(true, Ordering::SeqCst);
    }
}

/// Runs a two-worker runner whose worker zero unwinds from `point` of its next park, with a
/// root whose destructor wakes two idle tasks into worker zero's queue. Returns whether
/// another worker ran one before the destructor's bounded wait ended.
fn root_destructor_after_an_unwind_at(point: ParkPoint) -> bool {
    let progressed = Arc::new(AtomicBool::new(false));
    let kept = KeptPool::default();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let (progressed, kept) = (progressed.clone(), kept.clone());
        Runner::new(config().with_worker_threads(2)).start(move |context| async move {
            kept.keep(&context);
            let pool = pool_of(&context);
            let woken = Recorded::spawn(&context, 2);
            let _guard = WakeOnDrop {
                wakers: woken.wakers.clone(),
                ran: woken.ran.clone(),
                progressed,
            };
            every_worker_waits(&pool).await;
            on_next_park(&pool, 0, point, || panic!("injected unwind of worker zero"));
            pending::<()>().await;
        })
    }));
    assert!(panic_text(result).contains("injected unwind of worker zero"));
    kept.check();
    progressed.load(Ordering::SeqCst)
}

/// M: a worker unwinding while published idle withdraws before it destroys its root, so the
/// destructor's kick reaches a parked worker instead of the unwinding one.
#[test]
fn root_destructor_after_an_unwind_while_published_wakes_a_parked_worker() {
    assert!(root_destructor_after_an_unwind_at(ParkPoint::BeforeWait));
}

/// M: a worker unwinding while it holds a failed search's count returns it before it
/// destroys its root, so the destructor's kick is not suppressed.
#[test]
fn root_destructor_after_an_unwind_while_searching_wakes_a_parked_worker() {
    assert!(root_destructor_after_an_unwind_at(ParkPoint::BeforeIdle));
}

/// M: a last look that finds a backlog while nobody searches takes a count and searches; when
/// the backlog is gone by then, the worker publishes itself again and waits without a count.
#[test]
fn failed_search_after_the_last_look_publishes_again() {
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let pool = pool_of(&context);
        let backlog = Recorded::spawn(&context, 2);
        every_worker_waits(&pool).await;
        let searching = Arc::new(AtomicBool::new(false));
        let drain = Arc::new(AtomicBool::new(false));
        let checked = Arc::new(AtomicBool::new(false));
        on_next_park(&pool, 1, ParkPoint::BeforeIdle, {
            let (pool, searching, drain) = (pool.clone(), searching.clone(), drain.clone());
            let ran = backlog.ran.clone();
            move || {
                assert_eq!(
                    pool.idle().search_count(),
                    1,
                    "a failed search keeps its count"
                );
                on_next_park(&pool, 1, ParkPoint::BeforeParkSearch, move || {
                    drain.store(true, Ordering::SeqCst);
                    spin_until(
                        || ran.load(Ordering::SeqCst) == 2,
                        "the root's worker must drain its run queue",
                    );
                });
                searching.store(true, Ordering::SeqCst);
                spin_until(
                    || pool.queue(0).is_stealable(),
                    "the root must queue a stealable backlog",
                );
            }
        });
        on_next_park(&pool, 1, ParkPoint::BeforeWait, {
            let (pool, checked) = (pool.clone(), checked.clone());
            move || {
                assert!(pool.idle().is_idle(1), "worker one waits published");
                assert_eq!(
                    pool.idle().search_count(),
                    0,
                    "worker one waits without a count"
                );
                checked.store(true, Ordering::SeqCst);
            }
        });
        let _ = spawn_elsewhere(&context, async {});
        spin_until(
            || searching.load(Ordering::SeqCst),
            "worker one must search",
        );
        backlog.wake();
        spin_until(
            || drain.load(Ordering::SeqCst),
            "worker one must take a count to search",
        );
        reschedule().await;
        assert_eq!(backlog.ran(), 2);
        spin_until(
            || checked.load(Ordering::SeqCst),
            "worker one must park again",
        );
        backlog.join().await;
    });
}

/// Where a worker runs a catch-up service while it may hold a search count.
#[derive(Clone, Copy, Debug)]
enum CatchUp {
    /// Going round again with a message pending.
    GoRound,
    /// Going round again because a timer deadline has passed.
    Deadline,
    /// Running again after the search before parking found work.
    AfterSearch,
}

/// M: the count is returned before the catch-up service's callbacks. Worker one, holding a
/// count, meets a timer registered already due after its turn's own service, so only the
/// catch-up collects it; the callback wakes two tasks into worker one's queue and blocks until
/// parked worker two has run one.
fn catch_up_callback_after_the_count_returns(catch_up: CatchUp) {
    Runner::new(config().with_worker_threads(3)).start(|context| async move {
        let pool = pool_of(&context);
        let backlog = Recorded::spawn(&context, 2);
        let woken = Recorded::spawn(&context, 2);
        let trigger = WakeAndWait::new(&woken);
        every_worker_waits(&pool).await;

        // Worker one keeps a read in its ring, so its waits are ring waits.
        let (read, write) = pipe();
        let _ = spawn_elsewhere(&context, async move {
            assert_eq!(thread::current().name(), Some("iouring-pool-1"));
            let _ = Operation::register(Request::Read { fd: read, len: 1 }).await;
        });
        spin_until(
            || is_waiting(&pool, 1) && is_waiting(&pool, 2) && pool.idle().search_count() == 0,
            "workers one and two must park again",
        );
        let register = {
            let trigger = trigger.clone();
            move || {
                let local = Local::current().unwrap();
                local
                    .state()
                    .borrow_mut()
                    .timers
                    .insert_due(Waker::from(trigger));
                assert!(local.state().borrow().deferred.is_empty());
            }
        };
        match catch_up {
            CatchUp::GoRound | CatchUp::Deadline => {
                on_next_park(&pool, 1, ParkPoint::AfterMessages, {
                    let pool = pool.clone();
                    move || {
                        assert_eq!(
                            pool.idle().search_count(),
                            1,
                            "worker one holds the count the kick took for it"
                        );
                        register();
                        if let CatchUp::GoRound = catch_up {
                            assert!(pool.mailbox(1).send(Message::WakeRoot).is_ok());
                        }
                    }
                });
                backlog.wake();
            }
            CatchUp::AfterSearch => {
                let searching = Arc::new(AtomicBool::new(false));
                on_next_park(&pool, 1, ParkPoint::BeforeIdle, {
                    let (pool, searching) = (pool.clone(), searching.clone());
                    move || {
                        spin_until(
                            || pool.idle().search_count() == 1 && is_waiting(&pool, 2),
                            "worker two must park again",
                        );
                        searching.store(true, Ordering::SeqCst);
                        spin_until(
                            || pool.queue(0).is_stealable(),
                            "the root must queue a stealable backlog",
                        );
                        register();
                    }
                });
                let _ = spawn_elsewhere(&context, async {});
                spin_until(
                    || searching.load(Ordering::SeqCst),
                    "worker one must search",
                );
                backlog.wake();
            }
        }
        spin_until(|| trigger.is_done(), "the callback must finish");
        backlog.join().await;
        woken.join().await;
        drop(write);
    });
}

#[test]
fn catch_up_callbacks_after_going_round_run_with_no_search_count() {
    catch_up_callback_after_the_count_returns(CatchUp::GoRound);
}

#[test]
fn catch_up_callbacks_after_an_expired_deadline_run_with_no_search_count() {
    catch_up_callback_after_the_count_returns(CatchUp::Deadline);
}

#[test]
fn catch_up_callbacks_after_a_search_finds_work_run_with_no_search_count() {
    catch_up_callback_after_the_count_returns(CatchUp::AfterSearch);
}

/// Where worker one waits in [`push_racing_a_park_reaches_the_worker`].
#[derive(Clone, Copy, Debug)]
enum WaitKind {
    Futex,
    Ring,
}

/// N: a foreign push racing worker one's park reaches it. Before worker one publishes, the
/// push finds no idle bit and the look after publishing finds the push; after it published,
/// the push claims it and wakes it from its futex or ring wait. The task runs on worker one,
/// which is not in the idle set while it runs.
#[test]
fn push_racing_a_park_reaches_the_worker() {
    for point in [ParkPoint::BeforeIdle, ParkPoint::BeforeWait] {
        for kind in [WaitKind::Futex, WaitKind::Ring] {
            push_racing_a_park(point, kind);
        }
    }
}

fn push_racing_a_park(point: ParkPoint, kind: WaitKind) {
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let pool = pool_of(&context);
        let (read, write) = pipe();
        let (_, worker_one) = spawn_elsewhere(&context, async move {
            if let WaitKind::Ring = kind {
                let _ = Operation::register(Request::Read { fd: read, len: 1 }).await;
            }
        });
        every_worker_waits(&pool).await;
        let ran = Arc::new(Mutex::new(None));
        on_next_park(&pool, 1, point, {
            let (context, pool, ran) = (context.child("raced"), pool.clone(), ran.clone());
            move || {
                let child = context.clone();
                thread::spawn(move || {
                    drop(child.spawn(move |_| async move {
                        *ran.lock().unwrap() =
                            Some((thread::current().id(), pool.idle().is_idle(1)));
                    }))
                })
                .join()
                .unwrap();
            }
        });
        // Start worker one's next park: a foreign spawn claims it while the root holds worker
        // zero.
        let _ = spawn_elsewhere(&context, async {});
        spin_until(|| ran.lock().unwrap().is_some(), "the raced push must run");
        let (thread, idle) = ran.lock().unwrap().unwrap();
        assert_eq!(
            thread, worker_one,
            "{point:?} {kind:?}: the push runs on worker one"
        );
        assert!(
            !idle,
            "{point:?} {kind:?}: a worker running a task is not idle"
        );
        drop(write);
    });
}

/// A spin outlasting the test's timeout, so only a push's wake signal can end it.
fn endless_spinner() -> SpinnerConfig {
    SpinnerConfig {
        budget_us: 60_000_000,
        max_budget_us: 60_000_000,
        quick_wake_us: 60_000_000,
    }
}

/// N: a push into the global queue ends a spinning worker's spin through its wake signal:
/// consecutive foreign spawns each start on worker one promptly, never waiting out the spin.
#[test]
fn push_ends_a_spin_through_the_wake_signal() {
    let config = config()
        .with_worker_threads(2)
        .with_idle_spinner(endless_spinner());
    Runner::new(config).start(|context| async move {
        let mut threads = std::collections::HashSet::new();
        for _ in 0..20 {
            let (task, thread) = spawn_elsewhere(&context, async {});
            task.await.unwrap();
            threads.insert(thread);
        }
        assert_eq!(threads.len(), 1, "every spawn starts on worker one");
    });
}

/// N: a worker whose spin ended on a push's signal consumes it: idle again, it spins out its
/// budget and then sleeps on its futex instead of spinning on a stale signal. Each round
/// forces a signalled spin: a hook at worker one's next wait (published idle, just before the
/// spin) makes a foreign push, which claims worker one and sets its wake signal, so the spin
/// that follows sees the signal at once. The root holds worker zero meanwhile, so the push can
/// claim no other worker. The round then asserts that the pushed task ran on worker one and
/// that worker one goes on to sleep on its futex, published idle.
#[test]
fn spinning_worker_sleeps_after_a_signalled_spin() {
    /// The wake-state bits of a futex sleep and of a pending wake.
    const FUTEX: u32 = 0b001;
    const SIGNAL: u32 = 0b100;
    let spinner = SpinnerConfig {
        budget_us: 1_000,
        max_budget_us: 1_000,
        quick_wake_us: 1_000,
    };
    Runner::new(config().with_worker_threads(2).with_idle_spinner(spinner)).start(
        |context| async move {
            let pool = pool_of(&context);
            for round in 0..3 {
                let ran = Arc::new(Mutex::new(None));
                on_next_park(&pool, 1, ParkPoint::BeforeWait, {
                    let (child, pool, ran) =
                        (context.child("signalled"), pool.clone(), ran.clone());
                    move || {
                        thread::spawn(move || {
                            drop(child.spawn(move |_| async move {
                                *ran.lock().unwrap() = Some(thread::current().id());
                            }))
                        })
                        .join()
                        .unwrap();
                        assert!(!pool.idle().is_idle(1), "the push claims worker one");
                        assert_ne!(
                            pool.mailbox(1).waker.bits() & SIGNAL,
                            0,
                            "the push signals worker one before its spin"
                        );
                    }
                });
                // Start worker one's next park: a foreign spawn claims it while the root holds
                // worker zero.
                let (_, worker_one) = spawn_elsewhere(&context, async {});
                spin_until(
                    || ran.lock().unwrap().is_some(),
                    "the push made before the spin must run",
                );
                assert_eq!(
                    *ran.lock().unwrap(),
                    Some(worker_one),
                    "round {round}: the signalled spin ended and worker one ran the push"
                );
                // A stale signal would end every later spin at once, and worker one would
                // never reach its futex.
                spin_until(
                    || pool.idle().is_idle(1) && pool.mailbox(1).waker.bits() & FUTEX != 0,
                    "worker one must sleep on its futex after a signalled spin",
                );
            }
        },
    );
}

/// O: a registration stays with the worker that first polled it. A task registers a read and
/// a one-hour sleep on worker zero, then a wake from worker one moves it there: polled on
/// worker one both stay pending, and the read's result still arrives.
#[test]
fn operation_and_sleep_follow_their_task_to_another_worker() {
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let root = thread::current().id();
        let (read, write) = pipe();
        let (polled_tx, polled_rx) = mpsc::channel::<(ThreadId, Waker)>();
        let task = context.clone().spawn(move |_| async move {
            let mut operation = Box::pin(Operation::register(Request::Read { fd: read, len: 4 }));
            let mut sleep = Box::pin(Sleep::new(Duration::from_secs(3600)));
            poll_fn(move |cx| {
                assert!(
                    sleep.as_mut().poll(cx).is_pending(),
                    "the sleep stays pending"
                );
                match operation.as_mut().poll(cx) {
                    Poll::Ready(output) => Poll::Ready(output),
                    Poll::Pending => {
                        polled_tx
                            .send((thread::current().id(), cx.waker().clone()))
                            .unwrap();
                        Poll::Pending
                    }
                }
            })
            .await
        });
        let next_poll = async || loop {
            match polled_rx.try_recv() {
                Ok(polled) => return polled,
                Err(_) => reschedule().await,
            }
        };
        let (first, waker) = next_poll().await;
        assert_eq!(
            first, root,
            "a quiet worker keeps its spawn, and registers there"
        );
        // A wake from worker one moves the task onto worker one's queue.
        let (mover, worker_one) = spawn_elsewhere(&context, async move { waker.wake() });
        mover.await.unwrap();
        let (second, _) = next_poll().await;
        assert_eq!(second, worker_one, "the wake moved the task to worker one");
        write_ping(&write);
        match task.await.unwrap() {
            RequestOutput::Read(Ok(data)) => assert_eq!(data, b"ping"),
            other => panic!("the read must complete through its owner: {other:?}"),
        }
    });
}

/// Records, when dropped, which thread dropped it and whether a worker's `Local` was there.
struct DropSite(Arc<Mutex<Option<DroppedAt>>>);

/// The dropping thread's name, and whether a worker's `Local` was installed there.
type DroppedAt = (Option<String>, bool);

impl Drop for DropSite {
    fn drop(&mut self) {
        let name = thread::current().name().map(str::to_owned);
        *self.0.lock().unwrap() = Some((name, Local::current().is_some()));
    }
}

/// Polls `sleep` once with the current task's waker and says whether it is pending.
async fn poll_once(sleep: &mut Pin<Box<Sleep>>) -> bool {
    poll_fn(|cx| Poll::Ready(sleep.as_mut().poll(cx).is_pending())).await
}

/// O: a task mid-poll on worker one while the runner shuts down. Teardown clears it during
/// the poll and leaves its future to the poller; a sleep owned by worker zero, polled after
/// the clear, is still pending (worker zero keeps its registrations until every pool worker
/// has stopped polling); the poller drops the future on its own thread after the poll.
#[test]
fn shutdown_while_a_task_is_mid_poll_on_another_worker() {
    let dropped = Arc::new(Mutex::new(None));
    let pending_after_clear = Arc::new(Mutex::new(None));
    let (site, seen) = (DropSite(dropped.clone()), pending_after_clear.clone());
    Runner::new(config().with_worker_threads(2)).start(move |context| async move {
        let shared = context.runtime().clone();
        let pool = pool_of(&context);
        let mut sleep = Box::pin(Sleep::new(Duration::from_secs(3600)));
        assert!(poll_once(&mut sleep).await, "registered on worker zero");
        let own: Arc<Mutex<Option<Task>>> = Arc::new(Mutex::new(None));
        let started = Arc::new(AtomicBool::new(false));
        let future = {
            let (own, started) = (own.clone(), started.clone());
            async move {
                let _site = site;
                assert_eq!(thread::current().name(), Some("iouring-pool-1"));
                assert!(poll_once(&mut sleep).await, "pending through its owner");
                started.store(true, Ordering::SeqCst);
                spin_until(|| shared.tasks.is_closed(), "the runner must shut down");
                let task = own.lock().unwrap().take().unwrap();
                spin_until(
                    || crate::task::cell::tests::cancelled(&task),
                    "teardown must clear the task during its poll",
                );
                drop(task);
                *seen.lock().unwrap() = Some(poll_once(&mut sleep).await);
                pending::<()>().await
            }
        };
        let (task, runnable) = Task::new(future, pool_task(&pool));
        *own.lock().unwrap() = Some(task.clone());
        assert!(context.runtime().tasks.insert(task).is_ok());
        thread::spawn(move || runnable.spawn()).join().unwrap();
        spin_until(|| started.load(Ordering::SeqCst), "the task must start");
    });
    assert_eq!(
        *pending_after_clear.lock().unwrap(),
        Some(true),
        "a sleep owned by worker zero stays pending while pool workers poll"
    );
    assert_eq!(
        *dropped.lock().unwrap(),
        Some((Some("iouring-pool-1".to_owned()), true)),
        "the poller drops the future on its own thread, with its worker state present"
    );
}

/// Polls `sleep` once with `waker` and says whether it is pending.
fn pending_with(sleep: &mut Pin<Box<Sleep>>, waker: &Waker) -> bool {
    sleep
        .as_mut()
        .poll(&mut TaskContext::from_waker(waker))
        .is_pending()
}

/// One wake of a [`SlotWaker`]: the waking thread, whether that thread's worker was in its
/// final cleanup, and whether the poller had already dropped the future that left the waker.
type SlotWake = (ThreadId, bool, bool);

/// A waker a poll on a worker that does not own the registration leaves in the registration's
/// shared slot. It records its wakes, and its strong count shows whether the slot still holds
/// it.
struct SlotWaker {
    wakes: Mutex<Vec<SlotWake>>,
    /// Where the task that left the waker records its future's drop.
    dropped: Arc<Mutex<Option<DroppedAt>>>,
}

impl SlotWaker {
    fn new(dropped: &Arc<Mutex<Option<DroppedAt>>>) -> Arc<Self> {
        Arc::new(Self {
            wakes: Mutex::new(Vec::new()),
            dropped: dropped.clone(),
        })
    }

    fn wakes(&self) -> Vec<SlotWake> {
        self.wakes.lock().unwrap().clone()
    }
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let closing = Local::current().is_some_and(|local| local.is_closing());
        let after_drop = self.dropped.lock().unwrap().is_some();
        self.wakes
            .lock()
            .unwrap()
            .push((thread::current().id(), closing, after_drop));
    }
}

/// What the task of [`shutdown_keeps_a_slot_waker_left_by_another_worker_until_polling_ends`]
/// saw after teardown cleared it: whether each sleep was still pending, and whether either
/// slot waker had been woken by then.
type SeenAfterClear = (bool, bool, bool);

/// O, adapted from the seed's `shutdown_retains_a_taken_forward_until_polling_ends`: this
/// runtime forwards no registration. A registration polled on a worker that does not own it
/// leaves that poll's waker in the registration's shared slot, which the owner wakes; through
/// shutdown the owner must keep that slot, and wake or release its waker, only once every pool
/// worker has stopped polling.
///
/// Two sleeps are registered on worker zero. A task on worker one queues `BATCH_SIZE` root
/// wakes in worker zero's mailbox, then polls both sleeps with recording wakers, leaving one in
/// each slot. The root, pending once with no wake of its own, completes through those
/// messages while both wakers are in their slots. After teardown has cleared the task during
/// its poll, both sleeps are still pending and neither waker has been woken. One sleep stays
/// with the future, which the poller drops after the poll: its waker is released (the slot
/// lets go of it) and never woken. The other escapes the task: worker zero wakes its waker
/// exactly once, on worker zero, in its final cleanup, after the poller dropped the future,
/// and lets go of it; the escaped sleep then reports its worker closed.
#[test]
fn shutdown_keeps_a_slot_waker_left_by_another_worker_until_polling_ends() {
    let runner = thread::current().id();
    let dropped = Arc::new(Mutex::new(None));
    let seen_after_clear: Arc<Mutex<Option<SeenAfterClear>>> = Arc::new(Mutex::new(None));
    let escaped: Arc<Mutex<Option<Pin<Box<Sleep>>>>> = Arc::new(Mutex::new(None));
    // `released` is left in the slot of the sleep that stays with the future, `woken` in the
    // slot of the sleep that escapes.
    let released = SlotWaker::new(&dropped);
    let woken = SlotWaker::new(&dropped);
    let site = DropSite(dropped.clone());
    let (seen, escape) = (seen_after_clear.clone(), escaped.clone());
    let (released_slot, woken_slot) = (released.clone(), woken.clone());
    Runner::new(config().with_worker_threads(2)).start(move |context| async move {
        let shared = context.runtime().clone();
        let pool = pool_of(&context);
        let mut staying = Box::pin(Sleep::new(Duration::from_secs(3600)));
        let mut leaving = Box::pin(Sleep::new(Duration::from_secs(3600)));
        assert!(poll_once(&mut staying).await, "registered on worker zero");
        assert!(poll_once(&mut leaving).await, "registered on worker zero");
        let own: Arc<Mutex<Option<Task>>> = Arc::new(Mutex::new(None));
        let queued = Arc::new(AtomicBool::new(false));
        let future = {
            let (own, queued, pool) = (own.clone(), queued.clone(), pool.clone());
            async move {
                let _site = site;
                assert_eq!(thread::current().name(), Some("iouring-pool-1"));
                for _ in 0..BATCH_SIZE {
                    assert!(pool.mailbox(0).send(Message::WakeRoot).is_ok());
                }
                let released_waker = Waker::from(released_slot.clone());
                let woken_waker = Waker::from(woken_slot.clone());
                assert!(
                    pending_with(&mut staying, &released_waker),
                    "pending through its owner"
                );
                assert!(
                    pending_with(&mut leaving, &woken_waker),
                    "pending through its owner"
                );
                queued.store(true, Ordering::SeqCst);
                spin_until(|| shared.tasks.is_closed(), "the runner must shut down");
                let task = own.lock().unwrap().take().unwrap();
                spin_until(
                    || crate::task::cell::tests::cancelled(&task),
                    "teardown must clear the task during its poll",
                );
                drop(task);
                // The same wakers again: the slots keep the ones they hold.
                let staying_pending = pending_with(&mut staying, &released_waker);
                let leaving_pending = pending_with(&mut leaving, &woken_waker);
                let none_woken = released_slot.wakes().is_empty() && woken_slot.wakes().is_empty();
                *seen.lock().unwrap() = Some((staying_pending, leaving_pending, none_woken));
                *escape.lock().unwrap() = Some(leaving);
                pending::<()>().await
            }
        };
        let (task, runnable) = Task::new(future, pool_task(&pool));
        *own.lock().unwrap() = Some(task.clone());
        assert!(context.runtime().tasks.insert(task).is_ok());
        // From outside the pool, so worker one starts the task while the root holds worker
        // zero until the root wakes are queued and both slots hold their wakers.
        thread::spawn(move || runnable.spawn()).join().unwrap();
        spin_until(
            || queued.load(Ordering::SeqCst),
            "the task must queue the root wakes and poll both sleeps",
        );
        // Pending once without waking itself: only the queued root wakes poll the root again.
        pending_once_unwoken().await;
    });
    assert_eq!(
        *seen_after_clear.lock().unwrap(),
        Some((true, true, true)),
        "after the clear both sleeps are pending and neither slot waker was woken"
    );
    assert_eq!(
        *dropped.lock().unwrap(),
        Some((Some("iouring-pool-1".to_owned()), true)),
        "the poller drops the future on its own thread, with its worker state present"
    );
    assert!(
        released.wakes().is_empty(),
        "the waker of a sleep dropped by its poller is never woken"
    );
    assert_eq!(
        Arc::strong_count(&released),
        1,
        "the owner let go of the slot waker of the dropped sleep"
    );
    assert_eq!(
        woken.wakes(),
        [(runner, true, true)],
        "the escaped sleep's slot waker is woken once, by worker zero's final cleanup, after \
         the poller dropped the future"
    );
    assert_eq!(
        Arc::strong_count(&woken),
        1,
        "the owner let go of the escaped sleep's slot waker"
    );
    let mut sleep = escaped.lock().unwrap().take().expect("the sleep escaped");
    let text = panic_text(catch_unwind(AssertUnwindSafe(|| {
        let _ = sleep
            .as_mut()
            .poll(&mut TaskContext::from_waker(Waker::noop()));
    })));
    assert_eq!(text, "io_uring sleep polled after its worker closed");
    drop(sleep);
}

/// A panic of a task polled on another worker follows the policy: caught, only its handle
/// sees `Exited` and the runner goes on; uncaught, it fails the runner. Either way the pool
/// ends clean.
#[test]
fn remote_task_panic_respects_policy() {
    for catch in [false, true] {
        let kept = KeptPool::default();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let kept = kept.clone();
            let config = config().with_worker_threads(2).with_catch_panics(catch);
            Runner::new(config).start(move |context| async move {
                kept.keep(&context);
                let (task, _) = spawn_elsewhere(&context, async {
                    panic!("remote ordinary task failed");
                });
                if catch {
                    assert_eq!(task.await, Err(Error::Exited));
                    let survivor = context.child("survivor").spawn(|_| async { 7 });
                    assert_eq!(survivor.await, Ok(7));
                } else {
                    pending::<()>().await;
                }
            })
        }));
        match result {
            Ok(()) => assert!(catch, "an uncaught remote panic fails the runner"),
            Err(payload) => {
                assert!(!catch, "a caught remote panic leaves the runner running");
                assert_eq!(message(&*payload), "remote ordinary task failed");
            }
        }
        kept.check();
    }
}

/// A task spawned on worker zero and completed on worker one leaves the task set once its
/// final poll returns, wherever that poll ran.
#[test]
fn task_completing_away_from_its_spawner_retires() {
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let live = || context.runtime().tasks.live();
        let baseline = live();
        let (finish, finished) = oneshot::channel::<()>();
        let task = context.child("traveller").spawn(|_| async move {
            let spawned_on = thread::current().id();
            finished.await.unwrap();
            (spawned_on, thread::current().id())
        });
        reschedule().await;
        assert_eq!(live(), baseline + 1);
        let (waker, other) = spawn_elsewhere(&context, async move {
            finish.send(()).unwrap();
        });
        waker.await.unwrap();
        let (spawned_on, completed_on) = task.await.unwrap();
        assert_eq!(spawned_on, thread::current().id());
        assert_eq!(completed_on, other, "the wake moved it to worker one");
        // The handle resolves inside the final poll; the worker removes the task after it.
        let deadline = Instant::now() + TEST_TIMEOUT;
        while live() != baseline {
            assert!(Instant::now() < deadline, "a completed task must retire");
            reschedule().await;
        }
    });
}

/// A pool worker that unwinds while published idle withdraws and fails the runner; the pool
/// ends clean.
#[test]
fn unwind_while_published_restores_the_idle_state() {
    let kept = KeptPool::default();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let kept = kept.clone();
        Runner::new(config().with_worker_threads(2)).start(move |context| async move {
            kept.keep(&context);
            let pool = pool_of(&context);
            // Worker one must have parked once, or the push below could claim it before the
            // hook is armed.
            spin_until(|| is_waiting(&pool, 1), "worker one must park");
            on_next_park(&pool, 1, ParkPoint::BeforeWait, || {
                panic!("injected unwind while published")
            });
            let _ = spawn_elsewhere(&context, async {});
            pending::<()>().await;
        })
    }));
    assert!(panic_text(result).contains("injected unwind while published"));
    kept.check();
}

/// Reads in flight on several workers count in one gauge, which returns to zero once
/// shutdown has retired them all.
#[test]
fn pending_operations_gauge_returns_to_zero_across_workers() {
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..6 {
        let (read, write) = pipe();
        readers.push(read);
        writers.push(write);
    }
    let shared = Runner::new(config().with_worker_threads(4)).start(|context| async move {
        let started = Arc::new(AtomicUsize::new(0));
        let mut threads = std::collections::HashSet::new();
        for (index, read) in readers.into_iter().enumerate() {
            let started = started.clone();
            let task = async move {
                let operation = Operation::register(Request::Read { fd: read, len: 1 });
                let mut operation = Box::pin(operation);
                poll_fn(|cx| {
                    assert!(operation.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                started.fetch_add(1, Ordering::SeqCst);
                let _ = operation.await;
            };
            if index == 0 {
                drop(context.child("here").spawn(move |_| task));
                reschedule().await;
                threads.insert(thread::current().id());
            } else {
                let (handle, thread) = spawn_elsewhere(&context, task);
                drop(handle);
                threads.insert(thread);
            }
        }
        assert!(threads.len() > 1, "the reads live on several workers");
        while started.load(Ordering::SeqCst) < 6 {
            reschedule().await;
        }
        assert_eq!(context.runtime().metrics.pending_operations.get(), 6);
        context.runtime().clone()
    });
    assert_eq!(shared.metrics.pending_operations.get(), 0);
    drop(writers);
}

/// A callback that blocks until one of the recorded tasks has run elsewhere.
struct WaitForRun {
    ran: Arc<AtomicUsize>,
    done: AtomicBool,
}

impl Wake for WaitForRun {
    fn wake(self: Arc<Self>) {
        spin_until(
            || self.ran.load(Ordering::SeqCst) != 0,
            "a parked worker must take the backlog",
        );
        self.done.store(true, Ordering::SeqCst);
    }
}

/// M: the last searcher to stop replays the kicks its count suppressed. The root's backlog
/// claims worker one, which then returns the claim's count to run a callback instead of
/// stealing; the callback waits for that backlog to run elsewhere while the root holds worker
/// zero, so only a replayed kick (reaching parked worker two) lets it finish.
#[test]
fn a_suppressed_kick_is_replayed_when_the_last_search_stops() {
    Runner::new(config().with_worker_threads(3)).start(|context| async move {
        let pool = pool_of(&context);
        let backlog = Recorded::spawn(&context, 2);
        every_worker_waits(&pool).await;
        let callback = Arc::new(WaitForRun {
            ran: backlog.ran.clone(),
            done: AtomicBool::new(false),
        });
        on_next_park(&pool, 1, ParkPoint::AfterMessages, {
            let (pool, callback) = (pool.clone(), callback.clone());
            move || {
                assert_eq!(
                    pool.idle().search_count(),
                    1,
                    "worker one holds the kick's count"
                );
                let local = Local::current().unwrap();
                local
                    .state()
                    .borrow_mut()
                    .timers
                    .insert_due(Waker::from(callback));
            }
        });
        backlog.wake();
        spin_until(
            || callback.done.load(Ordering::SeqCst),
            "the callback must finish",
        );
        backlog.join().await;
    });
}

/// Worker zero leaves the pool once its root completes: a single task the root's destructor
/// wakes goes to the global queue and runs on another worker, instead of waiting alone (and
/// unstealable) in a queue nobody drains any more.
#[test]
fn a_task_woken_by_the_root_destructor_runs_on_another_worker() {
    let progressed = Arc::new(AtomicBool::new(false));
    Runner::new(config().with_worker_threads(2)).start(|context| {
        let woken = Recorded::spawn(&context, 1);
        // Dropped with the root future, after its last poll: the destructor's wake.
        let guard = WakeOnDrop {
            wakers: woken.wakers.clone(),
            ran: woken.ran.clone(),
            progressed: progressed.clone(),
        };
        let wakers = woken.wakers.clone();
        let mut body = Box::pin(async move {
            while wakers.lock().unwrap().is_empty() {
                reschedule().await;
            }
        });
        poll_fn(move |cx| {
            let _ = &guard;
            body.as_mut().poll(cx)
        })
    });
    assert!(progressed.load(Ordering::SeqCst), "the woken task must run");
}

/// Writes registered and dropped unobserved, most of them queued behind a one-slot ring on
/// worker zero and on worker one, all reach the file by the time `start` returns: every ring
/// is drained at shutdown.
#[test]
fn shutdown_drains_queued_writes_on_every_ring() {
    let directory = Config::new().storage_directory().clone();
    std::fs::create_dir_all(&directory).unwrap();
    let config = config()
        .with_worker_threads(2)
        .with_ring_config(crate::RingConfig {
            size: 1,
            ..crate::RingConfig::default()
        });
    let paths: Vec<_> = (0..4_u8)
        .map(|actor| directory.join(format!("writer-{actor}")))
        .collect();
    Runner::new(config).start(|context| {
        let paths = paths.clone();
        async move {
            for (actor, path) in (0_u8..).zip(paths) {
                let write = async move {
                    let file = Arc::new(std::os::fd::OwnedFd::from(
                        std::fs::File::create(path).unwrap(),
                    ));
                    for offset in 0..8 {
                        let mut write = std::pin::pin!(Operation::register(Request::Write {
                            fd: file.clone(),
                            offset,
                            bufs: vec![actor + 1].into(),
                            sync: false,
                        }));
                        assert!(futures::poll!(&mut write).is_pending());
                    }
                    pending::<()>().await
                };
                // The first writer stays on worker zero; the others start on worker one.
                if actor == 0 {
                    drop(context.child("writer").spawn(move |_| write));
                } else {
                    drop(spawn_elsewhere(&context, write));
                }
            }
            reschedule().await;
        }
    });
    for (actor, path) in (0_u8..).zip(&paths) {
        assert_eq!(
            std::fs::read(path).unwrap(),
            [actor + 1; 8],
            "writer {actor}"
        );
    }
    std::fs::remove_dir_all(&directory).unwrap();
}

/// The owner of a bare (unsupervised) task delivered to `pool`.
fn pool_task(pool: &Arc<Pool>) -> TaskNode<LabelPath> {
    TaskNode::unsupervised(Home::Pool(Arc::downgrade(pool)))
}
