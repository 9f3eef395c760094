//! The unit tests of the module above.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::task::Wake;

/// Counts its drops, so a test can tell a message was dropped and not leaked.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn message<M: Send>(received: Option<Received<M>>) -> M {
    match received {
        Some(Received::Message(message)) => message,
        Some(Received::Stop) => panic!("a stop, not a message"),
        Some(Received::Disconnected) => panic!("disconnected, not a message"),
        Some(Received::Signal(_)) => panic!("a signal, not a message"),
        None => panic!("nothing received"),
    }
}

/// Messages come out in the order they went in; at capacity `try_send` is `Full` and hands
/// the message back; a receive makes room again, also across the queue's wrap-around.
#[test]
fn fifo_within_capacity_and_full_beyond_it() {
    let mailbox = Mailbox::new(3, ActorId::next(&"test"));
    mailbox.add_sender();
    let mut consumer = mailbox.consumer().expect("the first consumer");
    assert!(mailbox.consumer().is_none(), "one consumer at a time");
    for round in 0..5 {
        for i in 0..3 {
            mailbox.try_send(round * 10 + i).expect("room");
        }
        assert_eq!(mailbox.len(), 3);
        match mailbox.try_send(99) {
            Err((Error::Full, 99)) => {}
            other => panic!("expected Full with the message back, got {other:?}"),
        }
        for i in 0..3 {
            assert_eq!(message(consumer.try_recv()), round * 10 + i);
        }
        assert!(consumer.try_recv().is_none(), "empty, and a sender is left");
    }
}

/// A send that finds the mailbox full waits, and is woken when a receive returns a
/// permit; a dropped waiting send passes its wake on to the next waiter.
#[test]
fn a_full_mailbox_wakes_a_waiting_sender_when_room_appears() {
    let mailbox = Mailbox::new(1, ActorId::next(&"test"));
    mailbox.add_sender();
    let mut consumer = mailbox.consumer().unwrap();
    mailbox.try_send(1u32).unwrap();
    let (first_wakes, second_wakes) = (Arc::new(Wakes::default()), Arc::new(Wakes::default()));
    let (first_waker, second_waker) = (
        Waker::from(first_wakes.clone()),
        Waker::from(second_wakes.clone()),
    );
    let mut first = mailbox.send(2);
    let mut second = mailbox.send(3);
    let mut cx = Context::from_waker(&first_waker);
    assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
    let mut cx = Context::from_waker(&second_waker);
    assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
    assert_eq!(message(consumer.try_recv()), 1);
    assert_eq!(
        first_wakes.0.load(Ordering::SeqCst),
        1,
        "the first waiter is woken"
    );
    assert_eq!(second_wakes.0.load(Ordering::SeqCst), 0);
    // The first waiter gives up: its wake goes to the second, which then sends.
    drop(first);
    assert_eq!(
        second_wakes.0.load(Ordering::SeqCst),
        1,
        "the wake was passed on"
    );
    let mut cx = Context::from_waker(&second_waker);
    assert!(matches!(
        Pin::new(&mut second).poll(&mut cx),
        Poll::Ready(Ok(()))
    ));
    drop(second);
    assert_eq!(message(consumer.try_recv()), 3);
}

/// `close` drops every queued message (an ask among them would resolve `Closed`), refuses
/// later sends, wakes waiting senders with `Closed`, and the consumer sees `Disconnected`.
#[test]
fn close_drops_what_is_queued_and_refuses_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mailbox = Mailbox::new(2, ActorId::next(&"test"));
    mailbox.add_sender();
    let mut consumer = mailbox.consumer().unwrap();
    for _ in 0..2 {
        assert!(mailbox.try_send(Counted(drops.clone())).is_ok());
    }
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(wakes.clone());
    let mut waiting = mailbox.send(Counted(drops.clone()));
    assert!(
        Pin::new(&mut waiting)
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    );
    mailbox.close();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        2,
        "the queued messages are dropped"
    );
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "the waiting sender is woken"
    );
    assert!(matches!(
        Pin::new(&mut waiting).poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Err(Error::Closed))
    ));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        3,
        "its message is dropped too"
    );
    assert!(matches!(
        mailbox.try_send(Counted(drops.clone())),
        Err((Error::Closed, _))
    ));
    assert!(matches!(consumer.try_recv(), Some(Received::Disconnected)));
    assert_eq!(mailbox.len(), 0, "every permit came back");
}

/// The consumer receives everything the last ref sent before it left, then
/// `Disconnected`; a stop request comes before any further message.
#[test]
fn the_last_sender_leaving_disconnects_after_its_messages() {
    let mailbox = Mailbox::new(4, ActorId::next(&"test"));
    mailbox.add_sender();
    let mut consumer = mailbox.consumer().unwrap();
    mailbox.try_send(1u8).unwrap();
    mailbox.request_stop();
    assert!(matches!(consumer.try_recv(), Some(Received::Stop)));
    mailbox.clear_last_incarnation();
    mailbox.try_send(2).unwrap();
    mailbox.remove_sender();
    assert_eq!(message(consumer.try_recv()), 1);
    assert_eq!(message(consumer.try_recv()), 2);
    assert!(matches!(consumer.try_recv(), Some(Received::Disconnected)));
}

/// Producers on other threads and a consumer parking between messages: every message
/// arrives once, in order per producer, and no wake is lost (the consumer would hang).
#[test]
fn producers_on_other_threads_reach_a_parking_consumer() {
    const PRODUCERS: usize = 2;
    let per_producer = if cfg!(miri) { 20 } else { 2000 };
    let mailbox = Mailbox::new(4, ActorId::next(&"test"));
    let mut consumer = mailbox.consumer().unwrap();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            mailbox.add_sender();
            let mailbox = mailbox.clone();
            std::thread::spawn(move || {
                for i in 0..per_producer {
                    futures::executor::block_on(mailbox.send((producer, i))).unwrap();
                }
                mailbox.remove_sender();
            })
        })
        .collect();
    let mut next = [0; PRODUCERS];
    futures::executor::block_on(async {
        loop {
            match consumer.recv().await {
                Received::Message((producer, i)) => {
                    assert_eq!(i, next[producer], "per-producer order");
                    next[producer] += 1;
                }
                Received::Disconnected => break,
                Received::Stop | Received::Signal(_) => {
                    unreachable!("nobody asked to stop or signalled")
                }
            }
        }
    });
    for producer in producers {
        producer.join().unwrap();
    }
    assert_eq!(next, [per_producer; PRODUCERS]);
}
