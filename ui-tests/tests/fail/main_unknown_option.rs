#[runtime::main(flavor = "multi_thread")]
async fn main() {}
