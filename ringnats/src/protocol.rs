//! The NATS client protocol as bytes: what a server sends, parsed from a buffer that may hold
//! part of a frame or several frames, and what a client sends, encoded after validation.
//!
//! Invariants:
//! - [`Parser::next`] consumes exactly one whole frame from the front of the buffer, or nothing:
//!   a frame split anywhere parses the same once its last byte has arrived, and bytes after it
//!   stay for the next call.
//! - Nothing a server sends makes the parser panic or allocate without bound: a control line
//!   longer than the parser's limit ([`DEFAULT_MAX_CONTROL_LINE`] unless set), a message larger
//!   than its memory cap, or any malformed frame is a [`ProtocolError`] that names what was
//!   wrong (after which the connection must be dropped: the stream's framing is lost). The
//!   server limits only what clients send, so the parser's limits are generous.
//! - Subjects that are not UTF-8 (the server does not check) do not break the connection: they
//!   arrive with U+FFFD in place of their invalid bytes (such a reply subject cannot be
//!   answered).
//! - The encoder never writes a frame the server or another client would misread: subjects,
//!   reply subjects and queue groups are checked (non-empty, no whitespace or control
//!   characters, no empty token; wildcards only where subscribing allows them), a header block
//!   must be a well-formed `NATS/1.0` block, `CONNECT`'s JSON must be one line, and a control
//!   line must fit the server's default limit ([`MAX_CONTROL_LINE_OUT`]). What fails a check is
//!   an [`EncodeError`] and writes nothing.
//!
//! The grammar (from the NATS client protocol documentation): a control line is an op name
//! (case-insensitive) and arguments separated by spaces or tabs, ended by `\r\n`; `MSG` and
//! `HMSG` are followed by their payload (headers first for `HMSG`) and another `\r\n`.

use bytes::{Buf, Bytes, BytesMut};
use std::fmt;

/// The longest control line the parser accepts by default. A server delivers lines longer than
/// its own `max_control_line` (4096 by default, which it applies to what clients send): a
/// `MSG` adds the sid to a subject and reply that filled a client's line, and an `INFO` lists
/// every server of a cluster.
pub const DEFAULT_MAX_CONTROL_LINE: usize = 64 * 1024;

/// The longest control line the encoder writes: the server's default `max_control_line`, past
/// which it closes the connection.
pub const MAX_CONTROL_LINE_OUT: usize = 4096;

/// What a server sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerOp {
    /// `INFO`: the server's description, a JSON object (kept as text).
    Info(String),
    /// `MSG` or `HMSG`: a message for subscription `sid`.
    Msg(Message),
    /// `PING`: the server asks for a `PONG`.
    Ping,
    /// `PONG`: the answer to the oldest `PING` this client sent.
    Pong,
    /// `+OK` (only in verbose mode).
    Ok,
    /// `-ERR`: the server's error text, without its quotes.
    Err(String),
}

/// A delivered message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The subject it was published to.
    pub subject: String,
    /// The id of the subscription it was delivered to.
    pub sid: u64,
    /// The subject to reply to, if the publisher gave one.
    pub reply: Option<String>,
    /// The header block of an `HMSG` (from `NATS/1.0` through its blank line), else `None`.
    pub headers: Option<Bytes>,
    /// The message's bytes.
    pub payload: Bytes,
}

/// A frame the server sent that does not follow the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NATS protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn protocol_error(what: impl Into<String>) -> ProtocolError {
    ProtocolError(what.into())
}

/// Parses server frames from the front of a buffer.
#[derive(Clone, Debug)]
pub struct Parser {
    max_payload: usize,
    max_control_line: usize,
}

impl Parser {
    /// A parser that refuses messages (headers and payload together) larger than
    /// `max_payload` bytes. This is a memory cap, not the server's `max_payload`: the server
    /// does not check what it delivers, adds headers of its own, and a user's limit may be
    /// below another publisher's. Give it room beyond the largest message expected.
    pub fn new(max_payload: usize) -> Self {
        Self {
            max_payload,
            max_control_line: DEFAULT_MAX_CONTROL_LINE,
        }
    }

