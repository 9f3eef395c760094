//! Multishot receives on a driver with provided buffers: bytes arrive whole and in order across
//! many completions of one registration, a full inbox pauses the receive without losing a
//! byte, a receive that runs out of buffers goes on, and deadlines, closing and a ring without
//! buffers each end it with the answer they name.

use super::{PROGRESS, eventfd};
use crate::buffer::IoBufMut;
use crate::driver::operation::{Completion, INBOX_CAP, ReceiveEnd};
use crate::driver::{Driver, Request, RequestOutput, RingMetrics};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

/// A connected pair of Unix stream sockets: ours (what the ring receives from) and the peer's.
fn socket_pair() -> (Arc<OwnedFd>, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for both descriptors; the result is checked.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(made, 0, "socketpair: {}", io::Error::last_os_error());
    // SAFETY: fresh descriptors nobody else owns.
    unsafe {
        (
            Arc::new(OwnedFd::from_raw_fd(fds[0])),
            OwnedFd::from_raw_fd(fds[1]),
        )
    }
}

fn write_all(fd: &OwnedFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: reads `bytes.len()` bytes from a live slice into a live descriptor.
        let written = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        assert!(written > 0, "write: {}", io::Error::last_os_error());
        bytes = &bytes[written as usize..];
    }
}

/// A ring with `buffers` provided buffers of `size` bytes.
fn ring(wake: &OwnedFd, buffers: u16, size: u32) -> Driver {
    Driver::new(
        &crate::RingConfig {
            size: 8,
            receive_buffers: buffers,
            receive_buffer_size: size,
            ..Default::default()
        },
        wake.as_raw_fd(),
        RingMetrics::default(),
        (Duration::from_millis(10), 64),
    )
    .expect("a ring")
}

/// Services `ring` until `done` holds; fails the test if that takes longer than [`PROGRESS`].
fn drive(ring: &mut Driver, mut done: impl FnMut() -> bool) {
    let limit = Instant::now() + PROGRESS;
    let mut wakes = Vec::new();
    while !done() {
        assert!(Instant::now() < limit, "the ring made no progress");
        ring.wait(Some(Duration::from_millis(5)), || true, || {})
            .expect("wait");
        ring.service(&mut wakes).expect("service");
        ring.expire(Instant::now());
    }
}

/// Takes what `slot` received into `into` and its end, if it ended.
fn take(slot: &Completion, into: &mut IoBufMut) -> Option<ReceiveEnd> {
    match slot.take_received(Waker::noop(), into)? {
        RequestOutput::Received(end) => Some(end),
        other => unreachable!("a multishot receive answered {other:?}"),
    }
}

fn multishot(fd: &Arc<OwnedFd>, deadline: Option<Instant>) -> Request {
    Request::RecvMulti {
        fd: fd.clone(),
        deadline,
    }
}

/// One registration receives fifty writes, whole and in order (one slot in flight throughout:
/// the registration, or its resubmissions after running out of buffers), and ends when the
/// peer closes.
#[test]
fn one_multishot_receive_takes_every_write_in_order_until_the_peer_closes() {
    let wake = eventfd();
    let mut ring = ring(&wake, 4, 64);
    let (ours, theirs) = socket_pair();
    let slot = ring.register(multishot(&ours, None));
    let mut received = IoBufMut::default();
    let mut sent = Vec::new();
    for round in 0..50_u8 {
        // Up to 149 bytes: several buffers' worth, so one write takes several completions.
        let chunk = vec![round; 100 + usize::from(round)];
        write_all(&theirs, &chunk);
        sent.extend_from_slice(&chunk);
        drive(&mut ring, || {
            assert!(take(&slot, &mut received).is_none(), "it ended early");
            received.len() == sent.len()
        });
        assert_eq!(ring.in_flight(), 1, "the receive goes on");
    }
    assert_eq!(&received[..], &sent[..]);
    drop(theirs);
    let mut end = None;
    drive(&mut ring, || {
        end = take(&slot, &mut received);
        end.is_some()
    });
    assert!(matches!(end, Some(ReceiveEnd::Closed)), "{end:?}");
    assert_eq!(
        received.len(),
        sent.len(),
        "nothing arrived after the close"
    );
    assert_eq!(ring.in_flight(), 0);
}

