#[runtime::main(deterministic)]
async fn main() {}
