//! How a client connects: the servers it may use, its credentials, and the limits and timings
//! of its connection. Defaults suit a cluster node: reconnect forever, notice a dead server
//! within a few seconds, keep 8 MiB while reconnecting.

use crate::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What the client reports as it runs, to the handler set with [`Options::on_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// Connected (again) to `server`, subscriptions restored.
    Connected {
        /// The server's address.
        server: String,
    },
    /// The connection to `server` dropped, and why; the client reconnects.
    Disconnected {
        /// The server's address.
        server: String,
        /// Why the connection dropped.
        reason: String,
    },
    /// The server sent `-ERR` (for instance a permissions violation, or `Slow Consumer`
    /// when this client did not read fast enough and the server cut it off).
    ServerError(String),
    /// A subscription's queue was full and a message to it was dropped. Reported once per
    /// episode: again only after the queue has drained.
    SlowConsumer {
        /// The subscription's subject.
        subject: String,
        /// The subscription's id on the connection.
        sid: u64,
    },
    /// The server is shutting down gracefully (lame duck mode); the client will move to
    /// another server when it closes.
    LameDuck {
        /// The server's address.
        server: String,
    },
    /// The client closed: by `close`, by its last handle's drop, because its connection
    /// task's scope ended, or after `max_reconnects` failed attempts. Nothing more comes.
    Closed,
}

/// A handler of [`Event`]s. It runs on the client's own tasks: it must not block.
pub type EventHandler = Arc<dyn Fn(Event) + Send + Sync>;

/// A server to connect to: `host:port`, with the credentials its URL carried.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerAddress {
    /// A host name or an IP address.
    pub host: String,
    /// The port (4222 unless the URL names one).
    pub port: u16,
    /// The user of the URL's `user:password@`.
    pub user: Option<String>,
    /// The password of the URL's `user:password@`.
    pub password: Option<String>,
    /// The token of the URL's `token@`.
    pub token: Option<String>,
}

impl fmt::Debug for ServerAddress {
    // Credentials stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "nats://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "nats://{}:{}", self.host, self.port)
        }
    }
}

impl ServerAddress {
    /// The port of `nats://` URLs without one.
    pub const DEFAULT_PORT: u16 = 4222;

    /// Parses `nats://[user:password@|token@]host[:port]`, or the same without the scheme.
    /// IPv6 hosts go in brackets. TLS (`tls://`) and websockets are not supported.
    pub fn parse(url: &str) -> Result<Self, Error> {
        let invalid = |why: &str| {
            Error::InvalidOptions(format!(
                "server URL {url:?}: {why}; expected nats://[user:password@|token@]host[:port]"
            ))
        };
        let url = url.trim();
        let rest = match url.split_once("://") {
            Some(("nats", rest)) => rest,
            Some((scheme, _)) => {
                return Err(invalid(&format!(
                    "the scheme {scheme:?} is not supported (only nats://; for TLS put a \
                     TLS-terminating proxy in front)"
                )));
            }
            None => url,
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') {
            return Err(invalid("a path or query is not allowed"));
        }
        let (credentials, hostport) = match rest.rsplit_once('@') {
            Some((credentials, hostport)) => (Some(credentials), hostport),
            None => (None, rest),
        };
        let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| invalid("an IPv6 host's ']' is missing"))?;
            let port = match after {
                "" => None,
                after => Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| invalid("':' must follow an IPv6 host's ']'"))?,
                ),
            };
            (host, port)
        } else {
            match hostport.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(invalid("the host is missing"));
        }
        let port = match port {
            None => Self::DEFAULT_PORT,
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|port| *port > 0)
                .ok_or_else(|| invalid("the port must be a number from 1 to 65535"))?,
        };
        let (user, password, token) = match credentials {
            None => (None, None, None),
            Some(credentials) => match credentials.split_once(':') {
                Some((user, password)) => (
                    Some(percent_decode(user)),
                    Some(percent_decode(password)),
                    None,
                ),
                None => (None, None, Some(percent_decode(credentials))),
            },
        };
        Ok(Self {
            host: host.to_string(),
            port,
            user,
            password,
            token,
        })
    }
}

/// `%XX` escapes decoded (URL credentials may hold `@` or `:` escaped); anything malformed is
/// kept as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%'
            && let Some(byte) = bytes
                .get(at + 1..at + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            at += 3;
            continue;
        }
        out.push(bytes[at]);
        at += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The client's configuration. Build it with [`Options::new`] and the `with_` methods.
