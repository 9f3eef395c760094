//! Runs the `chat` example as a child process: nicknames, rooms and messages between
//! clients, error lines for mistakes, an oversized line closing its own connection, a slow
//! client dropped without slowing its room, and a clean exit on SIGINT.

mod common;

use common::Server;

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

    // A client that never reads: once its connection's mailbox fills, the room drops it
    // and goes on; bob receives every message meanwhile (a room that waited for the slow
    // client would stall here, the write grace being an hour).
    let mut slow = server.connect();
    slow.line();
    slow.send(b"/nick slow\n/join lobby\n");
    assert_eq!(slow.line(), "OK you are slow\n");
    assert_eq!(slow.line(), "OK joined #lobby (3 here)\n");
    assert_eq!(alice.line(), "* slow joined #lobby\n");
    assert_eq!(bob.line(), "* slow joined #lobby\n");
    let message = "y".repeat(32 * 1024);
    const FLOOD: usize = 600;
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
