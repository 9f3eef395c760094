//! `actors::Error` composes with the runtime's: `?` turns a `runtime::Error` into one, the
//! runtime error stays reachable (as itself and as the source chain), and the predicates see
//! through it.

use actors::Error;
use std::error::Error as _;
use std::io;
use std::net::SocketAddr;

fn dial(address: SocketAddr) -> Result<(), runtime::Error> {
    Err(runtime::Error::DialFailed(
        address,
        io::Error::from(io::ErrorKind::ConnectionRefused),
    ))
}

fn connect(address: SocketAddr) -> Result<(), Error> {
    dial(address)?;
    Ok(())
}

#[test]
fn question_mark_carries_a_runtime_error_out() {
    let address: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let error = connect(address).unwrap_err();
    assert_eq!(
        error.runtime_error(),
        Some(&runtime::Error::DialFailed(
            address,
            io::Error::from(io::ErrorKind::ConnectionRefused)
        ))
    );
    assert_eq!(
        error.to_string(),
        dial(address).unwrap_err().to_string(),
        "shown as the runtime error itself"
    );
    let source = error.source().expect("the OS error is the source");
    assert_eq!(
        source.downcast_ref::<io::Error>().map(io::Error::kind),
        Some(io::ErrorKind::ConnectionRefused)
    );
    assert_eq!(error.clone(), error, "still Clone and Eq");
}

#[test]
fn the_predicates_see_through_a_runtime_error() {
    assert!(Error::Timeout.is_timeout());
    assert!(Error::from(runtime::Error::Timeout).is_timeout());
    assert!(Error::Closed.is_closed());
    assert!(Error::from(runtime::Error::Closed).is_closed());
    assert!(!Error::Full.is_closed());
    assert!(!Error::Full.is_timeout());
    assert!(Error::Full.source().is_none());
    assert_ne!(
        Error::from(runtime::Error::Timeout),
        Error::Timeout,
        "a runtime timeout and an ask's deadline are told apart"
    );
}
