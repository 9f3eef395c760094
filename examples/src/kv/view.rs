//! The data as acknowledged: what a connection reads without asking the store's thread.
//!
//! Invariants:
//! - **The view holds only what has been acknowledged, or is being acknowledged now**: the
//!   store publishes a change here just before it gives the answers that depend on it, never
//!   earlier. With `--durability always` that is after the sync that carries its record
//!   (and, after a rewrite, after the generation it replaced is removed), so a read from the
//!   view never sees a write that a crash could undo. With `everysec` and `none` a write is
//!   published when it is answered, at once, as those modes answer it.
//! - **A commit is published whole**: the changes of one commit (or, with `everysec` and
//!   `none`, of one message: a pipeline's batch, an `EXEC`, an `MSET`) are applied under one
//!   write lock, so a read sees all of them or none. A transaction is never seen half done.
//! - **The view only moves forward**: publishes are applied in the store's order, and a read
//!   takes the lock, so a read that starts after an answer was given sees that answer's
//!   change (or a later one). A connection whose own writes are all answered therefore reads
//!   them here (read-your-writes); one with a write still unanswered sends its reads to the
//!   store behind it instead (see the `connection` module).
//! - **Expiry is the store's to decide**: a read that meets an entry whose deadline has passed
//!   is not answered here but sent to the store. The store may have kept the key (a `PERSIST`
//!   or `EXPIRE` that reached it before the deadline, its record not yet synced): answering
//!   "absent" here would show the key gone and then back. The store answers it in order
//!   behind its own pending commits.
//! - A restarted store resets the view to what it replayed, which holds everything
//!   acknowledged (every acknowledged write was synced, or, with `everysec` and `none`, is
//!   what a crash may lose).
//!
//! The view is a second map of the keys (values are shared, not copied): memory for keys
//! doubles, which buys reads that never wait for the store's thread, nor for a sync of
//! writes they do not depend on.

use super::log::{self, Data, Entry, Record};
use super::store::{Op, Outcome};
use std::collections::HashMap;

/// The acknowledged data, shared by the store (which publishes) and the connections (which
/// read). See the [module](self).
#[derive(Default)]
pub struct View {
    entries: parking_lot::RwLock<HashMap<Vec<u8>, Entry>>,
}

/// Shows how many entries the view holds; `..` while a writer holds it (never waits).
impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("View");
        match self.entries.try_read() {
            Some(entries) => debug.field("entries", &entries.len()).finish(),
            None => debug.finish_non_exhaustive(),
        }
    }
}

impl View {
    /// A view of `data`, all of it acknowledged (what a start replayed).
    pub fn of(data: &Data) -> View {
        let view = View::default();
        view.reset(data);
        view
    }

    /// Replaces the view with `data` (a restarted store's replay).
    pub(super) fn reset(&self, data: &Data) {
        let entries = data
            .entries()
            .map(|(key, entry)| (key.clone(), entry.clone()))
            .collect();
        *self.entries.write() = entries;
    }

    /// Applies `records` in order, all at once (see the [module](self)), and empties them.
    pub(super) fn publish(&self, records: &mut Vec<Record>) {
        if records.is_empty() {
            return;
        }
        let mut entries = self.entries.write();
        for record in records.drain(..) {
            match record {
                Record::Set {
                    key,
                    value,
                    expires,
                } => {
                    entries.insert(key, Entry { value, expires });
                }
                Record::Del { key } => {
                    entries.remove(&key);
                }
                Record::Flush => entries.clear(),
                Record::Expire { key, expires } => {
                    if let Some(entry) = entries.get_mut(&key) {
                        entry.expires = expires;
                    }
                }
                Record::Header { .. } | Record::Current => {}
            }
        }
    }

