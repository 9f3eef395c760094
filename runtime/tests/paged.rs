//! Paged blobs through the public API: bytes read back from the writer, the sealed blob and a
//! replay; damaged pages reported with their blob and offset; torn tails cut back to the
//! valid prefix; the cache serving what it verified; and acknowledged bytes surviving a
//! process killed while it appends.

use bytes::Buf as _;
use futures::FutureExt as _;
use runtime::buffer::paged::{
    CHECKSUM_SIZE, CacheRef, CutReason, Recovery, Replay, Sealed, TornTail, Writer,
};
use runtime::prelude::*;
use runtime::{Config, Context, Error, ReadOptions, Runner};
use std::io::{BufRead, BufReader};
use std::num::{NonZeroU16, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// An odd page size, so pages and the kernel's 4 KiB pages never line up.
const PAGE: u16 = 100;
const PHYSICAL: usize = PAGE as usize + CHECKSUM_SIZE as usize;

fn cache(pages: usize) -> CacheRef {
    CacheRef::new(
        NonZeroU16::new(PAGE).unwrap(),
        NonZeroUsize::new(pages).unwrap(),
    )
}

/// Byte `index` of the stream every test appends: no period a page could hide.
fn stream(range: std::ops::Range<u64>) -> Vec<u8> {
    range
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect()
}

/// xorshift64: the tests' reproducible choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Runs `body` on a runner whose storage directory it is given; the runner removes that fresh
/// directory when it ends.
fn with_directory<F, Fut>(body: F)
where
    F: FnOnce(Context, PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let inside = directory.clone();
    Runner::new(config).start(move |context| body(context, inside));
    assert!(
        !directory.exists(),
        "the runner removes its fresh directory"
    );
}

fn blob_path(directory: &Path, name: &[u8]) -> PathBuf {
    let hex: String = name.iter().map(|byte| format!("{byte:02x}")).collect();
    directory.join("paged").join(hex)
}

/// Flips one bit of the file at `offset`.
fn flip(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&byte, offset).unwrap();
}

/// Checks that `recovery` kept aside every byte it cut: its set-aside file holds the blob's
/// bytes (`before`, as they were) from the first cut to the old end.
fn assert_set_aside(directory: &Path, recovery: &Recovery, before: &[u8]) {
    let Some(first) = recovery.cuts.iter().find(|cut| cut.len > 0) else {
        assert_eq!(recovery.set_aside, None, "nothing cut, nothing kept aside");
        return;
    };
    let set_aside = recovery
        .set_aside
        .as_ref()
        .expect("cut bytes are kept aside");
    assert_eq!(set_aside.offset, first.offset.min(recovery.cuts[0].offset));
    assert_eq!(set_aside.len, before.len() as u64 - set_aside.offset);
    let kept = std::fs::read(directory.join(&set_aside.file)).unwrap();
    assert_eq!(
        kept,
        &before[set_aside.offset as usize..],
        "the set-aside file holds the cut bytes as they were"
    );
}

async fn open(context: &Context, name: &[u8], buffer: usize, cache: CacheRef) -> Writer {
    open_recovered(context, name, buffer, cache).await.0
}

/// A writer on blob `name` and what recovering it did.
async fn open_recovered(
    context: &Context,
    name: &[u8],
    buffer: usize,
    cache: CacheRef,
) -> (Writer, Recovery) {
    let (blob, size) = context.open("paged", name).await.unwrap();
    Writer::new(blob, size, buffer, cache).await.unwrap()
}

/// Every byte of the blob `name`, through a fresh writer (which recovers it), sealed and
/// replayed.
async fn reopen_and_replay(context: &Context, name: &[u8], buffer: usize) -> Vec<u8> {
    let writer = open(context, name, buffer, cache(2)).await;
    let (sealed, _) = writer.seal().await.unwrap();
    replay_all(&sealed, buffer).await
}

/// The two ways a replay reads: from the page cache on the calling thread (the default, for
/// cached pages), and through the ring (`DONT_CACHE` bypasses the cache).
fn read_paths() -> [ReadOptions; 2] {
    [ReadOptions::default(), ReadOptions::DONT_CACHE]
}

/// Every byte of `sealed`, replayed through both read paths, which must agree.
async fn replay_all(sealed: &Sealed, buffer: usize) -> Vec<u8> {
    let [cached, ring] = read_paths();
    let from_cache = replay_with(sealed, buffer, cached).await;
    let from_ring = replay_with(sealed, buffer, ring).await;
    assert_eq!(
        from_cache, from_ring,
        "both read paths hand out the same bytes"
    );
    from_cache
}

/// Every byte of `sealed`, through a replay that hands out whatever is available.
async fn replay_with(sealed: &Sealed, buffer: usize, options: ReadOptions) -> Vec<u8> {
    let mut replay = sealed
        .replay(NonZeroUsize::new(buffer).unwrap(), options)
        .unwrap();
    let mut out = Vec::new();
    while replay.ensure(1).await.unwrap() {
        while replay.has_remaining() {
            let chunk = replay.chunk();
            assert!(!chunk.is_empty() && chunk.len() <= PAGE as usize);
            out.extend_from_slice(chunk);
            let len = chunk.len();
            replay.advance(len);
        }
    }
    out
}

