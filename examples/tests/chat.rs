//! Runs the `chat` example as a child process: nicknames, rooms and messages between
//! clients, error lines for mistakes, an oversized line closing its own connection, a slow
//! client dropped without slowing its room, a burst read promptly kicking nobody, empty
//! rooms removed and rooms bounded, control bytes escaped, and a clean exit on SIGINT.

mod common;

use common::Server;
use std::time::{Duration, Instant};

#[test]
fn chat_rooms_relay_messages_and_drop_slow_clients() {
    // A write grace far longer than the test: only the room dropping the slow client can
    // disconnect it in time.
    let server = Server::start_with(
        env!("CARGO_BIN_EXE_chat"),
        "chat listening on",
        &[("CHAT_WRITE_GRACE_SECS", "3600")],
    );
    let mut alice = server.connect();
    let mut bob = server.connect();
    assert!(alice.line().starts_with("* welcome, guest"));
    assert!(bob.line().starts_with("* welcome, guest"));

    // Mistakes: error lines, and the connections stay.
    alice.send(b"hello?\n");
    assert_eq!(alice.line(), "ERR join a room first: /join ROOM\n");
    alice.send(b"/nick no spaces allowed\n");
    assert!(alice.line().starts_with("ERR names are 1 to 32"));
    alice.send(b"/dance\n");
    assert!(alice.line().starts_with("ERR unknown command /dance"));
    alice.send(b"\xff\n");
    assert_eq!(alice.line(), "ERR the line is not UTF-8\n");

    alice.send(b"/nick alice\n/join lobby\n");
    assert_eq!(alice.line(), "OK you are alice\n");
    assert_eq!(alice.line(), "OK joined #lobby (1 here)\n");
    bob.send(b"/nick bob\n/join lobby\n");
    assert_eq!(bob.line(), "OK you are bob\n");
    assert_eq!(bob.line(), "OK joined #lobby (2 here)\n");
    assert_eq!(alice.line(), "* bob joined #lobby\n");

    bob.send(b"hi alice\n");
    assert_eq!(alice.line(), "<bob> hi alice\n");
    alice.send(b"hi bob\n");
    assert_eq!(bob.line(), "<alice> hi bob\n");

    // An oversized line closes that connection only.
    let mut huge = server.connect();
    huge.line();
    huge.send(&vec![b'x'; 64 * 1024 + 1]);
    assert_eq!(huge.line(), "ERR line longer than 65536 bytes; closing\n");
    assert!(huge.closed());

    // A client that never reads: once its connection's outbox passes its byte bound, the
    // room drops it and goes on; bob receives every message meanwhile (a room that waited for the slow
    // client would stall here, the write grace being an hour).
    let mut slow = server.connect();
    slow.line();
    slow.send(b"/nick slow\n/join lobby\n");
    assert_eq!(slow.line(), "OK you are slow\n");
    assert_eq!(slow.line(), "OK joined #lobby (3 here)\n");
    assert_eq!(alice.line(), "* slow joined #lobby\n");
    assert_eq!(bob.line(), "* slow joined #lobby\n");
    // 24 MB in all: past the slow client's socket buffers and its 1 MiB outbox.
    let message = "y".repeat(4000);
    const FLOOD: usize = 6000;
    let mut announced = 0;
    for index in 0..FLOOD {
        alice.send(format!("{index} {message}\n").as_bytes());
        let mut line = bob.line();
        if line == "* slow was too slow and left\n" {
            announced += 1;
            line = bob.line();
        }
        assert_eq!(
            line,
            format!("<alice> {index} {message}\n"),
            "message {index}"
        );
    }
    assert_eq!(announced, 1, "the room said once that slow left");
    // The slow client is disconnected (it reads what was sent before, then the end).
    assert!(slow.closed());

    assert_eq!(server.interrupt(), "chat stopped\n");
}

