//! A NATS client on the project's io_uring runtime.
//!
//! This first layer is the wire protocol ([`protocol`]): parsing what a server sends and
//! encoding what a client sends, with no I/O, so it runs (and is fuzzed) anywhere, Miri
//! included. The connection, reconnects and subscriptions are built on it.

pub mod protocol;
