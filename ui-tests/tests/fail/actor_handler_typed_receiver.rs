use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn ping(self: &Self) {}
}

fn main() {}
