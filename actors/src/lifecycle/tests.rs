//! The unit tests of the module above.

use super::*;
use crate::mailbox::{Mailbox, Received};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

fn mailbox() -> Arc<Mailbox<u32>> {
    let mailbox = Mailbox::new(8, ActorId::next(&"test"));
    mailbox.add_sender();
    mailbox
}

fn peer(mailbox: &Arc<Mailbox<u32>>) -> Arc<dyn Peer> {
    mailbox.clone()
}

/// What the consumer takes next, shown briefly.
fn next(consumer: &mut crate::mailbox::Consumer<u32>) -> String {
    match consumer.try_recv() {
        Some(Received::Message(message)) => format!("m{message}"),
        Some(Received::Signal(Signal::Down(down))) => {
            format!("down {} {}", down.id.label(), down.reason.kind())
        }
        Some(Received::Signal(Signal::Exit(exit))) => {
            format!("exit {} {}", exit.from.label(), exit.reason.kind())
        }
        Some(Received::Signal(Signal::Stop)) => "stop".to_string(),
        Some(Received::Stop) => "requested".to_string(),
        Some(Received::Disconnected) => "disconnected".to_string(),
        None => "nothing".to_string(),
    }
}

/// A signal is two words, and a running actor's life stays small: both are in every
/// idle actor (its run loop holds a `Received`; its mailbox a `Life`, one byte of which
/// keeps the common end reasons, so most ends allocate nothing).
#[test]
fn signals_and_lives_stay_small() {
    assert!(std::mem::size_of::<Signal>() <= 2 * std::mem::size_of::<usize>());
    assert!(std::mem::size_of::<Option<EndedWith>>() == 1);
    assert!(
        std::mem::size_of::<Life>() <= 80,
        "{}",
        std::mem::size_of::<Life>()
    );
}

/// A signal is taken after the messages queued before it and before those queued after:
/// mailbox order. Repeated ordered stops collapse into the first.
#[test]
fn signals_take_their_turn_in_mailbox_order() {
    let mailbox = mailbox();
    let mut consumer = mailbox.consumer().unwrap();
    mailbox.try_send(1).unwrap();
    mailbox.try_send(2).unwrap();
    request_ordered_stop(&*mailbox);
    mailbox.try_send(3).unwrap();
    request_ordered_stop(&*mailbox);
    let taken: Vec<_> = (0..5).map(|_| next(&mut consumer)).collect();
    assert_eq!(taken, ["m1", "m2", "stop", "m3", "nothing"]);
}

/// A stop that finds no signal waiting (kept apart from the queue) and one that finds
/// one (queued behind it) both keep mailbox order with the signals around them.
#[test]
fn stops_keep_their_turn_among_signals() {
    let (watcher, first, second) = (mailbox(), mailbox(), mailbox());
    let _first = monitor(&peer(&watcher), peer(&first));
    let _second = monitor(&peer(&watcher), peer(&second));
    let mut consumer = watcher.consumer().unwrap();
    watcher.try_send(1).unwrap();
    request_ordered_stop(&*watcher);
    first.end(ExitReason::Normal);
    let taken: Vec<_> = (0..4).map(|_| next(&mut consumer)).collect();
    assert_eq!(taken, ["m1", "stop", "down test normal", "nothing"]);

    watcher.try_send(2).unwrap();
    second.end(ExitReason::Stopped);
    watcher.try_send(3).unwrap();
    request_ordered_stop(&*watcher);
    watcher.try_send(4).unwrap();
    let taken: Vec<_> = (0..6).map(|_| next(&mut consumer)).collect();
    assert_eq!(
        taken,
        ["m2", "down test stopped", "m3", "stop", "m4", "nothing"]
    );
}

/// A linked actor's abnormal end jumps the queue of a non-trapping actor (it ends it
/// before its next message); a normal one is dropped. A trapping actor gets both in
/// mailbox order.
#[test]
fn exits_kill_at_once_unless_trapped() {
    for traps in [false, true] {
        let this = mailbox();
        let partner = Mailbox::<u32>::new(8, ActorId::next(&"partner"));
        link(&peer(&this), partner.clone());
        this.life.set_traps_exits(traps);
        let mut consumer = this.consumer().unwrap();
        this.try_send(1).unwrap();
        partner.end(ExitReason::Panicked("boom".into()));
        this.try_send(2).unwrap();
        let taken: Vec<_> = (0..3).map(|_| next(&mut consumer)).collect();
        if traps {
            assert_eq!(taken, ["m1", "exit partner panicked", "m2"]);
        } else {
            assert_eq!(taken, ["exit partner panicked", "m1", "m2"]);
        }
    }
    let this = mailbox();
    let partner = Mailbox::<u32>::new(8, ActorId::next(&"partner"));
    link(&peer(&this), partner.clone());
    let mut consumer = this.consumer().unwrap();
    partner.end(ExitReason::Normal);
    this.try_send(1).unwrap();
    assert_eq!(
        next(&mut consumer),
        "m1",
        "a normal end is not an exit to heed"
    );
    assert_eq!(next(&mut consumer), "nothing");
}

