use actors::prelude::*;

#[actor]
struct Borrowing<'a> {
    name: &'a str,
}

#[actor]
impl<'a> Borrowing<'a> {
    fn name(&self) -> String {
        self.name.to_string()
    }
}

fn main() {}
