//! One connection's life: a handshake (`handshake.rs`), then a reader, a writer and a pinger
//! until it drops, then reconnects with backoff over the server list.
//!
//! Invariants:
//! - The writer runs as its own task (sends do not hold up reads) and serves exactly one
//!   connection (see `shared/mod.rs`): when the connection ends it is aborted, and should it
//!   run once more first, the connection's generation stops it from taking anything. The
//!   reader and the pinger run in the connection task, so they have stopped before the
//!   client is told.
//! - However the connection task ends (returns, is aborted with its scope, panics in an
//!   event handler, or never starts), the client is closed: no client looks connected
//!   without a task behind it.
//! - A connection is declared dead when its socket fails, the server closes it, it breaks
//!   the protocol, or `max_pings_out` keepalive pings go unanswered.
//! - Reconnecting tries each server once per round, starting after the one that failed, and
//!   sleeps between rounds (doubling up to the maximum, with jitter). It stops only when the
//!   client is closed or `max_reconnects` attempts failed, and then closes the client.

use crate::Error;
use crate::handshake::{Established, RECEIVE, ServerInfo, establish};
use crate::options::{Event, ServerAddress};
use crate::permission::permission_violation;
use crate::protocol::{Parser, ServerOp};
use crate::random::random_u64;
use crate::shared::{CloseOnDrop, Shared};
use bytes::BytesMut;
use futures::future::{Either, select};
use runtime::net::{Sink, Stream};
use runtime::prelude::*;
use runtime::{Context, IoBuf};
use std::future::poll_fn;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first connection: each server in order, once. A refused credential ends the search
/// at once (the servers of one cluster share their accounts).
pub(crate) async fn first(shared: &Shared, context: &Context) -> Result<Established, Error> {
    let mut failures = Vec::new();
    for server in &shared.options.servers {
        match establish(context, &shared.options, server).await {
            Ok(established) => return Ok(established),
            Err(Error::Unreachable(why)) => failures.extend(why),
            Err(error) => return Err(error),
        }
    }
    Err(Error::Unreachable(failures))
}

/// The connection task: serves each connection until it drops, then reconnects.
pub(crate) async fn run(guard: CloseOnDrop, context: Context, mut established: Established) {
    let shared = &guard.0;
    let mut current = shared
        .servers
        .lock()
        .iter()
        .position(|server| *server == established.server)
        .unwrap_or(0);
    // Connections in a row that dropped within a second of their handshake: a server (or
    // a proxy) that accepts and then drops gets a growing pause, not a tight loop.
    let mut short_lived: u32 = 0;
    loop {
        let started = Instant::now();
        let reason = serve(shared, &context, established).await;
        shared.lost(&reason);
        if started.elapsed() < Duration::from_secs(1) {
            short_lived = short_lived.saturating_add(1);
            let pause = shared
                .options
                .reconnect_delay
                .saturating_mul(1 << short_lived.min(16))
                .min(shared.options.max_reconnect_delay);
            context.sleep(jittered(pause)).await;
        } else {
            short_lived = 0;
        }
        match reconnect(shared, &context, &mut current).await {
            Some(next) => {
                shared.install(&next);
                established = next;
            }
            // The guard closes the client.
            None => return,
        }
    }
}

/// Runs one connection until it drops, and says why it dropped.
async fn serve(shared: &Arc<Shared>, context: &Context, established: Established) -> String {
    let Established {
        server,
        sink,
        stream,
        buffer,
        ..
    } = established;
    let generation = shared.generation();
    let writer = {
        let shared = shared.clone();
        context
            .child("writer")
            .spawn(move |_| write(shared, sink, generation))
    };
    let reader = pin!(read(shared, stream, buffer, &server));
    let pinger = pin!(ping(shared, context));
    match select(select(reader, pinger), writer).await {
        Either::Left((either, writer)) => {
            writer.abort();
            either.factor_first().0
        }
        Either::Right((written, _)) => match written {
            Ok(reason) => reason,
            Err(error) => format!("the writer ended: {error}"),
        },
    }
}

/// Sends what the client queues, one batch per send, until the connection fails or is
/// replaced.
async fn write(shared: Arc<Shared>, mut sink: Sink, generation: u64) -> String {
    let mut spare = BytesMut::with_capacity(RECEIVE);
    loop {
        let Some(batch) = poll_fn(|cx| shared.poll_batch(cx, generation, &mut spare)).await else {
            return "the connection was replaced or closed".into();
        };
        let batch = batch.freeze();
        if let Err(error) = sink.send(IoBuf::from(batch.clone())).await {
            return format!("sending failed: {error}");
        }
        // The send is done with its copy: reuse the buffer when ours is the last reference.
        spare = batch.try_into_mut().unwrap_or_default();
        spare.clear();
    }
}

