//! I/O on two workers: TCP ping-pong against tokio's `multi_thread` runtime and monoio, and blob
//! reads and writes against `tokio::fs` and plain `pread`/`pwrite` on a std thread.
//!
//! TCP: the server runs on the runtime under test and echoes 1 KiB messages; the client is the
//! same for every runtime: one std thread per connection with a blocking `std::net::TcpStream`
//! (`TCP_NODELAY`), each writing a message and reading its echo in a loop. Every connection
//! makes one untimed round trip first, so the server has accepted it and runs its echo task
//! before the clock starts; then all clients start together. A sample reports round trips per
//! second (all round trips over the wall time until the last client finished) and the p99 of
//! the round-trip latencies.
//!
//! Blobs: a 64 MiB file written once and read once (so it is in the page cache) for random
//! 4 KiB reads, and 4 KiB writes made durable one by one, with `sync` after each write or with a
//! synchronous write (`WriteOptions::SYNC` against `O_DSYNC`).
//!
//! Every sample builds a fresh runtime; only the workload is timed. The runtimes alternate
//! sample by sample in this one process (ours, then each peer), so slow drifts of a shared
//! machine hit all of them alike.
//!
//! Run with `cargo run --release -p benches --bin runtime_io`.

use std::fs::File;
use std::io::{SeekFrom, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use benches::{Spread, median};
use futures::channel::oneshot;
use runtime::prelude::*;
use runtime::{Config, Context, ReadOptions, Runner, WriteOptions};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Workers of every runtime under test: ours and tokio's pool, monoio's threads.
const WORKERS: usize = 2;
const WARMUPS: usize = 1;
const SAMPLES: usize = 3;

/// Bytes of a ping and of its pong.
const MESSAGE: usize = 1024;
/// Round trips of a sample, split evenly across its connections.
const ROUND_TRIPS: usize = 50_000;
/// Connections of each ping-pong row.
const CONNECTIONS: [usize; 4] = [1, 16, 64, 256];

/// Bytes of a blob read or write.
const BLOCK: usize = 4096;
/// Size of the file the random reads hit.
const READ_FILE: u64 = 64 << 20;
/// Random reads per sample.
const READS: usize = 20_000;
/// Tasks (threads for the plain peer) sharing the reads of the concurrent row.
const READERS: usize = 16;
/// Durable writes per sample.
const WRITES: usize = 500;

/// The bytes of every blob write.
static WRITE_BLOCK: [u8; BLOCK] = [0xA5; BLOCK];

/// The partition of our blobs.
const PARTITION: &str = "bench";

/// `BENCH_FILTER=<text>` keeps the rows whose name contains `<text>`.
fn selected(name: &str) -> bool {
    let filter = std::env::var("BENCH_FILTER").unwrap_or_default();
    name.contains(filter.as_str())
}

/// `BENCH_SAMPLES=<n>` overrides the number of samples.
fn samples() -> usize {
    benches::samples(SAMPLES)
}

/// Runs `f` as the root of a fresh two-worker runtime of ours keeping blobs in `storage`.
fn ours<F, Fut>(storage: &Path, f: F) -> Fut::Output
where
    F: FnOnce(Context) -> Fut,
    Fut: Future,
{
    let mut ring = runtime::RingConfig::default();
    if let Some(count) = std::env::var("BENCH_RECEIVE_BUFFERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        ring.receive_buffers = count;
    }
    let workers = std::env::var("BENCH_OURS_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WORKERS);
    let mut config = Config::default()
        .with_worker_threads(workers)
        .with_ring_config(ring)
        .with_storage_directory(storage);
    if let Some(spinner) = benches::spinner_from_env() {
        config = config.with_idle_spinner(spinner);
    }
    Runner::new(config).start(f)
}

// ---------------------------------------------------------------------------------------------
// TCP ping-pong.

/// What one ping-pong sample measured.
struct NetSample {
    requests_per_second: f64,
    p99: Duration,
    /// CPU time the server's threads spent per round trip while the clients were timed.
    server_cpu_per_request: Duration,
}

/// CPU time consumed so far by the server threads of this process: the main thread (worker
/// zero for ours; parked in `block_on` or `join` for the peers) and the threads named
/// `iouring-pool-*`, `tokio-rt-worker` or `monoio-*` (read from `schedstat`, in nanoseconds).
fn server_cpu() -> Duration {
    let pid = std::process::id().to_string();
    let mut total = 0u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let comm = comm.trim();
        let server = task.file_name().to_str() == Some(pid.as_str())
            || comm.starts_with("iouring-pool")
            || comm.starts_with("tokio-rt-worker")
            || comm.starts_with("monoio-");
        if !server {
            continue;
        }
        let schedstat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
        total += schedstat
            .split_whitespace()
            .next()
            .and_then(|nanos| nanos.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(total)
}

/// The address every server binds: loopback, a port the kernel picks.
fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The client: one thread running a tokio `current_thread` event loop that drives every
/// connection (connection `i` to `servers[i % servers.len()]`), each making its share of
/// `ROUND_TRIPS` round trips once all are connected and have made one. An event loop rather
/// than a thread per connection, so that the client's own cost (context switches of hundreds
/// of threads on two cores) does not drown what the servers differ in.
fn run_clients(servers: &[SocketAddr], connections: usize) -> NetSample {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let per_connection = (ROUND_TRIPS / connections).max(1);
    let servers = servers.to_vec();
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    client.block_on(async move {
        let mut sockets = Vec::with_capacity(connections);
        for index in 0..connections {
            let mut socket = tokio::net::TcpStream::connect(servers[index % servers.len()])
                .await
                .expect("connect");
            socket.set_nodelay(true).expect("nodelay");
            // Untimed: the server has accepted this connection once it answers.
            let request = [index as u8; MESSAGE];
            let mut response = [0u8; MESSAGE];
            socket.write_all(&request).await.expect("send");
            socket.read_exact(&mut response).await.expect("recv");
            sockets.push(socket);
        }
        let start = Instant::now();
        let cpu_before = server_cpu();
        let tasks: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(index, mut socket)| {
                tokio::spawn(async move {
                    let request = [index as u8; MESSAGE];
                    let mut response = [0u8; MESSAGE];
                    let mut latencies = Vec::with_capacity(per_connection);
                    for _ in 0..per_connection {
                        let sent = Instant::now();
                        socket.write_all(&request).await.expect("send");
                        socket.read_exact(&mut response).await.expect("recv");
                        latencies.push(sent.elapsed());
                        assert_eq!(request, response, "echo");
                    }
                    // The socket stays open until the server's CPU is read: a server that
                    // ends with its last connection must not take its CPU time with it.
                    (latencies, socket)
                })
            })
            .collect();
        let mut latencies = Vec::with_capacity(per_connection * connections);
        let mut open = Vec::with_capacity(connections);
        for task in tasks {
            let (measured, socket) = task.await.expect("client");
            latencies.extend(measured);
            open.push(socket);
        }
        let elapsed = start.elapsed();
        let cpu = server_cpu().saturating_sub(cpu_before);
        drop(open);
        latencies.sort_unstable();
        let p99 = latencies[(latencies.len() * 99).div_ceil(100) - 1];
        NetSample {
            requests_per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
            p99,
            server_cpu_per_request: cpu / latencies.len() as u32,
        }
    })
}

/// Runs the clients on a thread of their own and reports their sample on a oneshot, so that a
/// server's root can await it without blocking its worker.
fn spawn_clients(
    server: SocketAddr,
    connections: usize,
) -> (std::thread::JoinHandle<()>, oneshot::Receiver<NetSample>) {
    let (report, reported) = oneshot::channel();
    let clients = std::thread::Builder::new()
        .name("client".into())
        .spawn(move || {
            let _ = report.send(run_clients(&[server], connections));
        })
        .expect("client thread");
    (clients, reported)
}

/// Ours: the root accepts every connection and spawns an echo task for each (our sockets have
/// `TCP_NODELAY` set by default).
fn ours_ping_pong(storage: &Path, connections: usize) -> NetSample {
    ours(storage, |context| async move {
        let mut listener = context.bind(loopback()).await.expect("bind");
        let server = listener.local_addr().expect("local address");
        let (clients, reported) = spawn_clients(server, connections);
        for _ in 0..connections {
            let (_, mut sink, mut stream) = listener.accept().await.expect("accept");
            drop(context.clone().spawn(move |_| async move {
                while let Ok(message) = stream.recv(MESSAGE).await {
                    if sink.send(message).await.is_err() {
                        break;
                    }
                }
            }));
        }
        let sample = reported.await.expect("clients");
        clients.join().expect("clients");
        sample
    })
}

/// tokio: the same on a two-worker `multi_thread` runtime.
fn tokio_ping_pong(connections: usize) -> NetSample {
    benches::tokio_multi(WORKERS, async move {
        let listener = tokio::net::TcpListener::bind(loopback())
            .await
            .expect("bind");
        let server = listener.local_addr().expect("local address");
        let (clients, reported) = spawn_clients(server, connections);
        for _ in 0..connections {
            let (mut socket, _) = listener.accept().await.expect("accept");
            socket.set_nodelay(true).expect("nodelay");
            drop(tokio::spawn(async move {
                let mut message = vec![0u8; MESSAGE];
                while socket.read_exact(&mut message).await.is_ok() {
                    if socket.write_all(&message).await.is_err() {
                        break;
                    }
                }
            }));
        }
        let sample = reported.await.expect("clients");
        clients.join().expect("clients");
        sample
    })
}

/// One monoio connection: echoes until the client closes it.
async fn monoio_echo(mut socket: monoio::net::TcpStream) {
    use monoio::io::{AsyncReadRentExt, AsyncWriteRentExt};
    // `read_exact` fills the vector's capacity, which `vec!` makes exactly `MESSAGE`.
    let mut message = vec![0u8; MESSAGE];
    loop {
        let (read, buffer) = socket.read_exact(message).await;
        if read.is_err() {
            return;
        }
        let (written, buffer) = socket.write_all(buffer).await;
        if written.is_err() {
            return;
        }
        message = buffer;
    }
}

/// monoio is thread-per-core: two threads, each with its own io_uring runtime and its own
/// listener (on its own port). Client connection `i` goes to thread `i % 2`, so the
/// connections split evenly and deterministically (`SO_REUSEPORT` would hash them, and an
/// uneven split would add noise that has nothing to do with the runtime). With one
/// connection, one thread serves and the other idles, as it would in production.
fn monoio_ping_pong(connections: usize) -> NetSample {
    let (bound, listening) = std::sync::mpsc::channel();
    let servers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let accepts = (worker..connections).step_by(WORKERS).count();
            let bound = bound.clone();
            let thread = std::thread::Builder::new().name(format!("monoio-{worker}"));
            thread
                .spawn(move || {
                    let mut runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                        .build()
                        .expect("monoio runtime");
                    runtime.block_on(async move {
                        let listener = monoio::net::TcpListener::bind(loopback()).expect("bind");
                        let server = listener.local_addr().expect("local address");
                        bound.send((worker, server)).expect("report the address");
                        let mut echoes = Vec::with_capacity(accepts);
                        for _ in 0..accepts {
                            let (socket, _) = listener.accept().await.expect("accept");
                            socket.set_nodelay(true).expect("nodelay");
                            echoes.push(monoio::spawn(monoio_echo(socket)));
                        }
                        for echo in echoes {
                            echo.await;
                        }
                    });
                })
                .expect("monoio thread")
        })
        .collect();
    drop(bound);
    let mut addresses = vec![loopback(); WORKERS];
    for (worker, server) in listening.iter().take(WORKERS) {
        addresses[worker] = server;
    }
    // On a thread of its own, as for the other servers: the main thread counts as a server's.
    let clients = std::thread::Builder::new().name("client".into());
    let sample = clients
        .spawn(move || run_clients(&addresses, connections))
        .expect("client thread")
        .join()
        .expect("clients");
    for server in servers {
        server.join().expect("monoio server");
    }
    sample
}

