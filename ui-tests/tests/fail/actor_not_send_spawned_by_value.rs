use actors::prelude::*;
use std::rc::Rc;

#[actor(dedicated)]
struct Local {
    shared: Rc<u32>,
}

#[actor]
impl Local {
    fn read(&self) -> u32 {
        *self.shared
    }
}

fn start(context: &runtime::Context) -> LocalRef {
    // Built here and moved to its thread: it must be `Send`; `spawn_with` builds it there.
    Local { shared: Rc::new(1) }.spawn(context)
}

fn main() {
    let _ = start;
}
