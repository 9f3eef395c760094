//! Differential test: `kv` against `redis-server` itself. Both are started (Redis on a free
//! port with `--save "" --appendonly no --databases 1` in a directory of its own; kv on a
//! data directory of its own), sent the same bytes, and their replies compared byte for
//! byte: directed cases for every command and option kv implements and every error path,
//! inline quoting, pipelines and transactions, then seeded random sequences (a small PRNG
//! here; the seed is printed, and `REDIS_DIFF_SEED` replays one) over two connections each,
//! some pipelined and some inline, and random glob patterns and inline lines.
//!
//! The replies that legitimately differ are compared by what they must share, each case
//! saying how ([`Compare`]): `KEYS` as sets (the order is the hash table's), `SCAN` by a
//! full iteration's set, time-to-live answers by kind (none, no expiry, some: the clocks of
//! two servers differ by the time between them), `RANDOMKEY` by presence, `HELLO` with its
//! version and connection id left out. Random sequences compare `GT`/`LT` only against
//! absolute deadlines, so no answer races the clock. The intended differences are the table
//! in the README.
//!
//! `.ci/tools` installs `redis-server` when missing and `.ci/run` then requires it
//! (`REQUIRE_REDIS_SERVER`); where it could not be installed this test skips, loudly.

mod common;

use common::{Server, frame};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A RESP2 reply, as parsed from the bytes a server sent.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

/// One connection to a server, reading whole replies.
struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The last bytes sent (named when no reply comes).
    last: Vec<u8>,
}