/// Before a supervised actor's next incarnation, what the last one left for itself goes: a
/// stop request and a kill that came while it was ending (nothing is left to look at). What
/// is the actor's stays: queued signals, an ordered stop, and its links, so a kill that comes
/// afterwards is the next incarnation's.
#[test]
fn the_next_incarnation_starts_without_the_last_ones_kill() {
    let this = mailbox();
    let first = Mailbox::<u32>::new(8, ActorId::next(&"first"));
    link(&peer(&this), first.clone());
    // The last incarnation is ending: no consumer takes anything meanwhile.
    this.request_stop();
    first.end(ExitReason::Panicked("boom".into()));
    this.clear_last_incarnation();
    assert_eq!(this.life.attention(), 0, "nothing waits");
    let mut consumer = this.consumer().unwrap();
    assert_eq!(next(&mut consumer), "nothing");
    drop(consumer);

    let second = Mailbox::<u32>::new(8, ActorId::next(&"second"));
    let watched = Mailbox::<u32>::new(8, ActorId::next(&"watched"));
    link(&peer(&this), second.clone());
    let _monitor = monitor(&peer(&this), watched.clone());
    watched.end(ExitReason::Normal);
    request_ordered_stop(&*this);
    this.clear_last_incarnation();
    second.end(ExitReason::Panicked("boom".into()));
    let mut consumer = this.consumer().unwrap();
    this.try_send(1).unwrap();
    let taken: Vec<_> = (0..4).map(|_| next(&mut consumer)).collect();
    assert_eq!(
        taken,
        ["exit second panicked", "down watched normal", "stop", "m1"]
    );
}

/// Both sides of a link fire once: the survivor's end does not echo back, and `unlink`
/// silences both ways.
#[test]
fn a_link_fires_once_and_unlink_is_final() {
    let first = mailbox();
    let second = Mailbox::<u32>::new(8, ActorId::next(&"second"));
    second.add_sender();
    link(&peer(&first), second.clone());
    let mut first_consumer = first.consumer().unwrap();
    let mut second_consumer = second.consumer().unwrap();
    second.end(ExitReason::Shutdown);
    assert_eq!(next(&mut first_consumer), "exit second shutdown");
    first.end(ExitReason::Panicked("after".into()));
    assert_eq!(
        next(&mut second_consumer),
        "disconnected",
        "an ended actor hears nothing"
    );

    let first = mailbox();
    let second = Mailbox::<u32>::new(8, ActorId::next(&"second"));
    link(&peer(&first), second.clone());
    unlink(&*first, &*second);
    let mut consumer = first.consumer().unwrap();
    second.end(ExitReason::Shutdown);
    assert_eq!(next(&mut consumer), "nothing");
}

/// A monitor delivers one notification, at once if the target already ended; a
/// demonitor withdraws one already queued.
#[test]
fn monitors_notify_once_and_demonitor_withdraws() {
    let watcher = mailbox();
    let mut consumer = watcher.consumer().unwrap();
    let target = Mailbox::<u32>::new(8, ActorId::next(&"target"));
    let _monitor = monitor(&peer(&watcher), target.clone());
    target.end(ExitReason::Stopped);
    target.end(ExitReason::Normal);
    assert_eq!(next(&mut consumer), "down target stopped");
    assert_eq!(
        next(&mut consumer),
        "nothing",
        "once, with the first reason"
    );

    let _late = monitor(&peer(&watcher), target.clone());
    assert_eq!(next(&mut consumer), "down target stopped", "already ended");

    let other = Mailbox::<u32>::new(8, ActorId::next(&"other"));
    let cancelled = monitor(&peer(&watcher), other.clone());
    other.end(ExitReason::Shutdown);
    demonitor(&*watcher, cancelled);
    assert_eq!(
        next(&mut consumer),
        "nothing",
        "the queued one was withdrawn"
    );
}

/// A join resolves with the end's reason, and at once after it; a dropped pending join
/// frees its slot for the next.
#[test]
fn joins_resolve_with_the_reason() {
    let target = mailbox();
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    let join = || crate::actor::refs::tests_join(peer(&target));
    {
        let mut dropped = pin!(join());
        assert!(dropped.as_mut().poll(&mut cx).is_pending());
    }
    let mut pending = pin!(join());
    assert!(pending.as_mut().poll(&mut cx).is_pending());
    target.end(ExitReason::Stopped);
    assert_eq!(
        pending.as_mut().poll(&mut cx),
        Poll::Ready(ExitReason::Stopped)
    );
    assert_eq!(
        pin!(join()).as_mut().poll(&mut cx),
        Poll::Ready(ExitReason::Stopped)
    );
}

/// A joiner is woken after the end's down notifications are queued: whatever it does
/// once it hears of the end (a message to a watcher, say) comes behind them.
#[test]
fn joiners_hear_of_the_end_after_the_watchers() {
    struct Checks {
        watcher: Arc<Mailbox<u32>>,
        down_queued: AtomicBool,
    }
    impl std::task::Wake for Checks {
        fn wake(self: Arc<Self>) {
            let queued = self.watcher.life.attention() & SIGNALS != 0;
            self.down_queued.store(queued, Ordering::SeqCst);
        }
    }
    let (target, watcher) = (mailbox(), mailbox());
    let _monitor = monitor(&peer(&watcher), peer(&target));
    let checks = Arc::new(Checks {
        watcher: watcher.clone(),
        down_queued: AtomicBool::new(false),
    });
    let waker = Waker::from(checks.clone());
    let mut join = pin!(crate::actor::refs::tests_join(peer(&target)));
    assert!(
        join.as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    );
    target.end(ExitReason::Normal);
    assert!(
        checks.down_queued.load(Ordering::SeqCst),
        "the joiner was woken before the watcher's down notification was queued"
    );
}
