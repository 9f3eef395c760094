//! A chat server over TCP: a line protocol, one actor per room and one per connection.
//!
//! ```sh
//! cargo run -p examples --bin chat -- 127.0.0.1:7001
//! ```
//!
//! Commands: `/nick NAME` (letters, digits, `_` and `-`, up to 32), `/join ROOM` (the same
//! alphabet), `/quit`; any other line is a message to the current room, which every other
//! member receives as `<nick> message`, control characters shown escaped (`\x1b`), never
//! raw. Mistakes get an `ERR ...` line and the connection stays.
//!
//! Each room publishes on an `actors::Topic` its members' connections subscribe to (the
//! speaker's own line is not echoed back).
//!
//! Every resource is bounded:
//! - Rooms never wait for their members: the topic drops a member whose mailbox is full.
//!   Each connection has an outbox of lines to write, bounded in bytes
//!   (`MAX_BACKLOG_BYTES`); a connection whose client leaves it full tells its room it is too
//!   slow and goes, and one whose socket stays unwritable past the write grace
//!   (`CHAT_WRITE_GRACE_SECS`, 5 s) is disconnected. A burst that a prompt reader drains is
//!   never a reason: what counts is bytes not written, not lines queued.
//! - A room with no members is removed; rooms are bounded per server (`CHAT_MAX_ROOMS`,
//!   10 000), past which a `/join` of a new room is refused with an error (and the member
//!   stays where it was). A connection is in one room at a time.
//! - Connections are bounded per server (`CHAT_MAX_CONNECTIONS`, 10 000): past it a client
//!   gets an error line and is closed.
//! - A client's next line must arrive whole within the idle timeout (`CHAT_IDLE_TIMEOUT_MS`,
//!   five minutes), or it is told so and closed: a quiet client and one trickling a line
//!   alike.
//! - Lines are at most 64 KiB (longer closes that connection), messages 4 KiB; a client's
//!   commands queued and not handled are bounded in bytes, past which its reader waits (and
//!   TCP holds the client back).
//! - Control characters, invisible ones (bidirectional overrides, zero widths) and `\`
//!   reach other members escaped.
//!
//! Left alone: a fast sender can fill slower readers' outboxes and get them dropped; a
//! per-sender rate would stop that.
//!
//! Ctrl-C stops the server cleanly.

use actors::prelude::*;
use actors::topic::Subscription;
use actors::{Topic, WhenFull};
use examples::limits::{Slot, setting};
use examples::lines::{Event, MAX_LINE, accept_until_stopped, idle_timeout, spawn_reader};
use examples::refusal::Refusal;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use runtime::net::Sink;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

/// How long a connection may take to write one line to its client before it is dropped:
/// `CHAT_WRITE_GRACE_SECS`, 5 by default.
/// (The runtime's own send deadline, 30 s by default, ends a send first past it.)
fn write_grace() -> Duration {
    static GRACE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *GRACE.get_or_init(|| Duration::from_secs(setting("CHAT_WRITE_GRACE_SECS", 5)))
}

/// The most connections at once: `CHAT_MAX_CONNECTIONS`, 10 000 by default; past it a new
/// client gets an error line and is closed.
fn max_connections() -> usize {
    setting("CHAT_MAX_CONNECTIONS", 10_000)
}

/// The longest message a member may say, in bytes (a line may be longer: a command, or an
/// error for it).
const MAX_MESSAGE: usize = 4096;

/// Bytes of a client's commands a connection may have queued and not handled: past it the
/// reader waits for the connection (and TCP holds the client back).
const MAX_COMMAND_BYTES: usize = 256 * 1024;

/// The most rooms open at once: `CHAT_MAX_ROOMS`, 10 000 by default.
fn max_rooms() -> usize {
    setting("CHAT_MAX_ROOMS", 10_000)
}

/// Bytes a connection may have waiting to be written before a room drops it as too slow.
const MAX_BACKLOG_BYTES: usize = 1 << 20;

/// What a connection has to write to its client, filled by rooms and by the connection's own
/// replies, drained by its writer task. Bounded in bytes; closed when the connection ends.
#[derive(Default)]
struct Outbox {
    state: Mutex<OutboxState>,
    /// The writer task, waiting for a line.
    writer: AtomicWaker,
}

