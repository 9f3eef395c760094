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
//!   with the same mailbox, so its ref, and the routing over it, keep working, within the
//!   pool's restart intensity (past it the supervisor gives up and the pool is closed).
//! - Routing reads a snapshot of the members (an `Arc` behind a reader-writer lock, swapped
//!   by a resize): a route is a read lock, an `Arc` clone and the member's ref clone, no
//!   allocation.
//! - A resize is serialized with other resizes and runs in a task of its own (a dropped
//!   resize still finishes). Growing starts the new members before they
//!   are routed to. Shrinking stops routing to the members it removes first, then stops
//!   them after what is queued (so a message routed before is still handled).
//! - By key, a key maps to a point on a ring of 64 points per member, each placed by the
//!   member's id: a resize moves only the keys of the members it adds or removes.
//! - A pool is its supervisor's: its members are owned by it, not by the pool's refs. A
//!   top-level pool stops when its last ref goes (nobody can route to it any more); one
//!   nested under a [`Supervisor`](crate::supervisor::Supervisor) lives until its parent
//!   ends it, and its members keep their mailboxes across its restarts, as a static
//!   supervisor's children do: routing works before it first runs and while it restarts,
//!   and what is sent meanwhile waits for the members' next incarnation.

use crate::actor::refs::PeerHandle;
use crate::registry::Registrable;
use crate::supervisor::{
    ChildSpec, ChildSupervisor, DynamicSupervisor, DynamicSupervisorRef, Nesting, Restart,
};
use crate::sync::Mutex;
use crate::sync::RwLock;
use crate::{Actor, ActorHandle, ActorId, Ask, Error, ExitReason, Ref, Reply};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use runtime::Spawner as _;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

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
    /// Restarts allowed within a window, for all members together; `None`: three per
    /// member within 5 seconds.
    intensity: Option<(usize, Duration)>,
}

/// Shows the label, size, routing and intensity (not the factory).
impl<A: Actor> std::fmt::Debug for Pool<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("label", &self.label)
            .field("size", &self.size)
            .field("routing", &self.routing)
            .field("intensity", &self.intensity)
            .finish_non_exhaustive()
    }
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
            intensity: None,
        }
    }

    /// At most `restarts` member restarts (all members together) within `within`; one more
    /// and the pool's supervisor stops every member and gives up, as any supervisor does
    /// (routing then gives refs that report `Closed`). By default three per member (of the
    /// size the pool starts with) within 5 seconds.
    pub fn intensity(mut self, restarts: usize, within: Duration) -> Self {
        self.intensity = Some((restarts, within));
        self
    }

    /// How the pool's ref picks a member.
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Starts the pool's supervisor and members in a child scope of `context`; returns once
    /// every member's `on_start` ran. A size of zero is refused with
    /// [`Error::InvalidPoolSize`], a label that is not ASCII letters, digits and `_` with
    /// [`runtime::Error::LabelInvalid`] (as [`Error::Runtime`]); a member failing to start
    /// fails the whole start.
    pub async fn spawn(self, context: &runtime::Context) -> Result<PoolRef<A>, Error> {
        check_size(self.label, self.size)?;
        context.try_child(self.label)?;
        let (restarts, within) = self.supervisor_intensity(); // at most 3 * MAX_POOL_SIZE
        let supervisor = DynamicSupervisor::new(self.label)
            .intensity(restarts, within)
            .pooled()
            .spawn(context);
        let size = self.size;
        let pool = PoolRef {
            shared: Arc::new(self.shared(supervisor, false)),
        };
        pool.shared.runs_in(context);
        if let Err(error) = pool.resize(size).await {
            pool.shared.supervisor.stop();
            return Err(error);
        }
        Ok(pool)
    }
}

