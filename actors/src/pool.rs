//! [`Pool`]: N supervised instances of one actor behind one ref, and the routers that pick
//! one per message: round-robin, least-loaded (the shortest mailbox) and by key (consistent
//! hashing, for sharded state).
//!
//! `#[actor]` generates `<Name>PoolRef`, with the actor's handler methods (ask, `tell_`,
//! `try_`) routed by the pool's routing; [`PoolRef::route_by`] gives the member a key maps
//! to, for sharded state.
//!
//! Invariants:
//! - Members run under the pool's own [`DynamicSupervisor`]: a failed member is restarted
//!   with the same mailbox, so its ref, and the routing over it, keep working.
//! - Routing reads a snapshot of the members (an `Arc` behind a reader-writer lock, swapped
//!   by a resize): a route is a read lock, an `Arc` clone and the member's ref clone, no
//!   allocation.
//! - A resize is serialized with other resizes. Growing starts the new members before they
//!   are routed to. Shrinking stops routing to the members it removes first, then stops
//!   them after what is queued (so a message routed before is still handled).
//! - By key, a key maps to a point on a ring of 64 points per member, each placed by the
//!   member's id: a resize moves only the keys of the members it adds or removes.

use crate::supervisor::{ChildSpec, DynamicSupervisor, DynamicSupervisorRef};
use crate::{Actor, Error, Ref};
use parking_lot::{Mutex, RwLock};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Points per member on the key ring: enough for keys to spread within a few percent.
const POINTS: u64 = 64;

/// How a pool picks the member for a message sent through its ref.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Each member in turn.
    RoundRobin,
    /// The member with the fewest messages waiting (the first of them from a rotating start,
    /// so ties spread).
    LeastLoaded,
}

/// A pool to start: see the module documentation.
pub struct Pool<A: Actor> {
    label: &'static str,
    size: usize,
    routing: Routing,
    factory: Arc<Mutex<dyn FnMut() -> A + Send>>,
}

impl<A: Actor> Pool<A> {
    /// A pool labelled `label` (its scope's and metrics' name) of `size` members made by
    /// `factory`, called for every member and every restart, where the member runs. Routes
    /// round-robin unless told otherwise.
    pub fn new(
        label: &'static str,
        size: usize,
        factory: impl FnMut() -> A + Send + 'static,
    ) -> Self {
        Pool {
            label,
            size,
            routing: Routing::RoundRobin,
            factory: Arc::new(Mutex::new(factory)),
        }
    }

    /// How the pool's ref picks a member.
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Starts the pool's supervisor and members in a child scope of `context`; returns once
    /// every member's `on_start` ran. A size of zero is refused with
    /// [`Error::InvalidPoolSize`]; a member failing to start fails the whole start.
    pub async fn spawn(self, context: &runtime::Context) -> Result<PoolRef<A>, Error> {
        check_size(self.label, self.size)?;
        let supervisor = DynamicSupervisor::new(self.label).spawn(context);
        let families = PoolFamilies::of(context);
        let members_gauge = families
            .members
            .get_or_create(&[("pool", self.label)])
            .clone();
        let shared = Arc::new(Shared {
            label: self.label,
            routing: self.routing,
            factory: self.factory,
            supervisor,
            members: RwLock::new(Arc::new(Members::default())),
            next: AtomicUsize::new(0),
            resizing: futures::lock::Mutex::new(()),
            members_gauge,
            families,
        });
        let pool = PoolRef { shared };
        if let Err(error) = pool.resize(self.size).await {
            pool.shared.supervisor.stop();
            return Err(error);
        }
        Ok(pool)
    }
}

fn check_size(pool: &'static str, size: usize) -> Result<(), Error> {
    if size == 0 {
        return Err(Error::InvalidPoolSize { pool, size });
    }
    Ok(())
}

/// The members, as routing sees them.
struct Members<A: Actor> {
    refs: Vec<Ref<A>>,
    /// `pool_routed_total` of each member, by position.
    routed: Vec<Counter>,
    /// The key ring: points and the members (positions) they belong to, sorted by point.
    ring: Vec<(u64, usize)>,
}

impl<A: Actor> Default for Members<A> {
    fn default() -> Self {
        Members {
            refs: Vec::new(),
            routed: Vec::new(),
            ring: Vec::new(),
        }
    }
}

impl<A: Actor> Members<A> {
    fn new(refs: Vec<Ref<A>>, label: &'static str, families: &PoolFamilies) -> Self {
        let routed = (0..refs.len())
            .map(|index| {
                families
                    .routed
                    .get_or_create(&[("pool", label.to_string()), ("member", index.to_string())])
                    .clone()
            })
            .collect();
        let mut ring: Vec<(u64, usize)> = refs
            .iter()
            .enumerate()
            .flat_map(|(index, member)| {
                let serial = member.id().serial();
                (0..POINTS).map(move |point| (hash(&(serial, point)), index))
            })
            .collect();
        ring.sort_unstable();
        Members { refs, routed, ring }
    }
}

