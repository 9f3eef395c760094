use actors::prelude::*;

#[interface]
pub trait Generic<T> {
    fn get(&self) -> T;
}

#[interface]
pub trait WithSuper: Clone {
    fn get(&self) -> u32;
}

#[interface]
pub trait WithType {
    type Item;
    fn get(&self) -> u32;
}

#[interface]
pub trait ByValue {
    fn take(self) -> u32;
}

#[interface]
pub trait NoSelf {
    fn make() -> u32;
}

#[interface]
pub trait NamesSelf {
    fn twin(&self) -> Self;
}

#[interface]
pub trait Borrows {
    fn peek(&self, key: &str) -> u32;
}

#[interface]
pub trait Hooked {
    fn on_start(&mut self);
}

#[interface]
pub trait GenericMethod {
    fn get<T>(&self) -> u32;
}

#[interface(mailbox = 4)]
pub trait WithOptions {
    fn get(&self) -> u32;
}

fn main() {}
