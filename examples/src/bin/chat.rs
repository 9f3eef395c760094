//! A chat server over TCP: a line protocol, one actor per room and one per connection.
//!
//! ```sh
//! cargo run -p examples --bin chat -- 127.0.0.1:7001
//! ```
//!
//! Commands: `/nick NAME` (letters, digits, `_` and `-`, up to 32), `/join ROOM` (the same
//! alphabet), `/quit`; any other line is a message to the current room, which every other
//! member receives as `<nick> message`. Mistakes get an `ERR ...` line and the connection
//! stays. Rooms never wait for their members: a member whose connection cannot keep up
//! (64 lines waiting to be written to its client) is dropped from the room and
//! disconnected, and the room goes on. Ctrl-C stops the server cleanly.

use actors::prelude::*;
use examples::lines::{Event, MAX_LINE, accept_until_stopped, spawn_reader};
use futures::channel::oneshot;
use futures::future::{Either, select};
use runtime::net::Sink;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// How long a connection may take to write one line to its client before it is dropped:
/// `CHAT_WRITE_GRACE_SECS`, 5 by default.
fn write_grace() -> Duration {
    let seconds = std::env::var("CHAT_WRITE_GRACE_SECS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(5);
    Duration::from_secs(seconds)
}

/// The rooms by name, each an actor of its own, made on first `/join`.
#[actor(name = "chat_rooms")]
struct Rooms {
    rooms: HashMap<String, RoomRef>,
}

#[actor]
impl Rooms {
    fn room(&mut self, ctx: &mut actors::Context<Self>, name: String) -> RoomRef {
        self.rooms
            .entry(name.clone())
            .or_insert_with(|| {
                ctx.spawn(Room {
                    name,
                    members: HashMap::new(),
                })
            })
            .clone()
    }
}

/// Lines a room may have waiting for one member before it drops the member as too slow.
const MAX_BACKLOG: usize = 64;

/// A member as a room sees it.
struct Member {
    nick: String,
    connection: ConnectionRef,
    /// Lines delivered to the connection and not yet written to its client: shared with the
    /// connection, which counts down as it writes. Counted apart from its mailbox, which
    /// also holds the client's own commands.
    backlog: Arc<AtomicUsize>,
    /// Fired when the room drops the member for being slow: its connection actor stops at
    /// once, even in the middle of a write its client does not read (the socket then closes
    /// once that write ends). A stop request could not do that: it waits for the write.
    kick: oneshot::Sender<()>,
    /// The room's monitor of the connection: however the connection ends (a quit, a client
    /// gone, a panic), the room hears of it and drops the member.
    monitor: actors::Monitor,
}

#[actor(name = "chat_room", mailbox = 1024)]
struct Room {
    name: String,
    members: HashMap<u64, Member>,
}

#[actor]
impl Room {
    /// Adds a member; replies with how many the room has.
    fn enter(
        &mut self,
        ctx: &mut actors::Context<Self>,
        id: u64,
        nick: String,
        connection: ConnectionRef,
        backlog: Arc<AtomicUsize>,
        kick: oneshot::Sender<()>,
    ) -> usize {
        self.broadcast(id, format!("* {nick} joined #{}\n", self.name));
        let monitor = ctx.monitor(&connection);
        self.members.insert(
            id,
            Member {
                nick,
                connection,
                backlog,
                kick,
                monitor,
            },
        );
        self.members.len()
    }

    /// The member moves to another room.
    fn leave(&mut self, ctx: &mut actors::Context<Self>, id: u64) {
        if let Some(member) = self.members.remove(&id) {
            ctx.demonitor(member.monitor);
            self.broadcast(id, format!("* {} left #{}\n", member.nick, self.name));
        }
    }

    /// A member's connection ended: it left.
    fn on_down(&mut self, connection: actors::ActorId, _reason: actors::ExitReason) {
        let id = self
            .members
            .iter()
            .find(|(_, member)| member.connection.id() == connection)
            .map(|(id, _)| *id);
        if let Some((id, member)) = id.and_then(|id| self.members.remove_entry(&id)) {
            self.broadcast(id, format!("* {} left #{}\n", member.nick, self.name));
        }
    }

    fn rename(&mut self, id: u64, nick: String) {
        if let Some(member) = self.members.get_mut(&id) {
            let old = std::mem::replace(&mut member.nick, nick.clone());
            self.broadcast(id, format!("* {old} is now {nick}\n"));
        }
    }

    fn say(&mut self, id: u64, text: String) {
        if let Some(member) = self.members.get(&id) {
            let line = format!("<{}> {text}\n", member.nick);
            self.broadcast(id, line);
        }
    }
}

impl Room {
    /// Sends `line` to every member but `from`, never waiting: a member with
    /// `MAX_BACKLOG` lines still unwritten (or a full mailbox) is dropped and kicked.
    fn broadcast(&mut self, from: u64, line: String) {
        let line: Arc<str> = line.into();
        let mut slow = Vec::new();
        for (&id, member) in &self.members {
            if id == from {
                continue;
            }
            if member.backlog.fetch_add(1, Ordering::AcqRel) >= MAX_BACKLOG
                || member.connection.try_deliver(line.clone()).is_err()
            {
                slow.push(id);
            }
        }
        for id in slow {
            if let Some(member) = self.members.remove(&id) {
                let _ = member.kick.send(());
                self.broadcast(id, format!("* {} was too slow and left\n", member.nick));
            }
        }
    }
}

/// One client: its commands, its room, and the lines rooms deliver to it.
#[actor(name = "chat_connection", mailbox = 1024)]
struct Connection {
    id: u64,
    nick: String,
    sink: Sink,
    rooms: RoomsRef,
    room: Option<(String, RoomRef)>,
    /// Fires if the current room drops this member for being slow.
    kicked: Option<oneshot::Receiver<()>>,
    /// Lines rooms delivered and this connection has not written yet (see `Member`).
    backlog: Arc<AtomicUsize>,
    /// Taken by `on_start`, which gives it to the reader task.
    stream: Option<runtime::net::Stream>,
}

#[actor]
impl Connection {
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let connection = ctx.actor_ref();
        let stream = self.stream.take().expect("set by the acceptor");
        spawn_reader(ctx.runtime(), stream, move |event| {
            let connection = connection.clone();
            async move {
                match event {
                    Event::Line(line) => connection.tell_command(line).await.is_ok(),
                    Event::TooLong => connection.tell_too_long().await.is_ok(),
                    Event::End => connection.tell_quit().await.is_ok(),
                }
            }
        });
        let greeting = format!(
            "* welcome, {}: /nick NAME, /join ROOM, then type to talk\n",
            self.nick
        );
        self.write(ctx, greeting).await;
    }

    /// A line from the client.
    async fn command(&mut self, ctx: &mut actors::Context<Self>, line: Vec<u8>) {
        if self.was_kicked() {
            ctx.stop();
            return;
        }
        let Ok(line) = String::from_utf8(line) else {
            return self.write(ctx, "ERR the line is not UTF-8\n").await;
        };
        let mut words = line.splitn(2, ' ');
        let reply = match (words.next().unwrap_or(""), words.next().map(str::trim)) {
            ("/nick", Some(nick)) if valid_name(nick) => {
                if let Some((_, room)) = &self.room {
                    let _ = room.tell_rename(self.id, nick.to_string()).await;
                }
                self.nick = nick.to_string();
                format!("OK you are {nick}\n")
            }
            ("/join", Some(name)) if valid_name(name) => self.join(ctx, name).await,
            ("/nick" | "/join", _) => {
                "ERR names are 1 to 32 letters, digits, '_' or '-': /nick NAME, /join ROOM\n"
                    .to_string()
            }
            ("/quit", None) => {
                ctx.stop();
                "OK bye\n".to_string()
            }
            (command, _) if command.starts_with('/') => format!(
                "ERR unknown command {command}: use /nick NAME, /join ROOM, /quit, or type a \
                 message\n"
            ),
            _ if line.trim().is_empty() => return,
            _ => match &self.room {
                Some((_, room)) => {
                    let _ = room.tell_say(self.id, line).await;
                    return;
                }
                None => "ERR join a room first: /join ROOM\n".to_string(),
            },
        };
        self.write(ctx, reply).await;
    }

    /// A line a room delivers.
    async fn deliver(&mut self, ctx: &mut actors::Context<Self>, line: Arc<str>) {
        self.write(ctx, line.as_bytes().to_vec()).await;
        self.backlog.fetch_sub(1, Ordering::AcqRel);
    }

    async fn too_long(&mut self, ctx: &mut actors::Context<Self>) {
        let reply = format!("ERR line longer than {MAX_LINE} bytes; closing\n");
        self.write(ctx, reply).await;
        ctx.stop();
    }

    fn quit(&mut self, ctx: &mut actors::Context<Self>) {
        ctx.stop();
    }
}

