//! The store's map from keys to entries, in copy-on-write shards: a snapshot for a rewrite
//! costs one pointer copy per shard, not a copy of every key, so taking it never stalls the
//! store's thread however many keys it holds.
//!
//! Invariants:
//! - A key lives in the shard its [`Shards::hash`]'s top bits name: the hash is keyed at
//!   random once per map ([`KeyHasher`]), so no client can choose keys that all land in one
//!   shard, and a map and its clones (snapshots) share it. A map made anew (the store's
//!   restart replays its log into one) has new keys, so a `SCAN` cursor from before it
//!   starts over somewhere else, as Redis's does across a restart of redis-server (its hash
//!   seed is random per start). Drawn through `runtime::random_u64`, the keys are the seed's
//!   in a deterministic run, and so are the orders of a snapshot and of a `SCAN`.
//! - Shards are in hash order: every hash in shard `i` is below every hash in shard `i + 1`.
//!   [`Shards::scan`] walks keys in hash order, visiting only the shards its page needs.
//! - A clone shares every shard. A change to a shard that a clone still shares copies that
//!   shard alone first (`Arc::make_mut`): the first change to each shard after a snapshot pays
//!   a copy of `len / SHARDS` keys on average, and the snapshot never sees it.
//! - `len` is the number of keys in all shards.

use std::collections::HashMap;
use std::hash::{BuildHasher, DefaultHasher, Hasher};
use std::sync::Arc;

/// Shards per map: with a million keys, about 250 in each, so a shard's copy takes
/// microseconds.
pub const SHARDS: usize = 1 << SHARD_BITS;
const SHARD_BITS: u32 = 12;

/// The hash of a map's keys: SipHash-1-3 keyed by two words drawn once per map (a map and
/// its clones share them) with `runtime::random_u64`, so keys chosen to collide in one
/// process do not collide in another, and a deterministic run draws the same keys for a seed
/// (std's `RandomState` would make the order of a snapshot, and so the log's bytes, differ
/// from one run of a seed to the next).
#[derive(Clone, Copy, Debug)]
pub struct KeyHasher {
    keys: [u64; 2],
}

impl KeyHasher {
    /// A hasher with fresh random keys.
    pub fn random() -> Self {
        Self {
            keys: [runtime::random_u64(), runtime::random_u64()],
        }
    }
}

impl BuildHasher for KeyHasher {
    type Hasher = DefaultHasher;

    fn build_hasher(&self) -> DefaultHasher {
        let mut hasher = DefaultHasher::new();
        hasher.write_u64(self.keys[0]);
        hasher.write_u64(self.keys[1]);
        hasher
    }
}

fn shard_of_hash(hash: u64) -> usize {
    (hash >> (64 - SHARD_BITS)) as usize
}

/// One shard: a plain map, shared with clones until changed.
type Shard<V> = Arc<HashMap<Vec<u8>, V, KeyHasher>>;

/// A map from byte-string keys to `V`, in shards shared with its clones until changed.
#[derive(Clone, Debug)]
pub struct Shards<V> {
    /// Places keys in shards and orders a `SCAN`: a key's hash, whose top bits are its shard.
    hasher: KeyHasher,
    shards: Box<[Shard<V>]>,
    len: usize,
}

impl<V> Default for Shards<V> {
    fn default() -> Self {
        // One empty map shared by every shard: a new map costs one allocation, and the first
        // change to a shard copies an empty map.
        let hasher = KeyHasher::random();
        let empty = Arc::new(HashMap::with_hasher(hasher));
        Shards {
            hasher,
            shards: (0..SHARDS).map(|_| empty.clone()).collect(),
            len: 0,
        }
    }
}

impl<V: Clone> Shards<V> {
    /// A key's place in the order of keys: its shard (the top bits) and its order in a
    /// `SCAN`.
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard_of(&self, key: &[u8]) -> usize {
        shard_of_hash(self.hash(key))
    }

    /// The shard holding `key`, for a change: copied first if a clone shares it.
    fn shard_mut(&mut self, key: &[u8]) -> &mut HashMap<Vec<u8>, V, KeyHasher> {
        let shard = self.shard_of(key);
        Arc::make_mut(&mut self.shards[shard])
    }

