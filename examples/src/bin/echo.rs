//! A TCP echo server: one pool actor per connection, echoing each line back.
//!
//! ```sh
//! cargo run -p examples --bin echo -- 127.0.0.1:7000
//! ```
//!
//! It prints the address it listens on, answers a line that is not UTF-8 with an error line
//! (the connection stays open), closes a connection whose line grows past 64 KiB (others
//! are untouched), and on Ctrl-C stops accepting, lets its actors go, and exits 0.

use actors::prelude::*;
use examples::lines::{Event, MAX_LINE, accept_until_stopped, spawn_reader};
use runtime::net::Sink;
use std::net::SocketAddr;
use std::time::Duration;

/// One client connection: echoes the lines its reader task hands it.
#[actor(name = "echo_connection")]
struct Connection {
    sink: Sink,
    /// Taken by `on_start`, which gives it to the reader task.
    stream: Option<runtime::net::Stream>,
}

#[actor]
impl Connection {
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let connection = ctx.actor_ref();
        let stream = self.stream.take().expect("set by the acceptor");
        spawn_reader(ctx.runtime(), stream, move |event| {
            let connection = connection.clone();
            async move {
                match event {
                    Event::Line(line) => connection.tell_line(line).await.is_ok(),
                    Event::TooLong => connection.tell_too_long().await.is_ok(),
                    Event::End => true,
                }
            }
        });
    }

    /// Echoes `line`, or says why it cannot.
    async fn line(&mut self, ctx: &mut actors::Context<Self>, line: Vec<u8>) {
        let reply = match String::from_utf8(line) {
            Ok(text) => format!("{text}\n"),
            Err(_) => "ERR the line is not UTF-8\n".to_string(),
        };
        if self.sink.send(reply.into_bytes()).await.is_err() {
            ctx.stop();
        }
    }

    /// The client sent a line past the limit: tell it, and close this connection.
    async fn too_long(&mut self, ctx: &mut actors::Context<Self>) {
        let reply = format!("ERR line longer than {MAX_LINE} bytes; closing\n");
        let _ = self.sink.send(reply.into_bytes()).await;
        ctx.stop();
    }
}

#[runtime::main]
async fn main(context: runtime::Context) -> Result<(), runtime::Error> {
    let address: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".to_string())
        .parse()
        .expect("usage: echo [ADDRESS:PORT]");
    // Held to the end: on an early return it releases the signal-waiting task.
    let _interrupts = examples::interrupt::stop_on_interrupt(&context, Duration::from_secs(5))
        .expect("install the signal handlers");
    let mut listener = context.bind(address).await?;
    println!(
        "echo listening on {}",
        listener.local_addr().expect("bound")
    );
    accept_until_stopped(&context, &mut listener, "echo", |sink, stream| {
        // Dropped at once: the connection lives as long as its reader task holds a ref, and
        // stops with it.
        drop(
            Connection {
                sink,
                stream: Some(stream),
            }
            .spawn(&context),
        );
    })
    .await;
    println!("echo stopped");
    Ok(())
}