/// Appends of every awkward size (empty, one byte, a page and one either side, more than the
/// buffer) return their offsets and read back from the writer (buffered and written bytes),
/// from the sealed blob, and from a replay; the blob holds whole physical pages.
#[test]
fn appended_bytes_read_back_from_the_writer_the_sealed_blob_and_a_replay() {
    with_directory(|context, directory| async move {
        let sizes = [0usize, 1, 99, 100, 101, 7, 450, 3, 1000, 55];
        let total: usize = sizes.iter().sum();
        let data = stream(0..total as u64);
        let mut writer = open(&context, b"round-trip", 3 * PHYSICAL, cache(4)).await;
        let mut at = 0;
        for size in sizes {
            let (next, offset) = writer.append(&data[at..at + size]).await.unwrap();
            writer = next;
            assert_eq!(offset, at as u64);
            at += size;
            assert_eq!(writer.size(), at as u64);
            // Every range ending here, from several starts: some written, some buffered.
            for start in [0, at / 3, at.saturating_sub(150), at.saturating_sub(1)] {
                let read = writer.read_at(start as u64, at - start).await.unwrap();
                assert_eq!(read.as_ref(), &data[start..at], "{start}..{at}");
            }
        }
        let past_end = writer.read_at(total as u64 - 1, 2).await;
        assert!(
            matches!(
                &past_end,
                Err(Error::BlobTooShort { blob, offset, len: 2, end })
                    if blob == "paged/726f756e642d74726970"
                        && *offset == total as u64 - 1
                        && *end == total as u64
            ),
            "{past_end:?}"
        );

        let (sealed, sync) = writer.seal().await.unwrap();
        sync.await.unwrap();
        assert_eq!(sealed.size(), total as u64);
        let pages = total.div_ceil(PAGE as usize);
        let on_disk = std::fs::metadata(blob_path(&directory, b"round-trip")).unwrap();
        assert_eq!(on_disk.len(), (pages * PHYSICAL) as u64);
        for (start, len) in [(0, total), (150, 250), (total - 1, 1), (total, 0)] {
            let read = sealed.read_at(start as u64, len).await.unwrap();
            assert_eq!(read.as_ref(), &data[start..start + len]);
        }
        for buffer in [PHYSICAL, 4 * PHYSICAL + 5, 64 * PHYSICAL] {
            assert_eq!(replay_all(&sealed, buffer).await, data, "buffer {buffer}");
        }
    });
}

/// A writer, a sealed blob and a replay move between tasks (which the pool may run on either
/// worker): two tasks read one writer at once (its `read_at` needs only `&self`, and its
/// futures are `Send`), another task appends and syncs, and a replay made in one task is
/// finished in another. The seed case in `tests::io` covers a replay outliving its worker.
#[test]
fn writers_sealed_blobs_and_replays_move_between_tasks() {
    with_directory(|context, _| async move {
        let data = stream(0..3000);
        let writer = open(&context, b"moving", 2 * PHYSICAL, cache(4)).await;
        let (writer, _) = writer.append(&data[..1500]).await.unwrap();
        let writer = std::sync::Arc::new(writer);
        let readers: Vec<_> = [0usize, 700]
            .into_iter()
            .map(|start| {
                let writer = writer.clone();
                let expected = data[start..1500].to_vec();
                context.child("reader").spawn(move |_| async move {
                    let read = writer.read_at(start as u64, 1500 - start).await.unwrap();
                    assert_eq!(read.as_ref(), &expected[..]);
                })
            })
            .collect();
        for reader in readers {
            reader.await.unwrap();
        }
        let writer = std::sync::Arc::into_inner(writer).unwrap();
        let rest = data[1500..].to_vec();
        let sealed = context
            .child("appender")
            .spawn(move |_| async move {
                let (writer, _) = writer.append(&rest).await.unwrap();
                let writer = writer.sync().await.unwrap();
                writer.seal().await.unwrap().0
            })
            .await
            .unwrap();
        // Through the ring, reads are left in flight by the first task and taken by the next.
        for options in read_paths() {
            let sealed = sealed.clone();
            let mut replay = context
                .child("replayer")
                .spawn(move |_| async move {
                    let mut replay = sealed
                        .replay(NonZeroUsize::new(4 * PHYSICAL).unwrap(), options)
                        .unwrap();
                    assert!(replay.ensure(1000).await.unwrap());
                    replay
                })
                .await
                .unwrap();
            assert!(replay.ensure(3000).await.unwrap());
            assert_eq!(replay.copy_to_bytes(3000).as_ref(), &data[..]);
        }
    });
}

/// A writer made on an existing blob continues after its last byte, whether that ends inside
/// a page (synced partial page) or on a page boundary.
#[test]
fn a_reopened_blob_continues_after_its_last_byte() {
    with_directory(|context, _| async move {
        let data = stream(0..1000);
        for (name, first) in [(&b"partial"[..], 250), (&b"boundary"[..], 300)] {
            let writer = open(&context, name, 2 * PHYSICAL, cache(2)).await;
            let (writer, _) = writer.append(&data[..first]).await.unwrap();
            writer.sync().await.unwrap();

            let writer = open(&context, name, 2 * PHYSICAL, cache(2)).await;
            assert_eq!(writer.size(), first as u64);
            let (writer, offset) = writer.append(&data[first..]).await.unwrap();
            assert_eq!(offset, first as u64);
            let writer = writer.sync().await.unwrap();
            drop(writer);

            assert_eq!(reopen_and_replay(&context, name, 5 * PHYSICAL).await, data);
        }
    });
}

/// A page whose bytes were damaged on disk fails reads with `BlobCorrupt`, naming the blob and
/// the page's offset; a replay hands out every byte before it and stops there, and keeps
/// reporting it.
#[test]
fn a_damaged_page_is_reported_with_its_blob_and_offset_never_returned() {
    with_directory(|context, directory| async move {
        let data = stream(0..1000);
        let writer = open(&context, b"damaged", 4 * PHYSICAL, cache(16)).await;
        let (writer, _) = writer.append(&data).await.unwrap();
        let (sealed, sync) = writer.seal().await.unwrap();
        sync.await.unwrap();

        // One bit inside page 4's data.
        flip(&blob_path(&directory, b"damaged"), 4 * PHYSICAL as u64 + 37);
        let expected_offset = 4 * PHYSICAL as u64;
        let check = |error: Error| {
            let message = error.to_string();
            match error {
                Error::BlobCorrupt { blob, offset } => {
                    assert_eq!(blob, "paged/64616d61676564");
                    assert_eq!(offset, expected_offset);
                    assert!(
                        message.contains(&blob) && message.contains("offset 448"),
                        "{message}"
                    );
                }
                other => panic!("expected a corruption error, got {other:?}"),
            }
        };

        for options in read_paths() {
            // Reads of three pages: the damaged page is in the middle of the read [3, 5].
            let mut replay = sealed
                .replay(NonZeroUsize::new(12 * PHYSICAL).unwrap(), options)
                .unwrap();
            check(replay.ensure(data.len()).await.unwrap_err());
            assert_eq!(replay.remaining(), 400, "the four pages before the damage");
            assert_eq!(replay.copy_to_bytes(400).as_ref(), &data[..400]);
            check(replay.ensure(1).await.unwrap_err());
        }

        check(sealed.read_at(450, 10).await.unwrap_err());
        check(sealed.read_at(0, 1000).await.unwrap_err());
        let before = sealed.read_at(0, 400).await.unwrap();
        assert_eq!(before.as_ref(), &data[..400]);
        let after = sealed.read_at(500, 500).await.unwrap();
        assert_eq!(after.as_ref(), &data[500..]);
    });
}

