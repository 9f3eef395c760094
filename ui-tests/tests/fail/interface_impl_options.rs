use actors::prelude::*;

#[interface]
pub trait Greeter {
    fn greet(&self) -> String;
}

#[actor]
struct Twice;

#[actor(implements(Greeter, Greeter))]
impl Twice {}

#[actor]
struct Options;

#[actor(implements())]
impl Options {}

#[actor]
struct Inline;

#[actor(implements(Greeter))]
impl Inline {}

#[actor(dedicated)]
impl Greeter for Inline {
    fn greet(&self) -> String {
        String::new()
    }
}

fn main() {}
