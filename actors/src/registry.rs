//! [`Registry`]: names for actors, one registry per runtime, like OTP's registered names.
//!
//! A name maps to a weak ref of the type it was registered as: a generated `<Name>Ref` or
//! an interface ref (anything [`Registrable`]). A lookup gives that type back while the
//! actor runs; a lookup as another type, of a name nobody holds, or of an actor that ended,
//! gives `None` (a ref looked up while the actor is ending reports `Closed` when used). Registering a name held by a running actor is refused with
//! [`Error::NameTaken`].
//!
//! Invariants:
//! - The registry never keeps an actor alive: it holds weak refs, upgraded per lookup.
//! - An entry leaves when its actor ends, whatever the exit: the end runs the registry's
//!   callback (see `Life::on_end`) before any joiner or monitor hears of it, so once `join`
//!   resolves the name is free. The callback removes the entry only if it is still that
//!   actor's (the name may have passed to another since).
//! - A supervised child's ref survives its restarts (one mailbox across incarnations), and
//!   so does its name: only its end for good removes it.
//! - Names are spread over shards, each behind its own reader-writer lock on a cache line of
//!   its own: a registration takes one shard's write lock. Of two concurrent registrations of
//!   one name, exactly one wins.
//! - Each shard counts its changes (`generation`, bumped under the write lock after the table
//!   changed). A lookup first asks its thread's cache (below), which is valid only for the
//!   generation it was filled at: a lookup that misses reads the generation, then the table
//!   under the read lock, and caches what it found at that generation. A generation read
//!   unchanged means no change to the shard finished since the fill, so a hit returns what
//!   the table holds (a change still under way is not finished: the lookup is ordered before
//!   it). A hit takes no lock: two tasks looking up one name on two cores no longer bounce
//!   the shard's lock between them (the ref a lookup returns still counts itself on the
//!   actor's mailbox, as every ref clone does).
//!
//! # The lookup cache
//!
//! Per thread, direct-mapped: `CACHED` (64) slots, each holding one name of one registry (a
//! process-unique id, never an address that a later registry could reuse), the shard
//! generation it was read at, and a share of the table entry's name and weak ref. A lookup
//! of a name nobody holds is not cached. A slot is overwritten by the next name that maps to
//! it, so the cache never grows and never allocates after its first fill. What it holds
//! keeps no actor running, but, as any [`WeakRef`](crate::WeakRef) does, the memory of an
//! ended actor's mailbox until its slot is reused: at most `CACHED` (64) mailboxes per thread.
//! Values leave the cache only after its borrow ends, since dropping the last share of a
//! mailbox can drop wakers, which may run code that looks a name up.

use crate::actor::refs::PeerHandle;
use crate::sync::Mutex;
use crate::sync::RwLock;
use crate::{ActorHandle, ActorId, Error};
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Shards of the name table: enough that registrations on two cores rarely share one.
const SHARDS: usize = 16;

/// Slots of a thread's lookup cache (a power of two).
const CACHED: usize = 64;

/// The weak ref an entry holds, shared with the lookup caches that read it.
type SharedWeak = Arc<dyn Any + Send + Sync>;

/// Hands out registry ids; never reused within a process.
static NEXT_REGISTRY: AtomicU64 = AtomicU64::new(0);

/// A lookup this thread made.
struct Cached {
    registry: u64,
    hash: u64,
    /// The entry's name (shared with the table: no allocation).
    name: Arc<str>,
    /// The shard's generation the entry was read at.
    generation: u64,
    weak: SharedWeak,
}

/// A thread's lookups (see the module documentation).
#[derive(Default)]
struct LookupCache(Vec<Option<Cached>>);

thread_local! {
    static LOOKUPS: RefCell<LookupCache> = RefCell::new(LookupCache::default());
}