#[derive(Default)]
struct OutboxState {
    lines: VecDeque<Arc<str>>,
    bytes: usize,
    /// No line is taken any more: the writer drains what is there (`finish`) or nothing
    /// (`kill`), then stops.
    closed: bool,
    /// `kill` was called: nothing is left to write, and nobody waits for the writer.
    killed: bool,
}

/// Why a line did not go into an outbox.
enum Refused {
    /// `MAX_BACKLOG_BYTES` would be passed: the client does not read fast enough.
    Full,
    /// The connection is ending.
    Closed,
}

impl Outbox {
    fn push(&self, line: Arc<str>) -> Result<(), Refused> {
        {
            let mut state = self.state.lock();
            if state.closed {
                return Err(Refused::Closed);
            }
            if state.bytes + line.len() > MAX_BACKLOG_BYTES {
                return Err(Refused::Full);
            }
            state.bytes += line.len();
            state.lines.push_back(line);
        }
        self.writer.wake();
        Ok(())
    }

    /// The next line to write, once there is one; `None` once closed and drained.
    async fn next(&self) -> Option<Arc<str>> {
        std::future::poll_fn(|cx| {
            self.writer.register(cx.waker());
            let mut state = self.state.lock();
            match state.lines.pop_front() {
                Some(line) => Poll::Ready(Some(line)),
                None if state.closed => Poll::Ready(None),
                None => Poll::Pending,
            }
        })
        .await
    }

    /// A line taken by `next` is written: its bytes leave the backlog.
    fn written(&self, bytes: usize) {
        self.state.lock().bytes -= bytes;
    }

    /// Takes no more lines; the writer writes what is there, then stops.
    fn finish(&self) {
        self.state.lock().closed = true;
        self.writer.wake();
    }

    /// Takes no more lines and forgets those waiting: the writer stops.
    fn kill(&self) {
        {
            let mut state = self.state.lock();
            state.closed = true;
            state.killed = true;
            state.lines.clear();
        }
        self.writer.wake();
    }

    fn is_killed(&self) -> bool {
        self.state.lock().killed
    }

    fn is_closed(&self) -> bool {
        self.state.lock().closed
    }
}

/// The rooms by name, each an actor of its own, made on first `/join` and removed once
/// empty.
#[actor(name = "chat_rooms")]
struct Rooms {
    rooms: HashMap<String, RoomRef>,
    max: usize,
}

#[actor]
impl Rooms {
    /// The room `name`, made if it does not exist and the server has room for it.
    fn room(&mut self, ctx: &mut actors::Context<Self>, name: String) -> Result<RoomRef, String> {
        if let Some(room) = self.rooms.get(&name) {
            return Ok(room.clone());
        }
        if self.rooms.len() >= self.max {
            return Err(format!(
                "ERR too many rooms ({} open): join an existing one\n",
                self.max
            ));
        }
        let room = ctx.spawn(Room {
            name: name.clone(),
            members: HashMap::new(),
            topic: Topic::new(ctx.runtime(), "chat_room", WhenFull::Unsubscribe),
            rooms: ctx.actor_ref(),
        });
        // However a room ends, it leaves the map (and the count towards the bound).
        let _ = ctx.monitor(&room);
        self.rooms.insert(name, room.clone());
        Ok(room)
    }

    /// A room ended (closed once empty, or otherwise): it is gone from the map.
    fn on_down(&mut self, room: actors::ActorId, _reason: actors::ExitReason) {
        self.rooms.retain(|_, open| open.id() != room);
    }

    /// The room `name` (the actor `id`) found itself empty: removed, unless someone entered
    /// meanwhile (the room answers that, in its own mailbox order).
    async fn vacated(&mut self, name: String, id: actors::ActorId) {
        let Some(room) = self.rooms.get(&name).filter(|room| room.id() == id) else {
            return;
        };
        if room.close_if_empty().await.unwrap_or(true) {
            self.rooms.remove(&name);
        }
    }
}

