//! Timers and attached streams through the public API: mailbox order, cancellation by
//! handle and by stop, no keep-alive, at most one pending tick, backpressure on a stream,
//! and its end notification.

use actors::prelude::*;
use actors::{Context, ExitReason, Timer};
use futures::StreamExt as _;
use futures::channel::oneshot;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[actor(mailbox = 4)]
struct Clocked {
    events: Vec<String>,
    timers: Vec<Timer>,
    ticks: usize,
}

#[actor]
impl Clocked {
    async fn hold(&mut self, started: oneshot::Sender<()>, gate: oneshot::Receiver<()>) {
        let _ = started.send(());
        let _ = gate.await;
        self.events.push("hold".into());
    }

    fn mark(&mut self, what: String) {
        self.events.push(what);
    }

    fn events(&self) -> Vec<String> {
        self.events.clone()
    }

    /// Records `label` after `delay_ms`; replies with the timer's index.
    fn after(&mut self, ctx: &mut Context<Self>, delay_ms: u64, label: String) -> usize {
        let timer = ctx.run_after(Duration::from_millis(delay_ms), move |this, _| {
            this.events.push(label);
        });
        self.timers.push(timer);
        self.timers.len() - 1
    }

    /// Records `label` after `delay_ms`; replies with the timer.
    fn after_handle(&mut self, ctx: &mut Context<Self>, delay_ms: u64, label: String) -> Timer {
        ctx.run_after(Duration::from_millis(delay_ms), move |this, _| {
            this.events.push(label);
        })
    }

    /// Counts a tick every `period_ms`; replies with the timer.
    fn every_handle(&mut self, ctx: &mut Context<Self>, period_ms: u64) -> Timer {
        ctx.run_every(Duration::from_millis(period_ms), |this, _| this.ticks += 1)
    }

    /// Counts a tick every `period_ms`.
    fn every(&mut self, ctx: &mut Context<Self>, period_ms: u64) -> usize {
        let timer = ctx.run_every(Duration::from_millis(period_ms), |this, _| this.ticks += 1);
        self.timers.push(timer);
        self.timers.len() - 1
    }

    /// Handles `0..count` (forever without a count), counting the items pulled in `pulled`.
    fn attach_numbers(
        &mut self,
        ctx: &mut Context<Self>,
        count: Option<u64>,
        pulled: Arc<AtomicUsize>,
    ) -> usize {
        let numbers = futures::stream::iter(0..count.unwrap_or(u64::MAX)).inspect(move |_| {
            pulled.fetch_add(1, Ordering::SeqCst);
        });
        let attached = ctx.attach_with_end(
            numbers,
            |this, _, number| this.events.push(number.to_string()),
            |this, _| this.events.push("end".into()),
        );
        self.timers.push(attached);
        self.timers.len() - 1
    }

    fn cancel(&mut self, index: usize) {
        self.timers[index].cancel();
    }

    fn finished(&self, index: usize) -> bool {
        self.timers[index].is_finished()
    }

    fn ticks(&self) -> usize {
        self.ticks
    }

    /// `hold`, noting the ticks run so far.
    async fn hold_counting(
        &mut self,
        started: oneshot::Sender<usize>,
        gate: oneshot::Receiver<()>,
    ) {
        let _ = started.send(self.ticks);
        let _ = gate.await;
    }

    fn boom(&mut self) {
        panic!("boom");
    }
}

fn clocked() -> Clocked {
    Clocked {
        events: vec![],
        timers: vec![],
        ticks: 0,
    }
}

/// Holds `actor` in its `hold` handler until the returned sender is used.
async fn hold(actor: &ClockedRef) -> oneshot::Sender<()> {
    let (open, gate) = oneshot::channel();
    let (started, taken) = oneshot::channel();
    actor.tell_hold(started, gate).await.unwrap();
    taken.await.unwrap();
    open
}

/// Waits (checking every millisecond, for at most 10 s) until `done` holds.
async fn eventually(context: &runtime::Context, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..10_000 {
        if done().await {
            return;
        }
        context.sleep(Duration::from_millis(1)).await;
    }
    panic!("the condition never held");
}

