//! The smallest program: no parameter, no return value.

#[runtime::main]
async fn main() {
    runtime::reschedule().await;
}
