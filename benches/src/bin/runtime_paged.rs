//! Paged blobs against raw blob I/O on the same runtime: sequential appends against
//! sequential `write_at`s, and a replay against sequential `read_at`s, with the same sizes.
//!
//! Every row moves 64 MiB of logical bytes on a fresh two-worker runtime (only the workload is
//! timed), from the root task on worker zero. The paged side uses 4 KiB pages (each stored
//! with its 12-byte checksum trailer) and a 1 MiB buffer; the raw side is a blob of the same
//! logical bytes, without trailers.
//!
//! - `append_4k`: 4 KiB appends against 4 KiB `write_at`s (each copying its slice into an
//!   owned buffer, as a caller holding a slice must). The writer buffers; raw writes do not.
//! - `append_4k_dedicated`: the same on a dedicated task, where a raw `write_at` is a
//!   `pwrite` from the task's own thread (no io-wq hop), as are the writer's buffer writes.
//! - `append_1m`: 1 MiB appends against 1 MiB `write_at`s: one system call each on both
//!   sides, so this row is the cost of paging itself (copying into pages and checksumming).
//! - `replay_cached`: a replay with a 1 MiB buffer (four 256 KiB reads in flight) against
//!   sequential 256 KiB `read_at`s, the file in the page cache.
//! - `replay_uncached`: the same with the file dropped from the page cache before each sample
//!   (`POSIX_FADV_DONTNEED`), so the disk is read.
//!
//! Writes are not synced: syncing 64 MiB would time the disk, not the code. The two sides
//! alternate sample by sample in this one process.
//!
//! Run with `cargo run --release -p benches --bin runtime_paged`.

use std::hint::black_box;
use std::num::{NonZeroU16, NonZeroUsize};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use benches::{Spread, median};
use bytes::Buf as _;
use runtime::buffer::paged::{CHECKSUM_SIZE, CacheRef, Writer};
use runtime::prelude::*;
use runtime::{Config, Context, IoBuf, ReadOptions, Runner, WriteOptions};

const WORKERS: usize = 2;
const WARMUPS: usize = 1;
const SAMPLES: usize = 3;

/// Logical bytes every row moves.
const TOTAL: usize = 64 << 20;
const PAGE: u16 = 4096;
const PHYSICAL: usize = PAGE as usize + CHECKSUM_SIZE as usize;
/// The writer's and the replay's buffer: 256 physical pages (about 1 MiB).
const BUFFER: usize = 256 * PHYSICAL;
/// A raw read: what one of the replay's four batches reads.
const RAW_READ: usize = 64 * PAGE as usize;
const PARTITION: &str = "bench";

fn selected(name: &str) -> bool {
    name.contains(std::env::var("BENCH_FILTER").unwrap_or_default().as_str())
}

fn samples() -> usize {
    benches::samples(SAMPLES)
}

fn run<F, Fut>(storage: &Path, f: F) -> Duration
where
    F: FnOnce(Context) -> Fut,
    Fut: Future<Output = Duration>,
{
    let config = Config::default()
        .with_worker_threads(WORKERS)
        .with_storage_directory(storage);
    Runner::new(config).start(f)
}

fn cache() -> CacheRef {
    CacheRef::new(
        NonZeroU16::new(PAGE).unwrap(),
        NonZeroUsize::new(64).unwrap(),
    )
}

fn data() -> Vec<u8> {
    (0..TOTAL)
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 24) as u8)
        .collect()
}

/// Runs `f` on a dedicated task of `context` if `dedicated`, else in place (the root).
async fn placed<F, Fut>(context: Context, dedicated: bool, f: F) -> Duration
where
    F: FnOnce(Context) -> Fut + Send + 'static,
    Fut: Future<Output = Duration> + Send + 'static,
{
    if dedicated {
        context.dedicated().spawn(f).await.unwrap()
    } else {
        f(context).await
    }
}

