//! A `nats-server` child process on a free loopback port, for tests, examples and benchmarks.
//!
//! The server is started with a port the kernel picks (`-p -1`), and [`Server::start`]
//! returns only after the server logged that it is ready, reading the port from its log: no
//! port is guessed and nothing waits on a timer. The log keeps being read (a full pipe would
//! stall the server) and can be inspected. Dropping a [`Server`] kills it.

use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The program started, found on `PATH`.
pub const PROGRAM: &str = "nats-server";

/// How to start a server.
#[derive(Clone, Debug, Default)]
pub struct ServerBuilder {
    user: Option<(String, String)>,
    token: Option<String>,
    max_payload: Option<usize>,
    port: Option<u16>,
    config: Vec<String>,
}

impl ServerBuilder {
    /// Require this user and password.
    pub fn user(mut self, user: &str, password: &str) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Require this token.
    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The server's `max_payload` (its default is 1 MiB).
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = Some(bytes);
        self
    }

    /// Adds `text` to the server's configuration file, for what the builder has no method for
    /// (say an `authorization { users = [...] }` block with per-user `permissions`).
    pub fn config(mut self, text: &str) -> Self {
        self.config.push(text.to_string());
        self
    }

    /// Listen on this port instead of one the kernel picks.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Starts the server and waits until it is ready.
    pub fn start(self) -> io::Result<Server> {
        Server::launch(self)
    }

    /// For tests: the started server, or `None` (the test should return, skipped) when
    /// `nats-server` is not installed, saying so. Where `REQUIRE_NATS_SERVER` is set (as
    /// `.ci/run` does once it has installed the server), a missing server fails the test
    /// instead, so that a test cannot skip on a machine that has the tool.
    pub fn start_or_skip(self) -> Option<Server> {
        if !Server::available() {
            assert!(
                std::env::var_os("REQUIRE_NATS_SERVER").is_none(),
                "nats-server is required (REQUIRE_NATS_SERVER is set) but not installed"
            );
            println!("SKIPPED: {PROGRAM} is not installed (see .ci/tools)");
            return None;
        }
        Some(self.start().expect("nats-server starts"))
    }
}

/// A running `nats-server`.
pub struct Server {
    child: Child,
    builder: ServerBuilder,
    port: u16,
    config: Option<PathBuf>,
    log: Arc<Mutex<Vec<String>>>,
}

/// Shows the server's process id, port and config file (not its log).
impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("pid", &self.child.id())
            .field("port", &self.port)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Whether `nats-server` can be run on this machine.
    pub fn available() -> bool {
        Command::new(PROGRAM)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// A builder for a server with options.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Starts a server without authentication on a free loopback port.
    pub fn start() -> io::Result<Server> {
        Self::builder().start()
    }

    fn launch(builder: ServerBuilder) -> io::Result<Server> {
        let mut text: String = builder
            .config
            .iter()
            .map(|line| format!("{line}\n"))
            .collect();
        if let Some(max_payload) = builder.max_payload {
            text.push_str(&format!("max_payload: {max_payload}\n"));
        }
        let config = if text.is_empty() {
            None
        } else {
            let path = std::env::temp_dir().join(format!(
                "nats-server-{}-{:x}.conf",
                std::process::id(),
                crate::random::random_u64()
            ));
            std::fs::write(&path, text)?;
            Some(path)
        };
        let (child, port, log) = match spawn(&builder, config.as_ref()) {
            Ok(started) => started,
            Err(error) => {
                if let Some(path) = &config {
                    let _ = std::fs::remove_file(path);
                }
                return Err(error);
            }
        };
        Ok(Server {
            child,
            builder,
            port,
            config,
            log,
        })
    }

    /// The server's client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines the server logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server and starts it again on the same port with the same options.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let builder = self.builder.clone().port(self.port);
        let (child, _, log) = spawn(&builder, self.config.as_ref())?;
        self.child = child;
        self.log = log;
        Ok(())
    }
}

type Log = Arc<Mutex<Vec<String>>>;

/// Starts the process and waits for its readiness line, which follows the line with its port.
fn spawn(builder: &ServerBuilder, config: Option<&PathBuf>) -> io::Result<(Child, u16, Log)> {
    let mut command = Command::new(PROGRAM);
    command.args(["-a", "127.0.0.1", "-p"]);
    command.arg(
        builder
            .port
            .map_or("-1".to_string(), |port| port.to_string()),
    );
    if let Some(path) = config {
        command.arg("-c").arg(path);
    }
    if let Some((user, password)) = &builder.user {
        command.args(["--user", user, "--pass", password]);
    }
    if let Some(token) = &builder.token {
        command.args(["--auth", token]);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{PROGRAM} could not be started ({error}); install it (apt-get install \
                     nats-server)"
                ),
            )
        })?;
    let stderr = child.stderr.take().expect("piped");
    let log: Log = Arc::default();
    let (ready, started) = mpsc::channel();
    {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut port = None;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("Listening for client connections on ") {
                    port = line[at..]
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.trim().parse::<u16>().ok());
                }
                if line.contains("Server is ready") {
                    let _ = ready.send(port);
                }
                log.lock().expect("log").push(line);
            }
        });
    }
    // The server logs readiness within milliseconds; a minute means it is broken. A server
    // that exits first (a port in use, a bad option) closes the channel.
    match started.recv_timeout(Duration::from_secs(60)) {
        Ok(Some(port)) => Ok((child, port, log)),
        outcome => {
            let _ = child.kill();
            let _ = child.wait();
            Err(io::Error::other(format!(
                "{PROGRAM} did not become ready ({outcome:?}); its log: {:?}",
                log.lock().expect("log")
            )))
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if let Some(path) = &self.config {
            let _ = std::fs::remove_file(path);
        }
    }
}