impl LookupCache {
    /// The slot of `name` (of hash `hash`) in registry `registry`.
    fn slot(registry: u64, hash: u64) -> usize {
        // The hash is keyed per registry already; the id spreads registries that share one.
        (hash ^ registry.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as usize & (CACHED - 1)
    }

    /// The cached weak ref of `name` if it was read at `generation`.
    fn get(&self, registry: u64, hash: u64, name: &str, generation: u64) -> Option<&SharedWeak> {
        let cached = self.0.get(Self::slot(registry, hash))?.as_ref()?;
        (cached.registry == registry
            && cached.hash == hash
            && cached.generation == generation
            && *cached.name == *name)
            .then_some(&cached.weak)
    }

    /// Remembers `cached`; hands back what its slot held, for the caller to drop once the
    /// cache is no longer borrowed.
    fn put(&mut self, cached: Cached) -> Option<Cached> {
        if self.0.is_empty() {
            self.0.resize_with(CACHED, || None);
        }
        let slot = Self::slot(cached.registry, cached.hash);
        self.0[slot].replace(cached)
    }
}

/// A ref type a [`Registry`] can hold by name: every generated `<Name>Ref` and interface
/// ref. Implemented by the attributes; not meant to be implemented by hand.
pub trait Registrable: ActorHandle + Clone + Send + Sync + 'static {
    /// What the registry keeps: a ref that does not keep the actor alive.
    #[doc(hidden)]
    type Weak: Send + Sync + 'static;

    #[doc(hidden)]
    fn __downgrade(&self) -> Self::Weak;

    #[doc(hidden)]
    fn __upgrade(weak: &Self::Weak) -> Option<Self>;
}

/// One registered name.
struct Entry {
    id: ActorId,
    /// The `Registrable::Weak` of the type it was registered as.
    weak: SharedWeak,
    /// Tells whether the actor has ended (an entry whose callback has not run yet).
    peer: PeerHandle,
}

/// A shard's table: names by their hash (keyed, so hostile names cannot aim at one bucket),
/// hashed once per lookup for both the shard and the bucket; names of equal hash share a
/// bucket.
type Table = HashMap<u64, Vec<(Arc<str>, Entry)>, BuildHasherDefault<Passthrough>>;

/// One shard, on a cache line of its own: registrations of names in different shards on
/// different cores do not share a line.
#[repr(align(128))]
struct Shard {
    table: RwLock<Table>,
    /// Changes to `table` so far, bumped under its write lock after each (see the module
    /// documentation).
    generation: AtomicU64,
}

impl Shard {
    /// Records a change to the table; called with the write lock held, after the change.
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// The hasher of a `Table`: its keys are hashes already.
#[derive(Default)]
struct Passthrough(u64);

impl Hasher for Passthrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("only `u64` keys are hashed")
    }

    /// The last `u64` written: a table's key, or the name hash of a cache key `(id, hash)`.
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The names of one runtime's actors. See the module documentation.
pub struct Registry {
    shards: [Shard; SHARDS],
    /// This registry's key in the lookup caches.
    id: u64,
    hasher: RandomState,
    /// The names each registered actor was given here. An actor gets one end callback per
    /// registry, made with its first name, and keeps its entry (empty once it holds no name)
    /// until that callback removes it at its end: registering and unregistering in a loop
    /// adds nothing to the actor. Locked on registration and end, never by a lookup; taken after
    /// a shard's lock is released, never under one.
    names_of: Mutex<HashMap<ActorId, Vec<String>>>,
    /// Itself, for the end callbacks (which must not keep it alive).
    this: Weak<Registry>,
}

impl Registry {
    /// The registry of the runtime `context` belongs to (made on first use), as an
    /// [`Arc`]: one registry is shared by every task of the runtime, and every call from a
    /// context of that runtime gives the same one (`Arc::ptr_eq`). Its methods take `&self`,
    /// so the `Arc` is used as the registry itself (`registry.lookup(..)`); clone it to hand
    /// it to another task (a counter increment). Keep it rather than call this per lookup:
    /// finding it takes the runtime's extension lock. It lives while the runtime or an
    /// `Arc` of it does; it keeps no actor alive either way.
    ///
    /// An `Arc`, not a plain value or a borrow: the registry must outlive any one context,
    /// and the callbacks that remove an ended actor's names reach it through a weak pointer
    /// of that same allocation.
    pub fn of(context: &runtime::Context) -> Arc<Registry> {
        context
            .extension(|_| RegistrySlot(Registry::new()))
            .0
            .clone()
    }

    /// An empty registry, on its own (what each runtime has one of).
    pub fn new() -> Arc<Registry> {
        Registry::with_hasher(RandomState::new())
    }

