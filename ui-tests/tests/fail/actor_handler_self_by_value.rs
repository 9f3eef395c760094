use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn finish(self) -> u8 {
        1
    }
}

fn main() {}
