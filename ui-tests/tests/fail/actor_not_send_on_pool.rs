use actors::prelude::*;
use std::rc::Rc;

// The shared pool moves actors between workers: state that is not `Send` belongs on a
// thread of its own.
#[actor]
struct Local {
    shared: Rc<u32>,
}

#[actor]
impl Local {
    fn read(&self) -> u32 {
        *self.shared
    }
}

fn main() {}
