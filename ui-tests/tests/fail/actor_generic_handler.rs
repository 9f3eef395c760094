use actors::prelude::*;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn show<T: std::fmt::Debug + Send + 'static>(&self, value: T) -> String {
        format!("{value:?}")
    }
}

fn main() {}
