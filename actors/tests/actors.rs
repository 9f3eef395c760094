//! Actors through the public API: asks, tells and `try_` sends, order per sender,
//! backpressure, placement, the ways an actor stops, and its metrics.

use actors::prelude::*;
use actors::{Context, Error, ExitReason};
use futures::FutureExt as _;
use futures::channel::oneshot;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[actor(mailbox = 4)]
struct Counter {
    total: u64,
}

#[actor]
impl Counter {
    /// Adds `by`; replies with the new total.
    async fn add(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }

    fn total(&self) -> u64 {
        self.total
    }

    fn halt(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// An ask replies; a tell is handled in order after the asks sent before it; `try_` sends
/// while there is room.
#[runtime::test(timeout = "20s")]
async fn asks_tells_and_tries_reach_the_actor(context: runtime::Context) {
    let counter = Counter { total: 0 }.spawn(&context);
    assert_eq!(counter.add(2).await, Ok(2));
    counter.tell_add(3).await.unwrap();
    counter.try_add(5).unwrap();
    assert_eq!(counter.total().await, Ok(10));
    assert_eq!(counter.inner().capacity(), 4);
}

/// Messages from one sender are handled in the order sent, whatever other senders do.
#[runtime::test(timeout = "20s")]
async fn each_senders_messages_are_handled_in_order(context: runtime::Context) {
    #[actor(mailbox = 8)]
    struct Log {
        seen: Vec<(usize, usize)>,
    }

    #[actor]
    impl Log {
        fn record(&mut self, sender: usize, sequence: usize) {
            self.seen.push((sender, sequence));
        }

        fn take(&mut self) -> Vec<(usize, usize)> {
            std::mem::take(&mut self.seen)
        }
    }

    const SENDERS: usize = 4;
    const EACH: usize = 500;
    let log = Log { seen: Vec::new() }.spawn(&context);
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let log = log.clone();
            context.clone().spawn(move |_| async move {
                for sequence in 0..EACH {
                    log.tell_record(sender, sequence).await.unwrap();
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.unwrap();
    }
    let seen = log.take().await.unwrap();
    assert_eq!(seen.len(), SENDERS * EACH);
    let mut next = [0; SENDERS];
    for (sender, sequence) in seen {
        assert_eq!(sequence, next[sender], "sender {sender} out of order");
        next[sender] += 1;
    }
}

/// With `mailbox = 1` and a handler that waits for a gate, the mailbox fills: `try_` reports
/// `Full`, a tell waits (backpressure) and completes once the actor takes a message.
#[runtime::test(timeout = "20s")]
async fn a_full_mailbox_holds_senders_back(context: runtime::Context) {
    #[actor(mailbox = 1)]
    struct Slow {
        handled: usize,
    }

    #[actor]
    impl Slow {
        async fn wait(&mut self, gate: oneshot::Receiver<()>) {
            let _ = gate.await;
            self.handled += 1;
        }

        fn handled(&self) -> usize {
            self.handled
        }
    }

    let slow = Slow { handled: 0 }.spawn(&context);
    let (open_first, first) = oneshot::channel();
    let (open_second, second) = oneshot::channel();
    let (_never, third) = oneshot::channel::<()>();
    let (open_fourth, fourth) = oneshot::channel::<()>();
    // The second send finds room only once the actor took the first, whose handler then
    // waits: the second message fills the mailbox until the gate opens.
    slow.tell_wait(first).await.unwrap();
    slow.tell_wait(second).await.unwrap();
    assert_eq!(slow.inner().queued(), 1);
    assert_eq!(slow.try_wait(third), Err(Error::Full));
    let mut sender = {
        let slow = slow.clone();
        context
            .clone()
            .spawn(move |_| async move { slow.tell_wait(fourth).await })
    };
    for _ in 0..10 {
        runtime::reschedule().await;
    }
    assert!(
        (&mut sender).now_or_never().is_none(),
        "a send to a full mailbox waits"
    );
    assert_eq!(slow.inner().queued(), 1);
    open_first.send(()).unwrap();
    // The actor takes the second message, which frees the slot the waiting send takes.
    sender.await.unwrap().unwrap();
    open_second.send(()).unwrap();
    open_fourth.send(()).unwrap();
    assert_eq!(slow.handled().await, Ok(3));
}

/// Each placement runs its handlers where it says: pool actors on pool workers (or worker
/// zero), dedicated ones on a dedicated thread, blocking ones on a blocking thread.
#[runtime::test(timeout = "20s")]
async fn each_placement_runs_where_it_says(context: runtime::Context) {
    #[actor]
    struct OnPool;
    #[actor]
    impl OnPool {
        fn thread(&self) -> String {
            thread_name()
        }
    }

    #[actor(dedicated)]
    struct OnOwnThread;
    #[actor]
    impl OnOwnThread {
        fn thread(&self) -> (String, std::thread::ThreadId) {
            (thread_name(), std::thread::current().id())
        }
    }

    #[actor(blocking, name = "blocker")]
    struct MayBlock;
    #[actor]
    impl MayBlock {
        fn thread(&self) -> String {
            // Blocking is what this placement is for.
            std::thread::sleep(std::time::Duration::from_millis(1));
            thread_name()
        }
    }

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_string()
    }

    let main = thread_name();
    let pool = OnPool.spawn(&context).thread().await.unwrap();
    assert!(
        pool.starts_with("iouring-pool-") || pool == main,
        "a pool actor ran on {pool:?}"
    );
    let dedicated = OnOwnThread.spawn(&context);
    let (name, id) = dedicated.thread().await.unwrap();
    assert_eq!(name, "iouring-dedicated");
    assert_eq!(
        dedicated.thread().await.unwrap().1,
        id,
        "the same thread throughout"
    );
    let blocking = MayBlock.spawn(&context).thread().await.unwrap();
    assert_eq!(blocking, "iouring-blocking");
}

/// Hooks see the actor start and stop; the actor stops when its last ref is dropped, after
/// handling what was queued.
#[runtime::test(timeout = "20s")]
async fn dropping_every_ref_stops_the_actor_after_its_queue(context: runtime::Context) {
    #[actor]
    struct Hooked {
        events: Arc<parking_lot::Mutex<Vec<String>>>,
        stopped: Option<oneshot::Sender<()>>,
    }

    #[actor]
    impl Hooked {
        async fn on_start(&mut self) {
            self.events.lock().push("start".into());
        }

        fn note(&mut self, event: String) {
            self.events.lock().push(event);
        }

        fn on_stop(&mut self, ctx: &mut Context<Self>) {
            assert_eq!(ctx.label(), "hooked");
            self.events.lock().push("stop".into());
            let _ = self.stopped.take().unwrap().send(());
        }
    }

    let events = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (stopped, is_stopped) = oneshot::channel();
    let hooked = Hooked {
        events: events.clone(),
        stopped: Some(stopped),
    }
    .spawn(&context);
    for event in ["a", "b", "c"] {
        hooked.tell_note(event.into()).await.unwrap();
    }
    drop(hooked);
    is_stopped.await.unwrap();
    assert_eq!(*events.lock(), ["start", "a", "b", "c", "stop"]);
}

/// `ctx.stop()` stops the actor after the current handler: asks queued behind it, and any
/// sent later, resolve to `Closed`.
#[runtime::test(timeout = "20s")]
async fn a_stopped_actor_answers_closed(context: runtime::Context) {
    let counter = Counter { total: 0 }.spawn(&context);
    counter.add(1).await.unwrap();
    let queued = {
        let counter = counter.clone();
        context.clone().spawn(move |_| async move {
            // Sent right behind the stop: handled never.
            counter.add(1).await
        })
    };
    counter.halt().await.unwrap();
    let queued = queued.await.unwrap();
    assert!(
        queued == Err(Error::Closed) || queued == Ok(2),
        "an ask either beat the stop or was closed: {queued:?}"
    );
    assert_eq!(counter.add(1).await, Err(Error::Closed));
    assert_eq!(counter.try_add(1), Err(Error::Closed));
    assert_eq!(counter.tell_add(1).await, Err(Error::Closed));
    assert!(counter.inner().is_closed());
}

/// An actor stops when the scope it was spawned in ends: its task is aborted with the
/// parent's, and asks resolve to `Closed` rather than hang.
#[runtime::test(timeout = "20s")]
async fn an_actor_stops_with_its_parent_scope(context: runtime::Context) {
    let (made, counter) = oneshot::channel();
    let parent = context.clone().spawn(move |context| async move {
        let _ = made.send(Counter { total: 0 }.spawn(&context));
        // The parent ends here; the actor is its descendant.
    });
    let counter = counter.await.unwrap();
    parent.await.unwrap();
    assert_eq!(counter.add(1).await, Err(Error::Closed));
}

/// A handler's panic ends its unsupervised actor, not the program, whatever the runtime's
/// panic policy (here the default: task panics not caught): the ask it was handling resolves
/// to `Panicked`, later ones to `Closed`, `on_stop` runs, joiners see
/// `ExitReason::Panicked` with the message, and the rest of the program goes on.
#[runtime::test(timeout = "20s")]
async fn an_unsupervised_panic_ends_the_actor_and_not_the_program(context: runtime::Context) {
    static STOPS: AtomicUsize = AtomicUsize::new(0);

    #[actor]
    struct Fragile;

    #[actor]
    impl Fragile {
        async fn fail(&mut self) -> u8 {
            runtime::reschedule().await;
            panic!("fragile handler failed");
        }

        fn on_stop(&mut self) {
            STOPS.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[actor]
    struct Sturdy;

    #[actor]
    impl Sturdy {
        fn echo(&self, n: u8) -> u8 {
            n
        }
    }

    let fragile = Fragile.spawn(&context);
    let sturdy = Sturdy.spawn(&context);
    assert_eq!(
        fragile.fail().await,
        Err(Error::Panicked { actor: "fragile" })
    );
    assert_eq!(fragile.fail().await, Err(Error::Closed));
    assert_eq!(STOPS.load(Ordering::SeqCst), 1);
    assert_eq!(
        fragile.join().await,
        ExitReason::Panicked("fragile handler failed".to_string())
    );
    // The program goes on: another actor answers, a plain task runs to its end.
    assert_eq!(sturdy.echo(7).await, Ok(7));
    assert_eq!(context.clone().spawn(|_| async { 9 }).await, Ok(9));
}

/// `#[actor(panic_fails_runner = true)]` opts back in: the actor's panic fails the runner, as
/// a plain task's panic does without `catch_panics`.
#[runtime::test(timeout = "20s")]
#[should_panic(expected = "fragile handler failed")]
async fn an_actor_that_opts_in_fails_the_runner_on_its_panic(context: runtime::Context) {
    #[actor(panic_fails_runner = true)]
    struct Fragile;

    #[actor]
    impl Fragile {
        fn fail(&mut self) {
            panic!("fragile handler failed");
        }
    }

    let fragile = Fragile.spawn(&context);
    let _ = fragile.fail().await;
    // The runner fails with the actor's panic; this wait never ends on its own.
    futures::future::pending::<()>().await;
}

/// Handled messages, restarts and running actors show per label in `context.encode()`.
#[runtime::test(timeout = "20s")]
async fn metrics_per_label_show_in_the_exposition(context: runtime::Context) {
    #[actor(name = "metered")]
    struct Metered;
    #[actor]
    impl Metered {
        fn ping(&self) {}
    }

    let metered = Metered.spawn(&context);
    for _ in 0..5 {
        metered.ping().await.unwrap();
    }
    // The counts are published when the mailbox runs empty, before the next wait: one more
    // ask makes sure the fifth has been published.
    metered.ping().await.unwrap();
    let text = context.encode();
    let handled = text
        .lines()
        .find(|line| line.starts_with("actor_messages_handled_total{actor=\"metered\"}"))
        .unwrap_or_else(|| panic!("no handled count in:\n{text}"));
    let count: u64 = handled.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 5, "{handled}");
    assert!(
        text.contains("actor_running{actor=\"metered\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("actor_handler_seconds_total{actor=\"metered\"}"),
        "{text}"
    );
    assert!(
        text.contains("actor_mailbox_depth{actor=\"metered\"} 0"),
        "{text}"
    );
}
