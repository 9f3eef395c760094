//! Monitors and links through the public API, with OTP's semantics: one down notification
//! per monitor for every way of ending (an actor already gone included), none after
//! `demonitor`, in mailbox order; links that end the partner on an abnormal end, both ways,
//! not on a normal one, trapped exits delivered in mailbox order, `unlink`, and cascades.

use actors::prelude::*;
use actors::{ActorId, Context, ExitReason, Monitor};
use futures::StreamExt as _;
use futures::channel::{mpsc, oneshot};
use std::collections::HashMap;

/// What a watcher or trapper saw, in the order its mailbox gave it.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Note(u32),
    Down(ActorId, ExitReason),
    Exit(ActorId, ExitReason),
}

/// Monitors targets and reports each note, down notification and trapped exit on a channel.
#[actor(mailbox = 64)]
struct Watcher {
    seen: mpsc::UnboundedSender<Seen>,
    monitors: HashMap<ActorId, Monitor>,
}

#[actor]
impl Watcher {
    fn watch(&mut self, ctx: &mut Context<Self>, target: TargetRef) {
        let monitor = ctx.monitor(&target);
        assert_eq!(monitor.actor(), target.id());
        self.monitors.insert(target.id(), monitor);
    }

    /// Monitors through a weak ref.
    fn watch_weakly(&mut self, ctx: &mut Context<Self>, target: actors::WeakRef<Target>) {
        let monitor = ctx.monitor(&target);
        self.monitors.insert(target.id(), monitor);
    }

    fn unwatch(&mut self, ctx: &mut Context<Self>, target: ActorId) {
        let monitor = self.monitors.remove(&target).expect("watched");
        ctx.demonitor(monitor);
    }

    /// Stops `target` and cancels its monitor once it ended: its notification is queued
    /// behind this handler by then.
    async fn stop_then_unwatch(&mut self, ctx: &mut Context<Self>, target: TargetRef) {
        assert_eq!(target.stop().await, ExitReason::Stopped);
        let monitor = self.monitors.remove(&target.id()).expect("watched");
        ctx.demonitor(monitor);
    }

    fn link_to(&mut self, ctx: &mut Context<Self>, target: TargetRef) {
        ctx.link(&target);
    }

    fn unlink_from(&mut self, ctx: &mut Context<Self>, target: TargetRef) {
        ctx.unlink(&target);
    }

    fn note(&mut self, note: u32) {
        let _ = self.seen.unbounded_send(Seen::Note(note));
    }

    fn ping(&self) {}

    fn on_down(&mut self, id: ActorId, reason: ExitReason) {
        let _ = self.seen.unbounded_send(Seen::Down(id, reason));
    }
}

/// A `Watcher` that traps exits.
#[actor(mailbox = 64)]
struct Trapper {
    seen: mpsc::UnboundedSender<Seen>,
}

#[actor]
impl Trapper {
    fn link_to(&mut self, ctx: &mut Context<Self>, target: TargetRef) {
        ctx.link(&target);
    }

    fn note(&mut self, note: u32) {
        let _ = self.seen.unbounded_send(Seen::Note(note));
    }

    async fn on_link_exit(&mut self, ctx: &mut Context<Self>, id: ActorId, reason: ExitReason) {
        let _ = ctx.id();
        let _ = self.seen.unbounded_send(Seen::Exit(id, reason));
    }
}

/// What is monitored and linked: it ends however it is told to.
#[actor(mailbox = 16)]
struct Target;

#[actor]
impl Target {
    fn finish(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }

    fn fail(&mut self) {
        panic!("target fails");
    }

    fn ping(&self) {}

    /// Sends `count` notes to `watcher`, then ends with `then`.
    async fn notes_then(
        &mut self,
        ctx: &mut Context<Self>,
        watcher: WatcherRef,
        trapper: Option<TrapperRef>,
        count: u32,
        fail: bool,
    ) {
        for note in 0..count {
            watcher.tell_note(note).await.unwrap();
            if let Some(trapper) = &trapper {
                trapper.tell_note(note).await.unwrap();
            }
        }
        assert!(!fail, "target fails after its notes");
        ctx.stop();
    }

    fn link_to(&mut self, ctx: &mut Context<Self>, other: TargetRef) {
        ctx.link(&other);
    }
}

fn watcher(context: &runtime::Context) -> (WatcherRef, mpsc::UnboundedReceiver<Seen>) {
    let (seen, events) = mpsc::unbounded();
    let watcher = Watcher {
        seen,
        monitors: HashMap::new(),
    };
    (watcher.spawn(context), events)
}

fn panicked() -> ExitReason {
    ExitReason::Panicked("target fails".to_string())
}

