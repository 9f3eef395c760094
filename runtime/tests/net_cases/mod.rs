//! TCP cases that hold whichever way a stream receives: `net.rs` runs them with one receive
//! per call (the default), `net_multishot.rs` with multishot receives. Each case is the whole
//! body of a test; the two files name the tests and pick the configuration.

use runtime::prelude::*;
use runtime::{Context, Error};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::pin::pin;
use std::task::{Context as TaskContext, Waker};
use std::time::{Duration, Instant};

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A listener on a free loopback port, and a plain client connected to it.
pub async fn listener_and_client(context: &Context) -> (runtime::net::Listener, TcpStream) {
    let listener = context.bind(loopback()).await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (listener, client)
}

pub fn noop() -> TaskContext<'static> {
    TaskContext::from_waker(Waker::noop())
}

/// Sets linger 0 on `client`, so closing it sends a reset instead of a clean end.
pub fn linger_zero(client: &TcpStream) {
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

/// Asserts that our side of `client`'s connection closed: it reads end-of-stream, and its
/// writes meet a reset. End-of-stream alone would not show it: a dropped sink shuts the
/// writing side while the socket stays open, and an open socket takes every write.
pub async fn assert_closed(context: &Context, mut client: TcpStream) {
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).unwrap(), 0);
    // A closed socket answers the first write with a reset, which fails a later one.
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

pub async fn recv_returns_exactly_the_bytes_asked_for_across_segments(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (peer, _sink, mut stream) = listener.accept().await.unwrap();
    assert_eq!(peer, client.local_addr().unwrap());
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

/// Both ends run on the runtime; every echo comes back whole, and every completion named a
/// live operation (a release build has no debug assertion for it).
pub async fn dial_and_echo_between_runtime_tasks(context: Context) {
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

pub async fn a_dropped_recv_loses_no_bytes(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    {
        // Registered, then dropped while it waits for more than has arrived.
        let mut receive = pin!(stream.recv(10));
        assert!(receive.as_mut().poll(&mut noop()).is_pending());
    }
    client.write_all(b"abcdef").unwrap();
    // A shorter receive gets the first bytes the dropped one took in, and the next gets the
    // rest: nothing is lost or duplicated.
    assert_eq!(stream.recv(2).await.unwrap().coalesce().as_ref(), b"ab");
    assert_eq!(stream.recv(4).await.unwrap().coalesce().as_ref(), b"cdef");
}

/// The end of the stream fails every call that wants more than arrived, and leaves what
/// arrived for a call that wants no more.
pub async fn a_peer_closing_mid_recv_is_an_unexpected_eof(context: Context) {
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

pub async fn a_peer_reset_fails_recv_and_send(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, mut stream) = listener.accept().await.unwrap();
    linger_zero(&client);
    drop(client);
    match stream.recv(1).await {
        Err(Error::RecvFailed(error)) => {
            assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
        }
        other => panic!("expected RecvFailed, got {other:?}"),
    }
    // Sending into a reset connection fails too (maybe after one accepted send).
    let mut failed = None;
    for _ in 0..100 {
        if let Err(error) = sink.send(vec![0; 1024]).await {
            failed = Some(error);
            break;
        }
    }
    assert!(
        matches!(failed, Some(Error::SendFailed(_))),
        "expected SendFailed, got {failed:?}"
    );
}

/// Run with a read/write timeout of `timeout`.
pub async fn a_silent_peer_times_the_recv_out_and_keeps_what_arrived(
    context: Context,
    timeout: Duration,
) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    client.write_all(b"ab").unwrap();
    let started = Instant::now();
    match stream.recv(4).await {
        Err(Error::RecvFailed(error)) => assert_eq!(error.kind(), ErrorKind::TimedOut),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= timeout, "not before the timeout");
    // The two bytes that did arrive are still there for the next call.
    client.write_all(b"cd").unwrap();
    assert_eq!(stream.recv(4).await.unwrap().coalesce().as_ref(), b"abcd");
}
