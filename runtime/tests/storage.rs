//! Blob storage through the public API: the on-disk layout, exact reads, resizes, scans and
//! removals, bad partition names refused before anything is created, and acknowledged writes
//! that survive the process being killed.

use futures::FutureExt;
use runtime::prelude::*;
use runtime::{Config, Context, Error, ReadOptions, Runner, WriteOptions};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Every entry under `directory`, recursively, relative to it.
fn tree(directory: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![directory.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(directory).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn blobs_live_at_partition_slash_hex_name_and_round_trip() {
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let inside = directory.clone();
    Runner::new(config).start(|context| async move {
        let directory = inside;
        let (blob, len) = context.open("my-part_1", b"\x00key").await.unwrap();
        assert_eq!(len, 0, "a new blob is empty");
        blob.write_at(0, b"hello world", WriteOptions::default())
            .await
            .unwrap();
        blob.write_at(6, b"there", WriteOptions::SYNC)
            .await
            .unwrap();
        blob.sync().await.unwrap();
        let path = directory.join("my-part_1").join(hex(b"\x00key"));
        assert_eq!(std::fs::read(&path).unwrap(), b"hello there");
        let read = blob.read_at(6, 5, ReadOptions::default()).await.unwrap();
        assert_eq!(read.coalesce().as_ref(), b"there");
        let uncached = blob.read_at(0, 5, ReadOptions::DONT_CACHE).await.unwrap();
        assert_eq!(uncached.coalesce().as_ref(), b"hello");
        let (again, len) = context.open("my-part_1", b"\x00key").await.unwrap();
        assert_eq!(len, 11, "open returns the length");
        drop(again);
        assert_eq!(
            tree(&directory),
            vec![
                ".hold".to_string(),
                "my-part_1".to_string(),
                format!("my-part_1/{}", hex(b"\x00key"))
            ]
        );
    });
    assert!(
        !directory.exists(),
        "the runner removes its fresh directory"
    );
}

/// On a dedicated task a plain write and a sync are made by the task's own thread: both are
/// done in their first poll, with the bytes in the file. On the pool a write is a ring
/// registration, pending after its first poll.
#[runtime::test(timeout = "20s")]
async fn dedicated_tasks_write_and_sync_from_their_own_thread(context: Context) {
    let (blob, _) = context.open("partition", b"direct").await.unwrap();
    let pooled = blob.clone();
    let mut on_pool = Box::pin(pooled.write_at(0, b"ring", WriteOptions::default()));
    let noop = &mut std::task::Context::from_waker(std::task::Waker::noop());
    assert!(
        on_pool.as_mut().poll(noop).is_pending(),
        "a ring registration"
    );
    on_pool.await.unwrap();
    let done = context
        .dedicated()
        .spawn(move |_| async move {
            let write = blob.write_at(4, b"-direct", WriteOptions::default());
            let written = write.now_or_never().expect("done in its first poll");
            let synced = blob.sync().now_or_never().expect("done in its first poll");
            written.and(synced).map(|()| blob)
        })
        .await
        .unwrap()
        .unwrap();
    let read = done.read_at(0, 11, ReadOptions::default()).await.unwrap();
    assert_eq!(read.coalesce().as_ref(), b"ring-direct");
}

#[runtime::test(timeout = "20s")]
async fn reading_past_the_end_is_an_error_not_a_short_read(context: Context) {
    let (blob, _) = context.open("partition", b"short").await.unwrap();
    blob.write_at(0, vec![7; 100], WriteOptions::default())
        .await
        .unwrap();
    match blob.read_at(90, 20, ReadOptions::default()).await {
        Err(Error::BlobTooShort {
            offset, len, end, ..
        }) => {
            assert_eq!((offset, len, end), (90, 20, 100));
        }
        other => panic!("expected BlobTooShort, got {other:?}"),
    }
    let whole = blob.read_at(0, 100, ReadOptions::default()).await.unwrap();
    assert_eq!(whole.len(), 100);
}

/// A read far past a small blob's end (1 TiB of a 5-byte blob, as a corrupt length field
/// would ask for) is `BlobTooShort` naming the real end, decided before any buffer of that
/// size is allocated (the process would abort otherwise); so is such a range in a batch.
#[runtime::test]
async fn a_huge_read_of_a_small_blob_is_refused_before_allocating(context: Context) {
    let (blob, _) = context.open("partition", b"tiny").await.unwrap();
    blob.write_at(0, b"hello".to_vec(), WriteOptions::default())
        .await
        .unwrap();
    const TIB: usize = 1 << 40;
    match blob.read_at(0, TIB, ReadOptions::default()).await {
        Err(Error::BlobTooShort {
            offset, len, end, ..
        }) => assert_eq!((offset, len, end), (0, TIB, 5)),
        other => panic!("expected BlobTooShort, got {other:?}"),
    }
    let batch = blob
        .start_read_many(&[(0, 5), (1, TIB)], ReadOptions::default())
        .await;
    match batch.await {
        Err(Error::BlobTooShort { len, end, .. }) => assert_eq!((len, end), (TIB, 5)),
        other => panic!("expected BlobTooShort, got {other:?}"),
    }
    // Many small ranges add up: past 64 KiB together, they are checked too.
    let small: Vec<(u64, usize)> = (0..100).map(|_| (4, 1024)).collect();
    let batch = blob.start_read_many(&small, ReadOptions::default()).await;
    match batch.await {
        Err(Error::BlobTooShort {
            offset, len, end, ..
        }) => assert_eq!((offset, len, end), (4, 1024, 5)),
        other => panic!("expected BlobTooShort, got {other:?}"),
    }
    let whole = blob.read_at(0, 5, ReadOptions::default()).await.unwrap();
    assert_eq!(whole.len(), 5);
}

/// A read of pages the page cache does not hold (dropped with `POSIX_FADV_DONTNEED` after a
/// sync) goes to the ring and returns the same bytes as a cached one.
#[test]
fn reads_of_uncached_pages_take_the_ring() {
    use std::os::fd::AsRawFd;
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let path = directory.join("partition").join(hex(b"cold"));
    Runner::new(config).start(|context| async move {
        let (blob, _) = context.open("partition", b"cold").await.unwrap();
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 241) as u8).collect();
        blob.write_at(0, data.clone(), WriteOptions::default())
            .await
            .unwrap();
        blob.sync().await.unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a live descriptor; advice has no memory preconditions.
        let advised =
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(advised, 0);
        let read = blob
            .read_at(1000, 60_000, ReadOptions::default())
            .await
            .unwrap();
        assert!(read.coalesce().as_ref() == &data[1000..61_000]);
        let cached = blob
            .read_at(1000, 10, ReadOptions::default())
            .await
            .unwrap();
        assert_eq!(cached.coalesce().as_ref(), &data[1000..1010]);
    });
    assert!(
        !directory.exists(),
        "the runner removes its fresh directory"
    );
}

