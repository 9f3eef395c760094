//! Network, storage and resolver operations on the rings, and storage at shutdown: they work
//! from any worker, registered writes outlive their futures and are drained at shutdown on
//! every ring, batched reads belong to the life of the worker that issued them, and resolution
//! needs a live runtime.

use super::pool::spawn_elsewhere;
use super::*;
use crate::RingConfig;
use crate::hooks::AFTER_RELEASE;
use crate::storage::{ReadOptions, WriteOptions, hex};
use crate::{IoBufs, IoBufsMut, reschedule};
use futures::executor::block_on;
use futures::future::pending;
use std::net::IpAddr;
use std::pin::pin;

/// A client on worker one pings a server task over TCP, stores the echo in a blob, syncs it
/// and reads it back: network and storage work on a worker other than worker zero.
#[test]
fn network_and_storage_on_multiple_workers() {
    Runner::new(config().with_worker_threads(2)).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = context.child("server").spawn(move |_| async move {
            let (_, mut sink, mut stream) = listener.accept().await.unwrap();
            let received = stream.recv(4).await.unwrap();
            assert_eq!(received.clone().coalesce().as_ref(), b"ping");
            sink.send(received).await.unwrap();
        });
        let client = context.child("client");
        let (client, ran_on) = spawn_elsewhere(&context, async move {
            let (mut sink, mut stream) = client.dial(address).await.unwrap();
            sink.send(b"ping".to_vec()).await.unwrap();
            let received = stream.recv(4).await.unwrap();
            let (blob, _) = client.open("multi", b"blob").await.unwrap();
            blob.write_at(0, received, WriteOptions::default())
                .await
                .unwrap();
            blob.sync().await.unwrap();
            let data = blob.read_at(0, 4, ReadOptions::default()).await.unwrap();
            assert_eq!(data.coalesce().as_ref(), b"ping");
            thread::current().id()
        });
        assert_eq!(
            client.await.unwrap(),
            ran_on,
            "the client ran on worker one"
        );
        server.await.unwrap();
        context.remove("multi", None).await.unwrap();
    });
}

/// Writers on worker zero and worker one register eight one-byte writes each behind one-slot
/// rings and drop them after a single poll. Shutdown completes all of them on every ring, so
/// a second runner on the same directory reads every byte back.
#[test]
fn shutdown_drains_queued_blob_writes_on_every_ring() {
    let directory = Config::new().storage_directory().clone();
    let config = config()
        .with_worker_threads(2)
        .with_storage_directory(&directory)
        .with_ring_config(RingConfig {
            size: 1,
            ..RingConfig::default()
        });
    Runner::new(config.clone()).start(|context| async move {
        for actor in 0_u8..4 {
            let writer = context.child("writer");
            let write = async move {
                let (blob, _) = writer.open("retained", &[actor]).await.unwrap();
                for offset in 0..8 {
                    let write = blob.write_at(offset, vec![actor + 1], WriteOptions::default());
                    let mut write = pin!(write);
                    // Registered, then dropped: the ring keeps the kernel work.
                    assert!(futures::poll!(&mut write).is_pending());
                }
                pending::<()>().await;
            };
            if actor == 0 {
                context.child("writer").spawn(move |_| write);
            } else {
                let _ = spawn_elsewhere(&context, write);
            }
        }
        // The first writer runs once the root yields.
        reschedule().await;
    });
    Runner::new(config).start(|context| async move {
        for actor in 0_u8..4 {
            let (blob, size) = context.open("retained", &[actor]).await.unwrap();
            assert_eq!(size, 8);
            let data = blob.read_at(0, 8, ReadOptions::default()).await.unwrap();
            assert_eq!(data.coalesce().as_ref(), &[actor + 1; 8]);
        }
    });
    std::fs::remove_dir_all(&directory).unwrap();
}

