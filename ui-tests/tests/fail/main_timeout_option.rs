#[runtime::main(timeout = "10s")]
async fn main() {}
