//! The parser against whole, split, concatenated, malformed and generated frames, and the
//! encoder's frames and refusals.

use super::*;

const LIMIT: usize = 1 << 20;

fn parse_all(bytes: &[u8]) -> Result<Vec<ServerOp>, ProtocolError> {
    let parser = Parser::new(LIMIT);
    let mut buffer = BytesMut::from(bytes);
    let mut ops = Vec::new();
    while let Some(op) = parser.next(&mut buffer)? {
        ops.push(op);
    }
    assert!(buffer.is_empty(), "left unparsed: {buffer:?}");
    Ok(ops)
}

/// Feeds `bytes` in pieces cut at `cuts`, parsing after each piece.
fn parse_in_pieces(bytes: &[u8], cuts: &[usize]) -> Result<Vec<ServerOp>, ProtocolError> {
    let parser = Parser::new(LIMIT);
    let mut buffer = BytesMut::new();
    let mut ops = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        buffer.extend_from_slice(&bytes[start..cut]);
        start = cut;
        while let Some(op) = parser.next(&mut buffer)? {
            ops.push(op);
        }
    }
    assert!(buffer.is_empty(), "left unparsed: {buffer:?}");
    Ok(ops)
}

fn message(
    subject: &str,
    sid: u64,
    reply: Option<&str>,
    headers: Option<&[u8]>,
    payload: &[u8],
) -> ServerOp {
    ServerOp::Msg(Message {
        subject: subject.into(),
        sid,
        reply: reply.map(Into::into),
        headers: headers.map(Bytes::copy_from_slice),
        payload: Bytes::copy_from_slice(payload),
    })
}

const STREAM: &[u8] = b"INFO {\"server_id\":\"x\",\"max_payload\":1048576}\r\n\
    PING\r\npong\r\n+OK\r\n-ERR 'Authorization Violation'\r\n\
    MSG greet.joe 7 5\r\nhello\r\n\
    MSG\tgreet.joe  7 _INBOX.a.b 0\r\n\r\n\
    HMSG orders 3 reply.to 18 22\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\n\r\n\
    msg binary 1 4\r\n\r\n\0\xff\r\n";

fn stream_ops() -> Vec<ServerOp> {
    vec![
        ServerOp::Info("{\"server_id\":\"x\",\"max_payload\":1048576}".into()),
        ServerOp::Ping,
        ServerOp::Pong,
        ServerOp::Ok,
        ServerOp::Err("Authorization Violation".into()),
        message("greet.joe", 7, None, None, b"hello"),
        message("greet.joe", 7, Some("_INBOX.a.b"), None, b""),
        message(
            "orders",
            3,
            Some("reply.to"),
            Some(b"NATS/1.0\r\nA: b\r\n\r\n"),
            b"hi\r\n",
        ),
        message("binary", 1, None, None, b"\r\n\0\xff"),
    ]
}

#[test]
fn every_operation_parses_from_one_buffer() {
    assert_eq!(parse_all(STREAM).unwrap(), stream_ops());
}

/// Every split of the stream, at every byte, parses to the same operations: a frame is taken
/// only once its last byte is there, and nothing is consumed before.
#[test]
fn a_stream_split_at_any_byte_parses_the_same() {
    for cut in (0..=STREAM.len()).step_by(if cfg!(miri) { 7 } else { 1 }) {
        assert_eq!(
            parse_in_pieces(STREAM, &[cut]).unwrap(),
            stream_ops(),
            "split at {cut}"
        );
    }
}

#[test]
fn a_stream_fed_byte_by_byte_parses_the_same() {
    let cuts: Vec<usize> = (1..STREAM.len()).collect();
    assert_eq!(parse_in_pieces(STREAM, &cuts).unwrap(), stream_ops());
}

fn error_of(bytes: &[u8]) -> String {
    match parse_all(bytes) {
        Err(error) => error.to_string(),
        Ok(ops) => panic!("{bytes:?} parsed as {ops:?}"),
    }
}

#[test]
fn malformed_frames_are_errors_that_say_what_was_wrong() {
    let cases: &[(&[u8], &str)] = &[
        (b"HELLO\r\n", "unknown or malformed operation"),
        (b"PING extra\r\n", "unknown or malformed operation"),
        (b"MSG a\r\n", "MSG takes a subject"),
        (b"MSG a 1 b c 5\r\n", "MSG takes a subject"),
        (b"MSG a x 1\r\nz\r\n", "sid \"x\""),
        (b"MSG a 1 -1\r\n", "size \"-1\""),
        (b"MSG a 1 3\r\nabcd\r\n", "not followed by CRLF"),
        (b"HMSG a 1 9 5\r\n", "9 header bytes in a message of 5"),
        (b"HMSG a 1 5\r\n", "HMSG takes a subject"),
        (
            b"MSG a 1 2097152\r\n",
            "more than the 1048576 this client accepts",
        ),
        (
            b"HMSG a 1 12 1048577\r\n",
            "more than the 1048576 this client accepts",
        ),
        (b"\xff\xfe\r\n", "unknown or malformed operation"),
    ];
    for (bytes, expected) in cases {
        let error = error_of(bytes);
        assert!(error.contains(expected), "{bytes:?}: {error}");
    }
}

