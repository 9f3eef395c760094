use actors::prelude::*;

#[actor(mailbox = "large")]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
