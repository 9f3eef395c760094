#[runtime::main]
async fn start() {}

fn main() {}
