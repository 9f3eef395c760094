//! The store's log: the records that rebuild its data, how they are framed, and how a log is
//! replayed, told apart from a torn tail, and salvaged.
//!
//! A log lives in a paged blob (every page checksummed by the runtime) named `log.<g>`, `g`
//! its generation. It starts with a `Header` naming its generation and holds one record per
//! change. A rewrite (compaction, repair, or the migration of a first-version log) writes
//! generation `g + 1` as a snapshot of the live data, then the records that arrived meanwhile,
//! then `Current`: from the moment `Current` is durable, `g + 1` is the store, and `g` is
//! removed. A generation without `Current` never served a write and is discarded on start.
//!
//! Framing: every record is `header_crc kind expires key_len value_len body_crc key value`
//! (CRCs and lengths `u32`, `expires` `u64`, little-endian), with CRC-32C over its header and
//! over its body. So:
//! - A record whose header validates but whose body runs past the end of the log is a torn
//!   tail: the bytes of a write a crash cut short, never acknowledged (an acknowledged
//!   record's bytes were all synced). Only such a tail is ever cut.
//! - A record that is all there but does not validate is damage, wherever it is: the replay
//!   stops with its offset and nothing is changed.
//! - A salvage scan finds the next record after damage by trying every offset: a false match
//!   needs two CRCs to agree by chance.

use super::shards::Shards;
use bytes::Bytes;
use runtime::buffer::paged::{crc32c, crc32c_extend};
use std::collections::BTreeSet;

/// The largest key or value a record may carry (Redis's default `proto-max-bulk-len` is
/// larger; the protocol decoder allows this much).
pub const MAX_FIELD: usize = crate::resp::MAX_BULK;

/// The bytes every record carries besides its key and value.
pub const OVERHEAD: usize = 4 + 1 + 8 + 4 + 4 + 4;

/// One change to the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// First in every log: its generation.
    Header {
        /// The generation this log holds.
        generation: u64,
    },
    /// `key` holds `value`, until `expires` (milliseconds since the Unix epoch) if set.
    Set {
        /// The key.
        key: Vec<u8>,
        /// Its value.
        value: Bytes,
        /// Its expiry, in milliseconds since the Unix epoch.
        expires: Option<u64>,
    },
    /// `key` is gone (deleted, or expired).
    Del {
        /// The key.
        key: Vec<u8>,
    },
    /// Every key is gone (`FLUSHALL`).
    Flush,
    /// `key`'s expiry is now `expires` (`EXPIRE`, `PERSIST`).
    Expire {
        /// The key.
        key: Vec<u8>,
        /// Its new expiry, in milliseconds since the Unix epoch (`None`: never).
        expires: Option<u64>,
    },
    /// This generation is the store: its rewrite is complete.
    Current,
}

const HEADER: u8 = 0x10;
const SET: u8 = 1;
const DEL: u8 = 2;
const FLUSH: u8 = 3;
const EXPIRE: u8 = 4;
const CURRENT: u8 = 0x11;

impl Record {
    /// Appends the record's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let none: &[u8] = &[];
        let (kind, expires, key, value) = match self {
            Record::Header { generation } => (HEADER, *generation, none, none),
            Record::Set {
                key,
                value,
                expires,
            } => (SET, expires.unwrap_or(0), &key[..], &value[..]),
            Record::Del { key } => (DEL, 0, &key[..], none),
            Record::Flush => (FLUSH, 0, none, none),
            Record::Expire { key, expires } => (EXPIRE, expires.unwrap_or(0), &key[..], none),
            Record::Current => (CURRENT, 0, none, none),
        };
        assert!(key.len() <= MAX_FIELD && value.len() <= MAX_FIELD);
        let mut header = [0; 17];
        header[0] = kind;
        header[1..9].copy_from_slice(&expires.to_le_bytes());
        header[9..13].copy_from_slice(&(key.len() as u32).to_le_bytes());
        header[13..17].copy_from_slice(&(value.len() as u32).to_le_bytes());
        out.reserve(OVERHEAD + key.len() + value.len());
        out.extend_from_slice(&crc32c(&header).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&body_crc(key, value).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }

