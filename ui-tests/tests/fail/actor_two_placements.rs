use actors::prelude::*;

#[actor(dedicated, blocking)]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
