//! The commands: each parsed from its arguments as Redis does, run on the store, and
//! answered with Redis's reply or Redis's error wording.

use super::log;
use super::store::{Expiry, Op, Outcome, StoreRef, When};
use crate::resp::Reply;

/// The Redis version `HELLO` and `INFO` report: the protocol this service follows.
pub const REDIS_VERSION: &str = "7.0.0";

/// Runs one command on `store`: the reply, and whether the client asked to close.
pub async fn execute(store: &StoreRef, command: Vec<Vec<u8>>) -> (Reply, bool) {
    match plan(command) {
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
pub enum Planned {
    Now(Reply, bool),
    Store(Op, Render),
}

/// The reply to a store command that could not be run.
pub fn failed(error: actors::Error) -> Reply {
    Reply::error(format!("storage unavailable ({error}); try again"))
}

/// How a command answers its operation's [`Outcome`].
#[derive(Debug)]
pub enum Render {
    /// A bulk string, or nil.
    Bulk,
    /// `+OK` if applied, else nil (`SET`).
    SetReply,
    /// `:1` if applied, else `:0`.
    Flag,
    Integer,
    /// The new value, or the error (`INCR`).
    Added,
    /// An array of bulk strings (`MGET`).
    Values,
    Ok,
    /// Milliseconds left, as seconds rounded the way Redis rounds them if `seconds` (`TTL`).
    TimeToLive {
        seconds: bool,
    },
    Info,
    DbSize,
    /// A `CONFIG GET` answer: the parameter and the value.
    Config(Vec<u8>),
}

impl Render {
    /// The reply to `outcome`.
    pub fn reply(&self, outcome: Outcome) -> Reply {
        match (self, outcome) {
            (Render::Bulk, Outcome::Value(value)) => Reply::Bulk(value),
            (Render::SetReply, Outcome::Applied(true)) | (Render::Ok, Outcome::Done) => Reply::ok(),
            (Render::SetReply, Outcome::Applied(false)) => Reply::Bulk(None),
            (Render::Flag, Outcome::Applied(applied)) => Reply::Integer(i64::from(applied)),
            (Render::Integer, Outcome::Count(count)) => Reply::Integer(count),
            (Render::Added, Outcome::Added(Ok(value))) => Reply::Integer(value),
            (Render::Added, Outcome::Added(Err(error))) => Reply::Error(error),
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
            (Render::Info, Outcome::Size(keys, expires)) => Reply::bulk(
                format!(
                    "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\n\
                     # Persistence\r\naof_enabled:1\r\n# Keyspace\r\n\
                     db0:keys={keys},expires={expires},avg_ttl=0\r\n"
                )
                .into_bytes(),
            ),
            (Render::DbSize, Outcome::Size(keys, _)) => {
                Reply::Integer(i64::try_from(keys).unwrap_or(i64::MAX))
            }
            (Render::Config(parameter), Outcome::Durability(name)) => Reply::Array(Some(vec![
                Reply::bulk(parameter.clone()),
                Reply::bulk(name.as_bytes().to_vec()),
            ])),
            (render, outcome) => unreachable!("{render:?} renders no {outcome:?}"),
        }
    }
}

/// Plans one command: see [`Planned`].
pub fn plan(command: Vec<Vec<u8>>) -> Planned {
    let store = Planned::Store;
    let mut arguments = command.into_iter();
    let Some(name) = arguments.next() else {
        return Planned::Now(Reply::error("empty command"), false);
    };
    let arguments: Vec<Vec<u8>> = arguments.collect();
    let upper = name.to_ascii_uppercase();
    let lower = String::from_utf8_lossy(&name).to_lowercase();
    let wrong = || Reply::error(format!("wrong number of arguments for '{lower}' command"));
    let not_integer = || Reply::error("value is not an integer or out of range");
    let reply = match (upper.as_slice(), arguments.as_slice()) {
        (b"PING", []) => Reply::Simple("PONG".into()),
        (b"PING", [message]) | (b"ECHO", [message]) => Reply::bulk(message.clone()),
        (b"PING", _) | (b"ECHO", _) => wrong(),
        (b"QUIT", _) => return Planned::Now(Reply::ok(), true),
        (b"COMMAND", _) => Reply::Array(Some(Vec::new())),
        (b"GET", [key]) => return store(Op::Get(key.clone()), Render::Bulk),
        (b"GET", _) => wrong(),
        (b"SET", [key, value, options @ ..]) => match set_options(options) {
            Err(reply) => reply,
            Ok((when, expiry)) => {
                let op = Op::Set {
                    key: key.clone(),
                    value: value.clone().into(),
                    when,
                    expiry,
                };
                return store(op, Render::SetReply);
            }
        },
        (b"SET", _) => wrong(),
        (b"DEL", keys) if !keys.is_empty() => {
            return store(Op::Del(keys.to_vec()), Render::Integer);
        }
        (b"EXISTS", keys) if !keys.is_empty() => {
            return store(Op::Exists(keys.to_vec()), Render::Integer);
        }
        (b"DEL", _) | (b"EXISTS", _) => wrong(),
        (b"INCR" | b"DECR", [key]) | (b"INCRBY" | b"DECRBY", [key, _]) => {
            let by = match arguments.get(1) {
                None => Some(1),
                Some(by) => parse_integer(by),
            };
            let negate = matches!(upper.as_slice(), b"DECR" | b"DECRBY");
            let by = by.and_then(|by| if negate { by.checked_neg() } else { Some(by) });
            match by {
                None => not_integer(),
                Some(by) => return store(Op::Add(key.clone(), by), Render::Added),
            }
        }
        (b"INCR" | b"DECR" | b"INCRBY" | b"DECRBY", _) => wrong(),
        (b"MGET", keys) if !keys.is_empty() => {
            return store(Op::GetMany(keys.to_vec()), Render::Values);
        }
        (b"MSET", pairs) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
            let pairs = pairs
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].clone().into()))
                .collect();
            return store(Op::SetMany(pairs), Render::Ok);
        }
        (b"MGET" | b"MSET", _) => wrong(),
        (b"EXPIRE" | b"PEXPIRE" | b"EXPIREAT" | b"PEXPIREAT", [key, time]) => {
            let deadline = parse_integer(time).and_then(|time| {
                let now = log::now_ms() as i64;
                match upper.as_slice() {
                    b"EXPIRE" => time.checked_mul(1000)?.checked_add(now),
                    b"PEXPIRE" => time.checked_add(now),
                    b"EXPIREAT" => time.checked_mul(1000),
                    _ => Some(time),
                }
            });
            match deadline {
                None => Reply::error(format!("invalid expire time in '{lower}' command")),
                // At or before the epoch: due now (the key is removed).
                Some(deadline) => {
                    let op = Op::ExpireAt(key.clone(), Some(deadline.max(1) as u64));
                    return store(op, Render::Flag);
                }
            }
        }
        (b"PERSIST", [key]) => {
            return store(Op::ExpireAt(key.clone(), None), Render::Flag);
        }
        (b"TTL" | b"PTTL", [key]) => {
            let seconds = upper.as_slice() == b"TTL";
            return store(Op::TimeToLive(key.clone()), Render::TimeToLive { seconds });
        }
        (
            b"EXPIRE" | b"PEXPIRE" | b"EXPIREAT" | b"PEXPIREAT" | b"PERSIST" | b"TTL" | b"PTTL",
            _,
        ) => wrong(),
        (b"FLUSHALL" | b"FLUSHDB", options)
            if options.iter().all(|option| {
                matches!(option.to_ascii_uppercase().as_slice(), b"SYNC" | b"ASYNC")
            }) =>
        {
            return store(Op::Flush, Render::Ok);
        }
        (b"FLUSHALL" | b"FLUSHDB", _) => Reply::error("syntax error"),
        // What clients ask as they start: enough for `redis-cli` and `redis-benchmark`.
        (b"HELLO", []) | (b"HELLO", [_, ..])
            if arguments.first().is_none_or(|version| version == b"2") =>
        {
            Reply::Array(Some(vec![
                Reply::bulk(b"server".to_vec()),
                Reply::bulk(b"redis".to_vec()),
                Reply::bulk(b"version".to_vec()),
                Reply::bulk(REDIS_VERSION.as_bytes().to_vec()),
                Reply::bulk(b"proto".to_vec()),
                Reply::Integer(2),
                Reply::bulk(b"mode".to_vec()),
                Reply::bulk(b"standalone".to_vec()),
                Reply::bulk(b"role".to_vec()),
                Reply::bulk(b"master".to_vec()),
                Reply::bulk(b"modules".to_vec()),
                Reply::Array(Some(Vec::new())),
            ]))
        }
        (b"HELLO", _) => Reply::Error("NOPROTO unsupported protocol version".into()),
        (b"CLIENT", [subcommand, ..]) => match subcommand.to_ascii_uppercase().as_slice() {
            b"SETNAME" | b"SETINFO" => Reply::ok(),
            b"GETNAME" => Reply::Bulk(None),
            b"ID" => Reply::Integer(1),
            _ => Reply::error(format!(
                "unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(subcommand)
            )),
        },
        (b"CONFIG", [subcommand, parameter]) if subcommand.eq_ignore_ascii_case(b"GET") => {
            let parameter = parameter.to_ascii_lowercase();
            let name = parameter.clone();
            let pair = move |value: &[u8]| {
                Reply::Array(Some(vec![
                    Reply::bulk(parameter.clone()),
                    Reply::bulk(value.to_vec()),
                ]))
            };
            match name.as_slice() {
                b"save" => pair(b""),
                b"appendonly" => pair(b"yes"),
                b"databases" => pair(b"1"),
                b"appendfsync" => return store(Op::Durability, Render::Config(name)),
                _ => Reply::Array(Some(Vec::new())),
            }
        }
        (b"CONFIG", _) => Reply::error("CONFIG answers GET parameter only here"),
        (b"INFO", _) => return store(Op::Size, Render::Info),
        (b"DBSIZE", []) => return store(Op::Size, Render::DbSize),
        (b"DBSIZE", _) => wrong(),
        _ => {
            // As Redis words it: the name cut at 128 characters, then arguments while what
            // is listed stays under 128.
            let clip = |bytes: &[u8], at: usize| -> String {
                String::from_utf8_lossy(bytes).chars().take(at).collect()
            };
            let mut beginning = String::new();
            for argument in &arguments {
                let room = 128usize.saturating_sub(beginning.len());
                if room == 0 {
                    break;
                }
                beginning.push_str(&format!("'{}' ", clip(argument, room)));
            }
            Reply::error(format!(
                "unknown command '{}', with args beginning with: {beginning}",
                clip(&name, 128)
            ))
        }
    };
    Planned::Now(reply, false)
}

