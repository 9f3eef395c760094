//! A connection's handshake: dial a server, read its `INFO`, write `CONNECT` (JSON both, with
//! serde_json) and wait for the `PONG` that answers the `PING` sent after it.
//!
//! Invariants:
//! - A connection is handed on only after the server answered the handshake's `PING` with
//!   `PONG`, which it does only once it accepted `CONNECT`: so credentials the server
//!   refuses are an [`Error::Authorization`], never a connection that dies later.
//! - Bytes the handshake read past its `PONG` travel with the connection
//!   ([`Established::buffer`]), so nothing the server sent right after is lost.
//! - Nothing here knows the client's state: what a handshake needs comes in as options and a
//!   server address, and what it learnt goes out as an [`Established`].

use crate::Error;
use crate::options::{Options, ServerAddress};
use crate::protocol::{Encoder, Parser, ServerOp};
use bytes::BytesMut;
use runtime::net::{Sink, Stream};
use runtime::prelude::*;
use runtime::{Context, IoBuf};
use serde::{Deserialize, Serialize};
use serde_json::ser::Formatter;
use std::io;
use std::net::{IpAddr, SocketAddr};

/// The most one receive asks for.
pub(crate) const RECEIVE: usize = 64 * 1024;

/// What the server's `INFO` said that the client uses. Members it omits keep the defaults
/// below; members this client does not use are ignored.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub(crate) struct ServerInfo {
    pub(crate) max_payload: usize,
    pub(crate) headers: bool,
    pub(crate) connect_urls: Vec<String>,
    #[serde(rename = "ldm")]
    pub(crate) lame_duck: bool,
    pub(crate) tls_required: bool,
}

impl Default for ServerInfo {
    fn default() -> Self {
        Self {
            // The server's default, until a server says otherwise.
            max_payload: 1 << 20,
            headers: false,
            connect_urls: Vec::new(),
            lame_duck: false,
            tls_required: false,
        }
    }
}

impl ServerInfo {
    /// Reads an `INFO` object: text that is not JSON, or a member this client uses holding
    /// the wrong type (a `max_payload` that is not a size, say), is an [`Error::Protocol`].
    pub(crate) fn parse(text: &str) -> Result<Self, Error> {
        serde_json::from_str(text).map_err(|error| {
            Error::Protocol(if error.is_data() {
                format!("the server's INFO is not what this client expects: {error}")
            } else {
                format!("the server's INFO is not JSON: {error}")
            })
        })
    }
}

/// A connection that completed its handshake.
pub(crate) struct Established {
    pub(crate) server: ServerAddress,
    pub(crate) info: ServerInfo,
    pub(crate) sink: Sink,
    pub(crate) stream: Stream,
    /// Bytes read past the handshake's `PONG`.
    pub(crate) buffer: BytesMut,
}

/// Classifies a `-ERR` that ended a handshake.
fn refused(text: String) -> Error {
    let lower = text.to_ascii_lowercase();
    if lower.contains("authorization") || lower.contains("authentication") {
        Error::Authorization(text)
    } else {
        Error::Protocol(format!("the server refused the connection: {text}"))
    }
}

/// The `CONNECT` options, in the order the members are written. Credentials the client has
/// none of are left out.
#[derive(Serialize)]
struct Connect<'a> {
    verbose: bool,
    pedantic: bool,
    lang: &'static str,
    version: &'static str,
    protocol: u8,
    echo: bool,
    headers: bool,
    no_responders: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(rename = "pass", skip_serializing_if = "Option::is_none")]
    password: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_token: Option<&'a str>,
}

/// serde_json's compact output, with every control character escaped: serde_json escapes
/// those below U+0020 (line breaks among them) but writes DEL and the C1 range raw, which
/// `Encoder::connect` refuses, so a client name holding one would fail every handshake. The
/// Unicode line separators are escaped too, for readers that end lines at them.
struct OneLine;

impl Formatter for OneLine {
    fn write_string_fragment<W>(&mut self, writer: &mut W, fragment: &str) -> io::Result<()>
    where
        W: ?Sized + io::Write,
    {
        let mut from = 0;
        for (at, c) in fragment.char_indices() {
            if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                writer.write_all(&fragment.as_bytes()[from..at])?;
                // All of these are below U+10000, so four hex digits hold them.
                write!(writer, "\\u{:04x}", u32::from(c))?;
                from = at + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[from..])
    }
}

/// The `CONNECT` options: credentials from the server's URL, else from the options.
fn connect_json(options: &Options, server: &ServerAddress, info: &ServerInfo) -> String {
    let user = match (&server.user, &server.password) {
        (Some(user), Some(password)) => Some((user.as_str(), password.as_str())),
        _ if server.token.is_some() => None,
        _ => options
            .user
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_str())),
    };
    let auth_token = match user {
        Some(_) => None,
        None => server.token.as_deref().or(options.token.as_deref()),
    };
    let connect = Connect {
        verbose: false,
        pedantic: false,
        lang: "rust",
        version: env!("CARGO_PKG_VERSION"),
        protocol: 1,
        echo: true,
        // "No responders" replies need headers; a server before 2.2 has neither.
        headers: info.headers,
        no_responders: info.headers,
        name: options.name.as_deref(),
        user: user.map(|(user, _)| user),
        password: user.map(|(_, password)| password),
        auth_token,
    };
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, OneLine);
    connect
        .serialize(&mut serializer)
        .expect("strings and booleans always serialize, and a Vec takes every write");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Reads the next whole frame of the handshake.
