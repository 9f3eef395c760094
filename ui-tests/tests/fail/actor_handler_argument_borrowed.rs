use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn greet(&self, name: &str) -> usize {
        name.len()
    }
}

fn main() {}
