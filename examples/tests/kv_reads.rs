//! Reads answered from the view of acknowledged data, on the connection's thread (see
//! `examples::kv::view`): a connection reads its own writes, pipelined or not; a read racing
//! writes sees an old or a new value whole, and never goes back; a transaction is seen whole
//! or not at all; and with `--durability always` a value is never visible to another
//! connection before it is durable (every sync held, then failed, by strace's fault injection).

mod common;

use common::{Client, Server, frame};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

/// Starts `kv` on loopback with `data` and the extra `arguments`.
fn launch(data: &std::path::Path, arguments: &[&str]) -> Server {
    let mut all = vec!["127.0.0.1:0", "127.0.0.1:0", data.to_str().unwrap()];
    all.extend_from_slice(arguments);
    let mut server = Server::launch(env!("CARGO_BIN_EXE_kv"), "kv listening on", &all, &[]);
    let _metrics = server.printed();
    server
}

fn data_directory(name: &str) -> std::path::PathBuf {
    let data = std::env::temp_dir().join(format!("kv-reads-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    data
}

/// A reply: `Some(bytes)` for a bulk string, `None` for nil; anything else is returned as
/// its line (`+OK`, `:1`) as bytes. `Err` if the connection ended.
fn try_reply(client: &mut Client) -> Result<Option<Vec<u8>>, ()> {
    let line = client.try_line().ok_or(())?;
    let line = line.trim_end();
    if line == "$-1" {
        return Ok(None);
    }
    let Some(length) = line.strip_prefix('$') else {
        return Ok(Some(line.as_bytes().to_vec()));
    };
    let length: usize = length.parse().unwrap();
    let mut value = vec![0; length + 2];
    client.reader.read_exact(&mut value).map_err(|_| ())?;
    assert_eq!(&value[length..], b"\r\n");
    value.truncate(length);
    Ok(Some(value))
}

fn reply(client: &mut Client) -> Option<Vec<u8>> {
    try_reply(client).expect("a reply")
}

/// An array of bulk strings (`MGET`).
fn values(client: &mut Client) -> Vec<Option<Vec<u8>>> {
    let line = client.line();
    let count: usize = line.trim_end().strip_prefix('*').unwrap().parse().unwrap();
    (0..count).map(|_| reply(client)).collect()
}

fn set(key: &str, value: &str) -> Vec<u8> {
    frame(&[b"SET", key.as_bytes(), value.as_bytes()])
}

fn get(key: &str) -> Vec<u8> {
    frame(&[b"GET", key.as_bytes()])
}

/// A connection reads its own writes: a `GET` pipelined behind a `SET` (in one send, the
/// `SET` not yet answered) sees it, as does a `GET` sent after the `SET`'s answer; a `DEL`
/// pipelined before a `GET` makes it nil; and another connection that reads after the
/// answer sees the write too. Several connections at once, each on its own keys.
#[test]
fn a_connection_reads_its_own_writes_pipelined_or_not() {
    let data = data_directory("own");
    let server = launch(&data, &[]);
    std::thread::scope(|scope| {
        for connection in 0..4 {
            let server = &server;
            scope.spawn(move || {
                let mut client = server.connect();
                let mut other = server.connect();
                let key = format!("own{connection}");
                for round in 0..100 {
                    // Pipelined: SET, GET, DEL, GET, SET, GET in one send.
                    let (first, second) = (format!("a{round}"), format!("b{round}"));
                    let mut pipeline = set(&key, &first);
                    pipeline.extend(get(&key));
                    pipeline.extend(frame(&[b"DEL", key.as_bytes()]));
                    pipeline.extend(get(&key));
                    pipeline.extend(set(&key, &second));
                    pipeline.extend(get(&key));
                    client.send(&pipeline);
                    assert_eq!(reply(&mut client), Some(b"+OK".to_vec()));
                    assert_eq!(reply(&mut client), Some(first.into_bytes()));
                    assert_eq!(reply(&mut client), Some(b":1".to_vec()));
                    assert_eq!(reply(&mut client), None);
                    assert_eq!(reply(&mut client), Some(b"+OK".to_vec()));
                    assert_eq!(reply(&mut client), Some(second.clone().into_bytes()));
                    // Not pipelined: the GET is sent once the SET is answered.
                    let third = format!("c{round}");
                    client.send(&set(&key, &third));
                    assert_eq!(reply(&mut client), Some(b"+OK".to_vec()));
                    client.send(&get(&key));
                    assert_eq!(reply(&mut client), Some(third.clone().into_bytes()));
                    // Another connection, after the answer, sees it.
                    other.send(&get(&key));
                    assert_eq!(reply(&mut other), Some(third.into_bytes()));
                    // MGET and EXISTS from the view agree.
                    other.send(&frame(&[b"MGET", key.as_bytes(), b"absent"]));
                    assert_eq!(values(&mut other)[1], None);
                    other.send(&frame(&[b"EXISTS", key.as_bytes(), key.as_bytes()]));
                    assert_eq!(reply(&mut other), Some(b":2".to_vec()));
                }
            });
        }
    });
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// `value` for write number `index`: long (so a torn read would show), every byte telling
/// the index.
fn numbered(index: u32) -> String {
    format!("{index:08}-").repeat(400)
}

/// The index a value read was written with; fails the test on a value never written whole.
fn index_of(value: &[u8]) -> u32 {
    let text = std::str::from_utf8(value).expect("a value written whole");
    let index: u32 = text[..8].parse().expect("a value written whole");
    assert_eq!(text, numbered(index), "a value written whole");
    index
}

/// A `GET` racing `SET`s of another connection sees a value written whole, never one torn,
/// and never an older value after a newer one; with `--durability always`, a value read
/// was kept: after SIGKILL (taken once the writer has stopped, every write answered), the key
/// holds the last value read, or a later one. (That a value is not visible before its sync is
/// the next test's.)
#[test]
fn a_read_racing_writes_sees_whole_durable_values_and_never_goes_back() {
    let data = data_directory("race");
    let server = launch(&data, &[]);
    let mut writer = server.connect();
    writer.send(&set("raced", &numbered(0)));
    assert_eq!(reply(&mut writer), Some(b"+OK".to_vec()));
    let done = AtomicBool::new(false);
    let last_read = std::thread::scope(|scope| {
        scope.spawn(|| {
            // Pipelined writes, 32 in flight at a time, until the server is killed.
            let mut index = 1;
            while !done.load(Ordering::Relaxed) {
                let mut pipeline = Vec::new();
                for _ in 0..32 {
                    pipeline.extend(set("raced", &numbered(index)));
                    index += 1;
                }
                if !writer.try_send(&pipeline) {
                    return;
                }
                for _ in 0..32 {
                    if try_reply(&mut writer).is_err() {
                        return;
                    }
                }
            }
        });
        let reader = scope.spawn(|| {
            let mut reader = server.connect();
            let mut last = 0;
            // Until a few hundred writes have been seen, and at least 2000 reads made.
            let mut reads = 0;
            while reads < 2000 || last < 300 {
                reader.send(&get("raced"));
                let index = index_of(&reply(&mut reader).expect("the key is there"));
                assert!(index >= last, "read {index} after {last}");
                last = index;
                reads += 1;
            }
            last
        });
        let last = reader.join().unwrap();
        done.store(true, Ordering::Relaxed);
        last
    });
    server.kill();
    let server = launch(&data, &[]);
    let mut client = server.connect();
    client.send(&get("raced"));
    let kept = index_of(&reply(&mut client).unwrap());
    assert!(
        kept >= last_read,
        "read {last_read} before the crash, {kept} after"
    );
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

/// A transaction is seen whole or not at all by reads from the view, under both
/// durabilities: `MULTI SET a n SET b n EXEC` racing `MGET a b` from another connection
/// always finds the two equal.
#[test]
fn a_transaction_is_read_whole_or_not_at_all() {
    for durability in ["always", "everysec"] {
        let data = data_directory(&format!("exec-{durability}"));
        let server = launch(&data, &["--durability", durability]);
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut writer = server.connect();
                let mut round = 0u32;
                while !done.load(Ordering::Relaxed) {
                    let value = round.to_string();
                    let mut transaction = frame(&[b"MULTI"]);
                    transaction.extend(set("a", &value));
                    transaction.extend(set("b", &value));
                    transaction.extend(frame(&[b"EXEC"]));
                    transaction.extend(frame(&[
                        b"MSET",
                        b"c",
                        value.as_bytes(),
                        b"d",
                        value.as_bytes(),
                    ]));
                    writer.send(&transaction);
                    assert_eq!(reply(&mut writer), Some(b"+OK".to_vec()));
                    for _ in 0..2 {
                        assert_eq!(reply(&mut writer), Some(b"+QUEUED".to_vec()));
                    }
                    assert_eq!(values(&mut writer).len(), 2);
                    assert_eq!(reply(&mut writer), Some(b"+OK".to_vec()));
                    round += 1;
                }
            });
            let mut reader = server.connect();
            let mut changes = 0;
            let mut last = None;
            for _ in 0..3000 {
                reader.send(&frame(&[b"MGET", b"a", b"b", b"c", b"d"]));
                let read = values(&mut reader);
                assert_eq!(
                    read[0], read[1],
                    "{durability}: a transaction seen half done"
                );
                assert_eq!(read[2], read[3], "{durability}: an MSET seen half done");
                if read[0] != last {
                    changes += 1;
                    last = read[0].clone();
                }
            }
            done.store(true, Ordering::Relaxed);
            // The reads raced the writes, not a store standing still (the first change is
            // from nil to the first value, taken before any read of a later one).
            assert!(changes >= 1);
        });
        assert_eq!(server.interrupt(), "kv stopped\n");
        std::fs::remove_dir_all(&data).unwrap();
    }
}

