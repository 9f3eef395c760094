#[runtime::main]
fn main() {}