impl<A: Actor> Pool<A> {
    /// What its refs share, over `supervisor`; `nested` under a parent supervisor or not.
    fn shared(self, supervisor: DynamicSupervisorRef, nested: bool) -> Shared<A> {
        Shared {
            label: self.label,
            routing: self.routing,
            factory: self.factory,
            supervisor,
            members: RwLock::new(Arc::new(Members::default())),
            next: AtomicUsize::new(0),
            resizing: futures::lock::Mutex::new(()),
            counted: AtomicUsize::new(0),
            nested,
            metrics: OnceLock::new(),
            context: Mutex::new(None),
            closed: OnceLock::new(),
        }
    }

    /// The restart intensity of its supervisor: as given, else three restarts per member
    /// within 5 seconds.
    fn supervisor_intensity(&self) -> (usize, Duration) {
        // At most 3 * MAX_POOL_SIZE.
        self.intensity
            .unwrap_or((3 * self.size, Duration::from_secs(5)))
    }
}

impl<A: Actor> crate::supervisor::sealed::Sealed for Pool<A> {}

/// A pool under a [`Supervisor`](crate::supervisor::Supervisor): its members (as many as
/// its size, or what the last resize made it) are made with it and keep their mailboxes
/// for the pool's whole life; each incarnation of the pool starts them all again, one after
/// the other, and counts as started once they did (a member whose start fails is restarted
/// by the pool's own policy, as any failure). A size outside `1..=MAX_POOL_SIZE` is
/// refused by the parent's `try_spawn`.
impl<A: Actor> ChildSupervisor for Pool<A> {
    type Ref = PoolRef<A>;

    fn __nest(self, restart: Restart, shutdown: Duration) -> (Nesting, PoolRef<A>) {
        let problem = check_size(self.label, self.size).err();
        let (restarts, within) = self.supervisor_intensity();
        // A refused size starts nothing (the parent's spawn refuses it).
        let size = if problem.is_some() { 0 } else { self.size };
        let specs = (0..size)
            .map(|_| {
                let factory = self.factory.clone();
                ChildSpec::new(move || (*factory.lock())())
            })
            .collect();
        let supervisor = DynamicSupervisor::new(self.label)
            .intensity(restarts, within)
            .pooled();
        // The fill holds the pool (its parent owns it); the pool's supervisor ref holds the
        // parent's state only weakly, so there is no cycle.
        let pool: Arc<OnceLock<PoolRef<A>>> = Arc::new(OnceLock::new());
        let filled = pool.clone();
        let fill = move |runtime: &runtime::Context| {
            let pool = filled.get().cloned();
            let runtime = runtime.clone();
            let fill: futures::future::BoxFuture<'static, Result<(), Error>> =
                Box::pin(async move {
                    match pool {
                        Some(pool) => pool.fill(&runtime).await,
                        None => Err(Error::Closed),
                    }
                });
            fill
        };
        let (mut nesting, supervisor, members) =
            supervisor.nest_keeping(restart, shutdown, specs, fill);
        let pool_ref = PoolRef {
            shared: Arc::new(self.shared(supervisor, true)),
        };
        // Routed to at once: messages wait in the members' mailboxes until they run.
        *pool_ref.shared.members.write() = Arc::new(Members::new(members, pool_ref.label(), None));
        let _ = pool.set(pool_ref.clone());
        if let Some(problem) = problem {
            nesting.refuse(problem);
        }
        (nesting, pool_ref)
    }
}

pub use crate::error::MAX_POOL_SIZE;

/// Refuses a size outside `1..=MAX_POOL_SIZE` with [`Error::InvalidPoolSize`].
fn check_size(pool: &'static str, size: usize) -> Result<(), Error> {
    if !(1..=MAX_POOL_SIZE).contains(&size) {
        return Err(Error::InvalidPoolSize { pool, size });
    }
    Ok(())
}

/// The members, as routing sees them.
struct Members<A: Actor> {
    refs: Vec<Ref<A>>,
    /// `pool_routed_total` of each member, by position (the series of a position a shrink
    /// removed stays, frozen, until a grow routes to that position again).
    routed: Vec<Counter>,
    /// The key ring: points and the members (positions) they belong to, sorted by point.
    ring: Vec<(u64, usize)>,
    /// `routed` is the runtime's (not placeholders, before a nested pool first ran).
    counted: bool,
}

