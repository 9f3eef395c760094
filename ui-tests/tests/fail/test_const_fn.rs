#[runtime::test]
const async fn checks_something() {}

fn main() {}
