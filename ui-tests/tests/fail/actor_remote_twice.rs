use actors::prelude::*;

#[actor]
struct Worker;

#[actor(remote, remote)]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
