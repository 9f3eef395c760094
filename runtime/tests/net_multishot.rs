//! TCP streams that receive through multishot receives (`RingConfig::receive_buffers` above
//! zero), with buffers small enough that every message takes several completions and the ring
//! runs out of buffers. The cases shared with one receive per call (`net_cases`): exact
//! receives, echoes, nothing lost to a dropped call, the end of the stream, resets and
//! timeouts. Multishot's own: deadlines that belong to the call that waits, and a dropped
//! stream that ends its armed receive.

mod net_cases;

use net_cases::listener_and_client;
use runtime::prelude::*;
use runtime::{Config, Context, RingConfig};
use std::io::Write;
use std::time::Duration;

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

#[runtime::test(config = multishot, timeout = "20s")]
async fn recv_returns_exactly_the_bytes_asked_for_across_segments(context: Context) {
    net_cases::recv_returns_exactly_the_bytes_asked_for_across_segments(context).await;
}

/// Both ends receive through multishot receives; every echo comes back whole, and every
/// completion named a live operation.
#[runtime::test(config = multishot, timeout = "20s")]
async fn dial_and_echo_between_runtime_tasks(context: Context) {
    net_cases::dial_and_echo_between_runtime_tasks(context).await;
}

#[runtime::test(config = multishot, timeout = "20s")]
async fn a_dropped_recv_loses_no_bytes(context: Context) {
    net_cases::a_dropped_recv_loses_no_bytes(context).await;
}

/// The end of the stream fails a call that wants more than arrived, and leaves what arrived
/// for a call that wants no more.
#[runtime::test(config = multishot, timeout = "20s")]
async fn a_peer_closing_mid_recv_is_an_unexpected_eof(context: Context) {
    net_cases::a_peer_closing_mid_recv_is_an_unexpected_eof(context).await;
}

#[runtime::test(config = multishot, timeout = "20s")]
async fn a_peer_reset_fails_recv_and_send(context: Context) {
    net_cases::a_peer_reset_fails_recv_and_send(context).await;
}

#[runtime::test(config = multishot_short_timeouts, timeout = "20s")]
async fn a_silent_peer_times_the_recv_out_and_keeps_what_arrived(context: Context) {
    let timeout = Duration::from_millis(400);
    net_cases::a_silent_peer_times_the_recv_out_and_keeps_what_arrived(context, timeout).await;
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
    net_cases::assert_closed(&context, client).await;
}
