//! The commands: each checked against Redis's command table (name, arity), parsed from its
//! arguments as Redis parses them, run on the store, and answered with Redis's reply or
//! Redis's error wording.
//!
//! Invariants:
//! - **Errors come in Redis's order**: an unknown command or subcommand, then a wrong
//!   number of arguments (both from [`check`], the checks Redis makes before a command is
//!   queued in a transaction), then what the command itself refuses (a syntax error, a bad
//!   number), then what only the data can tell (a value that is not an integer).
//! - **[`COMMANDS`] is the list of what is implemented**: every name there is planned here
//!   and nothing else is; `COMMAND COUNT` and `COMMAND DOCS` answer from it.
//! - **Times are absolute once planned**: a relative expiry (`EX`, `PEXPIRE`) becomes a
//!   deadline in milliseconds since the epoch here, so the store, its log and a replay
//!   only ever see deadlines.

use super::log;
use super::session::Session;
use super::store::{Condition, Expiry, ExpiryChange, Op, Outcome, StoreRef, When};
use crate::resp::Reply;

/// The Redis version `HELLO` and `INFO` report: the protocol this service follows.
pub const REDIS_VERSION: &str = "7.0.0";

/// Every command kv implements: its name, Redis's arity (the name counted; negative: at
/// least that many), its group and what it does (for `COMMAND DOCS`).
pub const COMMANDS: &[(&str, i64, &str, &str)] = &[
    (
        "append",
        3,
        "string",
        "Appends a string to the value of a key.",
    ),
    (
        "bgrewriteaof",
        1,
        "server",
        "Rewrites the log from the live data, in the background.",
    ),
    (
        "client",
        -2,
        "connection",
        "Names the connection (SETNAME, GETNAME, SETINFO, ID).",
    ),
    ("command", -1, "server", "Lists the commands (COUNT, DOCS)."),
    ("config", -2, "server", "Reads the configuration (GET)."),
    ("dbsize", 1, "server", "Returns the number of keys."),
    (
        "decr",
        2,
        "string",
        "Decrements the integer value of a key by one.",
    ),
    (
        "decrby",
        3,
        "string",
        "Decrements the integer value of a key by a number.",
    ),
    ("del", -2, "generic", "Deletes keys."),
    ("discard", 1, "transactions", "Discards a transaction."),
    ("echo", 2, "connection", "Returns the given string."),
    (
        "exec",
        1,
        "transactions",
        "Executes the commands queued in a transaction.",
    ),
    ("exists", -2, "generic", "Counts the keys that exist."),
    (
        "expire",
        -3,
        "generic",
        "Sets a key's time to live in seconds.",
    ),
    (
        "expireat",
        -3,
        "generic",
        "Sets a key's expiry to a Unix time in seconds.",
    ),
    (
        "expiretime",
        2,
        "generic",
        "Returns a key's expiry as a Unix time in seconds.",
    ),
    ("flushall", -1, "server", "Removes every key."),
    ("flushdb", -1, "server", "Removes every key."),
    ("get", 2, "string", "Returns the value of a key."),
    (
        "getdel",
        2,
        "string",
        "Returns the value of a key and deletes it.",
    ),
    (
        "getex",
        -2,
        "string",
        "Returns the value of a key and changes its expiry.",
    ),
    (
        "getrange",
        4,
        "string",
        "Returns a substring of the value of a key.",
    ),
    (
        "getset",
        3,
        "string",
        "Sets the value of a key and returns the previous one.",
    ),
    (
        "hello",
        -1,
        "connection",
        "Handshakes with the server (RESP2 only).",
    ),
    (
        "incr",
        2,
        "string",
        "Increments the integer value of a key by one.",
    ),
    (
        "incrby",
        3,
        "string",
        "Increments the integer value of a key by a number.",
    ),
    (
        "incrbyfloat",
        3,
        "string",
        "Increments the numeric value of a key by a float.",
    ),
    (
        "info",
        -1,
        "server",
        "Returns information about the server.",
    ),
    ("keys", 2, "generic", "Returns the keys matching a pattern."),
    ("mget", -2, "string", "Returns the values of keys."),
    ("mset", -3, "string", "Sets the values of keys."),
    (
        "msetnx",
        -3,
        "string",
        "Sets the values of keys only if none exists.",
    ),
    ("multi", 1, "transactions", "Starts a transaction."),
    ("persist", 2, "generic", "Removes a key's expiry."),
    (
        "pexpire",
        -3,
        "generic",
        "Sets a key's time to live in milliseconds.",
    ),
    (
        "pexpireat",
        -3,
        "generic",
        "Sets a key's expiry to a Unix time in milliseconds.",
    ),
    (
        "pexpiretime",
        2,
        "generic",
        "Returns a key's expiry as a Unix time in milliseconds.",
    ),
    (
        "ping",
        -1,
        "connection",
        "Returns PONG, or the given string.",
    ),
    (
        "psetex",
        4,
        "string",
        "Sets a key with a time to live in milliseconds.",
    ),
    (
        "pttl",
        2,
        "generic",
        "Returns a key's time to live in milliseconds.",
    ),
    ("quit", -1, "connection", "Closes the connection."),
    ("randomkey", 1, "generic", "Returns a random key."),
    (
        "rename",
        3,
        "generic",
        "Renames a key, replacing the destination.",
    ),
    (
        "renamenx",
        3,
        "generic",
        "Renames a key only if the destination does not exist.",
    ),
    ("scan", -2, "generic", "Iterates over the keys."),
    (
        "select",
        2,
        "connection",
        "Selects the database (only 0 exists).",
    ),
    ("set", -3, "string", "Sets the value of a key."),
    (
        "setex",
        4,
        "string",
        "Sets a key with a time to live in seconds.",
    ),
    (
        "setnx",
        3,
        "string",
        "Sets a key only if it does not exist.",
    ),
    (
        "setrange",
        4,
        "string",
        "Overwrites part of the value of a key.",
    ),
    (
        "strlen",
        2,
        "string",
        "Returns the length of the value of a key.",
    ),
    (
        "touch",
        -2,
        "generic",
        "Counts the keys that exist (their access time is not kept).",
    ),
    (
        "ttl",
        2,
        "generic",
        "Returns a key's time to live in seconds.",
    ),
    (
        "type",
        2,
        "generic",
        "Returns the type of a key (string or none).",
    ),
    ("unlink", -2, "generic", "Deletes keys."),
    ("unwatch", 1, "transactions", "Forgets the watched keys."),
    (
        "watch",
        -2,
        "transactions",
        "Watches keys: a change aborts the next EXEC.",
    ),
];

