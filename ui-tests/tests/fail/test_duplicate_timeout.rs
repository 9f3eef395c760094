#[runtime::test(timeout = "1s", timeout = "2s")]
async fn checks_something() {}

fn main() {}
