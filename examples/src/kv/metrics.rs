//! The `/metrics` endpoint: an acceptor (see [`super::acceptor`]) that answers `GET
//! /metrics` with the runtime's Prometheus exposition and anything else with 404, one
//! request per connection, each bounded in size and time, and at most
//! [`MAX_METRICS_CONNECTIONS`] at once.

use super::acceptor::{AcceptLoop, Listening};
use crate::limits::{Slot, setting};
use crate::lines::LineReader;
use crate::refusal::Refusal;
use runtime::net::{Sink, Stream};
use runtime::prelude::*;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// What every incarnation of the [`MetricsEndpoint`] shares: the service's scope, where
/// requests are answered (an answer under way is not cut by a restart), and the count that
/// bounds them across incarnations.
#[derive(Debug)]
pub(super) struct Exposition {
    pub(super) service: runtime::Context,
    pub(super) open: Arc<AtomicUsize>,
}

impl Exposition {
    /// Answers one connection, in a task of the service's scope, unless
    /// [`MAX_METRICS_CONNECTIONS`] are open: then it is refused with a 503.
    fn admit(&self, mut sink: Sink, stream: Stream) -> Option<Refusal> {
        // Bounded: a flood of connections that never finish a request holds at most this
        // many, each for at most the request deadline; one more is answered 503.
        let Some(slot) = Slot::take(&self.open, MAX_METRICS_CONNECTIONS) else {
            return Some(Refusal {
                sink,
                stream,
                line: b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\
                        Connection: close\r\n\r\n"
                    .to_vec(),
            });
        };
        let exposition = self.service.clone();
        drop(self.service.clone().spawn(move |runtime| async move {
            let _slot = slot;
            let mut lines = LineReader::new(stream);
            let read = runtime.timeout(metrics_request_deadline(), read_request(&mut lines));
            let (status, body) = match read.await {
                Err(_) => return,
                Ok(Err(refusal)) => (refusal, format!("{refusal}\n")),
                Ok(Ok(request)) if request.starts_with(b"GET /metrics ") => {
                    ("200 OK", exposition.encode())
                }
                Ok(Ok(_)) => (
                    "404 Not Found",
                    "only GET /metrics is served here\n".to_string(),
                ),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; \
                 charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = runtime
                .timeout(metrics_request_deadline(), sink.send(response.into_bytes()))
                .await;
            drop(sink);
            // What the client still sends is read (and dropped) until it closes or the
            // deadline passes: closing with it unread would reset the connection, and the
            // client might lose the answer.
            let _ = runtime
                .timeout(metrics_request_deadline(), async {
                    while let Ok(Some(_)) = lines.next_line().await {}
                })
                .await;
        }));
        None
    }
}

/// The `/metrics` endpoint: a permanent child of the `kv` supervisor.
#[actors::actor(name = "kv_metrics")]
#[derive(Debug)]
pub struct MetricsEndpoint {
    accept_loop: AcceptLoop,
    exposition: Arc<Exposition>,
}

impl MetricsEndpoint {
    /// An incarnation accepting on `listening`'s listener.
    pub(super) fn new(listening: Arc<Listening>, exposition: Arc<Exposition>) -> Self {
        MetricsEndpoint {
            accept_loop: AcceptLoop::new(listening),
            exposition,
        }
    }
}

#[actors::actor]
impl MetricsEndpoint {
    /// Takes the listener (binding its address again if the last one broke: a bind that
    /// fails is a failed start) and starts accepting.
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let exposition = self.exposition.clone();
        let endpoint = ctx.actor_ref();
        let started = self
            .accept_loop
            .start(
                ctx.runtime(),
                self.exposition.service.clone(),
                "kv metrics",
                move |sink, stream| exposition.admit(sink, stream),
                move |error| async move {
                    let _ = endpoint.tell_listener_broke(error.to_string()).await;
                },
            )
            .await;
        if let Err(error) = started {
            panic!("kv metrics: cannot listen again: {error}");
        }
    }

    async fn on_stop(&mut self) {
        self.accept_loop.stop().await;
    }

    /// Where it serves `/metrics` (the same address across restarts).
    pub fn address(&self) -> std::net::SocketAddr {
        self.accept_loop.address()
    }

    /// The accept loop found the listener broken and closed it: the endpoint fails, and the
    /// next incarnation binds the address anew.
    fn listener_broke(&mut self, error: String) {
        panic!("kv metrics: the listener broke ({error}); it is bound again on restart");
    }
}

/// `/metrics` connections open at once; past it a new one is answered 503 and closed.
pub const MAX_METRICS_CONNECTIONS: usize = 64;

/// The most a `/metrics` request line and its headers may weigh.
const MAX_METRICS_REQUEST: usize = 16 * 1024;

/// How long a `/metrics` client has to send its request (and take the answer):
/// `KV_METRICS_DEADLINE_MS`, 5000 by default.
fn metrics_request_deadline() -> std::time::Duration {
    static DEADLINE: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *DEADLINE
        .get_or_init(|| std::time::Duration::from_millis(setting("KV_METRICS_DEADLINE_MS", 5000)))
}

/// Reads an HTTP request line and its headers, up to the blank line: the request line, or
/// the status that refuses it (too large). A connection that ends first has no answer.
async fn read_request(lines: &mut LineReader) -> Result<Vec<u8>, &'static str> {
    const TOO_LARGE: &str = "431 Request Header Fields Too Large";
    let request = match lines.next_line().await {
        Ok(Some(request)) => request,
        Err(crate::lines::LineError::TooLong) => return Err(TOO_LARGE),
        // Gone before a request: answered with nothing a client could take as one.
        _ => return Ok(Vec::new()),
    };
    let mut weight = request.len();
    loop {
        match lines.next_line().await {
            Ok(Some(header)) if header.is_empty() => return Ok(request),
            Ok(Some(header)) => {
                weight += header.len() + 2;
                if weight > MAX_METRICS_REQUEST {
                    return Err(TOO_LARGE);
                }
            }
            Err(crate::lines::LineError::TooLong) => return Err(TOO_LARGE),
            // Ended before the blank line: answered as it stands.
            _ => return Ok(request),
        }
    }
}
