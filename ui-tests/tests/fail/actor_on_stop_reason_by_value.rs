use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn on_stop(&mut self, reason: actors::ExitReason) {
        let _ = reason;
    }
}

fn main() {}
