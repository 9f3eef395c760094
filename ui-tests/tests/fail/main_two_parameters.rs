#[runtime::main]
async fn main(context: runtime::Context, extra: u32) {}
