//! The bytes of remote messages: requests, replies and the nodes' announcements.
//!
//! A request is a 25-byte header and then the handler's message in postcard (which names a
//! variant by its index). The header, little-endian: the version of this format (1 byte,
//! [`VERSION`]: a node of another version is refused with a message that says so); the
//! ask's deadline as a wall-clock time in milliseconds since the Unix epoch (8 bytes; 0 for
//! a tell, which has none); the ask's whole budget in milliseconds (4 bytes: the deadline
//! minus the budget is when it was sent); the incarnation of the node it is sent to (8
//! bytes; 0 for any: a name, or a node not known up), so that a node that came back as a
//! new incarnation (or another node under the same name) runs, and answers, no ask sent to
//! another one: its askers fail it `NodeDown` when they see that one down; and the 4-byte schema of the actor's handlers (a hash of their names,
//! argument and reply types, in order, as compiled: two nodes built from different versions
//! or features of an actor refuse each other's messages rather than run the wrong handler). The deadline is
//! absolute so that it means the same wherever the request waited (a reconnect buffer, the
//! NATS server, a paused node's socket): nodes compare it with their own clocks, which
//! must agree within the node's `max_clock_skew`. A reply is postcard's `Result<R, Failure>`. postcard
//! was chosen for its documented, stable wire format, its varint integers (a message of a
//! few small numbers is a few bytes), serde support with no schema to keep in step, and its
//! small dependency tree.
//!
//! Invariant: nothing a peer sends makes decoding panic; bytes that do not parse as the
//! expected type are an error that says which type and why.

use super::auth;
use crate::{Error, ExitReason};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

/// The request header: the version, the deadline, the budget, the incarnation sent to, and
/// the handlers' schema.
pub(crate) const HEADER: usize = 25;

/// The version of the request format.
pub(crate) const VERSION: u8 = 2;

/// The wall clock in milliseconds since the Unix epoch (0 before it).
pub(crate) fn wall_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// An ask's deadline as it travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deadline {
    /// When the asker gives up: wall-clock milliseconds since the Unix epoch.
    pub(crate) at_millis: u64,
    /// The whole budget it was sent with, in milliseconds.
    pub(crate) budget_millis: u32,
}

impl Deadline {
    /// When the request was sent, by the asker's clock.
    pub(crate) fn sent_millis(&self) -> u64 {
        self.at_millis.saturating_sub(self.budget_millis.into())
    }
}

/// `wire` as a request to handlers of `schema`, with no deadline yet (see
/// [`set_deadline`]).
pub(crate) fn request<W: Serialize>(wire: &W, schema: u32) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::with_capacity(48);
    bytes.push(VERSION);
    bytes.extend_from_slice(&[0; 20]);
    bytes.extend_from_slice(&schema.to_le_bytes());
    postcard::to_extend(wire, bytes)
        .map_err(|error| Error::Remote(format!("the message could not be encoded: {error}").into()))
}

/// Writes into a request's header the deadline `budget` from `now_millis` (the wall clock;
/// the budget rounded up to a millisecond, at most `u32::MAX` ms, about 50 days).
pub(crate) fn set_deadline(bytes: &mut [u8], budget: Duration, now_millis: u64) -> Deadline {
    let budget_millis = budget
        .as_nanos()
        .div_ceil(1_000_000)
        .clamp(1, u32::MAX as u128) as u32;
    let deadline = Deadline {
        at_millis: now_millis.saturating_add(budget_millis.into()),
        budget_millis,
    };
    bytes[1..9].copy_from_slice(&deadline.at_millis.to_le_bytes());
    bytes[9..13].copy_from_slice(&budget_millis.to_le_bytes());
    deadline
}

/// Writes into a request's header the incarnation of the node it is sent to (0: any).
pub(crate) fn set_incarnation(bytes: &mut [u8], incarnation: u64) {
    bytes[13..21].copy_from_slice(&incarnation.to_le_bytes());
}

/// A request's header, read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// `None` for a tell.
    pub(crate) deadline: Option<Deadline>,
    /// The incarnation it was sent to (0: any).
    pub(crate) incarnation: u64,
}

