//! What the smoke tests share: start an example as a child process, learn its address from
//! its first line, talk to it over loopback, and stop it with SIGINT.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long an example may run in a test before the watchdog kills it: a hung server then
/// fails its test (its output ends) rather than hanging the suite.
const DEADLINE: Duration = Duration::from_secs(120);

/// Kills process `pid` unless dropped within `DEADLINE`.
pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Watchdog {
    pub fn new(pid: u32) -> Watchdog {
        let (done, watching) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watching.recv_timeout(DEADLINE)
            {
                eprintln!("the example ran past {DEADLINE:?}: killing it");
                // SAFETY: signalling our own child process.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        });
        Watchdog(Some(done))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.0.take());
    }
}

/// A running example; killed if a test fails before it stops, or runs past the deadline.
pub struct Server {
    pub child: Child,
    /// What the example prints; `None` once closed (`close_stdout`).
    pub output: Option<BufReader<std::process::ChildStdout>>,
    pub address: SocketAddr,
    _watchdog: Watchdog,
}

impl Server {
    /// Starts `binary` on an ephemeral loopback port; its first line must be
    /// `"<banner> <address>"`.
    pub fn start(binary: &str, banner: &str) -> Server {
        Server::start_with(binary, banner, &[])
    }

    /// `start`, with environment variables set for the example.
    pub fn start_with(binary: &str, banner: &str, environment: &[(&str, &str)]) -> Server {
        Server::launch(binary, banner, &["127.0.0.1:0"], environment)
    }

    /// Starts `binary` with `arguments` and `environment`; its first line must be
    /// `"<banner> <address>"`.
    pub fn launch(
        binary: &str,
        banner: &str,
        arguments: &[&str],
        environment: &[(&str, &str)],
    ) -> Server {
        let mut child = Command::new(binary)
            .args(arguments)
            .envs(environment.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let watchdog = Watchdog::new(child.id());
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        output.read_line(&mut first).unwrap();
        let address = first
            .trim()
            .strip_prefix(banner)
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .trim()
            .parse()
            .unwrap();
        Server {
            child,
            output: Some(output),
            address,
            _watchdog: watchdog,
        }
    }

    pub fn connect(&self) -> Client {
        let stream = TcpStream::connect(self.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }

    /// Kills the example with SIGKILL, as a crash would, and waits for it.
    pub fn kill(mut self) {
        // SAFETY: sending a signal to our own child process.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) },
            0
        );
        let _ = self.child.wait();
    }

    /// Closes the reading end of the example's stdout, as `| head -2` does once it has read
    /// its lines: the example's next print meets a closed pipe.
    pub fn close_stdout(&mut self) {
        self.output = None;
    }

    /// The next line the example prints.
    pub fn printed(&mut self) -> String {
        let mut line = String::new();
        self.output
            .as_mut()
            .expect("stdout open")
            .read_line(&mut line)
            .unwrap();
        line
    }

    /// Sends SIGINT and returns everything the example printed after its first line, once
    /// it exited successfully.
    pub fn interrupt(mut self) -> String {
        // SAFETY: sending a signal to our own child process.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) },
            0
        );
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
        let mut rest = String::new();
        if let Some(output) = &mut self.output {
            output.read_to_string(&mut rest).unwrap();
        }
        rest
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Client {
    pub stream: TcpStream,
    pub reader: BufReader<TcpStream>,
}

impl Client {
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Shuts the writing side: the server reads the end of the stream, and may still answer.
    pub fn shut_writing(&mut self) {
        self.stream.shutdown(std::net::Shutdown::Write).unwrap();
    }

    /// Sends `bytes`; false if the server has closed the connection.
    pub fn try_send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    /// The next line, or `None` if the connection failed or ended first.
    pub fn try_line(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(read) if read > 0 => Some(line),
            _ => None,
        }
    }

    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line
    }

    /// Whether the server closed the connection (an end of stream, or a reset) once what it
    /// sent before is read.
    pub fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        match self.reader.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}
