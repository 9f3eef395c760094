#[runtime::main(catch_panics = "yes")]
async fn main() {}