/// A client that stops reading while its connection has lines to write is dropped by its
/// writer once a send has waited the write grace, and its socket is closed then, within a
/// second: the send given up is cancelled, and does not hold the socket open until the
/// runtime's own 30 s deadline.
#[test]
fn an_unwritable_client_is_closed_within_its_write_grace() {
    let server = Server::start_with(
        env!("CARGO_BIN_EXE_chat"),
        "chat listening on",
        &[("CHAT_WRITE_GRACE_SECS", "1")],
    );
    let mut alice = server.connect();
    alice.line();
    alice.send(b"/nick alice\n/join lobby\n");
    assert_eq!(alice.line(), "OK you are alice\n");
    assert_eq!(alice.line(), "OK joined #lobby (1 here)\n");
    let mut slow = server.connect();
    slow.cap_receive_buffer(4096);
    slow.line();
    slow.send(b"/nick slow\n/join lobby\n");
    assert_eq!(slow.line(), "OK you are slow\n");
    assert_eq!(slow.line(), "OK joined #lobby (2 here)\n");
    assert_eq!(alice.line(), "* slow joined #lobby\n");
    assert!(server.holds_socket_of(&slow));
    // Lines for slow, 128 KB at a time, each batch followed by a look (of up to 200 ms) for
    // the announcement of its end: once its socket is full, its writer's send waits, and the
    // grace runs out long before the connection's 1 MiB outbox fills.
    let message = "y".repeat(4000);
    alice
        .stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let said = loop {
        for index in 0..32 {
            alice.send(format!("{index} {message}\n").as_bytes());
        }
        if let Some(line) = alice.try_line() {
            break line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "slow was never dropped"
        );
    };
    let announced = Instant::now();
    assert_eq!(said, "* slow left #lobby\n", "dropped by its writer");
    while server.holds_socket_of(&slow) {
        assert!(
            announced.elapsed() <= Duration::from_secs(1),
            "the socket was still open a second after slow was dropped"
        );
        // Looking at /proc again (nothing announces a socket's close to another process).
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.interrupt(), "chat stopped\n");
}

/// A burst from every member of a busy room, read promptly by all, kicks nobody: what
/// counts is bytes a client leaves unread, not lines the server has yet to write.
#[test]
fn a_burst_read_promptly_kicks_nobody() {
    const MEMBERS: usize = 100;
    let server = Server::start(env!("CARGO_BIN_EXE_chat"), "chat listening on");
    let mut members: Vec<_> = (0..MEMBERS).map(|_| server.connect()).collect();
    for (index, member) in members.iter_mut().enumerate() {
        assert!(member.line().starts_with("* welcome, guest"));
        member.send(format!("/nick m{index}\n/join burst\n").as_bytes());
        assert_eq!(member.line(), format!("OK you are m{index}\n"));
        assert_eq!(
            member.line(),
            format!("OK joined #burst ({} here)\n", index + 1)
        );
    }
    // Each member hears of those who joined after it.
    for (index, member) in members.iter_mut().enumerate() {
        for later in index + 1..MEMBERS {
            assert_eq!(member.line(), format!("* m{later} joined #burst\n"));
        }
    }
    for (index, member) in members.iter_mut().enumerate() {
        member.send(format!("one from {index}\ntwo from {index}\n").as_bytes());
    }
    for (index, member) in members.iter_mut().enumerate() {
        let mut heard = Vec::new();
        for _ in 0..2 * (MEMBERS - 1) {
            let line = member.line();
            assert!(!line.contains("too slow"), "m{index} saw {line:?}");
            heard.push(line);
        }
        for other in (0..MEMBERS).filter(|other| *other != index) {
            assert!(heard.contains(&format!("<m{other}> one from {other}\n")));
            assert!(heard.contains(&format!("<m{other}> two from {other}\n")));
        }
    }
    assert_eq!(server.interrupt(), "chat stopped\n");
}

/// Rooms are bounded per server, and a room left empty is removed: a connection that
/// hops through thousands of rooms never runs into the bound, while three rooms held open
/// at once do.
#[test]
fn empty_rooms_are_removed_and_rooms_are_bounded() {
    let server = Server::start_with(
        env!("CARGO_BIN_EXE_chat"),
        "chat listening on",
        &[("CHAT_MAX_ROOMS", "2")],
    );
    let mut hopper = server.connect();
    hopper.line();
    let mut joins = Vec::new();
    for room in 0..2000 {
        joins.extend_from_slice(format!("/join r{room}\n").as_bytes());
    }
    hopper.send(&joins);
    for room in 0..2000 {
        assert_eq!(hopper.line(), format!("OK joined #r{room} (1 here)\n"));
    }
    // The hopper holds r1999 open; a second room fits, a third does not.
    let mut second = server.connect();
    second.line();
    second.send(b"/join other\n");
    assert_eq!(second.line(), "OK joined #other (1 here)\n");
    let mut third = server.connect();
    third.line();
    third.send(b"/join third\n");
    assert_eq!(
        third.line(),
        "ERR too many rooms (2 open): join an existing one\n"
    );
    // An existing room is still open to it; once it leaves `other` empty, `third` fits.
    third.send(b"/join other\n");
    assert_eq!(third.line(), "OK joined #other (2 here)\n");
    assert_eq!(second.line(), "* guest3 joined #other\n");
    second.send(b"/join r1999\n");
    assert_eq!(second.line(), "OK joined #r1999 (2 here)\n");
    assert_eq!(third.line(), "* guest2 left #other\n");
    third.send(b"/join third\n");
    assert_eq!(third.line(), "OK joined #third (1 here)\n");
    assert_eq!(server.interrupt(), "chat stopped\n");
}

