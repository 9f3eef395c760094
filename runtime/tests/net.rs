//! TCP through the public API: exact receives, whole sends, nothing lost to a dropped accept
//! or receive, and every fault (a port in use, a refused dial, a peer that closes, resets or
//! goes silent) reported as an error carrying the OS error, within the configured timeout.

mod net_cases;

use net_cases::{listener_and_client, loopback, noop};
use runtime::prelude::*;
use runtime::{Config, Context, Error, IoBufs, SpinnerConfig};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::pin::pin;
use std::time::{Duration, Instant};

#[runtime::test(timeout = "20s")]
async fn recv_returns_exactly_the_bytes_asked_for_across_segments(context: Context) {
    net_cases::recv_returns_exactly_the_bytes_asked_for_across_segments(context).await;
}

/// `recv_some` gives what has come, at least one byte and at most what is asked, every byte
/// once and in order, whatever the segments.
#[runtime::test(timeout = "20s")]
async fn recv_some_gives_what_has_come_within_its_bound(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let writer = std::thread::spawn(move || {
        for chunk in [&b"he"[..], b"llo wo", b"rld!"] {
            client.write_all(chunk).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        client
    });
    let mut received = Vec::new();
    while received.len() < 12 {
        let chunk = stream.recv_some(4).await.unwrap().coalesce();
        assert!((1..=4).contains(&chunk.len()), "{chunk:?}");
        received.extend_from_slice(&chunk);
    }
    assert_eq!(received, b"hello world!");
    let client = writer.join().unwrap();
    drop(client);
    assert!(
        stream.recv_some(4).await.is_err(),
        "the end of the stream is an error"
    );
}

#[runtime::test(timeout = "20s")]
async fn send_delivers_every_byte_of_every_chunk_in_order(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, _stream) = listener.accept().await.unwrap();
    // Far more than a socket buffer holds: the driver resumes partial sends.
    let big: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 253) as u8).collect();
    let expected = [&b"head"[..], &big, b"tail"].concat();
    let reader = std::thread::spawn(move || {
        let mut client = client;
        let mut received = Vec::new();
        client.read_to_end(&mut received).unwrap();
        received
    });
    let mut chunks = IoBufs::from(b"head");
    chunks.push(big.into());
    chunks.push(b"tail".into());
    sink.send(chunks).await.unwrap();
    drop(sink);
    assert!(reader.join().unwrap() == expected, "every byte, in order");
}

/// A send whose future is dropped before it resolves is given up: the ring cancels it, and
/// the sink dropped after it shuts the sending side once the cancellation is answered. The
/// stream half is still open, yet the peer reads a prefix of the bytes, in order, and then
/// end-of-stream: the rest never goes out.
#[runtime::test(timeout = "20s")]
async fn a_sink_dropped_after_a_send_given_up_ends_the_stream_after_what_went_out(
    context: Context,
) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, _stream) = listener.accept().await.unwrap();
    let big: Vec<u8> = (0..64 << 20).map(|i: u32| (i % 251) as u8).collect();
    let expected = big.clone();
    {
        // More than the socket takes at once: the rest is a send in flight on the ring.
        let mut send = pin!(sink.send(big));
        assert!(send.as_mut().poll(&mut noop()).is_pending());
    }
    drop(sink);
    let reader = std::thread::spawn(move || {
        let mut client = client;
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut received = Vec::new();
        client.read_to_end(&mut received).map(|_| received)
    });
    while !reader.is_finished() {
        context.sleep(Duration::from_millis(1)).await;
    }
    let received = reader
        .join()
        .unwrap()
        .expect("end-of-stream, not a timeout");
    assert!(received.len() < expected.len(), "the rest never went out");
    assert!(
        received == expected[..received.len()],
        "what went out is the send's first bytes, in order"
    );
}

#[runtime::test(timeout = "20s")]
async fn a_dropped_recv_loses_no_bytes(context: Context) {
    net_cases::a_dropped_recv_loses_no_bytes(context).await;
}

#[runtime::test(timeout = "20s")]
async fn a_dropped_accept_loses_no_connection(context: Context) {
    let mut listener = context.bind(loopback()).await.unwrap();
    let address = listener.local_addr().unwrap();
    {
        let mut accept = pin!(listener.accept());
        assert!(accept.as_mut().poll(&mut noop()).is_pending());
    }
    let first = TcpStream::connect(address).unwrap();
    let second = TcpStream::connect(address).unwrap();
    let (peer, _, _) = listener.accept().await.unwrap();
    assert_eq!(
        peer,
        first.local_addr().unwrap(),
        "the dropped accept's connection"
    );
    let (peer, _, _) = listener.accept().await.unwrap();
    assert_eq!(peer, second.local_addr().unwrap());
}

#[runtime::test(timeout = "20s")]
async fn dial_and_echo_between_runtime_tasks(context: Context) {
    net_cases::dial_and_echo_between_runtime_tasks(context).await;
}

