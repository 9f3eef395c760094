//! Runs the `echo` example as a child process and talks to it over loopback: echoes, the
//! error line for a malformed line, an oversized line closing only its own connection, a
//! line of exactly the limit accepted, a client leaving mid-line, the idle timeout, the
//! bound on connections, and a clean exit on SIGINT.

mod common;

use common::Server;

#[test]
fn echo_answers_lines_survives_bad_clients_and_stops_on_sigint() {
    let server = Server::start(env!("CARGO_BIN_EXE_echo"), "echo listening on");
    let mut first = server.connect();
    let mut second = server.connect();

    first.send(b"hello\r\nworld\n");
    assert_eq!(first.line(), "hello\n");
    assert_eq!(first.line(), "world\n");

    // Malformed: an error line, and the connection stays.
    first.send(b"\xff\xfe\n");
    assert_eq!(first.line(), "ERR the line is not UTF-8\n");
    first.send(b"still here\n");
    assert_eq!(first.line(), "still here\n");

    // Oversized: an error line, then this connection (only) closes.
    let mut huge = server.connect();
    huge.send(&vec![b'x'; 64 * 1024 + 1]);
    assert_eq!(huge.line(), "ERR line longer than 65536 bytes; closing\n");
    assert!(huge.closed());

    // A line of exactly the limit, with its CRLF, is a line.
    let mut longest = vec![b'y'; 64 * 1024];
    longest.extend_from_slice(b"\r\n");
    second.send(&longest);
    assert_eq!(second.line().len(), 64 * 1024 + 1);

    // A client that leaves mid-line leaves the server healthy.
    let mut leaving = server.connect();
    leaving.send(b"half a li");
    drop(leaving);

    second.send(b"unaffected\n");
    assert_eq!(second.line(), "unaffected\n");

    // A second server on the same address fails, and exits rather than hang (its signal
    // task is released on the way out).
    let mut second_server = std::process::Command::new(env!("CARGO_BIN_EXE_echo"))
        .arg(server.address.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _watchdog = common::Watchdog::new(second_server.id());
    let status = second_server.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status}");

    assert_eq!(server.interrupt(), "echo stopped\n");
}

/// A client whose next line does not come within the idle timeout is told so and closed;
/// past the bound on connections a client is told so and closed, and a slot freed by a
/// closed connection serves the next.
#[test]
fn idle_clients_are_closed_and_connections_are_bounded() {
    let server = Server::start_with(
        env!("CARGO_BIN_EXE_echo"),
        "echo listening on",
        &[
            ("ECHO_IDLE_TIMEOUT_MS", "1500"),
            ("ECHO_MAX_CONNECTIONS", "2"),
        ],
    );
    let mut quiet = server.connect();
    let mut busy = server.connect();
    busy.send(b"one\n");
    assert_eq!(busy.line(), "one\n");
    let mut refused = server.connect();
    assert_eq!(
        refused.line(),
        "ERR too many connections (at most 2); closing\n"
    );
    assert!(refused.closed());
    assert_eq!(quiet.line(), "ERR idle for 1500 ms; closing\n");
    assert!(quiet.closed());
    // The slot is free again once the idle connection is gone; the count may trail the
    // close by a moment, so the next client retries until it is served.
    let waiting = std::time::Instant::now();
    loop {
        let mut next = server.connect();
        next.send(b"two\n");
        if next.line() == "two\n" {
            break;
        }
        assert!(waiting.elapsed() < std::time::Duration::from_secs(20));
    }
    drop(busy);
    assert_eq!(server.interrupt(), "echo stopped\n");
}

/// At the connection limit, a burst of connections that each send a line at once is
/// answered: every connection past the limit reads the whole refusal and then end-of-stream
/// (none is closed silently), and the admitted ones echo.
#[test]
fn a_burst_past_the_limit_is_refused_in_words() {
    let server = Server::start_with(
        env!("CARGO_BIN_EXE_echo"),
        "echo listening on",
        &[("ECHO_MAX_CONNECTIONS", "5")],
    );
    let mut admitted = server.burst(
        200,
        b"ping\n",
        |line| line == "ping\n",
        "ERR too many connections (at most 5); closing\n",
    );
    assert_eq!(admitted.len(), 5);
    for client in &mut admitted {
        client.send(b"again\n");
        assert_eq!(client.line(), "again\n");
    }
    assert_eq!(server.interrupt(), "echo stopped\n");
}
