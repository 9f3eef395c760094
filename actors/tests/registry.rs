//! The registry through the public API: one holder per name, typed lookups (another type,
//! or nobody, gives `None`), entries leaving on every exit path, names kept across a
//! supervised child's restarts, exactly one winner of concurrent registrations, and a
//! registry that never keeps an actor alive.

use actors::prelude::*;
use actors::supervisor::{ChildSpec, Strategy, Supervisor};
use actors::{Context, Error, ExitReason, Registry};

#[actor]
struct Counter {
    total: u64,
}

#[actor]
impl Counter {
    fn add(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }

    fn fail(&mut self) {
        panic!("counter fails");
    }

    fn finish(&mut self, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

#[actor]
struct Other;

#[actor]
impl Other {
    fn ping(&self) {}
}

#[interface]
pub trait Adds {
    fn add_some(&mut self, by: u64) -> u64;
}

#[actor]
struct Adder {
    total: u64,
}

#[actor(implements(Adds))]
impl Adder {}

#[actor]
impl Adds for Adder {
    fn add_some(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }
}

fn counter(context: &runtime::Context) -> CounterRef {
    Counter { total: 0 }.spawn(context)
}

/// A name has one holder: a second actor is refused with the holder's id, the same actor
/// again is fine, and the name is free again once unregistered.
#[runtime::test(timeout = "20s")]
async fn a_name_has_one_holder(context: runtime::Context) {
    let registry = Registry::of(&context);
    let first = counter(&context);
    let second = counter(&context);
    registry.register("counter", &first).unwrap();
    registry.register("counter", &first).unwrap();
    assert_eq!(
        registry.register("counter", &second),
        Err(Error::NameTaken {
            name: "counter".into(),
            holder: first.id(),
        })
    );
    assert_eq!(registry.names(), ["counter"]);
    assert_eq!(registry.unregister("counter"), Some(first.id()));
    assert_eq!(registry.unregister("counter"), None);
    registry.register("counter", &second).unwrap();
    let found: CounterRef = registry.lookup("counter").unwrap();
    assert_eq!(found.id(), second.id());
    // The same registry from anywhere in the runtime.
    assert!(
        Registry::of(&context)
            .lookup::<CounterRef>("counter")
            .is_some()
    );
}

/// A lookup is typed: the type it was registered as finds it, any other finds nothing, as
/// does a name nobody holds; interface refs register and look up the same way.
#[runtime::test(timeout = "20s")]
async fn lookups_are_typed(context: runtime::Context) {
    let registry = Registry::of(&context);
    let counter = counter(&context);
    registry.register("counter", &counter).unwrap();
    assert!(registry.lookup::<OtherRef>("counter").is_none());
    assert!(registry.lookup::<AddsRef>("counter").is_none());
    assert!(registry.lookup::<CounterRef>("nobody").is_none());
    let found: CounterRef = registry.lookup("counter").unwrap();
    assert_eq!(found.add(2).await, Ok(2));

    let adder = Adder { total: 0 }.spawn(&context);
    registry
        .register("adds", &AddsRef::from(adder.clone()))
        .unwrap();
    let adds: AddsRef = registry.lookup("adds").unwrap();
    assert_eq!(adds.add_some(3).await, Ok(3));
    assert_eq!(adds.id(), adder.id());
    // Registered as the interface, not as the actor's own ref.
    assert!(registry.lookup::<AdderRef>("adds").is_none());
}

/// Registry state right after `join` resolves: the name is gone and free.
fn assert_gone(registry: &Registry, name: &str) {
    assert!(
        registry.lookup::<CounterRef>(name).is_none(),
        "{name} still found"
    );
    assert!(
        !registry.names().contains(&name.to_string()),
        "{name} still listed"
    );
    // Not just hidden: removed from the table.
    assert!(
        registry.names().len() == registry.__entries(),
        "an ended actor's entry lingers"
    );
}

/// The entry leaves on every way an actor ends, by the time its `join` resolves: a ref's
/// stop, `ctx.stop()`, its last ref dropped, a panic, and its scope ending.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn the_entry_leaves_on_every_exit(context: runtime::Context) {
    let registry = Registry::of(&context);

    let stopped = counter(&context);
    registry.register("stopped", &stopped).unwrap();
    assert_eq!(stopped.stop().await, ExitReason::Stopped);
    assert_gone(&registry, "stopped");

    let finished = counter(&context);
    registry.register("finished", &finished).unwrap();
    finished.finish().await.unwrap();
    assert_eq!(finished.join().await, ExitReason::Normal);
    assert_gone(&registry, "finished");

    let dropped = counter(&context);
    registry.register("dropped", &dropped).unwrap();
    let join = dropped.join();
    drop(dropped);
    assert_eq!(join.await, ExitReason::Normal);
    assert_gone(&registry, "dropped");

    let failed = counter(&context);
    registry.register("failed", &failed).unwrap();
    assert!(failed.fail().await.is_err());
    assert_eq!(
        failed.join().await,
        ExitReason::Panicked("counter fails".into())
    );
    assert_gone(&registry, "failed");

    // Spawned in a scope that ends: the actor's task is aborted.
    let scope = context.child("ending");
    let (aborted_tx, aborted_rx) = futures::channel::oneshot::channel();
    let task = scope.clone().spawn(move |scope| async move {
        let aborted = counter(&scope);
        let _ = aborted_tx.send(aborted.clone());
        std::future::pending::<()>().await;
    });
    let aborted = aborted_rx.await.unwrap();
    registry.register("aborted", &aborted).unwrap();
    task.abort();
    assert_eq!(aborted.join().await, ExitReason::Shutdown);
    assert_gone(&registry, "aborted");

    // A name freed by an end passes to another actor, which the old end does not disturb.
    let next = counter(&context);
    registry.register("stopped", &next).unwrap();
    assert_eq!(
        registry
            .lookup::<CounterRef>("stopped")
            .map(|found| found.id()),
        Some(next.id())
    );
}

/// An actor that ended is refused: it would never be found.
#[runtime::test(timeout = "20s")]
async fn an_ended_actor_is_refused(context: runtime::Context) {
    let registry = Registry::of(&context);
    let ended = counter(&context);
    assert_eq!(ended.stop().await, ExitReason::Stopped);
    assert_eq!(registry.register("ended", &ended), Err(Error::Closed));
    assert!(registry.names().is_empty());
}

/// A name given to an actor that is unregistered and then ends stays with the actor it was
/// given to next: an end removes only its own entry.
#[runtime::test(timeout = "20s")]
async fn an_end_removes_only_its_own_entry(context: runtime::Context) {
    let registry = Registry::of(&context);
    let old = counter(&context);
    let new = counter(&context);
    registry.register("name", &old).unwrap();
    registry.unregister("name");
    registry.register("name", &new).unwrap();
    assert_eq!(old.stop().await, ExitReason::Stopped);
    assert_eq!(
        registry
            .lookup::<CounterRef>("name")
            .map(|found| found.id()),
        Some(new.id())
    );
}

/// The registry holds no ref: an actor whose refs are all dropped ends, and its name with it.
#[runtime::test(timeout = "20s")]
async fn the_registry_keeps_no_actor_alive(context: runtime::Context) {
    let registry = Registry::of(&context);
    let counter = counter(&context);
    registry.register("counter", &counter).unwrap();
    let join = counter.join();
    drop(counter);
    assert_eq!(join.await, ExitReason::Normal);
    assert!(registry.lookup::<CounterRef>("counter").is_none());
    assert_eq!(registry.__entries(), 0);
}

/// The same actor registered again under its name as another type is found as that type;
/// registering and unregistering in a loop leaves nothing behind once it ends.
#[runtime::test(timeout = "20s")]
async fn re_registering_replaces_the_type_and_leaves_nothing(context: runtime::Context) {
    let registry = Registry::of(&context);
    let adder = Adder { total: 0 }.spawn(&context);
    registry.register("x", &adder).unwrap();
    registry
        .register("x", &AddsRef::from(adder.clone()))
        .unwrap();
    assert!(registry.lookup::<AddsRef>("x").is_some());
    assert!(registry.lookup::<AdderRef>("x").is_none());
    for _ in 0..100 {
        registry.unregister("x");
        registry.register("x", &adder).unwrap();
    }
    assert_eq!(adder.stop().await, ExitReason::Stopped);
    assert_eq!(registry.__entries(), 0);
    assert!(registry.names().is_empty());
}

/// A supervised child registered by name keeps it across its restarts: the name leads to
/// each incarnation, through the same id.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_supervised_child_keeps_its_name_across_restarts(context: runtime::Context) {
    let registry = Registry::of(&context);
    let mut supervisor = Supervisor::new("named", Strategy::OneForOne);
    let child = supervisor.child(ChildSpec::new(|| Counter { total: 0 }));
    let supervisor = supervisor.spawn(&context);
    registry.register("child", &child).unwrap();
    assert_eq!(child.add(5).await, Ok(5));
    assert!(child.fail().await.is_err());
    let found: CounterRef = registry.lookup("child").unwrap();
    assert_eq!(found.id(), child.id());
    // The next incarnation, with fresh state.
    assert_eq!(found.add(1).await, Ok(1));
    supervisor.stop();
    assert_eq!(supervisor.join().await, actors::ExitReason::Stopped);
    assert!(registry.lookup::<CounterRef>("child").is_none());
}

