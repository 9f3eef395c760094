//! The store's map from keys to entries, in copy-on-write shards: a snapshot for a rewrite
//! costs one pointer copy per shard, not a copy of every key, so taking it never stalls the
//! store's thread however many keys it holds.
//!
//! Invariants:
//! - A key lives in shard `hash(key) % SHARDS`, the hash keyed at random per map (and shared
//!   by its clones), so no client can choose keys that all land in one shard.
//! - A clone shares every shard. A change to a shard that a clone still shares copies that
//!   shard alone first (`Arc::make_mut`): the first change to each shard after a snapshot pays
//!   a copy of `len / SHARDS` keys on average, and the snapshot never sees it.
//! - `len` is the number of keys in all shards.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

/// Shards per map: with a million keys, about 250 in each, so a shard's copy takes
/// microseconds.
pub const SHARDS: usize = 4096;

/// One shard: a plain map, shared with clones until changed.
type Shard<V> = Arc<HashMap<Vec<u8>, V>>;

/// A map from byte-string keys to `V`, in shards shared with its clones until changed.
#[derive(Clone, Debug)]
pub struct Shards<V> {
    shards: Box<[Shard<V>]>,
    hasher: RandomState,
    len: usize,
}

impl<V> Default for Shards<V> {
    fn default() -> Self {
        // One empty map shared by every shard: a new map costs one allocation, and the first
        // change to a shard copies an empty map.
        let empty = Arc::new(HashMap::new());
        Shards {
            shards: (0..SHARDS).map(|_| empty.clone()).collect(),
            hasher: RandomState::new(),
            len: 0,
        }
    }
}

impl<V: Clone> Shards<V> {
    fn shard_of(&self, key: &[u8]) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    /// The shard holding `key`, for a change: copied first if a clone shares it.
    fn shard_mut(&mut self, key: &[u8]) -> &mut HashMap<Vec<u8>, V> {
        let shard = self.shard_of(key);
        Arc::make_mut(&mut self.shards[shard])
    }

    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.shards[self.shard_of(key)].get(key)
    }

    /// The value at `key`, to change it in place; `None` (and no copy) if absent.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        self.get(key)?;
        self.shard_mut(key).get_mut(key)
    }

    /// Puts `value` at `key`; returns the value it replaces.
    pub fn insert(&mut self, key: Vec<u8>, value: V) -> Option<V> {
        let replaced = self.shard_mut(&key).insert(key, value);
        if replaced.is_none() {
            self.len += 1;
        }
        replaced
    }

    /// Takes the value at `key` out; no copy if absent.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        self.get(key)?;
        let removed = self.shard_mut(key).remove(key);
        self.len -= usize::from(removed.is_some());
        removed
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key and value, shard by shard.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &V)> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clone keeps what the map held when it was taken, whatever the map does next, and
    /// the map copies only the shards it changes.
    #[test]
    fn a_clone_is_a_snapshot_and_changes_copy_only_their_shard() {
        let mut map = Shards::default();
        for index in 0..10_000u32 {
            map.insert(index.to_be_bytes().to_vec(), index);
        }
        assert_eq!(map.len(), 10_000);
        let snapshot = map.clone();
        map.insert(7u32.to_be_bytes().to_vec(), 70);
        assert_eq!(map.remove(&8u32.to_be_bytes()), Some(8));
        assert_eq!(map.remove(&8u32.to_be_bytes()), None);
        *map.get_mut(&9u32.to_be_bytes()).unwrap() = 90;
        map.insert(b"new".to_vec(), 1);
        assert_eq!(map.len(), 10_000);
        assert_eq!(snapshot.len(), 10_000);
        assert_eq!(snapshot.get(&7u32.to_be_bytes()), Some(&7));
        assert_eq!(snapshot.get(&8u32.to_be_bytes()), Some(&8));
        assert_eq!(snapshot.get(&9u32.to_be_bytes()), Some(&9));
        assert_eq!(snapshot.get(b"new"), None);
        assert_eq!(map.get(&7u32.to_be_bytes()), Some(&70));
        assert_eq!(map.get(&9u32.to_be_bytes()), Some(&90));
        let shared = map
            .shards
            .iter()
            .zip(snapshot.shards.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert!(
            shared >= SHARDS - 4,
            "{shared} of {SHARDS} shards still shared"
        );
        let mut entries: Vec<u32> = snapshot.iter().map(|(_, value)| *value).collect();
        entries.sort_unstable();
        assert_eq!(entries, (0..10_000).collect::<Vec<_>>());
    }
}
