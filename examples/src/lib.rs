//! Runnable programs that show the framework: `cargo run -p examples --bin NAME`.
//!
//! `hello`, `echo`, `chat` and `kv` run now; `tour` arrives with the rest of the examples
//! issue. This library holds what the programs share: a line reader and the
//! Ctrl-C handling.

pub mod interrupt;
pub mod kv;
pub mod lines;