/// Reads go through the cache: a page it verified is served from memory even after the disk
/// copy is damaged, while a page it never held (or evicted) is read, and found damaged.
#[test]
fn the_cache_serves_pages_it_verified_and_evicts_beyond_its_bound() {
    with_directory(|context, directory| async move {
        let data = stream(0..1000);
        let writer = open(&context, b"cached", 4 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data).await.unwrap();
        let (sealed, _) = writer.seal().await.unwrap();
        let path = blob_path(&directory, b"cached");

        // Pages 1 and 2 cached, then damaged on disk: still served.
        assert_eq!(
            sealed.read_at(100, 200).await.unwrap().as_ref(),
            &data[100..300]
        );
        flip(&path, PHYSICAL as u64 + 5);
        flip(&path, 2 * PHYSICAL as u64 + 5);
        assert_eq!(
            sealed.read_at(100, 200).await.unwrap().as_ref(),
            &data[100..300]
        );

        // Page 5 (never cached, damaged) fails; reading pages 6 and 7 evicts pages 1 and 2 (the
        // cache holds two), so their damage shows.
        flip(&path, 5 * PHYSICAL as u64 + 5);
        assert!(matches!(
            sealed.read_at(500, 1).await,
            Err(Error::BlobCorrupt { .. })
        ));
        assert_eq!(
            sealed.read_at(600, 200).await.unwrap().as_ref(),
            &data[600..800]
        );
        assert!(matches!(
            sealed.read_at(100, 1).await,
            Err(Error::BlobCorrupt { offset, .. }) if offset == PHYSICAL as u64
        ));
    });
}

/// A crash can leave a fragment of a page, trailing pages that were never written (zeros, as
/// a file system may leave), or a partial page whose rewrite was torn. Opening cuts each back
/// to the valid prefix, truncates the blob to whole pages, and appends continue from there.
#[test]
fn a_torn_tail_is_cut_back_to_the_valid_prefix() {
    with_directory(|context, directory| async move {
        let data = stream(0..1000);
        let file = |name: &[u8]| {
            std::fs::OpenOptions::new()
                .append(true)
                .open(blob_path(&directory, name))
                .unwrap()
        };
        let len = |name: &[u8]| {
            std::fs::metadata(blob_path(&directory, name))
                .unwrap()
                .len()
        };
        use std::io::Write as _;

        // A fragment of a page after the last synced byte.
        let writer = open(&context, b"fragment", 2 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data[..250]).await.unwrap();
        writer.sync().await.unwrap();
        file(b"fragment").write_all(&[0xAB; PHYSICAL / 2]).unwrap();

        // Two whole pages that never reached the disk, then a fragment.
        let writer = open(&context, b"zeros", 2 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data[..250]).await.unwrap();
        writer.sync().await.unwrap();
        file(b"zeros").write_all(&[0; 2 * PHYSICAL + 7]).unwrap();

        // A partial page synced at 50 bytes, then rewritten at 80 and torn: bytes 50..80
        // never reached the disk.
        let writer = open(&context, b"rewrite", 2 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data[..250]).await.unwrap();
        let writer = writer.sync().await.unwrap();
        let (writer, _) = writer.append(&data[250..280]).await.unwrap();
        writer.sync().await.unwrap();
        flip(&blob_path(&directory, b"rewrite"), 2 * PHYSICAL as u64 + 60);

        let cases = [
            // (blob, what is cut: (offset, length, reason)).
            (
                &b"fragment"[..],
                vec![(
                    3 * PHYSICAL as u64,
                    PHYSICAL as u64 / 2,
                    CutReason::Fragment,
                )],
            ),
            (
                b"zeros",
                vec![
                    (
                        3 * PHYSICAL as u64,
                        2 * PHYSICAL as u64,
                        CutReason::UnwrittenPages,
                    ),
                    (5 * PHYSICAL as u64, 7, CutReason::Fragment),
                ],
            ),
            (
                b"rewrite",
                vec![(
                    2 * PHYSICAL as u64 + 50,
                    PHYSICAL as u64 - 50,
                    CutReason::FailedSlot { kept: 50 },
                )],
            ),
        ];
        for (name, expected) in cases {
            let before = std::fs::read(blob_path(&directory, name)).unwrap();
            let (writer, recovery) = open_recovered(&context, name, 2 * PHYSICAL, cache(2)).await;
            assert_eq!(writer.size(), 250, "{:?}", std::str::from_utf8(name));
            assert_eq!(len(name), 3 * PHYSICAL as u64, "cut to whole valid pages");
            let cuts: Vec<_> = recovery
                .cuts
                .iter()
                .map(|cut| (cut.offset, cut.len, cut.reason))
                .collect();
            assert_eq!(cuts, expected, "{:?}", std::str::from_utf8(name));
            assert_eq!(recovery.kept, 250);
            assert_set_aside(&directory, &recovery, &before);
            // Reported once: the next opening finds a whole blob.
            drop(writer);
            let (writer, again) = open_recovered(&context, name, 2 * PHYSICAL, cache(2)).await;
            assert!(again.is_clean(), "{again:?}");
            assert_eq!(writer.size(), 250);
            let (writer, _) = writer.append(&data[250..]).await.unwrap();
            writer.sync().await.unwrap();
            assert_eq!(reopen_and_replay(&context, name, 3 * PHYSICAL).await, data);
        }
    });
}

