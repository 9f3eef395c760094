//! What a send or an ask to an actor, or a request to a supervisor, can fail with.

use crate::ActorId;

/// The most members a pool may have (`actors::pool::MAX_POOL_SIZE`): each is an actor with
/// its own mailbox and supervision slot, and a size past this is a mistake (a computed size
/// gone wrong) rather than a plan.
pub const MAX_POOL_SIZE: usize = 1 << 16;

/// Why a message did not get through, or got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The actor stopped (or its mailbox closed) before it took the message or replied.
    Closed,
    /// A `try_` send found the mailbox full; nothing was sent.
    Full,
    /// The actor panicked while it handled this message. A supervised actor is restarted
    /// (later messages reach the new incarnation); an unsupervised one ends with
    /// [`ExitReason::Panicked`](crate::ExitReason::Panicked) and the program goes on, unless
    /// it opted in with `#[actor(panic_fails_runner = true)]`.
    Panicked {
        /// The actor's label.
        actor: &'static str,
    },
    /// An ask's deadline (its `.timeout(..)`, or the actor's `ask_timeout`) passed before the
    /// reply came. A message already queued is still handled; its reply is discarded.
    Timeout,
    /// A dynamic supervisor already has its `max_children`: nothing was started.
    TooManyChildren {
        /// The supervisor's label.
        supervisor: &'static str,
        /// Its `max_children`.
        max: usize,
    },
    /// A registry already holds the name, for another actor that runs.
    NameTaken {
        /// The name asked for.
        name: Box<str>,
        /// The actor that holds it.
        holder: ActorId,
    },
    /// A pool of no members, or of more than [`MAX_POOL_SIZE`], was asked for.
    InvalidPoolSize {
        /// The pool's label.
        pool: &'static str,
        /// The size asked for.
        size: usize,
    },
    /// The id named no child of the supervisor (never one, or already ended for good).
    NoSuchChild {
        /// The supervisor's label.
        supervisor: &'static str,
        /// The id asked for.
        id: ActorId,
    },
    /// A remote ask's node died or was cut off (it missed its heartbeats, or left) before it
    /// replied: the message may or may not have been handled.
    NodeDown {
        /// The node's name.
        node: Box<str>,
    },
    /// No node exposes the remote actor's name (NATS found no subscriber): nothing was
    /// handled.
    NotExposed {
        /// The name asked for.
        name: Box<str>,
    },
    /// A remote message could not be sent or its reply read, and why (the NATS connection
    /// is down, the message is larger than the server accepts, or the two nodes disagree on
    /// the handler's types).
    Remote(Box<str>),
    /// A runtime operation failed (a dial, a bind, a blob, a timeout of the runtime's own):
    /// the runtime's error, shared so that this error stays `Clone`. It is what `?` makes of
    /// a [`runtime::Error`] in a function that returns `Result<_, actors::Error>`; its
    /// `Display` and `source` are the runtime error's own.
    Runtime(std::sync::Arc<runtime::Error>),
}

impl Error {
    /// Whether a deadline passed: [`Error::Timeout`] (an ask's), or a runtime error that is a
    /// timeout ([`runtime::Error::is_timeout`]).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Timeout => true,
            Error::Runtime(error) => error.is_timeout(),
            _ => false,
        }
    }

    /// Whether the other side went away: [`Error::Closed`] (the actor stopped before it took
    /// the message or replied), or a runtime error that is [`runtime::Error::Closed`].
    pub fn is_closed(&self) -> bool {
        match self {
            Error::Closed => true,
            Error::Runtime(error) => error.is_closed(),
            _ => false,
        }
    }

    /// The runtime's error, when this is one ([`Error::Runtime`]).
    pub fn runtime_error(&self) -> Option<&runtime::Error> {
        match self {
            Error::Runtime(error) => Some(error),
            _ => None,
        }
    }
}

impl From<runtime::Error> for Error {
    fn from(error: runtime::Error) -> Self {
        Error::Runtime(std::sync::Arc::new(error))
    }
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
            Error::Timeout => write!(f, "the ask's deadline passed before the actor replied"),
            Error::TooManyChildren { supervisor, max } => write!(
                f,
                "the supervisor `{supervisor}` already runs its maximum of {max} children: \
                 terminate one, or raise `max_children`"
            ),
            Error::NameTaken { name, holder } => write!(
                f,
                "the name `{name}` is registered to {holder}, which runs: unregister it \
                 first, or choose another name"
            ),
            Error::InvalidPoolSize { pool, size } => write!(
                f,
                "the pool `{pool}` cannot have {size} members: a pool has 1 to {} members",
                MAX_POOL_SIZE
            ),
            Error::NoSuchChild { supervisor, id } => write!(
                f,
                "{id} is not a child of the supervisor `{supervisor}` (it never was, or it \
                 already ended)"
            ),
            Error::NodeDown { node } => write!(
                f,
                "the node `{node}` went down before it replied (the message may or may not \
                 have been handled)"
            ),
            Error::NotExposed { name } => {
                write!(
                    f,
                    "no node exposes the actor name `{name}`: nothing was sent"
                )
            }
            Error::Remote(why) => write!(f, "remote message failed: {why}"),
            Error::Runtime(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    /// A runtime error is shown as itself, so its source is the runtime error's source (the
    /// OS error, where it keeps one); the other variants have none.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Runtime(error) => std::error::Error::source(&**error),
            _ => None,
        }
    }
}
