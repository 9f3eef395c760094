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
