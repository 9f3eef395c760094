use actors::prelude::*;

#[interface(remote, dedicated)]
trait Named {
    fn name(&self) -> String;
}

fn main() {}
