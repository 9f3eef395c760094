#[runtime::test]
fn checks_something() {}

fn main() {}