#[test]
fn a_control_line_longer_than_the_limit_is_refused_before_its_end_arrives() {
    let parser = Parser::new(LIMIT).with_max_control_line(100);
    let mut buffer = BytesMut::from(&b"MSG "[..]);
    buffer.extend_from_slice(&[b'a'; 97]);
    let error = parser.next(&mut buffer).unwrap_err().to_string();
    assert!(error.contains("longer than 100"), "{error}");
    // Ended, a line one byte too long is refused too.
    let mut line = b"INFO ".to_vec();
    line.resize(101, b'x');
    line.extend_from_slice(b"\r\n");
    let error = parser.next(&mut BytesMut::from(&line[..])).unwrap_err();
    assert!(error.to_string().contains("longer than 100"), "{error}");
}

/// A line of exactly the limit parses whole and split anywhere, its CRLF split included.
#[test]
fn a_control_line_of_exactly_the_limit_parses_split_anywhere() {
    let parser = Parser::new(LIMIT).with_max_control_line(100);
    let mut line = b"INFO ".to_vec();
    line.resize(100, b'x');
    line.extend_from_slice(b"\r\n");
    for cut in 0..=line.len() {
        let mut buffer = BytesMut::from(&line[..cut]);
        let first = parser.next(&mut buffer).unwrap();
        buffer.extend_from_slice(&line[cut..]);
        let op = match first {
            Some(op) => Some(op),
            None => parser.next(&mut buffer).unwrap(),
        };
        assert!(
            matches!(op, Some(ServerOp::Info(_))),
            "cut at {cut}: {op:?}"
        );
    }
}

/// The default limit takes what a server really sends: a `MSG` for a publish whose line filled
/// the server's own 4096-byte limit is longer than 4096 bytes.
#[test]
fn a_message_line_longer_than_the_servers_own_limit_parses() {
    let subject = "s".repeat(4090);
    let frame = format!("MSG {subject} 12345 _INBOX.reply 2\r\nhi\r\n");
    assert!(frame.len() > 4096 + 10);
    let ops = parse_all(frame.as_bytes()).unwrap();
    assert_eq!(
        ops,
        vec![message(&subject, 12345, Some("_INBOX.reply"), None, b"hi")]
    );
}

/// A subject that is not UTF-8 (the server does not check) does not break the connection.
#[test]
fn a_subject_that_is_not_utf8_arrives_with_replacement_characters() {
    let ops = parse_all(b"MSG a.\xff 1 2\r\nhi\r\nPING\r\n").unwrap();
    assert_eq!(
        ops,
        vec![message("a.\u{fffd}", 1, None, None, b"hi"), ServerOp::Ping]
    );
}

/// Sizes at the edge of `usize` are refused by the cap or waited for, never overflowed.
#[test]
fn a_size_at_the_edge_of_usize_is_refused_not_overflowed() {
    let parser = Parser::new(usize::MAX);
    let mut buffer = BytesMut::from(&b"MSG a 1 18446744073709551615\r\n"[..]);
    assert_eq!(parser.next(&mut buffer).unwrap(), None);
    let error = error_of(b"HMSG a 1 2 18446744073709551615\r\n");
    assert!(error.contains("more than the 1048576"), "{error}");
}

/// A tiny deterministic generator (xorshift), so the fuzz cases are the same every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    fn token(&mut self) -> String {
        let len = 1 + self.below(8);
        (0..len)
            .map(|_| (b'a' + self.below(26) as u8) as char)
            .collect()
    }
}

/// Encodes `op` as a server would send it.
fn server_frame(op: &ServerOp) -> Vec<u8> {
    match op {
        ServerOp::Msg(message) => {
            let mut frame = Vec::new();
            let reply = message
                .reply
                .as_ref()
                .map(|reply| format!(" {reply}"))
                .unwrap_or_default();
            let body_len = message.headers.as_ref().map_or(0, Bytes::len) + message.payload.len();
            match &message.headers {
                Some(headers) => frame.extend_from_slice(
                    format!(
                        "HMSG {} {}{reply} {} {body_len}\r\n",
                        message.subject,
                        message.sid,
                        headers.len()
                    )
                    .as_bytes(),
                ),
                None => frame.extend_from_slice(
                    format!(
                        "MSG {} {}{reply} {body_len}\r\n",
                        message.subject, message.sid
                    )
                    .as_bytes(),
                ),
            }
            frame.extend_from_slice(message.headers.as_deref().unwrap_or_default());
            frame.extend_from_slice(&message.payload);
            frame.extend_from_slice(b"\r\n");
            frame
        }
        ServerOp::Ping => b"PING\r\n".to_vec(),
        ServerOp::Pong => b"PONG\r\n".to_vec(),
        ServerOp::Ok => b"+OK\r\n".to_vec(),
        ServerOp::Err(text) => format!("-ERR '{text}'\r\n").into_bytes(),
        ServerOp::Info(json) => format!("INFO {json}\r\n").into_bytes(),
    }
}