/// Reads and handles the server's frames until the connection ends.
async fn read(
    shared: &Shared,
    mut stream: Stream,
    mut buffer: BytesMut,
    server: &ServerAddress,
) -> String {
    let parser = Parser::new(shared.options.max_message);
    let mut last_error: Option<String> = None;
    loop {
        loop {
            match parser.next(&mut buffer) {
                Ok(Some(ServerOp::Msg(message))) => shared.dispatch(unpinned(message)),
                Ok(Some(ServerOp::Ping)) => shared.queue_control(|encoder| encoder.pong()),
                Ok(Some(ServerOp::Pong)) => shared.pong(),
                Ok(Some(ServerOp::Ok)) => {}
                Ok(Some(ServerOp::Err(text))) => {
                    // A permissions violation leaves the connection open: fail what it
                    // concerns rather than let it wait for an answer that cannot come.
                    if let Some((operation, subject)) = permission_violation(&text) {
                        shared.permission_denied(operation, subject);
                    }
                    shared.emit(Event::ServerError(text.clone()));
                    last_error = Some(text);
                }
                Ok(Some(ServerOp::Info(text))) => match ServerInfo::parse(&text) {
                    Ok(info) => {
                        shared.learn_servers(server, &info.connect_urls);
                        if info.lame_duck {
                            shared.emit(Event::LameDuck {
                                server: server.to_string(),
                            });
                        }
                        shared.update_info(&info);
                    }
                    Err(error) => return error.to_string(),
                },
                Ok(None) => break,
                Err(error) => return format!("protocol error: {error}"),
            }
        }
        match stream.recv_some(RECEIVE).await {
            Ok(received) => {
                for chunk in received.chunks() {
                    buffer.extend_from_slice(chunk);
                }
            }
            // A quiet connection: the pinger decides whether it is alive.
            Err(runtime::Error::RecvFailed(error)) if error.kind() == io::ErrorKind::TimedOut => {}
            Err(error) => {
                let closed = matches!(&error, runtime::Error::RecvFailed(e)
                    if e.kind() == io::ErrorKind::UnexpectedEof);
                let what = if closed {
                    "the server closed the connection".to_string()
                } else {
                    format!("receiving failed: {error}")
                };
                return match last_error {
                    Some(text) => format!("{what} after -ERR '{text}'"),
                    None => what,
                };
            }
        }
    }
}

/// Messages below this size are copied out of the read buffer: a small message kept in a
/// subscription's queue would otherwise keep the whole 64 KiB buffer it arrived in.
const COPY_BELOW: usize = 8 * 1024;

/// `message` with its bytes in an allocation of their own when it is small (so at most
/// `RECEIVE / COPY_BELOW` times a retained message's size stays pinned).
fn unpinned(mut message: crate::Message) -> crate::Message {
    let size = message.payload.len() + message.headers.as_ref().map_or(0, |h| h.len());
    if size < COPY_BELOW {
        message.payload = bytes::Bytes::copy_from_slice(&message.payload);
        if let Some(headers) = &mut message.headers {
            *headers = bytes::Bytes::copy_from_slice(headers);
        }
    }
    message
}

/// Pings the server every interval; ends when too many pings went unanswered.
async fn ping(shared: &Shared, context: &Context) -> String {
    let interval = shared.options.ping_interval;
    let max_out = shared.options.max_pings_out;
    loop {
        context.sleep(interval).await;
        if !shared.keepalive(max_out) {
            return format!(
                "the server did not answer {max_out} pings sent {interval:?} apart: the \
                 connection is stale"
            );
        }
    }
}

/// `delay` plus up to a quarter of it at random.
fn jittered(delay: Duration) -> Duration {
    let quarter = delay.as_nanos() as u64 / 4;
    delay
        + Duration::from_nanos(if quarter == 0 {
            0
        } else {
            random_u64() % quarter
        })
}

/// Tries the servers round-robin from the one after `current`, sleeping between rounds,
/// until one answers (`Some`), or the client is closed or out of attempts (`None`).
async fn reconnect(shared: &Shared, context: &Context, current: &mut usize) -> Option<Established> {
    let options = &shared.options;
    let mut delay = options.reconnect_delay;
    let mut attempts: u64 = 0;
    loop {
        let servers = shared.servers.lock().clone();
        for offset in 1..=servers.len() {
            if shared.is_closed() {
                return None;
            }
            let index = (*current + offset) % servers.len();
            match establish(context, options, &servers[index]).await {
                Ok(established) => {
                    *current = index;
                    return Some(established);
                }
                Err(error @ (Error::Authorization(_) | Error::Protocol(_))) => {
                    shared.emit(Event::ServerError(error.to_string()));
                }
                Err(_) => {}
            }
            attempts += 1;
            if options.max_reconnects.is_some_and(|max| attempts >= max) {
                return None;
            }
        }
        context.sleep(jittered(delay)).await;
        delay = (delay * 2).min(options.max_reconnect_delay);
    }
}
