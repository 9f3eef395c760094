#[runtime::test(deterministic = true)]
async fn checks_something() {}

fn main() {}
