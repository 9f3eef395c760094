//! The bytes of remote messages: requests, replies and the nodes' announcements.
//!
//! A request is a 4-byte little-endian deadline in milliseconds (0 for none: a tell), the
//! 4-byte schema of the actor's handlers (a hash of their names, argument and reply types, in
//! order, as compiled: two nodes built from different versions or features of an actor refuse
//! each other's messages rather than run the wrong handler), and then the handler's message
//! in postcard (which names a variant by its index). A reply is postcard's `Result<R, Failure>`. postcard
//! was chosen for its documented, stable wire format, its varint integers (a message of a
//! few small numbers is a few bytes), serde support with no schema to keep in step, and its
//! small dependency tree.
//!
//! Invariant: nothing a peer sends makes decoding panic; bytes that do not parse as the
//! expected type are an error that says which type and why.

use crate::{Error, ExitReason};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

/// The request header: the deadline in milliseconds, and the handlers' schema.
pub(crate) const HEADER: usize = 8;

/// `wire` as a request to handlers of `schema`, with no deadline yet (see
/// [`set_deadline`]).
pub(crate) fn request<W: Serialize>(wire: &W, schema: u32) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::with_capacity(32);
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(&schema.to_le_bytes());
    postcard::to_extend(wire, bytes)
        .map_err(|error| Error::Remote(format!("the message could not be encoded: {error}").into()))
}

/// Writes the deadline into a request's header (rounded up to a millisecond; at most
/// `u32::MAX` ms, about 50 days).
pub(crate) fn set_deadline(bytes: &mut [u8], deadline: Duration) {
    let millis = deadline
        .as_nanos()
        .div_ceil(1_000_000)
        .clamp(1, u32::MAX as u128) as u32;
    bytes[..4].copy_from_slice(&millis.to_le_bytes());
}

/// A request's deadline (`None` for a tell) and message, for handlers of `schema`.
pub(crate) fn decode_request<W: DeserializeOwned>(
    bytes: &[u8],
    schema: u32,
) -> Result<(Option<Duration>, W), String> {
    if bytes.len() < HEADER {
        return Err(format!(
            "a request of {} bytes, shorter than its {HEADER}-byte header",
            bytes.len()
        ));
    }
    let millis = u32::from_le_bytes(bytes[..4].try_into().expect("four bytes"));
    let theirs = u32::from_le_bytes(bytes[4..HEADER].try_into().expect("four bytes"));
    if theirs != schema {
        return Err(format!(
            "the sender's `{}` has other handlers than this node's (schema {theirs:08x}, here \
             {schema:08x}): both nodes must run the same version of the actor, with the same \
             features",
            std::any::type_name::<W>()
        ));
    }
    let deadline = (millis > 0).then(|| Duration::from_millis(millis.into()));
    let wire = postcard::from_bytes(&bytes[HEADER..]).map_err(|error| {
        format!(
            "the message is not one of `{}`'s handlers ({error}): do both nodes run the \
             same version of the actor?",
            std::any::type_name::<W>()
        )
    })?;
    Ok((deadline, wire))
}

/// Why a remote ask got no value, as it travels back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Failure {
    Closed,
    Full,
    Panicked(String),
    Timeout,
    Decode(String),
}

/// A reply's bytes.
pub(crate) fn reply<R: Serialize>(result: Result<R, Failure>) -> Vec<u8> {
    postcard::to_allocvec(&result).unwrap_or_else(|error| {
        let failure: Result<(), Failure> = Err(Failure::Decode(format!(
            "the reply could not be encoded: {error}"
        )));
        postcard::to_allocvec(&failure).expect("a failure encodes")
    })
}

/// A reply read back.
pub(crate) fn decode_reply<R: DeserializeOwned>(bytes: &[u8]) -> Result<R, Error> {
    let result: Result<R, Failure> = postcard::from_bytes(bytes).map_err(|error| {
        Error::Remote(
            format!(
                "the reply is not a `{}` ({error}): do both nodes run the same version of the \
                 actor?",
                std::any::type_name::<R>()
            )
            .into(),
        )
    })?;
    result.map_err(|failure| match failure {
        Failure::Closed => Error::Closed,
        Failure::Full => Error::Full,
        Failure::Panicked(label) => Error::Panicked {
            actor: intern(&label),
        },
        Failure::Timeout => Error::Timeout,
        Failure::Decode(why) => Error::Remote(why.into()),
    })
}

/// A label as `&'static str`, each distinct one leaked once (labels are type names: few).
fn intern(label: &str) -> &'static str {
    static LABELS: OnceLock<parking_lot::Mutex<HashSet<&'static str>>> = OnceLock::new();
    // Labels are type names: a longer one is not a label.
    let label = &label[..label.floor_char_boundary(64)];
    let mut labels = LABELS.get_or_init(Default::default).lock();
    if let Some(known) = labels.get(label) {
        return known;
    }
    // A peer could send endless distinct labels: past a bound, stop leaking.
    if labels.len() >= 1024 {
        return "a remote actor";
    }
    let leaked: &'static str = Box::leak(label.to_string().into_boxed_str());
    labels.insert(leaked);
    leaked
}

/// How an actor ended, as it travels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Exit {
    Normal,
    Stopped,
    Panicked(String),
    Shutdown,
    Other(String),
}