/// Every byte of `sealed`, or the error that stopped the replay.
async fn try_replay(sealed: &Sealed) -> Result<Vec<u8>, Error> {
    let buffer = NonZeroUsize::new(2 * PHYSICAL).unwrap();
    let mut replay = sealed.replay(buffer, ReadOptions::DONT_CACHE)?;
    let mut out = Vec::new();
    while replay.ensure(1).await? {
        let len = replay.remaining();
        out.extend_from_slice(&replay.copy_to_bytes(len));
    }
    Ok(out)
}

/// How one damaged copy of a blob opened.
#[derive(Debug, Default)]
struct Outcomes {
    whole: usize,
    refused: usize,
    reported: usize,
}

/// Opens a copy of `pristine` (whose first `acknowledged` bytes are `data[..acknowledged]`,
/// all synced) damaged by `damage`, strictly and then setting aside, and checks that no
/// acknowledged byte is lost silently: the blob opens whole, or is refused unchanged, or opens
/// with a report whose set-aside file holds every cut byte, and never hands out a byte that
/// was not appended.
async fn open_damaged(
    context: &Context,
    directory: &Path,
    name: &str,
    damaged: &[u8],
    (data, acknowledged): (&[u8], usize),
    outcomes: &mut Outcomes,
) {
    let path = blob_path(directory, name.as_bytes());
    std::fs::write(&path, damaged).unwrap();
    let (blob, size) = context.open("paged", name.as_bytes()).await.unwrap();
    let strict = Writer::open(blob, size, 2 * PHYSICAL, cache(2), TornTail::Refuse).await;
    let strict = match strict {
        Ok((writer, recovery)) => {
            assert!(recovery.is_clean(), "{name}: strict, yet cut: {recovery:?}");
            drop(writer);
            None
        }
        Err(error) => {
            assert!(
                matches!(error, Error::BlobCorrupt { .. } | Error::BlobTorn { .. }),
                "{name}: {error:?}"
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                damaged,
                "{name}: refused unchanged"
            );
            Some(error)
        }
    };
    std::fs::write(&path, damaged).unwrap();
    let (blob, size) = context.open("paged", name.as_bytes()).await.unwrap();
    let (writer, recovery) = match Writer::new(blob, size, 2 * PHYSICAL, cache(2)).await {
        Ok(opened) => opened,
        Err(error) => {
            assert!(
                matches!(error, Error::BlobCorrupt { .. }),
                "{name}: {error:?}"
            );
            assert!(
                matches!(strict, Some(Error::BlobCorrupt { .. })),
                "{name}: {strict:?}"
            );
            assert_eq!(
                std::fs::read(&path).unwrap(),
                damaged,
                "{name}: refused unchanged"
            );
            outcomes.refused += 1;
            return;
        }
    };
    let kept = writer.size() as usize;
    assert_eq!(kept as u64, recovery.kept, "{name}");
    let (sealed, _) = writer.seal().await.unwrap();
    let replayed = match try_replay(&sealed).await {
        Ok(replayed) => replayed,
        // Damage before the last page: refused when read, with its offset.
        Err(Error::BlobCorrupt { offset, .. }) => {
            assert!(
                offset < recovery.kept / u64::from(PAGE) * PHYSICAL as u64,
                "{name}"
            );
            outcomes.refused += 1;
            return;
        }
        Err(error) => panic!("{name}: {error:?}"),
    };
    assert_eq!(
        replayed,
        &data[..kept],
        "{name}: only appended bytes, in order"
    );
    if recovery.is_clean() {
        assert_eq!(
            kept, acknowledged,
            "{name}: an acknowledged byte lost without a report"
        );
        assert!(
            strict.is_none(),
            "{name}: whole, yet refused strictly: {strict:?}"
        );
        outcomes.whole += 1;
    } else {
        let first = recovery.cuts[0];
        assert!(
            matches!(&strict, Some(Error::BlobTorn { offset, len, .. })
                if *offset == first.offset && *len == damaged.len() as u64 - first.offset),
            "{name}: strict opening refuses the same cut: {strict:?} vs {recovery:?}"
        );
        assert_set_aside(directory, &recovery, damaged);
        outcomes.reported += 1;
    }
    // Reported once.
    drop(sealed);
    let (writer, again) = open_recovered(context, name.as_bytes(), 2 * PHYSICAL, cache(2)).await;
    assert!(again.is_clean(), "{name}: reported again: {again:?}");
    assert_eq!(writer.size() as usize, kept, "{name}");
}

/// Every single-bit flip of a blob's last two pages, every truncation of them, and each of
/// them zeroed, on a blob whose last page is partial (two slots: the synced state before the
/// last sync, and the last) and on one whose bytes end at a page boundary (an end page): not
/// one acknowledged byte is lost without a report, a strict opening refuses every cut, and
/// the cut bytes are all in the set-aside file.
#[test]
fn every_flip_and_truncation_of_the_last_pages_is_kept_refused_or_reported() {
    with_directory(|context, directory| async move {
        let data = stream(0..300);
        // (name, appends each followed by a sync): the first ends in a page of 80 bytes
        // whose trailer also holds its state at 50; the second at a page boundary.
        let blobs = [("partial", [250usize, 280]), ("boundary", [200, 300])];
        let mut outcomes = Outcomes::default();
        for (pristine, syncs) in blobs {
            let mut writer = open(&context, pristine.as_bytes(), 2 * PHYSICAL, cache(2)).await;
            let mut at = 0;
            for end in syncs {
                writer = writer
                    .append(&data[at..end])
                    .await
                    .unwrap()
                    .0
                    .sync()
                    .await
                    .unwrap();
                at = end;
            }
            drop(writer);
            let bytes = std::fs::read(blob_path(&directory, pristine.as_bytes())).unwrap();
            assert_eq!(bytes.len() % PHYSICAL, 0);
            let last_two = bytes.len() - 2 * PHYSICAL;
            let mut damages: Vec<(String, Vec<u8>)> = Vec::new();
            for bit in 0..2 * PHYSICAL * 8 {
                let mut damaged = bytes.clone();
                damaged[last_two + bit / 8] ^= 1 << (bit % 8);
                damages.push((format!("{pristine}-flip-{bit}"), damaged));
            }
            for cut in 1..=2 * PHYSICAL {
                damages.push((
                    format!("{pristine}-cut-{cut}"),
                    bytes[..bytes.len() - cut].to_vec(),
                ));
            }
            for pages in 1..=2 {
                let mut damaged = bytes.clone();
                damaged[bytes.len() - pages * PHYSICAL..].fill(0);
                damages.push((format!("{pristine}-zero-{pages}"), damaged));
            }
            for (name, damaged) in damages {
                let acknowledged = (at, &data[..]);
                open_damaged(
                    &context,
                    &directory,
                    &name,
                    &damaged,
                    (acknowledged.1, acknowledged.0),
                    &mut outcomes,
                )
                .await;
                context
                    .remove("paged", Some(name.as_bytes()))
                    .await
                    .unwrap();
            }
        }
        println!("damaged copies: {outcomes:?}");
        assert!(outcomes.whole > 0 && outcomes.refused > 0 && outcomes.reported > 0);
    });
}

