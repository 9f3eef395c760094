#[runtime::test(tiemout = "10s")]
async fn checks_something() {}

fn main() {}
