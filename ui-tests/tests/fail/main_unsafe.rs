#[runtime::main]
async unsafe fn main() {}
