//! Blobs of a deterministic run: the same [`Blob`] and [`Storage`](crate::Storage) calls, on
//! the run's [`Disk`] (see it for the fault model a crash applies).
//!
//! Each operation is issued at its first poll, as a ring registration is: a write or resize
//! is then seen by every reader, and a removal is made; the auditor records it (its kind, the
//! blob, the offset and length, a write's bytes). It then yields zero, one or two times (drawn
//! from the seed), so other tasks run while it is in flight, and completes: a write or resize
//! is then covered by the syncs issued later, a sync makes durable what had completed before
//! it was issued (not what was still in flight: on the ring they run in any order), a `SYNC`
//! write is durable, a removal is durable. A write or resize dropped in flight completes at
//! the drop (on the ring it runs to its end whatever happens to its future), so a sync issued
//! after the drop covers it. Opens, scans and reads from the page cache
//! ([`Blob::read_cached`]) complete at once, as natively.
//!
//! Invariants:
//! - Only the run's own thread moves an operation: polled from any other thread (the paged
//!   writer's list of abandoned writes is pruned by every thread of the process), an operation
//!   stays pending without touching the simulation, so another run cannot change this one's
//!   draws or events. Once the run's disk has crashed, it completes with the error of a stale
//!   handle, drawing and recording nothing.
//! - A handle belongs to the disk's epoch it was opened in: after a crash every operation on
//!   it fails with [`Error::BlobFailed`] saying so, and nothing it does reaches the disk.
//! - Completion depends on nothing outside the simulation: only on polls of the run's thread.

use super::{Blob, Inner, Range, ReadMany, check_partition, check_reads, hex, unhex};
use crate::buffer::{IoBufMut, IoBufs, IoBufsMut};
use crate::simulation::Simulation;
use crate::simulation::disk::{Disk, DiskError};
use crate::{Error, ReadOptions, WriteOptions};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

/// A simulated blob handle: an inode of the run's disk, in one epoch.
pub(super) struct Memory {
    simulation: Arc<Simulation>,
    epoch: u64,
    device: u64,
    inode: u64,
    partition: String,
    /// The file name in the partition: `hex(name)`, or that with a suffix for a file created
    /// beside it.
    file: String,
    /// `partition/file`, for errors.
    label: String,
}

/// Whether this thread drives `simulation`.
fn owned(simulation: &Arc<Simulation>) -> bool {
    crate::simulation::with_current(|current| Arc::ptr_eq(current, simulation)).unwrap_or(false)
}

/// Whether `simulation`'s disk crashed (and was not carried on: a crashed run is over).
fn crashed(simulation: &Simulation) -> bool {
    simulation.with_disk(|disk| disk.is_frozen())
}

/// Ready once this thread drives the simulation, or once its disk crashed; pending (without
/// a wake: the run's thread polls again with its own waker) elsewhere.
struct Gate<'a>(&'a Arc<Simulation>);

