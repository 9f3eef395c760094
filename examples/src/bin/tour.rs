//! The tour: starts the `kv` service in this process, drives a workload against it over
//! loopback while its storage actor is made to fail once, and prints the supervision tree
//! half way, what happened, and the metrics the runtime and actors kept.
//!
//! ```sh
//! cargo run --release -p examples --bin tour
//! ```

use examples::kv;
use examples::lines::LineReader;
use runtime::prelude::*;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 8;

/// Requests per client: `TOUR_REQUESTS_PER_CLIENT`, 5000 by default.
fn requests_per_client() -> usize {
    examples::limits::setting("TOUR_REQUESTS_PER_CLIENT", 5_000)
}
/// One request in this many is a `SET` (each is synced to disk before its answer).
const SET_EVERY: usize = 20;

/// What one client saw.
struct Report {
    latencies: Vec<Duration>,
    retries: usize,
}

/// Runs `requests` requests over one connection, retrying a request the store could not
/// answer (it was restarting).
async fn client(
    context: runtime::Context,
    address: SocketAddr,
    index: usize,
    requests: usize,
    done: Arc<AtomicUsize>,
) -> Report {
    let (mut sink, stream) = context.dial(address).await.expect("dial the service");
    let mut lines = LineReader::new(stream);
    let mut latencies = Vec::with_capacity(requests);
    let mut retries = 0;
    for request in 0..requests {
        let key = format!("client{index}-key{}", request % 50);
        // Inline commands, as `redis-cli` or `nc` send them; the answers are RESP.
        let line = if request % SET_EVERY == 0 {
            format!("SET {key} value-{request}\r\n")
        } else {
            format!("GET {key}\r\n")
        };
        loop {
            let start = Instant::now();
            sink.send(line.clone().into_bytes()).await.expect("send");
            let answer = lines.next_line().await.expect("answer").expect("open");
            if answer.starts_with(b"-ERR storage unavailable") {
                retries += 1;
                continue;
            }
            // A bulk string's value follows on its own line (`$-1`, nil, has none).
            if answer.starts_with(b"$") && answer != b"$-1" {
                lines.next_line().await.expect("a value").expect("open");
            }
            latencies.push(start.elapsed());
            break;
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
    Report { latencies, retries }
}

fn progress(done: usize, total: usize) {
    const WIDTH: usize = 40;
    let filled = done * WIDTH / total.max(1);
    print!(
        "\r  [{}{}] {done:>6}/{total} requests",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled)
    );
    let _ = std::io::stdout().flush();
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

fn main() {
    // One line per panic: the tour makes one on purpose, and a backtrace would bury the
    // progress line.
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let thread = std::thread::current();
        examples::say!(
            "\n  ! a panic on {}: {message} ({})",
            thread.name().unwrap_or("a thread"),
            info.location().map_or(String::new(), |at| at.to_string())
        );
    }));
    let config = runtime::Config::default();
    runtime::Runner::new(config).start(|context| async move {
        let loopback = "127.0.0.1:0".parse().expect("an address");
        let service = kv::serve(&context, loopback, loopback)
            .await
            .expect("start the kv service");
        examples::say!(
            "kv service on {}, metrics on {}",
            service.address,
            service.metrics
        );
        let requests = requests_per_client();
        examples::say!(
            "{CLIENTS} clients x {requests} requests (1 in {SET_EVERY} a durable SET); the \
             storage actor fails once, half way"
        );

        let total = CLIENTS * requests;
        let done = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|index| {
                let done = done.clone();
                let address = service.address;
                context
                    .clone()
                    .spawn(move |context| client(context, address, index, requests, done))
            })
            .collect();
        let mut failed = false;
        loop {
            let finished = done.load(Ordering::Relaxed);
            progress(finished, total);
            if !failed && finished >= total / 2 {
                // A panic inside the storage actor: its supervisor restarts it from its log.
                let _ = service.store.tell_fail().await;
                failed = true;
                // A write, answered by the store's next incarnation: the restart is in the
                // tree below.
                let probe = vec![b"SET".to_vec(), b"tour-probe".to_vec(), b"1".to_vec()];
                let _ = kv::execute(&service.store, probe).await;
                examples::say!("\n\nthe supervision tree, half way (context's supervision_tree())");
                print!("{}", actors::supervisor::supervision_tree(&context));
                examples::say!();
            }
            if finished == total {
                break;
            }
            context.sleep(Duration::from_millis(50)).await;
        }
        let mut latencies = Vec::with_capacity(total);
        let mut retries = 0;
        for client in clients {
            let report = client.await.expect("a client finished");
            latencies.extend(report.latencies);
            retries += report.retries;
        }
        let elapsed = started.elapsed();
        examples::say!();
        latencies.sort_unstable();
        // The data outlived the failure: a key set before it reads back. (Asked after the
        // failure, so it is answered by the restarted store: the restart is counted.)
        let check = match kv::execute(
            &service.store,
            vec![b"GET".to_vec(), b"client0-key0".to_vec()],
        )
        .await
        {
            (examples::resp::Reply::Bulk(Some(value)), _) => {
                format!("VALUE {}", String::from_utf8_lossy(&value))
            }
            (other, _) => format!("{other:?}"),
        };
        let exposition = context.encode();
        let restarts = exposition
            .lines()
            .find(|line| line.starts_with("actor_restarts_total{actor=\"kv_store\"}"))
            .and_then(|line| line.rsplit(' ').next())
            .unwrap_or("0")
            .to_string();

        examples::say!();
        examples::say!("summary");
        examples::say!("  requests            {total}");
        examples::say!("  elapsed             {:.2} s", elapsed.as_secs_f64());
        examples::say!(
            "  throughput          {:.0} requests/s",
            total as f64 / elapsed.as_secs_f64()
        );
        examples::say!(
            "  latency p50         {} us",
            percentile(&latencies, 0.50).as_micros()
        );
        examples::say!(
            "  latency p99         {} us",
            percentile(&latencies, 0.99).as_micros()
        );
        examples::say!("  retried requests    {retries} (answered while the store restarted)");
        examples::say!("  restarts survived   {restarts}");
        examples::say!("  GET client0-key0    {}", check.trim_end());
        examples::say!();
        examples::say!("metrics (context.encode())");
        print!("{exposition}");
    });
}
