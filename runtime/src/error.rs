//! The runtime's one error type, shared by every layer.

use std::fmt::Display;

/// Errors of runtime operations.
///
/// Errors compare by what they show: the same variant with the same fields, where two
/// [`io::Error`](std::io::Error)s are equal when their kind, their OS error code and their
/// message are (an `io::Error` has no equality of its own). So `assert_eq!(result,
/// Err(Error::Closed))` works, and two `BindFailed`s for different addresses differ.
///
/// Variants that carry an `io::Error` keep the operating system's error (its `kind()` and
/// `raw_os_error()`) and give it as their [`source`](std::error::Error::source); an I/O
/// timeout is an error of kind `TimedOut`. To ask what happened without matching every
/// variant, use the predicates: [`is_timeout`](Error::is_timeout),
/// [`is_closed`](Error::is_closed) and [`io_error`](Error::io_error).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The task was aborted, cancelled, refused or shut down, or its worker failed to start,
    /// or its future's destructor panicked before the result was published.
    Closed,
    /// The task panicked while panics are caught.
    Exited,
    /// The deadline passed first.
    Timeout,
    /// A read could not be observed: the worker that issued it closed before its result was
    /// taken, or it was polled where no runtime worker runs.
    ReadFailed,
    /// A write could not be issued: it was first polled where no runtime worker runs, or on a
    /// worker that is closing.
    WriteFailed,
    /// A host name could not be resolved (or the runtime has shut down); says why.
    ResolveFailed(String),
    /// A partition name is empty or holds a byte outside `[A-Za-z0-9_-]`.
    PartitionNameInvalid,
    /// A context label (or an attribute key) is empty or holds a character outside
    /// `[A-Za-z0-9_]`; names the label given.
    LabelInvalid(String),
    /// The runner's configuration was refused before anything was created: names the field,
    /// the value given and what is allowed.
    ConfigInvalid(String),
    /// The runner could not start (its storage directory cannot be created or is in use by
    /// another runner, or io_uring cannot be set up): says why and what to do. Nothing of
    /// the program ran.
    StartFailed(String),
    /// The process cannot watch signals (out of descriptors or threads, or a child forked
    /// without exec from the process that watches them): says why. A later wait tries again.
    SignalsUnavailable(String),
    /// The partition does not exist.
    PartitionMissing(String),
    /// The blob (`partition/hex(name)`) does not exist.
    BlobMissing(String),
    /// A blob operation failed; names the blob (`partition/hex(name)`) and keeps the OS error.
    BlobFailed(String, std::io::Error),
    /// A read of `len` bytes at `offset` reaches past the blob's end, which is `end`.
    BlobTooShort {
        /// The blob, as `partition/hex(name)`.
        blob: String,
        /// Where the read started.
        offset: u64,
        /// How many bytes it asked for.
        len: usize,
        /// The blob's length when the read hit its end.
        end: u64,
    },
    /// A page of a paged blob fails its checksum (or is shorter than its place requires): the
    /// bytes were damaged after they were written. Names the blob and the page's offset in it;
    /// the page's bytes are never returned as data.
    BlobCorrupt {
        /// The blob, as `partition/hex(name)`.
        blob: String,
        /// Where the damaged page starts in the blob (its physical offset).
        offset: u64,
    },
    /// Opening a paged blob strictly found a tail that recovery would cut (a crash may have
    /// torn it, or it was damaged): refused, and nothing was changed. Names the blob, where
    /// the bytes that would be cut start (a physical offset) and how many there are, and why
    /// they would be cut.
    BlobTorn {
        /// The blob, as `partition/hex(name)`.
        blob: String,
        /// Where the first byte that would be cut is in the blob.
        offset: u64,
        /// How many bytes would be cut, from `offset` on.
        len: u64,
        /// Why they would be cut.
        what: String,
    },
    /// Binding a listener to the address failed.
    BindFailed(std::net::SocketAddr, std::io::Error),
    /// Connecting to the address failed or timed out.
    DialFailed(std::net::SocketAddr, std::io::Error),
    /// Accepting a connection failed.
    AcceptFailed(std::io::Error),
    /// Sending failed, timed out, or the peer reset the connection.
    SendFailed(std::io::Error),
    /// Receiving failed, timed out, or the peer closed the connection before the bytes asked
    /// for arrived (kind `UnexpectedEof`).
    RecvFailed(std::io::Error),
}

