//! Runs `cluster` as separate processes around a `nats-server` of its own: two workers and a
//! client. Both workers serve the client's asks; one is killed with SIGKILL; the client
//! notices (its heartbeats stop), and goes on with the other. `.ci/tools` installs
//! `nats-server`; where it could not, this test skips and says so.

mod common;

use actors::remote::nats::server::Server as NatsServer;
use common::Watchdog;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A `cluster` process and the lines it prints.
struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
    _watchdog: Watchdog,
}

impl Process {
    fn start(role: &str, node: &str, url: &str) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cluster"))
            .args([role, node, url])
            .env("CLUSTER_HEARTBEAT_MS", "200")
            .env("CLUSTER_ASKS_PER_SECOND", "200")
            .stdout(Stdio::piped())
            .spawn()
            .expect("cluster starts");
        let watchdog = Watchdog::new(child.id());
        let output = BufReader::new(child.stdout.take().unwrap());
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in output.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Process {
            child,
            lines,
            _watchdog: watchdog,
        }
    }

    /// The lines up to and including the first that `wanted` accepts; fails the test if the
    /// process ends or a minute passes first.
    fn until(&self, what: &str, mut wanted: impl FnMut(&str) -> bool) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    let done = wanted(&line);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(error) => panic!("no {what} ({error:?}); the last lines: {:?}", last(&seen)),
            }
        }
    }

    fn interrupt(&mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        self.child.wait().unwrap()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn last(lines: &[String]) -> &[String] {
    &lines[lines.len().saturating_sub(10)..]
}

#[test]
fn the_client_notices_a_killed_worker_and_goes_on_with_the_other() {
    let Some(nats) = NatsServer::builder().start_or_skip() else {
        return;
    };
    let url = nats.url();
    let mut first = Process::start("worker", "w1", &url);
    first.until("w1 serving", |line| line == "worker w1 serving \"words\"");
    let second = Process::start("worker", "w2", &url);
    second.until("w2 serving", |line| line == "worker w2 serving \"words\"");
    let mut client = Process::start("client", "c1", &url);
    client.until("client ready", |line| line == "client c1 ready");
    // Both workers share the load, and the client watches w1 (whichever comes first).
    let mut seen = [false, false, false];
    client.until("answers from both workers and w1 up", |line| {
        seen[0] |= line.ends_with(" words on w1");
        seen[1] |= line.ends_with(" words on w2");
        seen[2] |= line == "worker up w1";
        seen == [true, true, true]
    });
    // Killed: no goodbye, its heartbeats just stop.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let before = client.until("w1 down", |line| line.starts_with("worker down w1: "));
    assert!(
        before.last().unwrap().contains("went down"),
        "{:?}",
        before.last()
    );
    // The client goes on with w2: at most the one ask in flight at the kill failed.
    let mut counted = 0;
    let after = client.until("50 answers from w2 after the kill", |line| {
        counted += usize::from(line.ends_with(" words on w2"));
        counted == 50
    });
    let failures: Vec<_> = before
        .iter()
        .chain(&after)
        .filter(|line| line.starts_with("ask failed"))
        .collect();
    assert!(failures.len() <= 1, "{failures:?}");
    assert!(
        !after.iter().any(|line| line.ends_with(" words on w1")),
        "{:?}",
        last(&after)
    );
    // The survivors leave cleanly on Ctrl-C, and the client's own leave is not taken for
    // its workers' end.
    assert!(client.interrupt().success());
    let rest: Vec<String> = client.lines.iter().collect();
    assert!(
        !rest.iter().any(|line| line.starts_with("worker down")),
        "{rest:?}"
    );
    let mut second = second;
    assert!(second.interrupt().success());
}