    /// The same with a control-line limit other than [`DEFAULT_MAX_CONTROL_LINE`].
    pub fn with_max_control_line(mut self, max_control_line: usize) -> Self {
        self.max_control_line = max_control_line;
        self
    }

    /// Takes the first whole frame off `buffer`: `Ok(None)` if it is not whole yet (nothing is
    /// consumed), an error if the bytes are not a frame.
    pub fn next(&self, buffer: &mut BytesMut) -> Result<Option<ServerOp>, ProtocolError> {
        let limit = self.max_control_line;
        // The line and its CRLF are looked for within the limit only.
        let scanned = &buffer[..buffer.len().min(limit + 2)];
        let Some(line_end) = find_crlf(scanned) else {
            // Up to the limit plus the CR of a CRLF whose LF has not arrived is a wait.
            let waiting =
                buffer.len() <= limit || (buffer.len() == limit + 1 && buffer[limit] == b'\r');
            if waiting {
                return Ok(None);
            }
            return Err(protocol_error(format!(
                "a control line longer than {limit} bytes"
            )));
        };
        let line = String::from_utf8_lossy(&buffer[..line_end]);
        let (op, rest) = split_op(&line);
        let op = op.to_ascii_uppercase();
        let parsed = match op.as_str() {
            "MSG" | "HMSG" => {
                let head = MessageHead::parse(&op, rest, self.max_payload)?;
                let frame = head.total.saturating_add(line_end + 4);
                if buffer.len() < frame {
                    return Ok(None);
                }
                if &buffer[frame - 2..frame] != b"\r\n" {
                    return Err(protocol_error(format!(
                        "{op} on {:?}: its {} bytes are not followed by CRLF",
                        truncated(&head.subject),
                        head.total
                    )));
                }
                buffer.advance(line_end + 2);
                let mut body = buffer.split_to(head.total).freeze();
                buffer.advance(2);
                let headers = head.headers.map(|len| body.split_to(len));
                return Ok(Some(ServerOp::Msg(Message {
                    subject: head.subject,
                    sid: head.sid,
                    reply: head.reply,
                    headers,
                    payload: body,
                })));
            }
            "PING" if rest.trim().is_empty() => ServerOp::Ping,
            "PONG" if rest.trim().is_empty() => ServerOp::Pong,
            "+OK" if rest.trim().is_empty() => ServerOp::Ok,
            "INFO" => ServerOp::Info(rest.trim().to_string()),
            "-ERR" => ServerOp::Err(unquote(rest.trim()).to_string()),
            _ => {
                return Err(protocol_error(format!(
                    "an unknown or malformed operation: {:?}",
                    truncated(&line)
                )));
            }
        };
        buffer.advance(line_end + 2);
        Ok(Some(parsed))
    }
}

/// The control line of a `MSG` or `HMSG`.
struct MessageHead {
    subject: String,
    sid: u64,
    reply: Option<String>,
    /// Header bytes (`HMSG` only).
    headers: Option<usize>,
    /// Header and payload bytes together.
    total: usize,
}

impl MessageHead {
    fn parse(op: &str, rest: &str, max_payload: usize) -> Result<Self, ProtocolError> {
        let args: Vec<&str> = rest.split([' ', '\t']).filter(|a| !a.is_empty()).collect();
        let with_headers = op == "HMSG";
        let counts = if with_headers { 2 } else { 1 };
        let (subject, sid, reply, sizes) = match args.len() - counts.min(args.len()) {
            2 => (args[0], args[1], None, &args[2..]),
            3 => (args[0], args[1], Some(args[2]), &args[3..]),
            _ => {
                return Err(protocol_error(format!(
                    "{op} takes a subject, a sid, an optional reply subject and {}; got {:?}",
                    if with_headers { "two sizes" } else { "a size" },
                    truncated(rest)
                )));
            }
        };
        let number = |text: &str, what: &str| {
            text.parse::<usize>()
                .map_err(|_| protocol_error(format!("{op} on {subject:?}: {what} {text:?}")))
        };
        let sid = sid
            .parse::<u64>()
            .map_err(|_| protocol_error(format!("{op} on {subject:?}: sid {sid:?}")))?;
        let (headers, total) = if with_headers {
            let headers = number(sizes[0], "header size")?;
            let total = number(sizes[1], "total size")?;
            if headers > total {
                return Err(protocol_error(format!(
                    "{op} on {subject:?}: {headers} header bytes in a message of {total}"
                )));
            }
            (Some(headers), total)
        } else {
            (None, number(sizes[0], "size")?)
        };
        if total > max_payload {
            return Err(protocol_error(format!(
                "{op} on {subject:?}: {total} bytes, more than the {max_payload} this client accepts"
            )));
        }
        Ok(Self {
            subject: subject.to_string(),
            sid,
            reply: reply.map(str::to_string),
            headers,
            total,
        })
    }
}

