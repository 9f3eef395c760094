use actors::prelude::*;

#[actor(panic_fails_runner = "yes")]
struct Fragile;

#[actor]
impl Fragile {}

fn main() {}