/// The subcommands implemented, with Redis's arity (the command and subcommand counted).
const SUBCOMMANDS: &[(&str, &str, i64)] = &[
    ("client", "getname", 2),
    ("client", "id", 2),
    ("client", "setinfo", 4),
    ("client", "setname", 3),
    ("command", "count", 2),
    ("command", "docs", -2),
    ("config", "get", -3),
];

/// What Redis checks before running or queueing a command: that it exists (and its
/// subcommand), and its number of arguments. The error is the reply.
pub fn check(command: &[Vec<u8>]) -> Result<(), Reply> {
    // ASCII case only, as Redis compares: a Unicode fold (the Kelvin sign to `k`) would pass
    // a name here that `plan` then does not know.
    // `COMMANDS` is sorted by name (a test holds it so): found in a few comparisons.
    let Ok(at) = COMMANDS.binary_search_by(|entry| {
        entry
            .0
            .bytes()
            .cmp(command[0].iter().map(u8::to_ascii_lowercase))
    }) else {
        return Err(unknown(command));
    };
    let (name, arity, ..) = COMMANDS[at];
    let has_subcommands = SUBCOMMANDS.iter().any(|entry| entry.0 == name);
    if has_subcommands && command.len() >= 2 {
        let subcommand = String::from_utf8_lossy(&command[1].to_ascii_lowercase()).into_owned();
        let Some(&(.., arity)) = SUBCOMMANDS
            .iter()
            .find(|entry| entry.0 == name && entry.1 == subcommand)
        else {
            return Err(error_quoting(&[
                b"unknown subcommand '",
                c_string(&command[1], 128),
                b"'. Try ",
                name.to_uppercase().as_bytes(),
                b" HELP.",
            ]));
        };
        return arity_fits(arity, command.len())
            .then_some(())
            .ok_or_else(|| wrong_arity(&format!("{name}|{subcommand}")));
    }
    arity_fits(arity, command.len())
        .then_some(())
        .ok_or_else(|| wrong_arity(name))
}

fn arity_fits(arity: i64, count: usize) -> bool {
    let count = count as i64;
    if arity >= 0 {
        count == arity
    } else {
        count >= -arity
    }
}

fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!("wrong number of arguments for '{name}' command"))
}

/// What C's `%.Ns` prints of an argument: its bytes up to a NUL (the end of a C string),
/// at most `at` of them. Redis quotes arguments in its errors so, byte for byte.
fn c_string(bytes: &[u8], at: usize) -> &[u8] {
    let end = bytes
        .iter()
        .position(|byte| *byte == 0)
        .unwrap_or(bytes.len());
    &bytes[..end.min(at)]
}

/// `-ERR` and `parts`: text and the client's bytes, as they are.
fn error_quoting(parts: &[&[u8]]) -> Reply {
    let mut text = b"ERR ".to_vec();
    for part in parts {
        text.extend_from_slice(part);
    }
    Reply::Error(text)
}

/// Redis's answer to an unknown command: the name cut at 128 bytes, then arguments while
/// what is listed stays under 128 bytes.
fn unknown(command: &[Vec<u8>]) -> Reply {
    let mut beginning = Vec::new();
    for argument in &command[1..] {
        if beginning.len() >= 128 {
            break;
        }
        let room = 128 - beginning.len();
        beginning.push(b'\'');
        beginning.extend_from_slice(c_string(argument, room));
        beginning.extend_from_slice(b"' ");
    }
    error_quoting(&[
        b"unknown command '",
        c_string(&command[0], 128),
        b"', with args beginning with: ",
        &beginning,
    ])
}

/// Runs one command on `store`, on a connection of its own: the reply, and whether the
/// client asked to close.
pub async fn execute(store: &StoreRef, command: Vec<Vec<u8>>) -> (Reply, bool) {
    match Session::new().plan(command) {
        Planned::Now(reply, quit) => (reply, quit),
        Planned::Store(op, render) => match store.run(vec![op]).await {
            Ok(mut outcomes) => (render.reply(outcomes.remove(0)), false),
            Err(error) => (failed(error), false),
        },
    }
}

/// What a command comes to: its reply now (and whether the client asked to close), or an
/// operation of the store and how its outcome is answered. A connection runs the store
/// operations of consecutive commands as one [`Store::run`](super::Store::run).
#[derive(Debug)]
pub enum Planned {
    /// Answered now: the reply, and whether the client asked to close the connection.
    Now(Reply, bool),
    /// Answered from the store: the operation, and how its outcome is answered.
    Store(Op, Render),
}

