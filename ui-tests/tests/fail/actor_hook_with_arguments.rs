use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn on_start(&mut self, delay: u64) {
        let _ = delay;
    }
}

fn main() {}
