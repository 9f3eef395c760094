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
//!   its own: a lookup hashes the name once (keyed) and takes one shard's read lock (no lock
//!   shared by every name), a registration that shard's write lock. Of two concurrent
//!   registrations of one name, exactly one wins.

use crate::refs::PeerHandle;
use crate::{ActorHandle, ActorId, Error};
use parking_lot::RwLock;
use runtime::__private::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, Weak};

/// Shards of the name table: enough that lookups on two cores rarely share one.
const SHARDS: usize = 16;

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
    weak: Box<dyn Any + Send + Sync>,
    /// Tells whether the actor has ended (an entry whose callback has not run yet).
    peer: PeerHandle,
}

/// A shard's table: names by their hash (keyed, so hostile names cannot aim at one bucket),
/// hashed once per lookup for both the shard and the bucket; names of equal hash share a
/// bucket.
type Table = HashMap<u64, Vec<(String, Entry)>, BuildHasherDefault<Passthrough>>;

/// One shard, on a cache line of its own: lookups of names in different shards on
/// different cores do not share a line.
#[repr(align(128))]
struct Shard(RwLock<Table>);

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

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The names of one runtime's actors. See the module documentation.
pub struct Registry {
    shards: [Shard; SHARDS],
    hasher: RandomState,
    /// The names each registered actor was given here. An actor gets one end callback per
    /// registry, made with its first name: registering and unregistering in a loop adds
    /// nothing to the actor. Locked on registration and end, never by a lookup; taken after
    /// a shard's lock is released, never under one.
    names_of: Mutex<HashMap<ActorId, Vec<String>>>,
    /// Itself, for the end callbacks (which must not keep it alive).
    this: Weak<Registry>,
}

impl Registry {
    /// The registry of the runtime `context` belongs to (made on first use). Keep the
    /// `Arc` rather than call this per lookup: finding it takes the runtime's extension lock.
    pub fn of(context: &runtime::Context) -> Arc<Registry> {
        context
            .__extension(|_| RegistrySlot(Registry::new()))
            .0
            .clone()
    }

    /// An empty registry, on its own (what each runtime has one of).
    pub fn new() -> Arc<Registry> {
        Arc::new_cyclic(|this| Registry {
            shards: std::array::from_fn(|_| Shard(RwLock::new(Table::default()))),
            hasher: RandomState::new(),
            names_of: Mutex::new(HashMap::new()),
            this: this.clone(),
        })
    }

    /// `name`'s hash and its shard.
    fn locate(&self, name: &str) -> (u64, &RwLock<Table>) {
        let hash = self.hasher.hash_one(name);
        // The top bits pick the shard; the table's buckets use the low ones.
        (hash, &self.shards[(hash >> 60) as usize % SHARDS].0)
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
            let mut shard = shard.write();
            let bucket = shard.entry(hash).or_default();
            let held = bucket.iter().position(|(other, _)| *other == name);
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
                holder.weak = Box::new(actor.__downgrade());
                return Ok(());
            }
            let entry = Entry {
                id,
                weak: Box::new(actor.__downgrade()),
                peer: PeerHandle(peer.0.clone()),
            };
            match held {
                Some(at) => bucket[at].1 = entry,
                None => bucket.push((name.clone(), entry)),
            }
        }
        let first = {
            let mut names_of = self.names_of.lock();
            let names = names_of.entry(id).or_default();
            let first = names.is_empty();
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
        let shard = shard.read();
        let (_, entry) = shard.get(&hash)?.iter().find(|(other, _)| other == name)?;
        R::__upgrade(entry.weak.downcast_ref::<R::Weak>()?)
    }

    /// Removes and returns the entry of `name`, if it matches.
    fn take(&self, name: &str, matches: impl Fn(&Entry) -> bool) -> Option<Entry> {
        let (hash, shard) = self.locate(name);
        let mut shard = shard.write();
        let bucket = shard.get_mut(&hash)?;
        let at = bucket
            .iter()
            .position(|(other, entry)| other == name && matches(entry))?;
        let (_, entry) = bucket.swap_remove(at);
        if bucket.is_empty() {
            shard.remove(&hash);
        }
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
                    .0
                    .read()
                    .values()
                    .flatten()
                    .filter(|(_, entry)| !entry.peer.0.life().has_ended())
                    .map(|(name, _)| name.clone())
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
            .map(|shard| shard.0.read().values().map(Vec::len).sum::<usize>())
            .sum()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("names", &self.names())
            .finish()
    }
}

/// The runtime's registry, as its extension.
struct RegistrySlot(Arc<Registry>);