    fn with_hasher(hasher: RandomState) -> Arc<Registry> {
        Arc::new_cyclic(|this| Registry {
            shards: std::array::from_fn(|_| Shard {
                table: RwLock::new(Table::default()),
                generation: AtomicU64::new(0),
            }),
            id: NEXT_REGISTRY.fetch_add(1, Ordering::Relaxed),
            hasher,
            names_of: Mutex::new(HashMap::new()),
            this: this.clone(),
        })
    }

    /// An empty registry that hashes names as `other` does, so that only its id tells the
    /// two apart in a lookup cache: for the tests of that cache.
    #[doc(hidden)]
    pub fn __sharing_hasher_of(other: &Registry) -> Arc<Registry> {
        Registry::with_hasher(other.hasher.clone())
    }

    /// `name`'s hash and its shard.
    fn locate(&self, name: &str) -> (u64, &Shard) {
        let hash = self.hasher.hash_one(name);
        // The top bits pick the shard; the table's buckets use the low ones.
        (hash, &self.shards[(hash >> 60) as usize % SHARDS])
    }

    /// Registers `actor` under `name`. Refused with [`Error::NameTaken`] while another
    /// running actor holds the name, and with [`Error::Closed`] if `actor` has ended.
    /// Registering the actor that holds the name again replaces the type it is found as. The
    /// name leaves with the actor's end, or by [`unregister`](Self::unregister).
    pub fn register<R: Registrable>(
        &self,
        name: impl Into<String>,
        actor: &R,
    ) -> Result<(), Error> {
        let name = name.into();
        let id = actor.actor_id();
        let peer = actor.__peer();
        if peer.0.life().has_ended() {
            return Err(Error::Closed);
        }
        {
            let (hash, shard) = self.locate(&name);
            let mut table = shard.table.write();
            let bucket = table.entry(hash).or_default();
            let held = bucket.iter().position(|(other, _)| **other == *name);
            if let Some(holder) = held.map(|at| &mut bucket[at].1)
                && !holder.peer.0.life().has_ended()
            {
                if holder.id != id {
                    return Err(Error::NameTaken {
                        name: name.into(),
                        holder: holder.id,
                    });
                }
                // The same actor: found as this type from now on; its callback stands.
                holder.weak = Arc::new(actor.__downgrade());
                shard.changed();
                return Ok(());
            }
            let entry = Entry {
                id,
                weak: Arc::new(actor.__downgrade()),
                peer: PeerHandle(peer.0.clone()),
            };
            match held {
                Some(at) => bucket[at].1 = entry,
                None => bucket.push((Arc::from(name.as_str()), entry)),
            }
            shard.changed();
        }
        let first = {
            let mut names_of = self.names_of.lock();
            // The entry, once made, stays until the actor's end (an `unregister` only empties
            // it): it records that the actor's end callback exists.
            let first = !names_of.contains_key(&id);
            let names = names_of.entry(id).or_default();
            if !names.contains(&name) {
                names.push(name);
            }
            first
        };
        if first {
            // No lock held: an actor that ended meanwhile runs it here and now.
            let registry = self.this.clone();
            peer.0.life().on_end(Box::new(move || {
                if let Some(registry) = registry.upgrade() {
                    registry.ended(id);
                }
            }));
        }
        Ok(())
    }

    /// The actor registered as `name`, as the type `R` it was registered as; `None` if no
    /// running actor holds the name, or it was registered as another type.
    pub fn lookup<R: Registrable>(&self, name: &str) -> Option<R> {
        let (hash, shard) = self.locate(name);
        // Acquire: a generation read unchanged since the fill means no change finished since.
        let generation = shard.generation.load(Ordering::Acquire);
        let hit = LOOKUPS
            .try_with(|cache| {
                let cache = cache.borrow();
                let weak = cache.get(self.id, hash, name, generation)?;
                // Only an upgrade under the borrow: it drops nothing.
                Some(weak.downcast_ref::<R::Weak>().and_then(R::__upgrade))
            })
            .ok()
            .flatten();
        if let Some(found) = hit {
            return found;
        }
        let held = {
            let table = shard.table.read();
            table
                .get(&hash)
                .and_then(|bucket| bucket.iter().find(|(other, _)| **other == *name))
                .map(|(name, entry)| (name.clone(), entry.weak.clone()))
        };
        let (name, weak) = held?;
        let found = weak.downcast_ref::<R::Weak>().and_then(R::__upgrade);
        let cached = Cached {
            registry: self.id,
            hash,
            name,
            generation,
            weak,
        };
        // A thread being torn down has no cache: the lookup just is not remembered. What the
        // slot held is dropped after the borrow (see the module documentation).
        let replaced = LOOKUPS.try_with(|cache| cache.borrow_mut().put(cached));
        drop(replaced);
        found
    }

