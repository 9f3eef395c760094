//! [`Disk`]: the storage of a deterministic run, a pure data structure that knows what a
//! reader sees, what is durable, and what a crash keeps.
//!
//! A disk holds partitions, each a directory of entries naming inodes (a blob's bytes). An
//! inode has a durable image and a log of pending mutations (writes with their bytes, resizes)
//! in issue order; a reader sees the durable image with every pending mutation applied. The
//! storage layer above (`storage/memory`) issues a mutation at an operation's first poll and
//! completes it later ([`Disk::complete`]), as the ring would.
//!
//! The fault model, the native contract of `storage` made adversarial:
//! - `sync` makes durable the mutations that had completed when it was issued (a cut of the
//!   completions, taken at issue, applied at completion), and the directory entries leading
//!   to the blob. A mutation still in flight when the sync is issued is not covered (on the
//!   ring, a write and an fsync in flight together run in any order): it stays pending until
//!   a sync issued after it completed (the simulated blob completes one whose future is
//!   dropped at the drop, as the ring runs it to its end).
//! - A `SYNC` write is durable once it completes ([`Disk::make_durable`]), with its entries.
//! - A durable mutation behind one that is not (a sync retires completed mutations in any
//!   order; a `SYNC` write may complete before earlier writes) is kept whole by a crash, and
//!   replayed in its place in the log, so earlier and later pending mutations keep their
//!   order around it.
//! - [`Disk::crash`] replays every pending mutation in issue order over the durable image,
//!   each not durable drawn from the seed: a resize survives or not; a write is lost, kept
//!   whole, or torn, and a torn write keeps a strict prefix, an arbitrary subset of its 512-byte
//!   sectors (a later write may survive where an earlier one did not: the kernel writes pages
//!   back in any order) or an arbitrary subset of its bytes (commonware's model, below the
//!   sector atomicity disks usually give). The length a write would have grown the blob to
//!   survives independently of its bytes (an extent allocated but never written reads as
//!   zeros), and covers every byte of it that survived.
//! - A directory entry (a blob, or a partition) created and never made durable may vanish;
//!   a removal is made at its call and durable when it completes ([`Disk::removed`]): a crash
//!   in between may bring the removed entry back.
//! - A crash ends an epoch: handles of an earlier epoch ([`Disk::is_current`]) are stale, and
//!   a crashed disk is frozen (no operation at all) until [`Disk::thaw`] makes it the disk the
//!   next incarnation starts from.
//!
//! Invariants:
//! - `live` of an inode is always `durable` with `pending` applied in order; `pending` is in
//!   increasing sequence order, and every sequence number is below `next_seq`.
//! - A pending mutation's completion stamp is set once, when it completes, and is below
//!   `next_done`; a durable one (`forced`) has completed, and `pending` never starts with
//!   one (it is moved into `durable` at once).
//! - An inode's `link` names the entry that refers to it, if one does; an inode no entry
//!   refers to (removed, or created beside and vanished) is dropped by the next crash.
//! - Everything is ordered (`BTreeMap`, logs in issue order), so a crash draws the same
//!   values from the same generator in the same order for two runs of a seed.

use super::Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The unit a disk writes atomically, as torn writes keep or lose it.
pub(crate) const SECTOR: u64 = 512;

/// Disk numbers, unique in this process: a blob's identity is (disk, inode), so two runs on
/// two threads never share one.
static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// Why an operation on a [`Disk`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DiskError {
    /// The partition does not exist.
    PartitionMissing,
    /// The blob does not exist.
    BlobMissing,
    /// A read reaches past the blob's end, which is given.
    TooShort(u64),
    /// The name is taken (a create that must not open an existing blob).
    Exists,
}

/// The storage of one deterministic run (see the module).
#[derive(Clone)]
pub(crate) struct Disk {
    device: u64,
    epoch: u64,
    frozen: bool,
    next_inode: u64,
    next_seq: u64,
    /// The clock of completions: a cut is a reading of it.
    next_done: u64,
    next_token: u64,
    partitions: BTreeMap<String, Partition>,
    inodes: BTreeMap<u64, Inode>,
    /// Removals made but not yet durable, by token.
    unlinked: BTreeMap<u64, Unlinked>,
}

