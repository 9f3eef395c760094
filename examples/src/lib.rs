//! Runnable programs that show the framework: `cargo run -p examples --bin NAME`.
//!
//! `hello` and `echo` run now; the rest of the tour of actors, TCP and storage arrives with
//! the examples issue. This library holds what the programs share: a line reader and the
//! Ctrl-C handling.

pub mod interrupt;
pub mod lines;
