use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) {}
}

#[actor]
impl Clone for Worker {
    fn clone(&self) -> Self {
        Worker
    }
}

fn main() {}
