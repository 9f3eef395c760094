use actors::prelude::*;

#[actor]
struct Store;

#[actor]
impl Store {
    fn get(&self) {}

    fn forward_get(&self) {}

    fn tell_get(&self) {}

    fn get_recipient(&self) {}
}

fn main() {}
