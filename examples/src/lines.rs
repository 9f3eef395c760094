//! Reading a line protocol from a runtime `Stream`: lines end in `\n` (a `\r` before it is
//! dropped), and a line longer than the limit is an error for that connection alone.

use runtime::Stream as _;

/// The longest line the examples accept, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// Why no line came.
#[derive(Debug)]
pub enum LineError {
    /// The line grew past [`MAX_LINE`] bytes without ending.
    TooLong,
    /// The connection failed or closed mid-line.
    Closed,
}

/// Reads lines from a stream, one byte request at a time (the stream reads ahead, so a byte
/// usually comes from its buffer, not the kernel).
pub struct LineReader {
    stream: runtime::net::Stream,
}

impl LineReader {
    pub fn new(stream: runtime::net::Stream) -> Self {
        LineReader { stream }
    }

    /// The next line without its ending, `Ok(None)` at a clean end of stream (nothing
    /// pending), or why there is none.
    pub async fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        let mut line = Vec::new();
        loop {
            let byte = match self.stream.recv(1).await {
                Ok(byte) => byte.coalesce()[0],
                // The runtime's read timeout: a quiet client is not a gone one.
                Err(runtime::Error::RecvFailed(error))
                    if error.kind() == std::io::ErrorKind::TimedOut =>
                {
                    continue;
                }
                Err(_) if line.is_empty() => return Ok(None),
                Err(_) => return Err(LineError::Closed),
            };
            if byte == b'\n' {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
            if line.len() == MAX_LINE {
                return Err(LineError::TooLong);
            }
            line.push(byte);
        }
    }
}

/// What a connection's reader task hands on.
pub enum Event {
    /// A whole line, without its ending.
    Line(Vec<u8>),
    /// A line grew past [`MAX_LINE`]; the reader stops.
    TooLong,
    /// The client closed the connection (or it failed); the reader stops.
    End,
}

/// Spawns, in `scope` (an actor's own scope, so it ends with the actor), the task that reads
/// `stream` line by line and hands each [`Event`] to `deliver`; it stops after `TooLong` or
/// `End`, or when `deliver` answers `false` (the actor is gone).
pub fn spawn_reader<F, Fut>(scope: &runtime::Context, stream: runtime::net::Stream, mut deliver: F)
where
    F: FnMut(Event) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    use runtime::Spawner as _;
    let mut lines = LineReader::new(stream);
    drop(scope.clone().spawn(move |_| async move {
        loop {
            let event = match lines.next_line().await {
                Ok(Some(line)) => Event::Line(line),
                Ok(None) | Err(LineError::Closed) => Event::End,
                Err(LineError::TooLong) => Event::TooLong,
            };
            let last = !matches!(event, Event::Line(_));
            if !deliver(event).await || last {
                return;
            }
        }
    }));
}

/// Accepts connections on `listener` and hands each to `accepted`, until the runtime is
/// asked to stop. A failing accept is reported and retried after a pause (a lasting
/// failure, such as running out of descriptors, must not spin).
pub async fn accept_until_stopped(
    context: &runtime::Context,
    listener: &mut runtime::net::Listener,
    name: &str,
    mut accepted: impl FnMut(runtime::net::Sink, runtime::net::Stream),
) {
    use futures::future::{Either, select};
    use runtime::prelude::*;
    let stopped = context.stopped();
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let result = {
            let accept = std::pin::pin!(listener.accept());
            match select(accept, stopped.as_mut()).await {
                Either::Left((result, _)) => result,
                Either::Right(_) => return,
            }
        };
        match result {
            Ok((_, sink, stream)) => accepted(sink, stream),
            Err(error) => {
                eprintln!("{name}: accept failed: {error}");
                context.sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::prelude::*;
    use std::time::Duration;

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