/// A peer that sends far more than the reader takes fills the inbox to its cap, and the
/// receive pauses there (the rest waits in the socket, where TCP holds the sender back); armed
/// again after each pause, it delivers every byte in order.
#[test]
fn a_full_inbox_pauses_the_receive_and_loses_no_byte() {
    const TOTAL: usize = 3 * INBOX_CAP;
    const BUFFERS: u16 = 8;
    // The buffers hold less than the cap, so each pause leaves most of the bytes behind.
    const SIZE: u32 = 4096;
    let wake = eventfd();
    let mut ring = ring(&wake, BUFFERS, SIZE);
    let (ours, theirs) = socket_pair();
    let pattern = |index: usize| (index % 251) as u8;
    let writer = std::thread::spawn(move || {
        let bytes: Vec<u8> = (0..TOTAL).map(pattern).collect();
        write_all(&theirs, &bytes);
        theirs
    });
    let mut received = IoBufMut::default();
    let mut pauses = 0;
    while received.len() < TOTAL {
        let slot = ring.register(multishot(&ours, None));
        // Nobody takes the bytes until the receive has ended: it must stop by itself.
        drive(&mut ring, || slot.inbox_state().1.is_some());
        let (held, _) = slot.inbox_state();
        let bound = INBOX_CAP + usize::from(BUFFERS) * SIZE as usize;
        assert!(
            held <= bound,
            "the inbox holds {held} bytes, more than {bound}"
        );
        match take(&slot, &mut received) {
            Some(ReceiveEnd::Paused) => pauses += 1,
            other => panic!("expected a pause, got {other:?}"),
        }
        if TOTAL - received.len() < INBOX_CAP {
            break;
        }
    }
    // The rest (less than one inbox) arrives without another pause.
    let slot = ring.register(multishot(&ours, None));
    drive(&mut ring, || {
        assert!(take(&slot, &mut received).is_none());
        received.len() == TOTAL
    });
    assert!(pauses >= 2, "{pauses} pauses for three inboxes' worth");
    assert!(
        received
            .iter()
            .enumerate()
            .all(|(index, &byte)| byte == pattern(index)),
        "bytes arrived out of order"
    );
    drop(writer.join().expect("writer"));
    let mut wakes = Vec::new();
    ring.close(&mut wakes);
}

/// With one provided buffer, bytes that arrive faster than one buffer holds run the ring out
/// of buffers; the driver submits the receive again, so it goes on and nothing is lost.
#[test]
fn a_receive_that_runs_out_of_buffers_goes_on() {
    let wake = eventfd();
    let mut ring = ring(&wake, 1, 64);
    let (ours, theirs) = socket_pair();
    let sent: Vec<u8> = (0..4096_u32).map(|index| (index % 253) as u8).collect();
    // In the socket before the receive starts: the first try finds far more than one buffer.
    write_all(&theirs, &sent);
    let slot = ring.register(multishot(&ours, None));
    let mut received = IoBufMut::default();
    drive(&mut ring, || {
        let end = take(&slot, &mut received);
        assert!(end.is_none(), "the receive ended: {end:?}");
        received.len() == sent.len()
    });
    assert_eq!(&received[..], &sent[..]);
    assert_eq!(ring.in_flight(), 1);
    assert!(
        ring.resubmissions > 0,
        "the receive never ran out of buffers, so this test proves nothing"
    );
    let mut wakes = Vec::new();
    ring.close(&mut wakes);
    drop(theirs);
}

/// A receive whose deadline passes with nothing received ends with `TimedOut`.
#[test]
fn a_multishot_receive_times_out_at_its_deadline() {
    let wake = eventfd();
    let mut ring = ring(&wake, 4, 64);
    let (ours, _theirs) = socket_pair();
    let started = Instant::now();
    let slot = ring.register(multishot(&ours, Some(started + Duration::from_millis(30))));
    let mut received = IoBufMut::default();
    let mut end = None;
    drive(&mut ring, || {
        end = take(&slot, &mut received);
        end.is_some()
    });
    match end {
        Some(ReceiveEnd::Failed(error)) => assert_eq!(error.kind(), io::ErrorKind::TimedOut),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert_eq!(ring.in_flight(), 0);
}

/// Closing the ring cancels an armed receive. The connection outlives the ring, so the
/// receive ends as a pause (the stream arms another where it runs next), after the bytes that
/// arrived before.
#[test]
fn closing_the_ring_pauses_an_armed_receive() {
    let wake = eventfd();
    let mut ring = ring(&wake, 4, 64);
    let (ours, theirs) = socket_pair();
    let slot = ring.register(multishot(&ours, None));
    write_all(&theirs, b"before");
    drive(&mut ring, || slot.inbox_state().0 == 6);
    let mut wakes = Vec::new();
    ring.close(&mut wakes);
    assert_eq!(ring.in_flight(), 0);
    let mut received = IoBufMut::default();
    let end = take(&slot, &mut received);
    assert!(matches!(end, Some(ReceiveEnd::Paused)), "{end:?}");
    assert_eq!(&received[..], b"before");
}

/// A ring configured without provided buffers answers a multishot receive at once with
/// `Unsupported`, submitting nothing.
#[test]
fn a_ring_without_buffers_answers_unsupported() {
    let wake = eventfd();
    let mut ring = ring(&wake, 0, 64);
    let (ours, _theirs) = socket_pair();
    let slot = ring.register(multishot(&ours, None));
    assert_eq!(ring.in_flight(), 0);
    let mut received = IoBufMut::default();
    assert!(matches!(
        take(&slot, &mut received),
        Some(ReceiveEnd::Unsupported)
    ));
}