/// A member as a room sees it.
struct Member {
    nick: String,
    connection: ConnectionRef,
    /// Its connection's `deliver`, subscribed to the room's topic.
    subscription: Subscription,
    /// The room's monitor of the connection: however the connection ends (a quit, a client
    /// gone, a panic), the room hears of it and drops the member.
    monitor: actors::Monitor,
}

/// A member taken out of a room.
struct Gone {
    nick: String,
    connection: ConnectionRef,
}

/// A room: its members and the topic their connections subscribe to. It never waits for a
/// member: the topic drops a member whose mailbox is full, and a connection whose client
/// leaves its outbox full says so (`too_slow`) and goes.
#[actor(name = "chat_room", mailbox = 1024)]
struct Room {
    name: String,
    members: HashMap<u64, Member>,
    topic: Topic<Arc<str>>,
    /// Told when the room is empty, so that empty rooms do not pile up.
    rooms: RoomsRef,
}

#[actor]
impl Room {
    /// Adds a member; replies with how many the room has.
    async fn enter(
        &mut self,
        ctx: &mut actors::Context<Self>,
        id: u64,
        nick: String,
        connection: ConnectionRef,
    ) -> usize {
        // Told to those here before, not to the one who joins.
        self.announce(ctx, None, format!("* {nick} joined #{}\n", self.name))
            .await;
        // (Members the announcement dropped leave the room; the joiner keeps it open.)
        let monitor = ctx.monitor(&connection);
        let subscription = self.topic.subscribe(connection.deliver_recipient());
        self.members.insert(
            id,
            Member {
                nick,
                connection,
                subscription,
                monitor,
            },
        );
        self.members.len()
    }

    /// The member moves to another room; replies whether the room is empty now (the member
    /// then tells the rooms actor, so that the room is gone before its next `/join`).
    async fn leave(&mut self, ctx: &mut actors::Context<Self>, id: u64) -> bool {
        if let Some(member) = self.remove(ctx, id) {
            let line = format!("* {} left #{}\n", member.nick, self.name);
            self.announce(ctx, None, line).await;
        }
        self.members.is_empty()
    }

    /// A member's connection ended: it left.
    async fn on_down(
        &mut self,
        ctx: &mut actors::Context<Self>,
        connection: actors::ActorId,
        _reason: actors::ExitReason,
    ) {
        let id = self
            .members
            .iter()
            .find(|(_, member)| member.connection.id() == connection)
            .map(|(id, _)| *id);
        if let Some(member) = id.and_then(|id| self.remove(ctx, id)) {
            let line = format!("* {} left #{}\n", member.nick, self.name);
            self.announce(ctx, None, line).await;
            self.vacate_if_empty(ctx);
        }
    }

    /// A member's client leaves its outbox full: it is dropped (its connection stops).
    async fn too_slow(&mut self, ctx: &mut actors::Context<Self>, id: u64) {
        if let Some(member) = self.remove(ctx, id) {
            let line = format!("* {} was too slow and left\n", member.nick);
            self.announce(ctx, None, line).await;
            self.vacate_if_empty(ctx);
        }
    }

    async fn rename(&mut self, ctx: &mut actors::Context<Self>, id: u64, nick: String) {
        if let Some(member) = self.members.get_mut(&id) {
            let old = std::mem::replace(&mut member.nick, nick.clone());
            let from = member.connection.id();
            self.announce(ctx, Some(from), format!("* {old} is now {nick}\n"))
                .await;
            self.vacate_if_empty(ctx);
        }
    }

    async fn say(&mut self, ctx: &mut actors::Context<Self>, id: u64, text: String) {
        if let Some(member) = self.members.get(&id) {
            let line = format!("<{}> {}\n", member.nick, escape_controls(&text));
            let from = member.connection.id();
            self.announce(ctx, Some(from), line).await;
            self.vacate_if_empty(ctx);
        }
    }

    /// Stops the room if it is still empty; whether it did.
    fn close_if_empty(&mut self, ctx: &mut actors::Context<Self>) -> bool {
        let empty = self.members.is_empty();
        if empty {
            ctx.stop();
        }
        empty
    }
}