impl<A: Actor> Default for Members<A> {
    fn default() -> Self {
        Members {
            refs: Vec::new(),
            routed: Vec::new(),
            ring: Vec::new(),
            counted: false,
        }
    }
}

impl<A: Actor> Members<A> {
    /// The members `refs`, counting what is routed to each in `families` (or nowhere yet:
    /// a nested pool that never ran has no runtime to count in).
    fn new(refs: Vec<Ref<A>>, label: &'static str, families: Option<&PoolFamilies>) -> Self {
        let routed = (0..refs.len())
            .map(|index| match families {
                Some(families) => families
                    .routed
                    .get_or_create(&[("pool", label.to_string()), ("member", index.to_string())])
                    .clone(),
                None => Counter::default(),
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
        Members {
            refs,
            routed,
            ring,
            counted: families.is_some(),
        }
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
    /// Held by a resize, and by a nested pool's incarnation while it starts its members.
    resizing: futures::lock::Mutex<()>,
    /// What this pool adds to `pool_members` of its label now.
    counted: AtomicUsize,
    /// Under a parent supervisor, which owns it: its last ref's drop does not stop it.
    nested: bool,
    /// The runtime's pool families and `pool_members` of the label (pools may share one),
    /// from the context it first runs in.
    metrics: OnceLock<(Arc<PoolFamilies>, Gauge)>,
    /// Where resizes run: a task of their own, so that a resize dropped half-way still
    /// finishes (no member is left started but unrouted, or unrouted but running). A
    /// nested pool's is its running incarnation's scope: a restart aborts a resize with the
    /// members it was starting.
    context: Mutex<Option<runtime::Context>>,
    /// What routing gives while there is no member (a nested pool before it first ran): a
    /// ref that reports `Closed`.
    closed: OnceLock<Ref<A>>,
}

impl<A: Actor> Shared<A> {
    /// The pool runs in `context` from now on: its resizes run there, and its metrics are
    /// that runtime's.
    fn runs_in(&self, context: &runtime::Context) {
        self.metrics.get_or_init(|| {
            let families = PoolFamilies::of(context);
            let gauge = families
                .members
                .get_or_create(&[("pool", self.label)])
                .clone();
            (families, gauge)
        });
        *self.context.lock() = Some(context.clone());
    }

    /// The pool's families: set before any member is routed to.
    fn families(&self) -> &PoolFamilies {
        &self
            .metrics
            .get()
            .expect("a pool has run before it has members")
            .0
    }
}

/// A running pool: the actor's generated `<Name>PoolRef` wraps it (`as_pool()` reaches it).
/// Cheap to clone. Routing to a pool that stopped gives refs that report `Closed`; so may a
/// message routed to a member just before a shrink removed it, if it reaches the member's
/// mailbox after what was queued there is handled (one waiting for room, say).
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

    /// Asks the member the routing picks ([`Ref::ask`]): the same [`Ask`] as an actor's ref
    /// gives, holding that member's ref, with the actor's `ask_timeout`, a per-call
    /// [`timeout`](Ask::timeout) and [`queued`](Ask::queued). What the generated
    /// `<Name>PoolRef`'s handler methods call.
    pub fn ask<R>(&self, make: impl FnOnce(Reply<R>) -> A::Message) -> Ask<'_, A, R> {
        self.route_untyped().into_ask(make)
    }

    /// Sends `message` to the member the routing picks, waiting while its mailbox is full
    /// ([`Ref::send`]).
    pub async fn send(&self, message: A::Message) -> Result<(), Error> {
        self.route_untyped().send(message).await
    }

    /// Sends `message` to the member the routing picks if its mailbox has room now
    /// ([`Ref::try_send`]): [`Error::Full`] if not (the pool does not try another member).
    pub fn try_send(&self, message: A::Message) -> Result<(), Error> {
        self.route_untyped().try_send(message)
    }

    fn route_untyped(&self) -> Ref<A> {
        let members = self.members();
        let count = members.refs.len();
        if count == 0 {
            return self.closed();
        }
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
        if members.ring.is_empty() {
            return A::Ref::from(self.closed());
        }
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

    /// A ref that reports `Closed`: what routing gives while the pool has no member.
    fn closed(&self) -> Ref<A> {
        self.shared
            .closed
            .get_or_init(|| {
                let mailbox = crate::actor::spawn::mailbox::<A>();
                mailbox.end(ExitReason::Shutdown);
                Ref::new(mailbox)
            })
            .clone()
    }

    /// Its members now, in start order, as its supervisor sees them (OTP's
    /// `which_children`): a member a shrink removed is listed until it ended.
    pub fn which_children(&self) -> Vec<crate::supervisor::ChildInfo> {
        self.shared.supervisor.which_children()
    }

    /// Its members now, counted (OTP's `count_children`).
    pub fn count_children(&self) -> crate::supervisor::ChildCounts {
        self.shared.supervisor.count_children()
    }

    /// How many members there are.
    pub fn size(&self) -> usize {
        self.members().refs.len()
    }

    /// The pool's label.
    pub fn label(&self) -> &'static str {
        self.shared.label
    }

    /// The pool's id: that of its supervisor (shown `label#n`), not any member's. It is what
    /// a [`Registry`](crate::Registry) and a monitor know the pool by: the pool's life is its
    /// supervisor's, which ends when the pool is stopped, gives up past its restart
    /// intensity, or its scope ends, and not when a member restarts or a resize removes one.
    pub fn id(&self) -> ActorId {
        self.shared.supervisor.id()
    }

    /// Grows or shrinks the pool to `size` members (see the module documentation for what
    /// routing sees meanwhile). Zero is refused with [`Error::InvalidPoolSize`]. A member
    /// that fails to start fails the resize; those started before it are kept and routed
    /// to. Dropping the future does not stop the resize: it runs in a task of its own. A
    /// nested pool that is not running (before its parent started it, or while its parent
    /// restarts it) refuses with [`Error::Closed`].
    pub async fn resize(&self, size: usize) -> Result<(), Error> {
        check_size(self.shared.label, size)?;
        let pool = self.clone();
        let Some(context) = self.shared.context.lock().clone() else {
            return Err(Error::Closed);
        };
        match context
            .spawn(move |_| async move { pool.resize_now(size).await })
            .await
        {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::Closed),
        }
    }

