//! TCP streams that receive through multishot receives (`RingConfig::receive_buffers` above
//! zero), with buffers small enough that every message takes several completions and the ring
//! runs out of buffers: exact receives, nothing lost to a dropped call, the end of the stream and resets reported as for one receive per call, deadlines that belong to
//! the call that waits, and a dropped stream that ends its armed receive.

use runtime::prelude::*;
use runtime::{Config, Context, Error, RingConfig};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::pin::pin;
use std::task::{Context as TaskContext, Waker};
use std::time::{Duration, Instant};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Four provided buffers of 64 bytes per ring: a 1 KiB message takes sixteen completions, and
/// a burst runs the ring out of buffers.
fn ring() -> RingConfig {
    RingConfig {
        receive_buffers: 4,
        receive_buffer_size: 64,
        ..RingConfig::default()
    }
}

fn multishot() -> Config {
    Config::new().with_ring_config(ring())
}

fn multishot_short_timeouts() -> Config {
    multishot().with_read_write_timeout(Duration::from_millis(400))
}

fn multishot_two_second_timeouts() -> Config {
    multishot().with_read_write_timeout(Duration::from_secs(2))
}

/// Sets linger 0 on `client`, so closing it sends a reset instead of a clean end.
fn linger_zero(client: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a live socket and a correctly sized option value.
    let set = unsafe {
        libc::setsockopt(
            client.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
}

async fn listener_and_client(context: &Context) -> (runtime::net::Listener, TcpStream) {
    let listener = context.bind(loopback()).await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (listener, client)
}

fn noop() -> TaskContext<'static> {
    TaskContext::from_waker(Waker::noop())
}

#[runtime::test(config = multishot, timeout = "20s")]
async fn recv_returns_exactly_the_bytes_asked_for_across_segments(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let writer = std::thread::spawn(move || {
        for chunk in [&b"he"[..], b"llo wo", b"rld!"] {
            client.write_all(chunk).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        client
    });
    assert_eq!(stream.recv(5).await.unwrap().coalesce().as_ref(), b"hello");
    assert_eq!(
        stream.recv(7).await.unwrap().coalesce().as_ref(),
        b" world!"
    );
    assert!(stream.recv(0).await.unwrap().is_empty());
    drop(writer.join().unwrap());
}

/// Both ends receive through multishot receives; every echo comes back whole, and every
/// completion named a live operation.
#[runtime::test(config = multishot, timeout = "20s")]
async fn dial_and_echo_between_runtime_tasks(context: Context) {
    let mut listener = context.bind(loopback()).await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = context.clone().spawn(move |_| async move {
        let (_, mut sink, mut stream) = listener.accept().await.unwrap();
        for _ in 0..100 {
            let message = stream.recv(1024).await.unwrap();
            sink.send(message).await.unwrap();
        }
    });
    let (mut sink, mut stream) = context.dial(address).await.unwrap();
    for round in 0..100_u32 {
        let message: Vec<u8> = (0..1024).map(|i| (i as u32 + round) as u8).collect();
        sink.send(message.clone()).await.unwrap();
        assert_eq!(
            stream.recv(1024).await.unwrap().coalesce().as_ref(),
            &message[..]
        );
    }
    server.await.unwrap();
    let exposition = context.encode();
    assert!(
        exposition.contains("runtime_ring_unknown_completions_total 0"),
        "{exposition}"
    );
}

#[runtime::test(config = multishot, timeout = "20s")]
async fn a_dropped_recv_loses_no_bytes(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    {
        let mut receive = pin!(stream.recv(10));
        assert!(receive.as_mut().poll(&mut noop()).is_pending());
    }
    client.write_all(b"abcdef").unwrap();
    assert_eq!(stream.recv(2).await.unwrap().coalesce().as_ref(), b"ab");
    assert_eq!(stream.recv(4).await.unwrap().coalesce().as_ref(), b"cdef");
}

/// The end of the stream fails a call that wants more than arrived, and leaves what arrived
/// for a call that wants no more.
#[runtime::test(config = multishot, timeout = "20s")]
async fn a_peer_closing_mid_recv_is_an_unexpected_eof(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    client.write_all(b"abc").unwrap();
    drop(client);
    for _ in 0..2 {
        match stream.recv(8).await {
            Err(Error::RecvFailed(error)) => {
                assert_eq!(error.kind(), ErrorKind::UnexpectedEof);
                assert!(error.to_string().contains("3 of 8"), "{error}");
            }
            other => panic!("expected RecvFailed, got {other:?}"),
        }
    }
    assert_eq!(stream.recv(3).await.unwrap().coalesce().as_ref(), b"abc");
}

#[runtime::test(config = multishot, timeout = "20s")]
async fn a_peer_reset_fails_recv(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    linger_zero(&client);
    drop(client);
    match stream.recv(1).await {
        Err(Error::RecvFailed(error)) => {
            assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
        }
        other => panic!("expected RecvFailed, got {other:?}"),
    }
}

#[runtime::test(config = multishot_short_timeouts, timeout = "20s")]
async fn a_silent_peer_times_the_recv_out_and_keeps_what_arrived(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    client.write_all(b"ab").unwrap();
    let started = Instant::now();
    match stream.recv(4).await {
        Err(Error::RecvFailed(error)) => assert_eq!(error.kind(), ErrorKind::TimedOut),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(400));
    client.write_all(b"cd").unwrap();
    assert_eq!(stream.recv(4).await.unwrap().coalesce().as_ref(), b"abcd");
}

/// The armed receive carries the deadline of the call that armed it; a later call that waits
/// past that deadline, but not past its own, gets its bytes instead of a timeout.
#[runtime::test(config = multishot_two_second_timeouts, timeout = "20s")]
async fn an_earlier_calls_deadline_does_not_fail_a_later_call(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    // The first call arms the receive (deadline: 2 s from now) and returns.
    client.write_all(b"ab").unwrap();
    assert_eq!(stream.recv(2).await.unwrap().coalesce().as_ref(), b"ab");
    context.sleep(Duration::from_millis(1500)).await;
    // The second call starts 1.5 s in (its deadline: 3.5 s); its bytes come at about 2.5 s,
    // half a second after the armed receive's deadline and a second before the call's own.
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        client.write_all(b"cd").unwrap();
        client
    });
    assert_eq!(stream.recv(2).await.unwrap().coalesce().as_ref(), b"cd");
    drop(writer.join().unwrap());
}

/// A stream dropped between calls, its receive still armed, ends that receive, which lets go
/// of the socket: it closes, and the peer's writes meet a reset. (End-of-stream alone would
/// not show it: dropping the sink shuts the writing side while the socket stays open.)
#[runtime::test(config = multishot, timeout = "20s")]
async fn dropping_a_stream_with_its_receive_armed_closes_the_connection(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, sink, mut stream) = listener.accept().await.unwrap();
    client.write_all(b"x").unwrap();
    assert_eq!(stream.recv(1).await.unwrap().coalesce().as_ref(), b"x");
    drop(stream);
    drop(sink);
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).unwrap(), 0);
    // A closed socket answers the first write with a reset, which fails a later write; an open
    // one (half shut) takes them all.
    let limit = Instant::now() + Duration::from_secs(10);
    let failed = loop {
        if let Err(error) = client.write_all(b"after") {
            break error;
        }
        assert!(Instant::now() < limit, "the socket stayed open");
        context.sleep(Duration::from_millis(1)).await;
    };
    assert!(
        matches!(
            failed.kind(),
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
        ),
        "{failed}"
    );
}
