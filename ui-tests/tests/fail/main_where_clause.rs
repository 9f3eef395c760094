#[runtime::main]
async fn main()
where
    u8: Copy,
{
}
