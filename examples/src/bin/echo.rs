//! A TCP echo server: one pool actor per connection, echoing each line back.
//!
//! ```sh
//! cargo run -p examples --bin echo -- 127.0.0.1:7000
//! ```
//!
//! It prints the address it listens on, answers a line that is not UTF-8 with an error line
//! (the connection stays open), closes a connection whose line grows past 64 KiB (others
//! are untouched), closes one whose next line does not arrive whole within the idle timeout
//! (`ECHO_IDLE_TIMEOUT_MS`, five minutes), serves at most `ECHO_MAX_CONNECTIONS` (10,000)
//! at once, and on Ctrl-C stops accepting, lets its actors go, and exits 0.

use actors::prelude::*;
use examples::limits::{Slot, setting};
use examples::lines::{Event, MAX_LINE, accept_until_stopped, idle_timeout, spawn_reader};
use examples::refusal::Refusal;
use runtime::net::Sink;
use std::net::SocketAddr;
use std::time::Duration;

/// One client connection: echoes the lines its reader task hands it.
#[actor(name = "echo_connection")]
struct Connection {
    sink: Sink,
    /// Taken by `on_start`, which gives it to the reader task.
    stream: Option<runtime::net::Stream>,
    /// Counts the connection among the server's until it stops.
    _slot: Slot,
}

#[actor]
impl Connection {
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let connection = ctx.actor_ref();
        let stream = self.stream.take().expect("set by the acceptor");
        let idle = idle_timeout("ECHO_IDLE_TIMEOUT_MS");
        spawn_reader(ctx.runtime(), stream, idle, move |event| {
            let connection = connection.clone();
            async move {
                match event {
                    Event::Line(line) => connection.tell_line(line).await.is_ok(),
                    Event::TooLong => connection.tell_too_long().await.is_ok(),
                    Event::Idle => connection.tell_idle(idle).await.is_ok(),
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

    /// No whole line came within the idle timeout: tell the client, and close.
    async fn idle(&mut self, ctx: &mut actors::Context<Self>, idle: Duration) {
        let reply = format!("ERR idle for {} ms; closing\n", idle.as_millis());
        let _ = self.sink.send(reply.into_bytes()).await;
        ctx.stop();
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
    examples::interrupt::stop_on_interrupt(&context, Duration::from_secs(5));
    let mut listener = context.bind(address).await?;
    examples::say!(
        "echo listening on {}",
        listener.local_addr().expect("bound")
    );
    let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let max = setting("ECHO_MAX_CONNECTIONS", 10_000);
    accept_until_stopped(&context, &mut listener, "echo", |sink, stream| {
        let Some(slot) = Slot::take(&open, max) else {
            // Told so, then closed.
            return Some(Refusal {
                sink,
                stream,
                line: format!("ERR too many connections (at most {max}); closing\n").into_bytes(),
            });
        };
        // Dropped at once: the connection lives as long as its reader task holds a ref, and
        // stops with it.
        drop(
            Connection {
                sink,
                stream: Some(stream),
                _slot: slot,
            }
            .spawn(&context),
        );
        None
    })
    .await?;
    examples::say!("echo stopped");
    Ok(())
}
