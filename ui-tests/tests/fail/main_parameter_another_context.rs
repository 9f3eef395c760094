use std::task::Context;

#[runtime::main]
async fn main(context: Context) {}