/// A request's header and message, for handlers of `schema`.
pub(crate) fn decode_request<W: DeserializeOwned>(
    bytes: &[u8],
    schema: u32,
) -> Result<(Header, W), String> {
    if bytes.len() < HEADER {
        return Err(format!(
            "a request of {} bytes, shorter than its {HEADER}-byte header",
            bytes.len()
        ));
    }
    if bytes[0] != VERSION {
        return Err(format!(
            "the request is of version {} of the remote protocol, this node speaks version \
             {VERSION}: both nodes must run the same version of this crate",
            bytes[0]
        ));
    }
    let at_millis = u64::from_le_bytes(bytes[1..9].try_into().expect("eight bytes"));
    let budget_millis = u32::from_le_bytes(bytes[9..13].try_into().expect("four bytes"));
    let incarnation = u64::from_le_bytes(bytes[13..21].try_into().expect("eight bytes"));
    let theirs = u32::from_le_bytes(bytes[21..HEADER].try_into().expect("four bytes"));
    if theirs != schema {
        return Err(format!(
            "the sender's `{}` has other handlers than this node's (schema {theirs:08x}, here \
             {schema:08x}): both nodes must run the same version of the actor, with the same \
             features",
            std::any::type_name::<W>()
        ));
    }
    let header = Header {
        deadline: (at_millis > 0).then_some(Deadline {
            at_millis,
            budget_millis,
        }),
        incarnation,
    };
    let wire = postcard::from_bytes(&bytes[HEADER..]).map_err(|error| {
        format!(
            "the message is not one of `{}`'s handlers ({error}): do both nodes run the \
             same version of the actor?",
            std::any::type_name::<W>()
        )
    })?;
    Ok((header, wire))
}

/// Why a remote ask got no value, as it travels back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Failure {
    Closed,
    Full,
    Panicked(String),
    Timeout,
    Decode(String),
    /// The serving node (named) was cut off from the cluster when the request was sent, so
    /// its asker may have been told `NodeDown`: it was not run.
    NodeDown(String),
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
        Failure::NodeDown(node) => Error::NodeDown { node: node.into() },
    })
}

/// A label as `&'static str`, each distinct one leaked once (labels are type names: few).
fn intern(label: &str) -> &'static str {
    static LABELS: OnceLock<crate::sync::StaticMutex<HashSet<&'static str>>> = OnceLock::new();
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

/// What a node announces, with who sends it: the node, its incarnation, a sequence number
/// counted per incarnation and subject, and its wall-clock send time in milliseconds.
/// Beats go on `<prefix>.alive.<node>` over the control connection; everything else on
/// `<prefix>.announce.<node>` over the data connection, in order with the node's replies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Announcement {
    pub(crate) node: String,
    /// Random per node process: tells a node's own announcements (whatever incarnation they
    /// carry) from another node's under its name.
    pub(crate) nonce: u64,
    pub(crate) incarnation: u64,
    /// Since when (wall-clock milliseconds) the node has been present without a break: its
    /// join, or its return after it was cut off. Of two nodes holding one name, the one
    /// present longer keeps it.
    pub(crate) since_millis: u64,
    pub(crate) seq: u64,
    pub(crate) sent_millis: u64,
    pub(crate) body: Body,
}

/// What an announcement says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Body {
    /// The node is alive (liveness only: it says nothing of its names, since it travels on
    /// another connection than the announcements it would have to be ordered with).
    Beat,
    /// The node is alive, heartbeats this often, and exposes these names.
    Heartbeat {
        interval_ms: u32,
        misses: u32,
        exposed: Vec<String>,
    },
    /// The node leaves: it is down from now on.
    Leaving,
    /// An actor the node exposed ended; the node no longer exposes `name`.
    Exited { name: String, exit: Exit },
}

/// An announcement's bytes, followed by its tag on `subject` when membership is
/// authenticated with `key`.
pub(crate) fn announcement(
    announcement: &Announcement,
    subject: &str,
    key: Option<&auth::Key>,
) -> Vec<u8> {
    let mut bytes = postcard::to_allocvec(announcement).expect("an announcement encodes");
    if let Some(key) = key {
        let tag = key.sign(subject, &bytes);
        bytes.extend_from_slice(&tag);
    }
    bytes
}