impl Connection {
    async fn join(&mut self, ctx: &mut actors::Context<Self>, name: &str) -> String {
        if let Some((_, old)) = self.room.take() {
            let _ = old.tell_leave(self.id).await;
        }
        let Ok(room) = self.rooms.room(name.to_string()).await else {
            return "ERR the server is stopping\n".to_string();
        };
        let (kick, kicked) = oneshot::channel();
        match room
            .enter(
                self.id,
                self.nick.clone(),
                ctx.actor_ref(),
                self.backlog.clone(),
                kick,
            )
            .await
        {
            Ok(count) => {
                self.room = Some((name.to_string(), room));
                self.kicked = Some(kicked);
                format!("OK joined #{name} ({count} here)\n")
            }
            Err(_) => "ERR the room is gone\n".to_string(),
        }
    }

    /// Writes to the client within the write grace, or stops; stops at once if the room
    /// kicks this member meanwhile.
    async fn write(&mut self, ctx: &mut actors::Context<Self>, line: impl Into<Vec<u8>>) {
        let runtime = ctx.runtime().clone();
        let mut send = pin!(runtime.timeout(write_grace(), self.sink.send(line.into())));
        let sent = match self.kicked.as_mut() {
            None => send.await,
            Some(kicked) => match select(send.as_mut(), kicked).await {
                Either::Left((sent, _)) => sent,
                Either::Right((Ok(()), _)) => {
                    // Dropped by the room for being slow.
                    self.room = None;
                    ctx.stop();
                    return;
                }
                Either::Right((Err(oneshot::Canceled), _)) => {
                    // The room let go of this member (it left): nothing to watch any more.
                    self.kicked = None;
                    send.await
                }
            },
        };
        if !matches!(sent, Ok(Ok(()))) {
            // The client is gone: the room's monitor tells it.
            ctx.stop();
        }
    }