/// Reads started on a dedicated worker complete when a plain thread observes them while the
/// worker lives. A pending batch does not keep its worker alive: first observed after that
/// worker finished its cleanup, or after the runner shut down, it reports `ReadFailed`.
#[test]
#[allow(clippy::async_yields_async)]
fn direct_reads_outlive_their_origin_worker() {
    static RANGES: [(u64, usize); 4] = [(0, 4096), (100, 5000), (4096, 0), (8000, 4288)];
    let data: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8).collect();
    let check = |bufs: Vec<IoBufsMut>| {
        assert_eq!(bufs.len(), RANGES.len());
        for (bufs, &(offset, len)) in bufs.into_iter().zip(&RANGES) {
            let offset = offset as usize;
            assert_eq!(bufs.coalesce().as_ref(), &data[offset..offset + len]);
        }
    };
    let written = data.clone();
    let unobserved = Runner::new(config()).start(|context| async move {
        let (blob, _) = context.open("partition", b"direct").await.unwrap();
        blob.write_at(0, written, WriteOptions::default())
            .await
            .unwrap();

        // Observed from a plain thread while the origin worker services the reads.
        let origin = blob.clone();
        let bufs = context
            .clone()
            .dedicated()
            .spawn(move |context| async move {
                let handle = origin
                    .start_read_many(&RANGES, ReadOptions::DONT_CACHE)
                    .await;
                let observer = thread::spawn(move || block_on(handle));
                while !observer.is_finished() {
                    context.sleep(Duration::from_millis(1)).await;
                }
                observer.join().unwrap()
            })
            .await
            .unwrap();
        check(bufs.unwrap());

        // First observed after the origin worker finished its cleanup.
        let origin = blob.clone();
        let handle = context
            .clone()
            .dedicated()
            .spawn(move |_| async move {
                origin
                    .start_read_many(&RANGES, ReadOptions::DONT_CACHE)
                    .await
            })
            .await
            .unwrap();
        yield_until(|| context.runtime().workers.state.lock().active == 0).await;
        let result = thread::spawn(move || block_on(handle)).join().unwrap();
        assert_eq!(result, Err(Error::ReadFailed));

        // First observed after the runner shut down.
        let handle = blob.start_read_many(&RANGES, ReadOptions::DONT_CACHE).await;
        context.remove("partition", None).await.unwrap();
        handle
    });
    assert_eq!(block_on(unobserved), Err(Error::ReadFailed));
}

/// A paged replay keeps reads in flight between fills. The task that issued them may close its
/// worker before they are observed, which discards them whether they are still pending or
/// have landed unobserved; the replay then reads those pages again on demand, so a partly
/// read replay handed to another task still yields every byte. Cases: the origin worker is
/// dedicated or blocking, and the reads have landed or not when it closes.
///
/// After its first fill the child asks for the whole blob once and lets the future go (the
/// replay keeps its state): that issues the reads for the rest of the blob on the child's
/// worker, and the test asserts they are registered there and not yet reaped, so the case of
/// pending reads is really exercised. With `landed`, the child then waits until every one of
/// them has been reaped, unobserved. Only then does the child hand the replay back.
///
/// The replay bypasses the page cache (`DONT_CACHE`): with nothing in flight, a default replay
/// reads the pages the page cache holds (all of them, just written) on the calling thread and
/// leaves nothing in flight on the ring.
#[rstest::rstest]
fn paged_replay_survives_the_worker_that_issued_its_reads_closing(
    #[values(false, true)] dedicated: bool,
    #[values(false, true)] landed: bool,
) {
    use crate::buffer::paged::{CHECKSUM_SIZE, CacheRef, Writer};
    use bytes::Buf as _;
    use std::num::{NonZeroU16, NonZeroUsize};

    Runner::new(config()).start(|context| async move {
        // A sixteen page replay buffer over sixty-four pages reads in batches of four pages.
        const PAGE: u16 = 64;
        let physical = usize::from(PAGE) + usize::from(CHECKSUM_SIZE);
        let buffer = 16 * physical;
        let data: Vec<u8> = (0..64 * usize::from(PAGE))
            .map(|i| (i % 251) as u8)
            .collect();
        let total = data.len();
        let (blob, size) = context.open("partition", b"replay").await.unwrap();
        let cache = CacheRef::new(
            NonZeroU16::new(PAGE).unwrap(),
            NonZeroUsize::new(4).unwrap(),
        );
        let (writer, _) = Writer::new(blob, size, buffer, cache).await.unwrap();
        let (writer, _) = writer.append(&data).await.unwrap();
        let (sealed, sync) = writer.seal().await.unwrap();
        sync.await.unwrap();

        let child = context.child("child");
        let child = if dedicated {
            child.dedicated()
        } else {
            child.shared(true)
        };
        let mut replay = child
            .spawn(move |context| async move {
                let mut replay = sealed
                    .replay(NonZeroUsize::new(buffer).unwrap(), ReadOptions::DONT_CACHE)
                    .unwrap();
                assert!(replay.ensure(1).await.unwrap());
                // One poll registers the reads for the rest of the blob and waits on the
                // first of them, which no service of this worker has submitted yet.
                let first =
                    pin!(replay.ensure(total)).poll(&mut TaskContext::from_waker(Waker::noop()));
                assert!(first.is_pending(), "the replay waits for reads in flight");
                let pending = || context.runtime().metrics.pending_operations.get();
                assert!(
                    pending() > 0,
                    "the replay's reads are in flight on the child's worker"
                );
                if landed {
                    // This worker's services reap them while the child yields.
                    yield_until(|| pending() == 0).await;
                }
                replay
            })
            .await
            .unwrap();

        // The handle can complete before the worker's cleanup: wait for it to retire, so its
        // registrations are gone before the replay is driven again.
        yield_until(|| context.runtime().workers.state.lock().active == 0).await;

        assert!(replay.ensure(total).await.unwrap());
        assert_eq!(replay.copy_to_bytes(total).as_ref(), data);
        assert!(!replay.ensure(1).await.unwrap());
        context.remove("partition", None).await.unwrap();
    });
}