/// The reply to a store command that could not be run.
pub fn failed(error: actors::Error) -> Reply {
    Reply::error(format!("storage unavailable ({error}); try again"))
}

/// How a command answers its operation's [`Outcome`]. An [`Outcome::Error`] is answered
/// as the error, whatever the command.
#[derive(Debug)]
pub enum Render {
    /// A bulk string, or nil.
    Bulk,
    /// `BGREWRITEAOF`'s answer: started, or one already under way.
    Rewrite,
    /// `+OK` if applied, else nil (`SET`).
    SetReply,
    /// `:1` if applied, else `:0`.
    Flag,
    /// An integer.
    Integer,
    /// An array of bulk strings (`MGET`).
    Values,
    /// `+OK`.
    Ok,
    /// Milliseconds left, as seconds rounded the way Redis rounds them if `seconds` (`TTL`).
    TimeToLive {
        /// In seconds rather than milliseconds.
        seconds: bool,
    },
    /// A deadline in milliseconds, in seconds (rounded down) if `seconds` (`EXPIRETIME`).
    Deadline {
        /// In seconds rather than milliseconds.
        seconds: bool,
    },
    /// `+string` if the key is there, else `+none`.
    Type,
    /// `+OK` if renamed (`RENAME`).
    Renamed,
    /// An array of keys (`KEYS`).
    Keys,
    /// A cursor and an array of keys (`SCAN`).
    Scanned,
    /// The `INFO` text: the sections asked for.
    Info(Sections),
    /// `DBSIZE`: the number of keys.
    DbSize,
    /// A `CONFIG GET` answer: its pairs, `appendfsync`'s from the store if it matched.
    Config(Vec<Reply>, Option<Vec<u8>>),
    /// `EXEC`: each queued command's answer in order, given or from the store.
    Exec(Vec<Step>),
    /// This reply, whatever the outcome (an aborted `EXEC` that forgets watched keys).
    Given(Reply),
}

/// A command of a transaction at `EXEC`: answered without the store, or from its outcome.
#[derive(Debug)]
pub enum Step {
    /// Answered without the store.
    Now(Reply),
    /// Answered from the store's outcome, rendered so.
    Store(Render),
}

impl Render {
    /// The reply to `outcome`.
    pub fn reply(&self, outcome: Outcome) -> Reply {
        match (self, outcome) {
            (Render::Given(reply), _) => reply.clone(),
            (_, Outcome::Error(error)) => Reply::Error(error.into_bytes()),
            (Render::Bulk, Outcome::Value(value)) => Reply::Bulk(value),
            (Render::SetReply, Outcome::Applied(true))
            | (Render::Renamed, Outcome::Applied(true))
            | (Render::Ok, Outcome::Done | Outcome::Applied(true)) => Reply::ok(),
            (Render::SetReply, Outcome::Applied(false)) => Reply::Bulk(None),
            (Render::Flag, Outcome::Applied(applied)) => Reply::Integer(i64::from(applied)),
            (Render::Integer, Outcome::Count(count)) => Reply::Integer(count),
            (Render::Values, Outcome::Values(values)) => {
                Reply::Array(Some(values.into_iter().map(Reply::Bulk).collect()))
            }
            (Render::TimeToLive { seconds }, Outcome::Count(left)) => {
                Reply::Integer(if left >= 0 && *seconds {
                    (left + 500) / 1000
                } else {
                    left
                })
            }
            (Render::Deadline { seconds }, Outcome::Count(at)) => {
                Reply::Integer(if at >= 0 && *seconds { at / 1000 } else { at })
            }
            (Render::Type, Outcome::Applied(present)) => {
                Reply::Simple(if present { "string" } else { "none" }.into())
            }
            (Render::Keys, Outcome::Keys(keys)) => keys_reply(keys),
            (Render::Rewrite, Outcome::Applied(true)) => {
                Reply::Simple("Background append only file rewriting started".into())
            }
            (Render::Rewrite, Outcome::Applied(false)) => {
                Reply::error("Background append only file rewriting already in progress")
            }
            (Render::Scanned, Outcome::Scanned(cursor, keys)) => Reply::Array(Some(vec![
                Reply::bulk(cursor.to_string().into_bytes()),
                keys_reply(keys),
            ])),
            (
                Render::Info(sections),
                Outcome::Info {
                    keys,
                    expires,
                    syncs,
                    rewriting,
                },
            ) => Reply::bulk(info(*sections, keys, expires, syncs, rewriting).into_bytes()),
            (Render::DbSize, Outcome::Size(keys, _)) => {
                Reply::Integer(i64::try_from(keys).unwrap_or(i64::MAX))
            }
            (Render::Config(pairs, parameter), Outcome::Durability(name)) => {
                let mut pairs = pairs.clone();
                if let Some(parameter) = parameter {
                    pairs.push(Reply::bulk(parameter.clone()));
                    pairs.push(Reply::bulk(name.as_bytes().to_vec()));
                }
                Reply::Array(Some(pairs))
            }
            (Render::Exec(_), Outcome::Exec(None)) => Reply::Array(None),
            (Render::Exec(steps), Outcome::Exec(Some(outcomes))) => {
                let mut outcomes = outcomes.into_iter();
                let replies = steps
                    .iter()
                    .map(|step| match step {
                        Step::Now(reply) => reply.clone(),
                        Step::Store(render) => {
                            render.reply(outcomes.next().expect("one outcome per operation"))
                        }
                    })
                    .collect();
                Reply::Array(Some(replies))
            }
            (render, outcome) => unreachable!("{render:?} renders no {outcome:?}"),
        }
    }
}

