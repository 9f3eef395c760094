//! Word counting spread over processes that find each other through NATS: worker nodes
//! expose one remote actor under one name (they share its load), and a client node asks it,
//! watches the workers' heartbeats, and carries on when one dies.
//!
//! ```sh
//! nats-server -a 127.0.0.1 -p 4222 &
//! cargo run -p examples --bin cluster -- worker w1 &
//! cargo run -p examples --bin cluster -- worker w2 &
//! cargo run -p examples --bin cluster -- client c1
//! ```
//!
//! Usage: `cluster (worker|client) NODE [NATS_URLS]`, where `NODE` is a name unique in the
//! cluster (letters, digits, `_`, `-`) and `NATS_URLS` a comma-separated list
//! (`nats://[user:password@]host:port`, default `nats://127.0.0.1:4222`): point it at any
//! server of a real NATS cluster. A worker prints `worker NODE serving "words"`; a client
//! prints `client NODE ready`, then one line per event: `peer up NODE`, `peer down NODE:
//! REASON`, `counted N words on NODE`, `ask failed: ERROR`.
//!
//! Bounds: a worker's mailbox holds 256 asks (beyond, an ask is answered `Full` at once),
//! and it refuses a text over 64 KiB; the client keeps one ask in flight, with a 2 s
//! deadline, at most `CLUSTER_ASKS_PER_SECOND` (100) a second. Heartbeats go every
//! `CLUSTER_HEARTBEAT_MS` (500) and a node missing three is down. Ctrl-C leaves the cluster
//! (peers see the node down at once) and exits 0.

use actors::prelude::*;
use actors::remote::{Node, NodeOptions};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::Duration;

/// The longest text a worker counts.
const MAX_TEXT: usize = 64 * 1024;

/// A count, and who made it.
#[derive(Debug, Serialize, Deserialize)]
struct Counted {
    words: u64,
    node: String,
}

#[actor(mailbox = 256, name = "word_counter")]
struct WordCounter {
    node: String,
    total: u64,
}

#[actor(remote)]
impl WordCounter {
    /// Counts the words of `text`, or says why not.
    fn count(&mut self, text: String) -> Result<Counted, String> {
        if text.len() > MAX_TEXT {
            return Err(format!(
                "a text of {} bytes is longer than the {MAX_TEXT} a worker counts",
                text.len()
            ));
        }
        let words = text.split_whitespace().count() as u64;
        self.total += words;
        Ok(Counted {
            words,
            node: self.node.clone(),
        })
    }
}

fn setting(name: &str, default: u64, range: std::ops::RangeInclusive<u64>) -> Result<u64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) => text
            .parse::<u64>()
            .ok()
            .filter(|value| range.contains(value))
            .ok_or_else(|| {
                format!(
                    "{name}={text:?}: expected a number from {} to {}",
                    range.start(),
                    range.end()
                )
            }),
    }
}

struct Arguments {
    worker: bool,
    node: String,
    servers: String,
    heartbeat: Duration,
    interval: Duration,
}

fn arguments() -> Result<Arguments, String> {
    let usage = "usage: cluster (worker|client) NODE [NATS_URLS]";
    let mut args = std::env::args().skip(1);
    let worker = match args.next().as_deref() {
        Some("worker") => true,
        Some("client") => false,
        Some(other) => return Err(format!("unknown role {other:?}; {usage}")),
        None => return Err(usage.to_string()),
    };
    let node = args.next().ok_or(usage)?;
    let servers = args
        .next()
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_string());
    if let Some(extra) = args.next() {
        return Err(format!("unexpected argument {extra:?}; {usage}"));
    }
    let heartbeat = setting("CLUSTER_HEARTBEAT_MS", 500, 10..=60_000)?;
    let per_second = setting("CLUSTER_ASKS_PER_SECOND", 100, 1..=100_000)?;
    Ok(Arguments {
        worker,
        node,
        servers,
        heartbeat: Duration::from_millis(heartbeat),
        interval: Duration::from_secs(1) / per_second as u32,
    })
}

#[runtime::main]
async fn main(context: runtime::Context) {
    let arguments = match arguments() {
        Ok(arguments) => arguments,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(2);
        }
    };
    examples::interrupt::stop_on_interrupt(&context, Duration::from_secs(5));
    let options = NodeOptions::new(arguments.servers.split(','), &arguments.node)
        .map(|options| options.with_heartbeat(arguments.heartbeat, 3));
    let node = match options {
        Ok(options) => Node::join_with(&context, options).await,
        Err(error) => Err(error),
    };
    let node = match node {
        Ok(node) => node,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    };
    if arguments.worker {
        let counter = WordCounter {
            node: arguments.node.clone(),
            total: 0,
        }
        .spawn(&context);
        if let Err(error) = node.expose("words", &counter).await {
            eprintln!("cannot expose \"words\": {error}");
            std::process::exit(1);
        }
        examples::say!("worker {} serving \"words\"", arguments.node);
        context.stopped().await;
    } else {
        examples::say!("client {} ready", arguments.node);
        ask_until_stopped(&context, &node, arguments.interval).await;
    }
    node.leave().await;
}

/// Asks the workers to count sentences, one at a time, until the runtime is stopped;
/// prints the workers that come and go.
async fn ask_until_stopped(context: &runtime::Context, node: &Node, interval: Duration) {
    let words: WordCounterRemoteRef = node.lookup("words");
    let mut known: HashSet<String> = HashSet::new();
    let stopped = context.stopped();
    for round in 0u64.. {
        let workers: HashSet<String> = node.exposed_by("words").into_iter().collect();
        for worker in workers.difference(&known) {
            examples::say!("worker up {worker}");
            let monitor = node
                .lookup_on::<WordCounterRemoteRef>(worker, "words")
                .monitor();
            let worker = worker.clone();
            let stopping = context.stopped();
            drop(context.clone().spawn(move |_| async move {
                // This node's own leave (at Ctrl-C) ends its monitors too: that says nothing
                // of the worker, which is up.
                // The stop is looked at first: after it, a resolved monitor is the leave's.
                let monitor = std::pin::pin!(monitor);
                if let futures::future::Either::Right((reason, _)) =
                    futures::future::select(stopping, monitor).await
                {
                    examples::say!("worker down {worker}: {reason}");
                }
            }));
        }
        // A worker that went down and comes back is announced again.
        known = workers;
        let text = format!("round {round} of counting words across the nodes");
        match words.count(text).timeout(Duration::from_secs(2)).await {
            Ok(Ok(counted)) => {
                examples::say!("counted {} words on {}", counted.words, counted.node)
            }
            Ok(Err(refused)) => examples::say!("ask failed: {refused}"),
            Err(error) => examples::say!("ask failed: {error}"),
        }
        let pause = std::pin::pin!(context.sleep(interval));
        if let futures::future::Either::Right(_) =
            futures::future::select(pause, stopped.clone()).await
        {
            return;
        }
    }
}
