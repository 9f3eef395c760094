//! Runs the `kv` example as a child process: the Redis protocol (inline commands and RESP
//! arrays, every command it answers, pipelining, errors in Redis's words, malformed frames
//! closing only their connection), `/metrics` over HTTP, acknowledged writes surviving
//! SIGKILL, expiry (expired keys never back after a restart), damage refused with its file
//! and offset and repaired on request, the log rewritten as it grows, and a clean exit on
//! SIGINT.

mod common;

use common::{Client, Server, frame, launch_kv};
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

/// The next reply, written compactly: `+OK`, `-ERR ...`, `:3`, `$value`, `$nil`,
/// `*[a, b]`, `*nil`.
fn reply(client: &mut Client) -> String {
    let line = client.line();
    let line = line.strip_suffix("\r\n").unwrap_or(&line).to_string();
    match line.as_bytes().first() {
        Some(b'$') if line == "$-1" => "$nil".into(),
        Some(b'*') if line == "*-1" => "*nil".into(),
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
    client.send(b"EXISTS a b zzz a\r\nDEL a zzz\r\nEXISTS a\r\nDBSIZE\r\nCOMMAND DOCS get\r\n");
    for expected in [
        ":3",
        ":1",
        ":0",
        ":3",
        "*[$get, *[$summary, $Returns the value of a key., $group, $string]]",
    ] {
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
    client.send(b"FETCH a b\r\nGET\r\nSET k\r\nSET k v SOMETHING\r\nSET k v NX XX\r\n");
    for expected in [
        "-ERR unknown command 'FETCH', with args beginning with: 'a' 'b' ",
        "-ERR wrong number of arguments for 'get' command",
        "-ERR wrong number of arguments for 'set' command",
        "-ERR syntax error",
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
    // Past the bound each is answered 503 at once; within it, closed unanswered at the
    // deadline.
    let mut unavailable = 0;
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
        if !rest.is_empty() {
            assert_eq!(
                String::from_utf8_lossy(&rest),
                "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            unavailable += 1;
        }
    }
    assert!(unavailable >= 70 - 64, "{unavailable} answered 503");
    // Then a whole request is served.
    assert!(http_get(metrics, "/metrics").starts_with("HTTP/1.1 200 OK\r\n"));
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// At the connection limit (`KV_MAX_CONNECTIONS`, 5 here), a burst of connections, each
/// sending a command at once as a real client does, is answered: every connection past the
/// limit reads Redis's whole error line and then end-of-stream (no reset, nothing silent),
/// and the connections admitted are served.
#[test]
fn connections_past_the_limit_are_told_so_never_closed_silently() {
    const LIMIT: usize = 5;
    const BURST: usize = 200;
    let (server, data) = launch_kv("limit", &[("KV_MAX_CONNECTIONS", "5")]);
    let mut admitted = server.burst(
        BURST,
        b"PING\r\n",
        |line| line == "+PONG\r\n",
        "-ERR max number of clients reached\r\n",
    );
    assert_eq!(admitted.len(), LIMIT, "the limit's connections are served");
    for client in &mut admitted {
        client.send(&frame(&[b"ECHO", b"still here"]));
        assert_eq!(reply(client), "$still here");
    }
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// Keys expire as Redis's do (`EX`, `PX`, `EXAT`, `PXAT`, `KEEPTTL`, `EXPIRE`, `PERSIST`,
/// `TTL`, `PTTL`; `INCR` keeps the expiry), and a key that expired, before a crash or while
/// the service was down, is not there after the restart.
#[test]
fn keys_expire_and_expired_keys_never_come_back() {
    let data = std::env::temp_dir().join(format!("kv-expiry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(
        b"SET short v PX 150\r\nSET long v EX 1000\r\nSET plain v\r\nSET past v PXAT 1\r\n\
          GET past\r\nSET bad v EX 0\r\nSET bad v EX x\r\nSET bad v EX 10 PX 10\r\n\
          SET bad v EX\r\nGET bad\r\n",
    );
    for expected in [
        "+OK",
        "+OK",
        "+OK",
        "+OK",
        "$nil",
        "-ERR invalid expire time in 'set' command",
        "-ERR value is not an integer or out of range",
        "-ERR syntax error",
        "-ERR syntax error",
        "$nil",
    ] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(
        b"TTL long\r\nPTTL plain\r\nPTTL nothing\r\nEXPIRE plain 100\r\nTTL plain\r\n\
          PERSIST plain\r\nPERSIST plain\r\nTTL plain\r\nEXPIRE missing 10\r\n\
          SET counter 5 EX 1000\r\nINCR counter\r\nTTL counter\r\nSET long w KEEPTTL\r\n\
          TTL long\r\nGET long\r\n",
    );
    for expected in [
        ":1000", ":-1", ":-2", ":1", ":100", ":1", ":0", ":-1", ":0", "+OK", ":6", ":1000", "+OK",
        ":1000", "$w",
    ] {
        assert_eq!(reply(&mut client), expected);
    }
    // A key past its deadline is gone (found so by the command, or swept).
    let waiting = std::time::Instant::now();
    loop {
        client.send(b"GET short\r\n");
        if reply(&mut client) == "$nil" {
            break;
        }
        assert!(waiting.elapsed() < std::time::Duration::from_secs(20));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // One more that expires while the service is down.
    client.send(b"SET later v PX 300\r\n");
    assert_eq!(reply(&mut client), "+OK");
    let later = std::time::Instant::now() + std::time::Duration::from_millis(300);
    server.kill();
    // The deadline passes with the service down: what is tested is the wall clock.
    std::thread::sleep(later.saturating_duration_since(std::time::Instant::now()));
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(b"GET short\r\nGET later\r\nGET past\r\nGET counter\r\nGET long\r\nDBSIZE\r\n");
    for expected in ["$nil", "$nil", "$nil", "$6", "$w", ":3"] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(b"TTL long\r\nTTL plain\r\n");
    let left: i64 = reply(&mut client)[1..].parse().unwrap();
    assert!((990..=1000).contains(&left), "{left}");
    assert_eq!(reply(&mut client), ":-1");
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// The bytes of a page and its trailer in the log's file.
const PHYSICAL: usize = 4096 + 12;

/// The store's log files under `data`, by their decoded names.
fn logs(data: &std::path::Path) -> Vec<(String, std::path::PathBuf)> {
    let mut logs: Vec<_> = std::fs::read_dir(data.join("kv"))
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            let hex = path.file_name().unwrap().to_str().unwrap().to_string();
            // Bytes a recovery cut, kept beside the logs (`<hex>.cut-<offset>`), are not logs.
            if hex.contains('.') {
                return None;
            }
            let name: Vec<u8> = (0..hex.len() / 2)
                .map(|at| u8::from_str_radix(&hex[2 * at..2 * at + 2], 16).unwrap())
                .collect();
            Some((String::from_utf8(name).unwrap(), path))
        })
        .collect();
    logs.sort();
    logs
}

/// Runs `kv` on `data`, which must refuse to start; what it printed on stderr.
fn refused(data: &std::path::Path, extra: &[&str]) -> String {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _watchdog = common::Watchdog::new(child.id());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    stderr
}

/// Damage anywhere in the log (a flipped byte mid-log, a zeroed page, page 0, the last page)
/// stops the start with the file and the offset and changes nothing; a torn tail is refused
/// by `--strict`, else kept beside the log, cut and reported in the metrics; `--repair` copies the damaged log aside and keeps exactly the records that
/// verify, on both sides of the damage.
#[test]
fn damage_stops_the_start_and_repair_keeps_every_record_that_verifies() {
    let data = std::env::temp_dir().join(format!("kv-damage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    let value = |index: usize| format!("{index:0>200}");
    let mut writes = Vec::new();
    for index in 0..300 {
        writes.extend_from_slice(&frame(&[
            b"SET",
            format!("k{index}").as_bytes(),
            value(index).as_bytes(),
        ]));
    }
    writes.extend_from_slice(b"DEL k0 k1 k2\r\n");
    client.send(&writes);
    for _ in 0..300 {
        assert_eq!(reply(&mut client), "+OK");
    }
    assert_eq!(reply(&mut client), ":3");
    server.kill();
    let [(name, path)] = &logs(&data)[..] else {
        panic!("one log: {:?}", logs(&data));
    };
    assert_eq!(name, "log.1");
    let original = std::fs::read(path).unwrap();
    let pages = original.len() / PHYSICAL;
    assert!(pages > 10, "{pages} pages");

    // Where each key's record lies in the log: the header and `Current` first, then the
    // sets in order (25 bytes of framing each).
    let mut at = 25 + 25;
    let mut records = Vec::new();
    for index in 0..300 {
        let len = 25 + format!("k{index}").len() + 200;
        records.push(at..at + len);
        at += len;
    }

    type Damage = fn(&mut Vec<u8>, usize);
    let damages: [(&str, usize, Damage); 3] = [
        ("a flipped byte mid-log", 6, |log, page| {
            log[page * PHYSICAL + 1000] ^= 0x04
        }),
        ("a zeroed page", 4, |log, page| {
            log[page * PHYSICAL..(page + 1) * PHYSICAL].fill(0)
        }),
        ("page 0", 0, |log, page| log[page * PHYSICAL + 30] ^= 0x01),
    ];
    for (what, page, damage) in damages {
        let page = page.min(pages - 1);
        let mut damaged = original.clone();
        damage(&mut damaged, page);
        std::fs::write(path, &damaged).unwrap();
        let stderr = refused(&data, &[]);
        assert!(
            stderr.contains(&format!("is damaged at byte {}", page * PHYSICAL))
                && stderr.contains(&name_hex("log.1"))
                && stderr.contains("--repair"),
            "{what}: {stderr}"
        );
        assert_eq!(
            std::fs::read(path).unwrap(),
            damaged,
            "{what}: nothing changed"
        );
    }

    // A torn tail (a fragment a crash left): `--strict` refuses it and changes nothing;
    // without it, the fragment is copied beside the log, cut, and reported in the metrics.
    let mut torn = original.clone();
    torn.extend_from_slice(&[0x5A; PHYSICAL / 3]);
    std::fs::write(path, &torn).unwrap();
    let stderr = refused(&data, &["--strict"]);
    assert!(
        stderr.contains(&format!("from byte {} of the file", original.len()))
            && stderr.contains("--strict refuses it"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(path).unwrap(),
        torn,
        "strict: nothing changed"
    );
    let (server, metrics) = start(&data);
    let mut client = server.connect();
    client.send(b"DBSIZE\r\n");
    assert_eq!(reply(&mut client), ":297");
    let exposition = http_get(metrics, "/metrics");
    assert!(
        exposition.contains(&format!("kv_recovery_bytes_cut {}\n", PHYSICAL / 3))
            && exposition.contains("kv_recovery_cuts 1\n"),
        "{exposition}"
    );
    let gauge = |name: &str| -> u64 {
        let line = exposition
            .lines()
            .find(|line| line.starts_with(&format!("{name} ")));
        let value = line.unwrap_or_else(|| panic!("{name} in {exposition}"));
        value[name.len() + 1..].parse().unwrap()
    };
    let kept = gauge("kv_recovery_bytes_kept");
    assert!(
        kept > (pages as u64 - 1) * 4096 && kept <= pages as u64 * 4096,
        "{kept}"
    );
    assert!(gauge("kv_recovery_pages_read") >= 1);
    server.kill();
    let aside = data
        .join("kv")
        .join(format!("{}.cut-{}", name_hex("log.1"), original.len()));
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        &torn[original.len()..],
        "the cut bytes are kept beside the log"
    );

    // A damaged last page (what a lost machine can leave too): `--strict` refuses it; without
    // it, the page is set aside, cut, and reported, with the record it cut short.
    let mut damaged_end = original.clone();
    damaged_end[(pages - 1) * PHYSICAL + 5] ^= 0x80;
    std::fs::write(path, &damaged_end).unwrap();
    let stderr = refused(&data, &["--strict"]);
    assert!(stderr.contains("--strict refuses it"), "{stderr}");
    assert_eq!(
        std::fs::read(path).unwrap(),
        damaged_end,
        "strict: nothing changed"
    );
    let (server, metrics) = start(&data);
    let mut client = server.connect();
    client.send(b"DBSIZE\r\n");
    let size: usize = reply(&mut client)[1..].parse().unwrap();
    assert!(size < 297 && size > 250, "{size}");
    let exposition = http_get(metrics, "/metrics");
    assert!(exposition.contains("kv_recovery_cuts 2\n"), "{exposition}");
    server.kill();
    let aside = data.join("kv").join(format!(
        "{}.cut-{}",
        name_hex("log.1"),
        (pages - 1) * PHYSICAL
    ));
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        &damaged_end[(pages - 1) * PHYSICAL..],
        "the damaged page is kept beside the log"
    );

    // Repair, with a byte of page 6 damaged: every record that verifies is kept, the deletes
    // after it included.
    let mut damaged = original.clone();
    damaged[6 * PHYSICAL + 1000] ^= 0x04;
    std::fs::write(path, &damaged).unwrap();
    let mut server = Server::launch(
        env!("CARGO_BIN_EXE_kv"),
        "kv listening on",
        &[
            "127.0.0.1:0",
            "127.0.0.1:0",
            data.to_str().unwrap(),
            "--repair",
        ],
        &[],
    );
    let _ = server.printed();
    let mut client = server.connect();
    // Records carry checksums of their own: only the one holding the flipped byte is lost,
    // though its whole page fails.
    let flipped = 6 * 4096 + 1000;
    let mut present = 0;
    for (index, record) in records.iter().enumerate() {
        client.send(format!("GET k{index}\r\n").as_bytes());
        let lost = record.contains(&flipped);
        let expected = if index < 3 || lost {
            "$nil".to_string()
        } else {
            present += 1;
            format!("${}", value(index))
        };
        assert_eq!(reply(&mut client), expected, "k{index}");
    }
    client.send(b"DBSIZE\r\n");
    assert_eq!(reply(&mut client), format!(":{present}"));
    assert_eq!(present, 296, "all but the damaged record");
    let names: Vec<String> = logs(&data).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("log.1.damaged-"), "{names:?}");
    assert_eq!(names[1], "log.2");
    let copy = &logs(&data)[0].1;
    assert_eq!(
        std::fs::read(copy).unwrap(),
        damaged,
        "the copy is the damaged log"
    );
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

fn name_hex(name: &str) -> String {
    name.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// The log is rewritten from the live data as it grows past twice its size (and the bound,
/// made small here), in the background: writes go on, every acknowledged one survives a
/// crash at any point, and one generation remains.
#[test]
fn the_log_is_rewritten_as_it_grows_and_loses_nothing() {
    let data = std::env::temp_dir().join(format!("kv-rewrite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let launch = |data: &std::path::Path| {
        let mut server = Server::launch(
            env!("CARGO_BIN_EXE_kv"),
            "kv listening on",
            &["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()],
            &[("KV_REWRITE_MIN_BYTES", "65536")],
        );
        let _ = server.printed();
        server
    };
    let server = launch(&data);
    let mut client = server.connect();
    let value = "v".repeat(1000);
    for round in 0..400 {
        let mut writes = Vec::new();
        for key in 0..10 {
            writes.extend_from_slice(format!("SET k{key} {round}-{value}\r\n").as_bytes());
        }
        client.send(&writes);
        for _ in 0..10 {
            assert_eq!(reply(&mut client), "+OK");
        }
    }
    // 4 MB written over 10 live keys: the log was rewritten, several times.
    let names: Vec<String> = logs(&data).into_iter().map(|(name, _)| name).collect();
    let generation = names
        .iter()
        .filter_map(|name| name.strip_prefix("log.")?.parse::<u64>().ok())
        .max()
        .unwrap();
    assert!(generation > 2, "{names:?}");
    let size: u64 = logs(&data)
        .iter()
        .map(|(_, path)| std::fs::metadata(path).unwrap().len())
        .sum();
    assert!(size < 1 << 20, "{size} bytes in {names:?}");
    server.kill();
    let server = launch(&data);
    let mut client = server.connect();
    client.send(b"DBSIZE\r\n");
    assert_eq!(reply(&mut client), ":10");
    for key in 0..10 {
        client.send(format!("GET k{key}\r\n").as_bytes());
        assert_eq!(reply(&mut client), format!("$399-{value}"));
    }
    assert_eq!(logs(&data).len(), 1, "{:?}", logs(&data));
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// `BGREWRITEAOF` rewrites a log far below the size that starts a rewrite by itself: it
/// answers as Redis does, `INFO persistence` says a rewrite is under way until the new log has
/// taken over, one generation remains, and nothing is lost across SIGKILL.
#[test]
fn bgrewriteaof_rewrites_the_log_on_request() {
    let data = std::env::temp_dir().join(format!("kv-bgrewrite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    for round in 0..3 {
        let mut writes = Vec::new();
        for key in 0..100 {
            writes.extend_from_slice(format!("SET k{key} {round}\r\n").as_bytes());
        }
        client.send(&writes);
        for _ in 0..100 {
            assert_eq!(reply(&mut client), "+OK");
        }
    }
    client.send(b"BGREWRITEAOF\r\n");
    assert_eq!(
        reply(&mut client),
        "+Background append only file rewriting started"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        client.send(b"INFO persistence\r\n");
        let info = reply(&mut client);
        if info.contains("aof_rewrite_in_progress:0") {
            break;
        }
        assert!(info.contains("aof_rewrite_in_progress:1"), "{info}");
        assert!(
            std::time::Instant::now() < deadline,
            "the rewrite never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let names: Vec<String> = logs(&data).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["log.2"]);
    server.kill();
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(b"DBSIZE\r\n");
    assert_eq!(reply(&mut client), ":100");
    client.send(b"GET k42\r\n");
    assert_eq!(reply(&mut client), "$2");
    server.kill();
    std::fs::remove_dir_all(&data).unwrap();
}

/// A connection that stays quiet past the idle timeout is told so and closed, and so is one
/// that trickles a command slower than the request deadline allows, though each of its
/// bytes comes within the idle timeout; a prompt client is served throughout.
#[test]
fn idle_and_trickling_clients_are_closed() {
    let data = std::env::temp_dir().join(format!("kv-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let mut server = Server::launch(
        env!("CARGO_BIN_EXE_kv"),
        "kv listening on",
        &["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()],
        &[
            ("KV_IDLE_TIMEOUT_MS", "400"),
            ("KV_REQUEST_DEADLINE_MS", "700"),
        ],
    );
    let _ = server.printed();
    let mut quiet = server.connect();
    let mut trickling = server.connect();
    let mut prompt = server.connect();
    trickling.send(b"*2\r\n$4\r\nECHO\r\n$40\r\n");
    for _ in 0..20 {
        // A byte every 100 ms: within the idle timeout, but the command would take 2 s.
        std::thread::sleep(std::time::Duration::from_millis(100));
        if !trickling.try_send(b"x") {
            break;
        }
        prompt.send(b"PING\r\n");
        assert_eq!(reply(&mut prompt), "+PONG");
    }
    assert_eq!(
        reply(&mut trickling),
        "-ERR a request must arrive whole within 700 ms; closing"
    );
    assert!(trickling.closed());
    assert_eq!(reply(&mut quiet), "-ERR idle for 400 ms; closing");
    assert!(quiet.closed());
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// Bad arguments are clear errors (an empty or unusable data directory, an unknown
/// durability), and a closed stdout (`kv | head -2`) is no reason to fail.
#[test]
fn bad_arguments_are_clear_errors_and_a_closed_stdout_is_harmless() {
    let run = |arguments: &[&str]| {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_kv"))
            .args(arguments)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let _watchdog = common::Watchdog::new(child.id());
        let output = child.wait_with_output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["127.0.0.1:0", "127.0.0.1:0", ""]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("the data directory is empty"), "{stderr}");
    let file = std::env::temp_dir().join(format!("kv-not-a-directory-{}", std::process::id()));
    std::fs::write(&file, b"a file").unwrap();
    let (code, stderr) = run(&["127.0.0.1:0", "127.0.0.1:0", file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot be used"), "{stderr}");
    std::fs::remove_file(&file).unwrap();
    let (code, stderr) = run(&["--durability", "sometimes"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "unknown durability 'sometimes': it is always (the default), everysec or none"
        ),
        "{stderr}"
    );

    // Its two lines read, stdout closed, then stopped: it says goodbye to nobody, and exits 0.
    let data = std::env::temp_dir().join(format!("kv-stdout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let mut server = Server::launch(
        env!("CARGO_BIN_EXE_kv"),
        "kv listening on",
        &["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()],
        &[],
    );
    let _ = server.printed();
    server.close_stdout();
    assert_eq!(server.interrupt(), "");
    std::fs::remove_dir_all(&data).unwrap();
}

/// SIGKILL while writers pipeline and the log is rewritten again and again (the bound made
/// small): after the restart every acknowledged write is there, with its value.
#[test]
fn a_crash_during_rewrites_loses_no_acknowledged_write() {
    const WRITERS: usize = 4;
    let data = std::env::temp_dir().join(format!("kv-rewrite-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let launch = |data: &std::path::Path| {
        let mut server = Server::launch(
            env!("CARGO_BIN_EXE_kv"),
            "kv listening on",
            &["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()],
            &[("KV_REWRITE_MIN_BYTES", "32768")],
        );
        let _ = server.printed();
        server
    };
    let server = launch(&data);
    let acknowledged = std::sync::Mutex::new(vec![0usize; WRITERS]);
    let total = std::sync::atomic::AtomicUsize::new(0);
    let value = |writer: usize, index: usize| format!("{writer}-{index}-{}", "x".repeat(300));
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let (server, acknowledged, total) = (&server, &acknowledged, &total);
            scope.spawn(move || {
                let mut client = server.connect();
                let mut next = 0;
                loop {
                    let mut batch = Vec::new();
                    for index in next..next + 20 {
                        // Each writer overwrites a few keys, so the log outgrows the live data.
                        batch.extend_from_slice(&frame(&[
                            b"SET",
                            format!("w{writer}-k{}", index % 5).as_bytes(),
                            value(writer, index).as_bytes(),
                        ]));
                        batch.extend_from_slice(&frame(&[
                            b"SET",
                            format!("w{writer}-i{index}").as_bytes(),
                            b"1",
                        ]));
                    }
                    if !client.try_send(&batch) {
                        return;
                    }
                    for index in next..next + 20 {
                        for _ in 0..2 {
                            if client.try_line().as_deref() != Some("+OK\r\n") {
                                return;
                            }
                        }
                        acknowledged.lock().unwrap()[writer] = index + 1;
                        total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    next += 20;
                }
            });
        }
        // Killed once enough is acknowledged for several rewrites, whatever is in flight.
        while total.load(std::sync::atomic::Ordering::Relaxed) < 4000 {
            std::thread::yield_now();
        }
        // SAFETY: signalling our own child process.
        assert_eq!(
            unsafe { libc::kill(server.child.id() as libc::pid_t, libc::SIGKILL) },
            0
        );
    });
    server.kill();
    let server = launch(&data);
    let mut client = server.connect();
    let acknowledged = acknowledged.into_inner().unwrap();
    for (writer, &count) in acknowledged.iter().enumerate() {
        assert!(count > 0);
        for index in 0..count {
            client.send(&frame(&[b"GET", format!("w{writer}-i{index}").as_bytes()]));
            assert_eq!(reply(&mut client), "$1", "w{writer}-i{index}");
        }
        // The last value acknowledged for each overwritten key, or a later one in flight.
        for key in 0..5 {
            let last = (0..count).rev().find(|index| index % 5 == key).unwrap();
            client.send(&frame(&[b"GET", format!("w{writer}-k{key}").as_bytes()]));
            let got = reply(&mut client);
            let index: usize = got[1..].split('-').nth(1).unwrap().parse().unwrap();
            assert!(index >= last, "w{writer}-k{key}: {index} < {last}");
            assert_eq!(got, format!("${}", value(writer, index)));
        }
    }
    let names: Vec<String> = logs(&data).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// Replies larger than one send all go out without the client sending more, and a client
/// that shuts its writing side after a pipeline (`nc -N`) still reads every reply.
#[test]
fn large_replies_and_a_half_closed_client_get_every_reply() {
    let data = std::env::temp_dir().join(format!("kv-half-close-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    let big = vec![b'e'; 300 * 1024];
    let mut pipeline = frame(&[b"ECHO", &big]);
    pipeline.extend_from_slice(&frame(&[b"ECHO", &big]));
    pipeline.extend_from_slice(b"PING\r\n");
    client.send(&pipeline);
    for _ in 0..2 {
        assert_eq!(reply(&mut client).len(), 1 + big.len());
    }
    assert_eq!(reply(&mut client), "+PONG");

    let mut half = server.connect();
    half.send(b"SET a 1\r\nGET a\r\nDEL a\r\n");
    half.shut_writing();
    for expected in ["+OK", "$1", ":1"] {
        assert_eq!(reply(&mut half), expected);
    }
    assert!(half.closed());

    // A pipeline longer than one batch (256 commands) and past the replies a connection may
    // wait for (1024), all sent with the end of the stream before anything is read: every
    // command is still run and answered, in order. (Eight-byte commands: each receive of
    // 4 KiB holds 512 of them, more than a batch takes, so whole commands are left in the
    // connection when it reads the end of the stream.)
    let mut long = server.connect();
    let mut pipeline = b"INCR n\r\n".repeat(4096);
    pipeline.extend_from_slice(b"GET n\r\n");
    long.send(&pipeline);
    long.shut_writing();
    for index in 1..=4096 {
        assert_eq!(reply(&mut long), format!(":{index}"));
    }
    assert_eq!(reply(&mut long), "$4096");
    assert!(long.closed());

    // More whole commands in one receive than the replies a connection may wait for, from a
    // client that keeps its stream open and waits: every one is answered without more input.
    let mut waiting = server.connect();
    waiting.send(&b"x\r\n".repeat(1365));
    for index in 0..1365 {
        let got = reply(&mut waiting);
        assert!(got.starts_with("-ERR unknown command"), "{index}: {got}");
    }
    waiting.send(b"PING\r\n");
    assert_eq!(reply(&mut waiting), "+PONG");

    // Values larger than a send's batch, asked for many times in one pipeline, come back
    // whole and in order (they are sent from the store's copy, not copied per reply).
    let mut values = server.connect();
    let large: Vec<u8> = (0..400 * 1024).map(|at| b'a' + (at % 26) as u8).collect();
    values.send(&frame(&[b"SET", b"large", &large]));
    assert_eq!(reply(&mut values), "+OK");
    let mut pipeline = Vec::new();
    for _ in 0..4 {
        pipeline.extend_from_slice(&frame(&[b"GET", b"large"]));
    }
    pipeline.extend_from_slice(&frame(&[b"MGET", b"large", b"missing", b"large"]));
    values.send(&pipeline);
    let expected = format!("${}", String::from_utf8_lossy(&large));
    for _ in 0..4 {
        assert!(
            reply(&mut values) == expected,
            "a GET of the large value differs"
        );
    }
    assert!(
        reply(&mut values) == format!("*[{expected}, $nil, {expected}]"),
        "the MGET of the large value differs"
    );
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// Every kind of write added for Redis fidelity is logged like `SET`: acknowledged, it is
/// there after SIGKILL and a restart, with its expiry.
#[test]
fn every_write_command_survives_sigkill() {
    let data = std::env::temp_dir().join(format!("kv-writes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    let writes: &[(&str, &str)] = &[
        ("SETEX sx 1000 v", "+OK"),
        ("PSETEX px 1000000 v", "+OK"),
        ("SETNX nx v", ":1"),
        ("MSETNX m1 a m2 b", ":1"),
        ("APPEND ap hello", ":5"),
        ("APPEND ap \" world\"", ":11"),
        ("SET sr hello", "+OK"),
        ("SETRANGE sr 1 EY", ":5"),
        ("SETRANGE sz 2 x", ":3"),
        ("INCRBYFLOAT fl 10.5", "$10.5"),
        ("INCRBYFLOAT fl 0.1", "$10.6"),
        ("SET gd v", "+OK"),
        ("GETDEL gd", "$v"),
        ("SET gx v", "+OK"),
        ("GETEX gx EX 1000", "$v"),
        ("SET gp v EX 1000", "+OK"),
        ("GETEX gp PERSIST", "$v"),
        ("SET r1 v EX 1000", "+OK"),
        ("RENAME r1 r2", "+OK"),
        ("SET rn v", "+OK"),
        ("RENAMENX rn rn2", ":1"),
        ("SET u v", "+OK"),
        ("UNLINK u", ":1"),
        ("SET e v", "+OK"),
        ("EXPIRE e 1000 NX", ":1"),
        ("EXPIREAT e 99999999999 GT", ":1"),
        ("SET old v", "+OK"),
        ("SET old new GET", "$v"),
        ("MULTI", "+OK"),
        ("SET t1 a", "+QUEUED"),
        ("INCR t2", "+QUEUED"),
        ("DEL nx", "+QUEUED"),
        ("EXEC", "*[+OK, :1, :1]"),
    ];
    for (command, expected) in writes {
        client.send(format!("{command}\r\n").as_bytes());
        assert_eq!(reply(&mut client), *expected, "{command}");
    }
    server.kill();
    let (server, _) = start(&data);
    let mut client = server.connect();
    let reads: &[(&str, &str)] = &[
        ("GET sx", "$v"),
        ("TTL sx", "present"),
        ("PTTL px", "present"),
        ("GET nx", "$nil"),
        ("MGET m1 m2", "*[$a, $b]"),
        ("GET ap", "$hello world"),
        ("GET sr", "$hEYlo"),
        ("GET sz", "$\0\0x"),
        ("GET fl", "$10.6"),
        ("EXISTS gd", ":0"),
        ("TTL gx", "present"),
        ("TTL gp", ":-1"),
        ("EXISTS r1", ":0"),
        ("TTL r2", "present"),
        ("MGET rn rn2", "*[$nil, $v]"),
        ("EXISTS u", ":0"),
        ("EXPIRETIME e", ":99999999999"),
        ("GET old", "$new"),
        ("MGET t1 t2", "*[$a, $1]"),
    ];
    for (command, expected) in reads {
        client.send(format!("{command}\r\n").as_bytes());
        let answer = reply(&mut client);
        if *expected == "present" {
            let left: i64 = answer.trim_start_matches(':').parse().unwrap();
            assert!(left > 0, "{command}: {answer}");
        } else {
            assert_eq!(answer, *expected, "{command}");
        }
    }
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// A transaction is one unit: while one client increments two keys together in `MULTI`
/// blocks, another never reads them apart (no command runs between a transaction's
/// commands); a watched key written by another client aborts `EXEC` with a nil array.
#[test]
fn transactions_run_as_one_unit_and_watched_changes_abort_them() {
    const ROUNDS: usize = 200;
    let data = std::env::temp_dir().join(format!("kv-multi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut client = server.connect();
            for _ in 0..ROUNDS {
                client.send(b"MULTI\r\nINCR a\r\nINCR b\r\nEXEC\r\n");
                for expected in ["+OK", "+QUEUED", "+QUEUED"] {
                    assert_eq!(reply(&mut client), expected);
                }
                let exec = reply(&mut client);
                assert!(exec.starts_with("*[:"), "{exec}");
            }
        });
        let mut reader = server.connect();
        loop {
            reader.send(b"MGET a b\r\n");
            let pair = reply(&mut reader);
            let values: Vec<String> = pair
                .trim_start_matches("*[")
                .trim_end_matches(']')
                .split(", ")
                .map(str::to_string)
                .collect();
            assert_eq!(
                values[0], values[1],
                "read between a transaction's commands"
            );
            if values[0] == format!("${ROUNDS}") {
                break;
            }
        }
        writer.join().unwrap();
    });

    let mut first = server.connect();
    let mut second = server.connect();
    first.send(b"WATCH a\r\n");
    assert_eq!(reply(&mut first), "+OK");
    second.send(b"SET a changed\r\n");
    assert_eq!(reply(&mut second), "+OK");
    first.send(b"MULTI\r\nSET a mine\r\nEXEC\r\nGET a\r\n");
    for expected in ["+OK", "+QUEUED", "*nil", "$changed"] {
        assert_eq!(reply(&mut first), expected);
    }
    // The keys are forgotten after EXEC: the next transaction runs.
    first.send(b"MULTI\r\nSET a mine\r\nEXEC\r\n");
    for expected in ["+OK", "+QUEUED", "*[+OK]"] {
        assert_eq!(reply(&mut first), expected);
    }
    // A connection that leaves with keys watched: its watch is dropped with it.
    let mut leaving = server.connect();
    leaving.send(b"WATCH a\r\n");
    assert_eq!(reply(&mut leaving), "+OK");
    drop(leaving);
    second.send(b"SET a again\r\nGET a\r\n");
    for expected in ["+OK", "$again"] {
        assert_eq!(reply(&mut second), expected);
    }
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// The syncs of the log so far, from `INFO persistence`.
fn syncs(client: &mut Client) -> u64 {
    client.send(b"INFO persistence\r\n");
    let info = reply(client);
    info.split("\r\n")
        .find_map(|line| line.strip_prefix("kv_log_syncs:"))
        .unwrap_or_else(|| panic!("no kv_log_syncs in {info:?}"))
        .parse()
        .unwrap()
}

/// A transaction's writes are made durable together: one sync of the log for all fifty,
/// where three writes awaited one by one take three.
#[test]
fn a_transaction_is_made_durable_by_one_sync() {
    let data = std::env::temp_dir().join(format!("kv-one-sync-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    let before = syncs(&mut client);
    let mut transaction = b"MULTI\r\n".to_vec();
    for index in 0..50 {
        transaction.extend_from_slice(format!("SET t{index} v{index}\r\n").as_bytes());
    }
    transaction.extend_from_slice(b"EXEC\r\n");
    client.send(&transaction);
    assert_eq!(reply(&mut client), "+OK");
    for _ in 0..50 {
        assert_eq!(reply(&mut client), "+QUEUED");
    }
    let exec = reply(&mut client);
    assert_eq!(exec, format!("*[{}]", vec!["+OK"; 50].join(", ")));
    assert_eq!(syncs(&mut client), before + 1);
    for index in 0..3 {
        client.send(format!("SET alone{index} v\r\n").as_bytes());
        assert_eq!(reply(&mut client), "+OK");
    }
    assert_eq!(syncs(&mut client), before + 4);
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// `SCAN`'s contract, as Redis states it: a full iteration returns every key present for the
/// whole of it, while another client adds and removes keys between its pages.
#[test]
fn scan_returns_every_key_present_throughout_despite_churn() {
    let data = std::env::temp_dir().join(format!("kv-scan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut scanner = server.connect();
    let mut churn = server.connect();
    let mut stable = b"MSET".to_vec();
    for index in 0..300 {
        stable.extend_from_slice(format!(" stable{index} v").as_bytes());
    }
    stable.extend_from_slice(b"\r\n");
    scanner.send(&stable);
    assert_eq!(reply(&mut scanner), "+OK");
    let mut seen = std::collections::HashSet::new();
    let mut cursor = "0".to_string();
    let mut page = 0;
    loop {
        scanner.send(format!("SCAN {cursor} COUNT 7\r\n").as_bytes());
        let answer = reply(&mut scanner);
        let inner = answer
            .strip_prefix("*[$")
            .unwrap()
            .strip_suffix(']')
            .unwrap();
        let (next, keys) = inner.split_once(", *[").unwrap();
        for key in keys
            .trim_end_matches(']')
            .split(", ")
            .filter(|key| !key.is_empty())
        {
            seen.insert(key.trim_start_matches('$').to_string());
        }
        // Between pages: new keys, and some of them gone again.
        churn.send(format!("SET churn{page} v\r\nDEL churn{}\r\n", page / 2).as_bytes());
        assert_eq!(reply(&mut churn), "+OK");
        reply(&mut churn);
        page += 1;
        cursor = next.to_string();
        if cursor == "0" {
            break;
        }
    }
    for index in 0..300 {
        assert!(
            seen.contains(&format!("stable{index}")),
            "stable{index} missed"
        );
    }
    assert!(
        page > 300 / 7,
        "the iteration took pages of at most about 7: {page}"
    );
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// What clients send on connect, where kv's answers are its own (the rest is compared with
/// Redis's in `redis_diff`): RESP3 refused so clients fall back, `CLIENT SETINFO` (Redis
/// 7.2's) accepted, `COMMAND COUNT` the commands kv implements, `INFO` by section.
#[test]
fn connect_time_commands_answer_as_clients_expect() {
    let data = std::env::temp_dir().join(format!("kv-connect-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let (server, _) = start(&data);
    let mut client = server.connect();
    client.send(
        b"HELLO 3\r\nCLIENT SETINFO LIB-NAME redis-py\r\nCLIENT SETINFO lib-ver 8\r\n\
          CLIENT SETINFO color red\r\nCOMMAND COUNT\r\nSELECT 0\r\nSELECT 1\r\n",
    );
    for expected in [
        "-NOPROTO unsupported protocol version",
        "+OK",
        "+OK",
        "-ERR Unrecognized option 'color'",
        &format!(":{}", examples::kv::commands::COMMANDS.len()),
        "+OK",
        "-ERR DB index is out of range",
    ] {
        assert_eq!(reply(&mut client), expected);
    }
    client.send(b"SET a 1 EX 100\r\nINFO keyspace\r\nINFO server\r\nINFO nothing\r\n");
    assert_eq!(reply(&mut client), "+OK");
    assert_eq!(
        reply(&mut client),
        "$# Keyspace\r\ndb0:keys=1,expires=1,avg_ttl=0\r\n"
    );
    let server_section = reply(&mut client);
    assert!(
        server_section.starts_with("$# Server\r\nredis_version:7.0.0\r\n")
            && !server_section.contains("# Keyspace"),
        "{server_section}"
    );
    assert_eq!(reply(&mut client), "$");
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}
