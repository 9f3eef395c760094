use actors::prelude::*;

#[actor(name = "order-book")]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
