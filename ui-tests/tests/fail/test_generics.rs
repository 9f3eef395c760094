#[runtime::test]
async fn checks_something<T: Default>() {}

fn main() {}