/// Appends `data` in `chunk`-byte pieces to a fresh paged blob.
fn paged_append(storage: &Path, data: &'static [u8], chunk: usize, dedicated: bool) -> Duration {
    run(storage, move |context| {
        placed(context, dedicated, move |context| async move {
            let _ = context.remove(PARTITION, Some(b"paged")).await;
            let (blob, size) = context.open(PARTITION, b"paged").await.unwrap();
            let (mut writer, _) = Writer::new(blob, size, BUFFER, cache()).await.unwrap();
            let start = Instant::now();
            for piece in data.chunks(chunk) {
                writer = writer.append(piece).await.unwrap().0;
            }
            let (sealed, _) = writer.seal().await.unwrap();
            let elapsed = start.elapsed();
            assert_eq!(sealed.size(), data.len() as u64);
            elapsed
        })
    })
}

/// Writes `data` in `chunk`-byte pieces to a fresh raw blob, in order.
fn raw_write(storage: &Path, data: &'static [u8], chunk: usize, dedicated: bool) -> Duration {
    run(storage, move |context| {
        placed(context, dedicated, move |context| async move {
            let _ = context.remove(PARTITION, Some(b"raw")).await;
            let (blob, _) = context.open(PARTITION, b"raw").await.unwrap();
            let start = Instant::now();
            for (index, piece) in data.chunks(chunk).enumerate() {
                let offset = (index * chunk) as u64;
                blob.write_at(
                    offset,
                    IoBuf::copy_from_slice(piece),
                    WriteOptions::default(),
                )
                .await
                .unwrap();
            }
            start.elapsed()
        })
    })
}

/// Drops `path`'s pages from the page cache (after writing back any dirty ones).
fn drop_cached(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: a valid descriptor; the advice only affects the page cache.
    let result = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(result, 0, "posix_fadvise");
}

fn paged_replay(storage: &Path, uncached: bool) -> Duration {
    if uncached {
        drop_cached(&blob_file(storage, b"paged"));
    }
    run(storage, move |context| async move {
        let (blob, size) = context.open(PARTITION, b"paged").await.unwrap();
        let (writer, _) = Writer::new(blob, size, BUFFER, cache()).await.unwrap();
        let (sealed, _) = writer.seal().await.unwrap();
        let start = Instant::now();
        let mut replay = sealed
            .replay(NonZeroUsize::new(BUFFER).unwrap(), ReadOptions::default())
            .unwrap();
        let mut seen = 0;
        while replay.ensure(1).await.unwrap() {
            while replay.remaining() > 0 {
                let chunk = black_box(replay.chunk());
                let len = chunk.len();
                seen += len;
                replay.advance(len);
            }
        }
        let elapsed = start.elapsed();
        assert_eq!(seen, TOTAL);
        elapsed
    })
}

fn raw_read(storage: &Path, uncached: bool) -> Duration {
    if uncached {
        drop_cached(&blob_file(storage, b"raw"));
    }
    run(storage, move |context| async move {
        let (blob, size) = context.open(PARTITION, b"raw").await.unwrap();
        assert_eq!(size, TOTAL as u64);
        let start = Instant::now();
        let mut offset = 0;
        while offset < size {
            let read = blob
                .read_at(offset, RAW_READ, ReadOptions::default())
                .await
                .unwrap();
            black_box(read);
            offset += RAW_READ as u64;
        }
        start.elapsed()
    })
}

fn blob_file(storage: &Path, name: &[u8]) -> PathBuf {
    let hex: String = name.iter().map(|byte| format!("{byte:02x}")).collect();
    storage.join(PARTITION).join(hex)
}

struct Row {
    name: &'static str,
    what: &'static str,
    paged: Box<dyn Fn(&Path) -> Duration>,
    raw: Box<dyn Fn(&Path) -> Duration>,
}

