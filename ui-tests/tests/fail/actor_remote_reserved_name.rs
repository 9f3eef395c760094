use actors::prelude::*;

#[actor]
struct Watcher;

#[actor(remote)]
impl Watcher {
    fn monitor(&self) -> u64 {
        1
    }
}

fn main() {}