    /// The record's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

fn body_crc(key: &[u8], value: &[u8]) -> u32 {
    crc32c_extend(crc32c(key), value)
}

/// What the bytes at an offset hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A whole record, and where the next starts.
    Whole(Record, usize),
    /// The start of a record whose header validates, cut short by the end of the bytes.
    Torn,
    /// No record: damage (or, in a salvage scan, not a record boundary).
    Invalid(&'static str),
}

/// Decodes the record at `at`.
pub fn decode(bytes: &[u8], at: usize) -> Decoded {
    let rest = &bytes[at.min(bytes.len())..];
    if rest.len() < 4 + 17 {
        return Decoded::Torn;
    }
    let header = &rest[4..21];
    if u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) != crc32c(header) {
        return Decoded::Invalid("a record header that fails its checksum");
    }
    let kind = header[0];
    let expires = u64::from_le_bytes(header[1..9].try_into().expect("8 bytes"));
    let key_len = u32::from_le_bytes(header[9..13].try_into().expect("4 bytes")) as usize;
    let value_len = u32::from_le_bytes(header[13..17].try_into().expect("4 bytes")) as usize;
    if key_len > MAX_FIELD || value_len > MAX_FIELD {
        return Decoded::Invalid("a record longer than any the store writes");
    }
    let end = OVERHEAD + key_len + value_len;
    if rest.len() < end {
        return Decoded::Torn;
    }
    let key = &rest[OVERHEAD..OVERHEAD + key_len];
    let value = &rest[OVERHEAD + key_len..end];
    if u32::from_le_bytes(rest[21..25].try_into().expect("4 bytes")) != body_crc(key, value) {
        return Decoded::Invalid("a record body that fails its checksum");
    }
    let expiry = (expires != 0).then_some(expires);
    let record = match kind {
        HEADER => Record::Header {
            generation: expires,
        },
        SET => Record::Set {
            key: key.to_vec(),
            value: Bytes::copy_from_slice(value),
            expires: expiry,
        },
        DEL => Record::Del { key: key.to_vec() },
        FLUSH => Record::Flush,
        EXPIRE => Record::Expire {
            key: key.to_vec(),
            expires: expiry,
        },
        CURRENT => Record::Current,
        _ => return Decoded::Invalid("a record of a kind the store does not write"),
    };
    Decoded::Whole(record, at + end)
}

/// A stored value and when it expires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Shared with the replies that carry it (a `GET` does not copy it).
    pub value: Bytes,
    /// Milliseconds since the Unix epoch.
    pub expires: Option<u64>,
}

/// The entries as a rewrite writes them: shared with the data, copied shard by shard only
/// as the data changes (see [`super::shards`]).
pub type Snapshot = Shards<Entry>;

/// The data a log rebuilds: the entries, and the expiring ones by deadline.
#[derive(Clone, Debug, Default)]
pub struct Data {
    entries: Shards<Entry>,
    deadlines: BTreeSet<(u64, Vec<u8>)>,
    /// Bytes the live entries would take as a snapshot's records.
    live: usize,
}

impl Data {
    /// Applies one change. `Header` and `Current` change nothing.
    pub fn apply(&mut self, record: Record) {
        match record {
            Record::Set {
                key,
                value,
                expires,
            } => self.insert(key, Entry { value, expires }),
            Record::Del { key } => {
                self.remove(&key);
            }
            Record::Flush => *self = Data::default(),
            Record::Expire { key, expires } => self.set_expiry(&key, expires),
            Record::Header { .. } | Record::Current => {}
        }
    }

    /// Puts `entry` at `key`, replacing what was there.
    pub fn insert(&mut self, key: Vec<u8>, entry: Entry) {
        // The replaced entry's deadline is looked up only if some key has one: a plain
        // overwrite costs one lookup.
        if !self.deadlines.is_empty() {
            self.remove(&key);
        }
        if let Some(deadline) = entry.expires {
            self.deadlines.insert((deadline, key.clone()));
        }
        let length = key.len();
        self.live += OVERHEAD + length + entry.value.len();
        if let Some(replaced) = self.entries.insert(key, entry) {
            self.live -= OVERHEAD + length + replaced.value.len();
        }
    }

