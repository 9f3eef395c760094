use actors::prelude::*;

#[actor]
struct Watcher;

#[actor]
impl Watcher {
    fn on_down(&mut self, id: actors::ActorId) {
        let _ = id;
    }
}

fn main() {}