async fn read_frame(
    stream: &mut Stream,
    parser: &Parser,
    buffer: &mut BytesMut,
) -> Result<ServerOp, Error> {
    loop {
        match parser.next(buffer) {
            Ok(Some(op)) => return Ok(op),
            Ok(None) => {}
            Err(error) => return Err(Error::Protocol(error.to_string())),
        }
        let received = stream
            .recv_some(RECEIVE)
            .await
            .map_err(|error| Error::Unreachable(vec![format!("during the handshake: {error}")]))?;
        for chunk in received.chunks() {
            buffer.extend_from_slice(chunk);
        }
    }
}

/// Dials `server` (each address its name resolves to, in order) and completes the handshake.
async fn handshake(
    context: &Context,
    options: &Options,
    server: &ServerAddress,
) -> Result<Established, Error> {
    let addresses = match server.host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => context
            .resolve(&server.host)
            .await
            .map_err(|error| Error::Unreachable(vec![format!("{server}: {error}")]))?,
    };
    let mut failures = Vec::new();
    let mut connection = None;
    for ip in addresses {
        match context.dial(SocketAddr::new(ip, server.port)).await {
            Ok(halves) => {
                connection = Some(halves);
                break;
            }
            Err(error) => failures.push(format!("{server}: {error}")),
        }
    }
    let Some((mut sink, mut stream)) = connection else {
        return Err(Error::Unreachable(failures));
    };
    let parser = Parser::new(options.max_message);
    let mut buffer = BytesMut::with_capacity(RECEIVE);
    let mut info = match read_frame(&mut stream, &parser, &mut buffer).await? {
        ServerOp::Info(text) => ServerInfo::parse(&text)?,
        other => {
            return Err(Error::Protocol(format!(
                "{server} sent {other:?} before INFO: is it a NATS server?"
            )));
        }
    };
    if info.tls_required {
        return Err(Error::InvalidOptions(format!(
            "{server} requires TLS, which this client does not speak; put a TLS-terminating \
             proxy in front or allow plain connections"
        )));
    }
    let mut out = BytesMut::new();
    let mut encoder = Encoder::new(&mut out);
    encoder.connect(&connect_json(options, server, &info))?;
    encoder.ping();
    let send_failed =
        |error: runtime::Error| Error::Unreachable(vec![format!("{server}: {error}")]);
    sink.send(IoBuf::from(out.freeze()))
        .await
        .map_err(send_failed)?;
    loop {
        match read_frame(&mut stream, &parser, &mut buffer).await? {
            ServerOp::Pong => break,
            ServerOp::Ok => {}
            ServerOp::Info(text) => info = ServerInfo::parse(&text)?,
            ServerOp::Ping => {
                sink.send(IoBuf::from(&b"PONG\r\n"[..]))
                    .await
                    .map_err(send_failed)?;
            }
            ServerOp::Err(text) => return Err(refused(text)),
            ServerOp::Msg(_) => {
                return Err(Error::Protocol(format!(
                    "{server} sent a message before the handshake ended"
                )));
            }
        }
    }
    Ok(Established {
        server: server.clone(),
        info,
        sink,
        stream,
        buffer,
    })
}