    /// Removes `key`; its entry, if it had one.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        if let Some(deadline) = entry.expires {
            self.deadlines.remove(&(deadline, key.to_vec()));
        }
        self.live -= OVERHEAD + key.len() + entry.value.len();
        Some(entry)
    }

    /// Changes the expiry of `key`, if present.
    pub fn set_expiry(&mut self, key: &[u8], expires: Option<u64>) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        if let Some(deadline) = entry.expires {
            self.deadlines.remove(&(deadline, key.to_vec()));
        }
        if let Some(deadline) = expires {
            self.deadlines.insert((deadline, key.to_vec()));
        }
        entry.expires = expires;
    }

    /// The entry at `key`, as stored (expired or not).
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// The keys whose deadline is at or before `now`, soonest first, at most `limit`.
    pub fn expired(&self, now: u64, limit: usize) -> Vec<Vec<u8>> {
        self.deadlines
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .take(limit)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys with an expiry.
    pub fn expiring(&self) -> usize {
        self.deadlines.len()
    }

    /// Bytes a snapshot of the live entries takes.
    pub fn live_bytes(&self) -> usize {
        self.live
    }

    /// Every entry.
    pub fn entries(&self) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.entries.iter()
    }

    /// A page of a `SCAN` of the keys not expired at `now`: see [`Shards::scan`].
    pub fn scan(&self, cursor: u64, count: usize, now: u64) -> (u64, Vec<Vec<u8>>) {
        self.entries.scan(cursor, count, |entry| {
            entry.expires.is_none_or(|deadline| deadline > now)
        })
    }

    /// The `index`th entry, in a fixed order, found without a walk over every key.
    pub fn nth(&self, index: usize) -> Option<(&Vec<u8>, &Entry)> {
        self.entries.nth(index)
    }

    /// The entries as they are now, for a rewrite: costs a pointer per shard, not a copy of
    /// the keys (the data copies a shard when it next changes it).
    pub fn snapshot(&self) -> Snapshot {
        self.entries.clone()
    }
}

/// A replay that found damage: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The logical offset in the log (not counting page trailers).
    pub at: u64,
    /// What failed to verify there.
    pub what: String,
}

/// What a replay found.
#[derive(Debug, PartialEq, Eq)]
pub struct Replayed {
    /// Where the whole records end: a torn tail starts here.
    pub end: u64,
    /// The generation its header names, if it has one.
    pub generation: Option<u64>,
    /// Whether it holds `Current`.
    pub current: bool,
}

/// A replay fed the log in pieces, so a start holds the data and one piece, not the whole
/// log: records are applied as they come whole, and a record cut by the end of a piece
/// waits for the next.
#[derive(Debug, Default)]
pub struct Replayer {
    /// Bytes fed and not yet applied (from `at` on).
    buffer: Vec<u8>,
    at: usize,
    /// The log offset of `buffer[0]`.
    base: u64,
    generation: Option<u64>,
    current: bool,
}

impl Replayer {
    /// Applies every record that `bytes`, after what came before, completes. Damage stops
    /// it with an error, and `data` must then be discarded.
    pub fn feed(&mut self, bytes: &[u8], data: &mut Data) -> Result<(), Damage> {
        if self.at > 0 {
            self.buffer.drain(..self.at);
            self.base += self.at as u64;
            self.at = 0;
        }
        self.buffer.extend_from_slice(bytes);
        loop {
            let at = self.base + self.at as u64;
            match decode(&self.buffer, self.at) {
                Decoded::Whole(record, next) => {
                    match &record {
                        Record::Header { generation } if at == 0 => {
                            self.generation = Some(*generation);
                        }
                        Record::Header { .. } => {
                            return Err(Damage {
                                at,
                                what: "a log header in the middle of the log".into(),
                            });
                        }
                        Record::Current => self.current = true,
                        _ => {}
                    }
                    data.apply(record);
                    self.at = next;
                }
                Decoded::Torn => return Ok(()),
                Decoded::Invalid(what) => {
                    return Err(Damage {
                        at,
                        what: what.into(),
                    });
                }
            }
        }
    }

    /// The end of the log: what it found. Bytes after the last whole record are a torn
    /// tail.
    pub fn finish(self) -> Replayed {
        Replayed {
            end: self.base + self.at as u64,
            generation: self.generation,
            current: self.current,
        }
    }
}

/// Applies every record of `log` to `data`. A torn tail ends the replay (`end` says where);
/// damage stops it with an error, and `data` must then be discarded.
pub fn replay(log: &[u8], data: &mut Data) -> Result<Replayed, Damage> {
    let mut replayer = Replayer::default();
    replayer.feed(log, data)?;
    Ok(replayer.finish())
}

/// Applies every record that validates in `segments` (runs of verified bytes, in log order,
/// with damage between them), skipping what does not; the number of records kept, and
/// whether `Current` was among them.
pub fn salvage(segments: &[Vec<u8>], data: &mut Data) -> (usize, bool) {
    let (mut kept, mut current) = (0, false);
    for segment in segments {
        let mut at = 0;
        while at < segment.len() {
            match decode(segment, at) {
                Decoded::Whole(record, next) => {
                    current |= record == Record::Current;
                    data.apply(record);
                    kept += 1;
                    at = next;
                }
                Decoded::Torn | Decoded::Invalid(_) => at += 1,
            }
        }
    }
    (kept, current)
}

/// A first-version log (no header, no checksums of its own: kind, then key and value each
/// `u32` length-prefixed), replayed so it can be rewritten as a current one.
pub mod legacy {
    use super::{Data, Entry};