/// Numeric hosts resolve without a lookup, a NUL byte is refused, and a context that escaped
/// its finished runner resolves nothing.
#[test]
fn resolver_handles_numeric_hosts_and_invalid_input() {
    let escaped = Runner::new(config()).start(|context| async move {
        for host in ["127.0.0.1", "::1"] {
            assert_eq!(
                context.resolve(host).await.unwrap(),
                vec![host.parse::<IpAddr>().unwrap()]
            );
        }
        assert!(matches!(
            context.resolve("\0").await,
            Err(Error::ResolveFailed(_))
        ));
        context
    });
    assert!(matches!(
        block_on(escaped.resolve("127.0.0.1")),
        Err(Error::ResolveFailed(_))
    ));
}

/// A name goes to the system resolver on a blocking thread, never on the pool worker that
/// asked: the worker keeps running other tasks meanwhile.
#[test]
fn names_resolve_off_the_pool() {
    Runner::new(config()).start(|context| async move {
        let addresses = context.resolve("localhost").await.unwrap();
        assert!(
            addresses.iter().all(IpAddr::is_loopback) && !addresses.is_empty(),
            "{addresses:?}"
        );
        let spawned = context.runtime().metrics.encode();
        assert!(
            spawned.contains("placement=\"blocking\""),
            "the lookup ran as a blocking task: {spawned}"
        );
    });
}

/// A dedicated worker finishes a durable blob write it dropped unobserved, and releases the
/// runner and the storage lock, before its lease is released: inside `after_release`, with the
/// thread's own locals still alive, the bytes are in the blob's file (named by the hex of its
/// name) and the lock is free.
#[test]
fn worker_releases_storage_and_durable_io_before_tracking_ends() {
    let directory = Config::new().storage_directory().clone();
    let (released, after_release) = mpsc::channel();
    let (finish, finished) = mpsc::channel::<()>();
    let (shared, registry) =
        Runner::new(config().with_storage_directory(&directory)).start(|context| async move {
            let shared = Arc::downgrade(context.runtime());
            let registry = context.runtime().workers.clone();
            context
                .child("durable_worker")
                .dedicated()
                .spawn(move |context| async move {
                    AFTER_RELEASE.with(|hook| {
                        *hook.borrow_mut() = Some(Box::new(move || {
                            released.send(()).unwrap();
                            let _ = finished.recv_timeout(TEST_TIMEOUT);
                        }))
                    });
                    let (blob, _) = context.open("partition", b"retained").await.unwrap();
                    let write = blob.write_at(0, b"durable", WriteOptions::SYNC);
                    assert!(write.now_or_never().is_none(), "registered, then dropped");
                    drop(blob);
                })
                .await
                .unwrap();
            (shared, registry)
        });
    after_release.recv_timeout(TEST_TIMEOUT).unwrap();
    assert_eq!(registry.state.lock().active, 0);
    assert!(shared.upgrade().is_none(), "the worker released the runner");
    let contender = assert_storage_lock_free(&directory);
    let bytes = std::fs::read(directory.join("partition").join(hex(b"retained"))).unwrap();
    assert!(bytes.ends_with(b"durable"), "{bytes:?}");
    finish.send(()).unwrap();
    drop(contender);
    std::fs::remove_dir_all(&directory).unwrap();
}

