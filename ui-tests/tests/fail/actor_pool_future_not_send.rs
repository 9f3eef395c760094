use actors::prelude::*;
use std::rc::Rc;

async fn pause() {}

// State that is `Send`, but a handler, a hook and a generic actor's handler each hold an
// `Rc` across an await: their futures would move between pool workers.
#[actor]
struct Handler;

#[actor]
impl Handler {
    async fn read(&self) -> u32 {
        let shared = Rc::new(1);
        pause().await;
        *shared
    }
}

#[actor]
struct Hook;

#[actor]
impl Hook {
    async fn on_start(&mut self) {
        let shared = Rc::new(1);
        pause().await;
        drop(shared);
    }
}

#[actor]
struct Generic<T: Send + 'static> {
    value: T,
}

#[actor]
impl<T: Send + Clone + 'static> Generic<T> {
    async fn read(&self) -> T {
        let shared = Rc::new(self.value.clone());
        pause().await;
        (*shared).clone()
    }
}

fn main() {}