fn ping_pong_name(connections: usize) -> String {
    format!("tcp_ping_pong_{connections}")
}

fn ping_pong_table(storage: &Path) {
    let samples = samples();
    let rounds = benches::rounds(benches::ROUNDS);
    benches::print_rounds_caption(rounds, " (the p99 and CPU cells: the median only)");
    println!(
        "| workload | ours req/s | tokio req/s | monoio req/s | ours/tokio | ours/monoio | \
         p99 ours / tokio / monoio | server CPU per request ours / tokio / monoio | \
         server CPU per request ours/tokio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let rows: Vec<usize> = CONNECTIONS
        .into_iter()
        .filter(|&connections| selected(&ping_pong_name(connections)))
        .collect();
    // Per row, per runtime: each round's median rate, p99 (µs) and CPU per request (µs).
    type PerRuntime = [Vec<f64>; 3];
    let mut rates: Vec<PerRuntime> = rows.iter().map(|_| Default::default()).collect();
    let mut p99s: Vec<PerRuntime> = rows.iter().map(|_| Default::default()).collect();
    let mut cpus: Vec<PerRuntime> = rows.iter().map(|_| Default::default()).collect();
    for _ in 0..rounds {
        for (row, &connections) in rows.iter().enumerate() {
            let runs: [&dyn Fn() -> NetSample; 3] = [
                &|| ours_ping_pong(storage, connections),
                &|| tokio_ping_pong(connections),
                &|| monoio_ping_pong(connections),
            ];
            for _ in 0..WARMUPS {
                for run in runs {
                    run();
                }
            }
            let mut round_rates: [Vec<f64>; 3] = Default::default();
            let mut round_p99s: [Vec<Duration>; 3] = Default::default();
            let mut round_cpus: [Vec<Duration>; 3] = Default::default();
            for _ in 0..samples {
                for (index, run) in runs.iter().enumerate() {
                    let sample = run();
                    round_rates[index].push(sample.requests_per_second);
                    round_p99s[index].push(sample.p99);
                    round_cpus[index].push(sample.server_cpu_per_request);
                }
            }
            for index in 0..3 {
                rates[row][index].push(median_f64(&mut round_rates[index]));
                p99s[row][index].push(median(&mut round_p99s[index]).as_secs_f64() * 1e6);
                cpus[row][index].push(median(&mut round_cpus[index]).as_secs_f64() * 1e6);
            }
        }
    }
    let spread = |values: &[f64]| Spread::of(values).expect("at least one round");
    let ratio = |ours: &[f64], peer: &[f64]| {
        let per_round: Vec<f64> = ours
            .iter()
            .zip(peer)
            .map(|(ours, peer)| ours / peer)
            .collect();
        spread(&per_round)
    };
    for (row, &connections) in rows.iter().enumerate() {
        let (rate, p99, cpu) = (&rates[row], &p99s[row], &cpus[row]);
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {} | {} | {:.0} / {:.0} / {:.0} µs | \
             {:.1} / {:.1} / {:.1} µs | {} |",
            ping_pong_name(connections),
            spread(&rate[0]),
            spread(&rate[1]),
            spread(&rate[2]),
            ratio(&rate[0], &rate[1]),
            ratio(&rate[0], &rate[2]),
            spread(&p99[0]).median,
            spread(&p99[1]).median,
            spread(&p99[2]).median,
            spread(&cpu[0]).median,
            spread(&cpu[1]).median,
            spread(&cpu[2]).median,
            ratio(&cpu[0], &cpu[1]),
        );
    }
}