impl Future for Gate<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<()> {
        if owned(self.0) || crashed(self.0) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// The time an operation is in flight: `left` turns of the run's scheduler.
pub(super) struct Yields {
    simulation: Arc<Simulation>,
    left: u64,
}

impl Yields {
    /// Draws how many turns an operation takes.
    fn draw(simulation: &Arc<Simulation>) -> Self {
        Self {
            simulation: simulation.clone(),
            left: simulation.draw("storage_yields", |rng| rng.below(3)),
        }
    }
}

impl Future for Yields {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.left == 0 {
            return Poll::Ready(());
        }
        if !owned(&self.simulation) {
            return if crashed(&self.simulation) {
                Poll::Ready(())
            } else {
                Poll::Pending
            };
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

fn stale(label: &str) -> Error {
    Error::BlobFailed(label.to_owned(), stale_io())
}

fn stale_io() -> io::Error {
    io::Error::other(
        "the simulated blob was opened before a crash (or the disk has crashed): its handle is \
         invalid",
    )
}

/// Runs `f` on the disk if `epoch` is its current one.
fn on_disk<R>(
    simulation: &Simulation,
    epoch: u64,
    label: &str,
    f: impl FnOnce(&mut Disk) -> R,
) -> Result<R, Error> {
    simulation
        .with_disk(|disk| disk.is_current(epoch).then(|| f(disk)))
        .ok_or_else(|| stale(label))
}

/// Opens (creating if needed) the blob `name` of `partition` on the run's disk.
pub(super) fn open(
    simulation: &Arc<Simulation>,
    partition: &str,
    name: &[u8],
) -> Result<(Blob, u64), Error> {
    check_partition(partition)?;
    let file = hex(name);
    let label = format!("{partition}/{file}");
    if name.is_empty() {
        return Err(Error::BlobFailed(
            label,
            io::Error::new(io::ErrorKind::InvalidInput, "a blob name must not be empty"),
        ));
    }
    let opened = simulation.with_disk(|disk| {
        (!disk.is_frozen()).then(|| {
            let (inode, len) = disk.open(partition, &file);
            (disk.epoch(), disk.device(), inode, len)
        })
    });
    let (epoch, device, inode, len) = opened.ok_or_else(|| stale(&label))?;
    simulation.record("storage_open", &[label.as_bytes(), &len.to_le_bytes()]);
    let memory = Memory {
        simulation: simulation.clone(),
        epoch,
        device,
        inode,
        partition: partition.to_owned(),
        file,
        label,
    };
    Ok((
        Blob {
            inner: Inner::Memory(Arc::new(memory)),
        },
        len,
    ))
}

/// Removes a blob (or a partition) now, and resolves once the removal is durable.
pub(super) fn remove(
    simulation: &Arc<Simulation>,
    partition: &str,
    name: Option<&[u8]>,
) -> impl Future<Output = Result<(), Error>> + Send + use<> {
    let simulation = simulation.clone();
    let label = match name {
        Some(name) => format!("{partition}/{}", hex(name)),
        None => partition.to_owned(),
    };
    let removed = check_partition(partition).and_then(|()| {
        let removed = simulation.with_disk(|disk| {
            if disk.is_frozen() {
                return None;
            }
            Some(match name {
                Some(name) => disk.remove_blob(partition, &hex(name)),
                None => disk.remove_partition(partition),
            })
        });
        match removed {
            None => Err(stale(&label)),
            Some(Ok(token)) => Ok(token),
            Some(Err(DiskError::BlobMissing)) => Err(Error::BlobMissing(label.clone())),
            Some(Err(_)) => Err(Error::PartitionMissing(partition.to_owned())),
        }
    });
    if removed.is_ok() {
        simulation.record("storage_remove", &[label.as_bytes()]);
    }
    async move {
        let token = removed?;
        Yields::draw(&simulation).await;
        let done =
            simulation.with_disk(|disk| (!disk.is_frozen()).then(|| disk.removed(token)).is_some());
        if done { Ok(()) } else { Err(stale(&label)) }
    }
}

/// The blob names of `partition`, sorted.
pub(super) fn scan(simulation: &Arc<Simulation>, partition: &str) -> Result<Vec<Vec<u8>>, Error> {
    check_partition(partition)?;
    let files = simulation
        .with_disk(|disk| (!disk.is_frozen()).then(|| disk.scan(partition)))
        .ok_or_else(|| stale(partition))?
        .map_err(|_| Error::PartitionMissing(partition.to_owned()))?;
    simulation.record("storage_scan", &[partition.as_bytes()]);
    // Files created beside a blob are not blob names, as natively.
    Ok(files.iter().filter_map(|file| unhex(file)).collect())
}

impl Memory {
    pub(super) fn label(&self) -> &str {
        &self.label
    }

    fn disk<R>(&self, f: impl FnOnce(&mut Disk) -> R) -> Result<R, Error> {
        on_disk(&self.simulation, self.epoch, &self.label, f)
    }

    fn record(&self, kind: &str, offset: u64, len: u64, bytes: &[u8]) {
        self.simulation.record(
            kind,
            &[
                self.label.as_bytes(),
                &offset.to_le_bytes(),
                &len.to_le_bytes(),
                bytes,
            ],
        );
    }

    /// The write or resize `seq` completed, unless the disk crashed meanwhile (then it
    /// resolves as before the crash, and nothing reaches the disk).
    fn complete(&self, seq: u64) {
        let _ = self.disk(|disk| disk.complete(self.inode, seq));
    }
}

/// Completes a registered write or resize whose future is dropped before it resolves: on the
/// rings the operation runs to its end whatever happens to its future (the `Blob` contract),
/// so a sync issued afterwards covers it. Completing it at the drop is the earliest the ring
/// could; a `SYNC` write dropped in flight is only completed, not made durable.
struct Completes<'a> {
    memory: &'a Memory,
    seq: Option<u64>,
}

impl<'a> Completes<'a> {
    fn new(memory: &'a Memory, seq: u64) -> Self {
        Self {
            memory,
            seq: Some(seq),
        }
    }