/// The process a tracer started (its only child), killed with SIGKILL when this is dropped.
struct Tracee(libc::pid_t);

impl Tracee {
    fn of(tracer: u32) -> Tracee {
        let children = std::fs::read_to_string(format!("/proc/{tracer}/task/{tracer}/children"))
            .expect("the tracer's children are listed");
        let pid = children
            .split_whitespace()
            .next()
            .expect("the tracer started kv before kv printed its address")
            .parse()
            .unwrap();
        Tracee(pid)
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        // SAFETY: sending a signal to a process this test started (through strace).
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// With `--durability always`, a write is never visible to another connection before it is
/// durable: every `fdatasync` of the server is made to wait 300 ms and then fail (strace's
/// fault injection), so no write ever becomes durable and the server ends (a failed sync ends
/// kv); while it waits, another connection reads the key over and over, and every read finds
/// it absent until the connection ends. `.ci/tools` installs strace and `.ci/run` then
/// requires it (`REQUIRE_STRACE`); without it this test skips and says so.
#[test]
fn a_write_is_never_visible_to_other_connections_before_it_is_durable() {
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("REQUIRE_STRACE").is_none(),
            "strace is required (REQUIRE_STRACE is set) but not installed"
        );
        println!("kv_reads durability test SKIPPED: strace is not installed (see .ci/tools)");
        return;
    }
    let data = data_directory("never-visible-before-durable");
    let arguments = [
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        "trace=fdatasync",
        "-e",
        "inject=fdatasync:error=EIO:delay_enter=300000",
        env!("CARGO_BIN_EXE_kv"),
        "127.0.0.1:0",
        "127.0.0.1:0",
        data.to_str().unwrap(),
    ];
    let mut server = Server::launch("strace", "kv listening on", &arguments, &[]);
    // kv is strace's child: killing strace would leave it running, so it is killed first,
    // however the test ends.
    let _tracee = Tracee::of(server.child.id());
    let _metrics = server.printed();
    let mut writer = server.connect();
    let mut reader = server.connect();
    writer.send(&set("key", "never durable"));
    let mut reads = 0;
    loop {
        if !reader.try_send(&frame(&[b"GET", b"key"])) {
            break;
        }
        match try_reply(&mut reader) {
            Ok(value) => assert_eq!(value, None, "a read saw a write that never became durable"),
            Err(()) => break,
        }
        reads += 1;
    }
    assert!(reads > 0, "the reads ran while the sync was held");
    assert!(
        try_reply(&mut writer).is_err(),
        "the write was never acknowledged: its connection ended"
    );
    let _ = std::fs::remove_dir_all(&data);
}