#[derive(Clone)]
pub struct Options {
    pub(crate) servers: Vec<ServerAddress>,
    pub(crate) name: Option<String>,
    pub(crate) user: Option<(String, String)>,
    pub(crate) token: Option<String>,
    pub(crate) connect_timeout: Duration,
    pub(crate) ping_interval: Duration,
    pub(crate) max_pings_out: usize,
    pub(crate) reconnect_delay: Duration,
    pub(crate) max_reconnect_delay: Duration,
    pub(crate) max_reconnects: Option<u64>,
    pub(crate) reconnect_buffer: usize,
    pub(crate) write_high_water: usize,
    pub(crate) subscription_capacity: usize,
    pub(crate) subscription_bytes: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) max_message: usize,
    pub(crate) event_handler: Option<EventHandler>,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("servers", &self.servers)
            .field("name", &self.name)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("ping_interval", &self.ping_interval)
            .field("max_pings_out", &self.max_pings_out)
            .field("reconnect_delay", &self.reconnect_delay)
            .field("max_reconnect_delay", &self.max_reconnect_delay)
            .field("max_reconnects", &self.max_reconnects)
            .field("reconnect_buffer", &self.reconnect_buffer)
            .field("write_high_water", &self.write_high_water)
            .field("subscription_capacity", &self.subscription_capacity)
            .field("subscription_bytes", &self.subscription_bytes)
            .field("request_timeout", &self.request_timeout)
            .field("max_message", &self.max_message)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Options for the servers of `urls` (each as [`ServerAddress::parse`] reads it), tried in
    /// order at first and round-robin when reconnecting. Credentials in a URL apply to that
    /// server; [`with_user`](Self::with_user) and [`with_token`](Self::with_token) apply to
    /// servers whose URL has none.
    pub fn new<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let servers = urls
            .into_iter()
            .flat_map(|urls| {
                // "a,b" lists, as NATS tools accept them.
                urls.as_ref()
                    .split(',')
                    .filter(|url| !url.trim().is_empty())
                    .map(ServerAddress::parse)
                    .collect::<Vec<_>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        if servers.is_empty() {
            return Err(Error::InvalidOptions(
                "no server URL given; expected at least one nats://host:port".into(),
            ));
        }
        Ok(Self {
            servers,
            name: None,
            user: None,
            token: None,
            connect_timeout: Duration::from_secs(2),
            ping_interval: Duration::from_secs(5),
            max_pings_out: 2,
            reconnect_delay: Duration::from_millis(10),
            max_reconnect_delay: Duration::from_secs(2),
            max_reconnects: None,
            reconnect_buffer: 8 << 20,
            write_high_water: 4 << 20,
            subscription_capacity: 65_536,
            subscription_bytes: 64 << 20,
            request_timeout: Duration::from_secs(5),
            max_message: 64 << 20,
            event_handler: None,
        })
    }

    /// The servers to connect to.
    pub fn servers(&self) -> &[ServerAddress] {
        &self.servers
    }

    /// The client's name, shown in the server's monitoring (`/connz`).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A user and password for servers whose URL carries no credentials.
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// A token for servers whose URL carries no credentials.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How long a dial and the handshake after it may take (default 2 s).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How often the client pings the server (default 5 s), and how many pings may go
    /// unanswered (default 2) before it declares the connection dead and reconnects. A dead
    /// server is noticed within `interval * (max_out + 1)`.
    pub fn with_ping_interval(mut self, interval: Duration, max_out: usize) -> Self {
        self.ping_interval = interval;
        self.max_pings_out = max_out;
        self
    }

    /// The first reconnect delay (default 10 ms), doubled after each failed round over the
    /// servers up to `max` (default 2 s), with up to a quarter added at random so clients
    /// do not return in lockstep.
    pub fn with_reconnect_delay(mut self, first: Duration, max: Duration) -> Self {
        self.reconnect_delay = first;
        self.max_reconnect_delay = max;
        self
    }

    /// Gives up (and closes) after this many failed reconnect attempts; `None` (the
    /// default) retries forever.
    pub fn with_max_reconnects(mut self, attempts: Option<u64>) -> Self {
        self.max_reconnects = attempts;
        self
    }

    /// The bytes kept for sending while disconnected (default 8 MiB); publishing beyond
    /// fails with [`Error::ReconnectBufferFull`].
    pub fn with_reconnect_buffer(mut self, bytes: usize) -> Self {
        self.reconnect_buffer = bytes;
        self
    }

    /// The bytes waiting to be sent above which `publish` waits and `try_publish` fails
    /// with [`Error::WouldBlock`] (default 4 MiB).
    pub fn with_write_high_water(mut self, bytes: usize) -> Self {
        self.write_high_water = bytes;
        self
    }

    /// How many messages (default 65 536) and bytes (default 64 MiB) a subscription holds
    /// unread before it drops new ones and reports [`Event::SlowConsumer`].
    pub fn with_subscription_capacity(mut self, messages: usize, bytes: usize) -> Self {
        self.subscription_capacity = messages;
        self.subscription_bytes = bytes;
        self
    }

    /// How long a request waits for its answer unless told otherwise (default 5 s).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The largest message (headers and payload) this client accepts from the server
    /// (default 64 MiB); a larger one is a protocol error that drops the connection.
    pub fn with_max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// A handler for what the client reports as it runs (connects, disconnects, server
    /// errors, slow consumers). It must not block.
    pub fn on_event(mut self, handler: impl Fn(Event) + Send + Sync + 'static) -> Self {
        self.event_handler = Some(Arc::new(handler));
        self
    }

    /// Checks the values against what the client can work with.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let invalid = |why: String| Err(Error::InvalidOptions(why));
        if self.connect_timeout.is_zero() {
            return invalid("connect_timeout must be above zero".into());
        }
        if self.ping_interval.is_zero() || self.max_pings_out == 0 {
            return invalid("ping_interval must be above zero and max_pings_out at least 1".into());
        }
        if self.reconnect_delay > self.max_reconnect_delay {
            return invalid(format!(
                "the first reconnect delay ({:?}) is above the largest ({:?})",
                self.reconnect_delay, self.max_reconnect_delay
            ));
        }
        if self.subscription_capacity == 0 || self.subscription_bytes == 0 {
            return invalid("a subscription must hold at least one message and byte".into());
        }
        if self.write_high_water == 0 {
            return invalid("write_high_water must be above zero".into());
        }
        if self.request_timeout.is_zero() {
            return invalid("request_timeout must be above zero".into());
        }
        if self.max_message < 1024 {
            return invalid(format!(
                "max_message is {} bytes; it must be at least 1024",
                self.max_message
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_parse_with_and_without_scheme_port_and_credentials() {
        let parsed = ServerAddress::parse("nats://127.0.0.1:4223").unwrap();
        assert_eq!((parsed.host.as_str(), parsed.port), ("127.0.0.1", 4223));
        let parsed = ServerAddress::parse("localhost").unwrap();
        assert_eq!((parsed.host.as_str(), parsed.port), ("localhost", 4222));
        let parsed = ServerAddress::parse("nats://al%40ice:p%3Ass@[::1]:5000/").unwrap();
        assert_eq!((parsed.host.as_str(), parsed.port), ("::1", 5000));
        assert_eq!(parsed.user.as_deref(), Some("al@ice"));
        assert_eq!(parsed.password.as_deref(), Some("p:ss"));
        assert_eq!(parsed.to_string(), "nats://[::1]:5000");
        assert!(!format!("{parsed:?}").contains("p:ss"));
        let parsed = ServerAddress::parse("s3cr3t@host:1").unwrap();
        assert_eq!(parsed.token.as_deref(), Some("s3cr3t"));
    }

    #[test]
    fn bad_server_urls_say_what_is_wrong_and_what_is_allowed() {
        for (url, why) in [
            ("tls://host:4222", "only nats://"),
            ("nats://host:0", "from 1 to 65535"),
            ("nats://host:port", "from 1 to 65535"),
            ("nats://:4222", "the host is missing"),
            ("nats://[::1", "']' is missing"),
            ("nats://host:4222/path", "path or query"),
        ] {
            let error = ServerAddress::parse(url).unwrap_err().to_string();
            assert!(error.contains(why), "{url}: {error}");
            assert!(error.contains("expected nats://"), "{url}: {error}");
        }
        let error = Options::new(Vec::<String>::new()).unwrap_err().to_string();
        assert!(error.contains("no server URL"), "{error}");
    }

    #[test]
    fn comma_separated_lists_name_several_servers() {
        let options = Options::new(["nats://a:1,nats://b:2", "c"]).unwrap();
        let hosts: Vec<_> = options.servers().iter().map(|s| s.host.clone()).collect();
        assert_eq!(hosts, ["a", "b", "c"]);
    }

    #[test]
    fn validation_names_the_bad_option() {
        let options = Options::new(["a"]).unwrap();
        let error = options
            .clone()
            .with_ping_interval(Duration::ZERO, 2)
            .validate()
            .unwrap_err();
        assert!(error.to_string().contains("ping_interval"), "{error}");
        let error = options
            .with_reconnect_delay(Duration::from_secs(5), Duration::from_secs(1))
            .validate()
            .unwrap_err();
        assert!(error.to_string().contains("reconnect delay"), "{error}");
    }
}