fn keys_reply(keys: Vec<Vec<u8>>) -> Reply {
    Reply::Array(Some(keys.into_iter().map(Reply::bulk).collect()))
}

/// The `INFO` sections asked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sections {
    server: bool,
    persistence: bool,
    keyspace: bool,
}

/// The `INFO` text, Redis's layout: the sections asked for. `kv_log_syncs` counts the syncs
/// of the log since the store (re)started: a transaction adds one. `aof_rewrite_in_progress`
/// is 1 from a rewrite's start (or `BGREWRITEAOF`) until its log has taken over.
fn info(sections: Sections, keys: usize, expires: usize, syncs: u64, rewriting: bool) -> String {
    let mut parts = Vec::new();
    if sections.server {
        parts.push(format!(
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\n\
             os:{}\r\narch_bits:64\r\nprocess_id:{}\r\n",
            std::env::consts::OS,
            std::process::id()
        ));
    }
    if sections.persistence {
        parts.push(format!(
            "# Persistence\r\naof_enabled:1\r\naof_rewrite_in_progress:{}\r\n\
             kv_log_syncs:{syncs}\r\n",
            u8::from(rewriting)
        ));
    }
    if sections.keyspace {
        let mut keyspace = "# Keyspace\r\n".to_string();
        if keys > 0 {
            keyspace.push_str(&format!("db0:keys={keys},expires={expires},avg_ttl=0\r\n"));
        }
        parts.push(keyspace);
    }
    parts.join("\r\n")
}

fn not_integer() -> Reply {
    Reply::error("value is not an integer or out of range")
}

fn syntax() -> Reply {
    Reply::error("syntax error")
}

/// A command's error reply now.
fn now(reply: Reply) -> Planned {
    Planned::Now(reply, false)
}

/// Plans one command that [`check`] accepted, for `session` (`CLIENT`, `HELLO` and
/// `SELECT` read or change it). Transactions are the session's: see
/// [`Session::plan`].
/// A checked command's name in upper case, on the stack (no allocation per command): every
/// name [`check`] passes is at most [`Upper::MAX`] bytes.
pub struct Upper {
    bytes: [u8; Upper::MAX],
    length: usize,
}

/// Shows the name as text.
impl std::fmt::Debug for Upper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Upper")
            .field(&String::from_utf8_lossy(self.as_slice()))
            .finish()
    }
}

impl Upper {
    /// The longest command name, in bytes.
    pub const MAX: usize = 16;

    /// `name` in upper case; a longer name (never a checked one) is cut, and matches none.
    pub fn of(name: &[u8]) -> Upper {
        let mut bytes = [0; Upper::MAX];
        let length = name.len().min(Upper::MAX);
        bytes[..length].copy_from_slice(&name[..length]);
        bytes[..length].make_ascii_uppercase();
        Upper { bytes, length }
    }

    /// The name in upper case.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.length]
    }
}