/// A blob whose bytes end at a page boundary is closed by an end page; cut at that page
/// boundary (the end page gone), its opening reports the missing end, and a strict one
/// refuses it. Truncating to a page boundary closes the blob the same way.
#[test]
fn a_blob_cut_at_a_page_boundary_reports_its_missing_end() {
    with_directory(|context, directory| async move {
        let data = stream(0..300);
        let path = blob_path(&directory, b"boundary");
        let writer = open(&context, b"boundary", 2 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data).await.unwrap();
        drop(writer.sync().await.unwrap());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            4 * PHYSICAL as u64,
            "an end page"
        );
        let (writer, recovery) =
            open_recovered(&context, b"boundary", 2 * PHYSICAL, cache(2)).await;
        assert!(recovery.is_clean(), "{recovery:?}");
        assert_eq!(writer.size(), 300);
        drop(writer);

        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(3 * PHYSICAL as u64).unwrap();
        let (blob, size) = context.open("paged", b"boundary").await.unwrap();
        let strict = Writer::open(blob, size, 2 * PHYSICAL, cache(2), TornTail::Refuse).await;
        assert!(
            matches!(&strict, Err(Error::BlobTorn { offset, len: 0, .. }) if *offset == 3 * PHYSICAL as u64),
            "{:?}",
            strict.map(|(_, recovery)| recovery)
        );
        let (writer, recovery) =
            open_recovered(&context, b"boundary", 2 * PHYSICAL, cache(2)).await;
        let cuts: Vec<_> = recovery
            .cuts
            .iter()
            .map(|cut| (cut.offset, cut.len, cut.reason))
            .collect();
        assert_eq!(cuts, [(3 * PHYSICAL as u64, 0, CutReason::MissingEnd)]);
        assert_eq!(recovery.set_aside, None, "nothing in the blob to keep");
        assert_eq!(writer.size(), 300);
        drop(writer);
        let (writer, again) = open_recovered(&context, b"boundary", 2 * PHYSICAL, cache(2)).await;
        assert_eq!(
            again, recovery,
            "reported until a sync closes it, and unchanged"
        );
        let writer = writer.sync().await.unwrap();
        drop(writer);
        let (writer, again) = open_recovered(&context, b"boundary", 2 * PHYSICAL, cache(2)).await;
        assert!(again.is_clean(), "closed by the sync's end page: {again:?}");

        // Truncated to a page boundary: closed too.
        let writer = writer.truncate(200).await.unwrap();
        drop(writer);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * PHYSICAL as u64);
        let (writer, recovery) =
            open_recovered(&context, b"boundary", 2 * PHYSICAL, cache(2)).await;
        assert!(recovery.is_clean(), "{recovery:?}");
        assert_eq!(writer.size(), 200);
    });
}

/// `truncate_aside` keeps the bytes it cuts (trailers and all, as the blob held them) in a
/// file beside the blob before it cuts them, and cuts like `truncate`.
#[test]
fn truncate_aside_keeps_what_it_cuts() {
    with_directory(|context, directory| async move {
        let data = stream(0..250);
        let path = blob_path(&directory, b"aside");
        let writer = open(&context, b"aside", 2 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data).await.unwrap();
        let writer = writer.sync().await.unwrap();
        let before = std::fs::read(&path).unwrap();
        let (writer, set_aside) = writer.truncate_aside(130).await.unwrap();
        let set_aside = set_aside.expect("bytes were cut");
        assert_eq!(set_aside.offset, PHYSICAL as u64 + 30);
        assert_eq!(set_aside.len, before.len() as u64 - set_aside.offset);
        let kept = std::fs::read(directory.join(&set_aside.file)).unwrap();
        assert_eq!(kept, &before[PHYSICAL + 30..]);
        assert_eq!(writer.size(), 130);
        let (writer, nothing) = writer.truncate_aside(130).await.unwrap();
        assert_eq!(nothing, None, "nothing cut, nothing kept");
        drop(writer);
        assert_eq!(
            reopen_and_replay(&context, b"aside", 2 * PHYSICAL).await,
            &data[..130]
        );
    });
}

