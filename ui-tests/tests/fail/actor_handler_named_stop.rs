use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn stop(&mut self) {}
}

fn main() {}
