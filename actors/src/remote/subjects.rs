//! What remote messages are addressed to: node names and actor or topic names as they go into
//! subjects (checked here, so that no name can make a subject that reaches another node's
//! actors), and [`Target`], what a remote ref reaches.

use crate::Error;
use std::fmt;

/// Whether `text` is one subject token: letters, digits, `_` and `-`.
pub(crate) fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `name` is a node name: one token of at most 64 bytes (a dot would make
/// `<prefix>.n.<node>.<name>` another node's subject).
pub(crate) fn check_node_name(name: &str) -> Result<(), Error> {
    if is_token(name) && name.len() <= 64 {
        return Ok(());
    }
    Err(Error::Remote(
        format!("`{name}` is not a valid node name: use 1 to 64 letters, digits, `_` and `-`")
            .into(),
    ))
}

/// Whether `name` is an actor or topic name: tokens joined by dots, at most 128 bytes.
pub(crate) fn check_name(name: &str, what: &str) -> Result<(), Error> {
    if name.len() <= 128 && name.split('.').all(is_token) {
        return Ok(());
    }
    Err(Error::Remote(
        format!(
            "`{name}` is not a valid {what} name: use letters, digits, `_` and `-`, in tokens \
             joined by `.`, at most 128 bytes"
        )
        .into(),
    ))
}

/// What a remote ref reaches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Whichever node exposing the name takes the message.
    Name(String),
    /// The actor one node exposes under the name.
    Node {
        /// The node's name.
        node: String,
        /// The name the node exposes the actor under.
        name: String,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Name(name) => write!(f, "`{name}`"),
            Target::Node { node, name } => write!(f, "`{name}` on node `{node}`"),
        }
    }
}