/// Of concurrent registrations of one name from threads of their own, released together,
/// exactly one wins, and every other is told who holds it.
#[runtime::test(timeout = "30s")]
async fn exactly_one_concurrent_registration_wins(context: runtime::Context) {
    const RIVALS: usize = 8;
    for round in 0..10 {
        let name = format!("contested{round}");
        let registry = Registry::of(&context);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(RIVALS));
        let mut tasks = Vec::new();
        for _ in 0..RIVALS {
            let (registry, name, barrier) = (registry.clone(), name.clone(), barrier.clone());
            let rival = counter(&context);
            // Each on a thread of its own, blocked at the barrier until all are there.
            tasks.push(context.clone().dedicated().spawn(move |_| async move {
                barrier.wait();
                (rival.id(), registry.register(name, &rival), rival)
            }));
        }
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        let winners: Vec<_> = outcomes
            .iter()
            .filter(|(_, outcome, _)| outcome.is_ok())
            .map(|(id, _, _)| *id)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for (_, outcome, _) in &outcomes {
            if let Err(error) = outcome {
                assert_eq!(
                    *error,
                    Error::NameTaken {
                        name: name.clone().into(),
                        holder: winners[0],
                    }
                );
            }
        }
        assert_eq!(
            registry.lookup::<CounterRef>(&name).map(|found| found.id()),
            Some(winners[0])
        );
    }
}

