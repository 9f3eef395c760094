//! `ringnats`: a NATS client on the project's io_uring runtime: publish, subscribe (with queue
//! groups), request-reply and flush over one connection that reconnects by itself. (The crate
//! name `nats` belongs to the NATS project's own client; the `remote` feature of `actors`
//! re-exports this one as `actors::remote::nats`.)
//!
//! ```no_run
//! # async fn example(context: runtime::Context) -> Result<(), ringnats::Error> {
//! let options = ringnats::Options::new(["nats://127.0.0.1:4222"])?;
//! let client = ringnats::Client::connect(&context, options).await?;
//! let mut greetings = client.subscribe("greet.*")?;
//! client.publish("greet.joe", "hello").await?;
//! let message = greetings.next().await.expect("subscribed");
//! assert_eq!(&message.payload[..], b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! The layers, each using only those below it (`ARCHITECTURE.md` has the table, and
//! `tests/layers.rs` checks the source against it):
//! - [`protocol`]: the wire protocol as bytes (parsing what a server sends, encoding what a
//!   client sends), with no I/O, so it runs (and is fuzzed) anywhere, Miri included;
//!   [`Headers`] is the header block, and [`Options`] what a client is told.
//! - `handshake`: dialling a server and the handshake (reading the server's `INFO` and
//!   writing `CONNECT`, JSON both, with serde_json).
//! - `shared`: the state a client and its connection's tasks share, under one lock (the
//!   write buffer, the subscription and request tables), where the ordering and failure
//!   guarantees below are kept.
//! - `connection`: one connection's reader, writer and pinger, and reconnects.
//! - [`Subscription`] and then [`Client`]: what callers use.
//!
//! Guarantees: delivery is at most once. Messages from one client to one subscriber arrive
//! in the order they were published while the connection holds; what was queued but not sent
//! when a connection drops is lost, and waiting flushes and requests fail at once with
//! [`Error::Disconnected`]. A subscriber that falls behind has new messages dropped and
//! counted, never the connection held up. [`server`] starts a `nats-server` for tests and
//! examples.

#![warn(missing_docs, missing_debug_implementations)]

mod client;
mod connection;
mod error;
mod handshake;
mod headers;
mod options;
mod owner;
mod permission;
pub mod protocol;
mod queue;
mod random;
pub mod server;
mod shared;
mod subscription;

pub use client::Client;
pub use error::Error;
pub use headers::Headers;
pub use options::{Event, EventHandler, Options, ServerAddress};
pub use protocol::Message;
pub use subscription::{Subscription, Unsubscriber};
