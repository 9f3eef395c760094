//! A connection's halves as `futures::io` types, and `recv_some` on the `Stream` trait: the
//! stream is `AsyncRead` and `AsyncBufRead`, the sink `AsyncWrite`. Every case runs with one
//! receive per call (the default) and with multishot receives, through the public API only.

use futures::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use runtime::prelude::*;
use runtime::{Config, Context, Error, RingConfig};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
use std::task::{Context as TaskContext, Waker};
use std::time::Duration;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A listener on a free loopback port, and a plain client connected to it.
async fn listener_and_client(context: &Context) -> (runtime::net::Listener, TcpStream) {
    let listener = context.bind(loopback()).await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (listener, client)
}

/// The bytes of a long transfer: a pattern whose period (251, prime) does not divide any
/// buffer size, so a lost, doubled or reordered chunk shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// `recv_some(0)` resolves at once to nothing, on a live stream and on an ended one alike,
/// and leaves the bytes for the next call.
async fn recv_some_of_nothing_is_empty_at_once(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let nothing = stream
        .recv_some(0)
        .now_or_never()
        .expect("resolves at once");
    assert!(nothing.unwrap().is_empty());
    client.write_all(b"ab").unwrap();
    drop(client);
    assert_eq!(&*stream.recv(2).await.unwrap().coalesce(), b"ab");
    assert!(
        stream.recv_some(0).await.unwrap().is_empty(),
        "ended stream"
    );
    let end = stream.recv_some(1).await.unwrap_err();
    assert!(
        matches!(&end, Error::RecvFailed(error) if error.kind() == ErrorKind::UnexpectedEof),
        "the end of the stream is an UnexpectedEof error: {end:?}"
    );
}

/// `read_to_end` reads every byte the peer sent, in order, and stops at its end (`Ok(0)`
/// from `poll_read`); a read after the end is `Ok(0)` again.
async fn read_to_end_reads_every_byte_until_the_end(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    // Not megabytes: futures' `read_to_end` zero-fills the vector's whole spare room at every
    // poll after a wait, so with the multishot case's 64-byte buffers (256 bytes a wake) its
    // cost grows with the square of the length. The large transfer is the case below.
    let sent = pattern(256 << 10);
    let expected = sent.clone();
    let writer = std::thread::spawn(move || {
        let mut client = client;
        client.write_all(&sent).unwrap();
    });
    let mut received = Vec::new();
    stream.read_to_end(&mut received).await.unwrap();
    writer.join().unwrap();
    assert!(received == expected, "every byte, in order");
    let mut more = [0u8; 16];
    assert_eq!(stream.read(&mut more).await.unwrap(), 0);
}

/// `AsyncBufReadExt::read_line` over the stream itself (no `BufReader`): lines split across
/// segments come whole, and the last line without its newline comes at the end.
async fn read_line_splits_lines_across_segments(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let (go, went) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let mut client = client;
        for chunk in [&b"fir"[..], b"st\nsec", b"ond\r\n", b"last"] {
            client.write_all(chunk).unwrap();
            // The next chunk only after the reader has taken a line or waited: segments.
            let _ = went.recv_timeout(Duration::from_millis(20));
        }
    });
    let mut line = String::new();
    for expected in ["first\n", "second\r\n", "last", ""] {
        line.clear();
        stream.read_line(&mut line).await.unwrap();
        assert_eq!(line, expected);
        let _ = go.send(());
    }
    writer.join().unwrap();
}

/// Bytes written with `write_all` reach the peer whole after `flush`, and `close` ends the
/// stream: the peer reads end-of-stream right after them while our stream half is still
/// open.
async fn write_all_flush_and_close_end_the_stream_after_every_byte(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, _stream) = listener.accept().await.unwrap();
    let reader = std::thread::spawn(move || {
        let mut client = client;
        let mut received = Vec::new();
        client.read_to_end(&mut received).unwrap();
        received
    });
    // Far more than the socket buffers hold: writes go through the ring.
    let sent = pattern(6 << 20);
    sink.write_all(b"head").await.unwrap();
    sink.write_all(&sent).await.unwrap();
    sink.flush().await.unwrap();
    sink.close().await.unwrap();
    let received = reader.join().unwrap();
    assert!(
        received == [&b"head"[..], &sent].concat(),
        "every byte, in order"
    );
    let after = sink.write_all(b"more").await.unwrap_err();
    assert_eq!(after.kind(), ErrorKind::BrokenPipe, "{after}");
}

