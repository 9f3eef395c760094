//! Incarnations whose task is aborted instead of ending by themselves: mid-handler, before
//! `on_start` returned, past a supervisor's shutdown timeout, on the pool, on a dedicated
//! thread and on a blocking one (a handler blocking its thread included), and when the runner
//! returns. Each must still end the way an end is kept: its joiners and monitors see
//! `ExitReason::Shutdown`, `actor_running` goes back down and `actor_exits_total` counts one
//! `shutdown`. An unsupervised actor's metrics say so by the time its first joiner hears of
//! the end.

use actors::prelude::*;
use actors::supervisor::{ChildSpec, Strategy, Supervisor};
use actors::{ActorId, Context, Error, ExitReason, Join};
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt as _, StreamExt as _};
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

/// An actor that hangs where it is told to: in `on_start` (when it has `entered` to say so),
/// or in `hang`. Declared once per placement.
macro_rules! hanging {
    ($name:ident $(, $placement:ident)?) => {
        #[actor($($placement)?)]
        struct $name {
            /// Set: `on_start` says so here and never returns.
            entered: Option<oneshot::Sender<()>>,
        }

        #[actor]
        impl $name {
            async fn on_start(&mut self) {
                if let Some(entered) = self.entered.take() {
                    let _ = entered.send(());
                    futures::future::pending::<()>().await;
                }
            }

            /// Never returns; says on `entered` that it runs.
            async fn hang(&mut self, entered: oneshot::Sender<()>) {
                let _ = entered.send(());
                futures::future::pending::<()>().await;
            }

            /// Blocks its thread until `gate`'s sender is dropped; says on `entered` that
            /// it runs.
            fn block(&mut self, entered: oneshot::Sender<()>, gate: std::sync::mpsc::Receiver<()>) {
                let _ = entered.send(());
                let _ = gate.recv();
            }

            fn ping(&self) {}

            fn finish(&mut self, ctx: &mut Context<Self>) {
                ctx.stop();
            }

            fn fail(&mut self) {
                panic!("fails on purpose");
            }
        }
    };
}

hanging!(Pooled);
hanging!(Dedicated, dedicated);
hanging!(Blocking, blocking);

/// What a [`Watcher`] is asked to monitor: a closure that monitors it from the watcher's
/// context (monitors take a concrete handle, and the targets here are of several types).
type Watch = Box<dyn FnOnce(&mut Context<Watcher>) + Send>;

/// Monitors what it is told to and reports each down notification on a channel.
#[actor]
struct Watcher {
    downs: mpsc::UnboundedSender<(ActorId, ExitReason)>,
}

#[actor]
impl Watcher {
    fn watch(&mut self, ctx: &mut Context<Self>, watch: Watch) {
        watch(ctx);
    }

    fn on_down(&mut self, id: ActorId, reason: ExitReason) {
        let _ = self.downs.unbounded_send((id, reason));
    }
}

/// A watcher and the channel it reports on.
fn watcher(
    context: &runtime::Context,
) -> (WatcherRef, mpsc::UnboundedReceiver<(ActorId, ExitReason)>) {
    let (downs, seen) = mpsc::unbounded();
    (Watcher { downs }.spawn(context), seen)
}

/// A joiner's waker that reads the metrics inside the wake the end makes: on the thread
/// that ended the actor, while the end tells its joiners, so the read shows what a joiner
/// hearing of the end can find at the earliest. Passes the wake on to the task that waits.
struct Reading {
    context: runtime::Context,
    read: Mutex<Option<String>>,
    waiting: Mutex<Option<Waker>>,
}

impl Wake for Reading {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.read
            .lock()
            .get_or_insert_with(|| self.context.encode());
        if let Some(waiting) = self.waiting.lock().as_ref() {
            waiting.wake_by_ref();
        }
    }
}

/// Registers `join` now (its actor must still run), and waits for it: its reason, and the
/// metrics as they were when the end woke it.
fn join_reading(
    join: Join,
    context: &runtime::Context,
) -> impl Future<Output = (ExitReason, String)> + use<> {
    let reading = Arc::new(Reading {
        context: context.clone(),
        read: Mutex::new(None),
        waiting: Mutex::new(None),
    });
    let waker = Waker::from(reading.clone());
    let mut join: Pin<Box<Join>> = Box::pin(join);
    assert!(
        join.as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
            .is_pending(),
        "the actor still runs"
    );
    async move {
        let reason = std::future::poll_fn(|cx| {
            // Set before the look: a wake after it is passed on, one before it is seen by it.
            *reading.waiting.lock() = Some(cx.waker().clone());
            // Only once woken: the end is recorded before its joiners are woken, and a poll
            // in between would see it before the metrics are read.
            if reading.read.lock().is_none() {
                return Poll::Pending;
            }
            join.as_mut()
                .poll(&mut std::task::Context::from_waker(&waker))
        })
        .await;
        let read = reading.read.lock().take().expect("woken");
        (reason, read)
    }
}

