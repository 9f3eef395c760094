//! Remote actors across two processes on loopback: ours over NATS (a `nats-server` this
//! benchmark starts on a free port; every message crosses it, so each ask is two hops each
//! way) against ractor_cluster (a direct TCP session between the two nodes), and against our
//! own NATS client with no actors at all (the floor).
//!
//! Rows, each timed in the driver process against a server process started once:
//! - `ask`: 20 000 sequential asks of `ping(u64) -> u64` (ractor: `call!`; floor: a
//!   `request` answered by a plain subscriber), as microseconds per ask;
//! - `tell`: 100 000 tells of `note(u64)` (ractor: `cast!`; floor: plain publishes counted by
//!   a subscriber), timed until an ask sent after them (FIFO) sees them all, as messages per
//!   second.
//!
//! Each round runs every side once; the table gives each value's median over the rounds and
//! each ratio's median and range of the per-round ratios (`BENCH_ROUNDS`, default 5). `BENCH_ASKS` and `BENCH_TELLS` change the counts.
//! Without `nats-server` on this machine, it says so and exits.

mod ractor_side;

use actors::prelude::*;
use actors::remote::nats::server::Server as NatsServer;
use actors::remote::{Node, NodeOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A mailbox as large as allowed, beyond any tell burst the rows send: a full mailbox would
/// drop tells (at most once), and the row refuses to time a run that lost any.
#[actor(mailbox = 1048576)]
struct Echo {
    notes: u64,
}

#[actor(remote)]
impl Echo {
    fn ping(&self, value: u64) -> u64 {
        value
    }

    fn note(&mut self, _value: u64) {
        self.notes += 1;
    }

    fn count(&self) -> u64 {
        self.notes
    }
}

/// The median and range of a ratio over the rounds, printed `median (min – max)`.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Self> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = match sorted.len() {
            0 => return None,
            len if len % 2 == 1 => sorted[middle],
            _ => (sorted[middle - 1] + sorted[middle]) / 2.0,
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        })
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ({:.2} – {:.2})", self.median, self.min, self.max)
    }
}

fn count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
        .max(1)
}

fn runner() -> runtime::Runner {
    runtime::Runner::new(runtime::Config::default().with_worker_threads(2))
}

/// Subscriptions deep enough that 100 000 tells in a burst are not dropped on either side.
fn node_options(url: &str, name: &str) -> NodeOptions {
    NodeOptions::new([url], name)
        .expect("valid options")
        .with_nats(|nats| nats.with_subscription_capacity(1 << 20, 1 << 30))
}

/// The server process of our side: the actor exposed as `echo`, and the floor's plain
/// responder (`bench.raw`) and counter (`bench.sink.*`: data, then count requests, in one
/// subscription so a count comes after the data before it).
fn serve_ours(url: String) {
    runner().start(|context| async move {
        let node = Node::join_with(&context, node_options(&url, "bench-server"))
            .await
            .expect("the server node joins");
        let echo = Echo { notes: 0 }.spawn(&context);
        node.expose("echo", &echo).await.expect("exposed");
        let client = node.client().clone();
        let mut raw = client.subscribe("bench.raw").unwrap();
        let mut sink = client.subscribe("bench.sink.*").unwrap();
        let responder = client.clone();
        let counter = client.clone();
        drop(context.clone().spawn(move |_| async move {
            while let Some(request) = raw.next().await {
                let reply = request.reply.expect("a request");
                let _ = responder.publish(&reply, &request.payload).await;
            }
        }));
        drop(context.clone().spawn(move |_| async move {
            let mut received = 0u64;
            while let Some(message) = sink.next().await {
                match message.reply {
                    Some(reply) => {
                        let _ = counter.publish(&reply, received.to_le_bytes()).await;
                    }
                    None => received += 1,
                }
            }
        }));
        client.flush().await.unwrap();
        println!("ready");
        let _ = std::io::stdout().flush();
        // Until the driver closes our stdin.
        let _ = context
            .clone()
            .shared(true)
            .spawn(|_| async {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
            })
            .await;
    });
}

/// A server process, killed when dropped.
struct ServerProcess(Child);

