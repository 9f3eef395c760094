use actors::prelude::*;
use std::rc::Rc;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn take(&self, value: Rc<u8>) -> u8 {
        *value
    }
}

fn main() {}