/// The value of the metric line `name{labels}` in `text`.
fn value<'a>(text: &'a str, name: &str, labels: &str) -> Option<&'a str> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
}

/// Asserts that `label`'s actors are all gone and that exactly one of them ended with
/// `shutdown`, in `text`.
fn assert_one_shutdown_and_none_running(text: &str, label: &str) {
    let actor = format!("actor=\"{label}\"");
    assert_eq!(
        value(text, "actor_running", &actor),
        Some("0"),
        "running:\n{text}"
    );
    let shutdown = format!("{actor},reason=\"shutdown\"");
    assert_eq!(
        value(text, "actor_exits_total", &shutdown),
        Some("1"),
        "exits:\n{text}"
    );
}

/// Waits until no actor labelled `label` runs: an incarnation aborted by its supervisor is
/// dropped on its task's next poll, which nothing the test holds waits for. A spin on the
/// scheduler, bounded by the test's timeout, not a sleep: it fails (times out) if the count
/// never comes down.
async fn until_none_running(context: &runtime::Context, label: &str) -> String {
    let actor = format!("actor=\"{label}\"");
    loop {
        let text = context.encode();
        if value(&text, "actor_running", &actor) == Some("0") {
            return text;
        }
        runtime::reschedule().await;
    }
}

/// Spawns the actor `spawn` makes inside a task of its own, which the test aborts; returns
/// the task's handle and the actor's ref.
async fn in_a_task<R: Send + 'static>(
    context: &runtime::Context,
    spawn: impl FnOnce(&runtime::Context) -> R + Send + 'static,
) -> (runtime::Handle<()>, R) {
    let (made, is_made) = oneshot::channel();
    let task = context.clone().spawn(move |scope| async move {
        let _ = made.send(spawn(&scope));
        futures::future::pending::<()>().await;
    });
    (task, is_made.await.expect("the task spawned the actor"))
}

/// The end an abort is compared with: an actor that stops by itself is counted (a `normal`
/// exit, no longer running) by the time its joiner hears of it, too.
#[runtime::test(timeout = "20s")]
async fn an_actor_that_stops_itself_is_counted_before_its_joiners_hear(context: runtime::Context) {
    let actor = Pooled { entered: None }.spawn(&context);
    actor.ping().await.unwrap();
    let joined = join_reading(actor.join(), &context);
    actor.tell_finish().await.unwrap();
    let (reason, metrics) = joined.await;
    assert_eq!(reason, ExitReason::Normal);
    assert_eq!(
        value(&metrics, "actor_running", "actor=\"pooled\""),
        Some("0"),
        "{metrics}"
    );
    assert_eq!(
        value(
            &metrics,
            "actor_exits_total",
            "actor=\"pooled\",reason=\"normal\""
        ),
        Some("1"),
        "{metrics}"
    );
}

/// Aborts the task an actor runs under while its handler awaits forever, then checks what
/// its monitor, a joiner and the metrics say.
macro_rules! abort_mid_handler {
    ($actor:ident, $actor_ref:ident, $label:literal, $context:expr) => {{
        let context: &runtime::Context = $context;
        let (watcher, mut downs) = watcher(context);
        let (task, actor) = in_a_task(context, |scope| $actor { entered: None }.spawn(scope)).await;
        let watched = actor.clone();
        watcher
            .watch(Box::new(move |ctx| drop(ctx.monitor(&watched))))
            .await
            .unwrap();
        let (entered, is_entered) = oneshot::channel();
        actor.tell_hang(entered).await.unwrap();
        is_entered.await.unwrap();
        let joined = join_reading(actor.join(), context);
        task.abort();
        let (reason, metrics) = joined.await;
        assert_eq!(reason, ExitReason::Shutdown);
        assert_one_shutdown_and_none_running(&metrics, $label);
        assert_eq!(downs.next().await, Some((actor.id(), ExitReason::Shutdown)));
        assert_eq!(actor.ping().await, Err(Error::Closed));
        let _: $actor_ref = actor;
    }};
}

