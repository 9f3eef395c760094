//! Refusing a connection past a server's limit without losing the refusal, and without a
//! burst of refused connections costing the server more than a bound.
//!
//! A refusal tells the client why in one line, shuts the connection's writing side (the
//! client reads the line, then end-of-stream), and then reads and drops what the client sent
//! until it closes its side. That last step is what keeps the line: a socket closed with
//! received bytes unread is reset, not closed, and a reset can reach the client before the
//! line it should have read (the client's `PING` sent right after connecting is such
//! bytes). Each refusal runs within [`REFUSAL_DEADLINE`]; a client that neither reads nor
//! closes by then is closed anyway.
//!
//! [`Refusals`] bounds the refusals running at once: past [`REFUSALS_IN_FLIGHT`], the accept
//! loop waits for one to end before it accepts again, so a hostile burst waits in the
//! listen backlog (the kernel's bound), never as sockets or tasks held by the server. (A
//! refusal that ran out of time ends with its receive cancelled; its socket closes once the
//! ring has that receive's answer, a moment later, so the sockets of refusals number at most
//! twice the bound.)

use futures::StreamExt as _;
use futures::channel::mpsc;
use runtime::Clock as _;
use runtime::Sink as _;
use runtime::Spawner as _;
use runtime::Stream as _;
use runtime::net::{Sink, Stream};
use std::time::Duration;

/// Refusals running at once, at most.
pub const REFUSALS_IN_FLIGHT: usize = 64;

/// How long a refusal may take: the line sent, and the client's own close awaited.
pub const REFUSAL_DEADLINE: Duration = Duration::from_secs(2);

/// A connection to refuse, and the line that says why.
#[derive(Debug)]
pub struct Refusal {
    /// The connection's sending half.
    pub sink: Sink,
    /// Its receiving half.
    pub stream: Stream,
    /// What the client is told, its line ending included.
    pub line: Vec<u8>,
}

/// The refusals of one accept loop: at most [`REFUSALS_IN_FLIGHT`] at once.
#[derive(Debug)]
pub struct Refusals {
    /// One token per refusal that may start; a refusal's task gives its token back when it
    /// ends (or is dropped: the token travels in a guard).
    tokens: mpsc::UnboundedReceiver<()>,
    give_back: mpsc::UnboundedSender<()>,
}

impl Default for Refusals {
    fn default() -> Self {
        Self::new(REFUSALS_IN_FLIGHT)
    }
}

impl Refusals {
    /// At most `max` refusals at once (`max` > 0).
    pub fn new(max: usize) -> Self {
        assert!(max > 0, "at least one refusal at a time");
        let (give_back, tokens) = mpsc::unbounded();
        for _ in 0..max {
            give_back.unbounded_send(()).expect("the receiver is here");
        }
        Refusals { tokens, give_back }
    }

    /// Waits until fewer than the bound are running, then starts `refusal` in a task of
    /// `context` (see [`refuse`]).
    pub async fn start(&mut self, context: &runtime::Context, refusal: Refusal) {
        // Never `None`: this holds a sender.
        self.tokens.next().await;
        let token = Token(self.give_back.clone());
        drop(context.clone().spawn(move |clock| async move {
            let _token = token;
            refuse(&clock, refusal).await;
        }));
    }
}

/// Gives its refusal's token back when dropped.
struct Token(mpsc::UnboundedSender<()>);

impl Drop for Token {
    fn drop(&mut self) {
        // Fails only once the accept loop is gone, when nobody waits for tokens.
        let _ = self.0.unbounded_send(());
    }
}

/// Tells the client the refusal's line, shuts the writing side, and reads (and drops) what
/// the client sends until it closes, all within [`REFUSAL_DEADLINE`]; then the socket
/// closes.
pub async fn refuse(clock: &runtime::Context, refusal: Refusal) {
    let Refusal {
        mut sink,
        mut stream,
        line,
    } = refusal;
    let _ = clock
        .timeout(REFUSAL_DEADLINE, async move {
            if sink.send(line).await.is_err() {
                return;
            }
            // End-of-stream after the line.
            drop(sink);
            while stream.recv_some(4096).await.is_ok() {}
        })
        .await;
}
