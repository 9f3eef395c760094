//! `#[runtime::main]` and `#[runtime::test]`: an `async fn` becomes a plain function that
//! starts a runner with the body as its root.
//!
//! The parse (`Entry` for the function, `Options` for the arguments) finds every user error;
//! `main` and `test` then build the function from what it checked.

pub(crate) mod function;
// `main.rs` holds `#[runtime::main]` (the files are named after the attributes).
pub(crate) mod main;
pub(crate) mod options;
pub(crate) mod test;