/// What `command` (its name first, then its arguments) comes to for `session`.
pub fn plan(session: &mut Session, command: Vec<Vec<u8>>) -> Planned {
    let mut arguments = command.into_iter();
    let name = arguments.next().expect("checked: a command has a name");
    let arguments: Vec<Vec<u8>> = arguments.collect();
    let upper = Upper::of(&name);
    let upper = upper.as_slice();
    // Only for the errors that name the command: not made for the commands that succeed.
    let lower = || String::from_utf8_lossy(&name).to_lowercase();
    let store = Planned::Store;
    let reply = match (upper, arguments.as_slice()) {
        (b"PING", []) => Reply::Simple("PONG".into()),
        (b"PING", [message]) | (b"ECHO", [message]) => Reply::bulk(message.clone()),
        // Redis's arity lets `PING` take any number; the command takes at most one.
        (b"PING", _) => wrong_arity(&lower()),
        (b"QUIT", _) => return Planned::Now(Reply::ok(), true),
        (b"GET", [key]) => return store(Op::Get(key.clone()), Render::Bulk),
        (b"SET", [key, value, options @ ..]) => match set_options(options) {
            Err(reply) => reply,
            Ok((when, expiry, get)) => {
                let op = Op::Set {
                    key: key.clone(),
                    value: value.clone().into(),
                    when,
                    expiry,
                    get,
                };
                let render = if get { Render::Bulk } else { Render::SetReply };
                return store(op, render);
            }
        },
        (b"SETNX", [key, value]) => {
            let op = Op::Set {
                key: key.clone(),
                value: value.clone().into(),
                when: When::Absent,
                expiry: Expiry::Never,
                get: false,
            };
            return store(op, Render::Flag);
        }
        (b"SETEX" | b"PSETEX", [key, time, value]) => {
            let unit = if upper == b"SETEX" { 1000 } else { 1 };
            match expire_time(time, unit, true, &lower()) {
                Err(reply) => reply,
                Ok(deadline) => {
                    let op = Op::Set {
                        key: key.clone(),
                        value: value.clone().into(),
                        when: When::Always,
                        expiry: Expiry::At(deadline as u64),
                        get: false,
                    };
                    return store(op, Render::Ok);
                }
            }
        }
        (b"GETSET", [key, value]) => {
            let op = Op::Set {
                key: key.clone(),
                value: value.clone().into(),
                when: When::Always,
                expiry: Expiry::Never,
                get: true,
            };
            return store(op, Render::Bulk);
        }
        (b"GETDEL", [key]) => return store(Op::GetDel(key.clone()), Render::Bulk),
        (b"GETEX", [key, options @ ..]) => match getex_options(options) {
            Err(reply) => reply,
            Ok(change) => return store(Op::GetEx(key.clone(), change), Render::Bulk),
        },
        (b"DEL" | b"UNLINK", keys) => return store(Op::Del(keys.to_vec()), Render::Integer),
        (b"EXISTS" | b"TOUCH", keys) => return store(Op::Exists(keys.to_vec()), Render::Integer),
        (b"INCR" | b"DECR", [key]) => {
            let by = if upper == b"INCR" { 1 } else { -1 };
            return store(Op::Add(key.clone(), by), Render::Integer);
        }
        (b"INCRBY", [key, by]) => match parse_integer(by) {
            None => not_integer(),
            Some(by) => return store(Op::Add(key.clone(), by), Render::Integer),
        },
        (b"DECRBY", [key, by]) => match parse_integer(by) {
            None => not_integer(),
            // Negating the smallest integer overflows: refused as Redis words it.
            Some(i64::MIN) => Reply::error("decrement would overflow"),
            Some(by) => return store(Op::Add(key.clone(), -by), Render::Integer),
        },
        (b"INCRBYFLOAT", [key, by]) => {
            return store(Op::AddFloat(key.clone(), by.clone()), Render::Bulk);
        }
        (b"APPEND", [key, value]) => {
            return store(Op::Append(key.clone(), value.clone()), Render::Integer);
        }
        (b"STRLEN", [key]) => return store(Op::Strlen(key.clone()), Render::Integer),
        (b"GETRANGE", [key, start, end]) => match (parse_integer(start), parse_integer(end)) {
            (Some(start), Some(end)) => {
                return store(Op::GetRange(key.clone(), start, end), Render::Bulk);
            }
            _ => not_integer(),
        },
        (b"SETRANGE", [key, offset, value]) => match parse_integer(offset) {
            None => not_integer(),
            Some(offset) if offset < 0 => Reply::error("offset is out of range"),
            Some(offset) => {
                let offset = usize::try_from(offset).unwrap_or(usize::MAX);
                return store(
                    Op::SetRange(key.clone(), offset, value.clone()),
                    Render::Integer,
                );
            }
        },
        (b"MGET", keys) => return store(Op::GetMany(keys.to_vec()), Render::Values),
        (b"MSET" | b"MSETNX", pairs) if pairs.len() % 2 == 0 => {
            let pairs = pairs
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].clone().into()))
                .collect();
            let absent = upper == b"MSETNX";
            let render = if absent { Render::Flag } else { Render::Ok };
            return store(Op::SetMany { pairs, absent }, render);
        }
        // The pairs' count is the command's own check (Redis's arity allows any count).
        (b"MSET" | b"MSETNX", _) => wrong_arity(&lower()),
        (b"EXPIRE" | b"PEXPIRE" | b"EXPIREAT" | b"PEXPIREAT", [key, time, options @ ..]) => {
            match expire(upper, &lower(), time, options) {
                Err(reply) => reply,
                Ok((at, condition)) => {
                    let op = Op::Expire {
                        key: key.clone(),
                        at,
                        condition,
                    };
                    return store(op, Render::Flag);
                }
            }
        }
        (b"PERSIST", [key]) => return store(Op::Persist(key.clone()), Render::Flag),
        (b"TTL" | b"PTTL", [key]) => {
            let seconds = upper == b"TTL";
            return store(Op::TimeToLive(key.clone()), Render::TimeToLive { seconds });
        }
        (b"EXPIRETIME" | b"PEXPIRETIME", [key]) => {
            let seconds = upper == b"EXPIRETIME";
            return store(Op::ExpireTime(key.clone()), Render::Deadline { seconds });
        }
        (b"TYPE", [key]) => return store(Op::Type(key.clone()), Render::Type),
        (b"RENAME" | b"RENAMENX", [from, to]) => {
            let absent = upper == b"RENAMENX";
            let op = Op::Rename {
                from: from.clone(),
                to: to.clone(),
                absent,
            };
            return store(
                op,
                if absent {
                    Render::Flag
                } else {
                    Render::Renamed
                },
            );
        }
        (b"KEYS", [pattern]) => return store(Op::Keys(pattern.clone()), Render::Keys),
        (b"SCAN", [cursor, options @ ..]) => match scan(cursor, options) {
            Err(reply) => reply,
            Ok(op) => return store(op, Render::Scanned),
        },
        (b"RANDOMKEY", []) => return store(Op::RandomKey, Render::Bulk),
        (b"FLUSHALL" | b"FLUSHDB", options) => match options {
            [] => return store(Op::Flush, Render::Ok),
            [mode] if mode.eq_ignore_ascii_case(b"SYNC") || mode.eq_ignore_ascii_case(b"ASYNC") => {
                return store(Op::Flush, Render::Ok);
            }
            _ => syntax(),
        },
        (b"DBSIZE", []) => return store(Op::Size, Render::DbSize),
        (b"BGREWRITEAOF", []) => return store(Op::Rewrite, Render::Rewrite),
        (b"INFO", sections) => return store(Op::Info, Render::Info(info_sections(sections))),
        (b"SELECT", [index]) => match parse_integer(index) {
            None => not_integer(),
            // Redis reads the index as a C `int`.
            Some(index) if i32::try_from(index).is_err() => Reply::error(format!(
                "value is out of range, value must between {} and {}",
                i32::MIN,
                i32::MAX
            )),
            Some(0) => Reply::ok(),
            // One database, as Redis configured with `databases 1` answers.
            Some(_) => Reply::error("DB index is out of range"),
        },
        (b"HELLO", _) => hello(session, &arguments),
        (b"CLIENT", [subcommand, rest @ ..]) => client(session, subcommand, rest),
        (b"COMMAND", []) => Reply::Array(Some(
            COMMANDS
                .iter()
                .map(|(name, arity, ..)| {
                    Reply::Array(Some(vec![
                        Reply::bulk(name.as_bytes().to_vec()),
                        Reply::Integer(*arity),
                    ]))
                })
                .collect(),
        )),
        (b"COMMAND", [subcommand, names @ ..]) => {
            if subcommand.eq_ignore_ascii_case(b"COUNT") {
                Reply::Integer(COMMANDS.len() as i64)
            } else {
                docs(names)
            }
        }
        (b"CONFIG", [_, patterns @ ..]) => return config(patterns),
        _ => unreachable!("checked, and every command checked is planned: {}", lower()),
    };
    now(reply)
}