impl ServerProcess {
    fn start(arguments: &[&str]) -> ServerProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(arguments)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the server process starts");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the server process did not start");
        ServerProcess(child)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// One round of our side and the floor: (ask, raw ask, tell, raw tell) durations.
fn ours_round(url: &str, round: u64, asks: u64, tells: u64) -> [Duration; 4] {
    let url = url.to_string();
    runner().start(|context| async move {
        let name = format!("bench-client-{round}");
        let node = Node::join_with(&context, node_options(&url, &name))
            .await
            .expect("the client node joins");
        let echo: EchoRemoteRef = node.lookup("echo");
        let client = node.client().clone();
        for value in 0..100 {
            assert_eq!(echo.ping(value).await, Ok(value));
            client
                .request("bench.raw", value.to_le_bytes())
                .await
                .unwrap();
        }
        let started = Instant::now();
        for value in 0..asks {
            assert_eq!(echo.ping(value).await, Ok(value));
        }
        let ask = started.elapsed();
        let started = Instant::now();
        for value in 0..asks {
            let reply = client
                .request("bench.raw", value.to_le_bytes())
                .await
                .unwrap();
            assert_eq!(&reply.payload[..], value.to_le_bytes());
        }
        let raw_ask = started.elapsed();
        let before = echo.count().await.unwrap();
        let started = Instant::now();
        for value in 0..tells {
            echo.tell_note(value).await.unwrap();
        }
        let seen = echo.count().await.unwrap();
        assert_eq!(seen - before, tells, "tells were dropped");
        let tell = started.elapsed();
        let counted =
            |reply: nats::Message| u64::from_le_bytes(reply.payload[..].try_into().unwrap());
        let before = counted(client.request("bench.sink.count", b"").await.unwrap());
        let started = Instant::now();
        for value in 0..tells {
            client
                .publish("bench.sink.data", value.to_le_bytes())
                .await
                .unwrap();
        }
        let seen = counted(client.request("bench.sink.count", b"").await.unwrap());
        assert_eq!(seen - before, tells, "publishes were dropped");
        let raw_tell = started.elapsed();
        node.leave().await;
        [ask, raw_ask, tell, raw_tell]
    })
}

use actors::remote::nats;

/// The broker's own floor: request-reply through the same `nats-server` between two plain
/// threads on blocking sockets, speaking the protocol by hand (no runtime, no client
/// library). What the two extra hops of a brokered ask cost on this machine.
fn blocking_floor(port: u16, asks: u64) -> Duration {
    use std::net::TcpStream;
    fn connect(port: u16, subscribe: &str) -> (BufReader<TcpStream>, TcpStream) {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap(); // INFO
        write!(
            writer,
            "CONNECT {{\"verbose\":false}}\r\nSUB {subscribe} 1\r\nPING\r\n"
        )
        .unwrap();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line.starts_with("PONG") {
                return (reader, writer);
            }
        }
    }
    /// Reads one MSG: its reply subject (if any) and payload.
    fn message(reader: &mut BufReader<TcpStream>) -> (Option<String>, Vec<u8>) {
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line.starts_with("MSG") {
                break;
            }
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let size: usize = words.last().unwrap().parse().unwrap();
        let reply = (words.len() == 5).then(|| words[3].to_string());
        let mut payload = vec![0; size + 2];
        reader.read_exact(&mut payload).unwrap();
        payload.truncate(size);
        (reply, payload)
    }
    let (mut service, mut service_writer) = connect(port, "bench.blocking");
    let responder = std::thread::spawn(move || {
        for _ in 0..asks + 100 {
            let (reply, payload) = message(&mut service);
            let mut frame = format!("PUB {} {}\r\n", reply.unwrap(), payload.len()).into_bytes();
            frame.extend_from_slice(&payload);
            frame.extend_from_slice(b"\r\n");
            service_writer.write_all(&frame).unwrap();
        }
    });
    let (mut replies, mut writer) = connect(port, "bench.blocking.inbox");
    let mut ask = |value: u64| {
        let mut frame = b"PUB bench.blocking bench.blocking.inbox 8\r\n".to_vec();
        frame.extend_from_slice(&value.to_le_bytes());
        frame.extend_from_slice(b"\r\n");
        writer.write_all(&frame).unwrap();
        let (_, payload) = message(&mut replies);
        assert_eq!(payload, value.to_le_bytes());
    };
    for value in 0..100 {
        ask(value);
    }
    let started = Instant::now();
    for value in 0..asks {
        ask(value);
    }
    let elapsed = started.elapsed();
    responder.join().unwrap();
    elapsed
}