    /// Answers `op` from the view if it is a read the view serves (`GET`, `MGET`,
    /// `EXISTS`, `STRLEN`, `TYPE`) and meets no entry past its deadline; `None` otherwise,
    /// and the read goes to the store.
    pub fn read(&self, op: &Op) -> Option<Outcome> {
        let entries = self.entries.read();
        // Read once, and only if some entry has a deadline.
        let mut now = None;
        // `Err` for an entry past its deadline: the store decides (see the module).
        let mut live = |key: &[u8]| match entries.get(key) {
            Some(entry)
                if entry
                    .expires
                    .is_some_and(|deadline| deadline <= *now.get_or_insert_with(log::now_ms)) =>
            {
                Err(())
            }
            found => Ok(found),
        };
        Some(match op {
            Op::Get(key) => Outcome::Value(live(key).ok()?.map(|entry| entry.value.clone())),
            Op::GetMany(keys) => Outcome::Values(
                keys.iter()
                    .map(|key| Ok(live(key)?.map(|entry| entry.value.clone())))
                    .collect::<Result<_, ()>>()
                    .ok()?,
            ),
            Op::Exists(keys) => {
                let mut count = 0;
                for key in keys {
                    count += i64::from(live(key).ok()?.is_some());
                }
                Outcome::Count(count)
            }
            Op::Strlen(key) => {
                Outcome::Count(live(key).ok()?.map_or(0, |entry| entry.value.len() as i64))
            }
            Op::Type(key) => Outcome::Applied(live(key).ok()?.is_some()),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn set(key: &str, value: &str, expires: Option<u64>) -> Record {
        Record::Set {
            key: key.as_bytes().to_vec(),
            value: Bytes::from(value.as_bytes().to_vec()),
            expires,
        }
    }

    fn get(view: &View, key: &str) -> Option<Outcome> {
        view.read(&Op::Get(key.as_bytes().to_vec()))
    }

    fn value(value: &str) -> Option<Outcome> {
        Some(Outcome::Value(Some(Bytes::from(value.as_bytes().to_vec()))))
    }

    /// Published records apply in order; a read meeting an entry past its deadline is left to
    /// the store (which may have kept the key); writes and store-only reads are not answered
    /// here.
    #[test]
    fn published_records_apply_in_order_and_expired_entries_are_the_stores() {
        let view = View::default();
        assert_eq!(get(&view, "a"), Some(Outcome::Value(None)));
        let mut records = vec![
            set("a", "1", None),
            set("b", "2", None),
            Record::Del { key: b"b".to_vec() },
            set("c", "3", Some(1)),
            set("d", "4", None),
            Record::Expire {
                key: b"d".to_vec(),
                expires: Some(u64::MAX),
            },
        ];
        view.publish(&mut records);
        assert!(records.is_empty());
        assert_eq!(get(&view, "a"), value("1"));
        assert_eq!(get(&view, "b"), Some(Outcome::Value(None)));
        assert_eq!(
            get(&view, "c"),
            None,
            "past its deadline: the store's to answer"
        );
        assert_eq!(get(&view, "d"), value("4"));
        let keys = |names: &[&str]| names.iter().map(|name| name.as_bytes().to_vec()).collect();
        assert_eq!(
            view.read(&Op::Exists(keys(&["a", "a", "b", "d"]))),
            Some(Outcome::Count(3))
        );
        assert_eq!(view.read(&Op::Exists(keys(&["a", "c"]))), None);
        assert_eq!(view.read(&Op::GetMany(keys(&["a", "c"]))), None);
        assert_eq!(view.read(&Op::Type(b"c".to_vec())), None);
        assert_eq!(
            view.read(&Op::Strlen(b"a".to_vec())),
            Some(Outcome::Count(1))
        );
        view.publish(&mut vec![Record::Flush, set("e", "5", None)]);
        assert_eq!(get(&view, "a"), Some(Outcome::Value(None)));
        assert_eq!(get(&view, "e"), value("5"));
        assert_eq!(view.read(&Op::Del(keys(&["e"]))), None);
        assert_eq!(view.read(&Op::RandomKey), None);
    }
}
