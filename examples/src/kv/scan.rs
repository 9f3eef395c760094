//! `SCAN`'s cursor: a position in the order of the keys' hashes.
//!
//! Invariant (Redis's `SCAN` contract): a full iteration, from cursor 0 until the cursor
//! comes back 0, returns every key present for the whole of it at least once, whatever is
//! added, removed or rewritten meanwhile. A key's hash is a fixed function of its bytes, a
//! page returns every key whose hash lies in `[cursor, next)` (a run of equal hashes is never
//! split across pages), and the next cursor only grows; so a key present throughout lies in
//! exactly one page's range and is returned there. A page costs one pass over the keys.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

/// The key's place in the iteration order (fixed: SipHash with zero keys).
pub fn hash(key: &[u8]) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(key)
}

/// The page of `keys` that starts at `cursor`: at least `count` keys (more only to finish a
/// run of equal hashes), and the cursor after it, 0 when none is left.
pub fn page<'k>(
    keys: impl Iterator<Item = &'k Vec<u8>>,
    cursor: u64,
    count: usize,
) -> (u64, Vec<Vec<u8>>) {
    let mut ahead: Vec<(u64, &Vec<u8>)> = keys
        .map(|key| (hash(key), key))
        .filter(|(hash, _)| *hash >= cursor)
        .collect();
    let count = count.max(1);
    if ahead.len() > count {
        ahead.select_nth_unstable(count - 1);
        let last = ahead[count - 1].0;
        // The rest of the run of hashes equal to the last taken comes along.
        let (mut taken, rest): (Vec<_>, Vec<_>) =
            ahead.into_iter().partition(|(hash, _)| *hash <= last);
        taken.sort_unstable();
        let next = if rest.is_empty() {
            0
        } else {
            last.wrapping_add(1)
        };
        return (
            next,
            taken.into_iter().map(|(_, key)| key.clone()).collect(),
        );
    }
    ahead.sort_unstable();
    (0, ahead.into_iter().map(|(_, key)| key.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys present throughout are all returned, while others come and go between pages.
    #[test]
    fn every_key_present_throughout_is_returned() {
        let stable: Vec<Vec<u8>> = (0..500)
            .map(|i| format!("stable{i}").into_bytes())
            .collect();
        let mut keys = stable.clone();
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        let mut round = 0;
        loop {
            let (next, page) = page(keys.iter(), cursor, 7);
            seen.extend(page);
            // Churn between pages: keys added and removed.
            keys.push(format!("new{round}").into_bytes());
            if round % 3 == 0 {
                keys.retain(|key| !key.starts_with(format!("new{}", round / 2).as_bytes()));
            }
            round += 1;
            if next == 0 {
                break;
            }
            assert!(next > cursor, "the cursor only grows");
            cursor = next;
        }
        for key in &stable {
            assert!(
                seen.contains(key),
                "{:?} missed",
                String::from_utf8_lossy(key)
            );
        }
    }
}
