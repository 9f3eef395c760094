//! A persistent key-value service that speaks the Redis protocol.
//!
//! ```sh
//! cargo run -p examples --bin kv -- 127.0.0.1:7002 127.0.0.1:9002 ./kv-data
//! redis-cli -p 7002
//! ```
//!
//! Arguments: the protocol address, the `/metrics` address and the data directory (defaults
//! as above), and the options
//! - `--durability always|everysec|none`: as Redis's `appendfsync`. `always` (the default)
//!   answers a write once it is synced: it survives SIGKILL and power loss. `everysec`
//!   answers at once and syncs every second; `none` leaves it to the OS.
//! - `--repair`: if the log is damaged, copy it aside and keep every record that verifies on
//!   both sides of the damage (without it, a damaged log stops the start and says where).
//! - `--strict`: refuse to start when the log ends in a tail that recovery would cut (what a
//!   crash can leave, or a damaged end), changing nothing. Without it, such a tail is copied
//!   beside the log (`kv/<log>.cut-<offset>`), cut, and reported on start and in the
//!   `kv_recovery_*` metrics.
//!
//! Commands: see `examples::kv`. The storage actor runs on the pool (its log's writes and
//! syncs on a thread of its own) under a supervisor that restarts it from its log if it
//! fails. `KV_WORKER_THREADS` sets the pool's workers (by default one fewer than the cores,
//! at least one). Ctrl-C stops the service cleanly.

use runtime::prelude::*;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: kv [ADDRESS:PORT] [METRICS_ADDRESS:PORT] [DATA_DIRECTORY] \
                     [--durability always|everysec|none] [--repair] [--strict]";

/// What the command line asks for.
struct Arguments {
    address: SocketAddr,
    metrics: SocketAddr,
    data: PathBuf,
    options: examples::kv::Options,
    repair: bool,
}

fn parse(mut arguments: impl Iterator<Item = String>) -> Result<Arguments, String> {
    let mut positional = Vec::new();
    let mut options = examples::kv::Options::default();
    let mut repair = false;
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--durability" => {
                let value = arguments
                    .next()
                    .ok_or("--durability needs a value: always, everysec or none")?;
                options.durability = value.parse()?;
            }
            "--repair" => repair = true,
            "--strict" => options.strict = true,
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ => positional.push(argument),
        }
    }
    if positional.len() > 3 {
        return Err(format!("unexpected argument {:?}", positional[3]));
    }
    let mut positional = positional.into_iter();
    let mut address = |default: &str, what: &str| -> Result<SocketAddr, String> {
        let text = positional.next().unwrap_or_else(|| default.into());
        text.parse()
            .map_err(|_| format!("{what} {text:?} is not an address:port"))
    };
    let address_ = address("127.0.0.1:7002", "the address")?;
    let metrics = address("127.0.0.1:9002", "the metrics address")?;
    let data = positional.next().unwrap_or_else(|| "./kv-data".into());
    if data.trim().is_empty() {
        return Err("the data directory is empty: name a directory".into());
    }
    Ok(Arguments {
        address: address_,
        metrics,
        data: PathBuf::from(data),
        options,
        repair,
    })
}

/// The pool's workers unless `KV_WORKER_THREADS` says: one core fewer than the machine has
/// (at least one), leaving a core to the store's syncer thread and the kernel's network and
/// disk work. Measured on two vCPUs (`benches/README.md`, "`kv` against `redis-server`"), one
/// worker answers up to 1.4x the requests of two: the connections and the store then share
/// one thread, and a batch costs no wake of another.
fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |cores| cores.get())
        .saturating_sub(1)
        .max(1)
}

fn main() -> ExitCode {
    let arguments = match parse(std::env::args().skip(1)) {
        Ok(arguments) => arguments,
        Err(error) => {
            eprintln!("kv: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Checked here, so an unusable directory is named as such (the runtime would fail too,
    // less plainly).
    if let Err(error) = std::fs::create_dir_all(&arguments.data) {
        eprintln!(
            "kv: the data directory {} cannot be used: {error}",
            arguments.data.display()
        );
        return ExitCode::from(1);
    }
    let mut config = runtime::Config::default().with_storage_directory(&arguments.data);
    config = config.with_worker_threads(examples::limits::setting(
        "KV_WORKER_THREADS",
        default_workers(),
    ));
    runtime::Runner::new(config).start(|context| async move {
        examples::interrupt::stop_on_interrupt(&context, Duration::from_secs(5));
        if arguments.repair {
            match examples::kv::repair(&context).await {
                Ok(Some(repaired)) => eprintln!(
                    "kv repaired the log: kept {} records; {} damaged pages; the damaged log \
                     is kept as {}",
                    repaired.records, repaired.damaged_pages, repaired.copy
                ),
                Ok(None) => eprintln!("kv: the log is not damaged; nothing to repair"),
                Err(error) => {
                    eprintln!("kv: repairing the log failed: {error}");
                    return ExitCode::from(1);
                }
            }
        }
        let service = match examples::kv::serve_with(
            &context,
            arguments.address,
            arguments.metrics,
            arguments.options,
        )
        .await
        {
            Ok(service) => service,
            Err(error) => {
                eprintln!(
                    "kv: cannot start (data directory {}): {error}",
                    arguments.data.display()
                );
                return ExitCode::from(1);
            }
        };
        examples::say!("kv listening on {}", service.address);
        examples::say!("kv metrics on http://{}/metrics", service.metrics);
        // The tree ends first only if it gave up (a child failed more often than its
        // intensity allows, as an acceptor that cannot bind its address again would): kv
        // cannot serve without it, so it exits and says why, for whoever runs it to act.
        let stopped = std::pin::pin!(context.stopped());
        match futures::future::select(stopped, service.supervisor.join()).await {
            futures::future::Either::Left(_) => {
                examples::say!("kv stopped");
                ExitCode::SUCCESS
            }
            futures::future::Either::Right((reason, _)) => {
                eprintln!("kv: the service ended ({reason}); exiting");
                ExitCode::from(1)
            }
        }
    })
}
