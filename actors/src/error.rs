//! What a send or an ask to an actor can fail with.

/// Why a message did not get through, or got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The actor stopped (or its mailbox closed) before it took the message or replied.
    Closed,
    /// A `try_` send found the mailbox full; nothing was sent.
    Full,
    /// The actor panicked while it handled this message. A supervised actor is restarted
    /// (later messages reach the new incarnation); an unsupervised one follows the runtime's
    /// panic policy.
    Panicked {
        /// The actor's label.
        actor: &'static str,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Closed => write!(f, "the actor stopped before it replied"),
            Error::Full => write!(f, "the actor's mailbox is full"),
            Error::Panicked { actor } => {
                write!(
                    f,
                    "the actor `{actor}` panicked while it handled the message"
                )
            }
        }
    }
}

impl std::error::Error for Error {}