/// A last page whose trailer was written but validates nothing (a lost machine wrote its
/// trailer and not all its data, or it was damaged): `salvage_page` reads every page that
/// still verifies and reports the failed one as such; a strict opening refuses it, naming
/// where the cut would start and how long it is, and changes nothing; an opening sets it
/// aside and reports it. Set aside twice at the same offset, the second copy takes a name of
/// its own, and the first is left as it was.
#[test]
fn a_failed_last_page_is_set_aside_and_reported() {
    with_directory(|context, directory| async move {
        let data = stream(0..250);
        let path = blob_path(&directory, b"damaged-tail");
        let writer = open(&context, b"damaged-tail", 2 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data).await.unwrap();
        writer.sync().await.unwrap();
        flip(&path, 2 * PHYSICAL as u64 + 10);
        let before = std::fs::read(&path).unwrap();

        let (blob, size) = context.open("paged", b"damaged-tail").await.unwrap();
        let page = NonZeroU16::new(PAGE).unwrap();
        for index in 0..2 {
            let bytes = runtime::buffer::paged::salvage_page(&blob, page, index)
                .await
                .unwrap()
                .expect("an intact page verifies");
            let start = index as usize * PAGE as usize;
            assert_eq!(bytes.as_ref(), &data[start..start + PAGE as usize]);
        }
        let damaged = runtime::buffer::paged::salvage_page(&blob, page, 2).await;
        assert!(matches!(damaged, Ok(None)), "{damaged:?}");
        let past = runtime::buffer::paged::salvage_page(&blob, page, 3).await;
        assert!(matches!(past, Ok(None)), "{past:?}");

        let strict = Writer::open(blob, size, 2 * PHYSICAL, cache(2), TornTail::Refuse).await;
        let Err(error) = strict else {
            panic!("a strict opening refuses a failed page");
        };
        assert!(
            matches!(&error, Error::BlobTorn { offset, len, .. }
                if *offset == 2 * PHYSICAL as u64 && *len == PHYSICAL as u64),
            "{error:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing changed");

        let mut kept_before = None;
        for round in 1..=2 {
            std::fs::write(&path, &before).unwrap();
            let (writer, recovery) =
                open_recovered(&context, b"damaged-tail", 2 * PHYSICAL, cache(2)).await;
            assert_eq!(writer.size(), 200);
            let cuts: Vec<_> = recovery
                .cuts
                .iter()
                .map(|cut| (cut.offset, cut.len, cut.reason))
                .collect();
            assert_eq!(
                cuts,
                [(2 * PHYSICAL as u64, PHYSICAL as u64, CutReason::FailedPages)]
            );
            assert_set_aside(&directory, &recovery, &before);
            let file = recovery.set_aside.unwrap().file;
            let expected = format!(".cut-{}", 2 * PHYSICAL);
            if round == 1 {
                assert!(file.ends_with(&expected), "{file}");
                kept_before = Some(file);
            } else {
                let first = kept_before.clone().unwrap();
                assert!(file.ends_with(&format!("{expected}.2")), "{file}");
                let kept = std::fs::read(directory.join(&first)).unwrap();
                assert_eq!(kept, &before[2 * PHYSICAL..], "the first copy is untouched");
            }
        }
    });
}

/// A partial page rewritten by several syncs, with the writer reopened before each: its
/// trailer alternates slots, keeping the one recovery found, so a torn last rewrite falls back
/// to the previous sync's length however many rewrites came before.
#[test]
fn rewrites_of_a_partial_page_keep_the_last_synced_slot_across_reopens() {
    with_directory(|context, directory| async move {
        let data = stream(0..40);
        let path = blob_path(&directory, b"slots");
        let trailer = || {
            let bytes = std::fs::read(&path).unwrap_or_default();
            bytes.get(PAGE as usize..PHYSICAL).map(<[u8]>::to_vec)
        };
        for end in [10usize, 20, 30, 40] {
            let writer = open(&context, b"slots", PHYSICAL, cache(1)).await;
            assert_eq!(writer.size(), end as u64 - 10);
            let before = trailer();
            let (writer, _) = writer.append(&data[end - 10..end]).await.unwrap();
            writer.sync().await.unwrap();
            // The rewrite left the slot of the synced state byte for byte where it was (a
            // torn trailer write can then only damage the new slot).
            if let (Some(before), Some(after)) = (before, trailer()) {
                let kept = (0..2).any(|half| {
                    let slot = half * 6..half * 6 + 6;
                    before[slot.clone()] != [0; 6] && before[slot.clone()] == after[slot]
                });
                assert!(kept, "end {end}: {before:?} -> {after:?}");
            }
        }
        // The last rewrite torn: one of its new bytes never reached the disk.
        flip(&blob_path(&directory, b"slots"), 35);
        let writer = open(&context, b"slots", PHYSICAL, cache(1)).await;
        assert_eq!(writer.size(), 30, "back to the previous sync");
        let (sealed, _) = writer.seal().await.unwrap();
        assert_eq!(replay_all(&sealed, PHYSICAL).await, &data[..30]);
    });
}

/// After a lost machine, writes since the last sync may have reached the disk out of order:
/// here the rewrite of a partial page was lost while the pages after it landed. Recovery keeps
/// them (their checksums are valid); a replay hands out every byte up to the hole, including
/// the partial page's synced start, then reports the hole; `truncate` there makes the blob
/// whole, and appends continue.
#[test]
fn a_lost_machine_tail_is_recovered_by_replaying_and_truncating() {
    with_directory(|context, directory| async move {
        use std::os::unix::fs::FileExt as _;
        let data = stream(0..600);
        let path = blob_path(&directory, b"lost");
        let writer = open(&context, b"lost", 2 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data[..250]).await.unwrap();
        let writer = writer.sync().await.unwrap();
        // Page 2 as the sync left it: 50 bytes.
        let mut synced_page = vec![0; PHYSICAL];
        let file = std::fs::File::open(&path).unwrap();
        file.read_exact_at(&mut synced_page, 2 * PHYSICAL as u64)
            .unwrap();
        let (writer, _) = writer.append(&data[250..]).await.unwrap();
        writer.sync().await.unwrap();
        // The machine lost page 2's rewrite but kept pages 3 to 5.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&synced_page, 2 * PHYSICAL as u64)
            .unwrap();

        let writer = open(&context, b"lost", 2 * PHYSICAL, cache(2)).await;
        assert_eq!(
            writer.size(),
            600,
            "the last page validates, so the tail stays"
        );
        let (sealed, _) = writer.seal().await.unwrap();
        let mut replayed = 0;
        // Reads of one page, and of three, where the short page 2 ends the read [0, 2].
        for buffer in [4 * PHYSICAL, 12 * PHYSICAL] {
            for options in read_paths() {
                let mut replay = sealed
                    .replay(NonZeroUsize::new(buffer).unwrap(), options)
                    .unwrap();
                let error = replay.ensure(600).await.unwrap_err();
                assert!(
                    matches!(error, Error::BlobCorrupt { offset, .. } if offset == 2 * PHYSICAL as u64),
                    "{error:?}"
                );
                replayed = replay.remaining();
                assert_eq!(replayed, 250, "every acknowledged byte, up to the hole");
                assert_eq!(replay.copy_to_bytes(replayed).as_ref(), &data[..250]);
                assert!(replay.ensure(1).await.is_err(), "the hole is still there");
                assert_eq!(replay.remaining(), 0, "nothing is handed out twice");
            }
        }

        let writer = open(&context, b"lost", 2 * PHYSICAL, cache(2)).await;
        let too_far = writer.truncate(601).await.unwrap_err();
        assert!(matches!(too_far, Error::BlobTooShort { .. }), "{too_far:?}");
        let writer = open(&context, b"lost", 2 * PHYSICAL, cache(2)).await;
        let writer = writer.truncate(replayed as u64).await.unwrap();
        assert_eq!(writer.size(), 250);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * PHYSICAL as u64);
        let (writer, _) = writer.append(&data[250..]).await.unwrap();
        writer.sync().await.unwrap();
        assert_eq!(
            reopen_and_replay(&context, b"lost", 4 * PHYSICAL).await,
            data
        );
    });
}

