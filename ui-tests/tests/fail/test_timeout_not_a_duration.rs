#[runtime::test(timeout = "ten")]
async fn checks_something() {}

fn main() {}