impl Error {
    /// Whether a deadline passed: [`Error::Timeout`], or an I/O error of kind `TimedOut`
    /// (a dial, send or receive past the configured timeouts).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Timeout => true,
            _ => self
                .io_error()
                .is_some_and(|error| error.kind() == std::io::ErrorKind::TimedOut),
        }
    }

    /// Whether the task or the runtime went away: [`Error::Closed`] (aborted, cancelled,
    /// refused or shut down).
    pub fn is_closed(&self) -> bool {
        matches!(self, Error::Closed)
    }

    /// The operating system's error, for the variants that keep one.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            Error::BlobFailed(_, error)
            | Error::BindFailed(_, error)
            | Error::DialFailed(_, error)
            | Error::AcceptFailed(error)
            | Error::SendFailed(error)
            | Error::RecvFailed(error) => Some(error),
            _ => None,
        }
    }
}

/// Two I/O errors are equal when they show the same: kind, OS code and message.
fn same_io_error(a: &std::io::Error, b: &std::io::Error) -> bool {
    a.kind() == b.kind() && a.raw_os_error() == b.raw_os_error() && a.to_string() == b.to_string()
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        use Error::*;
        match (self, other) {
            (Closed, Closed)
            | (Exited, Exited)
            | (Timeout, Timeout)
            | (ReadFailed, ReadFailed)
            | (WriteFailed, WriteFailed)
            | (PartitionNameInvalid, PartitionNameInvalid) => true,
            (ResolveFailed(a), ResolveFailed(b))
            | (LabelInvalid(a), LabelInvalid(b))
            | (ConfigInvalid(a), ConfigInvalid(b))
            | (StartFailed(a), StartFailed(b))
            | (SignalsUnavailable(a), SignalsUnavailable(b))
            | (PartitionMissing(a), PartitionMissing(b))
            | (BlobMissing(a), BlobMissing(b)) => a == b,
            (BlobFailed(a, e), BlobFailed(b, f)) => a == b && same_io_error(e, f),
            (
                BlobTooShort {
                    blob: a,
                    offset: o,
                    len: l,
                    end: e,
                },
                BlobTooShort {
                    blob: b,
                    offset: p,
                    len: m,
                    end: f,
                },
            ) => (a, o, l, e) == (b, p, m, f),
            (BlobCorrupt { blob: a, offset: o }, BlobCorrupt { blob: b, offset: p }) => {
                (a, o) == (b, p)
            }
            (
                BlobTorn {
                    blob: a,
                    offset: o,
                    len: l,
                    what: w,
                },
                BlobTorn {
                    blob: b,
                    offset: p,
                    len: m,
                    what: x,
                },
            ) => (a, o, l, w) == (b, p, m, x),
            (BindFailed(a, e), BindFailed(b, f)) | (DialFailed(a, e), DialFailed(b, f)) => {
                a == b && same_io_error(e, f)
            }
            (AcceptFailed(e), AcceptFailed(f))
            | (SendFailed(e), SendFailed(f))
            | (RecvFailed(e), RecvFailed(f)) => same_io_error(e, f),
            _ => false,
        }
    }
}

impl Eq for Error {}

