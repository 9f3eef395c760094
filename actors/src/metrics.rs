//! Per-label actor metrics, registered once per runtime: messages handled, time spent
//! handling them, mailbox depth, restarts, actors running and exits (also labelled by
//! reason), each labelled `actor="<label>"`.
//!
//! The run loop counts in plain fields and publishes to the shared atomics only when its
//! mailbox runs empty (before it waits) or every `FLUSH_EVERY` messages: actors of one label
//! on different workers then do not fight over one cache line per message. Handler time is
//! measured per busy stretch, from taking a message while idle to finding the mailbox empty,
//! so a busy actor reads the clock twice per stretch, not twice per message, and that clock
//! is the CPU's time-stamp counter where it can be (see `clock`). It is wall time: awaits
//! inside a handler count. The first encoding calibrates that clock (a 5 ms spin). The depth
//! gauge sums the depths the label's actors last sampled (each adds the change in its own).

use crate::ExitReason;
use crate::clock;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

type Label = [(&'static str, &'static str); 1];

/// The families, one set per runtime.
pub(crate) struct Families {
    handled: Family<Label, Counter>,
    handler_seconds: Family<Label, HandlerSeconds>,
    depth: Family<Label, Gauge>,
    restarts: Family<Label, Counter>,
    running: Family<Label, Gauge>,
    exits: Family<[(&'static str, &'static str); 2], Counter>,
    ask_timeouts: Family<Label, Counter>,
    /// Each label's handles, looked up once: a spawn then clones four handles instead of
    /// hashing its label into four families. Labels are `'static`, so the list is bounded by
    /// the program's labels.
    labels: crate::sync::Mutex<Vec<(&'static str, Arc<Handles>)>>,
}

/// One label's handles.
struct Handles {
    label: &'static str,
    handled: Counter,
    handler_seconds: HandlerSeconds,
    depth: Gauge,
    running: Gauge,
    restarts: Counter,
    ask_timeouts: Counter,
    /// The runtime's exit family (a shared handle), and this label's counter for each
    /// reason, looked up in it on the first exit of that kind (so only reasons that
    /// happened show).
    exits: Family<[(&'static str, &'static str); 2], Counter>,
    exit_counters: [OnceLock<Counter>; EXIT_KINDS],
}

/// `ExitReason`'s kinds.
const EXIT_KINDS: usize = 7;

/// Where `reason`'s kind is counted in `Handles::exit_counters`.
fn exit_index(reason: &ExitReason) -> usize {
    match reason {
        ExitReason::Normal => 0,
        ExitReason::Stopped => 1,
        ExitReason::Panicked(_) => 2,
        ExitReason::Shutdown => 3,
        ExitReason::Linked { .. } => 4,
        ExitReason::NodeDown { .. } => 5,
        ExitReason::NotFound => 6,
    }
}

impl Families {
    /// This runtime's families, registered on first use.
    pub(crate) fn of(context: &runtime::Context) -> Arc<Families> {
        context.extension(|registry| {
            let families = Families {
                handled: Family::default(),
                handler_seconds: Family::default(),
                depth: Family::default(),
                restarts: Family::default(),
                running: Family::default(),
                exits: Family::default(),
                ask_timeouts: Family::default(),
                labels: Default::default(),
            };
            registry.register(
                "actor_messages_handled",
                "Messages handled, by actor label",
                families.handled.clone(),
            );
            registry.register(
                "actor_handler_seconds",
                "Wall time spent handling messages (awaits inside handlers included), by actor label",
                families.handler_seconds.clone(),
            );
            registry.register(
                "actor_mailbox_depth",
                "Messages waiting in the mailboxes of the label's actors, as each last sampled its own",
                families.depth.clone(),
            );
            registry.register(
                "actor_restarts",
                "Restarts by a supervisor, by actor label",
                families.restarts.clone(),
            );
            registry.register(
                "actor_running",
                "Actors running now, by actor label",
                families.running.clone(),
            );
            registry.register(
                "actor_exits",
                "Ends of actor incarnations, by actor label and exit reason (normal, stopped, \
                 panicked, shutdown, linked)",
                families.exits.clone(),
            );
            registry.register(
                "actor_ask_timeouts",
                "Asks whose deadline passed before the reply, by actor label",
                families.ask_timeouts.clone(),
            );
            families
        })
    }

    /// The restart counter of actors labelled `label`.
    pub(crate) fn restarts(&self, label: &'static str) -> Counter {
        self.handles(label).restarts.clone()
    }

    /// `label`'s handles, made on its first use.
    fn handles(&self, label: &'static str) -> Arc<Handles> {
        let mut labels = self.labels.lock();
        if let Some((_, handles)) = labels.iter().find(|(existing, _)| *existing == label) {
            return handles.clone();
        }
        let key = [("actor", label)];
        let handles = Arc::new(Handles {
            label,
            exits: self.exits.clone(),
            exit_counters: Default::default(),
            handled: self.handled.get_or_create(&key).clone(),
            handler_seconds: self.handler_seconds.get_or_create(&key).clone(),
            depth: self.depth.get_or_create(&key).clone(),
            running: self.running.get_or_create(&key).clone(),
            restarts: self.restarts.get_or_create(&key).clone(),
            ask_timeouts: self.ask_timeouts.get_or_create(&key).clone(),
        });
        labels.push((label, handles.clone()));
        handles
    }

