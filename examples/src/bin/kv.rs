//! A persistent key-value service over TCP.
//!
//! ```sh
//! cargo run -p examples --bin kv -- 127.0.0.1:7002 127.0.0.1:9002 ./kv-data
//! ```
//!
//! Arguments: the protocol address, the `/metrics` address and the data directory (defaults
//! as above). The protocol is Redis's (RESP2, and inline commands): `redis-cli -p 7002`,
//! then `SET k v`, `GET k`, `DEL k`, `EXISTS k`, `DBSIZE`, `PING`; see `examples::kv`. A
//! `SET` is answered once it is durable: it survives SIGKILL. The storage actor runs on a
//! thread of its own under a supervisor that restarts it from its log if it fails. Ctrl-C
//! stops the service cleanly.

use runtime::prelude::*;
use std::net::SocketAddr;
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let address: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:7002".into())
        .parse()
        .expect("usage: kv [ADDRESS:PORT] [METRICS_ADDRESS:PORT] [DATA_DIRECTORY]");
    let metrics: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:9002".into())
        .parse()
        .expect("usage: kv [ADDRESS:PORT] [METRICS_ADDRESS:PORT] [DATA_DIRECTORY]");
    let data = args.next().unwrap_or_else(|| "./kv-data".into());
    let config = runtime::Config::default().with_storage_directory(data);
    runtime::Runner::new(config).start(|context| async move {
        // Held to the end: on an early return it releases the signal-waiting task.
        let _interrupts = examples::interrupt::stop_on_interrupt(&context, Duration::from_secs(5))
            .expect("install the signal handlers");
        let service = examples::kv::serve(&context, address, metrics)
            .await
            .expect("bind the service's addresses");
        println!("kv listening on {}", service.address);
        println!("kv metrics on http://{}/metrics", service.metrics);
        let _ = context.stopped().await;
        println!("kv stopped");
    });
}
