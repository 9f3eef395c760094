use actors::prelude::*;

#[actor(mailbox = 0)]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
