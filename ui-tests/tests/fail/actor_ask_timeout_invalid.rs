use actors::prelude::*;

#[actor(ask_timeout = "5 seconds")]
struct Slow;

#[actor]
impl Slow {}

#[actor(ask_timeout = 5)]
struct Slower;

#[actor]
impl Slower {}

#[actor(ask_timeout = "0s")]
struct Never;

#[actor]
impl Never {}

fn main() {}
