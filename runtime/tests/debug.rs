//! `Debug` of the public types: each shows what identifies the value (a context's label path
//! and node, a handle's task and state, a connection's addresses and descriptor, a blob's name
//! and length), so an application struct holding them can derive `Debug`.

use futures::channel::oneshot;
use runtime::net::{Listener, Sink, Stream};
use runtime::prelude::*;
use runtime::storage::Blob;
use runtime::{Context, Handle, Runner, Sleep};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// What an application keeps: deriving `Debug` over the runtime's types compiles.
#[derive(Debug)]
#[allow(dead_code)] // Read through `Debug` only.
struct App {
    context: Context,
    handle: Handle<()>,
    listener: Listener,
    sink: Sink,
    stream: Stream,
    blob: Blob,
    runner: Option<Runner>,
    sleep: Sleep,
}

/// The address a `{:?}` output shows after `key` (`key: 0x..` or `key: task@0x..`).
fn address_after<'a>(debug: &'a str, key: &str) -> &'a str {
    let start = debug
        .find(key)
        .unwrap_or_else(|| panic!("{key} in {debug}"))
        + key.len();
    let rest = &debug[start..];
    let start = rest
        .find("0x")
        .unwrap_or_else(|| panic!("an address in {rest}"));
    let rest = &rest[start..];
    let end = rest
        .find(|c: char| !c.is_ascii_hexdigit() && c != 'x')
        .unwrap_or(rest.len());
    &rest[..end]
}

/// A context shows its label path and attributes; a task's context shows the task's node, the
/// same address as the task's handle, which shows whether the task is still running.
#[runtime::test]
async fn context_and_handle_show_the_label_path_and_the_task(context: Context) {
    let root = format!("{context:?}");
    assert!(root.starts_with("Context {"), "{root}");
    assert!(root.contains("label: \"\""), "{root}");
    assert!(root.contains("node: scope@0x"), "{root}");

    let (seen, inside) = oneshot::channel();
    let (release, released) = oneshot::channel::<()>();
    let handle = context
        .child("server")
        .child("conn")
        .with_attribute("peer", 7)
        .spawn(move |context| async move {
            seen.send(format!("{context:?}")).unwrap();
            let _ = released.await;
        });
    let inside = inside.await.unwrap();
    assert!(inside.contains("label: \"server_conn\""), "{inside}");
    assert!(inside.contains("(\"peer\", \"7\")"), "{inside}");
    assert!(inside.contains("node: task@0x"), "{inside}");
    assert!(inside.contains("aborted: false"), "{inside}");

    let running = format!("{handle:?}");
    assert!(running.contains("state: running"), "{running}");
    assert_eq!(
        address_after(&running, "task: "),
        address_after(&inside, "node: task@"),
        "the handle names its task's node: {running} / {inside}"
    );

    release.send(()).unwrap();
    let mut handle = handle;
    (&mut handle).await.unwrap();
    let finished = format!("{handle:?}");
    assert!(finished.contains("state: finished"), "{finished}");
}

/// A spawn refused by an aborted context gives a handle that says so.
#[runtime::test]
async fn a_refused_handle_says_refused(context: Context) {
    let (seen, inside) = oneshot::channel();
    let parent = context.clone().spawn(move |context| async move {
        seen.send(context).unwrap();
        std::future::pending::<()>().await
    });
    let child_context = inside.await.unwrap();
    parent.abort();
    assert!(parent.await.is_err());
    let aborted = format!("{child_context:?}");
    assert!(aborted.contains("aborted: true"), "{aborted}");
    let refused = child_context.spawn(|_| async {});
    assert!(
        format!("{refused:?}").contains("state: refused"),
        "{refused:?}"
    );
}

/// The halves of a connection and a listener show their descriptor and addresses; a blob its
/// partition and hex name and its length. A derived `Debug` over all of them works.
#[runtime::test]
async fn io_types_show_their_addresses_and_names(context: Context) {
    let mut listener = context
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let (dialed, accepted) = futures::join!(context.dial(address), listener.accept());
    let (sink, mut stream) = dialed.unwrap();
    let (_, mut accepted_sink, _accepted_stream) = accepted.unwrap();

    let listener_debug = format!("{listener:?}");
    assert!(
        listener_debug.contains(&address.to_string()),
        "{listener_debug}"
    );
    assert!(listener_debug.contains("fd: "), "{listener_debug}");

    let sink_debug = format!("{sink:?}");
    assert!(
        sink_debug.contains(&format!("peer: Some({address})")),
        "{sink_debug}"
    );
    assert!(sink_debug.contains("broken: false"), "{sink_debug}");

    accepted_sink.send(&b"hello"[..]).await.unwrap();
    let first = stream.recv(1).await.unwrap();
    assert_eq!(first.len(), 1);
    let stream_debug = format!("{stream:?}");
    assert!(
        stream_debug.contains(&format!("peer: Some({address})")),
        "{stream_debug}"
    );
    assert!(
        stream_debug.contains("local: Some(127.0.0.1:"),
        "{stream_debug}"
    );
    assert!(stream_debug.contains("fd: "), "{stream_debug}");
    // What was received and not yet returned is counted, never printed.
    assert!(!stream_debug.contains("ello"), "{stream_debug}");

    let (blob, _) = context.open("debug_part", b"\x01name").await.unwrap();
    blob.write_at(0, &b"12345"[..], Default::default())
        .await
        .unwrap();
    let blob_debug = format!("{blob:?}");
    assert!(
        blob_debug.contains("label: \"debug_part/016e616d65\""),
        "{blob_debug}"
    );
    assert!(blob_debug.contains("len: Some(5)"), "{blob_debug}");

    let app = App {
        handle: context.clone().spawn(|_| async {}),
        context: context.child("app"),
        listener,
        sink,
        stream,
        blob,
        runner: None,
        sleep: Sleep::new(Duration::from_secs(1)),
    };
    let app_debug = format!("{app:?}");
    for part in [
        "label: \"app\"",
        "Handle {",
        "Listener {",
        "Sink {",
        "Stream {",
        "Blob {",
        "Sleep {",
    ] {
        assert!(app_debug.contains(part), "{part} in {app_debug}");
    }
}

/// A runner shows its configuration.
#[test]
fn a_runner_shows_its_config() {
    let runner = Runner::new(runtime::Config::new().with_worker_threads(3));
    let debug = format!("{runner:?}");
    assert!(debug.contains("worker_threads: 3"), "{debug}");
}
