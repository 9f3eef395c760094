use actors::prelude::*;

#[actor(mailbx = 8)]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) {}
}

fn main() {}