/// The index of the first `\r\n` in `bytes`.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|pair| pair == b"\r\n")
}

/// The op name and what follows it.
fn split_op(line: &str) -> (&str, &str) {
    match line.find([' ', '\t']) {
        Some(at) => (&line[..at], &line[at + 1..]),
        None => (line, ""),
    }
}

/// `-ERR`'s text without the single quotes around it.
fn unquote(text: &str) -> &str {
    text.strip_prefix('\'')
        .and_then(|inner| inner.strip_suffix('\''))
        .unwrap_or(text)
}

/// At most 80 characters of `text`, for error messages.
fn truncated(text: &str) -> &str {
    match text.char_indices().nth(80) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// A client frame that cannot be encoded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeError(String);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncodeError {}

/// Where a subject is used, which decides whether wildcards are allowed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    Publish,
    Subscribe,
}

/// Checks a subject as the server does: dot-separated tokens, none empty, no whitespace or
/// control characters. A token that is exactly `*`, or exactly `>` as the last token, is a
/// wildcard, allowed only when subscribing; `*` and `>` inside a longer token are literal.
fn check_subject(subject: &str, what: &str, usage: Use) -> Result<(), EncodeError> {
    let invalid = |why: &str| {
        Err(EncodeError(format!(
            "invalid {what} {:?}: {why}",
            truncated(subject)
        )))
    };
    if subject.is_empty() {
        return invalid("it is empty");
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return invalid("it contains whitespace or a control character");
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (index, token) in tokens.iter().enumerate() {
        if token.is_empty() {
            return invalid("it has an empty token (a leading, trailing or doubled '.')");
        }
        if *token == ">" && index != tokens.len() - 1 {
            return invalid("the '>' wildcard must be the last token");
        }
        let wildcard = *token == "*" || *token == ">";
        if wildcard && usage == Use::Publish {
            return invalid("wildcards ('*', '>') are only allowed when subscribing");
        }
    }
    Ok(())
}

/// Checks a queue group name: non-empty, no whitespace or control characters.
fn check_queue_group(group: &str) -> Result<(), EncodeError> {
    if group.is_empty() || group.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(EncodeError(format!(
            "invalid queue group {:?}: it must be non-empty, without whitespace",
            truncated(group)
        )));
    }
    Ok(())
}

/// Checks an `HPUB` header block: `NATS/1.0` (with an optional status) on its first line,
/// `name: value` lines after it, and one blank line ending it. Other clients drop their
/// connection on a block they cannot parse, so a malformed one must not go out.
fn check_headers(block: &[u8]) -> Result<(), EncodeError> {
    let invalid = |why: &str| Err(EncodeError(format!("invalid header block: {why}")));
    let Some(body) = block.strip_suffix(b"\r\n\r\n") else {
        return invalid("it must end with an empty line (\"\\r\\n\\r\\n\")");
    };
    let Ok(body) = std::str::from_utf8(body) else {
        return invalid("it is not UTF-8");
    };
    let mut lines = body.split("\r\n");
    let first = lines.next().unwrap_or_default();
    if !first.starts_with("NATS/1.0") {
        return invalid("its first line must be \"NATS/1.0\"");
    }
    for line in lines {
        let Some((name, _)) = line.split_once(':') else {
            return invalid("every header line must be \"name: value\"");
        };
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return invalid("a header name must be non-empty, without whitespace");
        }
        if line.chars().any(|c| c.is_control()) {
            return invalid("a header line must not hold control characters");
        }
    }
    Ok(())
}

/// Appends client frames to a buffer, so that several go out in one send.
pub struct Encoder<'a> {
    out: &'a mut BytesMut,
}

