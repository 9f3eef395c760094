//! Every option of `#[runtime::main]`; `config` builds the base, the others apply on top.

use runtime::Context;

fn base() -> runtime::Config {
    runtime::Config::default().with_global_queue_interval(7)
}

#[runtime::main(config = base, worker_threads = 3, catch_panics = true)]
async fn main(_context: Context) {}
