#[runtime::main]
struct Main;

fn main() {}