#[runtime::test(timeout = "20s")]
async fn ranges_past_the_largest_file_offset_are_refused(context: Context) {
    let (blob, _) = context.open("partition", b"edge").await.unwrap();
    blob.write_at(0, b"start", WriteOptions::default())
        .await
        .unwrap();
    let beyond = [
        blob.read_at(u64::MAX, 1, ReadOptions::default())
            .await
            .map(drop),
        blob.write_at(i64::MAX as u64, b"x", WriteOptions::default())
            .await,
        blob.resize(u64::MAX).await,
        blob.start_read_many(&[(u64::MAX - 1, 4)], ReadOptions::default())
            .await
            .await
            .map(drop),
    ];
    for result in beyond {
        match result {
            Err(Error::BlobFailed(_, error)) => {
                assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
            }
            other => panic!("expected an invalid-input BlobFailed, got {other:?}"),
        }
    }
    let untouched = blob.read_at(0, 5, ReadOptions::default()).await.unwrap();
    assert_eq!(untouched.coalesce().as_ref(), b"start");
}

#[runtime::test(timeout = "20s")]
async fn resize_cuts_and_zero_extends(context: Context) {
    let (blob, _) = context.open("partition", b"resized").await.unwrap();
    blob.write_at(0, b"abcdef", WriteOptions::default())
        .await
        .unwrap();
    blob.resize(3).await.unwrap();
    assert!(matches!(
        blob.read_at(0, 4, ReadOptions::default()).await,
        Err(Error::BlobTooShort { end: 3, .. })
    ));
    blob.resize(5).await.unwrap();
    let read = blob.read_at(0, 5, ReadOptions::default()).await.unwrap();
    assert_eq!(read.coalesce().as_ref(), b"abc\0\0");
    let (_, len) = context.open("partition", b"resized").await.unwrap();
    assert_eq!(len, 5);
}

