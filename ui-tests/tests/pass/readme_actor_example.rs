//! The README's actor example, kept compiling (and running) here.

use actors::prelude::*;

#[actor(mailbox = 128)] // or #[actor(dedicated)], #[actor(blocking)]
struct Counter {
    total: u64,
}

#[actor]
impl Counter {
    async fn add(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }
}

#[runtime::main]
async fn main(context: runtime::Context) -> Result<(), actors::Error> {
    let counter: CounterRef = Counter { total: 0 }.spawn(&context);
    assert_eq!(counter.add(2).await?, 2); // ask
    counter.tell_add(3).await?; // tell: waits for mailbox room, not for the reply
    Ok(())
}
