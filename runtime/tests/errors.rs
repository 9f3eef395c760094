//! `runtime::Error` composes: equality compares what an error shows, the OS error is its
//! source, and the predicates answer without matching every variant.

use runtime::Error;
use std::error::Error as _;
use std::io;
use std::net::SocketAddr;

fn refused() -> io::Error {
    io::Error::from_raw_os_error(libc_econnrefused())
}

fn libc_econnrefused() -> i32 {
    // ECONNREFUSED on Linux.
    111
}

#[test]
fn errors_of_one_variant_with_different_fields_differ() {
    let first: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let second: SocketAddr = "127.0.0.1:2".parse().unwrap();
    assert_ne!(
        Error::DialFailed(first, refused()),
        Error::DialFailed(second, refused()),
        "the address is shown, so it is compared"
    );
    assert_ne!(
        Error::DialFailed(first, refused()),
        Error::DialFailed(first, io::Error::from(io::ErrorKind::TimedOut)),
        "the OS error is shown, so it is compared"
    );
    assert_ne!(
        Error::ResolveFailed("no such host".into()),
        Error::ResolveFailed("no address".into())
    );
    assert_ne!(
        Error::BlobTooShort {
            blob: "p/00".into(),
            offset: 0,
            len: 4,
            end: 2
        },
        Error::BlobTooShort {
            blob: "p/00".into(),
            offset: 1,
            len: 4,
            end: 2
        }
    );
    assert_ne!(Error::Closed, Error::Timeout);
}

#[test]
fn errors_that_show_the_same_are_equal() {
    let address: SocketAddr = "127.0.0.1:1".parse().unwrap();
    assert_eq!(
        Error::DialFailed(address, refused()),
        Error::DialFailed(address, refused())
    );
    assert_eq!(
        Error::RecvFailed(io::Error::other("peer gone")),
        Error::RecvFailed(io::Error::other("peer gone"))
    );
    assert_ne!(
        Error::RecvFailed(io::Error::other("peer gone")),
        Error::RecvFailed(io::Error::other("peer reset"))
    );
    assert_eq!(Error::Closed, Error::Closed);
}

#[test]
fn the_os_error_is_the_source() {
    let address: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let error = Error::BindFailed(address, refused());
    let source = error.source().expect("a bind failure keeps the OS error");
    let io = source
        .downcast_ref::<io::Error>()
        .expect("the source is the io::Error");
    assert_eq!(io.raw_os_error(), Some(libc_econnrefused()));
    assert_eq!(
        error.io_error().and_then(io::Error::raw_os_error),
        Some(libc_econnrefused())
    );
    assert!(Error::Timeout.source().is_none());
    assert!(Error::Closed.io_error().is_none());
}

#[test]
fn the_predicates_see_through_the_variants() {
    assert!(Error::Timeout.is_timeout());
    assert!(Error::RecvFailed(io::Error::from(io::ErrorKind::TimedOut)).is_timeout());
    assert!(!Error::RecvFailed(refused()).is_timeout());
    assert!(!Error::Closed.is_timeout());
    assert!(Error::Closed.is_closed());
    assert!(!Error::Exited.is_closed());
}

/// `?` carries a runtime error into `Box<dyn Error>` and `io`-free callers alike.
#[test]
fn a_runtime_error_is_a_std_error() {
    fn fails() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Err(Error::Timeout)?;
        Ok(())
    }
    let error = fails().unwrap_err();
    assert!(error.downcast_ref::<Error>().is_some_and(Error::is_timeout));
}
