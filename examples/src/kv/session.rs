//! A connection's state: its id and name, and its transaction (`MULTI` ... `EXEC`) and
//! watched keys, with Redis's semantics.
//!
//! Invariants:
//! - **A transaction is one unit**: its commands are queued here (`+QUEUED`) and, at `EXEC`,
//!   planned together into one [`Op::Exec`], which the store runs as one message: no other
//!   client's command runs between them, and their records go to the log in one commit
//!   (one sync) before any of their replies is sent.
//! - **Errors Redis finds before queueing abort the transaction**: an unknown command or a
//!   wrong number of arguments ([`commands::check`]) is answered at once and makes `EXEC`
//!   answer `-EXECABORT`; any other error (a syntax error, a bad number, a value of the
//!   wrong kind) is that command's reply inside `EXEC`'s, as in Redis.
//! - **A watched key changed means no transaction**: `WATCH` registers the keys with the
//!   store; any change to one (by any client, by expiry, by `FLUSHALL`) until `EXEC` makes
//!   `EXEC` answer a nil array and run nothing. `EXEC`, `DISCARD`, `UNWATCH` and the
//!   connection's end forget the keys.
//! - **Bounded**: a transaction queues at most [`MAX_QUEUED`] commands and
//!   [`MAX_QUEUED_BYTES`] of arguments; past either, the command is refused and `EXEC`
//!   aborts.

use super::commands::{self, Planned, Render, Step};
use super::store::Op;
use crate::resp::Reply;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers connections (`CLIENT ID`, and what the store files watched keys under).
static SESSIONS: AtomicU64 = AtomicU64::new(1);

/// One connection's state.
pub struct Session {
    id: u64,
    name: Option<Vec<u8>>,
    /// After `MULTI`: the commands queued.
    transaction: Option<Transaction>,
    /// Keys were watched (and not yet forgotten).
    watching: bool,
}

/// Shows the id, the name, whether a transaction is open (and how many commands it
/// queued) and whether keys are watched; not the queued commands.
impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("name", &self.name.as_deref().map(String::from_utf8_lossy))
            .field(
                "queued",
                &self
                    .transaction
                    .as_ref()
                    .map(|transaction| transaction.queued.len()),
            )
            .field("watching", &self.watching)
            .finish()
    }
}

struct Transaction {
    queued: Vec<Vec<Vec<u8>>>,
    /// The bytes of the queued commands' arguments.
    weight: usize,
    /// A command was refused as it was queued: `EXEC` aborts.
    refused: bool,
}

