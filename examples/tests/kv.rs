//! Runs the `kv` example as a child process: the protocol, error lines, `/metrics` over
//! HTTP, acknowledged writes surviving SIGKILL, and a clean exit on SIGINT.

mod common;

use common::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

fn start(data: &std::path::Path) -> (Server, SocketAddr) {
    let mut server = Server::launch(
        env!("CARGO_BIN_EXE_kv"),
        "kv listening on",
        &["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()],
        &[],
    );
    let metrics = server.printed();
    let metrics = metrics
        .trim()
        .strip_prefix("kv metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected second line {metrics:?}"))
        .parse()
        .unwrap();
    (server, metrics)
}

fn http_get(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: kv\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn kv_serves_the_protocol_and_metrics_and_keeps_acknowledged_writes_across_sigkill() {
    let data = std::env::temp_dir().join(format!("kv-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, metrics) = start(&data);
    let mut client = server.connect();

    client.send(b"SET a 1\nSET b two words\nGET a\nGET b\n");
    assert_eq!(client.line(), "OK\n");
    assert_eq!(client.line(), "OK\n");
    assert_eq!(client.line(), "VALUE 1\n");
    assert_eq!(client.line(), "VALUE two words\n");
    client.send(b"DEL a\nGET a\nDEL nothing\n");
    assert_eq!(client.line(), "OK\n");
    assert_eq!(client.line(), "NOT_FOUND\n");
    assert_eq!(client.line(), "NOT_FOUND\n");

    // Malformed lines: error lines, and the connection stays.
    client.send(b"FETCH a\nGET\n\xff\nSET c 3\n");
    assert_eq!(
        client.line(),
        "ERR expected SET key value, GET key or DEL key\n"
    );
    assert_eq!(
        client.line(),
        "ERR expected SET key value, GET key or DEL key\n"
    );
    assert_eq!(client.line(), "ERR the line is not UTF-8\n");
    assert_eq!(client.line(), "OK\n");

    // An oversized line closes that connection only; a client leaving mid-line is harmless.
    let mut huge = server.connect();
    huge.send(&vec![b'x'; 64 * 1024 + 1]);
    assert_eq!(huge.line(), "ERR line longer than 65536 bytes; closing\n");
    assert!(huge.closed());
    let mut leaving = server.connect();
    leaving.send(b"SET half");
    drop(leaving);

    let exposition = http_get(metrics, "/metrics");
    assert!(
        exposition.starts_with("HTTP/1.1 200 OK\r\n"),
        "{exposition}"
    );
    assert!(
        exposition.contains("actor_messages_handled_total{actor=\"kv_store\"}"),
        "{exposition}"
    );
    assert!(exposition.trim_end().ends_with("# EOF"), "{exposition}");
    assert!(http_get(metrics, "/elsewhere").starts_with("HTTP/1.1 404 Not Found\r\n"));

    // A crash: every acknowledged write is there after a restart on the same data.
    server.kill();
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(b"GET a\nGET b\nGET c\n");
    assert_eq!(client.line(), "NOT_FOUND\n");
    assert_eq!(client.line(), "VALUE two words\n");
    assert_eq!(client.line(), "VALUE 3\n");

    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}