/// A receive polled on one worker and then observed elsewhere completes there: the owner
/// wakes the latest waker with the bytes. Both ways of receiving: one receive per call, and a
/// multishot receive that stays on the ring that armed it.
#[rstest::rstest]
#[case::one_per_call(0)]
#[case::multishot(4)]
fn a_receive_observed_on_another_worker_gets_its_bytes(#[case] receive_buffers: u16) {
    let ring = crate::RingConfig {
        receive_buffers,
        ..Default::default()
    };
    let config = config().with_worker_threads(2).with_ring_config(ring);
    Runner::new(config).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut peer = std::net::TcpStream::connect(address).unwrap();
        let (_, _sink, mut stream) = listener.accept().await.unwrap();
        // Registered here, on worker zero, and then moved to worker one.
        let mut receive = Box::pin(async move { stream.recv(4).await.map(IoBufs::coalesce) });
        let noop = &mut TaskContext::from_waker(Waker::noop());
        assert!(receive.as_mut().poll(noop).is_pending());
        let (observer, _) = spawn_elsewhere(&context, receive);
        std::io::Write::write_all(&mut peer, b"ping").unwrap();
        assert_eq!(observer.await.unwrap().unwrap().as_ref(), b"ping");
    });
}

/// A peer that writes far more than a multishot receive's inbox holds, to a reader that waits:
/// the receive pauses itself with at most its cap plus the ring's buffers held (the rest waits
/// in the socket, holding the peer back), and once the reader reads, every byte arrives once,
/// in order.
#[test]
fn a_multishot_receive_pauses_for_a_reader_that_waits_and_loses_nothing() {
    use crate::driver::operation::INBOX_CAP;
    const TOTAL: usize = 64 * INBOX_CAP;
    const BUFFERS: u16 = 8;
    const SIZE: u32 = 16 * 1024;
    let ring = crate::RingConfig {
        receive_buffers: BUFFERS,
        receive_buffer_size: SIZE,
        ..Default::default()
    };
    Runner::new(config().with_ring_config(ring)).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_, _sink, mut stream) = listener.accept().await.unwrap();
        let pattern = |index: usize| (index % 251) as u8;
        // The first byte arms the receive; the rest comes while the reader waits.
        std::io::Write::write_all(&mut peer, &[pattern(0)]).unwrap();
        assert_eq!(
            stream.recv(1).await.unwrap().coalesce().as_ref(),
            &[pattern(0)]
        );
        let writer = std::thread::spawn(move || {
            let bytes: Vec<u8> = (1..TOTAL).map(pattern).collect();
            std::io::Write::write_all(&mut peer, &bytes).unwrap();
            peer
        });
        let bound = INBOX_CAP + usize::from(BUFFERS) * SIZE as usize;
        let end = armed_until(&context, &stream, |held, end| {
            assert!(
                held <= bound,
                "the inbox holds {held} bytes, more than {bound}"
            );
            end.is_some()
        })
        .await
        .expect("ended");
        assert!(end.contains("Paused"), "expected a pause, got {end}");
        let mut received = 1;
        while received < TOTAL {
            let chunk = stream
                .recv((TOTAL - received).min(48 * 1024))
                .await
                .unwrap();
            let chunk = chunk.coalesce();
            assert!(
                chunk
                    .iter()
                    .enumerate()
                    .all(|(offset, &byte)| byte == pattern(received + offset)),
                "bytes out of order after {received}"
            );
            received += chunk.len();
        }
        drop(writer.join().unwrap());
    });
}

/// A runner whose rings provide four 64-byte receive buffers (multishot receives).
fn multishot_config() -> Config {
    config().with_ring_config(RingConfig {
        receive_buffers: 4,
        receive_buffer_size: 64,
        ..RingConfig::default()
    })
}

