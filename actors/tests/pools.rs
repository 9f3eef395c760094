//! Pools through the public API: round-robin in exact turns, by key stable and moving only
//! the keys of added members, least-loaded preferring the idle member, a failed member
//! restarted while the ref keeps routing, resizing both ways, and the routing metrics.

use actors::prelude::*;
use actors::{Error, ExitReason, Pool, Routing};
use futures::channel::oneshot;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[actor(mailbox = 8)]
struct Worker {
    /// Which member this is, by order of making (restarts make new ones).
    made: usize,
    handled: u64,
}

#[actor]
impl Worker {
    fn work(&mut self) -> usize {
        self.handled += 1;
        self.made
    }

    fn handled(&self) -> u64 {
        self.handled
    }

    fn fail(&mut self) {
        panic!("worker fails");
    }

    async fn hold(&mut self, gate: oneshot::Receiver<()>) {
        let _ = gate.await;
    }
}

/// A factory numbering the workers it makes from 0.
fn numbered() -> impl FnMut() -> Worker + Send + 'static {
    let made = Arc::new(AtomicUsize::new(0));
    move || Worker {
        made: made.fetch_add(1, Ordering::SeqCst),
        handled: 0,
    }
}

/// Round-robin visits the members in turn, exactly.
#[runtime::test(timeout = "20s")]
async fn round_robin_takes_exact_turns(context: runtime::Context) {
    let pool: WorkerPoolRef = Pool::new("turns", 4, numbered())
        .spawn(&context)
        .await
        .unwrap()
        .into();
    assert_eq!(pool.as_pool().size(), 4);
    let mut order = Vec::new();
    for _ in 0..12 {
        order.push(pool.work().await.unwrap());
    }
    let first = order[0];
    let expected: Vec<usize> = (0..12).map(|turn| (first + turn) % 4).collect();
    assert_eq!(order, expected);
    // Tells and `try_` take turns too.
    for _ in 0..4 {
        pool.tell_work().await.unwrap();
    }
    for _ in 0..4 {
        pool.try_work().unwrap();
    }
    for member in pool.as_pool().all() {
        assert_eq!(member.handled().await, Ok(5));
    }
    // Five routed to each member (`all` routes nothing).
    let text = context.encode();
    assert!(
        text.contains("pool_routed_total{pool=\"turns\",member=\"0\"} 5"),
        "{text}"
    );
    assert!(text.contains("pool_members{pool=\"turns\"} 4"), "{text}");
    pool.as_pool().stop().await;
    assert_eq!(pool.work().await, Err(Error::Closed));
}

/// By key, a key keeps its member; keys spread over every member; growing the pool moves
/// keys only to the new member.
#[runtime::test(timeout = "20s")]
async fn by_key_is_stable_and_moves_only_to_new_members(context: runtime::Context) {
    let pool: WorkerPoolRef = Pool::new("sharded", 4, numbered())
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let owners = |pool: &WorkerPoolRef| -> HashMap<u32, actors::ActorId> {
        (0..2000)
            .map(|key| (key, pool.as_pool().route_by(&key).id()))
            .collect()
    };
    let before = owners(&pool);
    assert_eq!(before, owners(&pool), "the same keys, the same members");
    let mut per_member: HashMap<actors::ActorId, usize> = HashMap::new();
    for owner in before.values() {
        *per_member.entry(*owner).or_default() += 1;
    }
    assert_eq!(per_member.len(), 4, "every member owns keys");
    assert!(
        per_member.values().all(|keys| *keys > 200),
        "{per_member:?}"
    );
    pool.as_pool().resize(5).await.unwrap();
    let added = pool.as_pool().all()[4].id();
    let after = owners(&pool);
    let moved: Vec<_> = (0..2000).filter(|key| before[key] != after[key]).collect();
    assert!(!moved.is_empty());
    assert!(
        moved.iter().all(|key| after[key] == added),
        "only to the new member"
    );
    // The member owning a key answers for it.
    assert_eq!(pool.as_pool().route_by(&7u32).id(), after[&7]);
}

