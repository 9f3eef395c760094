//! Reading a line protocol from a runtime `Stream`: lines end in `\n` (a `\r` before it is
//! dropped), and a line longer than the limit is an error for that connection alone.
//!
//! The reading is futures' `AsyncBufReadExt::read_until` over the stream itself (it is an
//! `AsyncBufRead` on its own receive buffer), bounded with `take`: a client that never ends
//! its line makes the reader hold at most [`MAX_LINE`] bytes and two more, whatever it
//! sends, and a line is refused at the first byte that shows it too long. Lines are bytes:
//! whether they must be UTF-8 is the protocol's to say.

use futures::io::{AsyncBufReadExt as _, AsyncReadExt as _};

/// The longest line the examples accept, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// Why no line came.
#[derive(Debug)]
pub enum LineError {
    /// The line grew past [`MAX_LINE`] bytes without ending.
    TooLong,
    /// The connection failed or closed mid-line.
    Closed,
    /// No whole line came within the idle timeout.
    Idle,
}

/// Reads lines from a stream.
pub struct LineReader {
    stream: runtime::net::Stream,
    /// How long a line may take to arrive whole, counted from the end of the previous one
    /// (a quiet client and one that trickles a line are both bounded), and the clock.
    idle: Option<(runtime::Context, std::time::Duration)>,
}

impl std::fmt::Debug for LineReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineReader")
            .field("stream", &self.stream)
            .field("idle", &self.idle.as_ref().map(|(_, idle)| idle))
            .finish()
    }
}

impl LineReader {
    /// A reader that waits for a line as long as the client takes.
    pub fn new(stream: runtime::net::Stream) -> Self {
        LineReader { stream, idle: None }
    }

    /// A reader whose every line must arrive whole within `idle` of the previous one.
    pub fn with_idle_timeout(
        stream: runtime::net::Stream,
        clock: runtime::Context,
        idle: std::time::Duration,
    ) -> Self {
        LineReader {
            stream,
            idle: Some((clock, idle)),
        }
    }

    /// The next line without its ending, `Ok(None)` at a clean end of stream (nothing
    /// pending), or why there is none. A line may hold [`MAX_LINE`] bytes before its `\r\n`
    /// (or `\n`). After an error the reader is spent: the rest of the stream is out of step.
    pub async fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        use runtime::Clock as _;
        match self.idle.clone() {
            None => self.read_line().await,
            // One timer per line, not per read.
            Some((clock, idle)) => clock
                .timeout(idle, self.read_line())
                .await
                .unwrap_or(Err(LineError::Idle)),
        }
    }

    async fn read_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        let mut line = Vec::new();
        loop {
            if line.last() == Some(&b'\n') {
                break;
            }
            // The longest line and one byte more, which may be its end: past that only the
            // `\n` of a `\r\n` may come. So a line is refused as soon as a byte shows it too
            // long, without waiting for bytes a client may never send.
            let limit = if line.len() > MAX_LINE && line.last() == Some(&b'\r') {
                MAX_LINE + 2
            } else {
                MAX_LINE + 1
            };
            if line.len() >= limit {
                break;
            }
            // What this line holds counts against the limit: a read the runtime's timeout
            // interrupted left its bytes in `line`.
            let room = (limit - line.len()) as u64;
            match (&mut self.stream)
                .take(room)
                .read_until(b'\n', &mut line)
                .await
            {
                // The end of the stream.
                Ok(0) => break,
                // A whole line, or the limit (looked at above).
                Ok(_) => {}
                // The runtime's read timeout: a quiet client is not a gone one.
                Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) if line.is_empty() => return Ok(None),
                Err(_) => return Err(LineError::Closed),
            }
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return if line.len() > MAX_LINE {
                Err(LineError::TooLong)
            } else {
                Ok(Some(line))
            };
        }
        if line.len() > MAX_LINE {
            Err(LineError::TooLong)
        } else if line.is_empty() {
            Ok(None)
        } else {
            Err(LineError::Closed)
        }
    }
}