impl Room {
    /// Takes member `id` out of the room and its topic.
    fn remove(&mut self, ctx: &mut actors::Context<Self>, id: u64) -> Option<Gone> {
        let Member {
            nick,
            connection,
            subscription,
            monitor,
        } = self.members.remove(&id)?;
        self.topic.unsubscribe(subscription);
        ctx.demonitor(monitor);
        Some(Gone { nick, connection })
    }

    /// Publishes `line` to every member but the one whose connection is `from`. Members the
    /// topic dropped meanwhile (a full mailbox, or an ended connection) leave the room, and
    /// the others are told (which may drop more: each pass removes at least one).
    async fn announce(
        &mut self,
        ctx: &mut actors::Context<Self>,
        from: Option<actors::ActorId>,
        line: String,
    ) {
        let mut next = Some((from, line));
        while let Some((from, line)) = next.take() {
            let published = self.topic.publish_except(Arc::from(line), from).await;
            if published.removed == 0 {
                break;
            }
            let dropped: Vec<u64> = self
                .members
                .iter()
                .filter(|(_, member)| !self.topic.is_subscribed(member.subscription))
                .map(|(id, _)| *id)
                .collect();
            let mut lines = String::new();
            for id in dropped {
                if let Some(member) = self.remove(ctx, id) {
                    if member.connection.inner().is_closed() {
                        let _ = writeln!(lines, "* {} left #{}", member.nick, self.name);
                    } else {
                        // Its mailbox is full: it cannot keep up.
                        drop(member.connection.stop());
                        let _ = writeln!(lines, "* {} was too slow and left", member.nick);
                    }
                }
            }
            if !lines.is_empty() {
                next = Some((None, lines));
            }
        }
    }

    fn vacate_if_empty(&self, ctx: &mut actors::Context<Self>) {
        if self.members.is_empty() {
            let rooms = self.rooms.clone();
            let (name, id) = (self.name.clone(), ctx.id());
            // Told from a task: the room never waits for the rooms actor, which may be
            // waiting for this room (`close_if_empty`).
            drop(
                ctx.runtime()
                    .clone()
                    .spawn(move |_| async move { rooms.tell_vacated(name, id).await }),
            );
        }
    }
}

/// `text` with its control characters (terminal escapes, NUL, DEL, C1 controls) written as
/// `\xNN` or `\u{NNNN}`, so that no client's terminal obeys another client's bytes.
fn escape_controls(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if character == '\\' {
            escaped.push_str("\\\\");
        } else if character.is_control() || invisible(character) {
            let code = u32::from(character);
            if code <= 0xff {
                let _ = write!(escaped, "\\x{code:02x}");
            } else {
                let _ = write!(escaped, "\\u{{{code:04x}}}");
            }
        } else {
            escaped.push(character);
        }
    }
    escaped
}

/// Characters that are not controls but change how a terminal shows what follows or
/// hide themselves: bidirectional overrides and isolates, zero-width characters, line and
/// paragraph separators, the byte-order mark.
fn invisible(character: char) -> bool {
    matches!(
        character,
        '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}'
    )
}

/// One client: its commands, its room, and its outbox, which its writer task drains.
#[actor(name = "chat_connection", mailbox = 1024)]
struct Connection {
    id: u64,
    nick: String,
    rooms: RoomsRef,
    room: Option<(String, RoomRef)>,
    outbox: Arc<Outbox>,
    /// Bytes of commands the reader queued and `command` has not taken yet (see
    /// `MAX_COMMAND_BYTES`).
    queued: Arc<AtomicUsize>,
    /// Taken by `on_start`, which gives them to the reader and writer tasks.
    sink: Option<Sink>,
    stream: Option<runtime::net::Stream>,
    writer: Option<runtime::Handle<()>>,
    /// Counts the connection among the server's until it stops.
    slot: Option<Slot>,
}

