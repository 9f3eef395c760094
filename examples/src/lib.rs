//! Runnable programs that show the framework: `cargo run -p examples --bin NAME`.
//!
//! `hello` runs now; the tour of actors, TCP and storage arrives with the examples issue.
