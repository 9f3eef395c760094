#[runtime::test(seed = 7)]
async fn checks_something() {}

fn main() {}