/// Truncating anywhere: inside the buffered bytes (in the first buffered page or a later
/// one), below or above a partial page's synced length, inside a written page, on a page
/// boundary, at the end and to 0. The cut bytes never come back (not from the cache either),
/// the kept ones all do, and appends continue at the cut.
#[test]
fn truncate_cuts_anywhere_and_appends_continue_there() {
    const LEN: usize = 1230;
    with_directory(|context, _| async move {
        let data = stream(0..LEN as u64);
        let other = stream(5000..5000 + LEN as u64);
        // (where a sync makes a partial page durable, if anywhere; where to cut). The buffer
        // holds five pages, so after every append pages 10..13 are buffered.
        let cases = [
            (None, 1180),
            (None, 1010),
            (None, 950),
            (Some(1050), 1020),
            (Some(1050), 1000),
            (Some(1050), 1100),
            (Some(1050), LEN as u64),
            (None, LEN as u64),
            (None, 420),
            (None, 300),
            (Some(350), 420),
            (None, 0),
        ];
        for (sync_at, cut) in cases {
            let case = format!("synced at {sync_at:?}, cut at {cut}");
            let writer = open(&context, b"cut", 5 * PHYSICAL, cache(8)).await;
            let (mut writer, _) = writer.append(&data[..sync_at.unwrap_or(0)]).await.unwrap();
            if sync_at.is_some() {
                writer = writer.sync().await.unwrap();
            }
            let (writer, _) = writer.append(&data[sync_at.unwrap_or(0)..]).await.unwrap();
            // Cache a few pages, so stale copies would show.
            let read = writer.read_at(0, 600).await.unwrap();
            assert_eq!(read.as_ref(), &data[..600]);
            let writer = writer.truncate(cut).await.unwrap();
            assert_eq!(writer.size(), cut, "{case}");
            let cut = cut as usize;
            let read = writer.read_at(0, cut).await.unwrap();
            assert_eq!(read.as_ref(), &data[..cut], "{case}, kept bytes");
            // What truncate kept is durable: a writer opened now finds it all.
            drop(writer);
            let writer = open(&context, b"cut", 5 * PHYSICAL, cache(8)).await;
            assert_eq!(writer.size(), cut as u64, "{case}, reopened");
            let (writer, _) = writer.append(&other[cut..]).await.unwrap();
            let mut expected = data[..cut].to_vec();
            expected.extend_from_slice(&other[cut..]);
            let read = writer.read_at(0, LEN).await.unwrap();
            assert_eq!(read.as_ref(), &expected[..], "{case}, through the writer");
            let writer = writer.sync().await.unwrap();
            drop(writer);
            let writer = open(&context, b"cut", 5 * PHYSICAL, cache(8)).await;
            let (sealed, _) = writer.seal().await.unwrap();
            assert_eq!(replay_all(&sealed, 2 * PHYSICAL).await, expected, "{case}");
            context.remove("paged", Some(b"cut")).await.unwrap();
        }
    });
}

/// A writer dropped right after an append that left its buffer's write in flight: a new
/// writer on the same file waits for that write, then finds its pages, instead of recovering
/// first and having the old write land on what it writes next.
#[test]
fn a_writer_dropped_with_a_write_in_flight_is_waited_for() {
    with_directory(|context, _| async move {
        let data = stream(0..800);
        for round in 0..20 {
            let name = format!("dropped-{round}");
            let writer = open(&context, name.as_bytes(), 2 * PHYSICAL, cache(2)).await;
            // Exactly two buffers: the second's write is in flight when the append returns.
            let (writer, _) = writer.append(&data[..400]).await.unwrap();
            drop(writer);
            let writer = open(&context, name.as_bytes(), 2 * PHYSICAL, cache(2)).await;
            assert_eq!(
                writer.size(),
                400,
                "round {round}: the dropped write was waited for"
            );
            let (writer, _) = writer.append(&data[400..]).await.unwrap();
            let (sealed, sync) = writer.seal().await.unwrap();
            sync.await.unwrap();
            assert_eq!(
                replay_all(&sealed, 2 * PHYSICAL).await,
                data,
                "round {round}"
            );
        }
    });
}

/// A dropped `ensure` loses nothing: its reads stay with the replay.
#[test]
fn a_dropped_ensure_loses_no_bytes() {
    with_directory(|context, _| async move {
        let data = stream(0..2000);
        let writer = open(&context, b"dropped", 4 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data).await.unwrap();
        let (sealed, _) = writer.seal().await.unwrap();
        let mut replay: Replay = sealed
            .replay(
                NonZeroUsize::new(4 * PHYSICAL).unwrap(),
                ReadOptions::DONT_CACHE,
            )
            .unwrap();
        for _ in 0..5 {
            // Polled once (reads issued, maybe some taken) and dropped.
            let _ = replay.ensure(data.len()).now_or_never();
        }
        assert!(replay.ensure(data.len()).await.unwrap());
        assert_eq!(replay.copy_to_bytes(data.len()).as_ref(), data);
        assert!(!replay.ensure(1).await.unwrap());
    });
}

