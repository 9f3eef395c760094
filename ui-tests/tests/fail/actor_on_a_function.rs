use actors::prelude::*;

#[actor]
fn worker() {}

fn main() {}