#[runtime::test(timeout = "20s")]
async fn binding_a_port_in_use_fails_with_the_os_error(context: Context) {
    let taken = std::net::TcpListener::bind(loopback()).unwrap();
    let address = taken.local_addr().unwrap();
    match context.bind(address).await {
        Err(Error::BindFailed(at, error)) => {
            assert_eq!(at, address);
            assert_eq!(error.kind(), ErrorKind::AddrInUse, "{error}");
        }
        other => panic!("expected BindFailed, got {:?}", other.map(|_| ())),
    }
}

#[runtime::test(timeout = "20s")]
async fn dialing_a_closed_port_fails_with_the_os_error(context: Context) {
    let address = std::net::TcpListener::bind(loopback())
        .unwrap()
        .local_addr()
        .unwrap();
    // The listener is gone: the port refuses.
    match context.dial(address).await {
        Err(Error::DialFailed(at, error)) => {
            assert_eq!(at, address);
            assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{error}");
        }
        other => panic!("expected DialFailed, got {:?}", other.map(|_| ())),
    }
}

#[runtime::test(timeout = "20s")]
async fn a_peer_closing_mid_recv_is_an_unexpected_eof(context: Context) {
    net_cases::a_peer_closing_mid_recv_is_an_unexpected_eof(context).await;
}

#[runtime::test(timeout = "20s")]
async fn a_peer_reset_fails_recv_and_send(context: Context) {
    net_cases::a_peer_reset_fails_recv_and_send(context).await;
}

/// One worker whose idle spin lasts a minute, far past the test's timeout.
fn spinning_worker() -> Config {
    Config::new()
        .with_worker_threads(1)
        .with_idle_spinner(SpinnerConfig {
            budget_us: 60_000_000,
            max_budget_us: 60_000_000,
            quick_wake_us: 0,
        })
}

/// A completion on the ring ends an idle worker's spin: nobody signals the worker for it, so
/// a spin that watched only its wake signal would hold each echo for a minute.
#[runtime::test(config = spinning_worker, timeout = "20s")]
async fn a_spinning_worker_reaps_its_ring_completions(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, mut stream) = listener.accept().await.unwrap();
    let peer = std::thread::spawn(move || {
        let mut client = client;
        let mut echo = [0u8; 4];
        for round in 0..20_u32 {
            client.write_all(&round.to_le_bytes()).unwrap();
            client.read_exact(&mut echo).unwrap();
            assert_eq!(u32::from_le_bytes(echo), round);
        }
    });
    for _ in 0..20 {
        let message = stream.recv(4).await.unwrap();
        sink.send(message).await.unwrap();
    }
    while !peer.is_finished() {
        runtime::reschedule().await;
    }
    peer.join().unwrap();
}

fn short_timeouts() -> Config {
    Config::new()
        .with_read_write_timeout(Duration::from_millis(200))
        .with_connect_timeout(Duration::from_millis(200))
}

#[runtime::test(config = short_timeouts, timeout = "20s")]
async fn a_silent_peer_times_the_recv_out_and_keeps_what_arrived(context: Context) {
    let timeout = Duration::from_millis(200);
    net_cases::a_silent_peer_times_the_recv_out_and_keeps_what_arrived(context, timeout).await;
}

#[runtime::test(config = short_timeouts, timeout = "20s")]
async fn a_listener_that_never_answers_times_the_dial_out(context: Context) {
    use std::os::fd::AsRawFd;
    let full = std::net::TcpListener::bind(loopback()).unwrap();
    // A backlog of 0 holds one connection; once it is taken, the kernel drops further SYNs,
    // so a dial waits for an answer that never comes.
    // SAFETY: a live listening socket; no memory preconditions.
    assert_eq!(unsafe { libc::listen(full.as_raw_fd(), 0) }, 0);
    let address = full.local_addr().unwrap();
    let mut held = Vec::new();
    let mut timed_out = None;
    for _ in 0..8 {
        let started = Instant::now();
        match context.dial(address).await {
            Ok(connection) => held.push(connection),
            Err(Error::DialFailed(at, error)) => {
                assert_eq!(at, address);
                timed_out = Some((error, started.elapsed()));
                break;
            }
            Err(other) => panic!("expected DialFailed, got {other:?}"),
        }
    }
    let (error, waited) = timed_out.expect("a dial to a full listener times out");
    assert_eq!(error.kind(), ErrorKind::TimedOut, "{error}");
    assert!(
        waited >= Duration::from_millis(200),
        "not before the timeout"
    );
}

#[runtime::test(config = short_timeouts, timeout = "20s")]
async fn a_peer_that_never_reads_times_the_send_out(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, _stream) = listener.accept().await.unwrap();
    let started = Instant::now();
    // Far more than both socket buffers hold, so the send waits on the silent peer.
    match sink.send(vec![0; 64 << 20]).await {
        Err(Error::SendFailed(error)) => assert_eq!(error.kind(), ErrorKind::TimedOut),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "not before the timeout"
    );
    drop(client);
}

