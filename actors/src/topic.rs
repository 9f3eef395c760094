//! [`Topic`]: typed publish/subscribe. Subscribers are [`Recipient`]s of handlers taking
//! the topic's message; `publish` delivers a clone to each.
//!
//! Invariants:
//! - Each subscriber gets the messages in publish order: publishes are serialized (an async
//!   lock, held while one message reaches every subscriber), whoever publishes them.
//! - A delivery first tries the subscriber's mailbox without waiting (no allocation, no
//!   await). Only a full mailbox brings in the topic's [`WhenFull`] policy: wait for room
//!   (the publisher, and publishes after it, wait: backpressure), drop the message for that
//!   subscriber and count it, or unsubscribe it (what a chat does to a reader too slow).
//! - A subscriber whose actor ended is removed at its first failed delivery, and counts
//!   neither as delivered nor dropped.
//! - The subscriber list is copy-on-write: a publish clones an `Arc` of it, so subscribing
//!   or unsubscribing never waits for a publish that is waiting for room.
//!
//! Under [`WhenFull::Wait`], a subscriber that publishes to its own topic from its handler
//! can deadlock with a publish waiting for room in its mailbox: such topics take
//! [`WhenFull::Drop`] or [`WhenFull::Unsubscribe`]. A publish dropped while it waits leaves
//! its message undelivered to the subscribers it had not reached (none gets a later message
//! before an earlier one).
//!
//! A subscription is a recipient, which keeps its actor reachable as any ref does: an actor
//! that should end when its other refs are gone is unsubscribed first
//! ([`Topic::unsubscribe`], [`Topic::unsubscribe_actor`]).

use crate::sync::Mutex;
use crate::{ActorId, Error, Recipient};
use futures::lock::Mutex as AsyncMutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What a publish does for a subscriber whose mailbox is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// Wait for room: the publish (and those after it) waits for the slowest subscriber.
    Wait,
    /// Skip this subscriber for this message, counted in `topic_dropped_total`.
    Drop,
    /// Unsubscribe it (the message is dropped for it, and counted as dropped).
    Unsubscribe,
}

/// What one publish did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// Subscribers whose mailbox took the message.
    pub delivered: usize,
    /// Subscribers that did not get it because their mailbox was full.
    pub dropped: usize,
    /// Subscribers removed: ended, or unsubscribed for being full.
    pub removed: usize,
}

/// A subscription's handle, for [`Topic::unsubscribe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subscription(u64);

/// A subscriber, with the reply type of its handler erased.
trait Subscriber<M>: Send + Sync {
    fn try_deliver(&self, message: M) -> Result<(), (Error, M)>;
    fn deliver(&self, message: M) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + '_>>;
    fn id(&self) -> ActorId;
}

impl<M: Send + 'static, R: Send + 'static> Subscriber<M> for Recipient<M, R> {
    fn try_deliver(&self, message: M) -> Result<(), (Error, M)> {
        self.try_tell_or_return(message)
    }

    fn deliver(&self, message: M) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + '_>> {
        Box::pin(self.tell(message))
    }

    fn id(&self) -> ActorId {
        Recipient::id(self)
    }
}

type Subscribers<M> = Arc<[(Subscription, Arc<dyn Subscriber<M>>)]>;

struct Shared<M> {
    label: &'static str,
    policy: WhenFull,
    subscribers: Mutex<Subscribers<M>>,
    next: Mutex<u64>,
    /// Held by the publish under way: publishes reach subscribers one after another.
    publishing: AsyncMutex<()>,
    metrics: TopicMetrics,
}

/// A typed topic: see the module documentation. Cheap to clone; clones publish to the same
/// subscribers.
pub struct Topic<M> {
    shared: Arc<Shared<M>>,
}

impl<M> Clone for Topic<M> {
    fn clone(&self) -> Self {
        Topic {
            shared: self.shared.clone(),
        }
    }
}