/// Least-loaded routes past a member with messages waiting to an idle one.
#[runtime::test(timeout = "20s")]
async fn least_loaded_prefers_the_idle_member(context: runtime::Context) {
    let pool: WorkerPoolRef = Pool::new("balanced", 2, numbered())
        .routing(Routing::LeastLoaded)
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let members = pool.as_pool().all();
    let (open, gate) = oneshot::channel();
    members[0].tell_hold(gate).await.unwrap();
    members[0].tell_work().await.unwrap();
    members[0].tell_work().await.unwrap();
    for _ in 0..10 {
        assert_eq!(pool.as_pool().route().id(), members[1].id());
    }
    open.send(()).unwrap();
}

/// A member that fails is restarted by the pool's supervisor, and routing to it goes on.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_failed_member_is_restarted_and_routed_to(context: runtime::Context) {
    let pool: WorkerPoolRef = Pool::new("resilient", 2, numbered())
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let members = pool.as_pool().all();
    assert!(members[0].fail().await.is_err());
    // Fresh state in the restarted member, same ref; both members answer through the pool.
    assert_eq!(members[0].handled().await, Ok(0));
    let mut answered = Vec::new();
    for _ in 0..4 {
        answered.push(pool.work().await.unwrap());
    }
    assert_eq!(answered.len(), 4);
    assert_eq!(members[0].handled().await, Ok(2));
    assert_eq!(members[1].handled().await, Ok(2));
}

/// Resizing grows and shrinks the pool; removed members handle what was queued and stop;
/// zero members is refused.
#[runtime::test(timeout = "20s")]
async fn resizing_grows_and_shrinks(context: runtime::Context) {
    let pool: WorkerPoolRef = Pool::new("elastic", 2, numbered())
        .spawn(&context)
        .await
        .unwrap()
        .into();
    pool.as_pool().resize(4).await.unwrap();
    assert_eq!(pool.as_pool().size(), 4);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..4 {
        seen.insert(pool.as_pool().route().id());
    }
    assert_eq!(seen.len(), 4);
    let members = pool.as_pool().all();
    let (open, gate) = oneshot::channel();
    members[3].tell_hold(gate).await.unwrap();
    // An ask queued behind the hold, before the shrink starts.
    let mut ask = Box::pin(members[3].work());
    assert!(futures::poll!(&mut ask).is_pending());
    assert!(members[3].inner().queued() >= 1);
    // Shrinking waits for the removed members to finish what was queued.
    let shrink = {
        let pool = pool.clone();
        context
            .clone()
            .spawn(move |_| async move { pool.as_pool().resize(1).await })
    };
    open.send(()).unwrap();
    shrink.await.unwrap().unwrap();
    assert_eq!(ask.await, Ok(3), "the message queued before was handled");
    assert_eq!(pool.as_pool().size(), 1);
    for removed in &members[1..] {
        assert_eq!(removed.join().await, ExitReason::Stopped);
    }
    for _ in 0..3 {
        assert_eq!(pool.as_pool().route().id(), members[0].id());
    }
    assert_eq!(
        pool.as_pool().resize(0).await,
        Err(Error::InvalidPoolSize {
            pool: "elastic",
            size: 0
        })
    );
    assert!(matches!(
        Pool::new("empty", 0, numbered()).spawn(&context).await,
        Err(Error::InvalidPoolSize { size: 0, .. })
    ));
}

/// A grow whose new member fails to start fails, and keeps (and routes to) the members it
/// started before that one.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn a_failed_grow_keeps_the_members_it_started(context: runtime::Context) {
    let made = Arc::new(AtomicUsize::new(0));
    let counted = made.clone();
    let pool: WorkerPoolRef = Pool::new("growing", 1, move || {
        let made = counted.fetch_add(1, Ordering::SeqCst);
        assert_ne!(made, 3, "the fourth worker fails");
        Worker { made, handled: 0 }
    })
    .spawn(&context)
    .await
    .unwrap()
    .into();
    assert_eq!(
        pool.as_pool().resize(5).await,
        Err(Error::Panicked { actor: "worker" })
    );
    assert_eq!(pool.as_pool().size(), 3);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3 {
        seen.insert(pool.work().await.unwrap());
    }
    assert_eq!(seen.len(), 3, "all three are routed to");
}

