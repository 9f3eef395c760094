#[runtime::test(deterministic, seed = 1, seeds = 0..3)]
async fn checks_something() {}

fn main() {}
