//! The loom models of the module above (`--cfg actors_loom`).

use super::*;

/// A two-message mailbox with one ref, and its consumer.
fn referenced() -> (Arc<Mailbox<u8>>, Consumer<u8>) {
    let mailbox = Mailbox::new(2, ActorId::next(&"test"));
    mailbox.add_sender();
    let consumer = mailbox.consumer().expect("the first consumer");
    (mailbox, consumer)
}

/// A push racing the consumer's parking: either the consumer's last look finds the
/// message, or the push sees the parked bit and wakes it. Never neither (a lost wake).
#[test]
fn a_push_racing_the_consumer_parking_is_never_lost() {
    crate::sync::model(|| {
        let (mailbox, mut consumer) = referenced();
        let producer = {
            let mailbox = mailbox.clone();
            loom::thread::spawn(move || {
                mailbox.take_permit().expect("room");
                mailbox.push(7u8)
            })
        };
        let found = consumer.try_recv().is_some() || consumer.park().is_some();
        let woke = producer.join().unwrap();
        assert!(found || woke, "the message was neither found nor signalled");
    });
}

/// A weak ref's upgrade racing the last ref's drop: the upgrade fails, or it succeeds and
/// the consumer receives what the upgraded ref sends before it reports `Disconnected`.
#[test]
fn an_upgrade_racing_the_last_drop_never_loses_its_message() {
    crate::sync::model(|| {
        let (mailbox, mut consumer) = referenced();
        let upgrader = {
            let mailbox = mailbox.clone();
            loom::thread::spawn(move || {
                let upgraded = mailbox.try_add_sender();
                if upgraded {
                    mailbox.try_send(1u8).expect("room");
                    mailbox.remove_sender();
                }
                upgraded
            })
        };
        mailbox.remove_sender();
        let mut received = false;
        loop {
            match consumer.try_recv() {
                Some(Received::Message(_)) => received = true,
                Some(Received::Disconnected) => break,
                Some(_) => unreachable!("no stop or signal"),
                None => loom::thread::yield_now(),
            }
        }
        let upgraded = upgrader.join().unwrap();
        assert_eq!(received, upgraded, "an upgraded ref's message was lost");
    });
}

/// A ref asks for an ordered stop and then sends a message: however the consumer's looks
/// interleave with the two, it receives the stop first (mailbox order).
#[test]
fn a_signal_queued_before_a_message_is_received_before_it() {
    crate::sync::model(|| {
        let (mailbox, mut consumer) = referenced();
        let producer = {
            let mailbox = mailbox.clone();
            loom::thread::spawn(move || {
                crate::lifecycle::request_ordered_stop(&*mailbox);
                mailbox.try_send(1u8).expect("room");
            })
        };
        let mut stopped = false;
        loop {
            match consumer.try_recv() {
                Some(Received::Signal(Signal::Stop)) => stopped = true,
                Some(Received::Message(_)) => {
                    assert!(stopped, "the message overtook the stop queued before it");
                    break;
                }
                Some(_) => unreachable!("one stop and one message"),
                None => loom::thread::yield_now(),
            }
        }
        producer.join().unwrap();
    });
}

/// The consumer parks (`recv_after_empty`, as the run loop does after an empty look)
/// while another thread does `act`: the parked receive is woken and returns what `act`
/// left, never sleeps through it. `loom::future::block_on` parks the thread until a wake,
/// so a lost wake is a deadlock the model reports.
fn parked_receive_sees(act: fn(&Arc<Mailbox<u8>>), expect: fn(&Received<u8>) -> bool) {
    crate::sync::model(move || {
        let (mailbox, mut consumer) = referenced();
        let actor = {
            let mailbox = mailbox.clone();
            loom::thread::spawn(move || act(&mailbox))
        };
        let received = loom::future::block_on(consumer.recv_after_empty());
        assert!(expect(&received), "the parked receive got something else");
        actor.join().unwrap();
    });
}

#[test]
fn an_ordered_stop_wakes_the_parked_receive() {
    parked_receive_sees(
        |mailbox| crate::lifecycle::request_ordered_stop(&**mailbox),
        |received| matches!(received, Received::Signal(Signal::Stop)),
    );
}

#[test]
fn a_stop_request_wakes_the_parked_receive() {
    parked_receive_sees(
        |mailbox| mailbox.request_stop(),
        |received| matches!(received, Received::Stop),
    );
}

#[test]
fn the_last_refs_drop_wakes_the_parked_receive() {
    parked_receive_sees(
        |mailbox| mailbox.remove_sender(),
        |received| matches!(received, Received::Disconnected),
    );
}

#[test]
fn a_close_wakes_the_parked_receive() {
    parked_receive_sees(
        |mailbox| mailbox.close(),
        |received| matches!(received, Received::Disconnected),
    );
}

#[test]
fn a_push_wakes_the_parked_receive() {
    parked_receive_sees(
        |mailbox| mailbox.try_send(3).expect("room"),
        |received| matches!(received, Received::Message(3)),
    );
}