/// [`handshake`] within the connect timeout.
pub(crate) async fn establish(
    context: &Context,
    options: &Options,
    server: &ServerAddress,
) -> Result<Established, Error> {
    let timeout = options.connect_timeout;
    match context
        .timeout(timeout, handshake(context, options, server))
        .await
    {
        Ok(result) => result,
        Err(_) => Err(Error::Unreachable(vec![format!(
            "{server}: no handshake within {timeout:?}"
        )])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn info_is_read_with_defaults_for_what_it_omits() {
        let info = ServerInfo::parse(
            r#"{"server_id":"X","max_payload":4096,"headers":true,"connect_urls":["a:1"],"ldm":true}"#,
        )
        .unwrap();
        assert_eq!(info.max_payload, 4096);
        assert!(info.headers && info.lame_duck && !info.tls_required);
        assert_eq!(info.connect_urls, ["a:1"]);
        let info = ServerInfo::parse("{}").unwrap();
        assert_eq!(info.max_payload, 1 << 20);
        assert!(ServerInfo::parse("{nope").is_err());
    }

    /// Members this client does not read, of any type and nesting, are ignored: a newer
    /// server's `INFO` still connects.
    #[test]
    fn info_members_the_client_does_not_use_are_ignored() {
        let info = ServerInfo::parse(
            r#"{"server_id":"NAB","version":"2.10.0","port":4222,"headers":true,
            "max_payload":4096,"auth_required":true,"connect_urls":["10.0.0.1:4222","[::1]:4223"],
            "nonce":null,"ratio":-1.5e2,"nested":{"a":[1,{"b":"\u00e9\ud83d\ude00\n"}]},
            "some_future_flag":true}"#,
        )
        .unwrap();
        assert_eq!(info.max_payload, 4096);
        assert!(info.headers && !info.lame_duck && !info.tls_required);
        assert_eq!(info.connect_urls, ["10.0.0.1:4222", "[::1]:4223"]);
    }

    /// A member the client reads that holds the wrong type is a protocol error saying the
    /// `INFO` is not what this client expects (and what was expected), not a silent default;
    /// text that is not JSON says so instead.
    #[test]
    fn info_with_a_wrong_typed_member_is_a_protocol_error_that_says_so() {
        for text in [
            r#"{"max_payload":"big"}"#,
            r#"{"max_payload":-1}"#,
            r#"{"headers":"yes"}"#,
            r#"{"connect_urls":"a:1"}"#,
            r#"{"connect_urls":[1]}"#,
            r#"{"ldm":null}"#,
        ] {
            let Err(Error::Protocol(why)) = ServerInfo::parse(text) else {
                panic!("{text}: not a protocol error");
            };
            assert!(
                why.contains("the server's INFO is not what this client expects")
                    && why.contains("expected"),
                "{text}: {why}"
            );
        }
        let Err(Error::Protocol(why)) = ServerInfo::parse("{nope") else {
            panic!("not a protocol error");
        };
        assert!(why.contains("the server's INFO is not JSON"), "{why}");
    }

    #[test]
    fn connect_carries_the_url_credentials_before_the_options_and_escapes_them() {
        let info = ServerInfo {
            headers: true,
            ..ServerInfo::default()
        };
        let options = Options::new(["nats://a"])
            .unwrap()
            .with_user("opt", "x")
            .with_name("node \"1\"\n");
        let server = ServerAddress::parse("nats://u:p\"w@h:1").unwrap();
        let text = connect_json(&options, &server, &info);
        let value = serde_json::from_str::<Value>(&text).unwrap();
        assert_eq!(value.get("user").and_then(Value::as_str), Some("u"));
        assert_eq!(value.get("pass").and_then(Value::as_str), Some("p\"w"));
        assert_eq!(
            value.get("name").and_then(Value::as_str),
            Some("node \"1\"\n")
        );
        assert_eq!(
            value.get("no_responders").and_then(Value::as_bool),
            Some(true)
        );
        assert!(!text.chars().any(char::is_control));
        let plain = ServerAddress::parse("h").unwrap();
        let value = serde_json::from_str::<Value>(&connect_json(&options, &plain, &info)).unwrap();
        assert_eq!(value.get("user").and_then(Value::as_str), Some("opt"));
        let token = ServerAddress::parse("tok@h").unwrap();
        let value = serde_json::from_str::<Value>(&connect_json(&options, &token, &info)).unwrap();
        assert_eq!(value.get("auth_token").and_then(Value::as_str), Some("tok"));
        assert_eq!(value.get("user"), None);
    }

    /// Without a name or credentials, `CONNECT` holds exactly the members the client always
    /// sends, in this order, with `headers` and `no_responders` as the server's `headers`.
    #[test]
    fn connect_without_name_or_credentials_holds_only_the_fixed_members() {
        let options = Options::new(["nats://a"]).unwrap();
        let server = ServerAddress::parse("h").unwrap();
        for headers in [false, true] {
            let info = ServerInfo {
                headers,
                ..ServerInfo::default()
            };
            assert_eq!(
                connect_json(&options, &server, &info),
                format!(
                    r#"{{"verbose":false,"pedantic":false,"lang":"rust","version":"{}","protocol":1,"echo":true,"headers":{headers},"no_responders":{headers}}}"#,
                    env!("CARGO_PKG_VERSION")
                )
            );
        }
    }

    /// Any name reads back the same from `CONNECT`, which holds no control character (so
    /// the encoder takes it), DEL and the C1 range included.
    #[test]
    fn connect_reads_back_any_name_and_holds_no_control_characters() {
        let server = ServerAddress::parse("h").unwrap();
        for name in [
            "",
            "plain",
            "quote \" and backslash \\",
            "line\nbreak\r\ttab\u{0}\u{1f}\u{7f}\u{85}\u{9f}\u{2028}\u{2029}",
            "é😀",
        ] {
            let options = Options::new(["nats://a"]).unwrap().with_name(name);
            let text = connect_json(&options, &server, &ServerInfo::default());
            assert!(!text.chars().any(char::is_control), "{text:?}");
            assert!(!text.contains(['\u{2028}', '\u{2029}']), "{text:?}");
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value.get("name").and_then(Value::as_str), Some(name));
            Encoder::new(&mut BytesMut::new()).connect(&text).unwrap();
        }
    }

    #[test]
    fn a_refusal_that_names_authorization_is_an_authorization_error() {
        assert!(matches!(
            refused("Authorization Violation".into()),
            Error::Authorization(_)
        ));
        assert!(matches!(
            refused("Unknown Protocol".into()),
            Error::Protocol(_)
        ));
    }
}