/// A `send` future dropped before its first poll, while a send `poll_write` left is in
/// flight, gives up nothing: every byte `poll_write` reported written reaches the peer, and
/// `flush` and `close` succeed. (A dropped `send` used to cancel whatever send was in flight,
/// losing bytes reported written and breaking the sink.)
async fn a_dropped_send_does_not_cancel_bytes_poll_write_accepted(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, _stream) = listener.accept().await.unwrap();
    let chunk = pattern(64 << 10);
    let mut accepted = Vec::new();
    // The client does not read yet: writes fill the socket, then one goes to the ring and the
    // next waits for it.
    loop {
        let write = futures::future::poll_fn(|cx| Pin::new(&mut sink).poll_write(cx, &chunk));
        match futures::poll!(write) {
            std::task::Poll::Ready(written) => {
                let written = written.unwrap();
                accepted.extend_from_slice(&chunk[..written]);
            }
            std::task::Poll::Pending => break,
        }
    }
    drop(runtime::Sink::send(&mut sink, b"x".to_vec()));
    let reader = std::thread::spawn(move || {
        let mut client = client;
        let mut received = Vec::new();
        client.read_to_end(&mut received).unwrap();
        received
    });
    sink.flush().await.unwrap();
    sink.close().await.unwrap();
    let received = reader.join().unwrap();
    assert_eq!(
        received.len(),
        accepted.len(),
        "every accepted byte arrives"
    );
    assert!(received == accepted, "in order");
}

/// Between two runtime tasks: 8 MiB through `write_all` on one side and `read_exact` in
/// uneven pieces on the other, every byte checked.
async fn a_large_transfer_between_tasks_keeps_every_byte(context: Context) {
    let mut listener = context.bind(loopback()).await.unwrap();
    let address = listener.local_addr().unwrap();
    let len = 8 << 20;
    let writer = context.clone().spawn(move |context| async move {
        let (mut sink, _stream) = context.dial(address).await.unwrap();
        let sent = pattern(len);
        for piece in sent.chunks(100_003) {
            sink.write_all(piece).await.unwrap();
        }
        sink.close().await.unwrap();
    });
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let mut received = vec![0u8; len];
    let mut at = 0;
    let mut piece = 1;
    while at < len {
        let end = (at + piece).min(len);
        stream.read_exact(&mut received[at..end]).await.unwrap();
        at = end;
        piece = piece * 7 % 65_537 + 1;
    }
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    assert!(received == pattern(len), "every byte, in order");
    writer.await.unwrap();
}

/// Poll-based reads and the async calls take turns on one stream: a `poll_read` left
/// waiting (its receive in flight) is followed by `recv`, `recv_some`, `read_line` and
/// `read_exact`; every byte comes once, in order.
async fn poll_reads_and_recv_interleave_without_losing_or_reordering(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let mut cx = TaskContext::from_waker(Waker::noop());
    let mut first = [0u8; 8];
    // Nothing has come: the read waits, with its receive registered in the stream.
    assert!(
        Pin::new(&mut stream)
            .poll_read(&mut cx, &mut first)
            .is_pending()
    );
    let sent = pattern(200_000);
    let expected = sent.clone();
    let writer = std::thread::spawn(move || {
        let mut client = client;
        client.write_all(&sent).unwrap();
        client
    });
    let mut received = Vec::new();
    received.extend_from_slice(&stream.recv(3).await.unwrap().coalesce());
    received.extend_from_slice(&stream.recv_some(5).await.unwrap().coalesce());
    let mut buf = [0u8; 7];
    let count = stream.read(&mut buf).await.unwrap();
    received.extend_from_slice(&buf[..count]);
    let available = stream.fill_buf().await.unwrap().len();
    assert!(available > 0);
    received.extend_from_slice(&stream.recv(available.min(10)).await.unwrap().coalesce());
    while received.len() < expected.len() {
        let want = (expected.len() - received.len()).min(4099);
        if received.len() % 2 == 0 {
            received.extend_from_slice(&stream.recv(want).await.unwrap().coalesce());
        } else {
            let mut buf = vec![0u8; want];
            stream.read_exact(&mut buf).await.unwrap();
            received.extend_from_slice(&buf);
        }
    }
    assert!(received == expected, "every byte once, in order");
    drop(writer.join().unwrap());
    assert_eq!(stream.read(&mut buf).await.unwrap(), 0);
}