fn hash(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

struct Shared<A: Actor> {
    label: &'static str,
    routing: Routing,
    factory: Arc<Mutex<dyn FnMut() -> A + Send>>,
    supervisor: DynamicSupervisorRef,
    members: RwLock<Arc<Members<A>>>,
    /// Round-robin's turn, and least-loaded's rotating start.
    next: AtomicUsize,
    resizing: futures::lock::Mutex<()>,
    members_gauge: Gauge,
    families: Arc<PoolFamilies>,
}

/// A running pool: the actor's generated `<Name>PoolRef` wraps it (and derefs to it). Cheap
/// to clone. Routing to a pool that stopped gives refs that report `Closed`.
pub struct PoolRef<A: Actor> {
    shared: Arc<Shared<A>>,
}

impl<A: Actor> Clone for PoolRef<A> {
    fn clone(&self) -> Self {
        PoolRef {
            shared: self.shared.clone(),
        }
    }
}

impl<A: Actor> PoolRef<A> {
    fn members(&self) -> Arc<Members<A>> {
        self.shared.members.read().clone()
    }

    /// The member the pool's routing picks for the next message.
    pub fn route(&self) -> A::Ref {
        A::Ref::from(self.route_untyped())
    }

    fn route_untyped(&self) -> Ref<A> {
        let members = self.members();
        let count = members.refs.len();
        let turn = self.shared.next.fetch_add(1, Ordering::Relaxed);
        let index = match self.shared.routing {
            Routing::RoundRobin => turn % count,
            Routing::LeastLoaded => (0..count)
                .map(|offset| (turn + offset) % count)
                .min_by_key(|index| members.refs[*index].queued())
                .expect("a pool has a member"),
        };
        members.routed[index].inc();
        members.refs[index].clone()
    }

    /// The member `key` maps to: the same member for the same key while the pool's size
    /// stays (and across restarts); a resize moves only the keys of members added or removed.
    pub fn route_by(&self, key: &impl Hash) -> A::Ref {
        let members = self.members();
        let point = hash(key);
        let at = members.ring.partition_point(|(other, _)| *other < point);
        let (_, index) = members.ring[at % members.ring.len()];
        members.routed[index].inc();
        A::Ref::from(members.refs[index].clone())
    }

    /// Every member, in order.
    pub fn all(&self) -> Vec<A::Ref> {
        self.members()
            .refs
            .iter()
            .map(|member| A::Ref::from(member.clone()))
            .collect()
    }

    /// How many members there are.
    pub fn size(&self) -> usize {
        self.members().refs.len()
    }

    /// The pool's label.
    pub fn label(&self) -> &'static str {
        self.shared.label
    }

    /// Grows or shrinks the pool to `size` members (see the module documentation for what
    /// routing sees meanwhile). Zero is refused with [`Error::InvalidPoolSize`].
    pub async fn resize(&self, size: usize) -> Result<(), Error> {
        check_size(self.shared.label, size)?;
        let _turn = self.shared.resizing.lock().await;
        let current = self.members();
        let mut refs = current.refs.clone();
        let removed = if size > refs.len() {
            for _ in refs.len()..size {
                let factory = self.shared.factory.clone();
                let spec = ChildSpec::new(move || (*factory.lock())());
                refs.push(self.shared.supervisor.start(spec).await?);
            }
            Vec::new()
        } else {
            refs.split_off(size)
        };
        let members = Members::new(refs, self.shared.label, &self.shared.families);
        self.shared
            .members_gauge
            .set(i64::try_from(members.refs.len()).unwrap_or(i64::MAX));
        *self.shared.members.write() = Arc::new(members);
        // Nobody routes to them now: each handles what is queued, then stops for good.
        for member in removed {
            member.stop().await;
        }
        Ok(())
    }

    /// Stops every member and the pool's supervisor, and waits for them.
    pub async fn stop(&self) {
        self.shared.supervisor.stop();
        let _ = self.shared.supervisor.join().await;
        self.shared.members_gauge.set(0);
    }
}

impl<A: Actor> std::fmt::Debug for PoolRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolRef")
            .field("label", &self.shared.label)
            .field("routing", &self.shared.routing)
            .field("size", &self.size())
            .finish()
    }
}

/// The pool families of one runtime.
struct PoolFamilies {
    routed: Family<[(&'static str, String); 2], Counter>,
    members: Family<[(&'static str, &'static str); 1], Gauge>,
}

impl PoolFamilies {
    fn of(context: &runtime::Context) -> Arc<PoolFamilies> {
        context.__extension(|registry| {
            let families = PoolFamilies {
                routed: Family::default(),
                members: Family::default(),
            };
            registry.register(
                "pool_routed",
                "Messages routed to each member of a pool, by pool label and member position",
                families.routed.clone(),
            );
            registry.register(
                "pool_members",
                "Members of the pool now, by pool label",
                families.members.clone(),
            );
            families
        })
    }
}
