//! The messaging vocabulary through the public API: ask deadlines (per call and the actor's
//! default), delegated replies, and the deadline metric.

use actors::prelude::*;
use actors::{Context, Error, Reply};
use futures::channel::oneshot;
use std::time::Duration;

/// An actor whose `hold` handler waits for a gate the test opens, so that a later ask is
/// queued behind it for as long as the test wants.
#[actor(mailbox = 8)]
struct Gated {
    handled: Vec<&'static str>,
}

#[actor]
impl Gated {
    async fn hold(&mut self, gate: oneshot::Receiver<()>) {
        let _ = gate.await;
        self.handled.push("hold");
    }

    /// `hold`, telling `started` once it runs.
    async fn hold_signalled(&mut self, started: oneshot::Sender<()>, gate: oneshot::Receiver<()>) {
        started.send(()).unwrap();
        self.hold(gate).await;
    }

    fn mark(&mut self, what: &'static str) -> usize {
        self.handled.push(what);
        self.handled.len()
    }

    fn handled(&self) -> Vec<&'static str> {
        self.handled.clone()
    }
}

/// The same, with a default deadline for every ask.
#[actor(ask_timeout = "50ms")]
struct Impatient {
    handled: usize,
}

#[actor]
impl Impatient {
    async fn hold(&mut self, gate: oneshot::Receiver<()>) {
        let _ = gate.await;
    }

    fn mark(&mut self) -> usize {
        self.handled += 1;
        self.handled
    }
}

/// A per-call deadline that passes gives `Timeout`; the message, already queued, is still
/// handled afterwards, and later asks are answered.
#[runtime::test(timeout = "20s")]
async fn a_passed_deadline_times_out_and_the_message_is_still_handled(context: runtime::Context) {
    let gated = Gated { handled: vec![] }.spawn(&context);
    let (open, gate) = oneshot::channel();
    gated.tell_hold(gate).await.unwrap();
    let asked = gated.mark("late").timeout(Duration::from_millis(30)).await;
    assert_eq!(asked, Err(Error::Timeout));
    open.send(()).unwrap();
    assert_eq!(gated.handled().await, Ok(vec!["hold", "late"]));
    // Without a deadline the same ask is answered.
    assert_eq!(gated.mark("after").await, Ok(3));
    let metrics = context.encode();
    assert!(
        metrics.contains("actor_ask_timeouts_total{actor=\"gated\"} 1"),
        "{metrics}"
    );
}

/// A deadline that does not pass changes nothing.
#[runtime::test(timeout = "20s")]
async fn an_ask_within_its_deadline_is_answered(context: runtime::Context) {
    let gated = Gated { handled: vec![] }.spawn(&context);
    for expected in 1..=100 {
        let asked = gated.mark("quick").timeout(Duration::from_secs(10)).await;
        assert_eq!(asked, Ok(expected));
    }
    assert!(
        context
            .encode()
            .contains("actor_ask_timeouts_total{actor=\"gated\"} 0")
    );
}

/// `ask_timeout` applies to every ask of the actor; a per-call deadline overrides it, longer
/// or shorter, and `Duration::MAX` lifts it.
#[runtime::test(timeout = "20s")]
async fn the_default_deadline_applies_and_a_per_call_one_overrides_it(context: runtime::Context) {
    let impatient = Impatient { handled: 0 }.spawn(&context);
    let (open, gate) = oneshot::channel();
    impatient.tell_hold(gate).await.unwrap();
    // The default (50 ms) passes while `hold` waits.
    assert_eq!(impatient.mark().await, Err(Error::Timeout));
    // A longer per-call deadline outlasts the gate, opened by a task after 200 ms.
    let opener = context.clone().spawn(move |context| async move {
        context.sleep(Duration::from_millis(200)).await;
        open.send(()).unwrap();
    });
    let (open_again, gate_again) = oneshot::channel();
    let asked = impatient.mark().timeout(Duration::from_secs(10)).await;
    // The timed-out `mark` was handled first, then this one.
    assert_eq!(asked, Ok(2));
    opener.await.unwrap();
    impatient.tell_hold(gate_again).await.unwrap();
    // A shorter one than the default times out sooner; `Duration::MAX` waits for good.
    assert_eq!(
        impatient.mark().timeout(Duration::from_millis(1)).await,
        Err(Error::Timeout)
    );
    let lifted = impatient.mark().timeout(Duration::MAX);
    let opener = context.clone().spawn(move |context| async move {
        // Past the default deadline: only a lifted one is still waiting.
        context.sleep(Duration::from_millis(200)).await;
        open_again.send(()).unwrap();
    });
    assert_eq!(lifted.await, Ok(4));
    opener.await.unwrap();
    assert!(
        context
            .encode()
            .contains("actor_ask_timeouts_total{actor=\"impatient\"} 2")
    );
}

