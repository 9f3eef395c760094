#[runtime::test(deterministic, seeds = 5..5)]
async fn checks_something() {}

fn main() {}