fn free_port() -> u16 {
    // Two consecutive free ports: the server's and the driver's node.
    loop {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    match arguments.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve-ours", url] => return serve_ours(url.to_string()),
        ["serve-ractor", port] => return ractor_side::serve(port.parse().expect("a port")),
        [] => {}
        _ => panic!("usage: remote_actors [serve-ours URL | serve-ractor PORT]"),
    }
    if !NatsServer::available() {
        println!(
            "remote_actors SKIPPED: nats-server is not installed (apt-get install nats-server)"
        );
        return;
    }
    let asks = count("BENCH_ASKS", 20_000);
    let tells = count("BENCH_TELLS", 100_000);
    let rounds = count("BENCH_ROUNDS", 5);
    let nats = NatsServer::start().expect("nats-server starts");
    let url = nats.url();
    let _ours = ServerProcess::start(&["serve-ours", &url]);
    let port = free_port();
    let _ractor = ServerProcess::start(&["serve-ractor", &port.to_string()]);
    let per_ask = |d: Duration| d.as_secs_f64() * 1e6 / asks as f64;
    let per_second = |d: Duration| tells as f64 / d.as_secs_f64();
    let mut rows: [Vec<f64>; 6] = Default::default();
    let mut blocking = Vec::new();
    let mut ratios: [Vec<f64>; 4] = Default::default();
    for round in 0..rounds {
        let [ask, raw_ask, tell, raw_tell] = ours_round(&url, round, asks, tells);
        let (ractor_ask, ractor_tell) = ractor_side::drive(port, asks, tells);
        blocking.push(per_ask(blocking_floor(nats.port(), asks)));
        let values = [
            per_ask(ask),
            per_ask(raw_ask),
            per_ask(ractor_ask),
            per_second(tell),
            per_second(raw_tell),
            per_second(ractor_tell),
        ];
        for (row, value) in rows.iter_mut().zip(values) {
            row.push(value);
        }
        ratios[0].push(values[2] / values[0]);
        ratios[1].push(values[0] / values[1]);
        ratios[2].push(values[3] / values[5]);
        ratios[3].push(values[4] / values[3]);
        eprintln!(
            "round {round}: ask {:.1} µs (floor {:.1}, ractor_cluster {:.1}); tell {:.0}/s (floor {:.0}, ractor_cluster {:.0})",
            values[0], values[1], values[2], values[3], values[4], values[5]
        );
    }
    let spread = |values: &[f64]| Spread::of(values).expect("rounds");
    println!(
        "remote_actors: {asks} asks and {tells} tells per round, {rounds} rounds, two processes on loopback\n"
    );
    println!("Each value: the median over {rounds} rounds; each ratio: the median of the per-round ratios, and their range.\n");
    println!(
        "| row | ours | NATS floor | ractor_cluster | ractor_cluster / ours (above 1: we are faster) | ours / floor |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| ask (µs per ask) | {:.1} | {:.1} | {:.1} | {} | {} |",
        spread(&rows[0]).median,
        spread(&rows[1]).median,
        spread(&rows[2]).median,
        spread(&ratios[0]),
        spread(&ratios[1]),
    );
    println!(
        "| tell (messages per second) | {:.0} | {:.0} | {:.0} | {} | {} |",
        spread(&rows[3]).median,
        spread(&rows[4]).median,
        spread(&rows[5]).median,
        spread(&ratios[2]),
        spread(&ratios[3]),
    );
    println!(
        "\nFor tells, `ractor_cluster / ours` is ours over ractor_cluster (messages per second) and `ours / floor` the floor over ours."
    );
    println!(
        "The broker's own floor (two threads on blocking sockets through the same nats-server, no runtime): {:.1} µs per request-reply, median over the rounds.",
        spread(&blocking).median
    );
}