impl Connection {
    fn open(port: u16) -> Connection {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Connection {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            last: Vec::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.last = bytes.to_vec();
        self.writer.write_all(bytes).unwrap();
    }

    fn line(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        if let Err(error) = self.reader.read_until(b'\n', &mut line) {
            panic!(
                "no reply ({error}) after {:?}",
                String::from_utf8_lossy(&self.last)
            );
        }
        assert!(line.ends_with(b"\r\n"), "a reply line: {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    /// The next reply.
    fn reply(&mut self) -> Value {
        let line = self.line();
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
        let number = |bytes: &[u8]| -> i64 { text(bytes).parse().unwrap() };
        match line[0] {
            b'+' => Value::Simple(line[1..].to_vec()),
            b'-' => Value::Error(line[1..].to_vec()),
            b':' => Value::Integer(number(&line[1..])),
            b'$' => match number(&line[1..]) {
                -1 => Value::Bulk(None),
                length => {
                    let mut value = vec![0; length as usize + 2];
                    self.reader.read_exact(&mut value).unwrap();
                    value.truncate(length as usize);
                    Value::Bulk(Some(value))
                }
            },
            b'*' => match number(&line[1..]) {
                -1 => Value::Array(None),
                count => Value::Array(Some((0..count).map(|_| self.reply()).collect())),
            },
            other => panic!("not a RESP2 reply: {:?}", char::from(other)),
        }
    }

    /// Whether the server closed the connection (after a protocol error).
    fn closed(&mut self) -> bool {
        let mut byte = [0];
        matches!(self.reader.read(&mut byte), Ok(0))
    }
}

/// How two replies must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compare {
    /// Byte for byte.
    Exact,
    /// Arrays of the same elements in any order (`KEYS`).
    Set,
    /// Integers of the same kind: -2, -1, or some value not negative (a time to live or a
    /// deadline, which differ by the time between the servers).
    Ttl,
    /// Both nil, or both a bulk string (`RANDOMKEY`).
    Presence,
    /// The same, but for the `version` and `id` fields (`HELLO`).
    Hello,
    /// Both an integer (`CLIENT ID`).
    Integer,
    /// The same error, or both not an error (a `SCAN` page: each server's own).
    Errors,
}

/// A reply, readably.
fn show(value: &Value) -> String {
    let text = |bytes: &[u8]| format!("{:?}", String::from_utf8_lossy(bytes));
    match value {
        Value::Simple(bytes) => format!("+{}", text(bytes)),
        Value::Error(bytes) => format!("-{}", text(bytes)),
        Value::Integer(value) => format!(":{value}"),
        Value::Bulk(None) => "nil".into(),
        Value::Bulk(Some(bytes)) => text(bytes),
        Value::Array(None) => "*nil".into(),
        Value::Array(Some(values)) => {
            format!(
                "[{}]",
                values.iter().map(show).collect::<Vec<_>>().join(", ")
            )
        }
    }
}

fn agree(compare: Compare, redis: &Value, kv: &Value) -> bool {
    match compare {
        Compare::Exact => redis == kv,
        Compare::Set => match (redis, kv) {
            (Value::Array(Some(a)), Value::Array(Some(b))) => {
                let sorted = |values: &[Value]| {
                    let mut values: Vec<String> =
                        values.iter().map(|value| format!("{value:?}")).collect();
                    values.sort();
                    values
                };
                sorted(a) == sorted(b)
            }
            _ => redis == kv,
        },
        Compare::Ttl => match (redis, kv) {
            (Value::Integer(a), Value::Integer(b)) => a == b || *a >= 0 && *b >= 0,
            _ => redis == kv,
        },
        Compare::Presence => matches!(
            (redis, kv),
            (Value::Bulk(None), Value::Bulk(None)) | (Value::Bulk(Some(_)), Value::Bulk(Some(_)))
        ),
        Compare::Hello => match (redis, kv) {
            (Value::Array(Some(a)), Value::Array(Some(b))) => {
                let masked = |values: &[Value]| -> Vec<Value> {
                    let mut out = values.to_vec();
                    for at in 0..out.len().saturating_sub(1) {
                        if matches!(&out[at], Value::Bulk(Some(name)) if name == b"version" || name == b"id")
                        {
                            out[at + 1] = Value::Bulk(None);
                        }
                    }
                    out
                };
                masked(a) == masked(b)
            }
            _ => redis == kv,
        },
        Compare::Errors => match (redis, kv) {
            (Value::Error(_), _) | (_, Value::Error(_)) => redis == kv,
            _ => true,
        },
        Compare::Integer => {
            matches!((redis, kv), (Value::Integer(_), Value::Integer(_)))
        }
    }
}

/// A running `redis-server`, stopped when dropped.
struct Redis {
    child: Child,
    port: u16,
    directory: std::path::PathBuf,
}

impl Redis {
    /// Starts one on a free port, and waits until it says it accepts connections.
    fn start() -> Redis {
        let directory = std::env::temp_dir().join(format!("kv-diff-redis-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        // A port free when asked may be taken by another process before Redis binds it:
        // then Redis ends at once, and another port is tried.
        let mut log = Vec::new();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--databases", "1"])
                .args(["--dir", directory.to_str().unwrap(), "--logfile", ""])
                .args(["--daemonize", "no"])
                .stdout(Stdio::piped())
                .spawn()
                .expect("redis-server starts");
            let mut output = BufReader::new(child.stdout.take().unwrap());
            let ready = loop {
                let mut line = String::new();
                if output.read_line(&mut line).unwrap_or(0) == 0 {
                    break false;
                }
                let ready = line.contains("Ready to accept connections");
                log.push(line);
                if ready {
                    break true;
                }
            };
            if !ready {
                let _ = child.wait();
                continue;
            }
            // Its log goes on being read, so it never blocks on a full pipe.
            std::thread::spawn(move || std::io::copy(&mut output, &mut std::io::sink()));
            return Redis {
                child,
                port,
                directory,
            };
        }
        panic!(
            "redis-server did not start in five tries:\n{}",
            log.concat()
        );
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

/// Both servers, two connections to each, and what was found.
struct Pair {
    redis_port: u16,
    kv_port: u16,
    redis: Vec<Connection>,
    kv: Vec<Connection>,
    compared: usize,
    differences: Vec<String>,
    /// The last exchanges, shown with a difference.
    history: std::collections::VecDeque<String>,
}

impl Pair {
    fn new(redis_port: u16, kv_port: u16) -> Pair {
        Pair {
            redis_port,
            kv_port,
            redis: (0..2).map(|_| Connection::open(redis_port)).collect(),
            kv: (0..2).map(|_| Connection::open(kv_port)).collect(),
            compared: 0,
            differences: Vec::new(),
            history: std::collections::VecDeque::new(),
        }
    }

    /// Sends `bytes` on connection `at` of both, and compares the `replies` replies.
    fn exchange(&mut self, at: usize, bytes: &[u8], replies: usize, compare: Compare, what: &str) {
        let expected = vec![(compare, what.to_string()); replies];
        self.exchange_each(at, bytes, &expected);
    }

    /// Sends `bytes` on connection `at` of both, and compares one reply for each of
    /// `expected`, as it says.
    fn exchange_each(&mut self, at: usize, bytes: &[u8], expected: &[(Compare, String)]) {
        self.redis[at].send(bytes);
        self.kv[at].send(bytes);
        for (index, (compare, what)) in expected.iter().enumerate() {
            let compare = *compare;
            let redis = self.redis[at].reply();
            let kv = self.kv[at].reply();
            self.compared += 1;
            if !agree(compare, &redis, &kv) {
                let history: Vec<String> = self.history.iter().cloned().collect();
                self.differences.push(format!(
                    "{what} on connection {at} (reply {index}):\n  redis: {}\n  kv:    {}\n  \
                     after:\n    {}",
                    show(&redis),
                    show(&kv),
                    history.join("\n    ")
                ));
            }
            if self.history.len() == 60 {
                self.history.pop_front();
            }
            self.history
                .push_back(format!("[{at}] {what} -> {}", show(&redis)));
        }
    }

    fn command(&mut self, at: usize, command: &[&[u8]], compare: Compare) {
        let what = format!(
            "{:?}",
            command
                .iter()
                .map(|argument| String::from_utf8_lossy(argument))
                .collect::<Vec<_>>()
        );
        self.exchange(at, &frame(command), 1, compare, &what);
    }

    /// A full `SCAN` iteration on both, compared as sets of keys (each server's cursors its
    /// own).
    fn scan_all(&mut self, at: usize, options: &[&[u8]]) {
        let mut found = Vec::new();
        for (connections, _) in [(&mut self.redis, "redis"), (&mut self.kv, "kv")] {
            let connection = &mut connections[at];
            let mut cursor = b"0".to_vec();
            let mut keys = Vec::new();
            loop {
                let mut command: Vec<&[u8]> = vec![b"SCAN", &cursor];
                command.extend_from_slice(options);
                connection.send(&frame(&command));
                match connection.reply() {
                    Value::Array(Some(mut page)) if page.len() == 2 => {
                        let Value::Array(Some(page_keys)) = page.pop().unwrap() else {
                            panic!("a SCAN page");
                        };
                        keys.extend(page_keys);
                        let Value::Bulk(Some(next)) = page.pop().unwrap() else {
                            panic!("a SCAN cursor");
                        };
                        cursor = next;
                    }
                    error => {
                        keys.push(error);
                        break;
                    }
                }
                if cursor == b"0" {
                    break;
                }
            }
            let mut keys: Vec<String> = keys.iter().map(|key| format!("{key:?}")).collect();
            keys.sort();
            keys.dedup();
            found.push(keys);
        }
        self.compared += 1;
        if found[0] != found[1] {
            self.differences.push(format!(
                "a full SCAN {options:?}:\n  redis: {:?}\n  kv:    {:?}",
                found[0], found[1]
            ));
        }
    }

    /// Sends what closes both connections (a protocol error, `QUIT`), compares the answer,
    /// checks both closed, and opens new ones.
    fn closing(&mut self, at: usize, bytes: &[u8]) {
        self.exchange(at, bytes, 1, Compare::Exact, "what closes");
        assert!(
            self.redis[at].closed() && self.kv[at].closed(),
            "both close after {bytes:?}"
        );
        self.redis[at] = Connection::open(self.redis_port);
        self.kv[at] = Connection::open(self.kv_port);
    }
}

/// The directed cases: each line a command (split on spaces), compared exactly unless it
/// says otherwise.
const DIRECTED: &[&str] = &[
    // Strings, and every SET option and its errors.
    "FLUSHALL",
    "SET k v",
    "GET k",
    "GET missing",
    "SET k v NX",
    "SET k v XX",
    "SET new v XX",
    "SET k v NX XX",
    "SET k v XX NX",
    "SET k v GET",
    "SET fresh v GET",
    "SET k v2 NX GET",
    "SET k v EX 10 EX 20",
    "SET k v PX 10000 PX 20000",
    "SET k v EX 10 PX 20",
    "SET k v PX xx 9917262669",
    "SET k v EX 0",
    "SET k v EX -5",
    "SET k v EX abc",
    "SET k v EX 1.5",
    "SET k v EX 9223372036854775807",
    "SET k v PX 9223372036854775807",
    "SET k v EXAT 1",
    "GET k",
    "SET k v PXAT 1",
    "SET k v KEEPTTL",
    "SET k v EX 100 KEEPTTL",
    "SET k v KEEPTTL EX 100",
    "SET k v EX",
    "SET k v FOO",
    "SET k",
    "SET",
    "GET",
    "GET a b",
    "SETNX k v",
    "SETNX nx1 v",
    "SETNX nx1",
    "SETEX sx 100 v",
    "SETEX sx 0 v",
    "SETEX sx -1 v",
    "SETEX sx abc v",
    "SETEX sx 9223372036854775807 v",
    "SETEX sx 100",
    "PSETEX px 100000 v",
    "PSETEX px 0 v",
    "PSETEX px abc v",
    "SET gs v EX 100",
    "GETSET gs w",
    "TTL gs",
    "GETSET gs2 w",
    "GETSET gs",
    "TOUCH gs gs missing",
    "TOUCH",
    "GETDEL sx",
    "GETDEL sx",
    "GETDEL",
    "SET g v",
    "GETEX g",
    "GETEX g EX 100",
    "GETEX g PX 100000",
    "GETEX g EXAT 99999999999",
    "GETEX g PXAT 99999999999999",
    "GETEX g PERSIST",
    "GETEX g EX 100 PX 100",
    "GETEX g EX 100 EX 200",
    "GETEX g PERSIST EX 100",
    "GETEX g EX abc",
    "GETEX g EX 0",
    "GETEX missing EX abc",
    "GETEX missing EX 0",
    "GETEX g NX",
    "GETEX g KEEPTTL",
    "GETEX g EX",
    "GETEX g EXAT 1",
    "GET g",
    "GETEX",
    // Counters.
    "SET n 10",
    "INCR n",
    "DECR n",
    "INCRBY n 5",
    "DECRBY n 3",
    "INCRBY n -9223372036854775808",
    "DECRBY n -9223372036854775808",
    "DECRBY missing9 -9223372036854775808",
    "INCRBY n 9223372036854775807",
    "INCRBY n abc",
    "INCRBY n 1.5",
    "INCRBY n +1",
    "INCRBY n 01",
    "INCRBY n -0",
    "INCR k",
    "SET big 9223372036854775807",
    "INCR big",
    "SET small -9223372036854775808",
    "DECR small",
    "SET lead 007",
    "INCR lead",
    "SET spaced  1",
    "INCR",
    "INCRBY n",
    "DECRBY n",
    // Floats, as Redis computes and writes them.
    "SET f 10.5",
    "INCRBYFLOAT f 0.1",
    "INCRBYFLOAT f 3.0e3",
    "INCRBYFLOAT f -3010.6",
    "INCRBYFLOAT f 1e-3",
    "INCRBYFLOAT f abc",
    "INCRBYFLOAT f inf",
    "INCRBYFLOAT f -inf",
    "INCRBYFLOAT f nan",
    "INCRBYFLOAT f 0x10",
    "INCRBYFLOAT f 1e400",
    "INCRBYFLOAT f -1e400",
    "INCRBYFLOAT f 1e5000",
    "INCRBYFLOAT f 1e99999999999999999999999",
    "INCRBYFLOAT f 0x1p99999999999999999999999",
    "INCRBYFLOAT f 0x1p-99999999999999999999999",
    "INCRBYFLOAT f 0x1.8p1",
    "INCRBYFLOAT f -0X.8P-1",
    "INCRBYFLOAT f .5",
    "INCRBYFLOAT f 5.",
    "INCRBYFLOAT f +1",
    "INCRBYFLOAT f 1e",
    "INCRBYFLOAT fl 3.0e3",
    "INCRBYFLOAT fl2 -0",
    "INCRBYFLOAT fl3 0.1",
    "INCRBYFLOAT fl3 0.2",
    "INCRBYFLOAT fl4 1e300",
    "INCRBYFLOAT fl5 1.5e-10",
    "INCRBYFLOAT fl6 123456789012345678901234567890",
    "INCRBYFLOAT k 1",
    "SET fi inf",
    "INCRBYFLOAT fi 1",
    "INCRBYFLOAT f",
    // Appending and ranges.
    "APPEND ap hello",
    "APPEND ap \" world\"",
    "APPEND ap",
    "STRLEN ap",
    "STRLEN missing",
    "GETRANGE ap 0 4",
    "GETRANGE ap -5 -1",
    "GETRANGE ap -1 -5",
    "GETRANGE ap 5 2",
    "GETRANGE ap 0 100",
    "GETRANGE ap -100 2",
    "GETRANGE ap 100 200",
    "GETRANGE ap 0 -100",
    "GETRANGE missing 0 -1",
    "GETRANGE ap a 1",
    "GETRANGE ap 0",
    "SETRANGE ap 6 WORLD",
    "GET ap",
    "SETRANGE ap 20 !",
    "GET ap",
    "SETRANGE sr 3 abc",
    "GET sr",
    "SETRANGE sr2 3 \"\"",
    "EXISTS sr2",
    "SETRANGE ap 0 \"\"",
    "SETRANGE ap -1 x",
    "SETRANGE ap abc x",
    "SETRANGE ap 0",
    // Many keys.
    "MSET m1 a m2 b",
    "MSET m1",
    "MSET m1 a m2",
    "MGET m1 m2 missing",
    "MSETNX m1 x m3 y",
    "MSETNX m3 x m4 y",
    "MSETNX m5 x m5 y",
    "MGET m3 m4 m5",
    "MSETNX m6",
    "MSETNX m6 a m7",
    "DEL m1 m2 missing m1",
    "UNLINK m3 m4 missing",
    "EXISTS m5 m5 missing",
    "DEL",
    "UNLINK",
    "EXISTS",
    // Expiry, every form and option.
    "SET e v",
    "EXPIRE e abc",
    "EXPIRE e 1.5",
    "EXPIRE e \"\"",
    "PEXPIRE e abc",
    "EXPIREAT e abc",
    "PEXPIREAT e abc",
    "EXPIRE e 9223372036854775807",
    "EXPIRE e -9223372036854775808",
    "PEXPIRE e 9223372036854775807",
    "EXPIREAT e 9223372036854775807",
    "PEXPIREAT e 9223372036854775807",
    "TTL e",
    "EXPIRE e 100 XX",
    // Greater or less by far more than the time between two commands: no race.
    "EXPIRE e 200 GT",
    "EXPIRE e 100 LT",
    "TTL e",
    "EXPIRE e 100 NX",
    "EXPIRE e 200 NX",
    "TTL e",
    "EXPIREAT e 99999999999 GT",
    "EXPIRETIME e",
    "PEXPIRETIME e",
    "EXPIREAT e 99999999998 GT",
    "EXPIREAT e 99999999990 LT",
    "EXPIRETIME e",
    "PEXPIREAT e 99999999990001 LT",
    "PEXPIRETIME e",
    "EXPIREAT e 99999999990 XX",
    "EXPIRE e 100 NX XX",
    "EXPIRE e 100 NX GT",
    "EXPIRE e 100 GT LT",
    "EXPIRE e 100 XX GT",
    "EXPIRE e 100 FOO",
    "EXPIRE e 100 nx",
    "EXPIRE missing 100",
    "EXPIRE missing abc",
    "EXPIRE missing 100 FOO",
    "PERSIST e",
    "PERSIST e",
    "PERSIST missing",
    "TTL e",
    "PTTL e",
    "EXPIRETIME e",
    "PEXPIRETIME e",
    "TTL missing",
    "PTTL missing",
    "EXPIRETIME missing",
    "PEXPIRETIME missing",
    "EXPIRE e 100 GT",
    "EXPIRE e 100 LT",
    "TTL e",
    "EXPIRE e -1",
    "EXISTS e",
    "SET e v",
    "EXPIREAT e 1",
    "EXISTS e",
    "SET e v",
    "PEXPIRE e 0",
    "EXISTS e",
    "EXPIRE e",
    "TTL",
    "PERSIST",
    "EXPIRETIME",
    // Keys: types, renames, patterns.
    "FLUSHALL",
    "MSET user:1 a user:2 b user:10 c item:1 d \"\" empty star* e",
    "TYPE user:1",
    "TYPE missing",
    "TYPE",
    "RENAME user:1 user:100",
    "RENAME user:1 user:100",
    "RENAME user:100 user:100",
    "RENAME missing missing",
    "RENAMENX user:100 user:2",
    "RENAMENX user:100 user:200",
    "RENAMENX user:200 user:200",
    "RENAMENX missing x",
    "SET ttlkey v EX 1000",
    "RENAME ttlkey renamed",
    "TTL renamed",
    "RENAME a",
    "RENAMENX a",
    "KEYS",
    "KEYS a b",
    "RANDOMKEY x",
    "DBSIZE x",
    "SCAN",
    "SCAN abc",
    "SCAN -",
    "SCAN 1.5",
    "SCAN 0 COUNT 0",
    "SCAN 0 COUNT -1",
    "SCAN 0 COUNT abc",
    "SCAN 0 MATCH",
    "SCAN 0 FOO bar",
    "SCAN 0 COUNT",
    "DBSIZE",
    // Connection and server commands.
    "PING",
    "PING hello",
    "PING a b",
    "ECHO hello",
    "ECHO",
    "ECHO a b",
    "SELECT 0",
    "SELECT 1",
    "SELECT 16",
    "SELECT -1",
    "SELECT abc",
    "SELECT",
    "SELECT 0 1",
    "CLIENT GETNAME",
    "CLIENT SETNAME me",
    "CLIENT GETNAME",
    "CLIENT SETNAME \"\"",
    "CLIENT GETNAME",
    "CLIENT SETNAME \"a b\"",
    "CLIENT SETNAME",
    "CLIENT SETNAME a b",
    "CLIENT GETNAME x",
    "CLIENT FOO",
    "CLIENT",
    "HELLO 1",
    "HELLO 4",
    "HELLO abc",
    "HELLO 2 FOO",
    "HELLO 2 AUTH",
    "HELLO 2 AUTH someone pass",
    "HELLO 2 SETNAME",
    "HELLO 2 SETNAME \"a b\"",
    "CONFIG",
    "CONFIG GET",
    "CONFIG FOO",
    "COMMAND FOO",
    "COMMAND COUNT x",
    "FLUSHALL SYNC",
    "FLUSHALL ASYNC",
    "FLUSHALL SYNC ASYNC",
    "FLUSHALL FOO",
    "FLUSHDB",
    "FLUSHDB SYNC ASYNC",
    "DBSIZE",
    "FOO",
    "FOO a b",
    "WATCH",
    "MULTI x",
    "EXEC x",
    "DISCARD x",
    "UNWATCH x",
    "EXEC",
    "DISCARD",
    "UNWATCH",
    // Transactions: queued, errors at queue time and at run time, nesting.
    "MULTI",
    "SET t 1",
    "INCR t",
    "SET t 1 FOO",
    "INCRBY t abc",
    "GET t",
    "PING",
    "SELECT 1",
    "EXEC",
    "MULTI",
    "MULTI",
    "WATCH t",
    "SET t 2",
    "EXEC",
    "GET t",
    "MULTI",
    "SET t 3",
    "FOO",
    "EXEC",
    "GET t",
    "MULTI",
    "SET t 3",
    "GET",
    "EXEC",
    "MULTI",
    "SET t 4",
    "CLIENT SETNAME",
    "EXEC",
    "MULTI",
    "SET t 5",
    "MSET a",
    "MSET a b c",
    "EXEC",
    "MULTI",
    "SET t 6",
    "DISCARD",
    "GET t",
    "MULTI",
    "EXEC",
    "WATCH t",
    "MULTI",
    "INCR t",
    "EXEC",
    "WATCH t u",
    "WATCH t",
    "UNWATCH",
    "MULTI",
    "CLIENT SETNAME inside",
    "CLIENT GETNAME",
    "DISCARD",
    "CLIENT GETNAME",
];

/// Cases sent as raw bytes: inline commands (Redis's quoting) and pipelines; each the bytes
/// and the number of replies.
const RAW: &[(&[u8], usize)] = &[
    (b"SET a\\x+f \"\\a\\b\"\r\n", 1),
    (b"GET a\\x+f\r\n", 1),
    (
        b"ECHO \"\\a\\b\\x+f\\x4g\\xzz\\x41\\n\\r\\t\\\"\\\\\"\r\n",
        1,
    ),
    (b"ECHO a\rb\r\n", 1),
    (b"ECHO a\x0b\r\n", 1),
    (b"ECHO \x0ba\r\n", 1),
    (b"ECHO a\x0bb\r\n", 1),
    (b"ECHO \"a\"\x0b\r\n", 1),
    (b"ECHO a\x0c\r\n", 1),
    (b"ECHO 'it\\'s' \r\n", 1),
    (b"ECHO 'a\\nb'\r\n", 1),
    (b"ECHO \"\"\r\n", 1),
    (b"ECHO ''\r\n", 1),
    (b"ECHO a\"b c\"\r\n", 1),
    (b"ECHO a'b c'\r\n", 1),
    (b"ECHO \t a \t\r\n", 1),
    (b"  PING  \n", 1),
    (b"\r\n\r\nPING\r\n", 1),
    (b"PING\nPING\r\nECHO x\n", 3),
    (b"SET p 1\r\nINCR p\r\nINCR p\r\nGET p\r\nDEL p\r\n", 5),
    (
        b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\nPING\r\n",
        3,
    ),
    (b"*0\r\n*-1\r\nPING\r\n", 1),
    (b"MULTI\r\nSET q 1\r\nINCR q\r\nEXEC\r\n", 4),
];

/// Commands whose arguments are bytes Redis quotes in its errors as they are: not UTF-8,
/// a NUL (where C's string ends), long multi-byte names cut at 128 bytes.
const QUOTED: &[&[&[u8]]] = &[
    &[b"FOO\xff", b"a\xffb", b"c\x00d"],
    &[b"F\x00OO", b"x"],
    &[
        "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}"
            .as_bytes(),
        "\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}"
            .as_bytes(),
        b"more",
    ],
    &[b"FOO", b"a\r\nb"],
    &[b"EXPIRE", b"k", b"1", b"\xff"],
    &[b"EXPIRE", b"k", b"1", b"a\x00b"],
    &[b"CLIENT", b"\xff"],
    &[b"CLIENT", b"a\x00b"],
    &[b"HELLO", b"2", b"\xffx"],
    &[b"SELECT", b"9223372036854775807"],
    &[b"SELECT", b"2147483648"],
    &[b"SELECT", b"-2147483649"],
    &[b"SELECT", b"2147483647"],
    &[b"SET", b"\xff\x00", b"\x00\xff"],
    &[b"GET", b"\xff\x00"],
];

/// Inputs after which both servers answer (a protocol error, or `QUIT`'s `+OK`) and close.
const CLOSING: &[&[u8]] = &[
    b"QUIT\r\n",
    b"QUIT now\r\n",
    b"ECHO \"unbalanced\r\n",
    b"ECHO \"a\"b\r\n",
    b"ECHO 'a'b\r\n",
    b"*x\r\n",
    b"*1\r\n+PING\r\n",
    b"*1\r\n$-2\r\n",
];

/// The comparison a directed command needs.
fn compare_for(command: &[&[u8]]) -> Compare {
    let name = String::from_utf8_lossy(command[0]).to_uppercase();
    match name.as_str() {
        "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" if command.len() == 2 => Compare::Ttl,
        "KEYS" => Compare::Set,
        "RANDOMKEY" if command.len() == 1 => Compare::Presence,
        _ => Compare::Exact,
    }
}

/// Splits a directed line: words, `""` the empty argument, `"a b"` one with a space.
fn split(line: &str) -> Vec<Vec<u8>> {
    let mut arguments = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').expect("a closing quote");
            arguments.push(quoted.as_bytes()[..end].to_vec());
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            arguments.push(rest.as_bytes()[..end].to_vec());
            rest = rest[end..].trim_start();
        }
    }
    arguments
}

fn directed(pair: &mut Pair) -> usize {
    let mut cases = 0;
    for line in DIRECTED {
        let command = split(line);
        let command: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
        pair.command(0, &command, compare_for(&command));
        cases += 1;
    }
    for command in QUOTED {
        pair.command(0, command, Compare::Exact);
        cases += 1;
    }
    for (bytes, replies) in RAW {
        pair.exchange(0, bytes, *replies, Compare::Exact, "raw bytes");
        cases += 1;
    }
    // Patterns, over keys chosen to tell the matcher's rules apart.
    pair.command(0, &[b"FLUSHALL"], Compare::Exact);
    let keys: &[&[u8]] = &[
        b"",
        b"a",
        b"ab",
        b"abc",
        b"b",
        b"h*llo",
        b"hello",
        b"hallo",
        b"hxllo",
        b"]",
        b"-",
        b"\\",
        b"a\\",
        b"[",
        b"^",
        b"\x80",
        b"\xff",
        b"user:1:name",
        b"user:22:name",
    ];
    for key in keys {
        pair.command(0, &[b"SET", key, b"v"], Compare::Exact);
    }
    let patterns: &[&[u8]] = &[
        b"*",
        b"**",
        b"?",
        b"??",
        b"a*",
        b"*b*",
        b"h?llo",
        b"h*llo",
        b"h[ae]llo",
        b"h[^e]llo",
        b"h[a-e]llo",
        b"h[e-a]llo",
        b"h\\*llo",
        b"[",
        b"[a",
        b"[ab",
        b"[^a]",
        b"[]]",
        b"[\\]]",
        b"[a-]",
        b"[-a]",
        b"\\",
        b"a\\",
        b"a\\\\",
        b"[\\\\]",
        b"*\\",
        b"[\x80-\xff]",
        b"[a-\xff]",
        b"user:*:name",
        b"user:?:name",
        b"*[",
        b"x*",
        b"*:*:*",
    ];
    for pattern in patterns {
        pair.command(0, &[b"KEYS", pattern], Compare::Set);
        pair.scan_all(0, &[b"MATCH", pattern, b"COUNT", b"3"]);
        cases += 2;
    }
    pair.scan_all(0, &[]);
    pair.scan_all(0, &[b"TYPE", b"string"]);
    pair.scan_all(0, &[b"TYPE", b"list", b"COUNT", b"100"]);
    pair.command(0, &[b"RANDOMKEY"], Compare::Presence);
    pair.command(0, &[b"FLUSHALL"], Compare::Exact);
    pair.command(0, &[b"RANDOMKEY"], Compare::Presence);
    pair.command(0, &[b"KEYS", b"*"], Compare::Set);
    cases += 7;
    // Handshakes: the same but for the version and the connection's id.
    for hello in [
        &[&b"HELLO"[..]][..],
        &[b"HELLO", b"2"],
        &[b"HELLO", b"2", b"SETNAME", b"named"],
        &[b"HELLO", b"2", b"AUTH", b"default", b"anything"],
    ] {
        pair.command(1, hello, Compare::Hello);
        cases += 1;
    }
    pair.command(1, &[b"CLIENT", b"GETNAME"], Compare::Exact);
    pair.command(1, &[b"CLIENT", b"ID"], Compare::Integer);
    cases += 2;
    // Watched keys changed by the other connection, by expiry and by FLUSHALL.
    let watch: &[(usize, &str)] = &[
        (0, "SET w 1"),
        (0, "WATCH w"),
        (1, "SET w 2"),
        (0, "MULTI"),
        (0, "INCR w"),
        (0, "EXEC"),
        (0, "GET w"),
        (0, "WATCH w"),
        (1, "GET w"),
        (1, "SET other 1"),
        (0, "MULTI"),
        (0, "INCR w"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "SET w 5 NX"),
        (1, "DEL missing"),
        (1, "EXPIRE missing 10"),
        (0, "MULTI"),
        (0, "INCR w"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "FLUSHALL"),
        (0, "MULTI"),
        (0, "SET w 1"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "FLUSHALL"),
        (0, "MULTI"),
        (0, "SET w 1"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "SET w 1"),
        (0, "UNWATCH"),
        (0, "MULTI"),
        (0, "INCR w"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "SET w 1"),
        (0, "MULTI"),
        (0, "FOO"),
        (0, "EXEC"),
        (0, "MULTI"),
        (0, "INCR w"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "SET w 1"),
        (0, "MULTI"),
        (0, "DISCARD"),
        (0, "MULTI"),
        (0, "INCR w"),
        (0, "EXEC"),
        // Changes that leave the key as it was, or absent, are changes all the same.
        (0, "DEL w"),
        (0, "WATCH w"),
        (1, "SET w v EXAT 1"),
        (0, "MULTI"),
        (0, "SET w 1"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "APPEND w \"\""),
        (0, "MULTI"),
        (0, "SET w 1"),
        (0, "EXEC"),
        (0, "WATCH w"),
        (1, "SET w 1"),
        (0, "MULTI"),
        (0, "SET w 1"),
        (0, "EXEC"),
        // And what changes nothing is not.
        (0, "WATCH w"),
        (1, "SETRANGE w 0 \"\""),
        (1, "PERSIST w"),
        (1, "RENAME w w"),
        (1, "GETEX w"),
        (1, "EXPIRE w 100 XX"),
        (1, "SET w 2 NX GET"),
        (0, "MULTI"),
        (0, "SET w 1"),
        (0, "EXEC"),
        (0, "SET a 1"),
        (0, "WATCH a b"),
        (1, "RENAME a b"),
        (0, "MULTI"),
        (0, "GET b"),
        (0, "EXEC"),
    ];
    for (at, line) in watch {
        let command = split(line);
        let command: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
        pair.command(*at, &command, Compare::Exact);
        cases += 1;
    }
    cases += watched_key_expires(pair);
    for bytes in CLOSING {
        pair.closing(0, bytes);
        cases += 1;
    }
    cases
}

/// A watched key that expires before `EXEC` aborts it. The expiry is awaited by asking
/// each server until the key is gone (no guess at a duration).
fn watched_key_expires(pair: &mut Pair) -> usize {
    pair.command(0, &[b"SET", b"w", b"1", b"PX", b"300"], Compare::Exact);
    pair.command(0, &[b"WATCH", b"w"], Compare::Exact);
    for connections in [&mut pair.redis, &mut pair.kv] {
        loop {
            connections[1].send(&frame(&[b"PTTL", b"w"]));
            if connections[1].reply() == Value::Integer(-2) {
                break;
            }
            std::thread::yield_now();
        }
    }
    pair.command(0, &[b"MULTI"], Compare::Exact);
    pair.command(0, &[b"SET", b"w", b"2"], Compare::Exact);
    pair.command(0, &[b"EXEC"], Compare::Exact);
    pair.command(0, &[b"GET", b"w"], Compare::Exact);
    6
}

/// A small deterministic PRNG (SplitMix64).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const KEYS: &[&str] = &["k0", "k1", "k2", "k3", "k4", "n0", "n1", "f0", ""];
const VALUES: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "42",
    "007",
    "10.5",
    "1.5",
    "abc",
    "hello world",
    "3.0e3",
    " 1",
    "0x10",
    "inf",
    "9223372036854775807",
    "-9223372036854775808",
    "\r\n",
    "\0bin",
    "2.5e-5",
];
const INTEGERS: &[&str] = &[
    "1",
    "-1",
    "0",
    "5",
    "100",
    "abc",
    "",
    "1.5",
    "+1",
    "01",
    "9223372036854775807",
    "-9223372036854775808",
];
const FLOATS: &[&str] = &[
    "0.1",
    "-0.1",
    "1e3",
    "3.0e3",
    "1.5",
    "-2",
    "10.5",
    "1e-3",
    "abc",
    "0x10",
    "inf",
    "",
    "1e",
    "5.",
    ".5",
    "123456789.123456789",
    "-0",
    "1e10",
    "-1e-10",
    "0x1p-3",
    "1e-20",
    "1.7976931348623157e308",
    "3.14159265358979323846264338327950288",
    "100000000000000000000",
    "0.30000000000000004",
    "-1.5e3",
    "0X1.8P1",
    "INF",
    "1e4000",
];
const PATTERNS: &[&str] = &[
    "*", "k*", "k?", "k[0-2]", "k[^1]", "\\k*", "[", "*0", "n*", "?",
];

/// One random command for a connection, and how its reply compares. `absolute` is a
/// deadline far beyond any relative one the sequence sets, so `GT`/`LT` against it never
/// race the clock; `in_multi`: the connection is queueing (time-dependent answers, which
/// cannot be told apart inside `EXEC`'s array, are left out).
fn random_command(random: &mut Random, absolute: u64, in_multi: bool) -> (Vec<String>, Compare) {
    let key = |random: &mut Random| random.pick(KEYS).to_string();
    let value = |random: &mut Random| random.pick(VALUES).to_string();
    // At least 100 s (the test takes a few): no key expires while it runs, so no answer
    // depends on when a server looks. `milliseconds`: for `PX`, `PEXPIRE`, `PSETEX`.
    let relative = |random: &mut Random, milliseconds: bool| {
        let time = random.pick(&["100", "1000", "5000", "0", "-1", "abc", "1.5", "100000"]);
        match time.parse::<u64>() {
            Ok(seconds) if milliseconds && seconds > 0 => (seconds * 1000).to_string(),
            _ => time.to_string(),
        }
    };
    // A past deadline only where Redis removes the key at once: a `SET` with one leaves
    // the key in Redis's table (counted by `DBSIZE`) until it is reclaimed, at a time of
    // its own (see the README's table).
    let deadline = |random: &mut Random, unit: u64, past: bool| {
        if past && random.chance(10) {
            random.pick(&["1", "0", "-5", "abc"]).to_string()
        } else {
            ((absolute + random.below(1000) as u64 * 1000) / unit).to_string()
        }
    };
    let s = |text: &str| text.to_string();
    loop {
        let choice = random.below(44);
        let (command, compare) = match choice {
            0 | 1 => (vec![s("GET"), key(random)], Compare::Exact),
            2..=4 => {
                let mut command = vec![s("SET"), key(random), value(random)];
                for _ in 0..random.below(3) {
                    match random.below(8) {
                        0 => command.push(s("NX")),
                        1 => command.push(s("XX")),
                        2 => command.push(s("GET")),
                        3 => command.push(s("KEEPTTL")),
                        4 => command.extend([s("EX"), relative(random, false)]),
                        5 => command.extend([s("PX"), relative(random, true)]),
                        6 => command.extend([s("EXAT"), deadline(random, 1000, false)]),
                        _ => command.extend([s("PXAT"), deadline(random, 1, false)]),
                    }
                }
                (command, Compare::Exact)
            }
            5 => {
                let name = s(random.pick(&["SETNX", "GETSET"]));
                (vec![name, key(random), value(random)], Compare::Exact)
            }
            6 => {
                let name = s(random.pick(&["SETEX", "PSETEX"]));
                let time = relative(random, name == "PSETEX");
                (vec![name, key(random), time, value(random)], Compare::Exact)
            }
            7 => (vec![s("GETDEL"), key(random)], Compare::Exact),
            8 => {
                let mut command = vec![s("GETEX"), key(random)];
                match random.below(6) {
                    0 => command.extend([s("EX"), relative(random, false)]),
                    1 => command.extend([s("PX"), relative(random, true)]),
                    2 => command.extend([s("EXAT"), deadline(random, 1000, true)]),
                    3 => command.extend([s("PXAT"), deadline(random, 1, true)]),
                    4 => command.push(s("PERSIST")),
                    _ => {}
                }
                (command, Compare::Exact)
            }
            9 | 10 => {
                let name = s(random.pick(&["DEL", "UNLINK", "EXISTS", "TOUCH"]));
                let mut command = vec![name];
                for _ in 0..=random.below(3) {
                    command.push(key(random));
                }
                (command, Compare::Exact)
            }
            11 | 12 => {
                let name = s(random.pick(&["INCR", "DECR", "INCRBY", "DECRBY"]));
                let mut command = vec![name.clone(), key(random)];
                if name.ends_with("BY") {
                    command.push(s(random.pick(INTEGERS)));
                }
                (command, Compare::Exact)
            }
            13 => (
                vec![s("INCRBYFLOAT"), key(random), s(random.pick(FLOATS))],
                Compare::Exact,
            ),
            14 => (
                vec![s("APPEND"), key(random), value(random)],
                Compare::Exact,
            ),
            15 => (vec![s("STRLEN"), key(random)], Compare::Exact),
            16 => {
                let index = |random: &mut Random| {
                    s(random.pick(&["0", "1", "-1", "3", "-3", "100", "-100", "x"]))
                };
                (
                    vec![s("GETRANGE"), key(random), index(random), index(random)],
                    Compare::Exact,
                )
            }
            17 => {
                let offset = s(random.pick(&["0", "1", "3", "10", "-1", "x"]));
                (
                    vec![s("SETRANGE"), key(random), offset, value(random)],
                    Compare::Exact,
                )
            }
            18 => {
                let mut command = vec![s("MGET")];
                for _ in 0..=random.below(4) {
                    command.push(key(random));
                }
                (command, Compare::Exact)
            }
            19 => {
                let mut command = vec![s(random.pick(&["MSET", "MSETNX"]))];
                for _ in 0..=random.below(3) {
                    command.push(key(random));
                    command.push(value(random));
                }
                if random.chance(10) {
                    command.pop();
                }
                (command, Compare::Exact)
            }
            20 | 21 => {
                // Relative: no GT or LT (they would race the clock).
                let name = s(random.pick(&["EXPIRE", "PEXPIRE"]));
                let time = relative(random, name == "PEXPIRE");
                let mut command = vec![name, key(random), time];
                if random.chance(40) {
                    command.push(s(random.pick(&["NX", "XX", "nx", "FOO"])));
                }
                (command, Compare::Exact)
            }
            22 | 23 => {
                let (name, unit) = if random.chance(50) {
                    ("EXPIREAT", 1000)
                } else {
                    ("PEXPIREAT", 1)
                };
                let mut command = vec![s(name), key(random), deadline(random, unit, true)];
                for _ in 0..random.below(3) {
                    command.push(s(random.pick(&["NX", "XX", "GT", "LT"])));
                }
                (command, Compare::Exact)
            }
            24 => (vec![s("PERSIST"), key(random)], Compare::Exact),
            25 if !in_multi => {
                let name = s(random.pick(&["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"]));
                (vec![name, key(random)], Compare::Ttl)
            }
            26 => (vec![s("TYPE"), key(random)], Compare::Exact),
            27 => {
                let name = s(random.pick(&["RENAME", "RENAMENX"]));
                (vec![name, key(random), key(random)], Compare::Exact)
            }
            28 if !in_multi => (vec![s("KEYS"), s(random.pick(PATTERNS))], Compare::Set),
            29 if !in_multi => (vec![s("RANDOMKEY")], Compare::Presence),
            30 => (vec![s("DBSIZE")], Compare::Exact),
            31 if random.chance(10) => (vec![s("FLUSHALL")], Compare::Exact),
            32 => (vec![s("PING")], Compare::Exact),
            33 => (vec![s("ECHO"), value(random)], Compare::Exact),
            34 => (
                vec![s("SELECT"), s(random.pick(&["0", "1", "abc"]))],
                Compare::Exact,
            ),
            35 => (vec![s("MULTI")], Compare::Exact),
            36 => (vec![s("EXEC")], Compare::Exact),
            37 if random.chance(30) => (vec![s("DISCARD")], Compare::Exact),
            38 => {
                let mut command = vec![s("WATCH")];
                for _ in 0..=random.below(2) {
                    command.push(key(random));
                }
                (command, Compare::Exact)
            }
            39 if random.chance(30) => (vec![s("UNWATCH")], Compare::Exact),
            40 => {
                // Wrong arity, or unknown.
                let name = s(random.pick(&["GET", "SET", "INCRBY", "EXPIRE", "FOO", "GETEX"]));
                (vec![name], Compare::Exact)
            }
            41 if !in_multi => {
                let name = s(random.pick(&["CLIENT", "CLIENT"]));
                if random.chance(50) {
                    (vec![name, s("GETNAME")], Compare::Exact)
                } else {
                    let names = ["a", "b", "", "x y"];
                    (
                        vec![name, s("SETNAME"), s(random.pick(&names))],
                        Compare::Exact,
                    )
                }
            }
            42 | 43 if !in_multi => (vec![s("SCAN"), s(random.pick(PATTERNS))], Compare::Exact),
            _ => continue,
        };
        return (command, compare);
    }
}

/// One seeded random sequence over two connections; the commands sent.
fn random_sequence(pair: &mut Pair, seed: u64, commands: usize) -> usize {
    let mut random = Random(seed);
    // Far past any relative deadline the sequence sets (at most 100000 s from now).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let absolute = now + 10_000_000_000;
    let mut in_multi = [false, false];
    pair.command(0, &[b"FLUSHALL"], Compare::Exact);
    for connection in 0..2 {
        // Each connection starts outside a transaction, its watched keys forgotten.
        pair.command(connection, &[b"DISCARD"], Compare::Exact);
        pair.command(connection, &[b"UNWATCH"], Compare::Exact);
    }
    let mut sent = 0;
    while sent < commands {
        let at = random.below(2);
        // Mostly one command, sometimes a pipeline of several in one write.
        let burst = if random.chance(10) {
            2 + random.below(15)
        } else {
            1
        };
        let (mut bytes, mut expected) = (Vec::new(), Vec::new());
        while expected.len() < burst && sent < commands {
            let (command, compare) = random_command(&mut random, absolute, in_multi[at]);
            sent += 1;
            if command[0] == "SCAN" {
                if expected.is_empty() {
                    // A full iteration, matching the pattern drawn.
                    let pattern = command[1].as_bytes().to_vec();
                    pair.scan_all(at, &[b"MATCH", &pattern, b"COUNT", b"2"]);
                    break;
                }
                continue;
            }
            match command[0].as_str() {
                "MULTI" => in_multi[at] = true,
                "EXEC" | "DISCARD" => in_multi[at] = false,
                _ => {}
            }
            // Some as inline commands, where every argument can be written bare.
            if random.chance(20) && command.iter().all(|argument| inline_safe(argument)) {
                bytes.extend_from_slice(command.join(" ").as_bytes());
                bytes.extend_from_slice(b"\r\n");
            } else {
                let arguments: Vec<&[u8]> =
                    command.iter().map(|argument| argument.as_bytes()).collect();
                bytes.extend_from_slice(&frame(&arguments));
            }
            expected.push((compare, format!("{command:?}")));
        }
        if !expected.is_empty() {
            pair.exchange_each(at, &bytes, &expected);
        }
    }
    commands
}

/// Random glob patterns over random keys, both from the bytes that matter to the matcher
/// (`*`, `?`, `[`, `]`, `^`, `-`, `\`, bytes past 0x7f): `KEYS` answers compared as sets.
fn random_patterns(pair: &mut Pair, seed: u64, patterns: usize) -> usize {
    let mut random = Random(seed ^ 0x5eed_0f9a_77ff);
    let alphabet: &[u8] = b"ab[]^-\\*?c\x80\xff";
    let draw = |random: &mut Random, most: usize| -> Vec<u8> {
        (0..random.below(most + 1))
            .map(|_| alphabet[random.below(alphabet.len())])
            .collect()
    };
    pair.command(0, &[b"FLUSHALL"], Compare::Exact);
    for _ in 0..60 {
        let key = draw(&mut random, 5);
        pair.command(0, &[b"SET", &key, b"v"], Compare::Exact);
    }
    for _ in 0..patterns {
        let pattern = draw(&mut random, 7);
        pair.command(0, &[b"KEYS", &pattern], Compare::Set);
    }
    patterns + 60
}

/// Random inline lines of the bytes that matter to Redis's splitting (quotes, backslashes,
/// `x` and hex digits, and every kind of space), each after `ECHO `: the answers, errors
/// included, compared; a protocol error closes both connections, and new ones are opened.
fn random_inline(pair: &mut Pair, seed: u64, lines: usize) -> usize {
    let mut random = Random(seed ^ 0x0001_a114);
    let alphabet: &[u8] = b"a\"'\\x4f \t\x0b\x0c\rnbg";
    for _ in 0..lines {
        let mut line = b"ECHO ".to_vec();
        for _ in 0..random.below(9) {
            line.push(alphabet[random.below(alphabet.len())]);
        }
        line.extend_from_slice(b"\r\n");
        pair.redis[0].send(&line);
        pair.kv[0].send(&line);
        let (redis, kv) = (pair.redis[0].reply(), pair.kv[0].reply());
        pair.compared += 1;
        if redis != kv {
            pair.differences.push(format!(
                "inline {:?}:\n  redis: {}\n  kv:    {}",
                String::from_utf8_lossy(&line),
                show(&redis),
                show(&kv)
            ));
        }
        if matches!(&redis, Value::Error(error) if error.starts_with(b"ERR Protocol error")) {
            pair.redis[0] = Connection::open(pair.redis_port);
            pair.kv[0] = Connection::open(pair.kv_port);
        }
    }
    lines
}

/// Commands with arguments drawn from values that sit on parsing boundaries (integers at
/// and past `i64`'s ends, signs, spaces, floats, option names, NUL and 0xff), in any number:
/// where the order of Redis's checks shows (arity, syntax, numbers, then the data). Commands
/// and options that set a time are left out (a short one would race the clock).
fn random_arguments(pair: &mut Pair, seed: u64, commands: usize) -> usize {
    let mut random = Random(seed ^ 0x00ad_a7a5);
    const NAMES: &[&str] = &[
        "APPEND",
        "DECR",
        "DECRBY",
        "DEL",
        "EXISTS",
        "GET",
        "GETDEL",
        "GETRANGE",
        "GETSET",
        "INCR",
        "INCRBY",
        "INCRBYFLOAT",
        "MGET",
        "MSET",
        "MSETNX",
        "PERSIST",
        "RENAME",
        "RENAMENX",
        "SET",
        "SETNX",
        "STRLEN",
        "TOUCH",
        "TYPE",
        "UNLINK",
        "ECHO",
        "PING",
        "SELECT",
        "DBSIZE",
        "CLIENT",
        "SCAN",
        "KEYS",
        "EXPIRETIME",
        "WATCH",
        "UNWATCH",
        "EXEC",
        "DISCARD",
        "MULTI",
    ];
    const ARGUMENTS: &[&[u8]] = &[
        b"",
        b"0",
        b"-1",
        b"1",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"9223372036854775808",
        b"18446744073709551615",
        b"-0",
        b"+1",
        b" 1",
        b"1.5",
        b"1e400",
        b"0x10",
        b"inf",
        b"nan",
        b"NX",
        b"XX",
        b"GET",
        b"KEEPTTL",
        b"PERSIST",
        b"k",
        b"k2",
        b"SETNAME",
        b"GETNAME",
        b"COUNT",
        b"MATCH",
        b"TYPE",
        b"string",
        b"2",
        b"100",
        b"\x00",
        b"\xff",
        b"a b",
    ];
    for _ in 0..commands {
        let name = NAMES[random.below(NAMES.len())].as_bytes();
        let mut command = vec![name];
        for _ in 0..random.below(6) {
            command.push(ARGUMENTS[random.below(ARGUMENTS.len())]);
        }
        let compare = if name == b"EXPIRETIME" {
            Compare::Ttl
        } else if name == b"KEYS" {
            Compare::Set
        } else {
            Compare::Exact
        };
        let compare = if name == b"SCAN" {
            // The pages differ (each server's order); the errors must not.
            Compare::Errors
        } else {
            compare
        };
        pair.command(random.below(2), &command, compare);
    }
    // Left as it began: outside a transaction, nothing watched.
    for connection in 0..2 {
        pair.command(connection, &[b"DISCARD"], Compare::Exact);
        pair.command(connection, &[b"UNWATCH"], Compare::Exact);
    }
    commands
}

/// Whether an argument reads back the same written bare in an inline command.
fn inline_safe(argument: &str) -> bool {
    !argument.is_empty()
        && argument
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && !matches!(byte, b'"' | b'\''))
}

#[test]
fn kv_answers_as_redis_server_does() {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        // `.ci/run` sets it once `.ci/tools` has redis-server: then a missing one fails.
        assert!(
            std::env::var_os("REQUIRE_REDIS_SERVER").is_none(),
            "redis-server is required (REQUIRE_REDIS_SERVER is set) but not installed"
        );
        println!("################################################################");
        println!("redis_diff test SKIPPED: redis-server is not installed (see .ci/tools)");
        println!("################################################################");
        return;
    }
    let redis = Redis::start();
    let data = std::env::temp_dir().join(format!("kv-diff-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    // Durability changes when a write is answered, not the answer: `none` keeps the 10 000
    // random commands quick.
    let server = Server::launch(
        env!("CARGO_BIN_EXE_kv"),
        "kv listening on",
        &[
            "127.0.0.1:0",
            "127.0.0.1:0",
            data.to_str().unwrap(),
            "--durability",
            "none",
        ],
        &[],
    );
    let mut pair = Pair::new(redis.port, server.address.port());

    let cases = directed(&mut pair);
    let seeds: Vec<u64> = match std::env::var("REDIS_DIFF_SEED") {
        Ok(seed) => vec![seed.parse().expect("REDIS_DIFF_SEED is a number")],
        Err(_) => vec![1, 2, 3, 4, 5],
    };
    let (mut random_commands, mut random_patterns_sent, mut random_inline_sent) = (0, 0, 0);
    let mut random_arguments_sent = 0;
    let mut failing_seeds = Vec::new();
    for seed in &seeds {
        let before = pair.differences.len();
        random_commands += random_sequence(&mut pair, *seed, 2_000);
        random_patterns_sent += random_patterns(&mut pair, *seed, 300);
        random_inline_sent += random_inline(&mut pair, *seed, 500);
        random_arguments_sent += random_arguments(&mut pair, *seed, 1_000);
        if pair.differences.len() > before {
            failing_seeds.push(*seed);
        }
    }
    println!(
        "redis_diff: {cases} directed cases, {random_commands} random commands, \
         {random_patterns_sent} random KEYS and keys, {random_inline_sent} random inline \
         lines, {random_arguments_sent} commands with random arguments (seeds {seeds:?}), {} \
         replies compared, {} differences",
        pair.compared,
        pair.differences.len()
    );
    for difference in pair.differences.iter().take(40) {
        println!("{difference}");
    }
    assert!(
        pair.differences.is_empty(),
        "{} differences from redis-server (random seeds with differences: {failing_seeds:?}; \
         replay one with REDIS_DIFF_SEED=<seed>)",
        pair.differences.len()
    );
    drop(server);
    std::fs::remove_dir_all(&data).unwrap();
}
