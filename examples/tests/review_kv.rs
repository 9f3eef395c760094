//! Adversarial review of the kv service as an OTP tree: each test asserts what the docs
//! promise, and fails on the bug it is named for.

use actors::ExitReason;
use actors::prelude::*;
use examples::kv;

/// `kv::acceptor`'s invariants: "The port closes with the tree: the slot belongs to the
/// child's spec, which its supervisor drops once it is done with the child for good". A
/// static supervisor keeps every slot (and so every spec and the `Listening` its factory
/// holds) until its own state goes: an acceptor stopped for good by its ref leaves its port
/// bound and listening, accepting into the kernel's backlog connections nobody will ever
/// serve, for as long as the tree runs.
#[runtime::test(timeout = "60s")]
async fn an_acceptor_stopped_for_good_closes_its_port(context: runtime::Context) {
    let loopback = "127.0.0.1:0".parse().unwrap();
    let service = kv::serve(&context, loopback, loopback)
        .await
        .expect("kv starts");
    assert_eq!(service.acceptor.stop().await, ExitReason::Stopped);
    assert_eq!(
        service.acceptor.address().await,
        Err(actors::Error::Closed),
        "done for good"
    );
    let dialed = context.dial(service.address).await;
    assert!(
        dialed.is_err(),
        "{} still accepts connections that nobody serves",
        service.address
    );
    assert_eq!(service.supervisor.stop().await, ExitReason::Stopped);
}
