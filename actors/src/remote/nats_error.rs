//! How a NATS client's failures read as actor errors, for the calls a node makes for its
//! callers (asks, tells, exposures, topics).

use crate::Error;

/// A NATS error as an actor error.
pub(crate) fn remote_error(error: nats::Error) -> Error {
    match error {
        nats::Error::Closed => Error::Closed,
        nats::Error::WouldBlock => Error::Full,
        nats::Error::Timeout(_) => Error::Timeout,
        nats::Error::Disconnected => Error::Remote(
            "the NATS connection dropped before the reply came; the message may or may not \
             have been handled"
                .into(),
        ),
        other => Error::Remote(other.to_string().into()),
    }
}