/// A monitored actor ends while its watcher's consumer parks: the down notification
/// wakes it.
#[test]
fn a_down_notification_wakes_the_parked_receive() {
    crate::sync::model(|| {
        let (watcher, mut consumer) = referenced();
        let watched = Mailbox::<u8>::new(1, ActorId::next(&"watched"));
        let watcher_peer: Arc<dyn crate::lifecycle::Peer> = watcher.clone();
        let _monitor = crate::lifecycle::monitor(&watcher_peer, watched.clone());
        let ender = loom::thread::spawn(move || watched.end(ExitReason::Stopped));
        let received = loom::future::block_on(consumer.recv_after_empty());
        assert!(matches!(received, Received::Signal(Signal::Down(_))));
        ender.join().unwrap();
    });
}

/// The full-mailbox handshake: a sender waits for room while the consumer takes the one
/// message. The consumer's permit return (an RMW of `state` that reads the waiters bit)
/// and the sender's registration (an RMW that sets it, then a second look for a permit)
/// cannot both miss: the send completes.
#[test]
fn a_sender_waiting_for_room_gets_it_when_the_consumer_takes_a_message() {
    crate::sync::model(|| {
        let mailbox = Mailbox::new(1, ActorId::next(&"test"));
        mailbox.add_sender();
        let mut consumer = mailbox.consumer().expect("the first consumer");
        mailbox.try_send(0u8).expect("room for one");
        let sender = {
            let mailbox = mailbox.clone();
            loom::thread::spawn(move || loom::future::block_on(mailbox.send(1u8)))
        };
        loop {
            match consumer.try_recv() {
                Some(Received::Message(0)) => break,
                None => loom::thread::yield_now(),
                Some(_) => unreachable!("the first message"),
            }
        }
        sender.join().unwrap().expect("the send got room");
        assert!(matches!(consumer.try_recv(), Some(Received::Message(1))));
    });
}

/// Two senders wait on a full mailbox; the first is woken by a permit's return and then
/// dropped before it takes the permit: it passes the wake on, and the second sends.
#[test]
fn a_woken_waiter_dropped_passes_the_wake_on() {
    crate::sync::model(|| {
        let mailbox = Mailbox::new(1, ActorId::next(&"test"));
        mailbox.add_sender();
        let mut consumer = mailbox.consumer().expect("the first consumer");
        mailbox.try_send(0u8).expect("room for one");
        let mut first = mailbox.send(1u8);
        let noop = Waker::noop();
        assert!(
            Pin::new(&mut first)
                .poll(&mut Context::from_waker(noop))
                .is_pending()
        );
        let second = {
            let mailbox = mailbox.clone();
            loom::thread::spawn(move || loom::future::block_on(mailbox.send(2u8)))
        };
        assert!(matches!(consumer.try_recv(), Some(Received::Message(0))));
        drop(first);
        second.join().unwrap().expect("the second send got room");
        assert!(matches!(consumer.try_recv(), Some(Received::Message(2))));
    });
}

/// A sender that finds the mailbox full registers as `close` runs: either `close` finds
/// it and wakes it, or its look after registering sees the mailbox closed. Never left
/// waiting on a closed mailbox.
#[test]
fn a_sender_waiting_as_the_mailbox_closes_is_never_left_waiting() {
    struct Woken(loom::sync::atomic::AtomicBool);
    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    crate::sync::model(|| {
        let mailbox = Mailbox::new(1, ActorId::next(&"test"));
        mailbox.try_send(0u8).expect("room for one");
        let closer = {
            let mailbox = mailbox.clone();
            loom::thread::spawn(move || mailbox.close())
        };
        let woken = Arc::new(Woken(loom::sync::atomic::AtomicBool::new(false)));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut sending = mailbox.send(1u8);
        let first = Pin::new(&mut sending).poll(&mut cx);
        closer.join().unwrap();
        if first.is_pending() {
            assert!(
                woken.0.load(Ordering::SeqCst),
                "a waiting sender was not woken by the close"
            );
            let again = Pin::new(&mut sending).poll(&mut cx);
            assert!(matches!(again, Poll::Ready(Err(Error::Closed))));
        } else {
            assert!(matches!(first, Poll::Ready(Err(Error::Closed))));
        }
    });
}

/// A send racing `close`: the message is either refused or, once pushed, dropped by one
/// of the two drains; never left in a closed mailbox (where an ask would wait forever).
#[test]
fn a_send_racing_close_is_never_stranded() {
    crate::sync::model(|| {
        let mailbox = Mailbox::new(2, ActorId::next(&"test"));
        let message = Arc::new(());
        let sender = {
            let (mailbox, message) = (mailbox.clone(), message.clone());
            loom::thread::spawn(move || {
                let _ = mailbox.try_send(message);
            })
        };
        mailbox.close();
        sender.join().unwrap();
        assert_eq!(Arc::strong_count(&message), 1, "the message was dropped");
    });
}
