#[runtime::test(timeout = 10)]
async fn checks_something() {}

fn main() {}