#[actor]
impl Connection {
    fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let connection = ctx.actor_ref();
        let stream = self.stream.take().expect("set by the acceptor");
        let queued = self.queued.clone();
        let idle = idle_timeout("CHAT_IDLE_TIMEOUT_MS");
        spawn_reader(ctx.runtime(), stream, idle, move |event| {
            let connection = connection.clone();
            let queued = queued.clone();
            async move {
                match event {
                    Event::Line(line) => {
                        let bytes = line.len();
                        if queued.fetch_add(bytes, Ordering::AcqRel) + bytes > MAX_COMMAND_BYTES {
                            // Too much waits already: this one goes as an ask, so the reader
                            // (and TCP behind it) waits until the connection has caught up.
                            connection.command(line).await.is_ok()
                        } else {
                            connection.tell_command(line).await.is_ok()
                        }
                    }
                    Event::TooLong => connection.tell_too_long().await.is_ok(),
                    Event::Idle => connection.tell_idle(idle).await.is_ok(),
                    Event::End => connection.tell_quit().await.is_ok(),
                }
            }
        });
        self.writer = Some(spawn_writer(
            ctx,
            self.sink.take().expect("set by the acceptor"),
            self.outbox.clone(),
        ));
        let greeting = format!(
            "* welcome, {}: /nick NAME, /join ROOM, then type to talk\n",
            self.nick
        );
        self.write(ctx, greeting);
    }

    /// Writes what is still in the outbox (within the write grace), unless a room dropped
    /// this connection as too slow.
    async fn on_stop(&mut self, ctx: &mut actors::Context<Self>) {
        // Free for the next client before this one sees its socket close.
        drop(self.slot.take());
        self.outbox.finish();
        if let Some(writer) = self.writer.take()
            && !self.outbox.is_killed()
        {
            let _ = ctx.runtime().timeout(write_grace(), writer).await;
        }
    }

    /// A line from the client.
    async fn command(&mut self, ctx: &mut actors::Context<Self>, line: Vec<u8>) {
        self.queued.fetch_sub(line.len(), Ordering::AcqRel);
        if self.outbox.is_closed() {
            // Dropped as too slow (or ending): nothing more it asks for is done.
            ctx.stop();
            return;
        }
        let Ok(line) = String::from_utf8(line) else {
            return self.write(ctx, "ERR the line is not UTF-8\n");
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
                "ERR unknown command {}: use /nick NAME, /join ROOM, /quit, or type a \
                 message\n",
                escape_controls(&command.chars().take(32).collect::<String>())
            ),
            _ if line.trim().is_empty() => return,
            _ if line.len() > MAX_MESSAGE => {
                format!("ERR messages are at most {MAX_MESSAGE} bytes\n")
            }
            _ => match &self.room {
                Some((_, room)) => {
                    let _ = room.tell_say(self.id, line).await;
                    return;
                }
                None => "ERR join a room first: /join ROOM\n".to_string(),
            },
        };
        self.write(ctx, reply);
    }

    /// A line the room's topic delivers. A client that leaves `MAX_BACKLOG_BYTES` unread
    /// is too slow: the room is told, and the connection goes.
    async fn deliver(&mut self, ctx: &mut actors::Context<Self>, line: Arc<str>) {
        // (Refused as closed: the connection is ending, and its room hears of that.)
        if let Err(Refused::Full) = self.outbox.push(line) {
            self.outbox.kill();
            if let Some((_, room)) = self.room.take() {
                let _ = room.tell_too_slow(self.id).await;
            }
            ctx.stop();
        }
    }

    /// No whole line came within the idle timeout: say so, and close.
    fn idle(&mut self, ctx: &mut actors::Context<Self>, idle: Duration) {
        let reply = format!("ERR idle for {} ms; closing\n", idle.as_millis());
        self.write(ctx, reply);
        ctx.stop();
    }

    fn too_long(&mut self, ctx: &mut actors::Context<Self>) {
        let reply = format!("ERR line longer than {MAX_LINE} bytes; closing\n");
        self.write(ctx, reply);
        ctx.stop();
    }

    fn quit(&mut self, ctx: &mut actors::Context<Self>) {
        ctx.stop();
    }
}