    /// Applies every whole record: where they end, or, if what follows them is not the
    /// start of a record cut short (a torn tail), where the record that does not parse
    /// starts.
    pub fn replay(log: &[u8], data: &mut Data) -> Result<usize, usize> {
        let mut at = 0;
        loop {
            match parse(log, at) {
                Parsed::Whole(kind, key, value, next) => {
                    match kind {
                        1 => data.insert(
                            key,
                            Entry {
                                value: value.into(),
                                expires: None,
                            },
                        ),
                        3 => *data = Data::default(),
                        _ => {
                            data.remove(&key);
                        }
                    }
                    at = next;
                }
                Parsed::Cut => return Ok(at),
                Parsed::Invalid => return Err(at),
            }
        }
    }

    enum Parsed {
        Whole(u8, Vec<u8>, Vec<u8>, usize),
        /// The log ends inside it (or at it).
        Cut,
        Invalid,
    }

    fn parse(log: &[u8], at: usize) -> Parsed {
        let Some(&kind) = log.get(at) else {
            return Parsed::Cut;
        };
        if !matches!(kind, 1..=3) {
            return Parsed::Invalid;
        }
        let field = |at: usize| -> Result<(Vec<u8>, usize), Parsed> {
            let Some(len) = log.get(at..at + 4) else {
                return Err(Parsed::Cut);
            };
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            if len > super::MAX_FIELD {
                return Err(Parsed::Invalid);
            }
            match log.get(at + 4..at + 4 + len) {
                Some(bytes) => Ok((bytes.to_vec(), at + 4 + len)),
                None => Err(Parsed::Cut),
            }
        };
        let (key, next) = match field(at + 1) {
            Ok(field) => field,
            Err(parsed) => return parsed,
        };
        let (value, next) = match field(next) {
            Ok(field) => field,
            Err(parsed) => return parsed,
        };
        Parsed::Whole(kind, key, value, next)
    }
}