/// Waits until the stream's armed receive satisfies `done` (given the bytes in its inbox and
/// how it ended, if it has), and returns how it ended.
async fn armed_until(
    context: &Context,
    stream: &crate::net::Stream,
    mut done: impl FnMut(usize, Option<&str>) -> bool,
) -> Option<String> {
    let limit = std::time::Instant::now() + TEST_TIMEOUT;
    loop {
        let (held, end) = stream.armed_state().expect("a receive is armed");
        if done(held, end.as_deref()) {
            return end;
        }
        assert!(
            std::time::Instant::now() < limit,
            "the armed receive made no progress"
        );
        context.sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until the stream's armed receive has ended, and returns how.
async fn armed_end(context: &Context, stream: &crate::net::Stream) -> String {
    armed_until(context, stream, |_, end| end.is_some())
        .await
        .expect("ended")
}

/// Bytes that reached an armed receive before a reset are handed out before the reset is
/// reported, even when both are in its slot before the next call.
#[test]
fn bytes_before_a_reset_come_before_the_error() {
    Runner::new(multishot_config()).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_, _sink, mut stream) = listener.accept().await.unwrap();
        // No Nagle delay: "message" must leave before the reset discards the send queue.
        peer.set_nodelay(true).unwrap();
        std::io::Write::write_all(&mut peer, b"x").unwrap();
        assert_eq!(stream.recv(1).await.unwrap().coalesce().as_ref(), b"x");
        std::io::Write::write_all(&mut peer, b"message").unwrap();
        // The bytes are in the armed receive's inbox before the reset comes.
        armed_until(&context, &stream, |held, _| held == 7).await;
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a live socket and a correctly sized option value.
        let set = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&peer),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&raw const linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0);
        drop(peer);
        let end = armed_end(&context, &stream).await;
        assert!(end.contains("ConnectionReset"), "{end}");
        assert_eq!(
            stream.recv(7).await.unwrap().coalesce().as_ref(),
            b"message"
        );
        match stream.recv(1).await {
            Err(Error::RecvFailed(error)) => {
                assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
            }
            other => panic!("expected the reset, got {other:?}"),
        }
    });
}

/// A receive armed on a dedicated task's ring outlives that ring: once the task has ended and
/// its thread's ring has closed (cancelling the receive), the stream, back on the pool, arms
/// another receive there and gets its bytes instead of the cancellation.
#[test]
fn a_stream_outlives_the_ring_that_armed_its_receive() {
    Runner::new(multishot_config()).start(|context| async move {
        let listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        std::io::Write::write_all(&mut peer, b"a").unwrap();
        let (sink, mut stream) = context
            .clone()
            .dedicated()
            .spawn(move |_| async move {
                let mut listener = listener;
                let (_, sink, mut stream) = listener.accept().await.unwrap();
                assert_eq!(stream.recv(1).await.unwrap().coalesce().as_ref(), b"a");
                (sink, stream)
            })
            .await
            .unwrap();
        let end = armed_end(&context, &stream).await;
        assert!(end.contains("Paused"), "{end}");
        std::io::Write::write_all(&mut peer, b"bc").unwrap();
        assert_eq!(stream.recv(2).await.unwrap().coalesce().as_ref(), b"bc");
        drop(sink);
    });
}

