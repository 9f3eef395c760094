#[runtime::test(deterministic, deterministic)]
async fn checks_something() {}

fn main() {}