#[runtime::test(timeout = "20s")]
async fn scan_lists_sorted_names_and_remove_deletes_blobs_and_partitions(context: Context) {
    for name in [&b"b"[..], b"a", b"\xff\x00"] {
        context.open("listed", name).await.unwrap();
    }
    assert_eq!(
        context.scan("listed").await.unwrap(),
        vec![b"a".to_vec(), b"b".to_vec(), b"\xff\x00".to_vec()]
    );
    context.remove("listed", Some(b"b")).await.unwrap();
    assert_eq!(
        context.scan("listed").await.unwrap(),
        vec![b"a".to_vec(), b"\xff\x00".to_vec()]
    );
    assert!(matches!(
        context.remove("listed", Some(b"b")).await,
        Err(Error::BlobMissing(_))
    ));
    context.remove("listed", None).await.unwrap();
    assert!(matches!(
        context.scan("listed").await,
        Err(Error::PartitionMissing(_))
    ));
    assert!(matches!(
        context.remove("listed", None).await,
        Err(Error::PartitionMissing(_))
    ));
}

#[test]
fn invalid_partition_names_are_refused_and_create_nothing() {
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let outside = directory.parent().unwrap().to_path_buf();
    let inside = directory.clone();
    Runner::new(config).start(|context| async move {
        for bad in ["", "..", "../escape", "a/b", "/", ".", "with space", "ünï"] {
            let opened = context.open(bad, b"blob").await;
            assert!(
                matches!(opened, Err(Error::PartitionNameInvalid)),
                "{bad:?} must be refused"
            );
            let message = Error::PartitionNameInvalid.to_string();
            assert!(message.contains("letters, digits"), "{message}");
            assert_eq!(
                context.remove(bad, None).await,
                Err(Error::PartitionNameInvalid)
            );
            assert!(matches!(
                context.scan(bad).await,
                Err(Error::PartitionNameInvalid)
            ));
        }
        let empty_name = context.open("partition", b"").await;
        assert!(matches!(empty_name, Err(Error::BlobFailed(..))));
        assert_eq!(tree(&inside), vec![".hold".to_string()]);
    });
    // Nothing appeared where an escaping name would have put it either.
    assert!(!outside.join("escape").exists());
    assert!(!outside.join(hex(b"blob")).exists());
    assert!(!Path::new("/").join(hex(b"blob")).exists());
    // The runner removed its own directory, which held nothing but its lock.
    assert!(!directory.exists());
}

/// Which records the child writes, and how it makes each durable.
const RECORDS: u64 = 64;
const RECORD: usize = 512;
const CHILD: &str = "RUNTIME_STORAGE_KILL_CHILD";

fn record(index: u64) -> Vec<u8> {
    (0..RECORD)
        .map(|i| (index as usize * 31 + i) as u8)
        .collect()
}

/// Writes records `indices`, even ones with `WriteOptions::SYNC` and odd ones followed by
/// `sync()`, printing each index once it is acknowledged.
async fn write_records(context: &Context, indices: std::ops::Range<u64>) {
    let (synced, _) = context.open("durable", b"sync-writes").await.unwrap();
    let (flushed, _) = context.open("durable", b"then-sync").await.unwrap();
    for index in indices {
        let offset = index * RECORD as u64;
        if index % 2 == 0 {
            synced
                .write_at(offset, record(index), WriteOptions::SYNC)
                .await
                .unwrap();
        } else {
            flushed
                .write_at(offset, record(index), WriteOptions::default())
                .await
                .unwrap();
            flushed.sync().await.unwrap();
        }
        println!("acked {index}");
    }
}

/// The child: the first half of the records from the root (on the pool, through the ring),
/// the second half from a dedicated task (whose plain writes and syncs its own thread makes),
/// and then it waits to be killed.
fn child(directory: &str) {
    Runner::new(Config::new().with_storage_directory(directory)).start(|context| async move {
        write_records(&context, 0..RECORDS / 2).await;
        context
            .clone()
            .dedicated()
            .spawn(|context| async move { write_records(&context, RECORDS / 2..RECORDS).await })
            .await
            .unwrap();
        println!("done");
        futures::future::pending::<()>().await;
    });
}

