use actors::prelude::*;

#[actor]
struct Worker;

fn main() {}
