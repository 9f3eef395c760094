#[runtime::main(worker_threads(2))]
async fn main() {}
