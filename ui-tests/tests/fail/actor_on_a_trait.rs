use actors::prelude::*;

#[actor]
trait Worker {}

fn main() {}
