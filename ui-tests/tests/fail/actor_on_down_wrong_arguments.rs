use actors::prelude::*;

#[actor]
struct Watcher;

#[actor]
impl Watcher {
    fn on_down(&mut self, id: u64, reason: actors::ExitReason) {
        let _ = (id, reason);
    }
}

fn main() {}