/// Shows the disk's place and size, not its bytes.
impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk")
            .field("device", &self.device)
            .field("epoch", &self.epoch)
            .field("frozen", &self.frozen)
            .field("partitions", &self.partitions.len())
            .field("inodes", &self.inodes.len())
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Default)]
struct Partition {
    /// Whether the partition's own entry is durable.
    durable: bool,
    entries: BTreeMap<String, Entry>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    inode: u64,
    durable: bool,
}

#[derive(Clone, Debug, Default)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// The entry (partition, file name) that refers to this inode.
    link: Option<(String, String)>,
}

#[derive(Clone, Debug)]
struct Pending {
    seq: u64,
    /// When the operation completed (a reading of `next_done`), if it has.
    done: Option<u64>,
    /// Durable (a `SYNC` write that completed, or covered by a sync) behind a mutation that
    /// is not: a crash keeps it whole.
    forced: bool,
    mutation: Mutation,
}

#[derive(Clone, Debug)]
enum Mutation {
    Write { offset: u64, bytes: Vec<u8> },
    Resize(u64),
}

/// A durable entry removed by a removal that is not durable yet.
#[derive(Clone, Debug)]
enum Unlinked {
    Blob {
        partition: String,
        name: String,
        inode: u64,
    },
    Partition {
        name: String,
        partition: Partition,
    },
}

impl Default for Disk {
    fn default() -> Self {
        Self {
            device: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
            epoch: 0,
            frozen: false,
            next_inode: 1,
            next_seq: 0,
            next_done: 0,
            next_token: 0,
            partitions: BTreeMap::new(),
            inodes: BTreeMap::new(),
            unlinked: BTreeMap::new(),
        }
    }
}

/// Writes `bytes` at `offset` into `image`, zero-extending it as needed.
fn put(image: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = offset as usize;
    let end = start + bytes.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(bytes);
}

fn apply(image: &mut Vec<u8>, mutation: &Mutation) {
    match mutation {
        Mutation::Write { offset, bytes } => put(image, *offset, bytes),
        Mutation::Resize(len) => image.resize(*len as usize, 0),
    }
}

/// Which bytes of a write of `len` bytes at `offset` a tear keeps: a strict prefix, a subset
/// of its sectors, or a subset of its bytes, drawn from `rng`.
fn torn(rng: &mut Rng, offset: u64, len: usize) -> Vec<bool> {
    let mut keep = vec![false; len];
    match rng.below(3) {
        0 => {
            let prefix = 1 + rng.below(len.saturating_sub(1) as u64) as usize;
            keep[..prefix.min(len)].fill(true);
        }
        1 => {
            let mut at = 0usize;
            while at < len {
                // The sector boundaries are the disk's, not the write's.
                let sector_end = ((offset + at as u64) / SECTOR + 1) * SECTOR;
                let end = ((sector_end - offset) as usize).min(len);
                let kept = rng.below(2) == 1;
                keep[at..end].fill(kept);
                at = end;
            }
        }
        _ => {
            for chunk in keep.chunks_mut(64) {
                let bits = rng.next_u64();
                for (index, byte) in chunk.iter_mut().enumerate() {
                    *byte = bits >> index & 1 == 1;
                }
            }
        }
    }
    keep
}

impl Inode {
    /// The image a crash leaves: the durable one with what survives of `pending` replayed.
    fn survivor(&self, rng: &mut Rng) -> Vec<u8> {
        let mut image = self.durable.clone();
        for pending in &self.pending {
            match &pending.mutation {
                Mutation::Resize(len) => {
                    if pending.forced || rng.below(2) == 1 {
                        image.resize(*len as usize, 0);
                    }
                }
                Mutation::Write { offset, bytes } => {
                    let keep = if pending.forced {
                        vec![true; bytes.len()]
                    } else {
                        match rng.below(3) {
                            1 => vec![true; bytes.len()],
                            2 if bytes.len() > 1 => torn(rng, *offset, bytes.len()),
                            // A byte cannot tear: it is lost.
                            _ => vec![false; bytes.len()],
                        }
                    };
                    let mut at = 0;
                    while at < bytes.len() {
                        if !keep[at] {
                            at += 1;
                            continue;
                        }
                        let run = keep[at..].iter().take_while(|&&kept| kept).count();
                        put(&mut image, offset + at as u64, &bytes[at..at + run]);
                        at += run;
                    }
                    let all = keep.iter().all(|&kept| kept);
                    // The length the write grew the blob to: metadata, written apart from
                    // the bytes.
                    let end = (*offset as usize) + bytes.len();
                    if !all && image.len() < end && rng.below(2) == 1 {
                        image.resize(end, 0);
                    }
                }
            }
        }
        image
    }
}

