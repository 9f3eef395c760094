use actors::prelude::*;

#[actor]
struct Worker;

#[actor(dedicated)]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
