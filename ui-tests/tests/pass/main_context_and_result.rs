//! A program taking the root context and returning a `Result`, with `?` in its body.

use runtime::prelude::*;

#[runtime::main]
async fn main(context: runtime::Context) -> Result<(), runtime::Error> {
    let answer = context.spawn(|_| async { 42 }).await?;
    assert_eq!(answer, 42);
    Ok(())
}