impl<M: Clone + Send + 'static> Topic<M> {
    /// A topic with no subscribers, counted under `label` (`topic="<label>"`: give topics of
    /// one kind, such as every chat room, one label) in `context`'s runtime, with `policy`
    /// for full mailboxes.
    pub fn new(context: &runtime::Context, label: &'static str, policy: WhenFull) -> Self {
        Topic {
            shared: Arc::new(Shared {
                label,
                policy,
                subscribers: Mutex::new(Arc::from(Vec::new())),
                next: Mutex::new(0),
                publishing: AsyncMutex::new(()),
                metrics: TopicMetrics::of(context, label),
            }),
        }
    }

    /// Subscribes `subscriber`: it gets every message published from now on.
    pub fn subscribe<R: Send + 'static>(&self, subscriber: Recipient<M, R>) -> Subscription {
        let id = {
            let mut next = self.shared.next.lock();
            *next += 1;
            Subscription(*next)
        };
        let mut subscribers = self.shared.subscribers.lock();
        let mut list: Vec<_> = subscribers.iter().cloned().collect();
        list.push((id, Arc::new(subscriber)));
        *subscribers = Arc::from(list);
        self.shared.metrics.subscribers.inc();
        id
    }

    /// Removes a subscription; whether it was there.
    pub fn unsubscribe(&self, subscription: Subscription) -> bool {
        self.remove(|id, _| id == subscription) > 0
    }

    /// Removes every subscription of the actor `actor`; how many there were.
    pub fn unsubscribe_actor(&self, actor: ActorId) -> usize {
        self.remove(|_, subscriber| subscriber.id() == actor)
    }

    /// Subscribers now.
    pub fn subscribers(&self) -> usize {
        self.shared.subscribers.lock().len()
    }

    /// The topic's label.
    pub fn label(&self) -> &'static str {
        self.shared.label
    }

    fn remove(&self, matches: impl Fn(Subscription, &dyn Subscriber<M>) -> bool) -> usize {
        let mut subscribers = self.shared.subscribers.lock();
        let before = subscribers.len();
        let kept: Vec<_> = subscribers
            .iter()
            .filter(|(id, subscriber)| !matches(*id, &**subscriber))
            .cloned()
            .collect();
        let removed = before - kept.len();
        if removed > 0 {
            *subscribers = Arc::from(kept);
            self.shared.metrics.subscribers.dec_by(removed as i64);
        }
        removed
    }

    /// Whether `subscription` is still subscribed (a publish may have removed it: its actor
    /// ended, or was full under [`WhenFull::Unsubscribe`]).
    pub fn is_subscribed(&self, subscription: Subscription) -> bool {
        self.shared
            .subscribers
            .lock()
            .iter()
            .any(|(id, _)| *id == subscription)
    }

    /// Delivers `message` to every subscriber (see the module documentation for order and
    /// full mailboxes), and says what happened.
    pub async fn publish(&self, message: M) -> Published {
        self.publish_except(message, None).await
    }

    /// [`publish`](Self::publish) to every subscriber but those of the actor `except` (a
    /// chat's speaker does not hear its own line back).
    pub async fn publish_except(
        &self,
        message: M,
        except: impl Into<Option<ActorId>>,
    ) -> Published {
        let except = except.into();
        let _turn = self.shared.publishing.lock().await;
        let subscribers = self.shared.subscribers.lock().clone();
        let skipped = |subscriber: &Arc<dyn Subscriber<M>>| {
            except.is_some_and(|except| except == subscriber.id())
        };
        let mut published = Published::default();
        let mut gone: Vec<Subscription> = Vec::new();
        // The last subscriber served takes the message itself, the others a clone.
        let last = subscribers
            .iter()
            .rposition(|(_, subscriber)| !skipped(subscriber))
            .unwrap_or(0);
        let mut message = Some(message);
        for (index, (id, subscriber)) in subscribers.iter().enumerate() {
            if index > last || skipped(subscriber) {
                continue;
            }
            let copy = if index == last {
                message
                    .take()
                    .expect("the last subscriber takes the original")
            } else {
                message.clone().expect("kept for the last subscriber")
            };
            match subscriber.try_deliver(copy) {
                Ok(()) => published.delivered += 1,
                Err((Error::Full, copy)) => match self.shared.policy {
                    WhenFull::Wait => match subscriber.deliver(copy).await {
                        Ok(()) => published.delivered += 1,
                        Err(_) => gone.push(*id),
                    },
                    WhenFull::Drop => published.dropped += 1,
                    WhenFull::Unsubscribe => {
                        published.dropped += 1;
                        gone.push(*id);
                    }
                },
                Err(_) => gone.push(*id),
            }
        }
        if !gone.is_empty() {
            published.removed = self.remove(|id, _| gone.contains(&id));
        }
        let metrics = &self.shared.metrics;
        metrics.published.inc();
        metrics.delivered.inc_by(published.delivered as u64);
        metrics.dropped.inc_by(published.dropped as u64);
        published
    }
}

impl<M> Drop for Shared<M> {
    fn drop(&mut self) {
        // The label's gauge sums its topics' subscribers: this topic's leave with it.
        self.metrics
            .subscribers
            .dec_by(self.subscribers.get_mut().len() as i64);
    }
}

impl<M> std::fmt::Debug for Topic<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("label", &self.shared.label)
            .field("policy", &self.shared.policy)
            .field(
                "subscribers",
                // `try_lock`: Debug never waits, nor deadlocks on a lock its thread holds.
                &self
                    .shared
                    .subscribers
                    .try_lock()
                    .map(|subscribers| subscribers.len()),
            )
            .finish()
    }
}

type Label = [(&'static str, &'static str); 1];

/// The topic families of one runtime.
struct TopicFamilies {
    published: Family<Label, Counter>,
    delivered: Family<Label, Counter>,
    dropped: Family<Label, Counter>,
    subscribers: Family<Label, Gauge>,
}

/// One topic's handles on its label's metrics.
struct TopicMetrics {
    published: Counter,
    delivered: Counter,
    dropped: Counter,
    subscribers: Gauge,
}

impl TopicMetrics {
    fn of(context: &runtime::Context, label: &'static str) -> Self {
        let families = context.extension(|registry| {
            let families = TopicFamilies {
                published: Family::default(),
                delivered: Family::default(),
                dropped: Family::default(),
                subscribers: Family::default(),
            };
            registry.register(
                "topic_published",
                "Messages published, by topic label",
                families.published.clone(),
            );
            registry.register(
                "topic_delivered",
                "Deliveries to subscribers' mailboxes, by topic label",
                families.delivered.clone(),
            );
            registry.register(
                "topic_dropped",
                "Deliveries skipped because a subscriber's mailbox was full, by topic label",
                families.dropped.clone(),
            );
            registry.register(
                "topic_subscribers",
                "Subscribers of the label's topics now",
                families.subscribers.clone(),
            );
            families
        });
        let key = [("topic", label)];
        TopicMetrics {
            published: families.published.get_or_create(&key).clone(),
            delivered: families.delivered.get_or_create(&key).clone(),
            dropped: families.dropped.get_or_create(&key).clone(),
            subscribers: families.subscribers.get_or_create(&key).clone(),
        }
    }
}
