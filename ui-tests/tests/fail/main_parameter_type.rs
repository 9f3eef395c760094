#[runtime::main]
async fn main(context: String) {}
