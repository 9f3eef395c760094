use actors::prelude::*;

#[actor]
enum Worker {
    Idle,
}

fn main() {}