/// A stream dropped while a `poll_read` waits with its receive in flight: the receive ends
/// and the socket closes (the peer's writes meet a reset), and the runtime shuts down
/// without waiting for the peer.
async fn a_stream_dropped_mid_read_closes_its_socket(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, sink, mut stream) = listener.accept().await.unwrap();
    client.write_all(b"partial").unwrap();
    let mut partial = [0u8; 7];
    stream.read_exact(&mut partial).await.unwrap();
    let mut cx = TaskContext::from_waker(Waker::noop());
    let mut rest = [0u8; 16];
    // Nothing more has come: the read waits, with its receive in flight.
    assert!(
        Pin::new(&mut stream)
            .poll_read(&mut cx, &mut rest)
            .is_pending()
    );
    drop(stream);
    drop(sink);
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).unwrap(), 0);
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    let failed = loop {
        if let Err(error) = client.write_all(b"after") {
            break error;
        }
        assert!(std::time::Instant::now() < limit, "the socket stayed open");
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

/// A peer silent past the read/write timeout fails a read with kind `TimedOut`, whose
/// payload is the runtime's error; the stream stays usable and reads what comes later.
async fn a_read_timeout_is_timed_out_and_leaves_the_stream_usable(context: Context) {
    let (mut listener, mut client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let mut buf = [0u8; 4];
    let timed_out = stream.read(&mut buf).await.unwrap_err();
    assert_eq!(timed_out.kind(), ErrorKind::TimedOut, "{timed_out}");
    let inner = timed_out
        .get_ref()
        .expect("the runtime error is the payload");
    assert!(
        matches!(inner.downcast_ref::<Error>(), Some(Error::RecvFailed(_))),
        "{inner:?}"
    );
    client.write_all(b"late").unwrap();
    stream.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"late");
}

/// A peer that never reads: once the socket is full, the write handed to the ring times out
/// within the read/write timeout, as kind `TimedOut`; the sink is broken from then on
/// (`BrokenPipe`), as after a failed `send`.
async fn a_write_timeout_is_timed_out_and_breaks_the_sink(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, mut sink, _stream) = listener.accept().await.unwrap();
    let chunk = vec![7u8; 1 << 20];
    let timed_out = loop {
        if let Err(error) = sink.write_all(&chunk).await {
            break error;
        }
    };
    assert_eq!(timed_out.kind(), ErrorKind::TimedOut, "{timed_out}");
    let inner = timed_out
        .get_ref()
        .expect("the runtime error is the payload");
    assert!(
        matches!(inner.downcast_ref::<Error>(), Some(Error::SendFailed(_))),
        "{inner:?}"
    );
    let after = sink.write_all(b"more").await.unwrap_err();
    assert_eq!(after.kind(), ErrorKind::BrokenPipe, "{after}");
    drop(client);
}

/// A peer that resets the connection fails the read with kind `ConnectionReset`.
async fn a_reset_fails_the_read_with_its_kind(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let (_, _sink, mut stream) = listener.accept().await.unwrap();
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a live socket and a correctly sized option value.
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&client),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    drop(client);
    let mut buf = [0u8; 4];
    let reset = stream.read(&mut buf).await.unwrap_err();
    assert_eq!(reset.kind(), ErrorKind::ConnectionReset, "{reset}");
}

