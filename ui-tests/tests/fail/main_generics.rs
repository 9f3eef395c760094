#[runtime::main]
async fn main<T>() {}