/// `SET`'s options, as Redis reads them: `NX` or `XX`, and one of `EX`, `PX`, `EXAT`,
/// `PXAT` (a positive integer) or `KEEPTTL`.
fn set_options(options: &[Vec<u8>]) -> Result<(When, Expiry), Reply> {
    let syntax = || Reply::error("syntax error");
    let mut when = When::Always;
    let mut expiry = None;
    let mut options = options.iter();
    while let Some(option) = options.next() {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" if when != When::Present => when = When::Absent,
            b"XX" if when != When::Absent => when = When::Present,
            b"KEEPTTL" if expiry.is_none_or(|expiry| expiry == Expiry::Keep) => {
                expiry = Some(Expiry::Keep);
            }
            unit @ (b"EX" | b"PX" | b"EXAT" | b"PXAT") if expiry.is_none() => {
                let time = options.next().ok_or_else(syntax)?;
                let time = parse_integer(time)
                    .ok_or_else(|| Reply::error("value is not an integer or out of range"))?;
                let invalid = || Reply::error("invalid expire time in 'set' command");
                if time <= 0 {
                    return Err(invalid());
                }
                let now = log::now_ms() as i64;
                let deadline = match unit {
                    b"EX" => time.checked_mul(1000).and_then(|ms| ms.checked_add(now)),
                    b"PX" => time.checked_add(now),
                    b"EXAT" => time.checked_mul(1000),
                    _ => Some(time),
                };
                expiry = Some(Expiry::At(deadline.ok_or_else(invalid)? as u64));
            }
            b"GET" => return Err(Reply::error("SET GET is not supported here")),
            _ => return Err(syntax()),
        }
    }
    Ok((when, expiry.unwrap_or(Expiry::Never)))
}

/// A decimal integer as Redis reads one for `INCR`: optional `-`, no `+`, no leading zero,
/// within `i64`.
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