impl From<&ExitReason> for Exit {
    fn from(reason: &ExitReason) -> Self {
        match reason {
            ExitReason::Normal => Exit::Normal,
            ExitReason::Stopped => Exit::Stopped,
            ExitReason::Panicked(message) => Exit::Panicked(message.clone()),
            ExitReason::Shutdown => Exit::Shutdown,
            other => Exit::Other(other.to_string()),
        }
    }
}

impl From<Exit> for ExitReason {
    fn from(exit: Exit) -> Self {
        match exit {
            Exit::Normal => ExitReason::Normal,
            Exit::Stopped => ExitReason::Stopped,
            Exit::Panicked(message) => ExitReason::Panicked(message),
            Exit::Shutdown => ExitReason::Shutdown,
            Exit::Other(text) => ExitReason::Panicked(text),
        }
    }
}

/// What nodes announce on the cluster's announcement subject.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Announcement {
    /// A node is alive, and exposes these names.
    Heartbeat {
        node: String,
        incarnation: u64,
        interval_ms: u32,
        misses: u32,
        exposed: Vec<String>,
    },
    /// A node leaves: it is down from now on.
    Leaving { node: String, incarnation: u64 },
    /// An actor a node exposed ended; the node no longer exposes `name`.
    Exited {
        node: String,
        incarnation: u64,
        name: String,
        exit: Exit,
    },
}

pub(crate) fn announcement(announcement: &Announcement) -> Vec<u8> {
    postcard::to_allocvec(announcement).expect("an announcement encodes")
}

pub(crate) fn decode_announcement(bytes: &[u8]) -> Option<Announcement> {
    postcard::from_bytes(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[allow(non_camel_case_types)]
    enum Wire {
        add(u64),
        name(String, Vec<u8>),
        total(),
    }

    #[test]
    fn requests_round_trip_with_their_deadline_and_are_compact() {
        let mut bytes = request(&Wire::add(5), 7).unwrap();
        assert_eq!(
            bytes.len(),
            HEADER + 2,
            "a variant index and a one-byte varint"
        );
        assert_eq!(
            decode_request::<Wire>(&bytes, 7).unwrap(),
            (None, Wire::add(5))
        );
        // Other handlers (another version of the actor): refused, saying why.
        let error = decode_request::<Wire>(&bytes, 8).unwrap_err();
        assert!(error.contains("other handlers"), "{error}");
        set_deadline(&mut bytes, Duration::from_micros(1500));
        let (deadline, wire) = decode_request::<Wire>(&bytes, 7).unwrap();
        assert_eq!(deadline, Some(Duration::from_millis(2)));
        assert_eq!(wire, Wire::add(5));
        let bytes = request(&Wire::name("é".into(), vec![0, 255]), 7).unwrap();
        assert_eq!(
            decode_request::<Wire>(&bytes, 7).unwrap().1,
            Wire::name("é".into(), vec![0, 255])
        );
        assert_eq!(
            decode_request::<Wire>(&request(&Wire::total(), 7).unwrap(), 7)
                .unwrap()
                .1,
            Wire::total()
        );
    }

    #[test]
    fn bytes_that_are_not_a_request_are_an_error_that_names_the_type() {
        assert!(
            decode_request::<Wire>(b"ab", 0)
                .unwrap_err()
                .contains("header")
        );
        let error = decode_request::<Wire>(&[0, 0, 0, 0, 0, 0, 0, 0, 9], 0).unwrap_err();
        assert!(error.contains("Wire"), "{error}");
        // Every prefix and every byte flip of a valid request: an error or a value, never a
        // panic.
        let valid = request(&Wire::name("abc".into(), vec![1, 2, 3]), 0).unwrap();
        for end in 0..valid.len() {
            let _ = decode_request::<Wire>(&valid[..end], 0);
        }
        for at in 0..valid.len() {
            for bit in 0..8 {
                let mut flipped = valid.clone();
                flipped[at] ^= 1 << bit;
                let _ = decode_request::<Wire>(&flipped, 0);
            }
        }
    }

    #[test]
    fn replies_carry_values_and_failures() {
        assert_eq!(decode_reply::<u64>(&reply(Ok(7u64))), Ok(7));
        for (failure, error) in [
            (Failure::Closed, Error::Closed),
            (Failure::Full, Error::Full),
            (Failure::Timeout, Error::Timeout),
            (
                Failure::Panicked("counter".into()),
                Error::Panicked { actor: "counter" },
            ),
        ] {
            assert_eq!(decode_reply::<u64>(&reply::<u64>(Err(failure))), Err(error));
        }
        let error = decode_reply::<String>(&reply(Ok(7u64))).unwrap_err();
        assert!(
            matches!(&error, Error::Remote(why) if why.contains("String")),
            "{error}"
        );
    }

    #[test]
    fn announcements_round_trip() {
        let heartbeat = Announcement::Heartbeat {
            node: "a".into(),
            incarnation: 9,
            interval_ms: 500,
            misses: 3,
            exposed: vec!["counter".into()],
        };
        assert_eq!(
            decode_announcement(&announcement(&heartbeat)),
            Some(heartbeat)
        );
        assert_eq!(decode_announcement(b"\xff\xff"), None);
    }
}