fn random_op(random: &mut Random) -> ServerOp {
    match random.below(6) {
        0 => ServerOp::Ping,
        1 => ServerOp::Pong,
        2 => ServerOp::Err(format!("{} {}", random.token(), random.token())),
        3 if random.below(2) == 0 => ServerOp::Ok,
        3 => ServerOp::Info(format!("{{\"server_id\":\"{}\"}}", random.token())),
        _ => {
            let headers = (random.below(2) == 0).then(|| {
                let mut block =
                    format!("NATS/1.0\r\n{}: {}\r\n\r\n", random.token(), random.token());
                block.truncate(block.len());
                Bytes::from(block)
            });
            let len = random.below(300);
            let payload = Bytes::from(random.bytes(len));
            ServerOp::Msg(Message {
                subject: format!("{}.{}", random.token(), random.token()),
                sid: random.next() >> 1,
                reply: (random.below(2) == 0).then(|| random.token()),
                headers,
                payload,
            })
        }
    }
}

/// Generated streams of valid frames (binary payloads holding CRLFs included), cut at random
/// places, parse back to what was encoded.
#[test]
fn generated_streams_cut_anywhere_parse_back_to_their_operations() {
    let mut random = Random(0x9E37_79B9_7F4A_7C15);
    // Fewer under Miri, which runs each case a hundred times slower.
    for _ in 0..if cfg!(miri) { 20 } else { 300 } {
        let ops: Vec<ServerOp> = (0..1 + random.below(12))
            .map(|_| random_op(&mut random))
            .collect();
        let stream: Vec<u8> = ops.iter().flat_map(server_frame).collect();
        let mut cuts: Vec<usize> = (0..random.below(8))
            .map(|_| random.below(stream.len() + 1))
            .collect();
        cuts.sort_unstable();
        assert_eq!(parse_in_pieces(&stream, &cuts).unwrap(), ops);
    }
}

/// Garbage, and valid streams with bytes flipped, never panic the parser: each call either
/// takes a frame, waits for more, or reports an error; and it never takes more than it was
/// given.
#[test]
fn generated_garbage_is_an_error_or_a_wait_never_a_panic() {
    let mut random = Random(0xD1B5_4A32_D192_ED03);
    let parser = Parser::new(4096);
    for round in 0..if cfg!(miri) { 50 } else { 2000 } {
        let mut bytes = if round % 2 == 0 {
            let len = random.below(200);
            random.bytes(len)
        } else {
            let ops: Vec<ServerOp> = (0..1 + random.below(4))
                .map(|_| random_op(&mut random))
                .collect();
            ops.iter().flat_map(server_frame).collect()
        };
        if !bytes.is_empty() {
            for _ in 0..1 + random.below(3) {
                let at = random.below(bytes.len());
                bytes[at] = random.next() as u8;
            }
        }
        let mut buffer = BytesMut::from(&bytes[..]);
        loop {
            let before = buffer.len();
            match parser.next(&mut buffer) {
                Ok(Some(_)) => assert!(buffer.len() < before, "a frame consumed nothing"),
                Ok(None) => {
                    assert_eq!(buffer.len(), before, "a wait consumed bytes");
                    break;
                }
                Err(_) => break,
            }
        }
    }
}