/// A timer's call is queued like a message: behind what was queued before it fired, ahead
/// of what comes after.
#[runtime::test(timeout = "20s")]
async fn a_timer_runs_in_mailbox_order(context: runtime::Context) {
    let actor = clocked().spawn(&context);
    let first = hold(&actor).await;
    actor.tell_mark("before".into()).await.unwrap();
    actor.tell_after(1, "timer".into()).await.unwrap();
    // Queued behind the timer's creation: the timer's call lands behind this hold.
    let (second_open, second_gate) = oneshot::channel();
    let (started, taken) = oneshot::channel();
    actor.tell_hold(started, second_gate).await.unwrap();
    first.send(()).unwrap();
    taken.await.unwrap();
    // The timer fired and queued its call while the second hold runs.
    eventually(&context, async || actor.inner().queued() == 1).await;
    actor.tell_mark("after".into()).await.unwrap();
    second_open.send(()).unwrap();
    assert_eq!(
        actor.events().await.unwrap(),
        ["hold", "before", "hold", "timer", "after"]
    );
    assert_eq!(actor.finished(0).await, Ok(true));
}

/// A cancelled timer never runs, whether cancelled before it fired or after its call was
/// queued.
#[runtime::test(timeout = "20s")]
async fn a_cancelled_timer_never_runs(context: runtime::Context) {
    let actor = clocked().spawn(&context);
    let early = actor.after(20, "cancelled early".into()).await.unwrap();
    actor.cancel(early).await.unwrap();
    // Made while the actor is busy, so that its call is queued behind a second hold.
    let first = hold(&actor).await;
    let made = actor.after_handle(1, "cancelled queued".into());
    let (second_open, second_gate) = oneshot::channel();
    let (started, taken) = oneshot::channel();
    let (made, ()) = futures::join!(made, async {
        actor.tell_hold(started, second_gate).await.unwrap();
        first.send(()).unwrap();
    });
    let queued = made.unwrap();
    taken.await.unwrap();
    eventually(&context, async || actor.inner().queued() == 1).await;
    queued.cancel();
    assert!(queued.is_finished());
    second_open.send(()).unwrap();
    // A later timer that runs shows the first one's deadline passed.
    actor.after(40, "later".into()).await.unwrap();
    eventually(&context, async || {
        actor.events().await.unwrap().contains(&"later".to_string())
    })
    .await;
    assert_eq!(actor.events().await.unwrap(), ["hold", "hold", "later"]);
    assert_eq!(actor.finished(early).await, Ok(true));
}

/// A timer's call still queued when its incarnation fails does nothing on the restarted
/// one.
#[runtime::test(timeout = "20s")]
async fn a_timer_does_not_outlive_its_incarnation(context: runtime::Context) {
    use actors::supervisor::{ChildSpec, Strategy, Supervisor};
    let mut supervisor = Supervisor::new("clocks", Strategy::OneForOne);
    let actor = supervisor.child(ChildSpec::new(clocked));
    let _supervisor = supervisor.spawn(&context);
    let first = hold(&actor).await;
    actor.tell_after(1, "stale".into()).await.unwrap();
    let (second_open, second_gate) = oneshot::channel();
    let (started, taken) = oneshot::channel();
    actor.tell_hold(started, second_gate).await.unwrap();
    actor.tell_boom().await.unwrap();
    first.send(()).unwrap();
    taken.await.unwrap();
    // `boom`, then the timer's call.
    eventually(&context, async || actor.inner().queued() == 2).await;
    second_open.send(()).unwrap();
    // The restarted incarnation took the call and did nothing with it.
    assert_eq!(actor.events().await, Ok(vec![]));
}

