//! RESP2, the Redis protocol: a [`Decoder`] that turns the bytes a client sends into
//! commands (arrays of bulk strings, or inline commands as `redis-cli` and `telnet` send
//! them), and a [`Reply`] that encodes answers.
//!
//! Invariants:
//! - The decoder is incremental and pipelining-safe: bytes arrive in any split, and every
//!   whole command in them comes out, in order; a partial one waits for more bytes.
//! - What a client can make it hold is bounded: a bulk string is at most [`MAX_BULK`], an
//!   array at most [`MAX_ARGUMENTS`] elements and a whole command at most [`MAX_COMMAND`]
//!   (bookkeeping included), an inline command at most [`MAX_INLINE`] bytes; a declared
//!   length past a bound is refused as soon as it is read, before any of its bytes are.
//! - Each byte is looked at a bounded number of times: a line's search for its end resumes
//!   where the last one stopped, so a client sending a long line a byte at a time costs
//!   linear, not quadratic, time.
//! - A malformed frame is an [`Error`] with Redis's wording; after one the stream is out of
//!   step, so the connection answers it and closes (the decoder is not used again).

use bytes::Bytes;
use runtime::IoBufs;
use std::fmt;

/// The longest bulk string a client may send (a key or a value): 4 MiB, where Redis allows
/// 512 MB by default; a longer one is a protocol error.
pub const MAX_BULK: usize = 4 * 1024 * 1024;
/// The most elements of a command.
pub const MAX_ARGUMENTS: usize = 1024 * 1024;
/// The longest inline command (or frame header line).
pub const MAX_INLINE: usize = 64 * 1024;
/// The most a whole command may weigh: its bulk strings plus a word of bookkeeping per
/// element (what it costs to hold, whatever the client sent for it).
pub const MAX_COMMAND: usize = 64 * 1024 * 1024;
/// What holding one argument costs besides its bytes.
const PER_ARGUMENT: usize = std::mem::size_of::<Vec<u8>>();

/// A protocol error: what Redis answers (`-ERR Protocol error: ...`) before it closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

/// Where the decoder is in the command it reads.
#[derive(Debug)]
enum State {
    /// Between commands.
    Start,
    /// In an array of `remaining` more bulk strings, `weight` held so far.
    Array {
        remaining: usize,
        weight: usize,
        arguments: Vec<Vec<u8>>,
    },
    /// Reading a bulk string of `len` bytes (and its CRLF).
    Bulk {
        len: usize,
        remaining: usize,
        weight: usize,
        arguments: Vec<Vec<u8>>,
    },
}

/// Turns bytes into commands; see the module documentation.
#[derive(Debug)]
pub struct Decoder {
    buffer: Vec<u8>,
    /// Bytes of `buffer` already consumed.
    at: usize,
    /// Bytes after `at` already searched for a line's end (none there).
    scanned: usize,
    state: State,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            buffer: Vec::new(),
            at: 0,
            scanned: 0,
            state: State::Start,
        }
    }
}