    async fn resize_now(&self, size: usize) -> Result<(), Error> {
        let _turn = self.shared.resizing.lock().await;
        let mut refs = self.members().refs.clone();
        let mut failed = None;
        let mut removed = Vec::new();
        if size > refs.len() {
            for _ in refs.len()..size {
                let factory = self.shared.factory.clone();
                let spec = ChildSpec::new(move || (*factory.lock())());
                match self.shared.supervisor.start(spec).await {
                    Ok(member) => refs.push(member),
                    Err(error) => {
                        failed = Some(error);
                        break;
                    }
                }
            }
        } else {
            removed = refs.split_off(size);
        }
        self.install(refs);
        // Nobody routes to them now: each handles what is queued, then stops for good; all
        // are told at once, then waited for.
        let stopping: Vec<_> = removed.iter().map(Ref::stop).collect();
        futures::future::join_all(stopping).await;
        failed.map_or(Ok(()), Err)
    }

    /// Stops every member and the pool's supervisor, and resolves with the supervisor's exit
    /// reason once they all ended (`Stopped`, or why it ended first: `Panicked` if it gave
    /// up past its intensity).
    pub async fn stop(&self) -> ExitReason {
        let reason = self.shared.supervisor.stop().await;
        self.count(0);
        reason
    }

    /// Routes to `refs` from now on.
    fn install(&self, refs: Vec<Ref<A>>) {
        let members = Members::new(refs, self.shared.label, Some(self.shared.families()));
        self.count(members.refs.len());
        *self.shared.members.write() = Arc::new(members);
    }

