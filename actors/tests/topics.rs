//! Topics through the public API: every subscriber gets the messages in one publish order
//! (concurrent publishers included), ended subscribers are removed, each full-mailbox policy
//! does what it says, and the topic's metrics count it.

use actors::prelude::*;
use actors::topic::Published;
use actors::{Topic, WhenFull};
use futures::channel::oneshot;

#[actor(mailbox = 1)]
struct Reader {
    lines: Vec<u64>,
}

#[actor]
impl Reader {
    fn line(&mut self, line: u64) {
        self.lines.push(line);
    }

    fn lines(&self) -> Vec<u64> {
        self.lines.clone()
    }

    async fn hold(&mut self, gate: oneshot::Receiver<()>) {
        let _ = gate.await;
    }
}

fn reader(context: &runtime::Context) -> ReaderRef {
    Reader { lines: Vec::new() }.spawn(context)
}

/// Every subscriber gets every message in the order published; two publishers at once
/// still give all subscribers one and the same order, each publisher's in its own order.
#[runtime::test(timeout = "20s", worker_threads = 2)]
async fn subscribers_get_one_publish_order(context: runtime::Context) {
    let topic = Topic::new(&context, "order", WhenFull::Wait);
    let readers: Vec<_> = (0..3).map(|_| reader(&context)).collect();
    for reader in &readers {
        topic.subscribe(reader.line_recipient());
    }
    assert_eq!(topic.subscribers(), 3);
    for line in 0..100 {
        let published = topic.publish(line).await;
        assert_eq!(
            published,
            Published {
                delivered: 3,
                dropped: 0,
                removed: 0
            }
        );
    }
    for reader in &readers {
        assert_eq!(reader.lines().await.unwrap(), (0..100).collect::<Vec<_>>());
    }

    let (a, b) = (topic.clone(), topic.clone());
    let first = context.clone().spawn(move |_| async move {
        for line in 1000..1200 {
            a.publish(line).await;
        }
    });
    let second = context.clone().spawn(move |_| async move {
        for line in 2000..2200 {
            b.publish(line).await;
        }
    });
    first.await.unwrap();
    second.await.unwrap();
    let mut orders = Vec::new();
    for reader in &readers {
        let lines = reader.lines().await.unwrap();
        orders.push(lines[100..].to_vec());
    }
    assert!(
        orders.iter().all(|order| *order == orders[0]),
        "one order for all"
    );
    let from = |low: u64| -> Vec<u64> {
        orders[0]
            .iter()
            .copied()
            .filter(|line| (low..low + 200).contains(line))
            .collect()
    };
    assert_eq!(from(1000), (1000..1200).collect::<Vec<_>>());
    assert_eq!(from(2000), (2000..2200).collect::<Vec<_>>());
}

/// A subscriber whose actor ended is removed by the next publish, which does not count it.
#[runtime::test(timeout = "20s")]
async fn ended_subscribers_are_removed(context: runtime::Context) {
    let topic = Topic::new(&context, "ended", WhenFull::Wait);
    let (staying, leaving) = (reader(&context), reader(&context));
    topic.subscribe(staying.line_recipient());
    topic.subscribe(leaving.line_recipient());
    leaving.stop().await;
    assert_eq!(
        topic.publish(1).await,
        Published {
            delivered: 1,
            dropped: 0,
            removed: 1
        }
    );
    assert_eq!(topic.subscribers(), 1);
    assert_eq!(staying.lines().await.unwrap(), [1]);
    // And by hand.
    assert_eq!(topic.unsubscribe_actor(staying.id()), 1);
    assert_eq!(topic.subscribers(), 0);
    assert_eq!(topic.publish(2).await, Published::default());
}

/// Holds `reader` in a handler until the returned sender fires, and fills its one slot.
async fn stall(topic: &Topic<u64>, reader: &ReaderRef) -> oneshot::Sender<()> {
    let (open, gate) = oneshot::channel();
    reader.tell_hold(gate).await.unwrap();
    // The hold runs (or waits in the slot); publish until the slot is taken too.
    while topic.publish(0).await.delivered == 1 {}
    open
}