impl Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Closed => f.write_str("closed: the task was aborted, cancelled or shut down"),
            Error::Exited => f.write_str("exited: the task panicked"),
            Error::Timeout => f.write_str("timed out"),
            Error::ReadFailed => f.write_str(
                "read failed: the worker that issued it closed before its result was taken, or \
                 it was polled off the runtime's workers",
            ),
            Error::WriteFailed => f.write_str(
                "write failed: it was first polled off the runtime's workers or on a closing \
                 worker",
            ),
            Error::ResolveFailed(why) => write!(f, "resolve failed: {why}"),
            Error::PartitionNameInvalid => f.write_str(
                "partition name invalid: allowed are non-empty names of ASCII letters, digits, \
                 '_' and '-'",
            ),
            Error::LabelInvalid(label) => write!(
                f,
                "invalid label {label:?}: a label is non-empty and made of ASCII letters, \
                 digits and '_'"
            ),
            Error::ConfigInvalid(why) => write!(f, "invalid runtime configuration: {why}"),
            Error::StartFailed(why) => write!(f, "the runner could not start: {why}"),
            Error::SignalsUnavailable(why) => write!(f, "signals cannot be watched: {why}"),
            Error::PartitionMissing(partition) => {
                write!(f, "partition {partition:?} does not exist")
            }
            Error::BlobMissing(blob) => write!(f, "blob {blob} does not exist"),
            Error::BlobFailed(blob, error) => write!(f, "blob {blob}: {error}"),
            Error::BlobTooShort {
                blob,
                offset,
                len,
                end,
            } => write!(
                f,
                "blob {blob}: reading {len} bytes at offset {offset} reaches past its end at {end}"
            ),
            Error::BlobCorrupt { blob, offset } => write!(
                f,
                "blob {blob}: the page at offset {offset} is corrupt (no checksum in its \
                 trailer matches its bytes)"
            ),
            Error::BlobTorn {
                blob,
                offset,
                len,
                what,
            } if *len == 0 => write!(
                f,
                "blob {blob}: opening it strictly found bytes missing from its end at offset \
                 {offset} ({what}); refused, nothing was changed"
            ),
            Error::BlobTorn {
                blob,
                offset,
                len,
                what,
            } => write!(
                f,
                "blob {blob}: opening it strictly would cut {len} bytes at offset {offset} \
                 ({what}); refused, nothing was changed"
            ),
            Error::BindFailed(address, error) => write!(f, "bind to {address} failed: {error}"),
            Error::DialFailed(address, error) => write!(f, "dial to {address} failed: {error}"),
            Error::AcceptFailed(error) => write!(f, "accept failed: {error}"),
            Error::SendFailed(error) => write!(f, "send failed: {error}"),
            Error::RecvFailed(error) => write!(f, "recv failed: {error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io_error()
            .map(|error| error as &(dyn std::error::Error + 'static))
    }
}

/// An [`io::Error`](std::io::Error) for code that speaks `std::io` or `futures::io` (the
/// `AsyncRead`/`AsyncWrite` impls of a connection's halves use it): the kind is the OS
/// error's for variants that carry one (a read/write timeout is `TimedOut`), else the
/// nearest kind (`Timeout` is `TimedOut`, a missing blob `NotFound`, a short blob
/// `UnexpectedEof`, a damaged one `InvalidData`, an invalid partition name, label or
/// configuration `InvalidInput`, a closed task `ConnectionAborted`, the rest `Other`). The runtime error itself is the
/// io error's payload: `get_ref()` and `into_inner()` give it back (downcast to `Error`),
/// and its message is the io error's.
impl From<Error> for std::io::Error {
    fn from(error: Error) -> Self {
        use std::io::ErrorKind;
        let kind = match &error {
            Error::BlobFailed(_, error)
            | Error::BindFailed(_, error)
            | Error::DialFailed(_, error)
            | Error::AcceptFailed(error)
            | Error::SendFailed(error)
            | Error::RecvFailed(error) => error.kind(),
            Error::Timeout => ErrorKind::TimedOut,
            Error::Closed => ErrorKind::ConnectionAborted,
            Error::PartitionMissing(_) | Error::BlobMissing(_) => ErrorKind::NotFound,
            Error::BlobTooShort { .. } => ErrorKind::UnexpectedEof,
            Error::BlobCorrupt { .. } | Error::BlobTorn { .. } => ErrorKind::InvalidData,
            Error::PartitionNameInvalid | Error::LabelInvalid(_) | Error::ConfigInvalid(_) => {
                ErrorKind::InvalidInput
            }
            Error::Exited
            | Error::ReadFailed
            | Error::WriteFailed
            | Error::ResolveFailed(_)
            | Error::StartFailed(_)
            | Error::SignalsUnavailable(_) => ErrorKind::Other,
        };
        std::io::Error::new(kind, error)
    }
}