impl Disk {
    /// A fresh, empty disk.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The disk's number, unique in this process.
    pub(crate) fn device(&self) -> u64 {
        self.device
    }

    /// The epoch handles opened now belong to: it changes with every crash.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether a handle of `epoch` may still operate: the disk has not crashed since.
    pub(crate) fn is_current(&self, epoch: u64) -> bool {
        !self.frozen && epoch == self.epoch
    }

    /// Whether the disk crashed and is not yet the next incarnation's.
    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Makes a crashed disk the one the next incarnation starts from.
    pub(crate) fn thaw(&mut self) {
        self.frozen = false;
    }

    fn inode(&self, inode: u64) -> &Inode {
        self.inodes.get(&inode).expect("a handle's inode lives")
    }

    fn inode_mut(&mut self, inode: u64) -> &mut Inode {
        self.inodes.get_mut(&inode).expect("a handle's inode lives")
    }

    fn create(&mut self, partition: &str, name: &str) -> u64 {
        let inode = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(
            inode,
            Inode {
                link: Some((partition.to_owned(), name.to_owned())),
                ..Inode::default()
            },
        );
        self.partitions
            .get_mut(partition)
            .expect("created in a partition that exists")
            .entries
            .insert(
                name.to_owned(),
                Entry {
                    inode,
                    durable: false,
                },
            );
        inode
    }

    /// Opens the blob `name` of `partition`, creating both if needed: its inode and length.
    pub(crate) fn open(&mut self, partition: &str, name: &str) -> (u64, u64) {
        let entries = &mut self.partitions.entry(partition.to_owned()).or_default();
        if let Some(entry) = entries.entries.get(name) {
            let inode = entry.inode;
            return (inode, self.inode(inode).live.len() as u64);
        }
        (self.create(partition, name), 0)
    }

    /// Creates the blob `name` of an existing `partition`, refusing a name that is taken.
    pub(crate) fn create_new(&mut self, partition: &str, name: &str) -> Result<u64, DiskError> {
        let existing = self
            .partitions
            .get(partition)
            .ok_or(DiskError::PartitionMissing)?;
        if existing.entries.contains_key(name) {
            return Err(DiskError::Exists);
        }
        Ok(self.create(partition, name))
    }

    /// Removes the blob `name` of `partition` now; durable once [`removed`](Self::removed)
    /// is told the returned token.
    pub(crate) fn remove_blob(&mut self, partition: &str, name: &str) -> Result<u64, DiskError> {
        let entry = self
            .partitions
            .get_mut(partition)
            .and_then(|existing| existing.entries.remove(name))
            .ok_or(DiskError::BlobMissing)?;
        self.inode_mut(entry.inode).link = None;
        let token = self.next_token;
        self.next_token += 1;
        if entry.durable {
            self.unlinked.insert(
                token,
                Unlinked::Blob {
                    partition: partition.to_owned(),
                    name: name.to_owned(),
                    inode: entry.inode,
                },
            );
        }
        Ok(token)
    }

    /// Removes `partition` and its blobs now; durable once [`removed`](Self::removed) is told
    /// the returned token.
    pub(crate) fn remove_partition(&mut self, partition: &str) -> Result<u64, DiskError> {
        let mut removed = self
            .partitions
            .remove(partition)
            .ok_or(DiskError::PartitionMissing)?;
        for entry in removed.entries.values() {
            self.inode_mut(entry.inode).link = None;
        }
        let token = self.next_token;
        self.next_token += 1;
        if removed.durable {
            removed.entries.retain(|_, entry| entry.durable);
            self.unlinked.insert(
                token,
                Unlinked::Partition {
                    name: partition.to_owned(),
                    partition: removed,
                },
            );
        }
        Ok(token)
    }

    /// The removal of `token` is durable.
    pub(crate) fn removed(&mut self, token: u64) {
        self.unlinked.remove(&token);
    }