    /// The metrics of one actor labelled `label`.
    pub(crate) fn actor(&self, label: &'static str) -> ActorMetrics {
        let handles = self.handles(label);
        handles.running.inc();
        ActorMetrics {
            handles,
            busy_since: 0,
            unpublished: 0,
            began: false,
            depth: 0,
            left: false,
        }
    }
}

/// Publish at least this often while an actor stays busy.
const FLUSH_EVERY: u16 = 1024;

/// One actor's handles on its label's metrics, with what it has not published yet. Counts
/// the actor as running while it lives.
pub(crate) struct ActorMetrics {
    handles: Arc<Handles>,
    /// Clock ticks when the busy stretch began (at least 1), or 0 while idle. In place of an
    /// `Option` (16 bytes): with the narrow fields below, 24 bytes in every actor's future.
    busy_since: u64,
    /// Handled and not published yet: fewer than `FLUSH_EVERY`.
    unpublished: u16,
    /// The incarnation's `on_start` returned (what its end hooks are told). Not a metric:
    /// kept here, in bytes the fields around it leave free, rather than beside the metrics
    /// in every actor's future.
    pub(crate) began: bool,
    /// This actor's share of its label's depth gauge, as last published (a depth is at most
    /// the mailbox's capacity, below 2^31).
    depth: i32,
    /// [`leave`](Self::leave) ran: the actor is no longer counted running. In the spare byte
    /// beside `began`.
    left: bool,
}

impl ActorMetrics {
    /// A message was taken; `queued` are still waiting.
    pub(crate) fn taken(&mut self, queued: usize) {
        if self.busy_since == 0 {
            self.busy_since = clock::ticks().max(1);
            self.set_depth(queued);
        }
    }

    /// A message was handled.
    pub(crate) fn handled(&mut self, queued: usize) {
        self.unpublished += 1;
        if self.unpublished >= FLUSH_EVERY {
            self.publish(queued);
        }
    }

    /// The label's counter of asks that timed out.
    pub(crate) fn ask_timeouts(&self) -> Counter {
        self.handles.ask_timeouts.clone()
    }

    /// Counts an end of this actor's incarnation for `reason`.
    pub(crate) fn exit(&self, reason: &ExitReason) {
        let handles = &*self.handles;
        handles.exit_counters[exit_index(reason)]
            .get_or_init(|| {
                let key = [("actor", handles.label), ("reason", reason.kind())];
                handles.exits.get_or_create(&key).clone()
            })
            .inc();
    }

    /// The incarnation ended (by itself, or its future was dropped): publishes what is left
    /// and leaves the gauges (its depth, `actor_running`). Called as its end is counted,
    /// before anyone is told of it, so whoever hears of the end finds it no longer running;
    /// once only, and the drop then does nothing more.
    pub(crate) fn leave(&mut self) {
        if !self.left {
            self.left = true;
            self.publish(0);
            self.handles.running.dec();
        }
    }

    /// The mailbox is empty (or the actor stops): publish, and end the busy stretch.
    pub(crate) fn idle(&mut self) {
        self.publish(0);
        self.busy_since = 0;
    }

    fn publish(&mut self, queued: usize) {
        if self.unpublished > 0 {
            self.handles.handled.inc_by(u64::from(self.unpublished));
            self.unpublished = 0;
        }
        if self.busy_since != 0 {
            let now = clock::ticks().max(1);
            self.handles
                .handler_seconds
                .0
                .fetch_add(now.saturating_sub(self.busy_since), Ordering::Relaxed);
            self.busy_since = now;
        }
        self.set_depth(queued);
    }

    /// The label's gauge is the sum of its actors' depths: each adds the change in its own.
    fn set_depth(&mut self, queued: usize) {
        let queued = queued as i32;
        if queued != self.depth {
            self.handles.depth.inc_by(i64::from(queued - self.depth));
            self.depth = queued;
        }
    }
}

impl Drop for ActorMetrics {
    /// Leaves the gauges, if [`leave`](ActorMetrics::leave) has not.
    fn drop(&mut self) {
        self.leave();
    }
}

/// Handler time: clock ticks, added by actors as they go idle and turned into seconds when
/// encoded (see the `clock` module).
#[derive(Clone, Debug, Default)]
pub(crate) struct HandlerSeconds(Arc<AtomicU64>);

impl TypedMetric for HandlerSeconds {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for HandlerSeconds {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let seconds = clock::seconds(self.0.load(Ordering::Relaxed));
        encoder.encode_counter::<NoLabelSet, _, u64>(&seconds, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}
