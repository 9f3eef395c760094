//! What can go wrong talking to NATS, each case saying what happened and, where the caller can
//! fix it, what is allowed.

use std::fmt;
use std::time::Duration;

/// An error of the NATS client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A server address or option that cannot be used, and why.
    InvalidOptions(String),
    /// No server of the list could be reached; the last failure of each is listed.
    Unreachable(Vec<String>),
    /// The server refused the credentials (its `-ERR` text).
    Authorization(String),
    /// The server broke the protocol, or sent what this client refuses.
    Protocol(String),
    /// A subject, queue group or header block that cannot be sent, and why.
    Invalid(String),
    /// A message larger than the server's `max_payload`.
    TooLarge {
        /// The message's size in bytes (headers and payload).
        size: usize,
        /// The largest the server accepts.
        max_payload: usize,
    },
    /// The connection dropped before the server answered (a flush or a request); the client
    /// reconnects on its own.
    Disconnected,
    /// While reconnecting, messages are kept until this many bytes are waiting.
    ReconnectBufferFull {
        /// The reconnect buffer's size in bytes.
        limit: usize,
    },
    /// The write buffer holds more than its high-water mark (only from the `try_` forms).
    WouldBlock,
    /// A request nobody subscribes to: the server answered that there is no responder.
    NoResponders {
        /// The request's subject.
        subject: String,
    },
    /// A request or flush that was not answered in time.
    Timeout(Duration),
    /// The server refused this client's `operation` (`publish` or `subscribe`) on `subject`:
    /// the account's permissions do not allow it (the server's `Permissions Violation`).
    PermissionDenied {
        /// What was refused, as the server words it (`publish`, `subscribe`, ...).
        operation: String,
        /// The subject it was refused on.
        subject: String,
    },
    /// The client was closed.
    Closed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidOptions(why) => write!(f, "invalid NATS options: {why}"),
            Error::Unreachable(failures) => {
                write!(
                    f,
                    "no NATS server could be reached: {}",
                    failures.join("; ")
                )
            }
            Error::Authorization(text) => write!(
                f,
                "the NATS server refused the credentials ({text}): check the user and password \
                 or token in the server URL or options"
            ),
            Error::Protocol(why) => write!(f, "NATS protocol error: {why}"),
            Error::Invalid(why) => write!(f, "cannot send to NATS: {why}"),
            Error::TooLarge { size, max_payload } => write!(
                f,
                "a message of {size} bytes is larger than the server's max_payload of \
                 {max_payload} bytes"
            ),
            Error::Disconnected => write!(
                f,
                "the connection to the NATS server dropped before it answered (reconnecting)"
            ),
            Error::ReconnectBufferFull { limit } => write!(
                f,
                "disconnected from NATS and {limit} bytes are already waiting to be sent"
            ),
            Error::WouldBlock => write!(f, "the NATS write buffer is above its high-water mark"),
            Error::NoResponders { subject } => {
                write!(f, "no responders: nobody subscribes to {subject:?}")
            }
            Error::Timeout(after) => write!(f, "no answer from NATS within {after:?}"),
            Error::PermissionDenied { operation, subject } => write!(
                f,
                "the NATS server does not permit this client to {operation} {subject:?}: \
                 grant it in the account's `permissions` ({operation} allow list)"
            ),
            Error::Closed => write!(f, "the NATS client is closed"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::protocol::EncodeError> for Error {
    fn from(error: crate::protocol::EncodeError) -> Self {
        Error::Invalid(error.to_string())
    }
}