    /// A nested pool's incarnation begins, in `runtime` (its supervisor starts its members
    /// again itself): resizes run there from now on, the first time routing is counted in
    /// its runtime's metrics, and a member no routing reaches (a resize cut short) ends.
    async fn fill(&self, runtime: &runtime::Context) -> Result<(), Error> {
        self.shared.runs_in(runtime);
        let _turn = self.shared.resizing.lock().await;
        let members = self.members();
        if !members.counted {
            self.install(members.refs.clone());
        }
        // A resize cut short by the last restart may have started members it never routed
        // to: they end now, so that every member is one routing reaches.
        for child in self.shared.supervisor.children() {
            if members.refs.iter().all(|member| member.id() != child) {
                let _ = self.shared.supervisor.terminate_child(child).await;
            }
        }
        Ok(())
    }

    /// Makes this pool's share of `pool_members` `members`.
    fn count(&self, members: usize) {
        let before = self.shared.counted.swap(members, Ordering::Relaxed);
        let change = members as i64 - before as i64;
        if let Some((_, gauge)) = self.shared.metrics.get() {
            gauge.inc_by(change);
        }
    }
}

impl<A: Actor> Drop for Shared<A> {
    fn drop(&mut self) {
        // The label's gauge sums its pools' members: this pool's leave with it.
        let counted = *self.counted.get_mut();
        if let Some((_, gauge)) = self.metrics.get() {
            gauge.dec_by(counted as i64);
        }
        // Nobody can route to a top-level pool any more: it stops. A nested one is its
        // parent's to end.
        if !self.nested {
            drop(self.supervisor.stop());
        }
    }
}

/// A pool is known by its supervisor's life (see [`PoolRef::id`]): monitoring it tells of the
/// pool's end; a link to it tells the linker of that end, and the pool ignores the linker's.
impl<A: Actor> ActorHandle for PoolRef<A> {
    fn actor_id(&self) -> ActorId {
        self.id()
    }

    fn __peer(&self) -> PeerHandle {
        PeerHandle(self.shared.supervisor.life().clone())
    }
}

/// A pool ref the registry holds: it does not keep the pool running.
#[doc(hidden)]
pub struct WeakPoolRef<A: Actor>(Weak<Shared<A>>);

/// A pool registers under a name like an actor's ref: the name leaves when the pool ends
/// (see [`PoolRef::id`]); a lookup gives the pool back while it runs and a ref to it is held
/// somewhere (the registry's does not count).
impl<A: Actor> std::fmt::Debug for WeakPoolRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakPoolRef")
            .field("running", &(self.0.strong_count() > 0))
            .finish()
    }
}

impl<A: Actor> Registrable for PoolRef<A> {
    type Weak = WeakPoolRef<A>;

    fn __downgrade(&self) -> Self::Weak {
        WeakPoolRef(Arc::downgrade(&self.shared))
    }

    fn __upgrade(weak: &Self::Weak) -> Option<Self> {
        let shared = weak.0.upgrade()?;
        (!shared.supervisor.life().has_ended()).then_some(PoolRef { shared })
    }
}

impl<A: Actor> std::fmt::Debug for PoolRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("PoolRef");
        debug
            .field("label", &self.shared.label)
            .field("routing", &self.shared.routing);
        // `try_read`: Debug never waits, and never deadlocks on a lock its own thread holds.
        match self.shared.members.try_read() {
            Some(members) => debug.field("size", &members.refs.len()).finish(),
            None => debug.finish_non_exhaustive(),
        }
    }
}

/// The pool families of one runtime.
struct PoolFamilies {
    routed: Family<[(&'static str, String); 2], Counter>,
    members: Family<[(&'static str, &'static str); 1], Gauge>,
}

impl PoolFamilies {
    fn of(context: &runtime::Context) -> Arc<PoolFamilies> {
        context.extension(|registry| {
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