    /// The operation resolves normally: its own completion follows.
    fn disarm(mut self) {
        self.seq = None;
    }
}

impl Drop for Completes<'_> {
    fn drop(&mut self) {
        // Only on the run's own thread: a future dropped elsewhere (a paged writer's abandoned
        // write, say) must not touch the run's disk at a moment no seed decides. The run's
        // own shutdown drops its tasks on its thread.
        if let Some(seq) = self.seq
            && owned(&self.memory.simulation)
        {
            self.memory.complete(seq);
        }
    }
}

impl Memory {
    /// The blob's identity (this disk, the inode) and its length.
    pub(super) fn identity(&self) -> io::Result<((u64, u64), u64)> {
        self.simulation
            .with_disk(|disk| {
                disk.is_current(self.epoch)
                    .then(|| ((self.device, self.inode), disk.len(self.inode)))
            })
            .ok_or_else(stale_io)
    }

    /// `len` bytes at `offset` at once, if the blob holds them (as the page cache would).
    pub(super) fn read_cached(&self, offset: u64, len: usize) -> Option<IoBufMut> {
        if !owned(&self.simulation) {
            return None;
        }
        let bytes = self
            .disk(|disk| disk.read(self.inode, offset, len))
            .ok()?
            .ok()?;
        self.record("storage_read_cached", offset, len as u64, &[]);
        Some(IoBufMut::from(bytes))
    }

    fn too_short(&self, offset: u64, len: usize, error: DiskError) -> Error {
        match error {
            DiskError::TooShort(end) => Error::BlobTooShort {
                blob: self.label.clone(),
                offset,
                len,
                end,
            },
            other => Error::BlobFailed(self.label.clone(), io::Error::other(format!("{other:?}"))),
        }
    }

