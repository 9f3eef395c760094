//! A program with its own storage directory.

#[runtime::main(storage_directory = "/tmp/runtime-ui-tests-storage-directory")]
async fn main() {}