/// An unsupervised pool actor aborted (its parent task's scope) while its handler awaits
/// forever: its monitor and joiners see `Shutdown`, and by the time its joiner hears of it,
/// `actor_running` is back down and the end is counted as `shutdown`.
#[runtime::test(timeout = "20s")]
async fn a_pool_actor_aborted_mid_handler_ends_with_shutdown(context: runtime::Context) {
    abort_mid_handler!(Pooled, PooledRef, "pooled", &context);
}

/// The same for a dedicated actor: its future is dropped on its own thread, where the abort's
/// wake has it polled.
#[runtime::test(timeout = "20s")]
async fn a_dedicated_actor_aborted_mid_handler_ends_with_shutdown(context: runtime::Context) {
    abort_mid_handler!(Dedicated, DedicatedRef, "dedicated", &context);
}

/// The same for a blocking actor whose handler awaits (its thread is free).
#[runtime::test(timeout = "20s")]
async fn a_blocking_actor_aborted_mid_handler_ends_with_shutdown(context: runtime::Context) {
    abort_mid_handler!(Blocking, BlockingRef, "blocking", &context);
}

/// A blocking actor aborted while its handler blocks its thread ends only once the handler
/// returns (nothing else may drop its future), and then as any aborted actor: `Shutdown`,
/// counted, no longer running.
#[runtime::test(timeout = "20s")]
async fn a_blocked_actor_aborted_ends_when_its_handler_returns(context: runtime::Context) {
    let (task, actor) = in_a_task(&context, |scope| Blocking { entered: None }.spawn(scope)).await;
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let (entered, is_entered) = oneshot::channel();
    actor.tell_block(entered, gate).await.unwrap();
    is_entered.await.unwrap();
    let mut joined = std::pin::pin!(join_reading(actor.join(), &context));
    task.abort();
    assert!(
        futures::poll!(joined.as_mut()).is_pending(),
        "its future is held by the blocked handler"
    );
    drop(release);
    let (reason, metrics) = joined.await;
    assert_eq!(reason, ExitReason::Shutdown);
    assert_one_shutdown_and_none_running(&metrics, "blocking");
}

/// An actor aborted before its `on_start` returned (it never took a message) ends the same
/// way, on the pool and on a thread of its own.
#[runtime::test(timeout = "20s")]
async fn an_actor_aborted_in_on_start_ends_with_shutdown(context: runtime::Context) {
    let (entered, is_entered) = oneshot::channel();
    let (task, pooled) = in_a_task(&context, |scope| {
        Pooled {
            entered: Some(entered),
        }
        .spawn(scope)
    })
    .await;
    is_entered.await.unwrap();
    let joined = join_reading(pooled.join(), &context);
    task.abort();
    let (reason, metrics) = joined.await;
    assert_eq!(reason, ExitReason::Shutdown);
    assert_one_shutdown_and_none_running(&metrics, "pooled");

    let (entered, is_entered) = oneshot::channel();
    let (task, dedicated) = in_a_task(&context, |scope| {
        Dedicated {
            entered: Some(entered),
        }
        .spawn(scope)
    })
    .await;
    is_entered.await.unwrap();
    let joined = join_reading(dedicated.join(), &context);
    task.abort();
    let (reason, metrics) = joined.await;
    assert_eq!(reason, ExitReason::Shutdown);
    assert_one_shutdown_and_none_running(&metrics, "dedicated");
}

/// A supervised child stuck in a handler past its shutdown timeout when its supervisor stops
/// is aborted: done for good, its monitor and joiners see `Shutdown`; its aborted incarnation
/// is counted as a `shutdown` exit and no longer runs once its future is dropped.
#[runtime::test(timeout = "20s")]
async fn a_supervised_child_aborted_for_good_ends_with_shutdown(context: runtime::Context) {
    let (watcher, mut downs) = watcher(&context);
    let mut supervisor = Supervisor::new("stuck", Strategy::OneForOne);
    let child = supervisor.child(
        ChildSpec::new(|| Pooled { entered: None }).shutdown_timeout(Duration::from_millis(50)),
    );
    let supervisor = supervisor.spawn(&context);
    let watched = child.clone();
    watcher
        .watch(Box::new(move |ctx| drop(ctx.monitor(&watched))))
        .await
        .unwrap();
    let (entered, is_entered) = oneshot::channel();
    child.tell_hang(entered).await.unwrap();
    is_entered.await.unwrap();
    let joined = child.join();
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
    assert_eq!(joined.await, ExitReason::Shutdown);
    assert_eq!(downs.next().await, Some((child.id(), ExitReason::Shutdown)));
    let metrics = until_none_running(&context, "pooled").await;
    assert_one_shutdown_and_none_running(&metrics, "pooled");
    assert_eq!(
        value(&metrics, "actor_restarts_total", "actor=\"pooled\""),
        Some("0")
    );
}