/// Milliseconds since the Unix epoch, by the wall clock (expiry deadlines are absolute, so a
/// key that expired while the store was down is gone when it starts).
pub fn now_ms() -> u64 {
    // The runtime's clock: virtual in a deterministic run, so expiry replays with the seed.
    runtime::clock::system_now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> Record {
        Record::Set {
            key: key.into(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            expires: None,
        }
    }

    #[test]
    fn every_record_round_trips() {
        let records = [
            Record::Header { generation: 7 },
            set("a", "1"),
            Record::Set {
                key: b"k".to_vec(),
                value: vec![0, 255, 13, 10].into(),
                expires: Some(1_700_000_000_000),
            },
            Record::Del { key: b"a".to_vec() },
            Record::Flush,
            Record::Expire {
                key: b"k".to_vec(),
                expires: None,
            },
            Record::Current,
        ];
        let mut log = Vec::new();
        for record in &records {
            record.encode(&mut log);
        }
        let mut at = 0;
        for record in &records {
            match decode(&log, at) {
                Decoded::Whole(decoded, next) => {
                    assert_eq!(&decoded, record);
                    at = next;
                }
                other => panic!("{other:?} at {at}"),
            }
        }
        assert_eq!(at, log.len());
    }

    #[test]
    fn a_cut_record_is_torn_and_a_changed_byte_is_damage() {
        let mut log = Record::Header { generation: 1 }.bytes();
        set("a", "1").encode(&mut log);
        let whole = log.len();
        set("b", "two words").encode(&mut log);
        // Cut anywhere inside the last record: a torn tail, cut at the last whole record.
        for cut in whole..log.len() {
            let mut data = Data::default();
            let replayed = replay(&log[..cut], &mut data).unwrap();
            assert_eq!(replayed.end, whole as u64, "cut at {cut}");
            assert_eq!(data.len(), 1);
        }
        // Any byte changed anywhere, the last record included: damage at its record.
        for byte in 0..log.len() {
            let mut damaged = log.clone();
            damaged[byte] ^= 0x20;
            let error = replay(&damaged, &mut Data::default()).unwrap_err();
            let record_start = if byte < 25 {
                0
            } else if byte < whole {
                25
            } else {
                whole
            };
            assert_eq!(error.at, record_start as u64, "byte {byte}: {error:?}");
        }
    }

    #[test]
    fn replay_applies_sets_deletes_flushes_and_expiries() {
        let mut log = Record::Header { generation: 3 }.bytes();
        for record in [
            set("a", "1"),
            set("b", "2"),
            Record::Del { key: b"a".to_vec() },
            Record::Expire {
                key: b"b".to_vec(),
                expires: Some(10),
            },
            Record::Current,
        ] {
            record.encode(&mut log);
        }
        let mut data = Data::default();
        let replayed = replay(&log, &mut data).unwrap();
        assert_eq!(
            replayed,
            Replayed {
                end: log.len() as u64,
                generation: Some(3),
                current: true
            }
        );
        assert_eq!(data.len(), 1);
        assert_eq!(data.get(b"b").unwrap().expires, Some(10));
        assert_eq!(data.expired(9, 10), Vec::<Vec<u8>>::new());
        assert_eq!(data.expired(10, 10), vec![b"b".to_vec()]);
        Record::Flush.encode(&mut log);
        let mut data = Data::default();
        replay(&log, &mut data).unwrap();
        assert!(data.is_empty());
        assert_eq!(data.live_bytes(), 0);
    }

    /// Fed in pieces of every size, a replay applies the same records, finds the same end
    /// and reports damage at the same offset as fed at once.
    #[test]
    fn a_replay_fed_in_pieces_is_the_replay_fed_at_once() {
        let mut log = Record::Header { generation: 2 }.bytes();
        for index in 0..20 {
            set(&format!("k{index}"), &"v".repeat(index * 7)).encode(&mut log);
        }
        Record::Del {
            key: b"k3".to_vec(),
        }
        .encode(&mut log);
        let whole = log.len();
        log.extend_from_slice(&set("torn", "tail").bytes()[..30]);
        let mut damaged = log.clone();
        damaged[whole / 2] ^= 1;
        let at_once = replay(&damaged, &mut Data::default()).unwrap_err();
        for piece in [1, 2, 7, 25, 100, log.len()] {
            let mut data = Data::default();
            let mut replayer = Replayer::default();
            for chunk in log.chunks(piece) {
                replayer.feed(chunk, &mut data).unwrap();
            }
            assert_eq!(replayer.finish().end, whole as u64, "pieces of {piece}");
            assert_eq!(data.len(), 19);
            let mut replayer = Replayer::default();
            let error = damaged
                .chunks(piece)
                .find_map(|chunk| replayer.feed(chunk, &mut Data::default()).err())
                .unwrap();
            assert_eq!(error, at_once, "pieces of {piece}");
        }
    }

    #[test]
    fn salvage_keeps_what_validates_on_both_sides_of_damage() {
        let mut before = Record::Header { generation: 1 }.bytes();
        set("a", "1").encode(&mut before);
        set("lost", "x").encode(&mut before);
        // The second segment starts inside a record (its start was in a damaged page).
        let mut after = set("cut", "y").bytes()[7..].to_vec();
        set("b", "2").encode(&mut after);
        Record::Del { key: b"a".to_vec() }.encode(&mut after);
        before.truncate(before.len() - 3);
        let mut data = Data::default();
        assert_eq!(salvage(&[before, after], &mut data), (4, false));
        assert_eq!(data.len(), 1, "a deleted after the damage, b set");
        assert_eq!(data.get(b"b").unwrap().value, &b"2"[..]);
    }

    #[test]
    fn live_bytes_follow_inserts_overwrites_and_removals() {
        let mut data = Data::default();
        data.apply(set("a", "12345"));
        assert_eq!(data.live_bytes(), OVERHEAD + 6);
        data.apply(set("a", "1"));
        assert_eq!(data.live_bytes(), OVERHEAD + 2);
        data.apply(Record::Del { key: b"a".to_vec() });
        assert_eq!(data.live_bytes(), 0);
    }

    #[test]
    fn a_first_version_log_replays() {
        let old = |kind: u8, key: &[u8], value: &[u8]| {
            let mut record = vec![kind];
            record.extend((key.len() as u32).to_le_bytes());
            record.extend(key);
            record.extend((value.len() as u32).to_le_bytes());
            record.extend(value);
            record
        };
        let mut log = old(1, b"a", b"1");
        log.extend(old(1, b"b", b"2"));
        log.extend(old(2, b"a", b""));
        let whole = log.len();
        log.extend(&old(1, b"c", b"3")[..5]);
        let mut data = Data::default();
        assert_eq!(legacy::replay(&log, &mut data), Ok(whole));
        assert_eq!(data.len(), 1);
        assert_eq!(data.get(b"b").unwrap().value, &b"2"[..]);
        // A record that does not parse in the middle is damage, not a tail.
        let mut damaged = log.clone();
        let start = old(1, b"a", b"1").len() + old(1, b"b", b"2").len();
        damaged[start] = 9;
        assert_eq!(legacy::replay(&damaged, &mut Data::default()), Err(start));
    }
}
