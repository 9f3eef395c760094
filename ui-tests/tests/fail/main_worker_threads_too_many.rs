#[runtime::main(worker_threads = 1000)]
async fn main() {}
