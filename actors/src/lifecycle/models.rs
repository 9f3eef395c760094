//! The loom models of the module above (`--cfg actors_loom`).

use super::*;
use crate::mailbox::{Mailbox, Received};

/// The linked exits `mailbox` holds now, taken by its consumer; it holds nothing else.
fn exits_heard(mailbox: &Arc<Mailbox<u8>>) -> usize {
    let mut consumer = mailbox.consumer().expect("the first consumer");
    let mut exits = 0;
    while let Some(received) = consumer.try_recv() {
        match received {
            Received::Signal(Signal::Exit(_)) => exits += 1,
            _ => unreachable!("only a linked actor's exit is sent"),
        }
    }
    exits
}

/// Two actors link each other at the same moment, then one ends abnormally: the other
/// (which traps exits) hears of it exactly once.
#[test]
fn links_made_from_both_sides_at_once_fire_once() {
    crate::sync::model(|| {
        let a = Mailbox::<u8>::new(2, ActorId::next(&"a"));
        a.life.set_traps_exits(true);
        a.add_sender();
        let b = Mailbox::<u8>::new(2, ActorId::next(&"b"));
        let (a_peer, b_peer): (Arc<dyn Peer>, Arc<dyn Peer>) = (a.clone(), b.clone());
        let other = {
            let (a_peer, b_peer) = (a_peer.clone(), b_peer.clone());
            loom::thread::spawn(move || link(&b_peer, a_peer))
        };
        link(&a_peer, b_peer);
        other.join().unwrap();
        b.end(ExitReason::Panicked("boom".into()));
        assert_eq!(exits_heard(&a), 1, "one link, one exit");
    });
}

/// An actor links to another as it ends itself (an aborted handler still running): the
/// partner hears of the end exactly once, or holds no link to it at all (the link came
/// too late to be made); never a link that stays silent.
#[test]
fn a_link_racing_the_linkers_own_end_is_heard_or_not_made() {
    crate::sync::model(|| {
        let a = Mailbox::<u8>::new(2, ActorId::next(&"a"));
        let b = Mailbox::<u8>::new(2, ActorId::next(&"b"));
        b.life.set_traps_exits(true);
        b.add_sender();
        let a_peer: Arc<dyn Peer> = a.clone();
        let ender = {
            let a = a.clone();
            loom::thread::spawn(move || a.end(ExitReason::Panicked("boom".into())))
        };
        link(&a_peer, b.clone());
        ender.join().unwrap();
        let exits = exits_heard(&b);
        let linked = b
            .life
            .state
            .lock()
            .extra
            .as_ref()
            .is_some_and(|extra| !extra.links.is_empty());
        assert!(
            exits <= 1 && !linked,
            "{exits} exits heard, link left: {linked}"
        );
    });
}