    /// Removes and returns the entry of `name`, if it matches.
    fn take(&self, name: &str, matches: impl Fn(&Entry) -> bool) -> Option<Entry> {
        let (hash, shard) = self.locate(name);
        let mut table = shard.table.write();
        let bucket = table.get_mut(&hash)?;
        let at = bucket
            .iter()
            .position(|(other, entry)| **other == *name && matches(entry))?;
        let (_, entry) = bucket.swap_remove(at);
        if bucket.is_empty() {
            table.remove(&hash);
        }
        shard.changed();
        Some(entry)
    }

    /// Removes `name`; returns the id of the actor that held it, if one did.
    pub fn unregister(&self, name: &str) -> Option<ActorId> {
        let entry = self.take(name, |_| true)?;
        if let Some(names) = self.names_of.lock().get_mut(&entry.id) {
            names.retain(|other| other != name);
        }
        (!entry.peer.0.life().has_ended()).then_some(entry.id)
    }

    /// The names held by running actors, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .shards
            .iter()
            .flat_map(|shard| {
                shard
                    .table
                    .read()
                    .values()
                    .flatten()
                    .filter(|(_, entry)| !entry.peer.0.life().has_ended())
                    .map(|(name, _)| name.to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        names.sort();
        names
    }

    /// The actor `id` ended: its names leave (those it still holds).
    fn ended(&self, id: ActorId) {
        let names = self.names_of.lock().remove(&id).unwrap_or_default();
        for name in names {
            self.take(&name, |entry| entry.id == id);
        }
    }

    /// Entries in the table, those of ended actors whose end has not reached it yet
    /// included: for tests that check nothing lingers.
    #[doc(hidden)]
    pub fn __entries(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.table.read().values().map(Vec::len).sum::<usize>())
            .sum()
    }
}

/// Shows how many entries the table holds (not the names: a registry may hold thousands).
/// `try_read`: Debug never waits, and never deadlocks on a lock its own thread holds.
impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Registry");
        let mut entries = 0;
        for shard in &self.shards {
            match shard.table.try_read() {
                Some(table) => entries += table.values().map(Vec::len).sum::<usize>(),
                None => return debug.finish_non_exhaustive(),
            }
        }
        debug.field("entries", &entries).finish()
    }
}

/// The runtime's registry, as its extension.
struct RegistrySlot(Arc<Registry>);

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;
    use crate::ExitReason;
    use crate::mailbox::Mailbox;

    /// The least a registry takes: a handle on a bare mailbox, found as itself.
    #[derive(Clone)]
    struct Bare(Arc<Mailbox<u8>>);

    impl ActorHandle for Bare {
        fn actor_id(&self) -> ActorId {
            self.0.life.id()
        }

        fn __peer(&self) -> PeerHandle {
            PeerHandle(self.0.clone())
        }
    }

    impl Registrable for Bare {
        type Weak = Bare;

        fn __downgrade(&self) -> Bare {
            self.clone()
        }

        fn __upgrade(weak: &Bare) -> Option<Bare> {
            Some(weak.clone())
        }
    }

    /// Registering and unregistering in a loop adds nothing to the actor: its one end
    /// callback stands, and its end still frees every name it holds.
    #[test]
    fn register_and_unregister_in_a_loop_keep_one_end_callback() {
        let registry = Registry::new();
        let actor = Bare(Mailbox::new(1, ActorId::next(&"registered")));
        for round in 0..1_000 {
            registry.register("name", &actor).expect("free");
            assert_eq!(registry.unregister("name"), Some(actor.actor_id()));
            assert_eq!(
                actor.0.life.end_callbacks(),
                1,
                "end callbacks after {} rounds",
                round + 1
            );
        }
        registry.register("kept", &actor).expect("free");
        registry.register("also", &actor).expect("free");
        assert_eq!(actor.0.life.end_callbacks(), 1);
        actor.0.end(ExitReason::Normal);
        assert_eq!(registry.__entries(), 0);
        assert!(registry.names_of.lock().is_empty());
    }
}
