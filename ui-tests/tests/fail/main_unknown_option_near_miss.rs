#[runtime::main(worker_thread = 2)]
async fn main() {}