fn encoded(
    f: impl FnOnce(&mut Encoder<'_>) -> Result<(), EncodeError>,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = BytesMut::new();
    f(&mut Encoder::new(&mut out))?;
    Ok(out.to_vec())
}

#[test]
fn client_frames_are_encoded_as_the_protocol_says() {
    let frames = encoded(|e| {
        e.connect("{\"verbose\":false}")?;
        e.publish("a.b", None, None, b"hi", LIMIT)?;
        e.publish("a.b", Some("_INBOX.1"), None, b"", LIMIT)?;
        e.publish("a.b", Some("r"), Some(b"NATS/1.0\r\n\r\n"), b"xyz", LIMIT)?;
        e.subscribe("a.*.>", None, 1)?;
        e.subscribe("work", Some("workers"), 2)?;
        e.unsubscribe(1, None);
        e.unsubscribe(2, Some(5));
        e.ping();
        e.pong();
        Ok(())
    })
    .unwrap();
    let expected: &[u8] = b"CONNECT {\"verbose\":false}\r\n\
        PUB a.b 2\r\nhi\r\n\
        PUB a.b _INBOX.1 0\r\n\r\n\
        HPUB a.b r 12 15\r\nNATS/1.0\r\n\r\nxyz\r\n\
        SUB a.*.> 1\r\n\
        SUB work workers 2\r\n\
        UNSUB 1\r\nUNSUB 2 5\r\n\
        PING\r\nPONG\r\n";
    assert_eq!(
        String::from_utf8_lossy(&frames),
        String::from_utf8_lossy(expected)
    );
}

#[test]
fn invalid_subjects_and_oversized_messages_are_refused_with_the_reason() {
    let cases: Vec<(Result<Vec<u8>, EncodeError>, &str)> = vec![
        (
            encoded(|e| e.publish("", None, None, b"", LIMIT)),
            "it is empty",
        ),
        (
            encoded(|e| e.publish("a b", None, None, b"", LIMIT)),
            "whitespace",
        ),
        (
            encoded(|e| e.publish("a\r\nPUB", None, None, b"", LIMIT)),
            "whitespace",
        ),
        (
            encoded(|e| e.publish("a..b", None, None, b"", LIMIT)),
            "empty token",
        ),
        (
            encoded(|e| e.publish(".a", None, None, b"", LIMIT)),
            "empty token",
        ),
        (
            encoded(|e| e.publish("a.*", None, None, b"", LIMIT)),
            "only allowed when subscribing",
        ),
        (
            encoded(|e| e.publish("a.>", None, None, b"", LIMIT)),
            "only allowed when subscribing",
        ),
        (
            encoded(|e| e.publish("a", Some("r s"), None, b"", LIMIT)),
            "invalid reply subject",
        ),
        (
            encoded(|e| e.subscribe("a.>.b", None, 1)),
            "must be the last token",
        ),
        (
            encoded(|e| e.publish("a", Some("_INBOX.*"), None, b"", LIMIT)),
            "only allowed when subscribing",
        ),
        (
            encoded(|e| e.connect("{\"pass\":\"x\r\nPUB a 1\"}")),
            "on one line",
        ),
        (encoded(|e| e.connect("")), "on one line"),
        (
            encoded(|e| e.publish("a", None, Some(b""), b"", LIMIT)),
            "invalid header block",
        ),
        (
            encoded(|e| e.publish("a", None, Some(b"HTTP/1.1\r\n\r\n"), b"", LIMIT)),
            "NATS/1.0",
        ),
        (
            encoded(|e| e.publish("a", None, Some(b"NATS/1.0\r\nno colon\r\n\r\n"), b"", LIMIT)),
            "name: value",
        ),
        (
            encoded(|e| e.publish("a", None, Some(b"NATS/1.0\r\n\r\nA: b\r\n\r\n"), b"", LIMIT)),
            "name: value",
        ),
        (
            encoded(|e| e.publish(&"s".repeat(4096), None, None, b"", LIMIT)),
            "longer than the server's 4096",
        ),
        (
            encoded(|e| e.subscribe("a", Some(""), 1)),
            "invalid queue group",
        ),
        (
            encoded(|e| e.subscribe("a", Some("g h"), 1)),
            "invalid queue group",
        ),
        (
            encoded(|e| e.publish("big", None, Some(b"NATS/1.0\r\n\r\n"), &[0; 100], 100)),
            "112 bytes to \"big\" is larger than the server's max_payload (100 bytes)",
        ),
    ];
    for (result, expected) in cases {
        let error = result.expect_err(expected).to_string();
        assert!(error.contains(expected), "{error}");
    }
    // Nothing of a refused frame is written, whichever check refuses it.
    let mut out = BytesMut::new();
    let mut encoder = Encoder::new(&mut out);
    assert!(encoder.publish("a b", None, None, b"x", LIMIT).is_err());
    assert!(
        encoder
            .publish("a", Some("r s"), None, b"x", LIMIT)
            .is_err()
    );
    assert!(encoder.publish("a", None, None, &[0; 101], 100).is_err());
    assert!(encoder.publish("a", None, Some(b"x"), b"", LIMIT).is_err());
    assert!(
        encoder
            .publish(&"s".repeat(5000), None, None, b"", LIMIT)
            .is_err()
    );
    assert!(encoder.connect("{\n}").is_err());
    assert!(out.is_empty());
    // '*' and '>' inside a longer token are literal, as the server reads them.
    assert!(encoded(|e| e.publish("a.b*.c>", None, None, b"", LIMIT)).is_ok());
}