/// The most a transaction may queue, in commands and in bytes of their arguments: a
/// connection's memory stays bounded (past either, the command is refused and `EXEC`
/// aborts, as for any command refused as it is queued).
pub const MAX_QUEUED: usize = 100_000;
/// The most bytes of arguments a transaction may queue.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    /// A new session, with an id no other session of the process has.
    pub fn new() -> Session {
        Session {
            id: SESSIONS.fetch_add(1, Ordering::Relaxed),
            name: None,
            transaction: None,
            watching: false,
        }
    }

    /// The session's id (`CLIENT ID`).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name the client gave (`CLIENT SETNAME`).
    pub fn name(&self) -> Option<&[u8]> {
        self.name.as_deref()
    }

    /// `CLIENT SETNAME`: printable ASCII without spaces, as Redis allows; empty clears it.
    pub fn set_name(&mut self, name: Vec<u8>) -> Result<(), Reply> {
        if name.iter().any(|byte| !(b'!'..=b'~').contains(byte)) {
            return Err(Reply::error(
                "Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        self.name = (!name.is_empty()).then_some(name);
        Ok(())
    }

    /// What the store must forget when the connection ends: its watched keys.
    pub fn leaving(&self) -> Option<Op> {
        self.watching.then_some(Op::Unwatch(self.id))
    }

    /// Plans one command: checked against the command table, then queued (inside `MULTI`),
    /// a transaction command, or planned by [`commands::plan`].
    pub fn plan(&mut self, command: Vec<Vec<u8>>) -> Planned {
        if command.is_empty() {
            return Planned::Now(Reply::error("empty command"), false);
        }
        if let Err(reply) = commands::check(&command) {
            if let Some(transaction) = &mut self.transaction {
                transaction.refused = true;
            }
            if command[0].eq_ignore_ascii_case(b"EXEC") {
                return self.exec_refused(reply);
            }
            return Planned::Now(reply, false);
        }
        let upper = commands::Upper::of(&command[0]);
        let now = |reply| Planned::Now(reply, false);
        match (upper.as_slice(), &mut self.transaction) {
            (b"MULTI", Some(_)) => now(Reply::error("MULTI calls can not be nested")),
            (b"MULTI", None) => {
                self.transaction = Some(Transaction {
                    queued: Vec::new(),
                    weight: 0,
                    refused: false,
                });
                now(Reply::ok())
            }
            (b"EXEC", None) => now(Reply::error("EXEC without MULTI")),
            (b"DISCARD", None) => now(Reply::error("DISCARD without MULTI")),
            (b"DISCARD", Some(_)) => {
                self.transaction = None;
                self.forget(Reply::ok())
            }
            (b"EXEC", Some(_)) => self.exec(),
            (b"WATCH", Some(_)) => now(Reply::error("WATCH inside MULTI is not allowed")),
            (b"WATCH", None) => {
                self.watching = true;
                let keys = command[1..].to_vec();
                Planned::Store(Op::Watch(self.id, keys), Render::Ok)
            }
            (b"UNWATCH", None) => self.forget(Reply::ok()),
            // Run at once even inside a transaction, as in Redis.
            (b"QUIT", _) => commands::plan(self, command),
            (_, Some(transaction)) => {
                // Each argument costs its bytes and the vector holding them: an empty one
                // still takes memory.
                let weight: usize = command
                    .iter()
                    .map(|argument| argument.len() + std::mem::size_of::<Vec<u8>>())
                    .sum();
                if transaction.queued.len() >= MAX_QUEUED
                    || transaction.weight + weight > MAX_QUEUED_BYTES
                {
                    transaction.refused = true;
                    return now(Reply::error(format!(
                        "a transaction may queue at most {MAX_QUEUED} commands and \
                         {MAX_QUEUED_BYTES} bytes of arguments; EXEC will abort, DISCARD it"
                    )));
                }
                transaction.weight += weight;
                transaction.queued.push(command);
                now(Reply::Simple("QUEUED".into()))
            }
            (_, None) => commands::plan(self, command),
        }
    }

    /// Forgets the watched keys (if any), answering `reply`.
    fn forget(&mut self, reply: Reply) -> Planned {
        if !std::mem::take(&mut self.watching) {
            return Planned::Now(reply, false);
        }
        // The store's `Done` renders as `+OK`, the answer of each command that forgets.
        debug_assert_eq!(reply, Reply::ok());
        Planned::Store(Op::Unwatch(self.id), Render::Ok)
    }

    /// An `EXEC` refused by its check (`EXEC x`): as Redis, the transaction (if any) is
    /// discarded, the watched keys forgotten, and the check's error told as the reason.
    fn exec_refused(&mut self, reply: Reply) -> Planned {
        let Reply::Error(error) = reply else {
            unreachable!("a check refuses with an error")
        };
        let reason = error.strip_prefix(b"ERR ").unwrap_or(&error);
        let mut abort = b"EXECABORT Transaction discarded because of: ".to_vec();
        abort.extend_from_slice(reason);
        let abort = Reply::Error(abort);
        self.transaction = None;
        if std::mem::take(&mut self.watching) {
            return Planned::Store(Op::Unwatch(self.id), Render::Given(abort));
        }
        Planned::Now(abort, false)
    }

    /// `EXEC`: aborted if a command was refused as queued; otherwise every queued command
    /// planned, in order, into one [`Op::Exec`].
    fn exec(&mut self) -> Planned {
        let transaction = self.transaction.take().expect("EXEC inside MULTI");
        let watched = std::mem::take(&mut self.watching);
        if transaction.refused {
            let abort = Reply::Error(
                b"EXECABORT Transaction discarded because of previous errors.".to_vec(),
            );
            if watched {
                // The keys are forgotten all the same; the store's answer is replaced.
                return Planned::Store(Op::Unwatch(self.id), Render::Given(abort));
            }
            return Planned::Now(abort, false);
        }
        let (mut ops, mut steps) = (Vec::new(), Vec::new());
        for command in transaction.queued {
            // Queued, `UNWATCH` has nothing left to do: `EXEC` forgets the keys anyway.
            if command[0].eq_ignore_ascii_case(b"UNWATCH") {
                steps.push(Step::Now(Reply::ok()));
                continue;
            }
            match commands::plan(self, command) {
                Planned::Now(reply, _) => steps.push(Step::Now(reply)),
                Planned::Store(op, render) => {
                    ops.push(op);
                    steps.push(Step::Store(render));
                }
            }
        }
        let op = Op::Exec {
            session: self.id,
            watched,
            ops,
        };
        Planned::Store(op, Render::Exec(steps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(line: &str) -> Vec<Vec<u8>> {
        line.split(' ')
            .map(|word| word.as_bytes().to_vec())
            .collect()
    }

    fn now(planned: Planned) -> Reply {
        match planned {
            Planned::Now(reply, _) => reply,
            Planned::Store(op, _) => panic!("not answered at once: {op:?}"),
        }
    }

    /// Every argument weighs its bytes and the vector that holds them: a command of empty
    /// arguments, which takes memory for each, is refused past the bound too.
    #[test]
    fn empty_arguments_count_toward_the_bound() {
        let mut session = Session::new();
        assert_eq!(now(session.plan(command("MULTI"))), Reply::ok());
        let mut del = vec![b"DEL".to_vec()];
        del.resize(
            MAX_QUEUED_BYTES / std::mem::size_of::<Vec<u8>>() + 1,
            Vec::new(),
        );
        let refused = now(session.plan(del));
        assert!(
            matches!(&refused, Reply::Error(error) if error.starts_with(b"ERR a transaction")),
            "{refused:?}"
        );
    }

    /// A transaction past its bound refuses the command, and `EXEC` aborts.
    #[test]
    fn a_transaction_is_bounded() {
        let mut session = Session::new();
        assert_eq!(now(session.plan(command("MULTI"))), Reply::ok());
        let large = vec![b'x'; MAX_QUEUED_BYTES / 4];
        let set = || vec![b"SET".to_vec(), b"k".to_vec(), large.clone()];
        for _ in 0..3 {
            assert_eq!(now(session.plan(set())), Reply::Simple("QUEUED".into()));
        }
        let refused = now(session.plan(set()));
        assert!(
            matches!(&refused, Reply::Error(error) if error.starts_with(b"ERR a transaction")),
            "{refused:?}"
        );
        assert_eq!(
            now(session.plan(command("EXEC"))),
            Reply::Error(b"EXECABORT Transaction discarded because of previous errors.".to_vec())
        );
    }
}