/// What a connection's reader task hands on.
pub enum Event {
    /// A whole line, without its ending.
    Line(Vec<u8>),
    /// A line grew past [`MAX_LINE`]; the reader stops.
    TooLong,
    /// No whole line came within the idle timeout; the reader stops.
    Idle,
    /// The client closed the connection (or it failed); the reader stops.
    End,
}

/// Shows a line's length, not its bytes.
impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Line(line) => write!(f, "Line({} bytes)", line.len()),
            Event::TooLong => f.write_str("TooLong"),
            Event::Idle => f.write_str("Idle"),
            Event::End => f.write_str("End"),
        }
    }
}

/// Spawns, in `scope` (an actor's own scope, so it ends with the actor), the task that reads
/// `stream` line by line, each within `idle` of the previous, and hands each [`Event`] to
/// `deliver`; it stops after `TooLong`, `Idle` or `End`, or when `deliver` answers `false`
/// (the actor is gone).
pub fn spawn_reader<F, Fut>(
    scope: &runtime::Context,
    stream: runtime::net::Stream,
    idle: std::time::Duration,
    mut deliver: F,
) where
    F: FnMut(Event) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    use runtime::Spawner as _;
    let mut lines = LineReader::with_idle_timeout(stream, scope.clone(), idle);
    drop(scope.clone().spawn(move |_| async move {
        loop {
            let event = match lines.next_line().await {
                Ok(Some(line)) => Event::Line(line),
                Ok(None) | Err(LineError::Closed) => Event::End,
                Err(LineError::TooLong) => Event::TooLong,
                Err(LineError::Idle) => Event::Idle,
            };
            let last = !matches!(event, Event::Line(_));
            if !deliver(event).await || last {
                return;
            }
        }
    }));
}

/// The idle timeout of a protocol port: the environment variable `name` in milliseconds, five
/// minutes by default.
pub fn idle_timeout(name: &str) -> std::time::Duration {
    std::time::Duration::from_millis(crate::limits::setting(name, 300_000))
}