/// Control bytes in a message (a terminal escape, NUL, DEL) reach other members escaped,
/// never raw.
#[test]
fn control_bytes_are_escaped() {
    let server = Server::start(env!("CARGO_BIN_EXE_chat"), "chat listening on");
    let mut alice = server.connect();
    let mut bob = server.connect();
    alice.line();
    bob.line();
    alice.send(b"/nick alice\n/join esc\n");
    alice.line();
    alice.line();
    bob.send(b"/nick bob\n/join esc\n");
    bob.line();
    bob.line();
    assert_eq!(alice.line(), "* bob joined #esc\n");
    alice.send(b"\x1b[31mred\x1b]0;title\x07 nul\x00 del\x7f end\n");
    assert_eq!(
        bob.line(),
        "<alice> \\x1b[31mred\\x1b]0;title\\x07 nul\\x00 del\\x7f end\n"
    );
    // A C1 control, a right-to-left override, and a backslash (so `\x1b` typed as text
    // cannot pass for an escaped byte).
    alice.send("csi\u{9b} rtl\u{202e} slash\\x1b\n".as_bytes());
    assert_eq!(bob.line(), "<alice> csi\\x9b rtl\\u{202e} slash\\\\x1b\n");
    // Unknown commands are echoed escaped and cut short; messages are bounded.
    alice.send(b"/\x1b[2Jwipe\n");
    assert_eq!(
        alice.line(),
        "ERR unknown command /\\x1b[2Jwipe: use /nick NAME, /join ROOM, /quit, or type a message\n"
    );
    alice.send(format!("{}\n", "z".repeat(5000)).as_bytes());
    assert_eq!(alice.line(), "ERR messages are at most 4096 bytes\n");
    assert_eq!(server.interrupt(), "chat stopped\n");
}

/// Connections are bounded per server: past the bound a client gets an error line and is
/// closed; a slot freed by a quit takes the next client.
#[test]
fn connections_are_bounded() {
    let server = Server::start_with(
        env!("CARGO_BIN_EXE_chat"),
        "chat listening on",
        &[("CHAT_MAX_CONNECTIONS", "2")],
    );
    let mut first = server.connect();
    let mut second = server.connect();
    assert!(first.line().starts_with("* welcome, guest"));
    assert!(second.line().starts_with("* welcome, guest"));
    let mut refused = server.connect();
    assert_eq!(
        refused.line(),
        "ERR the server is full (2 connections): try later\n"
    );
    assert!(refused.closed());
    first.send(b"/quit\n");
    assert_eq!(first.line(), "OK bye\n");
    assert!(first.closed());
    let mut next = server.connect();
    assert!(next.line().starts_with("* welcome, guest"));
    assert_eq!(server.interrupt(), "chat stopped\n");
}

/// At the connection limit, a burst of connections that each send a line at once is
/// answered: every connection past the limit reads the whole refusal and then end-of-stream
/// (none is closed silently), and the admitted ones are welcomed and served.
#[test]
fn a_burst_past_the_limit_is_refused_in_words() {
    let server = Server::start_with(
        env!("CARGO_BIN_EXE_chat"),
        "chat listening on",
        &[("CHAT_MAX_CONNECTIONS", "5")],
    );
    let mut admitted = server.burst(
        200,
        b"hello\n",
        |line| line.starts_with("* welcome, guest"),
        "ERR the server is full (5 connections): try later\n",
    );
    assert_eq!(admitted.len(), 5);
    for client in &mut admitted {
        assert_eq!(client.line(), "ERR join a room first: /join ROOM\n");
    }
    assert_eq!(server.interrupt(), "chat stopped\n");
}