/// The median of `values`.
fn median_f64(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

// ---------------------------------------------------------------------------------------------
// Blobs.

/// The files of the blob workloads. Ours live in our storage directory (`ours`, partition
/// `PARTITION`); the peers' are plain files holding the same bytes.
struct Files {
    ours: PathBuf,
    read: PathBuf,
    write: PathBuf,
    dsync: PathBuf,
    /// 4 KiB-aligned offsets into the read file, the same for every runtime.
    offsets: Arc<Vec<u64>>,
}

/// A xorshift generator: the same offsets and file bytes on every run.
struct XorShift(u64);

impl XorShift {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

impl Files {
    /// Writes the 64 MiB read file for both sides, makes it durable, and reads it back so that
    /// the page cache holds it.
    fn create(directory: &Path) -> Self {
        let peer = directory.join("peer");
        std::fs::create_dir_all(&peer).expect("peer directory");
        let mut random = XorShift(0x9E37_79B9_7F4A_7C15);
        let content: Vec<u8> = (0..READ_FILE / 8)
            .flat_map(|_| random.next_u64().to_le_bytes())
            .collect();
        let files = Self {
            ours: directory.join("ours"),
            read: peer.join("read.bin"),
            write: peer.join("write.bin"),
            dsync: peer.join("dsync.bin"),
            offsets: Arc::new(
                (0..READS)
                    .map(|_| (random.next_u64() % (READ_FILE / BLOCK as u64)) * BLOCK as u64)
                    .collect(),
            ),
        };

        let mut file = File::create(&files.read).expect("create the read file");
        file.write_all(&content).expect("write the read file");
        file.sync_all().expect("sync the read file");
        drop(file);
        let warm = std::fs::read(&files.read).expect("read the read file");
        assert_eq!(warm.len() as u64, READ_FILE);

        ours(&files.ours, |context| async move {
            const CHUNK: usize = 1 << 20;
            let (blob, _) = context.open(PARTITION, b"read").await.expect("open");
            for (index, chunk) in content.chunks(CHUNK).enumerate() {
                let offset = (index * CHUNK) as u64;
                blob.write_at(offset, chunk.to_vec(), WriteOptions::default())
                    .await
                    .expect("write the read blob");
            }
            blob.sync().await.expect("sync the read blob");
            for offset in (0..READ_FILE).step_by(CHUNK) {
                let chunk = blob
                    .read_at(offset, CHUNK, ReadOptions::default())
                    .await
                    .expect("read the read blob");
                assert_eq!(chunk.len(), CHUNK);
            }
        });
        files
    }
}

/// Random reads of our read blob, `tasks` tasks sharing the offsets.
fn ours_reads(files: &Files, tasks: usize) -> Duration {
    let offsets = files.offsets.clone();
    ours(&files.ours, |context| async move {
        let (blob, len) = context.open(PARTITION, b"read").await.expect("open");
        assert_eq!(len, READ_FILE);
        let share = offsets.len() / tasks;
        let start = Instant::now();
        let readers: Vec<_> = (0..tasks)
            .map(|task| {
                let blob = blob.clone();
                let offsets = offsets.clone();
                context.clone().spawn(move |_| async move {
                    for &offset in &offsets[task * share..(task + 1) * share] {
                        let block = blob
                            .read_at(offset, BLOCK, ReadOptions::default())
                            .await
                            .expect("read");
                        assert_eq!(block.len(), BLOCK);
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.await.expect("reader");
        }
        start.elapsed()
    })
}

/// Random reads with `tokio::fs`: seek, then `read_exact`, each task with its own `File`.
fn tokio_reads(files: &Files, tasks: usize) -> Duration {
    let path = files.read.clone();
    let offsets = files.offsets.clone();
    benches::tokio_multi(WORKERS, async move {
        let mut opened = Vec::with_capacity(tasks);
        for _ in 0..tasks {
            opened.push(tokio::fs::File::open(path.as_path()).await.expect("open"));
        }
        let share = offsets.len() / tasks;
        let start = Instant::now();
        let readers: Vec<_> = opened
            .into_iter()
            .enumerate()
            .map(|(task, mut file)| {
                let offsets = offsets.clone();
                tokio::spawn(async move {
                    let mut block = vec![0u8; BLOCK];
                    for &offset in &offsets[task * share..(task + 1) * share] {
                        file.seek(SeekFrom::Start(offset)).await.expect("seek");
                        file.read_exact(&mut block).await.expect("read");
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.await.expect("reader");
        }
        start.elapsed()
    })
}

/// Random reads with `pread` (`FileExt::read_exact_at`): on this thread, or on `threads` std
/// threads sharing one `File`, started behind a barrier so that their creation is not timed.
fn plain_reads(files: &Files, threads: usize) -> Duration {
    let file = File::open(&files.read).expect("open");
    let share = files.offsets.len() / threads;
    let read = |task: usize| {
        let mut block = vec![0u8; BLOCK];
        for &offset in &files.offsets[task * share..(task + 1) * share] {
            file.read_exact_at(&mut block, offset).expect("read");
        }
    };
    if threads == 1 {
        let start = Instant::now();
        read(0);
        return start.elapsed();
    }
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        for task in 0..threads {
            let (barrier, read) = (&barrier, &read);
            scope.spawn(move || {
                barrier.wait();
                read(task);
            });
        }
        barrier.wait();
        Instant::now()
    })
    // The scope has joined every thread before the clock is read.
    .elapsed()
}

/// The offset of write `index`: the writes cover the first 2 MiB of their file.
fn write_offset(index: usize) -> u64 {
    (index * BLOCK) as u64
}

/// Ours: `write_at`, then `sync` (or a `WriteOptions::SYNC` write alone, with `dsync`),
/// `WRITES` times, from the root on the pool or from a dedicated task.
fn ours_durable_writes(files: &Files, dsync: bool, dedicated: bool) -> Duration {
    ours(&files.ours, move |context| async move {
        let writes = move |context: Context| async move {
            let name: &[u8] = if dsync { b"dsync" } else { b"write" };
            let (blob, _) = context.open(PARTITION, name).await.expect("open");
            let options = if dsync {
                WriteOptions::SYNC
            } else {
                WriteOptions::default()
            };
            let start = Instant::now();
            for index in 0..WRITES {
                blob.write_at(write_offset(index), &WRITE_BLOCK[..], options)
                    .await
                    .expect("write");
                if !dsync {
                    blob.sync().await.expect("sync");
                }
            }
            start.elapsed()
        };
        if dedicated {
            context.dedicated().spawn(writes).await.expect("writer")
        } else {
            writes(context).await
        }
    })
}

fn ours_write_sync(files: &Files) -> Duration {
    ours_durable_writes(files, false, false)
}

fn ours_write_dsync(files: &Files) -> Duration {
    ours_durable_writes(files, true, false)
}

fn ours_write_sync_dedicated(files: &Files) -> Duration {
    ours_durable_writes(files, false, true)
}

fn ours_write_dsync_dedicated(files: &Files) -> Duration {
    ours_durable_writes(files, true, true)
}

/// Opens a peer's write file for `tokio::fs`, with `O_DSYNC` if `dsync`.
async fn tokio_open_write(path: &Path, dsync: bool) -> tokio::fs::File {
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    if dsync {
        options.custom_flags(libc::O_DSYNC);
    }
    options.open(path).await.expect("open")
}

/// tokio: seek, `write_all`, then `sync_data` (which first waits for the buffered write); or,
/// with `dsync`, on an `O_DSYNC` file, seek, `write_all` and `flush` (a tokio `File` returns
/// from `write_all` before the write ran; `flush` waits for it).
fn tokio_durable_writes(files: &Files, dsync: bool) -> Duration {
    let path = if dsync {
        files.dsync.clone()
    } else {
        files.write.clone()
    };
    benches::tokio_multi(WORKERS, async move {
        let mut file = tokio_open_write(&path, dsync).await;
        let start = Instant::now();
        for index in 0..WRITES {
            file.seek(SeekFrom::Start(write_offset(index)))
                .await
                .expect("seek");
            file.write_all(&WRITE_BLOCK).await.expect("write");
            if dsync {
                file.flush().await.expect("flush");
            } else {
                file.sync_data().await.expect("sync");
            }
        }
        start.elapsed()
    })
}

fn tokio_write_sync(files: &Files) -> Duration {
    tokio_durable_writes(files, false)
}

fn tokio_write_dsync(files: &Files) -> Duration {
    tokio_durable_writes(files, true)
}

/// Opens a peer's write file for plain writes, with `O_DSYNC` if `dsync`.
fn plain_open_write(path: &Path, dsync: bool) -> File {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    if dsync {
        options.custom_flags(libc::O_DSYNC);
    }
    options.open(path).expect("open")
}

/// Plain: `pwrite`, then `fdatasync` (`File::sync_data`), on this thread.
fn plain_write_sync(files: &Files) -> Duration {
    let file = plain_open_write(&files.write, false);
    let start = Instant::now();
    for index in 0..WRITES {
        file.write_all_at(&WRITE_BLOCK, write_offset(index))
            .expect("write");
        file.sync_data().expect("sync");
    }
    start.elapsed()
}

/// Plain: `pwrite` on an `O_DSYNC` file, on this thread.
fn plain_write_dsync(files: &Files) -> Duration {
    let file = plain_open_write(&files.dsync, true);
    let start = Instant::now();
    for index in 0..WRITES {
        file.write_all_at(&WRITE_BLOCK, write_offset(index))
            .expect("write");
    }
    start.elapsed()
}

/// One blob row: a timed run on ours, on `tokio::fs` and plain.
struct BlobRow {
    name: &'static str,
    ours: fn(&Files) -> Duration,
    tokio: fn(&Files) -> Duration,
    plain: fn(&Files) -> Duration,
}

fn blob_rows() -> [BlobRow; 6] {
    [
        BlobRow {
            name: "blob_read_4k_random_20k",
            ours: |files| ours_reads(files, 1),
            tokio: |files| tokio_reads(files, 1),
            plain: |files| plain_reads(files, 1),
        },
        BlobRow {
            name: "blob_read_4k_random_20k_x16",
            ours: |files| ours_reads(files, READERS),
            tokio: |files| tokio_reads(files, READERS),
            plain: |files| plain_reads(files, READERS),
        },
        BlobRow {
            name: "blob_write_4k_sync_500",
            ours: ours_write_sync,
            tokio: tokio_write_sync,
            plain: plain_write_sync,
        },
        BlobRow {
            name: "blob_write_4k_dsync_500",
            ours: ours_write_dsync,
            tokio: tokio_write_dsync,
            plain: plain_write_dsync,
        },
        BlobRow {
            name: "blob_write_4k_sync_500_dedicated",
            ours: ours_write_sync_dedicated,
            tokio: tokio_write_sync,
            plain: plain_write_sync,
        },
        BlobRow {
            name: "blob_write_4k_dsync_500_dedicated",
            ours: ours_write_dsync_dedicated,
            tokio: tokio_write_dsync,
            plain: plain_write_dsync,
        },
    ]
}

fn blob_table(rows: &[BlobRow], files: &Files) {
    let samples = samples();
    let rounds = benches::rounds(benches::ROUNDS);
    benches::print_rounds_caption(rounds, "");
    println!(
        "| workload | ours median | tokio::fs median | plain median | ours/tokio | ours/plain |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let rows: Vec<&BlobRow> = rows.iter().filter(|row| selected(row.name)).collect();
    // Per row, per side: each round's median, in milliseconds.
    let mut medians: Vec<[Vec<f64>; 3]> = rows.iter().map(|_| Default::default()).collect();
    for _ in 0..rounds {
        for (row_index, row) in rows.iter().enumerate() {
            let runs = [row.ours, row.tokio, row.plain];
            // The warm-up also writes the blocks that the timed writes then overwrite in place.
            for _ in 0..WARMUPS {
                for run in runs {
                    run(files);
                }
            }
            let mut times: [Vec<Duration>; 3] = Default::default();
            for _ in 0..samples {
                for (index, run) in runs.iter().enumerate() {
                    times[index].push(run(files));
                }
            }
            for (index, times) in times.iter_mut().enumerate() {
                medians[row_index][index].push(median(times).as_secs_f64() * 1e3);
            }
        }
    }
    for (row_index, row) in rows.iter().enumerate() {
        let of = &medians[row_index];
        let spread = |values: &[f64]| Spread::of(values).expect("at least one round");
        let ratio = |peer: usize| {
            let per_round: Vec<f64> = of[0]
                .iter()
                .zip(&of[peer])
                .map(|(ours, peer)| ours / peer)
                .collect();
            spread(&per_round)
        };
        println!(
            "| {} | {:.2} ms | {:.2} ms | {:.2} ms | {} | {} |",
            row.name,
            spread(&of[0]),
            spread(&of[1]),
            spread(&of[2]),
            ratio(1),
            ratio(2),
        );
    }
}

fn main() {
    let directory = std::env::temp_dir().join(format!("runtime-io-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("bench directory");

    if CONNECTIONS
        .iter()
        .any(|&connections| selected(&ping_pong_name(connections)))
    {
        println!("## TCP ping-pong, 1 KiB messages over loopback (servers on two workers)\n");
        ping_pong_table(&directory.join("ours-net"));
        println!();
    }

    let rows = blob_rows();
    if rows.iter().any(|row| selected(row.name)) {
        println!("## blobs, 4 KiB blocks (time per sample; below 1 we are faster)\n");
        let files = Files::create(&directory);
        blob_table(&rows, &files);
    }

    std::fs::remove_dir_all(directory).expect("remove the bench directory");
}