/// The announcement in `bytes` received on `subject`: `None` unless it is at most
/// `max_len` bytes (looked at before anything is computed over it), parses whole, was sent on
/// its own node's subject (`<prefix>.announce.<node>`, `announce_prefix` being
/// `<prefix>.announce.`), and, when membership is authenticated with `key`, carries a valid
/// tag.
pub(crate) fn decode_announcement(
    bytes: &[u8],
    subject: &str,
    announce_prefix: &str,
    key: Option<&auth::Key>,
    max_len: usize,
) -> Option<Announcement> {
    if bytes.len() > max_len {
        return None;
    }
    let body = match key {
        Some(key) => {
            let split = bytes.len().checked_sub(auth::TAG)?;
            let (body, tag) = bytes.split_at(split);
            if !key.verify(subject, body, tag) {
                return None;
            }
            body
        }
        None => bytes,
    };
    let (announcement, rest): (Announcement, _) = postcard::take_from_bytes(body).ok()?;
    let on_own_subject = subject.strip_prefix(announce_prefix) == Some(&announcement.node);
    (rest.is_empty() && on_own_subject).then_some(announcement)
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
            (
                Header {
                    deadline: None,
                    incarnation: 0
                },
                Wire::add(5)
            )
        );
        // Other handlers (another version of the actor): refused, saying why.
        let error = decode_request::<Wire>(&bytes, 8).unwrap_err();
        assert!(error.contains("other handlers"), "{error}");
        let set = set_deadline(&mut bytes, Duration::from_micros(1500), 1_000_000);
        set_incarnation(&mut bytes, 42);
        let (header, wire) = decode_request::<Wire>(&bytes, 7).unwrap();
        assert_eq!(header.deadline, Some(set));
        assert_eq!(header.incarnation, 42);
        assert_eq!(
            set,
            Deadline {
                at_millis: 1_000_002,
                budget_millis: 2
            }
        );
        assert_eq!(set.sent_millis(), 1_000_000);
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
        let mut unknown_variant = vec![VERSION];
        unknown_variant.extend_from_slice(&[0; HEADER - 1]);
        unknown_variant.push(9);
        let error = decode_request::<Wire>(&unknown_variant, 0).unwrap_err();
        assert!(error.contains("Wire"), "{error}");
        // Another version of the format: refused, saying so.
        let mut other_version = request(&Wire::add(1), 0).unwrap();
        other_version[0] = 1;
        let error = decode_request::<Wire>(&other_version, 0).unwrap_err();
        assert!(error.contains("version 1"), "{error}");
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
    fn announcements_round_trip_on_their_own_subject_and_with_their_tag() {
        let heartbeat = Announcement {
            node: "a".into(),
            nonce: 77,
            incarnation: 9,
            since_millis: 500,
            seq: 3,
            sent_millis: 1_000,
            body: Body::Heartbeat {
                interval_ms: 500,
                misses: 3,
                exposed: vec!["counter".into()],
            },
        };
        let prefix = "actors.announce.";
        let bytes = announcement(&heartbeat, "actors.announce.a", None);
        assert_eq!(
            decode_announcement(&bytes, "actors.announce.a", prefix, None, 4096),
            Some(heartbeat.clone())
        );
        // Sent on another node's subject: a forgery.
        assert_eq!(
            decode_announcement(&bytes, "actors.announce.b", prefix, None, 4096),
            None
        );
        assert_eq!(
            decode_announcement(b"\xff\xff", "actors.announce.a", prefix, None, 4096),
            None
        );
        let key = auth::Key::new(b"the cluster's secret");
        let signed = announcement(&heartbeat, "actors.announce.a", Some(&key));
        assert_eq!(
            decode_announcement(&signed, "actors.announce.a", prefix, Some(&key), 4096),
            Some(heartbeat.clone())
        );
        // Unsigned, signed with another key, or altered: refused; and a node without the
        // secret refuses signed ones (trailing bytes).
        assert_eq!(
            decode_announcement(&bytes, "actors.announce.a", prefix, Some(&key), 4096),
            None
        );
        let other = announcement(&heartbeat, "actors.announce.a", Some(&auth::Key::new(b"x")));
        assert_eq!(
            decode_announcement(&other, "actors.announce.a", prefix, Some(&key), 4096),
            None
        );
        let mut altered = signed.clone();
        altered[2] ^= 1;
        assert_eq!(
            decode_announcement(&altered, "actors.announce.a", prefix, Some(&key), 4096),
            None
        );
        assert_eq!(
            decode_announcement(&signed, "actors.announce.a", prefix, None, 4096),
            None
        );
        // Longer than allowed: refused before it is verified.
        assert_eq!(
            decode_announcement(&signed, "actors.announce.a", prefix, Some(&key), 16),
            None
        );
    }
}