/// One down notification per way of ending, with that end's reason: a handler's stop, a
/// ref's stop, a panic, the last ref's drop, an ended scope, and an actor that had already
/// ended before it was monitored (strongly or through a weak ref). None arrives twice: after
/// all of them, a note sent last comes right behind the last one.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_monitor_fires_once_for_each_way_of_ending(context: runtime::Context) {
    let (watcher, mut seen) = watcher(&context);
    let mut expected = Vec::new();

    let stopped_itself = Target.spawn(&context);
    watcher.watch(stopped_itself.clone()).await.unwrap();
    stopped_itself.tell_finish().await.unwrap();
    expected.push(Seen::Down(stopped_itself.id(), ExitReason::Normal));

    let stopped = Target.spawn(&context);
    watcher.watch(stopped.clone()).await.unwrap();
    assert_eq!(stopped.stop().await, ExitReason::Stopped);
    expected.push(Seen::Down(stopped.id(), ExitReason::Stopped));

    let failed = Target.spawn(&context);
    watcher.watch(failed.clone()).await.unwrap();
    assert!(failed.fail().await.is_err());
    expected.push(Seen::Down(failed.id(), panicked()));

    let dropped = Target.spawn(&context);
    let dropped_id = dropped.id();
    watcher.watch_weakly(dropped.downgrade()).await.unwrap();
    drop(dropped);
    expected.push(Seen::Down(dropped_id, ExitReason::Normal));

    let (made, made_ref) = oneshot::channel();
    let scope = context.clone().spawn(move |context| async move {
        let _ = made.send(Target.spawn(&context));
        futures::future::pending::<()>().await;
    });
    let scoped = made_ref.await.unwrap();
    watcher.watch(scoped.clone()).await.unwrap();
    scope.abort();
    expected.push(Seen::Down(scoped.id(), ExitReason::Shutdown));

    let gone = Target.spawn(&context);
    assert!(gone.fail().await.is_err());
    assert_eq!(gone.join().await, panicked());
    watcher.watch(gone.clone()).await.unwrap();
    expected.push(Seen::Down(gone.id(), panicked()));
    let gone_weakly = gone.downgrade();
    watcher.watch_weakly(gone_weakly).await.unwrap();
    expected.push(Seen::Down(gone.id(), panicked()));

    let mut got = Vec::new();
    while got.len() < expected.len() {
        got.push(seen.next().await.expect("the watcher runs"));
    }
    // Each actor's down, whatever order the ends raced in.
    for down in &expected {
        assert_eq!(
            got.iter().filter(|seen| *seen == down).count(),
            expected.iter().filter(|other| *other == down).count(),
            "{down:?} in {got:?}"
        );
    }
    watcher.note(99).await.unwrap();
    assert_eq!(
        seen.next().await,
        Some(Seen::Note(99)),
        "no second notification"
    );
}

/// After `demonitor`, no notification for that monitor is handled, even one queued already
/// (the target ended while the watcher was busy): a last monitor, on a target that ends
/// later, shows the others stayed silent.
#[runtime::test(timeout = "20s")]
async fn no_down_notification_after_demonitor(context: runtime::Context) {
    let (watcher, mut seen) = watcher(&context);
    let silenced = Target.spawn(&context);
    watcher.watch(silenced.clone()).await.unwrap();
    watcher.unwatch(silenced.id()).await.unwrap();
    assert_eq!(silenced.stop().await, ExitReason::Stopped);

    // Cancelled after the target ended, with its notification queued.
    let late = Target.spawn(&context);
    watcher.watch(late.clone()).await.unwrap();
    watcher.stop_then_unwatch(late.clone()).await.unwrap();

    let sentinel = Target.spawn(&context);
    watcher.watch(sentinel.clone()).await.unwrap();
    assert_eq!(sentinel.stop().await, ExitReason::Stopped);
    assert_eq!(
        seen.next().await,
        Some(Seen::Down(sentinel.id(), ExitReason::Stopped)),
        "the cancelled monitors stay silent"
    );
}

/// A down notification is handled after every message the ended actor sent before it ended:
/// mailbox order.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn down_notifications_come_in_mailbox_order(context: runtime::Context) {
    for fail in [false, true] {
        let (watcher, mut seen) = watcher(&context);
        let target = Target.spawn(&context);
        watcher.watch(target.clone()).await.unwrap();
        let _ = target.notes_then(watcher.clone(), None, 20, fail).await;
        let reason = if fail {
            ExitReason::Panicked("target fails after its notes".to_string())
        } else {
            ExitReason::Normal
        };
        for note in 0..20 {
            assert_eq!(seen.next().await, Some(Seen::Note(note)));
        }
        assert_eq!(seen.next().await, Some(Seen::Down(target.id(), reason)));
    }
}

