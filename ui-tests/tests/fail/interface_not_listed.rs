use actors::prelude::*;

#[interface]
pub trait Greeter {
    fn greet(&self) -> String;
}

#[actor]
struct Quiet;

// Greeter is implemented, but not listed in `implements(..)`: its messages have no place in
// the actor's mailbox.
#[actor]
impl Quiet {}

#[actor]
impl Greeter for Quiet {
    fn greet(&self) -> String {
        String::new()
    }
}

#[actor]
struct Loud;

// Listed, but never implemented.
#[actor(implements(Greeter))]
impl Loud {}

fn main() {}