/// A send given up (its future dropped, as a caller's own timeout does) to a peer that never
/// reads is cancelled at once, on its ring or from another worker: within a second of the
/// drop (the read/write timeout is 30 s) it has left the ring and, both halves being dropped,
/// the socket is closed. The peer then reads what was buffered and end-of-stream, short of
/// the whole send: its rest never went out.
#[rstest::rstest]
#[case::on_its_ring(false)]
#[case::from_another_worker(true)]
fn a_dropped_send_to_a_peer_that_never_reads_releases_the_socket_at_once(#[case] elsewhere: bool) {
    const SENT: usize = 64 << 20;
    let config = config().with_worker_threads(2);
    assert!(config.read_write_timeout >= Duration::from_secs(30));
    Runner::new(config).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let (closed, told) = mpsc::channel::<()>();
        let (answer, drained) = futures::channel::oneshot::channel();
        let peer = thread::spawn(move || {
            let mut peer = std::net::TcpStream::connect(address).unwrap();
            // Reads nothing until the server's socket is closed.
            told.recv().unwrap();
            peer.set_read_timeout(Some(TEST_TIMEOUT)).unwrap();
            let mut received = Vec::new();
            let _ = answer.send(std::io::Read::read_to_end(&mut peer, &mut received));
        });
        let (_, mut sink, stream) = listener.accept().await.unwrap();
        let inode = socket_inode(sink.raw_fd());
        // Far more than the socket buffers hold: the rest waits on the ring for room.
        let big = vec![7u8; SENT];
        let mut send = Box::pin(async move { sink.send(big).await });
        poll_once_with_this_waker(send.as_mut()).await;
        let pending = || context.runtime().metrics.pending_operations.get();
        assert_eq!(pending(), 1, "the send waits on the ring");
        let dropper = if elsewhere {
            Some(drop_while_worker_zero_sleeps(&context, (send, stream)))
        } else {
            drop((send, stream));
            None
        };
        // The cancelled send's completion wakes this task, whose waker it kept.
        context
            .timeout(Duration::from_secs(1), until(|| pending() == 0))
            .await
            .expect("the send left the ring within 1 s of its drop");
        if let Some(dropper) = dropper {
            dropper.await.unwrap();
        }
        assert!(!socket_open(inode), "the socket is closed");
        closed.send(()).unwrap();
        let received = drained.await.unwrap().expect("end-of-stream");
        peer.join().unwrap();
        assert!(received < SENT, "the given-up send did not go on");
    });
}

/// A sink never puts bytes after a gap: a send given up with bytes still to go makes the next
/// send fail with the cancellation (`Interrupted`), and every send after that with
/// `BrokenPipe`, so a caller that retries cannot damage the stream; the peer reads a prefix of
/// the given-up send and nothing else.
#[test]
fn a_sink_sends_nothing_after_a_gap() {
    const SENT: usize = 64 << 20;
    Runner::new(config()).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let (closed, told) = mpsc::channel::<()>();
        let peer = thread::spawn(move || {
            let mut peer = std::net::TcpStream::connect(address).unwrap();
            told.recv().unwrap();
            peer.set_read_timeout(Some(TEST_TIMEOUT)).unwrap();
            let mut received = Vec::new();
            std::io::Read::read_to_end(&mut peer, &mut received).map(|_| received)
        });
        let (_, mut sink, stream) = listener.accept().await.unwrap();
        {
            let mut send = Box::pin(sink.send(vec![7u8; SENT]));
            poll_once_with_this_waker(send.as_mut()).await;
        }
        let kind = |sent: Result<(), Error>| match sent {
            Err(Error::SendFailed(error)) => error.kind(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            kind(sink.send(b"after").await),
            std::io::ErrorKind::Interrupted
        );
        assert_eq!(
            kind(sink.send(b"again").await),
            std::io::ErrorKind::BrokenPipe
        );
        assert_eq!(
            kind(sink.send(b"still").await),
            std::io::ErrorKind::BrokenPipe
        );
        drop((sink, stream));
        closed.send(()).unwrap();
        let received = peer.join().unwrap().expect("end-of-stream");
        assert!(received.len() < SENT, "the given-up send did not go on");
        assert!(
            received.iter().all(|&byte| byte == 7),
            "nothing after the gap reached the peer"
        );
    });
}

/// Drops `value` on another worker once worker zero (the root's, whose ring holds the
/// operations given up) sleeps inside io_uring, so only the cancellation's request can wake
/// it: what the request does is the one way the operation leaves its ring before its
/// deadline.
fn drop_while_worker_zero_sleeps<T: Send + 'static>(
    context: &Context,
    value: T,
) -> crate::Handle<()> {
    let runtime = context.runtime().clone();
    spawn_elsewhere(context, async move {
        spin_until(
            || runtime.pool.mailbox(0).waker.in_ring_wait(),
            "worker zero must wait in its ring",
        );
        drop(value);
    })
    .0
}

