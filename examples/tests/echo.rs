//! Runs the `echo` example as a child process and talks to it over loopback: echoes, the
//! error line for a malformed line, an oversized line closing only its own connection, a
//! client leaving mid-line, and a clean exit on SIGINT.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The running example and the address it printed; killed if a test fails early.
struct Server {
    child: Child,
    output: BufReader<std::process::ChildStdout>,
    address: SocketAddr,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_echo"))
            .arg("127.0.0.1:0")
            .stdout(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        output.read_line(&mut first).unwrap();
        let address = first
            .trim()
            .strip_prefix("echo listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .parse()
            .unwrap();
        Server {
            child,
            output,
            address,
        }
    }

    fn connect(&self) -> Client {
        let stream = TcpStream::connect(self.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Client {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line
    }
}

#[test]
fn echo_answers_lines_survives_bad_clients_and_stops_on_sigint() {
    let mut server = Server::start();
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
    // Closed after the error line: an end of stream (or a reset, had bytes been left unread).
    let mut rest = Vec::new();
    let closed = huge.reader.read_to_end(&mut rest);
    assert!(
        rest.is_empty()
            && closed.map_or_else(
                |error| error.kind() == std::io::ErrorKind::ConnectionReset,
                |_| true
            ),
        "closed after the error line: {rest:?}"
    );

    // A client that leaves mid-line leaves the server healthy.
    let mut leaving = server.connect();
    leaving.send(b"half a li");
    drop(leaving);

    second.send(b"unaffected\n");
    assert_eq!(second.line(), "unaffected\n");

    // SIGINT: a clean stop, exit status 0.
    // SAFETY: sending a signal to our own child process.
    assert_eq!(
        unsafe { libc::kill(server.child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut last = String::new();
    server.output.read_to_string(&mut last).unwrap();
    assert_eq!(last, "echo stopped\n");
}