/// Accepts connections on `listener` and hands each to `accepted`, until the runtime is
/// asked to stop (then `Ok`). A connection `accepted` hands back as a
/// [`Refusal`](crate::refusal::Refusal) (past the server's limit) is told so and closed
/// without losing its line, in a task of `context`; past
/// [`REFUSALS_IN_FLIGHT`](crate::refusal::REFUSALS_IN_FLIGHT) refusals at once, accepting
/// waits for one to end. A failing accept is reported and retried after a pause (a lasting
/// failure, such as running out of descriptors, must not spin), unless it says the listening
/// socket itself is unusable ([`listener_is_broken`]): accepting on it again could never
/// succeed, so that error is returned, for the caller to replace the listener or give up.
pub async fn accept_until_stopped(
    context: &runtime::Context,
    listener: &mut runtime::net::Listener,
    name: &str,
    mut accepted: impl FnMut(
        runtime::net::Sink,
        runtime::net::Stream,
    ) -> Option<crate::refusal::Refusal>,
) -> Result<(), runtime::Error> {
    use futures::future::{Either, select};
    use runtime::prelude::*;
    let stopped = context.stopped();
    let mut stopped = std::pin::pin!(stopped);
    let mut refusals = crate::refusal::Refusals::default();
    loop {
        let result = {
            let accept = std::pin::pin!(listener.accept());
            match select(accept, stopped.as_mut()).await {
                Either::Left((result, _)) => result,
                Either::Right(_) => return Ok(()),
            }
        };
        match result {
            Ok((_, sink, stream)) => {
                if let Some(refusal) = accepted(sink, stream) {
                    let refused = std::pin::pin!(refusals.start(context, refusal));
                    if let Either::Right(_) = select(refused, stopped.as_mut()).await {
                        return Ok(());
                    }
                }
            }
            Err(error) if listener_is_broken(&error) => {
                eprintln!("{name}: accept failed: {error}; the listener is unusable");
                return Err(error);
            }
            Err(error) => {
                eprintln!("{name}: accept failed: {error}");
                context.sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Whether a failed accept says the listening socket itself is unusable: closed (`EBADF`),
/// no longer listening (`EINVAL`: shut down, say), not a socket (`ENOTSOCK`), or handed a
/// bad buffer (`EFAULT`). Every other failure belongs to one connection (aborted before it
/// was taken; Linux also passes a new connection's network errors this way) or to a
/// resource that may come back (descriptors, memory), and retrying on the same socket is
/// the cure, as accept(2) advises.
pub fn listener_is_broken(error: &runtime::Error) -> bool {
    let runtime::Error::AcceptFailed(error) = error else {
        return false;
    };
    matches!(
        error.raw_os_error(),
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EFAULT)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::prelude::*;
    use std::time::Duration;

    /// A line of exactly `MAX_LINE` bytes is accepted with either ending; one byte more is
    /// too long (at once, whatever follows), and so is a `\r` at the limit that is not
    /// followed by `\n`.
    #[test]
    fn lines_of_the_maximum_length_are_accepted_and_longer_ones_refused() {
        runtime::Runner::new(runtime::Config::default()).start(|context| async move {
            let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let address = listener.local_addr().unwrap();
            let longest = vec![b'x'; MAX_LINE];
            let cases: Vec<(Vec<u8>, bool)> = vec![
                ([&longest[..], b"\r\n"].concat(), true),
                ([&longest[..], b"\n"].concat(), true),
                ([&longest[..], b"x\n"].concat(), false),
                ([&longest[..], b"\rx\n"].concat(), false),
                // Too long at its first byte past the limit, though no end ever comes.
                ([&longest[..], b"x"].concat(), false),
            ];
            for (bytes, accepted) in cases {
                let (read, held) = futures::channel::oneshot::channel::<()>();
                let client = context.clone().spawn(move |context| async move {
                    let (mut sink, _stream) = context.dial(address).await.unwrap();
                    sink.send(bytes).await.unwrap();
                    // Held open until the server has read.
                    let _ = held.await;
                });
                let (_, _sink, stream) = listener.accept().await.unwrap();
                let mut lines = LineReader::new(stream);
                match lines.next_line().await {
                    Ok(Some(line)) if accepted => assert_eq!(line, longest),
                    Err(LineError::TooLong) if !accepted => {}
                    other => panic!(
                        "accepted {accepted}: {:?}",
                        other.map(|line| line.map(|line| line.len()))
                    ),
                }
                drop(read);
                client.await.unwrap();
            }
        });
    }

    /// With an idle timeout, a client that sends nothing, and one that trickles a line
    /// slower than the timeout allows, are both told `Idle`; lines within it are read.
    #[test]
    fn an_idle_or_trickling_client_is_timed_out() {
        runtime::Runner::new(runtime::Config::default()).start(|context| async move {
            let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let address = listener.local_addr().unwrap();
            let (done, held) = futures::channel::oneshot::channel::<()>();
            let client = context.clone().spawn(move |context| async move {
                let (mut quiet, _quiet_stream) = context.dial(address).await.unwrap();
                quiet.send(b"first\n".as_slice()).await.unwrap();
                let (mut trickle, _trickle_stream) = context.dial(address).await.unwrap();
                // A byte every 40 ms: the line would take 360 ms, past the 150 ms allowed.
                for byte in b"slow line" {
                    trickle.send(vec![*byte]).await.unwrap();
                    context.sleep(Duration::from_millis(40)).await;
                }
                let _ = held.await;
            });
            let idle = Duration::from_millis(150);
            let (_, _sink, stream) = listener.accept().await.unwrap();
            let mut quiet = LineReader::with_idle_timeout(stream, context.clone(), idle);
            assert_eq!(
                quiet.next_line().await.unwrap().as_deref(),
                Some(&b"first"[..])
            );
            assert!(matches!(quiet.next_line().await, Err(LineError::Idle)));
            let (_, _sink, stream) = listener.accept().await.unwrap();
            let mut trickle = LineReader::with_idle_timeout(stream, context.clone(), idle);
            assert!(matches!(trickle.next_line().await, Err(LineError::Idle)));
            drop(done);
            client.await.unwrap();
        });
    }

    /// A line split by a pause longer than the runtime's read timeout comes whole: the bytes
    /// read before the timeout are kept. A line that is not UTF-8 comes as it is (the
    /// protocols answer it), a flood without a newline is too long, and a stream that ends
    /// mid-line is `Closed` while one that ends between lines is a clean end.
    #[test]
    fn lines_survive_read_timeouts_and_bad_input_is_bounded() {
        let config = runtime::Config::default().with_read_write_timeout(Duration::from_millis(50));
        runtime::Runner::new(config).start(|context| async move {
            let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let address = listener.local_addr().unwrap();
            let (resume, resumed) = futures::channel::oneshot::channel::<()>();
            let client = context.clone().spawn(move |context| async move {
                let (mut split, _split_stream) = context.dial(address).await.unwrap();
                split.send(b"half a ".as_slice()).await.unwrap();
                // Quiet for several read timeouts of the server's side, mid-line.
                context.sleep(Duration::from_millis(300)).await;
                split.send(b"line\r\n\xff\xfe\n".as_slice()).await.unwrap();
                let (mut flood, _flood_stream) = context.dial(address).await.unwrap();
                // Four times the limit, never a newline: the reader stops at the limit.
                let _ = flood.send(vec![b'x'; 4 * MAX_LINE]).await;
                let (mut cut, _cut_stream) = context.dial(address).await.unwrap();
                cut.send(b"whole\nunfinished".as_slice()).await.unwrap();
                drop(cut);
                let _ = resumed.await;
            });
            let (_, _sink, stream) = listener.accept().await.unwrap();
            let mut split = LineReader::new(stream);
            let line = split.next_line().await.unwrap();
            assert_eq!(line.as_deref(), Some(b"half a line".as_slice()));
            let line = split.next_line().await.unwrap();
            assert_eq!(line.as_deref(), Some(b"\xff\xfe".as_slice()));
            let (_, _sink, stream) = listener.accept().await.unwrap();
            let mut flood = LineReader::new(stream);
            assert!(matches!(flood.next_line().await, Err(LineError::TooLong)));
            let (_, _sink, stream) = listener.accept().await.unwrap();
            let mut cut = LineReader::new(stream);
            assert_eq!(
                cut.next_line().await.unwrap().as_deref(),
                Some(b"whole".as_slice())
            );
            assert!(matches!(cut.next_line().await, Err(LineError::Closed)));
            drop(resume);
            client.await.unwrap();
            // And a stream that ends between lines is a clean end.
            let client = context.clone().spawn(move |context| async move {
                let (mut sink, _stream) = context.dial(address).await.unwrap();
                sink.send(b"last\n".as_slice()).await.unwrap();
            });
            let (_, _sink, stream) = listener.accept().await.unwrap();
            let mut ended = LineReader::new(stream);
            assert_eq!(
                ended.next_line().await.unwrap().as_deref(),
                Some(b"last".as_slice())
            );
            client.await.unwrap();
            assert!(matches!(ended.next_line().await, Ok(None)));
        });
    }

    /// A client quiet for longer than the runtime's read timeout is still there: its next
    /// line arrives, rather than the reader reporting an end of stream.
    #[test]
    fn a_quiet_client_outlasts_the_read_timeout() {
        let config = runtime::Config::default().with_read_write_timeout(Duration::from_millis(50));
        runtime::Runner::new(config).start(|context| async move {
            let mut listener = context.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let address = listener.local_addr().unwrap();
            let client = context.clone().spawn(move |context| async move {
                let (mut sink, _stream) = context.dial(address).await.unwrap();
                // Quiet for several read timeouts of the server's side.
                context.sleep(Duration::from_millis(300)).await;
                sink.send(b"after a while\n".as_slice()).await.unwrap();
            });
            let (_, _sink, stream) = listener.accept().await.unwrap();
            let mut lines = LineReader::new(stream);
            let line = lines.next_line().await.unwrap();
            assert_eq!(line.as_deref(), Some(b"after a while".as_slice()));
            client.await.unwrap();
        });
    }
}