/// A supervised child aborted past its shutdown timeout to be restarted (one-for-all, its
/// sibling failed) is gone, counted, before its next incarnation starts: one running, one
/// `shutdown` exit, one restart.
#[runtime::test(timeout = "20s")]
async fn a_supervised_child_aborted_for_a_restart_is_counted_once(context: runtime::Context) {
    let mut supervisor =
        Supervisor::new("restarting", Strategy::OneForAll).intensity(10, Duration::from_secs(60));
    let stuck = supervisor.child(
        ChildSpec::new(|| Pooled { entered: None }).shutdown_timeout(Duration::from_millis(50)),
    );
    let sibling = supervisor.child(ChildSpec::new(|| Dedicated { entered: None }));
    let supervisor = supervisor.spawn(&context);
    let (entered, is_entered) = oneshot::channel();
    stuck.tell_hang(entered).await.unwrap();
    is_entered.await.unwrap();
    assert_eq!(
        sibling.fail().await,
        Err(Error::Panicked { actor: "dedicated" })
    );
    sibling.ping().await.unwrap();
    stuck.ping().await.unwrap();
    let metrics = context.encode();
    let actor = "actor=\"pooled\"";
    assert_eq!(
        value(&metrics, "actor_running", actor),
        Some("1"),
        "{metrics}"
    );
    assert_eq!(
        value(
            &metrics,
            "actor_exits_total",
            "actor=\"pooled\",reason=\"shutdown\""
        ),
        Some("1"),
        "{metrics}"
    );
    assert_eq!(value(&metrics, "actor_restarts_total", actor), Some("1"));
    assert_eq!(supervisor.stop().await, ExitReason::Stopped);
}

/// A supervisor aborted (its parent task's scope) while its child's `on_start` hangs: the
/// supervisor and the child end with `Shutdown`, and the child's aborted incarnation, which
/// never started, is counted once it is dropped.
#[runtime::test(timeout = "20s")]
async fn a_child_aborted_in_on_start_with_its_supervisor_ends_with_shutdown(
    context: runtime::Context,
) {
    let (entered, is_entered) = oneshot::channel();
    let entered = Mutex::new(Some(entered));
    let (task, (supervisor, child)) = in_a_task(&context, move |scope| {
        let mut supervisor = Supervisor::new("starting", Strategy::OneForOne);
        let child = supervisor.child(ChildSpec::new(move || Pooled {
            entered: entered.lock().take(),
        }));
        (supervisor.spawn(scope), child)
    })
    .await;
    is_entered.await.unwrap();
    let joined = child.join();
    task.abort();
    assert_eq!(supervisor.join().await, ExitReason::Shutdown);
    assert_eq!(joined.await, ExitReason::Shutdown);
    let metrics = until_none_running(&context, "pooled").await;
    assert_one_shutdown_and_none_running(&metrics, "pooled");
}

/// Actors still running when the runner returns (a handler awaiting forever, on the pool and
/// on a dedicated thread) are aborted by its shutdown: their joins, awaited afterwards off any
/// runtime, see `Shutdown`, and the runner's metrics count them ended.
#[test]
fn actors_running_when_the_runner_returns_end_with_shutdown() {
    let config = runtime::Config::new().with_worker_threads(2);
    let (context, joins) = runtime::Runner::new(config).start(|context| async move {
        let mut joins = Vec::new();
        let pooled = Pooled { entered: None }.spawn(&context);
        let (entered, is_entered) = oneshot::channel();
        pooled.tell_hang(entered).await.unwrap();
        is_entered.await.unwrap();
        joins.push(pooled.join());
        let dedicated = Dedicated { entered: None }.spawn(&context);
        let (entered, is_entered) = oneshot::channel();
        dedicated.tell_hang(entered).await.unwrap();
        is_entered.await.unwrap();
        joins.push(dedicated.join());
        (context, joins)
    });
    for join in joins {
        assert_eq!(join.now_or_never(), Some(ExitReason::Shutdown));
    }
    let metrics = context.encode();
    assert_one_shutdown_and_none_running(&metrics, "pooled");
    assert_one_shutdown_and_none_running(&metrics, "dedicated");
}
