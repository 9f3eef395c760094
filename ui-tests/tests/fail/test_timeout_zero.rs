#[runtime::test(timeout = "0s")]
async fn checks_something() {}

fn main() {}