/// `Drop` skips a full subscriber for that message and counts it.
#[runtime::test(timeout = "20s")]
async fn drop_skips_a_full_subscriber(context: runtime::Context) {
    let topic = Topic::new(&context, "dropping", WhenFull::Drop);
    let slow = reader(&context);
    topic.subscribe(slow.line_recipient());
    let open = stall(&topic, &slow).await;
    assert_eq!(
        topic.publish(7).await,
        Published {
            delivered: 0,
            dropped: 1,
            removed: 0
        }
    );
    assert_eq!(topic.subscribers(), 1);
    open.send(()).unwrap();
    assert!(!slow.lines().await.unwrap().contains(&7), "7 was dropped");
    let text = context.encode();
    assert!(
        text.lines().any(
            |line| line.starts_with("topic_dropped_total{topic=\"dropping\"}")
                && !line.ends_with(" 0")
        ),
        "{text}"
    );
}

/// `Unsubscribe` drops a full subscriber from the topic.
#[runtime::test(timeout = "20s")]
async fn unsubscribe_removes_a_full_subscriber(context: runtime::Context) {
    let topic = Topic::new(&context, "kicking", WhenFull::Unsubscribe);
    let (slow, prompt) = (reader(&context), reader(&context));
    topic.subscribe(slow.line_recipient());
    topic.subscribe(prompt.line_recipient());
    let (open, gate) = oneshot::channel();
    slow.tell_hold(gate).await.unwrap();
    // Until the slow one is full: then it is kicked, the prompt one still served.
    let mut kicked = None;
    for line in 0..10 {
        let published = topic.publish(line).await;
        if published.removed == 1 {
            kicked = Some((line, published));
            break;
        }
        // The prompt reader drains its one slot before the next publish.
        prompt.lines().await.unwrap();
    }
    let (line, published) = kicked.expect("the slow reader fills up and is kicked");
    assert_eq!(
        published,
        Published {
            delivered: 1,
            dropped: 1,
            removed: 1
        }
    );
    assert_eq!(topic.subscribers(), 1);
    open.send(()).unwrap();
    assert!(!slow.lines().await.unwrap().contains(&line));
    assert!(prompt.lines().await.unwrap().contains(&line));
}

/// `Wait` holds the publish until the full subscriber has room, then delivers.
#[runtime::test(timeout = "20s")]
async fn wait_holds_the_publish_until_there_is_room(context: runtime::Context) {
    let topic = Topic::new(&context, "waiting", WhenFull::Wait);
    let slow = reader(&context);
    topic.subscribe(slow.line_recipient());
    let (open, gate) = oneshot::channel();
    slow.tell_hold(gate).await.unwrap();
    // Fill the slot behind the hold (or the hold's own slot, if not yet taken).
    let mut publishes = 1;
    let mut publish = Box::pin(topic.publish(1));
    let mut pending = futures::poll!(&mut publish).is_pending();
    while !pending {
        publishes += 1;
        publish = Box::pin(topic.publish(1));
        pending = futures::poll!(&mut publish).is_pending();
    }
    open.send(()).unwrap();
    assert_eq!(publish.await.delivered, 1);
    let text = context.encode();
    assert!(
        text.contains(&format!(
            "topic_published_total{{topic=\"waiting\"}} {publishes}"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "topic_delivered_total{{topic=\"waiting\"}} {publishes}"
        )),
        "{text}"
    );
    assert!(
        text.contains("topic_subscribers{topic=\"waiting\"} 1"),
        "{text}"
    );
}

/// `publish_except` skips the subscriptions of one actor (a speaker does not hear itself);
/// `is_subscribed` tells whether a publish removed a subscription.
#[runtime::test(timeout = "20s")]
async fn publish_except_skips_one_actor(context: runtime::Context) {
    let topic = Topic::new(&context, "echo", WhenFull::Wait);
    let (speaker, listener) = (reader(&context), reader(&context));
    let spoken = topic.subscribe(speaker.line_recipient());
    let heard = topic.subscribe(listener.line_recipient());
    assert_eq!(topic.publish_except(5, speaker.id()).await.delivered, 1);
    assert_eq!(topic.publish_except(6, None).await.delivered, 2);
    assert_eq!(speaker.lines().await.unwrap(), [6]);
    assert_eq!(listener.lines().await.unwrap(), [5, 6]);
    listener.stop().await;
    topic.publish(7).await;
    assert!(topic.is_subscribed(spoken));
    assert!(!topic.is_subscribed(heard));
}
