//! Runs the `kv` example as a child process: the Redis protocol (inline commands and RESP
//! arrays, every command it answers, pipelining, errors in Redis's words, malformed frames
//! closing only their connection), `/metrics` over HTTP, acknowledged writes surviving
//! SIGKILL, and a clean exit on SIGINT.

mod common;

use common::{Client, Server};
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

/// `command` as a RESP array of bulk strings.
fn frame(command: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", command.len()).into_bytes();
    for argument in command {
        out.extend_from_slice(format!("${}\r\n", argument.len()).as_bytes());
        out.extend_from_slice(argument);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The next reply, written compactly: `+OK`, `-ERR ...`, `:3`, `$value`, `$nil`,
/// `*[a, b]`.
fn reply(client: &mut Client) -> String {
    let line = client.line();
    let line = line.strip_suffix("\r\n").unwrap_or(&line).to_string();
    match line.as_bytes().first() {
        Some(b'$') if line == "$-1" => "$nil".into(),
        Some(b'$') => {
            let len: usize = line[1..].parse().unwrap();
            let mut value = vec![0; len + 2];
            client.reader.read_exact(&mut value).unwrap();
            assert_eq!(&value[len..], b"\r\n");
            format!("${}", String::from_utf8_lossy(&value[..len]))
        }
        Some(b'*') => {
            let count: usize = line[1..].parse().unwrap();
            let items: Vec<String> = (0..count).map(|_| reply(client)).collect();
            format!("*[{}]", items.join(", "))
        }
        _ => line,
    }
}

#[test]
fn kv_speaks_resp_serves_metrics_and_keeps_acknowledged_writes_across_sigkill() {
    let data = std::env::temp_dir().join(format!("kv-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, metrics) = start(&data);
    let mut client = server.connect();

    // Inline commands, as `nc` sends them.
    client.send(b"PING\r\nSET a 1\r\nSET b \"two words\"\r\nGET a\r\nGET b\r\nGET none\r\n");
    for expected in ["+PONG", "+OK", "+OK", "$1", "$two words", "$nil"] {
        assert_eq!(reply(&mut client), expected);
    }
    // RESP arrays, as client libraries send them; binary-safe bulk strings.
    client.send(&frame(&[b"SET", b"c", b"3\r\n"]));
    client.send(&frame(&[b"GET", b"c"]));
    client.send(&frame(&[b"ECHO", b"hi"]));
    client.send(&frame(&[b"PING", b"there"]));
    for expected in ["+OK", "$3\r\n", "$hi", "$there"] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(b"SET a 9 NX\r\nSET new 1 NX\r\nSET missing 1 XX\r\nSET a 10 XX\r\nGET a\r\n");
    for expected in ["$nil", "+OK", "$nil", "+OK", "$10"] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(b"EXISTS a b zzz a\r\nDEL a zzz\r\nEXISTS a\r\nDBSIZE\r\nCOMMAND DOCS\r\n");
    for expected in [":3", ":1", ":0", ":3", "*[]"] {
        assert_eq!(reply(&mut client), expected);
    }

    // Counters, many keys at once, and what clients ask as they start.
    client.send(b"INCR n\r\nINCRBY n 10\r\nDECR n\r\nDECRBY n -5\r\nINCR b\r\nINCRBY n x\r\n");
    for expected in [
        ":1",
        ":11",
        ":10",
        ":15",
        "-ERR value is not an integer or out of range",
        "-ERR value is not an integer or out of range",
    ] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(b"SET big 9223372036854775807\r\nINCR big\r\nMSET m1 x m2 y\r\nMGET m1 none m2\r\nMSET odd\r\n");
    for expected in [
        "+OK",
        "-ERR increment or decrement would overflow",
        "+OK",
        "*[$x, $nil, $y]",
        "-ERR wrong number of arguments for 'mset' command",
    ] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(b"HELLO 3\r\nCLIENT SETNAME me\r\nCONFIG GET appendonly\r\nCONFIG GET nothing\r\n");
    for expected in [
        "-NOPROTO unsupported protocol version",
        "+OK",
        "*[$appendonly, $yes]",
        "*[]",
    ] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(b"INFO\r\n");
    let info = reply(&mut client);
    assert!(
        info.contains("redis_version:") && info.contains("db0:keys="),
        "{info}"
    );
    client.send(b"DEL n big m1 m2\r\n");
    assert_eq!(reply(&mut client), ":4");

    // Errors, in Redis's words; the connection stays.
    client.send(b"FETCH a b\r\nGET\r\nSET k\r\nSET k v EX 10\r\nSET k v SOMETHING\r\n");
    for expected in [
        "-ERR unknown command 'FETCH', with args beginning with: 'a' 'b' ",
        "-ERR wrong number of arguments for 'get' command",
        "-ERR wrong number of arguments for 'set' command",
        "-ERR SET EX is not supported yet",
        "-ERR syntax error",
    ] {
        assert_eq!(reply(&mut client), expected);
    }

    // A thousand commands in one write: a thousand answers, in order.
    let mut pipeline = Vec::new();
    for index in 0..1000 {
        pipeline.extend_from_slice(&frame(&[b"SET", format!("p{index}").as_bytes(), b"v"]));
        pipeline.extend_from_slice(&frame(&[b"GET", format!("p{index}").as_bytes()]));
    }
    client.send(&pipeline);
    for _ in 0..1000 {
        assert_eq!(reply(&mut client), "+OK");
        assert_eq!(reply(&mut client), "$v");
    }

    // Malformed frames: the error, then that connection closes; the others go on.
    for (bad, error) in [
        (
            &b"*1\r\n+OK\r\n"[..],
            "-ERR Protocol error: expected '$', got '+'",
        ),
        (b"*1\r\n$-3\r\n", "-ERR Protocol error: invalid bulk length"),
        (b"*x\r\n", "-ERR Protocol error: invalid multibulk length"),
        (
            b"*1\r\n$10485760\r\n",
            "-ERR Protocol error: invalid bulk length",
        ),
        (
            b"*1\r\n$2\r\nabc\r\n",
            "-ERR Protocol error: expected CRLF after a bulk string",
        ),
        (
            b"SET \"open\r\n",
            "-ERR Protocol error: unbalanced quotes in request",
        ),
    ] {
        let mut broken = server.connect();
        broken.send(bad);
        assert_eq!(reply(&mut broken), error);
        assert!(broken.closed());
    }
    // A client leaving in the middle of a frame is harmless.
    let mut leaving = server.connect();
    leaving.send(b"*2\r\n$3\r\nSET\r\n$5\r\nhal");
    drop(leaving);
    client.send(b"PING\r\n");
    assert_eq!(reply(&mut client), "+PONG");

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

    // QUIT answers, then closes.
    let mut quitting = server.connect();
    quitting.send(b"QUIT\r\n");
    assert_eq!(reply(&mut quitting), "+OK");
    assert!(quitting.closed());

    // A crash: every acknowledged write is there after a restart on the same data.
    server.kill();
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(b"GET a\r\nGET b\r\nGET c\r\nGET p999\r\nDBSIZE\r\n");
    for expected in ["$nil", "$two words", "$3\r\n", "$v", ":1003"] {
        assert_eq!(reply(&mut client), expected);
    }

    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

#[test]
fn flushall_empties_the_store_for_good() {
    let data = std::env::temp_dir().join(format!("kv-flush-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(b"MSET a 1 b 2\r\nFLUSHALL\r\nDBSIZE\r\nSET c 3\r\n");
    for expected in ["+OK", "+OK", ":0", "+OK"] {
        assert_eq!(reply(&mut client), expected);
    }
    // After a crash the flush holds, and what came after it is there.
    server.kill();
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(b"DBSIZE\r\nGET a\r\nGET c\r\n");
    for expected in [":1", "$nil", "$3"] {
        assert_eq!(reply(&mut client), expected);
    }
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// Writes from many clients at once, committed in groups: every acknowledged one is there
/// after a crash.
#[test]
fn concurrent_writes_are_committed_in_groups_and_survive_sigkill() {
    const CLIENTS: usize = 20;
    const WRITES: usize = 50;
    let data = std::env::temp_dir().join(format!("kv-group-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let server = &server;
            scope.spawn(move || {
                let mut connection = server.connect();
                // Each client pipelines its writes; all are in flight together.
                let mut writes = Vec::new();
                for write in 0..WRITES {
                    writes.extend_from_slice(
                        format!("SET c{client}-w{write} v{write}\r\n").as_bytes(),
                    );
                }
                connection.send(&writes);
                for _ in 0..WRITES {
                    assert_eq!(reply(&mut connection), "+OK");
                }
            });
        }
    });
    server.kill();
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(b"DBSIZE\r\n");
    assert_eq!(reply(&mut client), format!(":{}", CLIENTS * WRITES));
    for client_index in [0, CLIENTS - 1] {
        client.send(format!("GET c{client_index}-w{}\r\n", WRITES - 1).as_bytes());
        assert_eq!(reply(&mut client), format!("$v{}", WRITES - 1));
    }
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// `/metrics` is bounded: a request whose headers pass 16 KiB is refused with 431, a client
/// that never finishes its request is closed at the deadline, and a flood of such clients
/// holds at most 64 connections, none past the deadline.
#[test]
fn metrics_requests_are_bounded_in_size_time_and_number() {
    let data = std::env::temp_dir().join(format!("kv-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let mut server = Server::launch(
        env!("CARGO_BIN_EXE_kv"),
        "kv listening on",
        &["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()],
        &[("KV_METRICS_DEADLINE_MS", "300")],
    );
    let metrics: SocketAddr = server
        .printed()
        .trim()
        .strip_prefix("kv metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap()
        .parse()
        .unwrap();

    let mut heavy = TcpStream::connect(metrics).unwrap();
    let mut request = String::from("GET /metrics HTTP/1.1\r\n");
    for index in 0..1000 {
        request.push_str(&format!("X-Filler-{index}: {}\r\n", "f".repeat(40)));
    }
    request.push_str("\r\n");
    heavy.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = heavy.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{response:?}"
    );

    // A flood of requests that never end.
    let mut flood: Vec<TcpStream> = (0..70)
        .map(|_| {
            let mut stream = TcpStream::connect(metrics).unwrap();
            write!(stream, "GET /metrics HTTP/1.1\r\nHost: kv\r\n").unwrap();
            stream
        })
        .collect();
    // Each is closed unanswered: at once past the bound, at the deadline otherwise.
    for stream in &mut flood {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut rest = Vec::new();
        match stream.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(error) => panic!("the server did not close a stalled request: {error}"),
        }
        assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    }
    // Then a whole request is served.
    assert!(http_get(metrics, "/metrics").starts_with("HTTP/1.1 200 OK\r\n"));
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}
