use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn inner(&self) -> u8 {
        1
    }
}

fn main() {}
