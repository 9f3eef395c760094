//! The `tracing` feature: the spans and events an actor's life produces, as a subscriber
//! sees them. Run with `cargo test -p actors --features tracing --test tracing`.
//!
//! One collecting subscriber is the process's global default (actors run on the runtime's
//! workers, which a thread's default would not reach); each test names its actors with
//! labels of its own and reads only their records. Every record a test asserts is made
//! before a reply the test awaits (or before the ask's own result), so no test waits for one.
#![cfg(feature = "tracing")]

use actors::Error;
use actors::prelude::*;
use actors::supervisor::{ChildSpec, Restart, Strategy, Supervisor};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A field's value as text: a string as it is, anything else as its `Debug`.
type Fields = BTreeMap<String, String>;

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

/// A span as it was made.
#[derive(Clone, Debug)]
struct SpanRecord {
    name: &'static str,
    fields: Fields,
}

/// An event, with the span it happened in (the innermost entered on its thread).
#[derive(Clone, Debug)]
struct EventRecord {
    level: Level,
    fields: Fields,
    within: Option<SpanRecord>,
}

impl EventRecord {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct Records {
    spans: HashMap<u64, SpanRecord>,
    events: Vec<EventRecord>,
}

/// Records every span and event; nothing is filtered out.
#[derive(Default)]
struct Collector {
    next: AtomicU64,
    records: Mutex<Records>,
}

thread_local! {
    /// The spans entered on this thread, innermost last.
    static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl Subscriber for Collector {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = Fields::new();
        span.record(&mut Collect(&mut fields));
        let name = span.metadata().name();
        self.records
            .lock()
            .spans
            .insert(id, SpanRecord { name, fields });
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(record) = self.records.lock().spans.get_mut(&span.into_u64()) {
            values.record(&mut Collect(&mut record.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::new();
        event.record(&mut Collect(&mut fields));
        let innermost = ENTERED.with(|entered| entered.borrow().last().copied());
        let mut records = self.records.lock();
        let within = innermost.and_then(|id| records.spans.get(&id).cloned());
        records.events.push(EventRecord {
            level: *event.metadata().level(),
            fields,
            within,
        });
    }

    fn enter(&self, span: &Id) {
        ENTERED.with(|entered| entered.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with(|entered| {
            let mut entered = entered.borrow_mut();
            if let Some(at) = entered.iter().rposition(|&id| id == span.into_u64()) {
                entered.remove(at);
            }
        });
    }
}

/// The process's collector, installed as the global default on first use.
fn collector() -> &'static Arc<Collector> {
    static COLLECTOR: OnceLock<Arc<Collector>> = OnceLock::new();
    COLLECTOR.get_or_init(|| {
        let collector = Arc::new(Collector::default());
        tracing::subscriber::set_global_default(collector.clone())
            .expect("no other subscriber is installed in this test binary");
        collector
    })
}

/// The events with the message `message` whose field `field` is `value`.
fn events_by(field: &str, value: &str, message: &str) -> Vec<EventRecord> {
    collector()
        .records
        .lock()
        .events
        .iter()
        .filter(|event| {
            event.field("message") == Some(message) && event.field(field) == Some(value)
        })
        .cloned()
        .collect()
}

/// The events with the message `message` about actors labelled `label`.
fn events(label: &str, message: &str) -> Vec<EventRecord> {
    events_by("actor", label, message)
}

/// The events with the message `message` of the supervisor labelled `label`.
fn supervisor_events(label: &str, message: &str) -> Vec<EventRecord> {
    events_by("supervisor", label, message)
}

/// The spans named `name` of actors labelled `label`.
fn spans(label: &str, name: &str) -> Vec<SpanRecord> {
    collector()
        .records
        .lock()
        .spans
        .values()
        .filter(|span| {
            span.name == name && span.fields.get("actor").map(String::as_str) == Some(label)
        })
        .cloned()
        .collect()
}

#[actor(name = "traced_worker")]
struct Worker {
    incarnation: usize,
}

#[actor]
impl Worker {
    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn fail(&mut self) {
        panic!("fails on purpose");
    }
}

/// A supervised actor's life (start, a handler's panic, the restart, the second start)
/// produces: a span per incarnation, a span per message naming its handler, an event for
/// each start, an ERROR event for the panicked exit (within the failed incarnation's span;
/// the failing message's span has closed by then, as the unwind left it), and the supervisor's restart event with the child, the reason,
/// the restart's number and its backoff delay.
#[runtime::test(timeout = "20s")]
async fn a_supervised_life_is_traced(context: runtime::Context) {
    collector();
    let made = Arc::new(AtomicUsize::new(0));
    let counter = made.clone();
    let mut supervisor =
        Supervisor::new("traced_team", Strategy::OneForOne).intensity(10, Duration::from_secs(60));
    let worker = supervisor.child(ChildSpec::new(move || Worker {
        incarnation: counter.fetch_add(1, Ordering::SeqCst) + 1,
    }));
    let supervisor = supervisor.spawn(&context);
    let id = worker.id().to_string();
    assert_eq!(worker.incarnation().await, Ok(1));
    assert_eq!(
        worker.fail().await,
        Err(Error::Panicked {
            actor: "traced_worker"
        })
    );
    // Answered by the second incarnation: the first one's exit, the restart and the second
    // start were all recorded before.
    assert_eq!(worker.incarnation().await, Ok(2));

    let started = events("traced_worker", "actor started");
    let numbers: Vec<_> = started.iter().map(|e| e.field("incarnation")).collect();
    assert_eq!(numbers, [Some("1"), Some("2")], "{started:?}");
    assert!(
        started.iter().all(|e| e.field("id") == Some(&*id)),
        "{started:?}"
    );

    let exited = events("traced_worker", "actor exited");
    assert_eq!(exited.len(), 1, "{exited:?}");
    let exit = &exited[0];
    assert_eq!(exit.level, Level::ERROR);
    assert_eq!(exit.field("reason"), Some("panicked"));
    assert_eq!(exit.field("detail"), Some("panicked: fails on purpose"));
    assert_eq!(exit.field("incarnation"), Some("1"));
    let within = exit
        .within
        .as_ref()
        .expect("the exit is within the incarnation's span");
    assert_eq!(within.name, "actor");
    assert_eq!(
        within.fields.get("incarnation").map(String::as_str),
        Some("1")
    );

    let restarts = supervisor_events("traced_team", "supervisor restarts a child");
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    let restart = &restarts[0];
    assert_eq!(restart.field("supervisor"), Some("traced_team"));
    assert_eq!(restart.field("actor"), Some("traced_worker"));
    assert_eq!(restart.field("id"), Some(&*id));
    assert_eq!(restart.field("reason"), Some("panicked"));
    assert_eq!(restart.field("restart"), Some("1"));
    assert_eq!(restart.field("delay"), Some("0ns"));

    let incarnations = spans("traced_worker", "actor");
    let mut numbers: Vec<_> = incarnations
        .iter()
        .map(|span| span.fields.get("incarnation").cloned())
        .collect();
    numbers.sort();
    assert_eq!(numbers, [Some("1".into()), Some("2".into())]);
    let mut handlers: Vec<_> = spans("traced_worker", "message")
        .into_iter()
        .inspect(|span| assert_eq!(span.fields.get("id"), Some(&id)))
        .filter_map(|span| span.fields.get("handler").cloned())
        .collect();
    handlers.sort();
    assert_eq!(handlers, ["fail", "incarnation", "incarnation"]);

    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
}

#[actor(name = "traced_sleeper")]
struct Sleeper;

#[actor]
impl Sleeper {
    /// Answers once `wake` fires (or is dropped).
    async fn wait(&self, wake: futures::channel::oneshot::Receiver<()>) {
        let _ = wake.await;
    }
}

/// An ask whose deadline passes before the reply produces a WARN event naming the actor
/// and the handler asked.
#[runtime::test(timeout = "20s")]
async fn an_ask_timeout_is_traced(context: runtime::Context) {
    collector();
    let sleeper = Sleeper.spawn(&context);
    let (wake, woken) = futures::channel::oneshot::channel();
    // The handler cannot answer before `wake` fires, which is after the ask gave up.
    let asked = sleeper.wait(woken).timeout(Duration::from_millis(10)).await;
    assert_eq!(asked, Err(Error::Timeout));

    let timeouts = events("traced_sleeper", "ask timed out");
    assert_eq!(timeouts.len(), 1, "{timeouts:?}");
    let timeout = &timeouts[0];
    assert_eq!(timeout.level, Level::WARN);
    assert_eq!(timeout.field("handler"), Some("wait"));
    assert_eq!(timeout.field("id"), Some(&*sleeper.id().to_string()));
    let _ = wake.send(());
    assert_eq!(sleeper.stop().await, actors::ExitReason::Stopped);
}

#[actor(name = "traced_fragile")]
struct Fragile {
    incarnation: usize,
}

#[actor]
impl Fragile {
    fn incarnation(&self) -> usize {
        self.incarnation
    }

    fn fail(&mut self) {
        panic!("fragile on purpose");
    }
}

/// A nested supervisor allowed no restart gives up at its child's first panic: an ERROR
/// event naming it, the child and the reason; its parent's restart of it is an event too.
#[runtime::test(timeout = "20s")]
async fn a_supervisor_giving_up_is_traced(context: runtime::Context) {
    collector();
    let made = Arc::new(AtomicUsize::new(0));
    let counter = made.clone();
    let mut inner =
        Supervisor::new("traced_inner", Strategy::OneForOne).intensity(0, Duration::from_secs(60));
    let fragile = inner.child(ChildSpec::new(move || Fragile {
        incarnation: counter.fetch_add(1, Ordering::SeqCst) + 1,
    }));
    let mut outer =
        Supervisor::new("traced_outer", Strategy::OneForOne).intensity(10, Duration::from_secs(60));
    outer.supervisor(inner, Restart::Permanent, Duration::from_secs(5));
    let outer = outer.spawn(&context);
    assert_eq!(fragile.incarnation().await, Ok(1));
    assert!(fragile.fail().await.is_err());
    // Answered once the outer supervisor restarted the inner one, which gave up before.
    assert_eq!(fragile.incarnation().await, Ok(2));

    let gave_up = supervisor_events("traced_inner", "supervisor gave up");
    assert_eq!(gave_up.len(), 1, "{gave_up:?}");
    let event = &gave_up[0];
    assert_eq!(event.level, Level::ERROR);
    assert_eq!(event.field("actor"), Some("traced_fragile"));
    assert_eq!(event.field("id"), Some(&*fragile.id().to_string()));
    assert_eq!(event.field("reason"), Some("panicked"));
    assert_eq!(event.field("restarts"), Some("0"));
    assert!(supervisor_events("traced_inner", "supervisor restarts a child").is_empty());

    let restarts = supervisor_events("traced_outer", "supervisor restarts a child");
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_eq!(restarts[0].field("actor"), Some("traced_inner"));
    assert_eq!(restarts[0].field("reason"), Some("panicked"));

    outer.stop();
    assert_eq!(outer.join().await, actors::ExitReason::Stopped);
}

#[interface]
pub trait Traced {
    fn traced_hello(&self) -> u32;
}

#[actor(name = "traced_polyglot")]
struct Polyglot;

#[actor(implements(Traced))]
impl Polyglot {}

#[actor]
impl Traced for Polyglot {
    fn traced_hello(&self) -> u32 {
        7
    }
}

/// A message sent through an interface ref is handled in a span that names the interface's
/// handler.
#[runtime::test(timeout = "20s")]
async fn an_interface_message_names_its_handler(context: runtime::Context) {
    collector();
    let polyglot = Polyglot.spawn(&context);
    let traced = TracedRef::from(polyglot.clone());
    assert_eq!(traced.traced_hello().await, Ok(7));
    let handlers: Vec<_> = spans("traced_polyglot", "message")
        .into_iter()
        .filter_map(|span| span.fields.get("handler").cloned())
        .collect();
    assert_eq!(handlers, ["traced_hello"]);
    assert_eq!(polyglot.stop().await, actors::ExitReason::Stopped);
}