/// A replay of pages in the page cache reads and verifies them on the calling thread: its
/// `ensure` is ready at the first poll, with no ring round trip. Consumed in awkward steps
/// (across pages and reads), it hands out every byte once, in order.
#[test]
fn a_cached_replay_is_ready_at_its_first_poll() {
    with_directory(|context, directory| async move {
        let data = stream(0..2050);
        let writer = open(&context, b"cached", 4 * PHYSICAL, cache(2)).await;
        let (writer, _) = writer.append(&data).await.unwrap();
        let (sealed, sync) = writer.seal().await.unwrap();
        sync.await.unwrap();
        // Read just now, so the pages are in the page cache.
        let on_disk = std::fs::read(blob_path(&directory, b"cached")).unwrap();
        assert_eq!(on_disk.len(), 21 * PHYSICAL);
        // Reads of four pages each (a quarter of the buffer), so pages are handed out across
        // trailers within a read as well as across reads.
        let mut replay = sealed
            .replay(
                NonZeroUsize::new(16 * PHYSICAL).unwrap(),
                ReadOptions::default(),
            )
            .unwrap();
        let mut out = Vec::new();
        for step in [1usize, 99, 100, 250, 37, 500, 63].into_iter().cycle() {
            let ensured = replay.ensure(step).now_or_never();
            let more = ensured
                .expect("cached pages are ready at the first poll")
                .unwrap();
            let take = step.min(replay.remaining());
            if step % 2 == 0 {
                out.extend_from_slice(&replay.copy_to_bytes(take));
            } else {
                let mut left = take;
                while left > 0 {
                    let chunk = replay.chunk();
                    assert!(!chunk.is_empty() && chunk.len() <= PAGE as usize);
                    let len = chunk.len().min(left);
                    out.extend_from_slice(&chunk[..len]);
                    replay.advance(len);
                    left -= len;
                }
            }
            if !more && replay.remaining() == 0 {
                break;
            }
        }
        assert_eq!(out, data);
    });
}

/// Buffers smaller than one physical page are refused with a message saying what is allowed.
#[test]
fn buffers_that_hold_no_page_are_refused() {
    with_directory(|context, _| async move {
        let (blob, size) = context.open("paged", b"small").await.unwrap();
        let error = Writer::new(blob, size, PHYSICAL - 1, cache(1))
            .await
            .unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, Error::BlobFailed(..)), "{error:?}");
        assert!(message.contains("at least 112 bytes"), "{message}");

        let writer = open(&context, b"small", PHYSICAL, cache(1)).await;
        let (sealed, _) = writer.seal().await.unwrap();
        let error = sealed
            .replay(
                NonZeroUsize::new(PHYSICAL - 1).unwrap(),
                ReadOptions::default(),
            )
            .unwrap_err();
        assert!(
            error.to_string().contains("replay buffer of 111 bytes"),
            "{error}"
        );
        assert_eq!(replay_all(&sealed, PHYSICAL).await, Vec::<u8>::new());
    });
}

const CHILD: &str = "RUNTIME_PAGED_KILL_CHILD";

/// The child: recovers the blob, checks it holds a prefix of the stream, then appends random
/// slices of the stream with syncs (and now and then a seal and a fresh writer), printing each
/// acknowledged size, until it is killed.
fn child(directory: &str, seed: u64) {
    Runner::new(Config::new().with_storage_directory(directory)).start(move |context| async move {
        let mut rng = Rng(seed);
        let mut writer = open(&context, b"log", 3 * PHYSICAL, cache(4)).await;
        println!("recovered {}", writer.size());
        loop {
            let size = writer.size();
            let len = rng.below(350);
            let (next, _) = writer.append(&stream(size..size + len)).await.unwrap();
            writer = next;
            match rng.below(8) {
                0..=2 => {
                    writer = writer.sync().await.unwrap();
                    println!("acked {}", writer.size());
                }
                3 => {
                    let (sealed, sync) = writer.seal().await.unwrap();
                    sync.await.unwrap();
                    println!("acked {}", sealed.size());
                    drop(sealed);
                    writer = open(&context, b"log", 3 * PHYSICAL, cache(4)).await;
                }
                _ => {}
            }
        }
    });
}

/// Rounds of a child process that appends and syncs and is killed with SIGKILL mid-stream:
/// after each, a new runner recovers the blob and replays it, and finds every acknowledged
/// byte, unchanged, followed only by bytes of the stream. The next child continues the blob.
#[test]
fn acknowledged_bytes_survive_sigkill_mid_append() {
    if let Ok(directory) = std::env::var(CHILD) {
        let seed = std::env::var("RUNTIME_PAGED_SEED")
            .unwrap()
            .parse()
            .unwrap();
        child(&directory, seed);
        return;
    }
    let directory = Config::new().storage_directory().clone();
    std::fs::create_dir_all(&directory).unwrap();
    let mut rng = Rng(0x05EE_D0F0_A6E5);
    let mut acknowledged = 0u64;
    for round in 0..16u64 {
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "acknowledged_bytes_survive_sigkill_mid_append",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &directory)
            .env("RUNTIME_PAGED_SEED", (round + 1).to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let kill_after = 5 + rng.below(200);
        let mut acks = 0;
        for line in BufReader::new(process.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(size) = line.strip_prefix("recovered ") {
                let recovered: u64 = size.parse().unwrap();
                assert!(
                    recovered >= acknowledged,
                    "round {round}: {recovered} < {acknowledged}"
                );
            } else if let Some(size) = line.strip_prefix("acked ") {
                acknowledged = size.parse().unwrap();
                acks += 1;
                if acks == kill_after {
                    break;
                }
            }
        }
        process.kill().unwrap();
        process.wait().unwrap();
        assert_eq!(acks, kill_after, "round {round}: the child stopped early");

        let check = directory.clone();
        Runner::new(Config::new().with_storage_directory(&check)).start(
            move |context| async move {
                let writer = open(&context, b"log", 3 * PHYSICAL, cache(4)).await;
                let size = writer.size();
                assert!(
                    size >= acknowledged,
                    "round {round}: {size} < {acknowledged} acknowledged"
                );
                let (sealed, _) = writer.seal().await.unwrap();
                let replayed = replay_all(&sealed, 7 * PHYSICAL).await;
                assert!(
                    replayed == stream(0..size),
                    "round {round}: the replay differs from the stream"
                );
            },
        );
    }
    std::fs::remove_dir_all(&directory).unwrap();
}