    /// The file names in `partition`, sorted.
    pub(crate) fn scan(&self, partition: &str) -> Result<Vec<String>, DiskError> {
        let existing = self
            .partitions
            .get(partition)
            .ok_or(DiskError::PartitionMissing)?;
        Ok(existing.entries.keys().cloned().collect())
    }

    /// The length a reader sees.
    pub(crate) fn len(&self, inode: u64) -> u64 {
        self.inode(inode).live.len() as u64
    }

    /// The `len` bytes at `offset` a reader sees.
    pub(crate) fn read(&self, inode: u64, offset: u64, len: usize) -> Result<Vec<u8>, DiskError> {
        let live = &self.inode(inode).live;
        let end = offset.saturating_add(len as u64);
        if end > live.len() as u64 {
            return Err(DiskError::TooShort(live.len() as u64));
        }
        Ok(live[offset as usize..end as usize].to_vec())
    }

    fn issue(&mut self, inode: u64, mutation: Mutation) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let inode = self.inode_mut(inode);
        apply(&mut inode.live, &mutation);
        inode.pending.push(Pending {
            seq,
            done: None,
            forced: false,
            mutation,
        });
        seq
    }

    /// Issues a write: seen by readers at once; once [`complete`](Self::complete) is told the
    /// returned sequence number, durable with a sync issued after that (or, for a `SYNC`
    /// write, with [`make_durable`](Self::make_durable) of it).
    pub(crate) fn write(&mut self, inode: u64, offset: u64, bytes: &[u8]) -> u64 {
        self.issue(
            inode,
            Mutation::Write {
                offset,
                bytes: bytes.to_vec(),
            },
        )
    }

    /// Issues a resize (cutting or zero-extending): like a write, durable with a sync issued
    /// after it [completed](Self::complete).
    pub(crate) fn resize(&mut self, inode: u64, len: u64) -> u64 {
        self.issue(inode, Mutation::Resize(len))
    }

    /// The cut a sync issued now takes: every mutation completed before it.
    pub(crate) fn cut(&self) -> u64 {
        self.next_done
    }

    /// The operation of mutation `seq` of `inode` completed: a sync issued from now on covers
    /// it.
    pub(crate) fn complete(&mut self, inode: u64, seq: u64) {
        let stamp = self.next_done;
        if let Some(pending) = self
            .inode_mut(inode)
            .pending
            .iter_mut()
            .find(|pending| pending.seq == seq && pending.done.is_none())
        {
            pending.done = Some(stamp);
            self.next_done += 1;
        }
    }

    /// Moves the durable mutations at the head of `inode`'s log into its durable image.
    fn retire(&mut self, inode: u64) {
        let Inode {
            durable, pending, ..
        } = self.inode_mut(inode);
        let settled = pending.iter().take_while(|p| p.forced).count();
        for retired in pending.drain(..settled) {
            apply(durable, &retired.mutation);
        }
    }

    /// Makes the entries leading to `inode` durable.
    fn settle_link(&mut self, inode: u64) {
        if let Some((partition, name)) = self.inode(inode).link.clone()
            && let Some(existing) = self.partitions.get_mut(&partition)
        {
            existing.durable = true;
            if let Some(entry) = existing.entries.get_mut(&name) {
                entry.durable = true;
            }
        }
    }

    /// A sync of `inode` taken at `cut` completed: the mutations completed before the cut are
    /// durable, whatever their place in the log, and so are the entries leading to the blob.
    /// Those still in flight at the cut stay pending, drawn by a crash.
    pub(crate) fn sync(&mut self, inode: u64, cut: u64) {
        for pending in &mut self.inode_mut(inode).pending {
            if pending.done.is_some_and(|done| done < cut) {
                pending.forced = true;
            }
        }
        self.retire(inode);
        self.settle_link(inode);
    }

    /// The `SYNC` write `seq` of `inode` completed: a crash keeps it, and its entries.
    pub(crate) fn make_durable(&mut self, inode: u64, seq: u64) {
        self.complete(inode, seq);
        if let Some(pending) = self
            .inode_mut(inode)
            .pending
            .iter_mut()
            .find(|pending| pending.seq == seq)
        {
            pending.forced = true;
        }
        self.retire(inode);
        self.settle_link(inode);
    }

    /// The power fails: applies the fault model (see the module) with `rng`, ends the epoch
    /// and freezes the disk. Returns a digest of what survived.
    pub(crate) fn crash(&mut self, rng: &mut Rng) -> u64 {
        // Removals not yet durable may be undone, where the name is still free.
        for (_, unlinked) in std::mem::take(&mut self.unlinked) {
            if rng.below(2) == 0 {
                continue;
            }
            match unlinked {
                Unlinked::Blob {
                    partition,
                    name,
                    inode,
                } => {
                    if let Some(existing) = self.partitions.get_mut(&partition)
                        && !existing.entries.contains_key(&name)
                    {
                        existing.durable = true;
                        existing.entries.insert(
                            name,
                            Entry {
                                inode,
                                durable: true,
                            },
                        );
                    }
                }
                Unlinked::Partition { name, partition } => {
                    self.partitions.entry(name).or_insert(partition);
                }
            }
        }
        // Entries never made durable may vanish.
        let mut partitions = std::mem::take(&mut self.partitions);
        partitions.retain(|_, existing| existing.durable || rng.below(2) == 1);
        for existing in partitions.values_mut() {
            existing.durable = true;
            existing
                .entries
                .retain(|_, entry| entry.durable || rng.below(2) == 1);
            for entry in existing.entries.values_mut() {
                entry.durable = true;
            }
        }
        // Each surviving blob keeps its durable image and what survives of its pending log;
        // an inode no entry names is gone.
        let mut inodes = BTreeMap::new();
        for (name, existing) in &partitions {
            for (file, entry) in &existing.entries {
                let image = self.inode(entry.inode).survivor(rng);
                inodes.insert(
                    entry.inode,
                    Inode {
                        live: image.clone(),
                        durable: image,
                        pending: Vec::new(),
                        link: Some((name.clone(), file.clone())),
                    },
                );
            }
        }
        self.partitions = partitions;
        self.inodes = inodes;
        self.epoch += 1;
        self.frozen = true;
        self.digest()
    }

    /// A digest of the durable image: every partition, entry and durable byte, in order.
    pub(crate) fn digest(&self) -> u64 {
        let mut hasher = super::Auditor::default();
        for (name, existing) in &self.partitions {
            hasher.record(
                "partition",
                &[name.as_bytes(), &[u8::from(existing.durable)]],
            );
            for (file, entry) in &existing.entries {
                let durable = &self.inode(entry.inode).durable;
                hasher.record(
                    "entry",
                    &[file.as_bytes(), &[u8::from(entry.durable)], durable],
                );
            }
        }
        hasher.digest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `0..n`, or a fifth of it under Miri, which interprets every draw of every crash: the
    /// outcomes a test asks for still occur within the first fifth of its seeds.
    fn seeds(n: u64) -> std::ops::Range<u64> {
        0..if cfg!(miri) { n / 5 } else { n }
    }

    /// A disk with the blob `p/b` holding `durable`, synced.
    fn synced(durable: &[u8]) -> (Disk, u64) {
        let mut disk = Disk::new();
        let (inode, _) = disk.open("p", "b");
        written(&mut disk, inode, 0, durable);
        disk.sync(inode, disk.cut());
        (disk, inode)
    }

    /// Writes `bytes` at `offset`, and completes the write.
    fn written(disk: &mut Disk, inode: u64, offset: u64, bytes: &[u8]) -> u64 {
        let seq = disk.write(inode, offset, bytes);
        disk.complete(inode, seq);
        seq
    }

    /// The images crashes with seeds `0..seeds` leave.
    fn outcomes(disk: &Disk, seeds: u64) -> std::collections::BTreeSet<Vec<u8>> {
        (0..seeds)
            .map(|seed| bytes(&mut after_crash(disk.clone(), seed)).unwrap())
            .collect()
    }

    fn after_crash(mut disk: Disk, seed: u64) -> Disk {
        disk.crash(&mut Rng::seeded(seed));
        disk.thaw();
        disk
    }

    fn bytes(disk: &mut Disk) -> Option<Vec<u8>> {
        let files = disk.scan("p").ok()?;
        files.contains(&"b".to_owned()).then(|| {
            let (inode, len) = disk.open("p", "b");
            disk.read(inode, 0, len as usize).unwrap()
        })
    }

    #[test]
    fn readers_see_pending_mutations_and_a_sync_makes_them_durable() {
        let (mut disk, inode) = synced(b"hello");
        written(&mut disk, inode, 5, b" world");
        assert_eq!(disk.read(inode, 0, 11).unwrap(), b"hello world");
        assert_eq!(disk.read(inode, 6, 6), Err(DiskError::TooShort(11)));
        let seq = disk.resize(inode, 4);
        disk.complete(inode, seq);
        assert_eq!(disk.len(inode), 4);
        disk.sync(inode, disk.cut());
        for seed in seeds(50) {
            assert_eq!(
                bytes(&mut after_crash(disk.clone(), seed)).unwrap(),
                b"hell"
            );
        }
    }

    #[test]
    fn a_sync_covers_only_what_was_issued_before_it() {
        let (mut disk, inode) = synced(b"");
        let cut = disk.cut();
        disk.write(inode, 0, &[7; 100]);
        disk.sync(inode, cut);
        let outcomes: std::collections::BTreeSet<_> = seeds(100)
            .map(|seed| bytes(&mut after_crash(disk.clone(), seed)).unwrap())
            .collect();
        assert!(outcomes.contains(&Vec::new()), "the write may be lost");
        assert!(outcomes.contains(&vec![7; 100]), "or kept");
    }

    #[test]
    fn a_sync_covers_only_what_completed_before_it_was_issued() {
        let (mut disk, inode) = synced(&[0; 10]);
        // In flight when the sync is issued, completed before it completes.
        let early = disk.write(inode, 0, &[1; 5]);
        // Issued after `early`, completed before the sync is issued.
        written(&mut disk, inode, 5, &[2; 5]);
        let cut = disk.cut();
        disk.complete(inode, early);
        disk.sync(inode, cut);
        let images = outcomes(&disk, 200);
        // The completed write is durable, though an earlier one is still pending: it survives
        // whole whatever becomes of the one in flight.
        assert!(
            images.iter().all(|image| image[5..] == [2; 5]),
            "{images:?}"
        );
        assert!(
            images.contains(&[[0; 5], [2; 5]].concat()),
            "the early one may be lost"
        );
        assert!(images.contains(&[[1; 5], [2; 5]].concat()), "or kept");
        // A sync issued after it completed covers it; the log is retired in order.
        disk.sync(inode, disk.cut());
        assert_eq!(outcomes(&disk, 50), [[[1; 5], [2; 5]].concat()].into());
        assert_eq!(disk.read(inode, 0, 10).unwrap(), [[1; 5], [2; 5]].concat());

        // A resize in flight when a sync is issued is not covered by it either, and a write
        // behind it that completed is, in its place: its bytes survive over the old ones.
        let (mut disk, inode) = synced(&[0; 10]);
        let resize = disk.resize(inode, 4);
        written(&mut disk, inode, 2, &[3; 4]);
        disk.sync(inode, disk.cut());
        disk.complete(inode, resize);
        let images = outcomes(&disk, 200);
        assert!(
            images.contains([0, 0, 3, 3, 3, 3, 0, 0, 0, 0].as_slice()),
            "the resize may be lost"
        );
        assert!(images.contains([0, 0, 3, 3, 3, 3].as_slice()), "or kept");
        assert!(
            images.iter().all(|image| image[2..6] == [3; 4]),
            "{images:?}"
        );
        disk.sync(inode, disk.cut());
        assert_eq!(outcomes(&disk, 50), [vec![0, 0, 3, 3, 3, 3]].into());
    }

    #[test]
    fn unsynced_writes_are_lost_kept_or_torn_and_synced_ones_always_survive() {
        let (mut disk, inode) = synced(&[1; 2048]);
        disk.write(inode, 100, &[2; 1500]);
        let (mut lost, mut kept, mut prefix, mut reordered) = (0, 0, 0, 0);
        for seed in seeds(300) {
            let image = bytes(&mut after_crash(disk.clone(), seed)).unwrap();
            assert_eq!(image.len(), 2048);
            assert!(image[..100].iter().chain(&image[1600..]).all(|&b| b == 1));
            let middle = &image[100..1600];
            let new = middle.iter().take_while(|&&b| b == 2).count();
            if middle.iter().all(|&b| b == 1) {
                lost += 1;
            } else if new == 1500 {
                kept += 1;
            } else if middle[new..].iter().all(|&b| b == 1) {
                prefix += 1;
            } else {
                reordered += 1;
            }
        }
        assert!(lost > 0 && kept > 0 && prefix > 0 && reordered > 0);
    }

    #[test]
    fn a_completed_sync_write_survives_in_its_place_in_the_log() {
        let (mut disk, inode) = synced(&[0; 10]);
        disk.write(inode, 0, &[1; 10]);
        let seq = disk.write(inode, 0, &[2; 10]);
        disk.make_durable(inode, seq);
        disk.write(inode, 0, &[3; 10]);
        for seed in seeds(100) {
            let image = bytes(&mut after_crash(disk.clone(), seed)).unwrap();
            // The durable write is never undone by the older one.
            assert!(image.iter().all(|&b| b == 2 || b == 3), "{image:?}");
        }
    }

    #[test]
    fn growth_survives_apart_from_the_bytes() {
        let (mut disk, inode) = synced(b"");
        disk.write(inode, 0, &[5; 1024]);
        let zeros = seeds(200).any(|seed| {
            let image = bytes(&mut after_crash(disk.clone(), seed)).unwrap();
            image.len() == 1024 && image.iter().all(|&b| b == 0)
        });
        assert!(zeros, "an extent may survive without its bytes");
    }

    #[test]
    fn entries_never_synced_may_vanish_and_synced_ones_stay() {
        let mut disk = Disk::new();
        let (inode, _) = disk.open("p", "b");
        disk.write(inode, 0, b"x");
        let (other, _) = disk.open("p", "c");
        disk.sync(other, disk.cut());
        let mut vanished = false;
        let mut stayed = false;
        for seed in seeds(100) {
            let crashed = after_crash(disk.clone(), seed);
            let files = crashed.scan("p").unwrap();
            assert!(files.contains(&"c".to_owned()));
            vanished |= !files.contains(&"b".to_owned());
            stayed |= files.contains(&"b".to_owned());
        }
        assert!(vanished && stayed);
        // A partition never synced may vanish whole.
        let mut disk = Disk::new();
        disk.open("q", "b");
        let gone = seeds(100).any(|seed| after_crash(disk.clone(), seed).scan("q").is_err());
        assert!(gone);
    }

    #[test]
    fn a_removal_is_durable_when_it_completes_and_may_be_undone_before() {
        let (mut disk, _) = synced(b"kept");
        let token = disk.remove_blob("p", "b").unwrap();
        assert_eq!(disk.remove_blob("p", "b"), Err(DiskError::BlobMissing));
        assert_eq!(disk.scan("p").unwrap(), Vec::<String>::new());
        let back = seeds(100).any(|seed| {
            bytes(&mut after_crash(disk.clone(), seed)).is_some_and(|image| image == b"kept")
        });
        assert!(
            back,
            "a crash before the removal completes may bring the blob back"
        );
        disk.removed(token);
        for seed in seeds(100) {
            assert_eq!(bytes(&mut after_crash(disk.clone(), seed)), None);
        }
        let token = disk.remove_partition("p").unwrap();
        disk.removed(token);
        assert_eq!(disk.scan("p"), Err(DiskError::PartitionMissing));
    }

    #[test]
    fn a_crash_ends_the_epoch_and_is_a_function_of_the_seed() {
        let (mut disk, inode) = synced(b"abc");
        disk.write(inode, 1, &[9; 3000]);
        let epoch = disk.epoch();
        let mut crashed = disk.clone();
        let digest = crashed.crash(&mut Rng::seeded(3));
        assert!(!crashed.is_current(epoch) && crashed.is_frozen());
        crashed.thaw();
        assert!(!crashed.is_current(epoch) && crashed.is_current(crashed.epoch()));
        assert_eq!(disk.clone().crash(&mut Rng::seeded(3)), digest);
        assert!((0..20).any(|seed| disk.clone().crash(&mut Rng::seeded(seed)) != digest));
    }

    #[test]
    fn create_new_refuses_a_taken_name() {
        let (mut disk, _) = synced(b"");
        assert_eq!(disk.create_new("p", "b"), Err(DiskError::Exists));
        assert_eq!(disk.create_new("x", "b"), Err(DiskError::PartitionMissing));
        assert!(disk.create_new("p", "b.cut").is_ok());
    }
}
