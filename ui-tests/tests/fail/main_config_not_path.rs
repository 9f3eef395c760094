#[runtime::main(config = "my_config")]
async fn main() {}
