//! Dedicated and blocking actors whose state is not `Send`, built on their threads by
//! `spawn_with` (from a context and from another actor), with a handler holding the state
//! across an await; their refs cross tasks.
use actors::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;

#[actor(dedicated)]
struct Journal {
    lines: Rc<RefCell<Vec<String>>>,
}

#[actor]
impl Journal {
    async fn write(&mut self, line: String) -> usize {
        let lines = self.lines.clone();
        std::future::ready(()).await;
        lines.borrow_mut().push(line);
        lines.borrow().len()
    }
}

#[actor(blocking)]
struct Scratch {
    cells: Rc<Vec<u8>>,
}

#[actor]
impl Scratch {
    fn size(&self) -> usize {
        self.cells.len()
    }
}

#[actor]
struct Owner;

#[actor]
impl Owner {
    fn scratch(&self, ctx: &mut actors::Context<Self>) -> ScratchRef {
        ctx.spawn_with(|| Scratch {
            cells: Rc::new(vec![0; 3]),
        })
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let journal = Journal::spawn_with(&context, || Journal {
            lines: Rc::default(),
        });
        let writer = journal.clone();
        let written = context
            .clone()
            .spawn(move |_| async move { writer.write("one".into()).await })
            .await
            .unwrap();
        assert_eq!(written, Ok(1));
        assert_eq!(journal.write("two".into()).await, Ok(2));
        let owner = Owner.spawn(&context);
        let scratch = owner.scratch().await.unwrap();
        assert_eq!(scratch.size().await, Ok(3));
    });
}