fn main() {
    let storage = std::env::temp_dir().join(format!("runtime-paged-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&storage);
    std::fs::create_dir_all(&storage).expect("bench directory");
    let data: &'static [u8] = Box::leak(data().into_boxed_slice());

    let rows = [
        Row {
            name: "append_4k",
            what: "4 KiB appends / 4 KiB write_at",
            paged: Box::new(move |dir| paged_append(dir, data, 4096, false)),
            raw: Box::new(move |dir| raw_write(dir, data, 4096, false)),
        },
        Row {
            name: "append_4k_dedicated",
            what: "4 KiB appends / 4 KiB write_at, dedicated task",
            paged: Box::new(move |dir| paged_append(dir, data, 4096, true)),
            raw: Box::new(move |dir| raw_write(dir, data, 4096, true)),
        },
        Row {
            name: "append_1m",
            what: "1 MiB appends / 1 MiB write_at",
            paged: Box::new(move |dir| paged_append(dir, data, 1 << 20, false)),
            raw: Box::new(move |dir| raw_write(dir, data, 1 << 20, false)),
        },
        Row {
            name: "replay_cached",
            what: "replay, 1 MiB buffer / 256 KiB read_at, page cache",
            paged: Box::new(move |dir| paged_replay(dir, false)),
            raw: Box::new(move |dir| raw_read(dir, false)),
        },
        Row {
            name: "replay_uncached",
            what: "replay, 1 MiB buffer / 256 KiB read_at, from disk",
            paged: Box::new(move |dir| paged_replay(dir, true)),
            raw: Box::new(move |dir| raw_read(dir, true)),
        },
    ];

    // The replay rows read what the append rows wrote: make sure both blobs exist.
    paged_append(&storage, data, 1 << 20, false);
    raw_write(&storage, data, 1 << 20, false);

    println!("## paged blobs against raw blob I/O, 64 MiB (4 KiB pages, 1 MiB buffer)\n");
    let rounds = benches::rounds(benches::ROUNDS);
    benches::print_rounds_caption(rounds, "");
    println!("| row | workload | paged MiB/s | raw MiB/s | paged/raw throughput |");
    println!("|---|---|---:|---:|---:|");
    let mib_per_second = |time: Duration| TOTAL as f64 / (1 << 20) as f64 / time.as_secs_f64();
    // `BENCH_ONLY=paged` or `raw` runs one side, for profiling.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let rows: Vec<&Row> = rows.iter().filter(|row| selected(row.name)).collect();
    // Per row: each round's median throughput of each side, and their ratio.
    let mut paged_rates = vec![Vec::new(); rows.len()];
    let mut raw_rates = vec![Vec::new(); rows.len()];
    let mut ratios = vec![Vec::new(); rows.len()];
    for _ in 0..rounds {
        for (index, row) in rows.iter().enumerate() {
            for _ in 0..WARMUPS {
                (row.paged)(&storage);
                (row.raw)(&storage);
            }
            let (mut paged, mut raw) = (Vec::new(), Vec::new());
            for _ in 0..samples() {
                if only != "raw" {
                    paged.push((row.paged)(&storage));
                }
                if only != "paged" {
                    raw.push((row.raw)(&storage));
                }
            }
            if !paged.is_empty() {
                paged_rates[index].push(mib_per_second(median(&mut paged)));
            }
            if !raw.is_empty() {
                raw_rates[index].push(mib_per_second(median(&mut raw)));
            }
            if let (Some(paged), Some(raw)) = (paged_rates[index].last(), raw_rates[index].last())
                && only.is_empty()
            {
                ratios[index].push(paged / raw);
            }
        }
    }
    let show = |values: &[f64], digits: usize| {
        Spread::of(values).map_or_else(|| "—".to_string(), |spread| format!("{spread:.digits$}"))
    };
    for (index, row) in rows.iter().enumerate() {
        println!(
            "| {} | {} | {} | {} | {} |",
            row.name,
            row.what,
            show(&paged_rates[index], 0),
            show(&raw_rates[index], 0),
            show(&ratios[index], 2),
        );
    }
    std::fs::remove_dir_all(storage).expect("remove the bench directory");
}