/// The halves show their descriptor and addresses.
async fn the_halves_show_their_addresses(context: Context) {
    let (mut listener, client) = listener_and_client(&context).await;
    let local = listener.local_addr().unwrap();
    let (peer, sink, stream) = listener.accept().await.unwrap();
    assert!(format!("{listener:?}").contains(&local.to_string()));
    for shown in [format!("{sink:?}"), format!("{stream:?}")] {
        assert!(shown.contains(&local.to_string()), "{shown}");
        assert!(shown.contains(&peer.to_string()), "{shown}");
        assert!(shown.contains("fd"), "{shown}");
    }
    drop(client);
}

use futures::FutureExt as _;

fn multishot() -> Config {
    Config::new().with_ring_config(RingConfig {
        receive_buffers: 4,
        receive_buffer_size: 64,
        ..RingConfig::default()
    })
}

fn short_timeouts() -> Config {
    Config::new().with_read_write_timeout(Duration::from_millis(200))
}

fn multishot_short_timeouts() -> Config {
    multishot().with_read_write_timeout(Duration::from_millis(200))
}

macro_rules! cases {
    ($config:ident, $($name:ident),* $(,)?) => {
        $(
            #[runtime::test(config = $config, timeout = "60s")]
            async fn $name(context: Context) {
                super::$name(context).await;
            }
        )*
    };
}

mod one_call {
    use super::*;

    fn default() -> Config {
        Config::new()
    }

    cases!(
        default,
        recv_some_of_nothing_is_empty_at_once,
        read_to_end_reads_every_byte_until_the_end,
        read_line_splits_lines_across_segments,
        write_all_flush_and_close_end_the_stream_after_every_byte,
        a_dropped_send_does_not_cancel_bytes_poll_write_accepted,
        a_large_transfer_between_tasks_keeps_every_byte,
        poll_reads_and_recv_interleave_without_losing_or_reordering,
        a_stream_dropped_mid_read_closes_its_socket,
        a_reset_fails_the_read_with_its_kind,
        the_halves_show_their_addresses,
    );
    cases!(
        short_timeouts,
        a_read_timeout_is_timed_out_and_leaves_the_stream_usable,
        a_write_timeout_is_timed_out_and_breaks_the_sink,
    );
}

mod multishot {
    use super::*;

    cases!(
        multishot,
        recv_some_of_nothing_is_empty_at_once,
        read_to_end_reads_every_byte_until_the_end,
        read_line_splits_lines_across_segments,
        a_large_transfer_between_tasks_keeps_every_byte,
        poll_reads_and_recv_interleave_without_losing_or_reordering,
        a_stream_dropped_mid_read_closes_its_socket,
        a_reset_fails_the_read_with_its_kind,
    );
    cases!(
        multishot_short_timeouts,
        a_read_timeout_is_timed_out_and_leaves_the_stream_usable
    );
}

/// The halves are the `futures::io` types the contract names, movable between tasks and
/// printable.
#[test]
fn the_halves_are_futures_io_types() {
    fn stream<
        T: futures::io::AsyncRead + futures::io::AsyncBufRead + Unpin + Send + std::fmt::Debug,
    >() {
    }
    fn sink<T: futures::io::AsyncWrite + Unpin + Send + std::fmt::Debug>() {}
    fn listener<T: std::fmt::Debug>() {}
    stream::<runtime::net::Stream>();
    sink::<runtime::net::Sink>();
    listener::<runtime::net::Listener>();
}

/// A runtime error becomes an io error of the matching kind, carrying the runtime error as
/// its payload and the OS error as its source.
#[test]
fn runtime_errors_become_io_errors_of_their_kind() {
    let reset = std::io::Error::from(Error::RecvFailed(ErrorKind::ConnectionReset.into()));
    assert_eq!(reset.kind(), ErrorKind::ConnectionReset);
    assert!(matches!(
        reset
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<Error>()),
        Some(Error::RecvFailed(_))
    ));
    assert!(std::error::Error::source(&reset).is_some(), "the OS error");
    assert_eq!(
        std::io::Error::from(Error::Timeout).kind(),
        ErrorKind::TimedOut
    );
    assert_eq!(
        std::io::Error::from(Error::BlobMissing("p/00".into())).kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        std::io::Error::from(Error::Closed).kind(),
        ErrorKind::ConnectionAborted
    );
}