#[runtime::test(timeout = "20s")]
async fn dropping_a_stream_with_a_recv_in_flight_closes_the_connection(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, sink, mut stream) = listener.accept().await.unwrap();
    {
        let mut receive = pin!(stream.recv(1));
        assert!(receive.as_mut().poll(&mut noop()).is_pending());
    }
    drop(stream);
    drop(sink);
    // The pending receive ended and let go of the socket, so it closed.
    net_cases::assert_closed(&context, client).await;
}

#[runtime::test(timeout = "20s")]
async fn dropping_a_listener_with_an_accept_in_flight_stops_listening(context: Context) {
    let mut listener = context.bind(loopback()).await.unwrap();
    let address = listener.local_addr().unwrap();
    {
        let mut accept = pin!(listener.accept());
        assert!(accept.as_mut().poll(&mut noop()).is_pending());
    }
    drop(listener);
    // Wait (with the runtime running) for the pending accept to end and the port to close.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(address) {
            Err(error) if error.kind() == ErrorKind::ConnectionRefused => break,
            _ => {
                assert!(Instant::now() < deadline, "the port must close");
                context.sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

#[test]
fn network_operations_off_the_runtime_fail_instead_of_hanging() {
    let (listener, address) = runtime::Runner::new(Config::new()).start(|context| async move {
        let listener = context.bind(loopback()).await.unwrap();
        let address = listener.local_addr().unwrap();
        (listener, address)
    });
    let mut listener = listener;
    // No connection waiting: the accept would have to wait on a ring, and there is none.
    let accepted = futures::executor::block_on(listener.accept());
    assert!(matches!(accepted, Err(Error::AcceptFailed(_))));
    // A waiting connection is taken without any ring; its halves then fail off the runtime.
    let _client = TcpStream::connect(address).unwrap();
    let (_, _sink, mut stream) = futures::executor::block_on(listener.accept()).unwrap();
    assert!(matches!(
        futures::executor::block_on(stream.recv(1)),
        Err(Error::RecvFailed(_))
    ));
}

/// The child half of the restart test: serves on the port it is given, with a connection
/// accepted and the next accept waiting on the ring, until it is killed.
#[test]
fn restart_child_serves_until_killed() {
    let (Ok(port), Ok(storage)) = (
        std::env::var("RUNTIME_RESTART_CHILD_PORT"),
        std::env::var("RUNTIME_RESTART_CHILD_STORAGE"),
    ) else {
        return;
    };
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = Config::new()
        .with_idle_spinner(SpinnerConfig::disabled())
        .with_storage_directory(storage);
    runtime::Runner::new(config).start(move |context| async move {
        let mut listener = context.bind(address).await.expect("the child binds");
        println!("listening");
        let _connection = listener.accept().await.expect("the probe connects");
        // Poll the next accept once, so its wait is in flight on the ring, then say so.
        let mut next = pin!(listener.accept());
        std::future::poll_fn(|cx| {
            assert!(next.as_mut().poll(cx).is_pending(), "nobody else connects");
            std::task::Poll::Ready(())
        })
        .await;
        println!("accepting");
        let _ = next.await;
    });
}

/// A server restarted right after `kill -9` binds its old port at once, 20 times in a row: the
/// killed process's listening socket must not outlive it (a ring's in-flight requests are
/// released only by its asynchronous teardown, so the ring must not hold the socket) and make
/// the new bind fail with `AddrInUse`.
#[test]
fn a_server_killed_with_sigkill_can_bind_its_port_again_at_once() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let port = std::net::TcpListener::bind(loopback())
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    for round in 0..20 {
        let storage = std::env::temp_dir().join(format!(
            "runtime-restart-child-{}-{round}",
            std::process::id()
        ));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "restart_child_serves_until_killed",
                "--nocapture",
            ])
            .env("RUNTIME_RESTART_CHILD_PORT", port.to_string())
            .env("RUNTIME_RESTART_CHILD_STORAGE", &storage)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut wait_for = |word: &str| {
            loop {
                let line = lines.next().expect("the child reports").unwrap();
                if line.contains(word) {
                    break;
                }
            }
        };
        wait_for("listening");
        // An established connection too, as a real server has, and an accept in flight.
        let probe = TcpStream::connect(address).unwrap();
        wait_for("accepting");
        child.kill().unwrap();
        child.wait().unwrap();
        drop(probe);
        let _ = std::fs::remove_dir_all(&storage);
        let rebound = runtime::Runner::new(Config::new())
            .start(move |context| async move { context.bind(address).await.map(drop) });
        if let Err(error) = rebound {
            panic!("round {round}: binding the killed server's port failed: {error}");
        }
    }
}