    /// The value at `key`.
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.shards[self.shard_of(key)].get(key)
    }

    /// The value at `key`, to change it in place; `None` (and no copy) if absent.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let shard = self.shard_of(key);
        if !self.shards[shard].contains_key(key) {
            return None;
        }
        Arc::make_mut(&mut self.shards[shard]).get_mut(key)
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
        let shard = self.shard_of(key);
        if !self.shards[shard].contains_key(key) {
            return None;
        }
        let removed = Arc::make_mut(&mut self.shards[shard]).remove(key);
        self.len -= usize::from(removed.is_some());
        removed
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key and value, shard by shard.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &V)> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }

    /// The `index`th key and value of [`iter`](Self::iter)'s order, found in at most
    /// `SHARDS` steps and one shard's walk (for `RANDOMKEY`).
    pub fn nth(&self, mut index: usize) -> Option<(&Vec<u8>, &V)> {
        for shard in self.shards.iter() {
            if index < shard.len() {
                return shard.iter().nth(index);
            }
            index -= shard.len();
        }
        None
    }

    /// A page of a `SCAN` from `cursor` (a hash): the keys whose hash is at least `cursor`,
    /// in hash order, that `keep` keeps, at least `count` of them if there are (more only to
    /// finish a run of equal hashes, which is never split), and the cursor after them, 0 when
    /// none is left. Only the shards the page spans are read, each sorted once.
    ///
    /// A key present for a whole iteration (from cursor 0 until 0 comes back) is returned
    /// once: its hash never changes, the cursor only grows, and each page returns every kept
    /// key in `[cursor, next)`.
    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        mut keep: impl FnMut(&V) -> bool,
    ) -> (u64, Vec<Vec<u8>>) {
        let count = count.max(1);
        let mut page = Vec::new();
        for shard in &self.shards[shard_of_hash(cursor)..] {
            let mut ahead: Vec<(u64, &Vec<u8>)> = shard
                .iter()
                .filter(|(_, value)| keep(value))
                .map(|(key, _)| (self.hash(key), key))
                .filter(|(hash, _)| *hash >= cursor)
                .collect();
            ahead.sort_unstable();
            let needed = count.saturating_sub(page.len());
            if ahead.len() > needed && needed > 0 {
                // Enough here: up to the `needed`th, and the rest of its run of equal hashes
                // (all in this shard: equal hashes share their top bits).
                let last = ahead[needed - 1].0;
                let taken = ahead.iter().take_while(|(hash, _)| *hash <= last);
                page.extend(taken.map(|(_, key)| (*key).clone()));
                return match last.checked_add(1) {
                    Some(next) => (next, page),
                    None => (0, page),
                };
            }
            page.extend(ahead.into_iter().map(|(_, key)| key.clone()));
            if page.len() >= count {
                // This shard ended the page: the next starts at the next shard.
                let shard = shard_of_hash(self.hash(page.last().expect("count is at least 1")));
                return match shard + 1 {
                    SHARDS => (0, page),
                    next => (((next as u64) << (64 - SHARD_BITS)), page),
                };
            }
        }
        (0, page)
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
        let mut nth: Vec<u32> = (0..10_000)
            .map(|index| *snapshot.nth(index).unwrap().1)
            .collect();
        nth.sort_unstable();
        assert_eq!(nth, entries, "nth reaches every entry once");
        assert!(snapshot.nth(10_000).is_none());
    }

    /// A full `SCAN` returns every key present throughout exactly once, in hash order, with
    /// its cursor only growing, while other keys come and go between pages; keys `keep`
    /// refuses are left out.
    #[test]
    fn a_scan_returns_every_key_present_throughout() {
        for count in [1, 7, 300, 20_000] {
            let mut map = Shards::default();
            for index in 0..3000u32 {
                map.insert(format!("stable{index}").into_bytes(), true);
                map.insert(format!("hidden{index}").into_bytes(), false);
            }
            let mut seen = Vec::new();
            let (mut cursor, mut round) = (0, 0u32);
            loop {
                let (next, page) = map.scan(cursor, count, |kept| *kept);
                assert!(page.len() >= count.min(1) || next == 0, "count {count}");
                seen.extend(page);
                map.insert(format!("new{round}").into_bytes(), true);
                map.remove(format!("new{}", round / 2).as_bytes());
                round += 1;
                if next == 0 {
                    break;
                }
                assert!(next > cursor, "the cursor only grows");
                cursor = next;
            }
            let stable: Vec<_> = seen
                .iter()
                .filter(|key| key.starts_with(b"stable"))
                .collect();
            assert_eq!(stable.len(), 3000, "count {count}: each stable key once");
            let unique: std::collections::HashSet<_> = stable.iter().collect();
            assert_eq!(unique.len(), 3000);
            assert!(!seen.iter().any(|key| key.starts_with(b"hidden")));
            let hashes: Vec<u64> = seen.iter().map(|key| map.hash(key)).collect();
            assert!(
                hashes.windows(2).all(|pair| pair[0] <= pair[1]),
                "hash order"
            );
        }
    }
}