/// Shows how many bytes the buffer holds, not the bytes.
impl std::fmt::Debug for Encoder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("buffered", &self.out.len())
            .finish()
    }
}

impl<'a> Encoder<'a> {
    /// An encoder appending to `out`.
    pub fn new(out: &'a mut BytesMut) -> Self {
        Self { out }
    }

    /// `CONNECT` with `options`, a JSON object on one line (no control characters: a raw line
    /// break would end the frame early and let the rest be read as commands).
    pub fn connect(&mut self, options: &str) -> Result<(), EncodeError> {
        if options.is_empty() || options.chars().any(char::is_control) {
            return Err(EncodeError(
                "CONNECT options must be a JSON object on one line, without control characters"
                    .into(),
            ));
        }
        // The server reads CONNECT whole whatever its length.
        self.write_line(&["CONNECT", options]);
        Ok(())
    }

    /// `PUB`, or `HPUB` when `headers` is given (a header block starting `NATS/1.0\r\n` and
    /// ending with a blank line). The sizes are checked against `max_payload`, the server's
    /// limit, before anything is written.
    pub fn publish(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
        max_payload: usize,
    ) -> Result<(), EncodeError> {
        check_subject(subject, "subject", Use::Publish)?;
        if let Some(reply) = reply {
            check_subject(reply, "reply subject", Use::Publish)?;
        }
        if let Some(headers) = headers {
            check_headers(headers)?;
        }
        let header_len = headers.map_or(0, <[u8]>::len);
        let total = header_len + payload.len();
        if total > max_payload {
            return Err(EncodeError(format!(
                "a message of {total} bytes to {:?} is larger than the server's max_payload \
                 ({max_payload} bytes)",
                truncated(subject)
            )));
        }
        let total = total.to_string();
        let header_len = header_len.to_string();
        let mut line = vec![if headers.is_some() { "HPUB" } else { "PUB" }, subject];
        line.extend(reply);
        if headers.is_some() {
            line.push(&header_len);
        }
        line.push(&total);
        self.line(&line)?;
        if let Some(headers) = headers {
            self.out.extend_from_slice(headers);
        }
        self.out.extend_from_slice(payload);
        self.out.extend_from_slice(b"\r\n");
        Ok(())
    }

    /// `SUB` to `subject` (wildcards allowed), in `queue_group` if given.
    pub fn subscribe(
        &mut self,
        subject: &str,
        queue_group: Option<&str>,
        sid: u64,
    ) -> Result<(), EncodeError> {
        check_subject(subject, "subject", Use::Subscribe)?;
        if let Some(group) = queue_group {
            check_queue_group(group)?;
        }
        let sid = sid.to_string();
        let mut line = vec!["SUB", subject];
        line.extend(queue_group);
        line.push(&sid);
        self.line(&line)
    }

    /// `UNSUB`, at once or after `after` more messages.
    pub fn unsubscribe(&mut self, sid: u64, after: Option<u64>) {
        let sid = sid.to_string();
        let after = after.map(|after| after.to_string());
        let mut line = vec!["UNSUB", sid.as_str()];
        line.extend(after.as_deref());
        self.write_line(&line);
    }

    /// Appends `PING`.
    pub fn ping(&mut self) {
        self.write_line(&["PING"]);
    }

    /// Appends `PONG`.
    pub fn pong(&mut self) {
        self.write_line(&["PONG"]);
    }

    /// Writes a control line that must fit [`MAX_CONTROL_LINE_OUT`].
    fn line(&mut self, words: &[&str]) -> Result<(), EncodeError> {
        let len = words.iter().map(|word| word.len() + 1).sum::<usize>() - 1;
        if len > MAX_CONTROL_LINE_OUT {
            return Err(EncodeError(format!(
                "a {} line of {len} bytes is longer than the server's {MAX_CONTROL_LINE_OUT}",
                words[0]
            )));
        }
        self.write_line(words);
        Ok(())
    }

    fn write_line(&mut self, words: &[&str]) {
        for (index, word) in words.iter().enumerate() {
            if index > 0 {
                self.out.extend_from_slice(b" ");
            }
            self.out.extend_from_slice(word.as_bytes());
        }
        self.out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests;
