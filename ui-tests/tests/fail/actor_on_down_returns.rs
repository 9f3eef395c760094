use actors::prelude::*;

#[actor]
struct Watcher;

#[actor]
impl Watcher {
    fn on_down(&mut self, id: actors::ActorId, reason: actors::ExitReason) -> bool {
        let _ = (id, reason);
        true
    }
}

fn main() {}