/// A link ends the partner when either side ends abnormally, whichever side made it: the
/// partner's reason is `Linked` with the ended actor's id and reason.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn links_propagate_abnormal_ends_both_ways(context: runtime::Context) {
    // The linker fails.
    let linker = Target.spawn(&context);
    let partner = Target.spawn(&context);
    linker.link_to(partner.clone()).await.unwrap();
    assert!(linker.fail().await.is_err());
    assert_eq!(
        partner.join().await,
        ExitReason::Linked {
            partner: linker.id(),
            reason: Box::new(panicked()),
        }
    );
    // The linked one fails.
    let linker = Target.spawn(&context);
    let partner = Target.spawn(&context);
    linker.link_to(partner.clone()).await.unwrap();
    assert!(partner.fail().await.is_err());
    assert_eq!(
        linker.join().await,
        ExitReason::Linked {
            partner: partner.id(),
            reason: Box::new(panicked()),
        }
    );
    // Linking to an actor that already failed ends the linker at once.
    let gone = Target.spawn(&context);
    assert!(gone.fail().await.is_err());
    let linker = Target.spawn(&context);
    let _ = linker.link_to(gone.clone()).await;
    assert_eq!(
        linker.join().await,
        ExitReason::Linked {
            partner: gone.id(),
            reason: Box::new(panicked()),
        }
    );
}

/// Normal ends (`Normal`, `Stopped`) do not propagate through links: the partner handles
/// its next message.
#[runtime::test(timeout = "20s")]
async fn normal_exits_do_not_propagate(context: runtime::Context) {
    let survivor = Target.spawn(&context);
    let finishing = Target.spawn(&context);
    let stopped = Target.spawn(&context);
    survivor.link_to(finishing.clone()).await.unwrap();
    survivor.link_to(stopped.clone()).await.unwrap();
    finishing.tell_finish().await.unwrap();
    assert_eq!(finishing.join().await, ExitReason::Normal);
    assert_eq!(stopped.stop().await, ExitReason::Stopped);
    // A kill would be taken before this message.
    assert_eq!(survivor.ping().await, Ok(()));
    assert_eq!(survivor.stop().await, ExitReason::Stopped);
}

/// An actor that declares `on_link_exit` traps exits: it survives its partners, and gets
/// each one's end (normal ones too) in mailbox order, after what the partner sent before.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn trapped_exits_arrive_in_mailbox_order(context: runtime::Context) {
    let (seen_by_trapper, mut trapped) = mpsc::unbounded();
    let trapper = Trapper {
        seen: seen_by_trapper,
    }
    .spawn(&context);
    let (watcher, _watched) = watcher(&context);
    for fail in [true, false] {
        let target = Target.spawn(&context);
        trapper.link_to(target.clone()).await.unwrap();
        let _ = target
            .notes_then(watcher.clone(), Some(trapper.clone()), 10, fail)
            .await;
        let reason = if fail {
            ExitReason::Panicked("target fails after its notes".to_string())
        } else {
            ExitReason::Normal
        };
        for note in 0..10 {
            assert_eq!(trapped.next().await, Some(Seen::Note(note)));
        }
        assert_eq!(trapped.next().await, Some(Seen::Exit(target.id(), reason)));
    }
    trapper.note(7).await.unwrap();
    assert_eq!(
        trapped.next().await,
        Some(Seen::Note(7)),
        "the trapper survived"
    );
}

/// After `unlink`, neither side hears of the other's end.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn unlink_cuts_the_link_both_ways(context: runtime::Context) {
    let (watcher, _seen) = watcher(&context);
    let target = Target.spawn(&context);
    watcher.link_to(target.clone()).await.unwrap();
    watcher.unlink_from(target.clone()).await.unwrap();
    assert!(target.fail().await.is_err());
    assert_eq!(target.join().await, panicked());
    assert_eq!(watcher.ping().await, Ok(()));
}

/// A chain of links ends link by link: each reason names the partner that ended it.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn linked_deaths_cascade(context: runtime::Context) {
    let [first, middle, last] = [(); 3].map(|()| Target.spawn(&context));
    first.link_to(middle.clone()).await.unwrap();
    middle.link_to(last.clone()).await.unwrap();
    assert!(last.fail().await.is_err());
    let middle_reason = ExitReason::Linked {
        partner: last.id(),
        reason: Box::new(panicked()),
    };
    assert_eq!(middle.join().await, middle_reason);
    assert_eq!(
        first.join().await,
        ExitReason::Linked {
            partner: middle.id(),
            reason: Box::new(middle_reason),
        }
    );
    assert!(!first.join().await.is_normal());
}