/// A running interval does not keep its actor alive, and stopping the actor cancels it.
#[runtime::test(timeout = "20s")]
async fn timers_end_with_their_actor(context: runtime::Context) {
    let actor = clocked().spawn(&context);
    actor.every(1).await.unwrap();
    actor.after(60_000, "never".into()).await.unwrap();
    eventually(&context, async || actor.ticks().await.unwrap() >= 3).await;
    let weak = actor.downgrade();
    let ended = actor.join();
    drop(actor);
    assert_eq!(ended.await, ExitReason::Normal);
    assert!(weak.upgrade().is_none());

    let actor = clocked().spawn(&context);
    let interval = actor.every_handle(1).await.unwrap();
    eventually(&context, async || actor.ticks().await.unwrap() >= 1).await;
    assert!(!interval.is_finished());
    assert_eq!(actor.stop().await, ExitReason::Stopped);
    // The actor's end aborts the interval's task, whose end marks it finished.
    eventually(&context, async || interval.is_finished()).await;
}

/// Under a held actor and then a full mailbox, an interval queues at most one tick: the
/// ticks run after the hold are at most that one (and one more due as it ran), not one per
/// period missed.
#[runtime::test(timeout = "20s")]
async fn an_interval_never_piles_up_ticks(context: runtime::Context) {
    let actor = clocked().spawn(&context);
    actor.every(1).await.unwrap();
    let (open, gate) = oneshot::channel();
    let (started, taken) = oneshot::channel();
    actor.tell_hold_counting(started, gate).await.unwrap();
    let before = taken.await.unwrap();
    // Twenty periods pass while the actor is held.
    context.sleep(Duration::from_millis(20)).await;
    assert!(actor.inner().queued() <= 1, "{}", actor.inner().queued());
    // Fill the rest of the mailbox; twenty more periods.
    while actor.try_mark("filler".into()).is_ok() {}
    context.sleep(Duration::from_millis(20)).await;
    open.send(()).unwrap();
    let ticks = actor.ticks().await.unwrap();
    assert!(
        ticks - before <= 2,
        "{} ticks ran after 40 periods held",
        ticks - before
    );
    assert!(actor.stop().await.is_normal());
}

/// An attached stream's items interleave with messages in mailbox order, its end is
/// handled once after its last item, and a full mailbox stops the stream being pulled.
#[runtime::test(timeout = "20s")]
async fn an_attached_stream_is_handled_in_order_with_backpressure(context: runtime::Context) {
    let actor = clocked().spawn(&context);
    let pulled = Arc::new(AtomicUsize::new(0));
    let open = hold(&actor).await;
    actor.tell_mark("first".into()).await.unwrap();
    actor
        .tell_attach_numbers(Some(3), pulled.clone())
        .await
        .unwrap();
    open.send(()).unwrap();
    eventually(&context, async || {
        actor.events().await.unwrap().contains(&"end".to_string())
    })
    .await;
    actor.tell_mark("last".into()).await.unwrap();
    let events = actor.events().await.unwrap();
    assert_eq!(events, ["hold", "first", "0", "1", "2", "end", "last"]);
    assert_eq!(pulled.load(Ordering::SeqCst), 3);
    assert_eq!(actor.finished(0).await, Ok(true));

    // An endless stream into a held actor: pulled only as far as the mailbox has room.
    let actor = clocked().spawn(&context);
    let pulled = Arc::new(AtomicUsize::new(0));
    let index = actor.attach_numbers(None, pulled.clone()).await.unwrap();
    let open = hold(&actor).await;
    eventually(&context, async || actor.inner().queued() == 4).await;
    // Time for a producer without backpressure to run far ahead.
    context.sleep(Duration::from_millis(20)).await;
    let taken = pulled.load(Ordering::SeqCst);
    open.send(()).unwrap();
    actor.cancel(index).await.unwrap();
    let events = actor.events().await.unwrap();
    let before = events.iter().position(|event| event == "hold").unwrap();
    // Items handled before the hold, four queued (the mailbox's capacity), and one taken
    // ahead of room.
    assert!(
        taken <= before + 4 + 1,
        "{taken} pulled, {before} handled before the hold"
    );
    assert_eq!(actor.stop().await, ExitReason::Stopped);
}