impl Decoder {
    /// Adds bytes the client sent.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.at > 0 && self.at == self.buffer.len() {
            self.buffer.clear();
            self.at = 0;
        } else if self.at > 64 * 1024 && self.at * 2 > self.buffer.len() {
            // Most of the buffer is consumed: keep only what is not.
            self.buffer.drain(..self.at);
            self.at = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// Bytes received and not yet part of a command returned.
    pub fn pending(&self) -> usize {
        self.buffer.len() - self.at
    }

    /// Whether a command has begun and is not whole yet.
    pub fn is_partial(&self) -> bool {
        self.pending() > 0 || !matches!(self.state, State::Start)
    }

    /// How many more bytes the decoder can use at once: the rest of a bulk string it is
    /// reading, else one (a line's end may come at any byte).
    pub fn wanted(&self) -> usize {
        match &self.state {
            State::Bulk { len, .. } => (len + 2).saturating_sub(self.pending()).max(1),
            _ => 1,
        }
    }

    /// The next whole command, `Ok(None)` if more bytes are needed. An empty inline line
    /// is skipped, as Redis does.
    pub fn next_command(&mut self) -> Result<Option<Vec<Vec<u8>>>, Error> {
        loop {
            match std::mem::replace(&mut self.state, State::Start) {
                State::Start => {
                    let Some(&first) = self.buffer.get(self.at) else {
                        return Ok(None);
                    };
                    if first == b'*' {
                        let Some(line) = self.line()? else {
                            return Ok(None);
                        };
                        let count = parse_length(&self.buffer[line][1..])
                            .filter(|count| *count <= MAX_ARGUMENTS as i64)
                            .ok_or_else(|| Error("invalid multibulk length".into()))?;
                        if count <= 0 {
                            // `*0` and `*-1`: nothing to run; Redis reads on.
                            continue;
                        }
                        self.state = State::Array {
                            remaining: count as usize,
                            weight: 0,
                            arguments: Vec::with_capacity((count as usize).min(64)),
                        };
                    } else {
                        let Some(line) = self.line()? else {
                            return Ok(None);
                        };
                        let arguments = split_inline(&self.buffer[line])?;
                        if arguments.is_empty() {
                            continue;
                        }
                        return Ok(Some(arguments));
                    }
                }
                State::Array {
                    remaining,
                    weight,
                    arguments,
                } => {
                    if remaining == 0 {
                        return Ok(Some(arguments));
                    }
                    let Some(&first) = self.buffer.get(self.at) else {
                        self.state = State::Array {
                            remaining,
                            weight,
                            arguments,
                        };
                        return Ok(None);
                    };
                    if first != b'$' {
                        return Err(Error(format!(
                            "expected '$', got '{}'",
                            char::from(first).escape_default()
                        )));
                    }
                    let Some(line) = self.line()? else {
                        self.state = State::Array {
                            remaining,
                            weight,
                            arguments,
                        };
                        return Ok(None);
                    };
                    let len = parse_length(&self.buffer[line][1..])
                        .filter(|len| (0..=MAX_BULK as i64).contains(len))
                        .ok_or_else(|| Error("invalid bulk length".into()))?
                        as usize;
                    let weight = weight + len + PER_ARGUMENT;
                    if weight > MAX_COMMAND {
                        return Err(Error(format!(
                            "a command may weigh at most {MAX_COMMAND} bytes"
                        )));
                    }
                    self.state = State::Bulk {
                        len,
                        remaining,
                        weight,
                        arguments,
                    };
                }
                State::Bulk {
                    len,
                    remaining,
                    weight,
                    mut arguments,
                } => {
                    if self.pending() < len + 2 {
                        self.state = State::Bulk {
                            len,
                            remaining,
                            weight,
                            arguments,
                        };
                        return Ok(None);
                    }
                    let start = self.at;
                    if &self.buffer[start + len..start + len + 2] != b"\r\n" {
                        return Err(Error("expected CRLF after a bulk string".into()));
                    }
                    arguments.push(self.buffer[start..start + len].to_vec());
                    self.at = start + len + 2;
                    self.state = State::Array {
                        remaining: remaining - 1,
                        weight,
                        arguments,
                    };
                }
            }
        }
    }

    /// Where the next line is in the buffer, without its ending (`\n`, a `\r` before it
    /// dropped), if whole (no copy: a command's header lines cost no allocation); a line
    /// past `MAX_INLINE` is an error whether or not it ended.
    fn line(&mut self) -> Result<Option<std::ops::Range<usize>>, Error> {
        let rest = &self.buffer[self.at..];
        let Some(end) = rest[self.scanned..]
            .iter()
            .position(|byte| *byte == b'\n')
            .map(|end| self.scanned + end)
        else {
            self.scanned = rest.len();
            // The bound, and the `\r` that may end it.
            if rest.len() > MAX_INLINE + 1 {
                return Err(Error("too big inline request".into()));
            }
            return Ok(None);
        };
        self.scanned = 0;
        let length = if rest[..end].last() == Some(&b'\r') {
            end - 1
        } else {
            end
        };
        if length > MAX_INLINE {
            return Err(Error("too big inline request".into()));
        }
        let line = self.at..self.at + length;
        self.at += end + 1;
        Ok(Some(line))
    }
}