/// Past its restart intensity the pool's supervisor gives up: the pool is closed.
#[runtime::test(timeout = "20s", catch_panics = true)]
async fn past_its_intensity_the_pool_closes(context: runtime::Context) {
    let pool: WorkerPoolRef = Pool::new("fragile", 2, numbered())
        .intensity(1, std::time::Duration::from_secs(60))
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let member = pool.as_pool().all()[0].clone();
    assert!(member.fail().await.is_err());
    assert_eq!(member.handled().await, Ok(0), "restarted once");
    assert!(member.fail().await.is_err());
    // The second failure is one restart too many: the member ends with it, for good.
    assert_eq!(
        member.join().await,
        ExitReason::Panicked("worker fails".into())
    );
    assert_eq!(pool.work().await, Err(Error::Closed));
}

#[actor(mailbox = 2, ask_timeout = "10ms")]
struct Slow;

#[actor]
impl Slow {
    async fn hold(&mut self, gate: oneshot::Receiver<()>) {
        let _ = gate.await;
    }

    fn echo(&self, value: u32) -> u32 {
        value
    }

    fn later(&self, reply: actors::Reply<u32>) {
        reply.send(9);
    }
}

/// A pool ref's ask is the actor ref's `Ask`: the actor's `ask_timeout` applies, a per-call
/// `.timeout` replaces it, and `.queued()` gives the ask back once its message is queued, to
/// be awaited later; `forward_` hands another ask's reply to a member.
#[runtime::test(timeout = "20s")]
async fn a_pool_ask_is_the_actor_refs_ask(context: runtime::Context) {
    let pool: SlowPoolRef = Pool::new("slow", 1, || Slow)
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let ask: actors::Ask<'_, Slow, u32> = pool.echo(1);
    assert_eq!(ask.await, Ok(1));
    // The one member holds; its ask past the actor's 10 ms `ask_timeout` times out.
    let (open, gate) = oneshot::channel();
    pool.tell_hold(gate).await.unwrap();
    assert_eq!(pool.echo(2).await, Err(Error::Timeout));
    // Queued while it holds (the mailbox keeps the timed-out ask's message and has room for
    // one more), then answered once it is let go.
    let queued = pool
        .echo(3)
        .timeout(std::time::Duration::MAX)
        .queued()
        .await
        .unwrap();
    open.send(()).unwrap();
    assert_eq!(queued.await, Ok(3));
    // A delegated reply through the pool: the member answers the front's asker.
    let front = Front { pool: pool.clone() }.spawn(&context);
    assert_eq!(front.relay(5).await, Ok(5));
    assert_eq!(pool.later().await, Ok(9));
}

#[actor]
struct Front {
    pool: SlowPoolRef,
}

#[actor]
impl Front {
    async fn relay(&mut self, value: u32, reply: actors::Reply<u32>) {
        let _ = self.pool.forward_echo(value, reply).await;
    }
}

/// A pool registers by name as an actor's ref does: found as its pool ref type (not as
/// another), known by its id (its supervisor's, not a member's), and gone from the registry
/// once the pool stopped, before its `stop` resolves.
#[runtime::test(timeout = "20s")]
async fn a_pool_registers_by_name(context: runtime::Context) {
    let registry = actors::Registry::of(&context);
    let pool: WorkerPoolRef = Pool::new("named", 2, numbered())
        .spawn(&context)
        .await
        .unwrap()
        .into();
    registry.register("workers", &pool).unwrap();
    let found: WorkerPoolRef = registry.lookup("workers").expect("registered");
    assert_eq!(found.id(), pool.id());
    assert_eq!(pool.id(), pool.as_pool().id());
    assert_eq!(
        pool.id().to_string(),
        format!("named#{}", pool.id().serial())
    );
    for member in pool.as_pool().all() {
        assert_ne!(member.id(), pool.id(), "a pool is not known by a member");
    }
    assert!(registry.lookup::<WorkerRef>("workers").is_none());
    // Routed through the ref found by name.
    found.work().await.unwrap();
    // A member's restart is not the pool's end: the name stays.
    assert!(found.fail().await.is_err());
    assert!(registry.lookup::<WorkerPoolRef>("workers").is_some());
    drop(found);
    assert_eq!(pool.as_pool().stop().await, ExitReason::Stopped);
    assert!(registry.lookup::<WorkerPoolRef>("workers").is_none());
    assert!(registry.names().is_empty());
}