    /// Creates a new, empty blob beside this one, named by `suffix` (then `.2`, `.3`, ...
    /// while taken), as [`Blob::create_beside`].
    pub(super) fn create_beside(&self, suffix: &str) -> Result<(Blob, String), Error> {
        for attempt in 1..=1000u32 {
            let numbered = match attempt {
                1 => suffix.to_owned(),
                n => format!("{suffix}.{n}"),
            };
            let file = format!("{}{numbered}", self.file);
            let label = format!("{}{numbered}", self.label);
            match self.disk(|disk| disk.create_new(&self.partition, &file))? {
                Ok(inode) => {
                    self.simulation
                        .record("storage_create", &[label.as_bytes()]);
                    let memory = Memory {
                        simulation: self.simulation.clone(),
                        epoch: self.epoch,
                        device: self.device,
                        inode,
                        partition: self.partition.clone(),
                        file,
                        label: label.clone(),
                    };
                    let blob = Blob {
                        inner: Inner::Memory(Arc::new(memory)),
                    };
                    return Ok((blob, label));
                }
                Err(DiskError::Exists) => continue,
                Err(_) => {
                    return Err(Error::BlobFailed(
                        label,
                        io::Error::from(io::ErrorKind::NotFound),
                    ));
                }
            }
        }
        Err(Error::BlobFailed(
            self.label.clone(),
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "a thousand files named {}{suffix}[.N] exist already",
                    self.label
                ),
            ),
        ))
    }

    /// Reads `len` bytes at `offset` (issued now, answered after the draw's turns).
    pub(super) async fn read(self: Arc<Self>, offset: u64, len: usize) -> Result<IoBufs, Error> {
        Gate(&self.simulation).await;
        let bytes = self
            .disk(|disk| disk.read(self.inode, offset, len))?
            .map_err(|error| self.too_short(offset, len, error))?;
        self.record("storage_read", offset, len as u64, &[]);
        Yields::draw(&self.simulation).await;
        Ok(IoBufs::from(bytes))
    }

    /// Writes `bufs` at `offset`: seen at once, durable with a sync issued after it resolved,
    /// or when it resolves with [`WriteOptions::SYNC`].
    pub(super) async fn write(
        self: Arc<Self>,
        offset: u64,
        bufs: IoBufs,
        options: WriteOptions,
    ) -> Result<(), Error> {
        Gate(&self.simulation).await;
        let bytes = bufs.coalesce();
        let seq = self.disk(|disk| disk.write(self.inode, offset, &bytes))?;
        let kind = if options.sync {
            "storage_write_sync"
        } else {
            "storage_write"
        };
        self.record(kind, offset, bytes.len() as u64, &bytes);
        let completes = Completes::new(&self, seq);
        Yields::draw(&self.simulation).await;
        completes.disarm();
        if options.sync {
            self.disk(|disk| disk.make_durable(self.inode, seq))?;
        } else {
            self.complete(seq);
        }
        Ok(())
    }

    /// Sets the blob's length: durable with a sync issued after it resolved.
    pub(super) async fn resize(self: Arc<Self>, len: u64) -> Result<(), Error> {
        Gate(&self.simulation).await;
        let seq = self.disk(|disk| disk.resize(self.inode, len))?;
        self.record("storage_resize", len, 0, &[]);
        let completes = Completes::new(&self, seq);
        Yields::draw(&self.simulation).await;
        completes.disarm();
        self.complete(seq);
        Ok(())
    }

    /// Makes every write and resize completed before it durable (not those in flight), with
    /// the blob's directory entries.
    pub(super) async fn sync(self: Arc<Self>) -> Result<(), Error> {
        Gate(&self.simulation).await;
        let cut = self.disk(|disk| disk.cut())?;
        self.record("storage_sync", 0, 0, &[]);
        Yields::draw(&self.simulation).await;
        self.disk(|disk| disk.sync(self.inode, cut))
    }

    /// Reads every range now; the [`ReadMany`] answers after the draw's turns.
    pub(super) async fn start_read_many(
        self: Arc<Self>,
        blob: Blob,
        ranges: Vec<(u64, usize)>,
        _options: ReadOptions,
    ) -> ReadMany {
        Gate(&self.simulation).await;
        let mut invalid = check_reads(&blob, &ranges).err();
        let mut results = Vec::with_capacity(ranges.len());
        for &(offset, len) in &ranges {
            let data = match &invalid {
                Some(_) => None,
                None if len == 0 => Some(IoBufMut::default()),
                None => match self.disk(|disk| disk.read(self.inode, offset, len)) {
                    Ok(Ok(bytes)) => Some(IoBufMut::from(bytes)),
                    Ok(Err(error)) => {
                        invalid = Some(self.too_short(offset, len, error));
                        None
                    }
                    Err(error) => {
                        invalid = Some(error);
                        None
                    }
                },
            };
            results.push(Range { offset, len, data });
        }
        let mut fields = Vec::with_capacity(ranges.len() * 16);
        for &(offset, len) in &ranges {
            fields.extend_from_slice(&offset.to_le_bytes());
            fields.extend_from_slice(&(len as u64).to_le_bytes());
        }
        self.simulation
            .record("storage_read_many", &[self.label.as_bytes(), &fields]);
        ReadMany {
            memory: Some(Yields::draw(&self.simulation)),
            blob,
            invalid,
            slots: None,
            ring_closed: None,
            results,
        }
    }
}

/// The answer of a simulated [`ReadMany`] once its turns are over: the bytes read at issue.
pub(super) fn poll_read_many(
    yields: &mut Yields,
    results: &mut [Range],
    cx: &mut TaskContext<'_>,
) -> Poll<Result<Vec<IoBufsMut>, Error>> {
    if Pin::new(yields).poll(cx).is_pending() {
        return Poll::Pending;
    }
    Poll::Ready(Ok(results
        .iter_mut()
        .map(|range| IoBufsMut::from(range.data.take().expect("every range is read")))
        .collect()))
}
