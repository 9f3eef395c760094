use actors::prelude::*;

struct Plain;

#[actor]
impl Plain {
    fn ping(&self) {}
}

fn main() {}