/// `SET`'s options, as Redis 7 reads them: every option first (a repeated `EX` is allowed,
/// the last one counts; conflicting ones are a syntax error), then the expire time.
fn set_options(options: &[Vec<u8>]) -> Result<(When, Expiry, bool), Reply> {
    let mut when = When::Always;
    let mut keep = false;
    let mut get = false;
    // The unit (ms per unit), whether absolute, and the time as written.
    let mut time: Option<(i64, bool, &[u8], &'static str)> = None;
    let mut at = 0;
    while at < options.len() {
        let option = options[at].to_ascii_uppercase();
        let next = options.get(at + 1);
        let unit = time.map(|(_, _, _, unit)| unit);
        match (option.as_slice(), next) {
            (b"NX", _) if when != When::Present => when = When::Absent,
            (b"XX", _) if when != When::Absent => when = When::Present,
            (b"GET", _) => get = true,
            (b"KEEPTTL", _) if time.is_none() => keep = true,
            (b"EX", Some(next)) if !keep && unit.is_none_or(|unit| unit == "EX") => {
                time = Some((1000, false, next, "EX"));
                at += 1;
            }
            (b"PX", Some(next)) if !keep && unit.is_none_or(|unit| unit == "PX") => {
                time = Some((1, false, next, "PX"));
                at += 1;
            }
            (b"EXAT", Some(next)) if !keep && unit.is_none_or(|unit| unit == "EXAT") => {
                time = Some((1000, true, next, "EXAT"));
                at += 1;
            }
            (b"PXAT", Some(next)) if !keep && unit.is_none_or(|unit| unit == "PXAT") => {
                time = Some((1, true, next, "PXAT"));
                at += 1;
            }
            _ => return Err(syntax()),
        }
        at += 1;
    }
    let expiry = match time {
        None if keep => Expiry::Keep,
        None => Expiry::Never,
        Some((unit, absolute, time, _)) => {
            Expiry::At(expire_time(time, unit, !absolute, "set")? as u64)
        }
    };
    Ok((when, expiry, get))
}

/// An expire time of `SET`, `SETEX`, `GETEX`: a positive integer of `unit` milliseconds,
/// from now if `relative`; the deadline in milliseconds since the epoch. Errors as Redis's.
fn expire_time(time: &[u8], unit: i64, relative: bool, command: &str) -> Result<i64, Reply> {
    let time = parse_integer(time).ok_or_else(not_integer)?;
    let invalid = || Reply::error(format!("invalid expire time in '{command}' command"));
    if time <= 0 {
        return Err(invalid());
    }
    let time = time.checked_mul(unit).ok_or_else(invalid)?;
    if relative {
        time.checked_add(log::now_ms() as i64).ok_or_else(invalid)
    } else {
        Ok(time)
    }
}

/// `GETEX`'s options (`EX`, `PX`, `EXAT`, `PXAT` or `PERSIST`), read as `SET`'s are; a bad
/// time is kept as the error to answer if the key is there.
fn getex_options(options: &[Vec<u8>]) -> Result<Result<ExpiryChange, String>, Reply> {
    let mut change: Option<(i64, bool, &[u8])> = None;
    let mut persist = false;
    let mut at = 0;
    while at < options.len() {
        let option = options[at].to_ascii_uppercase();
        let next = options.get(at + 1);
        match (option.as_slice(), next) {
            (b"PERSIST", _) if change.is_none() => persist = true,
            (unit @ (b"EX" | b"PX" | b"EXAT" | b"PXAT"), Some(next))
                if !persist
                    && change.is_none_or(|(ms, absolute, _)| (ms, absolute) == unit_of(unit)) =>
            {
                let (ms, absolute) = unit_of(unit);
                change = Some((ms, absolute, next));
                at += 1;
            }
            _ => return Err(syntax()),
        }
        at += 1;
    }
    Ok(match change {
        None if persist => Ok(ExpiryChange::Persist),
        None => Ok(ExpiryChange::Keep),
        Some((unit, absolute, time)) => expire_time(time, unit, !absolute, "getex")
            .map(ExpiryChange::At)
            .map_err(|reply| match reply {
                Reply::Error(error) => String::from_utf8_lossy(&error).into_owned(),
                other => unreachable!("an error: {other:?}"),
            }),
    })
}

/// An expire option's unit in milliseconds, and whether it is absolute.
fn unit_of(option: &[u8]) -> (i64, bool) {
    match option {
        b"EX" => (1000, false),
        b"PX" => (1, false),
        b"EXAT" => (1000, true),
        _ => (1, true),
    }
}

/// `EXPIRE` and its kin: the options (`NX`, `XX`, `GT`, `LT`), then the time (any integer:
/// one at or before now removes the key); the deadline in milliseconds since the epoch.
fn expire(
    upper: &[u8],
    lower: &str,
    time: &[u8],
    options: &[Vec<u8>],
) -> Result<(i64, Condition), Reply> {
    let mut condition = Condition::default();
    for option in options {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" => condition.nx = true,
            b"XX" => condition.xx = true,
            b"GT" => condition.gt = true,
            b"LT" => condition.lt = true,
            _ => {
                return Err(error_quoting(&[
                    b"Unsupported option ",
                    c_string(option, usize::MAX),
                ]));
            }
        }
    }
    if condition.nx && (condition.xx || condition.gt || condition.lt) {
        return Err(Reply::error(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if condition.gt && condition.lt {
        return Err(Reply::error(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let time = parse_integer(time).ok_or_else(not_integer)?;
    let invalid = || Reply::error(format!("invalid expire time in '{lower}' command"));
    let (unit, base) = match upper {
        b"EXPIRE" => (1000, log::now_ms() as i64),
        b"PEXPIRE" => (1, log::now_ms() as i64),
        b"EXPIREAT" => (1000, 0),
        _ => (1, 0),
    };
    let at = time
        .checked_mul(unit)
        .and_then(|time| time.checked_add(base))
        .ok_or_else(invalid)?;
    Ok((at, condition))
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`, as Redis reads it.
fn scan(cursor: &[u8], options: &[Vec<u8>]) -> Result<Op, Reply> {
    let cursor = parse_cursor(cursor).ok_or_else(|| Reply::error("invalid cursor"))?;
    let (mut pattern, mut count, mut strings) = (None, 10usize, true);
    let mut at = 0;
    while at < options.len() {
        let option = options[at].to_ascii_uppercase();
        let Some(value) = options.get(at + 1) else {
            return Err(syntax());
        };
        match option.as_slice() {
            b"COUNT" => {
                let value = parse_integer(value).ok_or_else(not_integer)?;
                if value < 1 {
                    return Err(syntax());
                }
                count = usize::try_from(value).unwrap_or(usize::MAX);
            }
            // `*` alone matches everything: no pattern to test.
            b"MATCH" => pattern = (value.as_slice() != b"*").then(|| value.clone()),
            b"TYPE" => strings = value.eq_ignore_ascii_case(b"string"),
            _ => return Err(syntax()),
        }
        at += 2;
    }
    Ok(Op::Scan {
        cursor,
        pattern,
        count,
        strings,
    })
}

/// A cursor as Redis reads one (`strtoul`): an optional sign and decimal digits (a `-`
/// wraps, as in C), nothing else, up to a NUL; the empty string is 0.
fn parse_cursor(text: &[u8]) -> Option<u64> {
    // C reads the argument up to a NUL.
    let text = c_string(text, usize::MAX);
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if text.is_empty() {
        return Some(0);
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// Which `INFO` sections are asked for: all by default, and for `all`, `everything`,
/// `default`; unknown ones give nothing, as in Redis.
fn info_sections(sections: &[Vec<u8>]) -> Sections {
    let asked = |name: &[u8]| {
        sections.is_empty()
            || sections.iter().any(|section| {
                section.eq_ignore_ascii_case(name)
                    || [&b"all"[..], b"everything", b"default"]
                        .iter()
                        .any(|all| section.eq_ignore_ascii_case(all))
            })
    };
    Sections {
        server: asked(b"server"),
        persistence: asked(b"persistence"),
        keyspace: asked(b"keyspace"),
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: RESP2 only. A request for RESP3 is
/// refused with `NOPROTO` (as by Redis 6 and its clients' fallback expects); there is no
/// authentication (as Redis's default user without a password).
fn hello(session: &mut Session, arguments: &[Vec<u8>]) -> Reply {
    let mut options = arguments;
    if let [version, rest @ ..] = arguments {
        let Some(version) = parse_integer(version) else {
            return Reply::error("Protocol version is not an integer or out of range");
        };
        if version != 2 {
            return Reply::Error(b"NOPROTO unsupported protocol version".to_vec());
        }
        options = rest;
    }
    let mut name = None;
    let mut at = 0;
    while at < options.len() {
        let more = options.len() - 1 - at;
        let option = &options[at];
        if option.eq_ignore_ascii_case(b"AUTH") && more >= 2 {
            if !options[at + 1].eq_ignore_ascii_case(b"default") {
                return Reply::Error(
                    b"WRONGPASS invalid username-password pair or user is disabled.".to_vec(),
                );
            }
            at += 3;
        } else if option.eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
            name = Some(options[at + 1].clone());
            at += 2;
        } else {
            return error_quoting(&[
                b"Syntax error in HELLO option '",
                c_string(option, usize::MAX),
                b"'",
            ]);
        }
    }
    if let Some(name) = name
        && let Err(reply) = session.set_name(name)
    {
        return reply;
    }
    Reply::Array(Some(vec![
        Reply::bulk(b"server".to_vec()),
        Reply::bulk(b"redis".to_vec()),
        Reply::bulk(b"version".to_vec()),
        Reply::bulk(REDIS_VERSION.as_bytes().to_vec()),
        Reply::bulk(b"proto".to_vec()),
        Reply::Integer(2),
        Reply::bulk(b"id".to_vec()),
        Reply::Integer(session.id() as i64),
        Reply::bulk(b"mode".to_vec()),
        Reply::bulk(b"standalone".to_vec()),
        Reply::bulk(b"role".to_vec()),
        Reply::bulk(b"master".to_vec()),
        Reply::bulk(b"modules".to_vec()),
        Reply::Array(Some(Vec::new())),
    ]))
}

/// `CLIENT SETNAME`, `GETNAME`, `SETINFO` (Redis 7.2's, accepted and kept for nothing but
/// the answer) and `ID`, for this connection.
fn client(session: &mut Session, subcommand: &[u8], rest: &[Vec<u8>]) -> Reply {
    match (subcommand.to_ascii_uppercase().as_slice(), rest) {
        (b"SETNAME", [name]) => match session.set_name(name.clone()) {
            Ok(()) => Reply::ok(),
            Err(reply) => reply,
        },
        (b"GETNAME", []) => Reply::Bulk(session.name().map(|name| name.to_vec().into())),
        (b"SETINFO", [attribute, _]) => {
            if attribute.eq_ignore_ascii_case(b"LIB-NAME")
                || attribute.eq_ignore_ascii_case(b"LIB-VER")
            {
                Reply::ok()
            } else {
                error_quoting(&[
                    b"Unrecognized option '",
                    c_string(attribute, usize::MAX),
                    b"'",
                ])
            }
        }
        (b"ID", []) => Reply::Integer(session.id() as i64),
        _ => unreachable!("checked: CLIENT's subcommands and their arity"),
    }
}

/// `COMMAND DOCS [name ...]`: for each command implemented (those named, or all), its
/// summary and group; names not implemented are left out, as Redis leaves out unknown ones.
fn docs(names: &[Vec<u8>]) -> Reply {
    let wanted = |name: &str| {
        names.is_empty()
            || names
                .iter()
                .any(|asked| asked.eq_ignore_ascii_case(name.as_bytes()))
    };
    let mut docs = Vec::new();
    for (name, _, group, summary) in COMMANDS.iter().filter(|entry| wanted(entry.0)) {
        docs.push(Reply::bulk(name.as_bytes().to_vec()));
        docs.push(Reply::Array(Some(vec![
            Reply::bulk(b"summary".to_vec()),
            Reply::bulk(summary.as_bytes().to_vec()),
            Reply::bulk(b"group".to_vec()),
            Reply::bulk(group.as_bytes().to_vec()),
        ])));
    }
    Reply::Array(Some(docs))
}

/// `CONFIG GET pattern ...`: the parameters kv has that match (glob patterns, as Redis).
fn config(patterns: &[Vec<u8>]) -> Planned {
    const FIXED: &[(&str, &str)] = &[("save", ""), ("appendonly", "yes"), ("databases", "1")];
    let matching = |name: &str| {
        patterns
            .iter()
            .any(|pattern| super::pattern::matches(&pattern.to_ascii_lowercase(), name.as_bytes()))
    };
    let mut pairs = Vec::new();
    for (name, value) in FIXED.iter().filter(|(name, _)| matching(name)) {
        pairs.push(Reply::bulk(name.as_bytes().to_vec()));
        pairs.push(Reply::bulk(value.as_bytes().to_vec()));
    }
    let durability = matching("appendfsync").then(|| b"appendfsync".to_vec());
    Planned::Store(Op::Durability, Render::Config(pairs, durability))
}

/// A decimal integer as Redis reads one (`string2ll`): optional `-`, no `+`, no leading
/// zero, no space, within `i64`.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let canonical = !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits == b"0" || digits[0] != b'0')
        && bytes != b"-0";
    if !canonical {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    /// `check` finds names by binary search: the table is sorted, and every name fits
    /// `Upper`.
    #[test]
    fn the_command_table_is_sorted_and_its_names_are_short() {
        let names: Vec<&str> = super::COMMANDS.iter().map(|entry| entry.0).collect();
        assert!(names.windows(2).all(|pair| pair[0] < pair[1]), "{names:?}");
        assert!(names.iter().all(|name| name.len() <= super::Upper::MAX));
        assert!(
            names
                .iter()
                .all(|name| name.bytes().all(|byte| byte.is_ascii_lowercase()))
        );
    }

    use super::check;

    /// Names and subcommands are compared in ASCII case only, as Redis compares them: a
    /// Unicode fold (the Kelvin sign, U+212A, folds to `k`) must not pass a name `plan` does
    /// not know (it panicked the server).
    #[test]
    fn names_fold_ascii_case_only() {
        let kelvin = "\u{212A}".as_bytes();
        let keys = [[kelvin, b"EYS"].concat(), b"*".to_vec()];
        assert!(check(&keys).is_err());
        let random = [[b"RANDOM".as_slice(), kelvin, b"EY"].concat()];
        assert!(check(&random).is_err());
        assert!(check(&[b"kEyS".to_vec(), b"*".to_vec()]).is_ok());
        let name = [
            b"CLIENT".to_vec(),
            [b"SETNAME".as_slice(), kelvin].concat(),
            b"x".to_vec(),
        ];
        assert!(check(&name).is_err());
    }
}
