#[runtime::main(storage_directory = 42)]
async fn main() {}
