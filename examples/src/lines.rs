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
