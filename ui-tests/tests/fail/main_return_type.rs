#[runtime::main]
async fn main() -> u32 {
    7
}