/// Polls `future` once with the calling task's waker; it must be pending.
async fn poll_once_with_this_waker<F: std::future::Future>(mut future: Pin<&mut F>) {
    futures::future::poll_fn(|cx| {
        assert!(future.as_mut().poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
}

/// Resolves once `done` holds when polled; registers no waker of its own (something else
/// must wake the task).
fn until(done: impl Fn() -> bool) -> impl std::future::Future<Output = ()> {
    futures::future::poll_fn(move |_| {
        if done() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
}

/// The inode of the socket `fd`.
fn socket_inode(fd: std::os::fd::RawFd) -> u64 {
    // SAFETY: `stat` is plain data, for which all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into a live, writable `stat`; the result is checked.
    assert_eq!(unsafe { libc::fstat(fd, &mut stat) }, 0);
    stat.st_ino
}

/// Whether this process still has the socket with `inode` open.
fn socket_open(inode: u64) -> bool {
    let name = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .any(|target| target.as_os_str() == name.as_str())
}

/// A one-call receive given up (its future dropped) is cancelled at once, on its ring or from
/// another worker: the pending-operations gauge is back to zero within a second although the
/// read/write timeout is 30 s, and the stream goes on, losing no byte.
#[rstest::rstest]
#[case::on_its_ring(false)]
#[case::from_another_worker(true)]
fn a_dropped_receive_is_cancelled_at_once(#[case] elsewhere: bool) {
    let config = config().with_worker_threads(2);
    assert!(config.read_write_timeout >= Duration::from_secs(30));
    Runner::new(config).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut peer = std::net::TcpStream::connect(address).unwrap();
        let (_, _sink, stream) = listener.accept().await.unwrap();
        let pending = || context.runtime().metrics.pending_operations.get();
        let stream = Arc::new(futures::lock::Mutex::new(stream));
        let mut receive = Box::pin({
            let stream = stream.clone();
            async move { stream.lock().await.recv(4).await.map(IoBufs::coalesce) }
        });
        // Polled with the root's waker: the cancelled receive's completion wakes it.
        poll_once_with_this_waker(receive.as_mut()).await;
        assert_eq!(pending(), 1, "the receive waits on the ring");
        let dropper = if elsewhere {
            Some(drop_while_worker_zero_sleeps(&context, receive))
        } else {
            drop(receive);
            None
        };
        context
            .timeout(Duration::from_secs(1), until(|| pending() == 0))
            .await
            .expect("the receive left the ring within 1 s of its drop");
        if let Some(dropper) = dropper {
            dropper.await.unwrap();
        }
        std::io::Write::write_all(&mut peer, b"ping").unwrap();
        let mut stream = stream.lock().await;
        assert_eq!(stream.recv(4).await.unwrap().coalesce().as_ref(), b"ping");
    });
}

/// A dedicated worker's ring cancels a receive given up elsewhere too: a receive registered
/// by a dedicated task, its future handed to the root and dropped there, leaves that ring
/// within a second (the read/write timeout is 30 s), and the stream goes on.
#[test]
fn a_receive_dropped_away_from_its_dedicated_ring_is_cancelled_at_once() {
    Runner::new(config()).start(|context| async move {
        let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut peer = std::net::TcpStream::connect(address).unwrap();
        let (_, _sink, stream) = listener.accept().await.unwrap();
        let stream = Arc::new(futures::lock::Mutex::new(stream));
        let (hand, handed) = futures::channel::oneshot::channel();
        let owner = context.clone().dedicated().spawn({
            let stream = stream.clone();
            move |context| async move {
                let pending = || context.runtime().metrics.pending_operations.get();
                let mut receive =
                    Box::pin(async move { stream.lock().await.recv(4).await.map(drop) });
                poll_once_with_this_waker(receive.as_mut()).await;
                assert_eq!(pending(), 1, "the receive waits on this ring");
                hand.send(receive).ok().expect("the root takes it");
                // This thread sleeps in its ring until the cancelled receive's completion
                // wakes this task, whose waker it kept.
                context
                    .timeout(Duration::from_secs(1), until(|| pending() == 0))
                    .await
                    .expect("the receive left the ring within 1 s of its drop");
            }
        });
        drop(handed.await.unwrap());
        owner.await.unwrap();
        std::io::Write::write_all(&mut peer, b"ping").unwrap();
        let mut stream = stream.lock().await;
        assert_eq!(stream.recv(4).await.unwrap().coalesce().as_ref(), b"ping");
    });
}
