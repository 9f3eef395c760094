//! The README's "State that is not `Send`" block.
use actors::prelude::*;
use std::{cell::RefCell, rc::Rc};

#[actor(dedicated)]
struct Journal {
    lines: Rc<RefCell<Vec<String>>>,
}

#[actor]
impl Journal {
    fn write(&mut self, line: String) -> usize {
        self.lines.borrow_mut().push(line);
        self.lines.borrow().len()
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let journal = Journal::spawn_with(&context, || Journal {
            lines: Rc::default(),
        });
        assert_eq!(journal.write("one".into()).await, Ok(1));
    });
}