/// Spawns, in the connection's scope, the task that writes its outbox to its client, each
/// line within the write grace; past it (the socket stays unwritable), the connection stops.
fn spawn_writer(
    ctx: &actors::Context<Connection>,
    mut sink: Sink,
    outbox: Arc<Outbox>,
) -> runtime::Handle<()> {
    let connection = ctx.weak_ref();
    ctx.runtime().clone().spawn(move |runtime| async move {
        while let Some(line) = outbox.next().await {
            let sent = runtime
                .timeout(write_grace(), sink.send(line.as_bytes().to_vec()))
                .await;
            if !matches!(sent, Ok(Ok(()))) {
                // Unwritable past the grace, or the client is gone: the room's monitor
                // hears of the end.
                outbox.kill();
                if let Some(connection) = connection.upgrade() {
                    drop(connection.stop());
                }
                return;
            }
            outbox.written(line.len());
        }
    })
}

impl Connection {
    /// Leaves the current room for `name`. Refused (too many rooms, say), it goes back to
    /// the room it left, if that can be had again.
    async fn join(&mut self, ctx: &mut actors::Context<Self>, name: &str) -> String {
        let mut left = None;
        if let Some((old_name, old)) = self.room.take() {
            if old.leave(self.id).await == Ok(true) {
                // Gone before the next room is looked up: rooms never pile up.
                let _ = self.rooms.vacated(old_name.clone(), old.id()).await;
            }
            left = Some(old_name);
        }
        match self.enter(ctx, name).await {
            Ok(count) => format!("OK joined #{name} ({count} here)\n"),
            Err(refused) => {
                if let Some(old_name) = left {
                    let _ = self.enter(ctx, &old_name).await;
                }
                refused
            }
        }
    }

    /// Enters the room `name`; how many are there, or the error line for the client.
    async fn enter(
        &mut self,
        ctx: &mut actors::Context<Self>,
        name: &str,
    ) -> Result<usize, String> {
        // A room found empty may close between the lookup and the entry: look again.
        for _ in 0..3 {
            let room = match self.rooms.room(name.to_string()).await {
                Ok(Ok(room)) => room,
                Ok(Err(refused)) => return Err(refused),
                Err(_) => return Err("ERR the server is stopping\n".to_string()),
            };
            let entered = room
                .enter(self.id, self.nick.clone(), ctx.actor_ref())
                .await;
            if let Ok(count) = entered {
                self.room = Some((name.to_string(), room));
                return Ok(count);
            }
        }
        Err("ERR the room is gone\n".to_string())
    }

    /// Queues `line` for the client. A client that lets its own replies pile up past the
    /// backlog bound does not read: it is disconnected.
    fn write(&mut self, ctx: &mut actors::Context<Self>, line: impl Into<String>) {
        let line: String = line.into();
        if let Err(Refused::Full) = self.outbox.push(line.into()) {
            self.outbox.kill();
            ctx.stop();
        }
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
    examples::interrupt::stop_on_interrupt(&context, Duration::from_secs(5));
    let listener = context.bind(address).await?;
    examples::say!(
        "chat listening on {}",
        listener.local_addr().expect("bound")
    );
    serve(&context, listener).await?;
    examples::say!("chat stopped");
    Ok(())
}

/// Serves chat on `listener` until the runtime stops: the whole server but its address and
/// its signals, so a test can run it (in a deterministic run, on a simulated network).
pub(crate) async fn serve(
    context: &runtime::Context,
    mut listener: runtime::net::Listener,
) -> Result<(), runtime::Error> {
    let rooms = Rooms {
        rooms: HashMap::new(),
        max: max_rooms(),
    }
    .spawn(context);
    let next_id = AtomicU64::new(1);
    let live = Arc::new(AtomicUsize::new(0));
    let max = max_connections();
    accept_until_stopped(context, &mut listener, "chat", |sink, stream| {
        let Some(slot) = Slot::take(&live, max) else {
            return Some(Refusal {
                sink,
                stream,
                line: format!("ERR the server is full ({max} connections): try later\n")
                    .into_bytes(),
            });
        };
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        drop(
            Connection {
                id,
                nick: format!("guest{id}"),
                rooms: rooms.clone(),
                room: None,
                outbox: Arc::default(),
                queued: Arc::default(),
                sink: Some(sink),
                stream: Some(stream),
                writer: None,
                slot: Some(slot),
            }
            .spawn(context),
        );
        None
    })
    .await
}