    /// Whether the room dropped this member for being slow (it already removed it).
    fn was_kicked(&mut self) -> bool {
        let kicked = matches!(
            self.kicked.as_mut().map(oneshot::Receiver::try_recv),
            Some(Ok(Some(())))
        );
        if kicked {
            self.room = None;
        }
        kicked
    }
}

fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

#[runtime::main]
async fn main(context: runtime::Context) -> Result<(), runtime::Error> {
    let address: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7001".to_string())
        .parse()
        .expect("usage: chat [ADDRESS:PORT]");
    // Held to the end: on an early return it releases the signal-waiting task.
    let _interrupts = examples::interrupt::stop_on_interrupt(&context, Duration::from_secs(5))
        .expect("install the signal handlers");
    let rooms = Rooms {
        rooms: HashMap::new(),
    }
    .spawn(&context);
    let mut listener = context.bind(address).await?;
    println!(
        "chat listening on {}",
        listener.local_addr().expect("bound")
    );
    let next_id = AtomicU64::new(1);
    accept_until_stopped(&context, &mut listener, "chat", |sink, stream| {
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        drop(
            Connection {
                id,
                nick: format!("guest{id}"),
                sink,
                rooms: rooms.clone(),
                room: None,
                kicked: None,
                backlog: Arc::new(AtomicUsize::new(0)),
                stream: Some(stream),
            }
            .spawn(&context),
        );
    })
    .await;
    println!("chat stopped");
    Ok(())
}
