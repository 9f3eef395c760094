//! What the smoke tests share: start an example as a child process, learn its address from
//! its first line, talk to it over loopback, and stop it with SIGINT.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `command` as a RESP array of bulk strings: what a Redis client sends.
pub fn frame(command: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", command.len()).into_bytes();
    for argument in command {
        out.extend_from_slice(format!("${}\r\n", argument.len()).as_bytes());
        out.extend_from_slice(argument);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Starts `kv` on loopback (its `/metrics` too, on a port of its own) with a fresh data
/// directory named after `name`, and `environment` set; reads its two banner lines. Returns
/// the server and the data directory (the caller removes it).
pub fn launch_kv(name: &str, environment: &[(&str, &str)]) -> (Server, std::path::PathBuf) {
    let data = std::env::temp_dir().join(format!("kv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let mut server = Server::launch(
        env!("CARGO_BIN_EXE_kv"),
        "kv listening on",
        &["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()],
        environment,
    );
    let _metrics = server.printed();
    (server, data)
}

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

    /// Opens `count` connections at once, each sending `hello` at once (as a real client
    /// does), then reads each one's first line: a client `served` accepts is kept; one told
    /// `refusal` must then read end-of-stream (no reset, nothing more), and is closed; any
    /// other first line, or none, fails the test. Returns the clients served.
    pub fn burst(
        &self,
        count: usize,
        hello: &[u8],
        served: impl Fn(&str) -> bool,
        refusal: &str,
    ) -> Vec<Client> {
        let clients: Vec<Client> = (0..count)
            .map(|_| {
                let mut client = self.connect();
                client.send(hello);
                client
            })
            .collect();
        let mut kept = Vec::new();
        for (index, mut client) in clients.into_iter().enumerate() {
            match client.try_line() {
                Some(line) if served(&line) => kept.push(client),
                Some(line) if line == refusal => {
                    let mut rest = Vec::new();
                    let end = client.reader.read_to_end(&mut rest);
                    assert!(
                        end.is_ok() && rest.is_empty(),
                        "connection {index}: {end:?} after the refusal, then {rest:?}"
                    );
                }
                other => panic!("connection {index} was closed without a word: {other:?}"),
            }
        }
        kept
    }

    /// How many sockets the example holds open (its listeners included).
    pub fn open_sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|entries| {
                entries
                    .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                    .filter(|target| target.to_string_lossy().starts_with("socket:"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Whether the example still holds open its side of `client`'s connection (a socket
    /// whose addresses are the server's and `client`'s, read from `/proc/<pid>/net/tcp`, and
    /// found among the example's descriptors).
    pub fn holds_socket_of(&self, client: &Client) -> bool {
        let Some(inode) = self.socket_inode(client) else {
            return false;
        };
        let name = format!("socket:[{inode}]");
        let Ok(entries) = std::fs::read_dir(format!("/proc/{}/fd", self.child.id())) else {
            return false;
        };
        entries
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .any(|target| target.as_os_str() == name.as_str())
    }

    /// The inode of the example's socket connected to `client`, if it has one.
    fn socket_inode(&self, client: &Client) -> Option<u64> {
        let table = std::fs::read_to_string(format!("/proc/{}/net/tcp", self.child.id())).ok()?;
        let (local, remote) = (self.address, client.stream.local_addr().unwrap());
        table.lines().skip(1).find_map(|row| {
            let fields: Vec<&str> = row.split_whitespace().collect();
            let inode = fields.get(9)?.parse().ok()?;
            (parse_proc_address(fields.get(1)?)? == local
                && parse_proc_address(fields.get(2)?)? == remote
                && inode != 0)
                .then_some(inode)
        })
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

/// An IPv4 address as `/proc/net/tcp` prints it: the address as a native-endian hex word,
/// then the port in hex.
fn parse_proc_address(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let address = u32::from_str_radix(address, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddr::from((address.to_ne_bytes(), port)))
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

    /// Caps the socket's receive buffer at about `bytes` (the kernel doubles the value for
    /// its bookkeeping), so a client that stops reading holds the server back sooner.
    pub fn cap_receive_buffer(&mut self, bytes: i32) {
        use std::os::fd::AsRawFd;
        // SAFETY: SO_RCVBUF takes an int, passed by pointer with its size; the descriptor is
        // this client's live socket.
        let set = unsafe {
            libc::setsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const bytes).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
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