/// A deadline that passes while the mailbox is full: the message was never queued, so it is
/// never handled.
#[runtime::test(timeout = "20s")]
async fn a_deadline_passed_waiting_for_room_drops_the_message(context: runtime::Context) {
    let gated = Gated { handled: vec![] }.spawn(&context);
    let (open, gate) = oneshot::channel();
    let (started, taken) = oneshot::channel();
    gated.tell_hold_signalled(started, gate).await.unwrap();
    taken.await.unwrap();
    // `hold` is being handled: the mailbox's 8 places are free for these, and only these.
    let queued = 8;
    for _ in 0..queued {
        gated.try_mark("queued").unwrap();
    }
    assert_eq!(gated.try_mark("over"), Err(Error::Full));
    let asked = gated
        .mark("dropped")
        .timeout(Duration::from_millis(30))
        .await;
    assert_eq!(asked, Err(Error::Timeout));
    open.send(()).unwrap();
    let handled = gated.handled().await.unwrap();
    assert_eq!(handled.len(), 1 + queued, "{handled:?}");
    assert!(!handled.contains(&"dropped"), "{handled:?}");
}

/// Asks queued one after another (`Ask::queued`) reach the actor in that order while none
/// of their replies is awaited; each reply is then awaited on its own, and an ask that cannot
/// be queued says why at once.
#[runtime::test(timeout = "20s")]
async fn queued_asks_keep_their_order_and_are_answered_later(context: runtime::Context) {
    let gated = Gated { handled: vec![] }.spawn(&context);
    let (open, gate) = oneshot::channel();
    let (started, taken) = oneshot::channel();
    gated.tell_hold_signalled(started, gate).await.unwrap();
    taken.await.unwrap();
    // Queued while `hold` runs: none of them can be answered yet.
    let mut asks = Vec::new();
    for what in ["first", "second", "third"] {
        asks.push(gated.mark(what).queued().await.unwrap());
    }
    open.send(()).unwrap();
    let mut answers = Vec::new();
    for ask in asks.into_iter().rev() {
        answers.push(ask.await.unwrap());
    }
    assert_eq!(
        answers,
        [4, 3, 2],
        "each its own answer, in the order handled"
    );
    assert_eq!(
        gated.handled().await.unwrap(),
        ["hold", "first", "second", "third"]
    );
    gated.stop().await;
    assert_eq!(gated.mark("late").queued().await.err(), Some(Error::Closed));
}

/// An actor that hands each `lookup` to someone else and takes its next message at once.
#[actor]
struct Front {
    backend: BackendRef,
    seen: Vec<u64>,
}

#[actor]
impl Front {
    /// Answered by the backend actor.
    async fn lookup(&mut self, key: u64, reply: Reply<u64>) {
        self.seen.push(key);
        self.backend.forward_answer(key, reply).await.unwrap();
    }

    /// Answered by a spawned task once `gate` opens.
    fn later(&mut self, ctx: &mut Context<Self>, gate: oneshot::Receiver<u64>, reply: Reply<u64>) {
        self.seen.push(0);
        drop(ctx.runtime().clone().spawn(move |_| async move {
            if let Ok(value) = gate.await {
                reply.send(value);
            }
            // A closed gate drops the reply unanswered.
        }));
    }

    /// Never answered.
    fn forget(&mut self, reply: Reply<u64>) {
        drop(reply);
    }

    fn seen(&self) -> Vec<u64> {
        self.seen.clone()
    }
}

#[actor]
struct Backend;

#[actor]
impl Backend {
    fn answer(&mut self, key: u64) -> u64 {
        key * 10
    }
}

/// A delegated reply answered by another actor, by a task, or dropped: the asker sees an
/// ordinary ask (`Closed` when dropped), and the actor handles later messages while a reply
/// is pending.
#[runtime::test(timeout = "20s")]
async fn delegated_replies_are_answered_elsewhere(context: runtime::Context) {
    let backend = Backend.spawn(&context);
    let front = Front {
        backend,
        seen: vec![],
    }
    .spawn(&context);
    assert_eq!(front.lookup(4).await, Ok(40));
    assert_eq!(front.forget().await, Err(Error::Closed));

    let (answer, gate) = oneshot::channel();
    let pending = front.later(gate);
    let mut pending = std::pin::pin!(pending);
    // Polled once: queued; the front goes on with later messages while it is unanswered.
    assert!(futures::poll!(pending.as_mut()).is_pending());
    assert_eq!(front.lookup(7).await, Ok(70));
    assert_eq!(front.seen().await, Ok(vec![4, 0, 7]));
    assert!(futures::poll!(pending.as_mut()).is_pending());
    answer.send(99).unwrap();
    assert_eq!(pending.await, Ok(99));

    let (answer, gate) = oneshot::channel::<u64>();
    let dropped = front.later(gate);
    drop(answer);
    assert_eq!(dropped.await, Err(Error::Closed));
}
