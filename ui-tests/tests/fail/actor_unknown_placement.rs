use actors::prelude::*;

#[actor(dedicatd)]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
