use actors::prelude::*;
use actors::Reply;

#[actor]
struct Front;

#[actor]
impl Front {
    fn lookup(&mut self, key: u64, reply: Reply<u64>) -> u64 {
        reply.send(key);
        key
    }

    fn early(&mut self, reply: Reply<u64>, key: u64) {
        reply.send(key);
    }
}

fn main() {}
