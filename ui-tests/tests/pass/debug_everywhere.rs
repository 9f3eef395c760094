//! A crate that denies missing `Debug` impls and docs uses `#[actor]` (with `remote`), a pool
//! and `#[interface]`: it compiles, every generated public type implements `Debug` (the refs,
//! the message and wire enums, the remote ref), an application struct holding the refs derives
//! `Debug`, and `{:?}` shows each ref by its type and actor id (label and number).

#![deny(missing_debug_implementations, missing_docs)]

use actors::prelude::*;
use actors::Pool;

/// Greets.
#[interface]
pub trait Greeter {
    /// The greeting for `name`.
    fn greet(&self, name: String) -> String;
}

/// Counts.
#[actor(name = "tally")]
#[derive(Debug)]
pub struct Counter {
    total: u64,
}

#[actor(remote, implements(Greeter))]
impl Counter {
    /// Adds `by`; the new total.
    pub fn add(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }
}

#[actor]
impl Greeter for Counter {
    fn greet(&self, name: String) -> String {
        format!("hello {name}, total {}", self.total)
    }
}

/// Works in a pool.
#[actor]
#[derive(Debug)]
pub struct Worker;

#[actor]
impl Worker {
    /// Echoes `value`.
    pub fn echo(&self, value: u32) -> u32 {
        value
    }
}

/// What an application keeps: its refs, with a derived `Debug`.
#[derive(Debug)]
pub struct App {
    counter: CounterRef,
    greeter: GreeterRef,
    workers: WorkerPoolRef,
}

/// Compiles when `T` implements `Debug`.
fn debug<T: std::fmt::Debug>() {}

#[runtime::main]
async fn main(context: runtime::Context) {
    // The lint does not look into macro expansions: the hidden message enums, the wire enum
    // and the remote ref are checked by name.
    debug::<<Counter as actors::Actor>::Message>();
    debug::<<Worker as actors::Actor>::Message>();
    debug::<GreeterMessage>();
    debug::<<Counter as actors::remote::Protocol>::Wire>();
    debug::<CounterRemoteRef>();
    // A message shows its handler, never its arguments.
    let message = __CounterMessage::Add(7, actors::Reply::none());
    assert_eq!(format!("{message:?}"), "Add(..)");
    let wire = __CounterWire::Add(7);
    assert_eq!(format!("{wire:?}"), "Add(..)");

    let counter = Counter { total: 0 }.spawn(&context);
    assert_eq!(counter.add(2).await.unwrap(), 2);
    let greeter = GreeterRef::from(counter.clone());
    let workers: WorkerPoolRef = Pool::new("workers", 2, || Worker)
        .spawn(&context)
        .await
        .unwrap()
        .into();
    assert_eq!(workers.echo(7).await.unwrap(), 7);
    let app = App {
        counter: counter.clone(),
        greeter,
        workers,
    };
    let shown = format!("{app:?}");
    let id = counter.id().to_string();
    assert!(id.starts_with("tally#"), "{id}");
    assert!(shown.contains(&format!("counter: CounterRef(Ref {{ actor: {id}")), "{shown}");
    assert!(shown.contains(&format!("greeter: GreeterRef(ErasedRef {{ actor: {id}")), "{shown}");
    assert!(shown.contains("workers: WorkerPoolRef(PoolRef { label: \"workers\""), "{shown}");
    assert!(shown.contains("size: 2"), "{shown}");
}