/// A decimal length, possibly negative, written as Redis writes one (no `+`, no leading
/// zero); `None` if it is not one.
fn parse_length(digits: &[u8]) -> Option<i64> {
    let magnitude = digits.strip_prefix(b"-").unwrap_or(digits);
    let canonical = !magnitude.is_empty()
        && magnitude.len() <= 19
        && magnitude.iter().all(u8::is_ascii_digit)
        && (magnitude == b"0" || magnitude[0] != b'0');
    if !canonical {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The arguments of an inline command, split exactly as Redis's `sdssplitargs` splits
/// them:
/// - Words are separated by C's `isspace` bytes (space, `\t`, `\n`, `\v`, `\f`, `\r`), but
///   an unquoted word ends only at a space, `\t`, `\n` or `\r` (a `\v` or `\f` inside one
///   is kept). The line is a C string to Redis: a NUL ends it.
/// - A quote opens a quoted part even in the middle of a word (`a"b c"` is `ab c`); a
///   closing quote must be followed by a separator or the end.
/// - In double quotes, `\xHH` (two hex digits) is that byte, `\n`, `\r`, `\t`, `\b`, `\a`
///   their control bytes, and `\` before anything else that byte (`\x+f` is `x+f`); in
///   single quotes only `\'` is an escape.
fn split_inline(line: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
    let unbalanced = || Error("unbalanced quotes in request".into());
    // What C sees: the line up to its first NUL.
    let line = &line[..line
        .iter()
        .position(|byte| *byte == 0)
        .unwrap_or(line.len())];
    let is_space = |byte: u8| matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    // After a closing quote: the end, or a separator.
    let closes = |at: usize| line.get(at).is_none_or(|byte| is_space(*byte));
    let hex = |byte: Option<&u8>| byte.and_then(|byte| char::from(*byte).to_digit(16));
    let mut arguments = Vec::new();
    let mut at = 0;
    loop {
        while line.get(at).is_some_and(|byte| is_space(*byte)) {
            at += 1;
        }
        if at == line.len() {
            return Ok(arguments);
        }
        let mut word = Vec::new();
        let mut quote = None;
        loop {
            let byte = line.get(at).copied();
            match (quote, byte) {
                (Some(_), None) => return Err(unbalanced()),
                (Some(b'"'), Some(b'\\')) if line.get(at + 1) == Some(&b'x') => {
                    match (hex(line.get(at + 2)), hex(line.get(at + 3))) {
                        (Some(high), Some(low)) => {
                            word.push((high * 16 + low) as u8);
                            at += 3;
                        }
                        _ => {
                            word.push(b'x');
                            at += 1;
                        }
                    }
                }
                (Some(b'"'), Some(b'\\')) if at + 1 < line.len() => {
                    at += 1;
                    word.push(match line[at] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                }
                (Some(b'\''), Some(b'\\')) if line.get(at + 1) == Some(&b'\'') => {
                    word.push(b'\'');
                    at += 1;
                }
                (Some(open), Some(byte)) if byte == open => {
                    if !closes(at + 1) {
                        return Err(unbalanced());
                    }
                    at += 1;
                    break;
                }
                (Some(_), Some(byte)) => word.push(byte),
                (None, None | Some(b' ' | b'\t' | b'\n' | b'\r')) => break,
                (None, Some(open @ (b'"' | b'\''))) => quote = Some(open),
                (None, Some(byte)) => word.push(byte),
            }
            at += 1;
        }
        arguments.push(word);
    }
}

/// An answer, encoded with [`encode`](Reply::encode) or [`encode_shared`](Reply::encode_shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`, `-WRONGTYPE ...`: the whole text after the `-`. Bytes, not text: an
    /// error may quote what the client sent, as Redis's do, byte for byte.
    Error(Vec<u8>),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`, or `$-1` for `None` (nil). The bytes may be shared with the store.
    Bulk(Option<Bytes>),
    /// `*2\r\n...`, or `*-1` for `None`.
    Array(Option<Vec<Reply>>),
}

/// Bulk strings at least this long are sent from where they are kept instead of copied.
const SHARE_FROM: usize = 16 * 1024;

/// Bytes of bulk strings an [`Encoded`] copies between two takes; past it every bulk string is
/// shared, however short, so one reply of a million values copies no more than this.
const COPY_LIMIT: usize = 256 * 1024;

/// Replies on their way out: small parts copied into one buffer, bulk strings of
/// 16 KiB or more, and every bulk string once 256 KiB of them were copied, referenced where
/// they are kept (a value shared with the store is not copied,
/// however many replies carry it).
#[derive(Default)]
pub struct Encoded {
    chunks: IoBufs,
    buffer: Vec<u8>,
    /// Bytes of bulk strings copied since the last take.
    copied: usize,
}

/// Shows how many bytes are encoded and not yet taken, not the bytes.
impl std::fmt::Debug for Encoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoded")
            .field("len", &self.len())
            .field("copied", &self.copied)
            .finish()
    }
}

impl Encoded {
    /// The bytes encoded and not yet taken.
    pub fn len(&self) -> usize {
        self.chunks.len() + self.buffer.len()
    }

    /// Whether nothing is encoded and not yet taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Everything encoded, in order, for one send.
    pub fn take(&mut self) -> IoBufs {
        self.flush();
        self.copied = 0;
        std::mem::take(&mut self.chunks)
    }

    fn flush(&mut self) {
        if !self.buffer.is_empty() {
            self.chunks.push(std::mem::take(&mut self.buffer).into());
        }
    }
}

/// Where a reply's bytes go.
trait Out {
    fn put(&mut self, bytes: &[u8]);
    fn put_value(&mut self, value: &Bytes);
}

impl Out for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn put_value(&mut self, value: &Bytes) {
        self.extend_from_slice(value);
    }
}

impl Out for Encoded {
    fn put(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    fn put_value(&mut self, value: &Bytes) {
        if value.len() < SHARE_FROM && self.copied + value.len() <= COPY_LIMIT {
            self.copied += value.len();
            self.buffer.extend_from_slice(value);
        } else {
            self.flush();
            self.chunks.push(value.clone().into());
        }
    }
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    /// `-ERR <text>`.
    pub fn error(text: impl fmt::Display) -> Reply {
        Reply::Error(format!("ERR {text}").into_bytes())
    }

    /// A bulk string.
    pub fn bulk(bytes: impl Into<Bytes>) -> Reply {
        Reply::Bulk(Some(bytes.into()))
    }

    /// Appends the reply's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.write(out);
    }

    /// Appends the reply to `out`, its large bulk strings by reference.
    pub fn encode_shared(&self, out: &mut Encoded) {
        self.write(out);
    }

    fn write(&self, out: &mut impl Out) {
        match self {
            // Simple strings and errors are one line: a line break in one would desync the
            // client, so it is replaced.
            Reply::Simple(text) => line(out, b'+', text.as_bytes()),
            Reply::Error(text) => line(out, b'-', text),
            Reply::Integer(value) => header(out, b':', *value),
            Reply::Bulk(None) => out.put(b"$-1\r\n"),
            Reply::Bulk(Some(bytes)) => {
                header(out, b'$', bytes.len() as i64);
                out.put_value(bytes);
                out.put(b"\r\n");
            }
            Reply::Array(None) => out.put(b"*-1\r\n"),
            Reply::Array(Some(items)) => {
                header(out, b'*', items.len() as i64);
                for item in items {
                    item.write(out);
                }
            }
        }
    }
}

fn line(out: &mut impl Out, kind: u8, text: &[u8]) {
    out.put(&[kind]);
    if text.iter().any(|byte| matches!(byte, b'\r' | b'\n')) {
        let text: Vec<u8> = text
            .iter()
            .map(|&byte| {
                if matches!(byte, b'\r' | b'\n') {
                    b' '
                } else {
                    byte
                }
            })
            .collect();
        out.put(&text);
    } else {
        out.put(text);
    }
    out.put(b"\r\n");
}

/// `kind`, `value` in decimal, and a line end: a length or an integer, without an allocation.
fn header(out: &mut impl Out, kind: u8, value: i64) {
    let mut digits = [0u8; 24];
    let mut at = digits.len();
    for byte in b"\r\n".iter().rev() {
        at -= 1;
        digits[at] = *byte;
    }
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        digits[at] = b'-';
    }
    at -= 1;
    digits[at] = kind;
    out.put(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(decoder: &mut Decoder) -> Vec<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        while let Some(command) = decoder.next_command().unwrap() {
            out.push(command);
        }
        out
    }

    fn words(command: &[&str]) -> Vec<Vec<u8>> {
        command
            .iter()
            .map(|word| word.as_bytes().to_vec())
            .collect()
    }

    #[test]
    fn arrays_of_bulk_strings_decode_whole_or_split_anywhere() {
        let frames = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nlf\r\n*1\r\n$4\r\nPING\r\n";
        let expected = vec![words(&["SET", "k", "v\r\nlf"]), words(&["PING"])];
        let mut whole = Decoder::default();
        whole.feed(frames);
        assert_eq!(commands(&mut whole), expected);
        assert_eq!(whole.pending(), 0);
        // Every split into two pieces, and byte by byte.
        for split in 0..frames.len() {
            let mut decoder = Decoder::default();
            decoder.feed(&frames[..split]);
            let mut got = commands(&mut decoder);
            decoder.feed(&frames[split..]);
            got.extend(commands(&mut decoder));
            assert_eq!(got, expected, "split at {split}");
        }
        let mut bytewise = Decoder::default();
        let mut got = Vec::new();
        for byte in frames {
            bytewise.feed(&[*byte]);
            got.extend(commands(&mut bytewise));
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn a_thousand_pipelined_commands_come_out_in_order() {
        let mut frames = Vec::new();
        for index in 0..1000 {
            let key = format!("key{index}");
            frames.extend_from_slice(
                format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).as_bytes(),
            );
        }
        let mut decoder = Decoder::default();
        decoder.feed(&frames);
        let got = commands(&mut decoder);
        assert_eq!(got.len(), 1000);
        for (index, command) in got.iter().enumerate() {
            assert_eq!(*command, words(&["GET", &format!("key{index}")]));
        }
    }

    #[test]
    fn inline_commands_split_words_and_quotes_as_redis_does() {
        let mut decoder = Decoder::default();
        decoder.feed(b"SET k  v\r\n\r\nPING\nSET \"a b\" \"x\\n\\x41\\\"\" 'it\\'s'\r\n");
        assert_eq!(
            commands(&mut decoder),
            vec![
                words(&["SET", "k", "v"]),
                words(&["PING"]),
                vec![
                    b"SET".to_vec(),
                    b"a b".to_vec(),
                    b"x\nA\"".to_vec(),
                    b"it's".to_vec()
                ],
            ]
        );
        let mut unbalanced = Decoder::default();
        unbalanced.feed(b"SET \"open k\r\n");
        assert_eq!(
            unbalanced.next_command(),
            Err(Error("unbalanced quotes in request".into()))
        );
        let mut glued = Decoder::default();
        glued.feed(b"SET \"a\"b v\r\n");
        assert!(glued.next_command().is_err());
    }

    /// The cases where a reading of the quoting rules differs from Redis's `sdssplitargs`
    /// (each answer checked against redis-server 7.0).
    #[test]
    fn inline_commands_split_as_sdssplitargs_does() {
        let split = |line: &[u8]| split_inline(line);
        let bytes = |words: &[&[u8]]| Ok(words.iter().map(|word| word.to_vec()).collect());
        assert_eq!(
            split(b"ECHO \"\\a\\b\\x+f\\x4g\""),
            bytes(&[b"ECHO", b"\x07\x08x+fx4g"])
        );
        // A bare `\r` separates; a `\v` inside or after a word is part of it, before one it
        // separates.
        assert_eq!(split(b"ECHO a\rb"), bytes(&[b"ECHO", b"a", b"b"]));
        assert_eq!(split(b"ECHO a\x0b"), bytes(&[b"ECHO", b"a\x0b"]));
        assert_eq!(split(b"ECHO \x0b"), bytes(&[b"ECHO"]));
        assert_eq!(split(b"ECHO \"a\"\x0b"), bytes(&[b"ECHO", b"a"]));
        // A quote inside a word opens a quoted part; a NUL ends the line.
        assert_eq!(split(b"SET a\"b c\" v"), bytes(&[b"SET", b"ab c", b"v"]));
        assert_eq!(split(b"SET k v\0 ignored"), bytes(&[b"SET", b"k", b"v"]));
        assert_eq!(split(b"ECHO '\\x41\\''"), bytes(&[b"ECHO", b"\\x41'"]));
        assert_eq!(split(b"ECHO \"\""), bytes(&[b"ECHO", b""]));
        assert!(split(b"ECHO \"a\\\"").is_err());
    }

    #[test]
    fn malformed_frames_are_errors_with_redis_wording() {
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", "invalid multibulk length"),
            (b"*2000000\r\n", "invalid multibulk length"),
            (b"*1\r\n+OK\r\n", "expected '$', got '+'"),
            (b"*1\r\n$-5\r\n", "invalid bulk length"),
            (b"*1\r\n$999999999999\r\n", "invalid bulk length"),
            (b"*1\r\n$3\r\nabcd\r\n", "expected CRLF after a bulk string"),
        ];
        for (frame, wording) in cases {
            let mut decoder = Decoder::default();
            decoder.feed(frame);
            let error = decoder.next_command().expect_err("malformed");
            assert_eq!(error.to_string(), format!("Protocol error: {wording}"));
        }
        // `*0` and `*-1` are skipped, as Redis does.
        let mut empty = Decoder::default();
        empty.feed(b"*0\r\n*-1\r\nPING\r\n");
        assert_eq!(commands(&mut empty), vec![words(&["PING"])]);
    }

    #[test]
    fn oversized_input_is_refused_before_it_is_read() {
        // Past `MAX_BULK` (a 10 MB bulk string, say) the header alone is refused; one of
        // exactly the bound is read whole.
        for len in [MAX_BULK + 1, 10 * 1024 * 1024] {
            let mut big = Decoder::default();
            big.feed(format!("*1\r\n${len}\r\n").as_bytes());
            assert_eq!(big.next_command(), Err(Error("invalid bulk length".into())));
        }
        let mut bound = Decoder::default();
        let value = vec![b'v'; MAX_BULK];
        bound.feed(format!("*1\r\n${}\r\n", value.len()).as_bytes());
        assert_eq!(bound.next_command(), Ok(None));
        bound.feed(&value);
        bound.feed(b"\r\n");
        assert_eq!(bound.next_command(), Ok(Some(vec![value])));
        // An inline line that never ends is refused once past `MAX_INLINE` (and its `\r`).
        let mut endless = Decoder::default();
        endless.feed(&vec![b'a'; MAX_INLINE + 2]);
        assert_eq!(
            endless.next_command(),
            Err(Error("too big inline request".into()))
        );
        // A line of exactly the bound, ending in CRLF, is accepted, whole or byte by byte.
        let mut line = vec![b'a'; MAX_INLINE];
        line.extend_from_slice(b"\r\n");
        let mut exact = Decoder::default();
        exact.feed(&line);
        assert_eq!(exact.next_command().unwrap().unwrap()[0].len(), MAX_INLINE);
        let mut bytewise = Decoder::default();
        let mut got = None;
        for byte in &line {
            bytewise.feed(&[*byte]);
            if let Some(command) = bytewise.next_command().unwrap() {
                got = Some(command);
            }
        }
        assert_eq!(got.unwrap()[0].len(), MAX_INLINE);
        // A command's whole weight is bounded, however its parts are sized.
        let mut heavy = Decoder::default();
        heavy.feed(b"*100\r\n");
        let bulk = vec![b'h'; MAX_BULK];
        let mut refused = None;
        for _ in 0..100 {
            heavy.feed(format!("${}\r\n", bulk.len()).as_bytes());
            heavy.feed(&bulk);
            heavy.feed(b"\r\n");
            if let Err(error) = heavy.next_command() {
                refused = Some(error);
                break;
            }
        }
        assert_eq!(
            refused,
            Some(Error(format!(
                "a command may weigh at most {MAX_COMMAND} bytes"
            )))
        );
        // Lengths are written as Redis writes them.
        for bad in [&b"*+1\r\n"[..], b"*01\r\n", b"*\r\n", b"*1 \r\n"] {
            let mut decoder = Decoder::default();
            decoder.feed(bad);
            assert!(decoder.next_command().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn replies_encode_as_resp2() {
        let mut out = Vec::new();
        Reply::ok().encode(&mut out);
        Reply::error("unknown command 'FOO'").encode(&mut out);
        Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
            .encode(&mut out);
        Reply::Integer(-3).encode(&mut out);
        Reply::bulk(b"a\r\nb".to_vec()).encode(&mut out);
        Reply::Bulk(None).encode(&mut out);
        Reply::Array(Some(vec![Reply::Integer(1), Reply::Bulk(None)])).encode(&mut out);
        Reply::Array(None).encode(&mut out);
        Reply::Simple("two\r\nlines".into()).encode(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "+OK\r\n-ERR unknown command 'FOO'\r\n-WRONGTYPE Operation against a key holding \
             the wrong kind of value\r\n:-3\r\n$4\r\na\r\nb\r\n$-1\r\n*2\r\n:1\r\n$-1\r\n*-1\r\n\
             +two  lines\r\n"
        );
    }

    #[test]
    fn shared_encoding_is_the_same_bytes_and_references_large_values() {
        let large = Bytes::from(vec![b'v'; SHARE_FROM]);
        let replies = [
            Reply::ok(),
            Reply::Integer(i64::MIN),
            Reply::Integer(0),
            Reply::bulk(b"small".to_vec()),
            Reply::Bulk(Some(large.clone())),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(large.clone())),
                Reply::Bulk(None),
            ])),
        ];
        let (mut copied, mut shared) = (Vec::new(), Encoded::default());
        for reply in &replies {
            reply.encode(&mut copied);
            reply.encode_shared(&mut shared);
        }
        assert_eq!(shared.len(), copied.len());
        let sent = shared.take();
        assert!(shared.is_empty());
        assert_eq!(sent.clone().coalesce().as_ref(), &copied[..]);
        // Each large value is sent from the store's own bytes, not a copy of them.
        let referenced = sent
            .chunks()
            .iter()
            .filter(|chunk| chunk.as_ptr() == large.as_ptr())
            .count();
        assert_eq!(referenced, 2);
        assert!(
            String::from_utf8(copied)
                .unwrap()
                .starts_with("+OK\r\n:-9223372036854775808\r\n:0\r\n$5\r\nsmall\r\n")
        );
    }

    #[test]
    fn one_reply_of_many_values_copies_at_most_the_copy_limit() {
        let value = Bytes::from(vec![b'v'; SHARE_FROM - 1]);
        let count = 4 * COPY_LIMIT / value.len();
        let reply = Reply::Array(Some(vec![Reply::Bulk(Some(value.clone())); count]));
        let mut shared = Encoded::default();
        reply.encode_shared(&mut shared);
        let sent = shared.take();
        let referenced = sent
            .chunks()
            .iter()
            .filter(|chunk| chunk.as_ptr() == value.as_ptr())
            .count();
        let copied = count - referenced;
        assert!(copied * value.len() <= COPY_LIMIT, "{copied} values copied");
        assert!(referenced > 0);
        let mut copy = Vec::new();
        reply.encode(&mut copy);
        assert_eq!(sent.coalesce().as_ref(), &copy[..]);
    }
}
