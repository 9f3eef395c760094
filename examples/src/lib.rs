//! Runnable programs that show the framework: `cargo run -p examples --bin NAME`.
//!
//! `tour`, `kv`, `chat`, `echo` and `hello`. This library holds what they share: the `kv`
//! service (which `tour` runs in-process), its Redis protocol codec, a line reader for the
//! line protocols of the others, and the Ctrl-C handling that turns a signal into a runtime
//! stop.

pub mod interrupt;
pub mod kv;
pub mod limits;
pub mod lines;
pub mod resp;