/// Lookups repeated on one thread, where they are cached, see every change to the name: an
/// unregister, another holder, another type, the holder's end; and two registries, even one
/// made after another was dropped, never answer with each other's entries.
#[runtime::test(timeout = "20s")]
async fn repeated_lookups_see_every_change(context: runtime::Context) {
    let registry = Registry::new();
    let first = counter(&context);
    registry.register("c", &first).unwrap();
    for _ in 0..3 {
        let found: CounterRef = registry.lookup("c").unwrap();
        assert_eq!(found.id(), first.id());
    }
    assert!(registry.lookup::<OtherRef>("c").is_none());
    registry.unregister("c");
    assert!(registry.lookup::<CounterRef>("c").is_none(), "unregistered");
    let second = counter(&context);
    registry.register("c", &second).unwrap();
    let found: CounterRef = registry.lookup("c").unwrap();
    assert_eq!(found.id(), second.id(), "the new holder");
    drop(found);

    let adder = Adder { total: 0 }.spawn(&context);
    registry.register("a", &adder).unwrap();
    assert!(registry.lookup::<AdderRef>("a").is_some());
    registry
        .register("a", &AddsRef::from(adder.clone()))
        .unwrap();
    assert!(
        registry.lookup::<AdderRef>("a").is_none(),
        "now another type"
    );
    assert!(registry.lookup::<AddsRef>("a").is_some());

    // Two registries that hash names alike, each at its first change: only their ids keep
    // one's cached lookup from answering the other's.
    let one = Registry::new();
    let two = Registry::__sharing_hasher_of(&one);
    one.register("same", &first).unwrap();
    two.register("same", &second).unwrap();
    for _ in 0..2 {
        assert_eq!(one.lookup::<CounterRef>("same").unwrap().id(), first.id());
        assert_eq!(two.lookup::<CounterRef>("same").unwrap().id(), second.id());
    }
    drop(two);
    let three = Registry::__sharing_hasher_of(&one);
    assert!(
        three.lookup::<CounterRef>("same").is_none(),
        "a registry made after another was dropped"
    );

    assert_eq!(second.stop().await, ExitReason::Stopped);
    assert!(
        registry.lookup::<CounterRef>("c").is_none(),
        "the holder ended"
    );
}

/// `Registry::of` gives the runtime's one registry, shared: the same `Arc` from the root's
/// context, a child scope's and a spawned task's, so a name registered through one is found
/// through the others.
#[runtime::test(timeout = "20s")]
async fn every_context_of_a_runtime_gives_the_same_registry(context: runtime::Context) {
    let registry = Registry::of(&context);
    assert!(std::sync::Arc::ptr_eq(
        &registry,
        &Registry::of(&context.child("scope"))
    ));
    let from_task = context
        .clone()
        .spawn(|context| async move { Registry::of(&context) })
        .await
        .unwrap();
    assert!(std::sync::Arc::ptr_eq(&registry, &from_task));
}
