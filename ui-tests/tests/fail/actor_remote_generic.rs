use actors::prelude::*;

#[actor]
struct Cache<V: Send + 'static> {
    value: Option<V>,
}

#[actor(remote)]
impl<V: Send + 'static> Cache<V> {
    fn clear(&mut self) {
        self.value = None;
    }
}

fn main() {}