/// A child process acknowledges durable writes and is killed with SIGKILL while it still runs;
/// a new runner on its directory reads back every acknowledged record.
#[test]
fn acknowledged_durable_writes_survive_sigkill() {
    if let Ok(directory) = std::env::var(CHILD) {
        child(&directory);
        return;
    }
    let directory = Config::new().storage_directory().clone();
    let mut process = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "acknowledged_durable_writes_survive_sigkill",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &directory)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    let lines = BufReader::new(process.stdout.take().unwrap()).lines();
    for line in lines {
        let line = line.unwrap();
        if let Some(index) = line.strip_prefix("acked ") {
            acked.push(index.parse::<u64>().unwrap());
            // Killed mid-stream, in the dedicated half, while later writes are issued.
            if acked.len() == (RECORDS * 3 / 4) as usize {
                break;
            }
        }
    }
    process.kill().unwrap();
    process.wait().unwrap();
    assert_eq!(acked.len(), (RECORDS * 3 / 4) as usize);

    Runner::new(Config::new().with_storage_directory(&directory)).start(|context| async move {
        let (synced, _) = context.open("durable", b"sync-writes").await.unwrap();
        let (flushed, _) = context.open("durable", b"then-sync").await.unwrap();
        for index in acked {
            let blob = if index % 2 == 0 { &synced } else { &flushed };
            let read = blob
                .read_at(index * RECORD as u64, RECORD, ReadOptions::default())
                .await
                .unwrap();
            assert_eq!(
                read.coalesce().as_ref(),
                &record(index)[..],
                "record {index}"
            );
        }
    });
    std::fs::remove_dir_all(&directory).unwrap();
}

/// A default config's storage directory is a fresh temporary one that only this runner knows:
/// the runner removes it, data and all, when it ends (so runs leave no directory behind).
#[test]
fn a_default_configs_directory_is_removed_with_its_data_when_the_runner_ends() {
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let inside = directory.clone();
    Runner::new(config).start(|context| async move {
        let (blob, _) = context.open("kept", b"data").await.unwrap();
        blob.write_at(0, b"stored", WriteOptions::SYNC)
            .await
            .unwrap();
        assert!(inside.join("kept").join(hex(b"data")).is_file());
    });
    assert!(
        !directory.exists(),
        "{} was left behind",
        directory.display()
    );
}

/// A directory the user chose keeps what was stored there, for the next run to read.
#[test]
fn a_chosen_directory_keeps_its_data_for_the_next_run() {
    let directory =
        std::env::temp_dir().join(format!("runtime-chosen-{}-{}", std::process::id(), line!()));
    let config = Config::new().with_storage_directory(&directory);
    Runner::new(config.clone()).start(|context| async move {
        let (blob, _) = context.open("kept", b"data").await.unwrap();
        blob.write_at(0, b"stored", WriteOptions::SYNC)
            .await
            .unwrap();
    });
    let read = Runner::new(config).start(|context| async move {
        let (blob, len) = context.open("kept", b"data").await.unwrap();
        blob.read_at(0, len as usize, ReadOptions::default())
            .await
            .unwrap()
            .coalesce()
            .to_vec()
    });
    assert_eq!(read, b"stored");
    std::fs::remove_dir_all(&directory).unwrap();
}

/// A runner that takes over a directory the moment the runner before it lets go (the two on
/// clones of one default config) keeps what it stores: the finishing runner cleans up under
/// its lock, so it never removes the lock file or the blobs of the runner after it. Before
/// the fix, the cleanup ran after the lock was released and removed the new runner's files.
#[test]
fn a_finishing_runner_never_removes_what_the_runner_taking_over_stores() {
    for _ in 0..30 {
        let config = Config::new().with_worker_threads(1);
        let directory = config.storage_directory().clone();
        let taking_over = config.clone();
        let inside = directory.clone();
        let next = Runner::new(config).start(|context| async move {
            let (blob, _) = context.open("part", b"first").await.unwrap();
            blob.write_at(0, b"gone", WriteOptions::SYNC).await.unwrap();
            // Started while this runner holds the directory: it takes it over as soon as
            // this runner lets go, racing this runner's cleanup.
            std::thread::spawn(move || {
                loop {
                    let directory = inside.clone();
                    let outcome =
                        Runner::new(taking_over.clone()).try_start(|context| async move {
                            let (blob, _) = context.open("part", b"next").await.unwrap();
                            blob.write_at(0, b"kept", WriteOptions::SYNC).await.unwrap();
                            (
                                directory.join(".hold").is_file(),
                                directory.join("part").join(hex(b"next")).is_file(),
                            )
                        });
                    match outcome {
                        Ok(files) => return files,
                        Err(Error::StartFailed(why)) if why.contains("in use") => {}
                        Err(other) => panic!("the next runner could not start: {other}"),
                    }
                }
            })
        });
        assert_eq!(
            next.join().unwrap(),
            (true, true),
            "the next runner's lock file and blob are there while it runs"
        );
        assert!(
            !directory.exists(),
            "and the last runner removed the directory"
        );
    }
}
