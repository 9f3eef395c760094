//! The simulated network of a deterministic run: listeners by address, connections as two
//! directional byte pipes, per-link latency and jitter, partitions, resets and refusals, all
//! in memory and every choice drawn from the run's generator. This is the model only; the
//! halves a task holds (`net::simulated`) turn its answers into waits, timeouts and errors.
//!
//! Invariants:
//! - TCP's promise holds: the bytes a reader gets from a pipe are a prefix of the bytes its
//!   writer put in, in order, with no gap. Faults never drop bytes silently: a partition holds
//!   them (they arrive after the heal), a reset ends the connection with an error both ends
//!   see (bytes that had arrived before it are still read first, as a socket hands out queued
//!   bytes before its error).
//! - A segment's arrival time is never earlier than the one before it on its pipe, so
//!   delivery by arrival time is delivery in order.
//! - A pipe holds at most [`WINDOW`] bytes not yet taken by its reader: a writer that finds it
//!   full waits (its waker is kept) until the reader takes bytes, so a slow reader slows its
//!   writer.
//! - A waker is woken for every change it may wait on (bytes or end-of-stream arriving on a
//!   held pipe, room in a window, a connection queued, a reset), after the model's lock is
//!   released; a wait for time (an arrival in the future) is the caller's timer.
//! - Everything is kept in ordered maps and every draw and change is recorded in the auditor
//!   under `net.*`, so two runs of one seed see the same network.

use super::Simulation;
use crate::sync::Mutex;
use bytes::Bytes;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The most bytes a pipe holds that its reader has not taken: the receive window.
pub(crate) const WINDOW: usize = 64 * 1024;

/// The first port a bind to port 0 gets; the next ones follow in order.
const LISTEN_BASE: u16 = 10_000;

/// The first local port of a dialed connection; the next ones follow in order.
const EPHEMERAL_BASE: u16 = 40_000;

thread_local! {
    /// The host the task being polled dials from (see `deterministic::on_host`).
    static HOST: Cell<Option<IpAddr>> = const { Cell::new(None) };
}

/// Runs `f` with `host` as the address this thread's dials come from, restoring the previous
/// one after (also when `f` unwinds).
pub(crate) fn with_host<R>(host: IpAddr, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<IpAddr>);
    impl Drop for Restore {
        fn drop(&mut self) {
            HOST.with(|current| current.set(self.0));
        }
    }
    let _restore = Restore(HOST.with(|current| current.replace(Some(host))));
    f()
}

/// The host a dial to `to` comes from: the one set by `with_host`, else the loopback address
/// of `to`'s family.
fn dialing_host(to: SocketAddr) -> IpAddr {
    HOST.with(Cell::get).unwrap_or(match to {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    })
}

/// The delay of one direction between two hosts: every segment takes `latency` plus a
/// uniform draw in `0..=jitter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The fixed part of the delay.
    pub latency: Duration,
    /// The most added to `latency`, drawn per segment from the run's seed.
    pub jitter: Duration,
}

/// The faults and the default link of a deterministic run's network. The default is
/// fault-free, with a link of 1 ms latency and no jitter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetworkFaults {
    /// The chance (0 to 1) that a dial to a bound address is refused anyway.
    pub refuse_rate: f64,
    /// The chance (0 to 1) that a send resets its connection instead of going out.
    pub reset_rate: f64,
    /// The latency of a link no `set_link` has set.
    pub latency: Duration,
    /// The jitter of a link no `set_link` has set.
    pub jitter: Duration,
}

impl Default for NetworkFaults {
    fn default() -> Self {
        Self {
            refuse_rate: 0.0,
            reset_rate: 0.0,
            latency: Duration::from_millis(1),
            jitter: Duration::ZERO,
        }
    }
}

/// What a dial comes to, and when the dialer learns it.
#[derive(Debug)]
pub(crate) struct Dialed {
    /// The moment the answer reaches the dialer.
    pub(crate) at: Instant,
    /// The connection and the dialer's local address, or why there is none.
    pub(crate) result: Result<(u64, SocketAddr), io::ErrorKind>,
}

/// What a poll of an accept, a read or a write finds.
#[derive(Debug)]
pub(crate) enum Polled<T> {
    /// Done (for a read: bytes; an accept: a connection; a write: how many bytes went in).
    Ready(T),
    /// The reader reached the end of the stream (reads only).
    End,
    /// The connection failed with this kind.
    Failed(io::ErrorKind),
    /// Nothing yet: the waker is kept, and the state changes by itself at this instant if
    /// one is given (a segment or a connection arrives then).
    Wait(Option<Instant>),
}

/// An accepted connection: its id, the peer's address and the local one.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) connection: u64,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
}

/// The network of one run.
#[derive(Debug, Default)]
pub(crate) struct Network {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    faults: NetworkFaults,
    links: BTreeMap<(IpAddr, IpAddr), Link>,
    /// Directions (from, to) a partition blocks.
    blocked: BTreeSet<(IpAddr, IpAddr)>,
    listeners: BTreeMap<SocketAddr, ListenerState>,
    connections: BTreeMap<u64, Connection>,
    next_listen_port: u16,
    next_ephemeral: u16,
    next_connection: u64,
}

impl Default for State {
    fn default() -> Self {
        Self {
            faults: NetworkFaults::default(),
            links: BTreeMap::new(),
            blocked: BTreeSet::new(),
            listeners: BTreeMap::new(),
            connections: BTreeMap::new(),
            next_listen_port: LISTEN_BASE,
            next_ephemeral: EPHEMERAL_BASE,
            next_connection: 1,
        }
    }
}

#[derive(Debug, Default)]
struct ListenerState {
    /// Connections dialed to it, with the moment each one's SYN arrives.
    backlog: VecDeque<(Instant, u64)>,
    waker: Option<Waker>,
}

/// A connection: end 0 dialed, end 1 accepted; `pipes[i]` carries what end `i` writes.
#[derive(Debug)]
struct Connection {
    ends: [SocketAddr; 2],
    pipes: [Pipe; 2],
    reset: bool,
    /// Which halves of each end are still held: `[sink, stream]`.
    held: [[bool; 2]; 2],
}

#[derive(Debug, Default)]
struct Pipe {
    segments: VecDeque<Segment>,
    /// Bytes in `segments`: what counts against the window.
    queued: usize,
    /// The arrival of the last segment timed, which no later one may precede.
    last_arrival: Option<Instant>,
    /// The writer shut its side: the end-of-stream segment is queued.
    shut: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

#[derive(Debug)]
struct Segment {
    /// `None` while a partition holds it.
    arrival: Option<Instant>,
    bytes: Bytes,
    /// The end of the stream (no bytes).
    fin: bool,
}

impl Pipe {
    fn arrived(&self, now: Instant) -> bool {
        self.segments
            .front()
            .and_then(|segment| segment.arrival)
            .is_some_and(|arrival| arrival <= now)
    }
}

/// Wakers to wake once the lock is released.
type Wakes = Vec<Waker>;

fn wake_all(wakes: Wakes) {
    for waker in wakes {
        waker.wake();
    }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    }
}

fn addr_bytes(address: SocketAddr) -> Vec<u8> {
    let mut bytes = ip_bytes(address.ip());
    bytes.extend_from_slice(&address.port().to_le_bytes());
    bytes
}

/// Whether a draw of `rng` in `0..1` falls under `rate`, drawing only when the rate is not 0
/// (a fault-free network leaves the generator to the scheduler).
fn chance(simulation: &Simulation, kind: &str, rate: f64) -> bool {
    if rate <= 0.0 {
        return false;
    }
    const SCALE: u64 = 1 << 32;
    simulation.draw(kind, |rng| (rng.below(SCALE) as f64) < rate * SCALE as f64)
}

impl State {
    fn link(&self, from: IpAddr, to: IpAddr) -> Link {
        self.links.get(&(from, to)).copied().unwrap_or(Link {
            latency: self.faults.latency,
            jitter: self.faults.jitter,
        })
    }

    /// One segment's delay from `from` to `to`, its jitter drawn from the seed.
    fn delay(&self, simulation: &Simulation, from: IpAddr, to: IpAddr) -> Duration {
        let link = self.link(from, to);
        if link.jitter.is_zero() {
            return link.latency;
        }
        let jitter = link.jitter.as_nanos().min(u128::from(u64::MAX - 1)) as u64;
        let drawn = simulation.draw("net.jitter", |rng| rng.below(jitter + 1));
        link.latency + Duration::from_nanos(drawn)
    }

    /// The listener a connection to `to` reaches: one bound to it exactly, else one bound to
    /// the unspecified address of its family on its port.
    fn listener_for(&self, to: SocketAddr) -> Option<SocketAddr> {
        if self.listeners.contains_key(&to) {
            return Some(to);
        }
        let any = match to {
            SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), to.port()),
            SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), to.port()),
        };
        self.listeners.contains_key(&any).then_some(any)
    }

    /// Whether binding `address` would overlap a bound listener.
    fn in_use(&self, address: SocketAddr) -> bool {
        self.listeners.keys().any(|bound| {
            bound.port() == address.port()
                && bound.is_ipv4() == address.is_ipv4()
                && (bound.ip() == address.ip()
                    || bound.ip().is_unspecified()
                    || address.ip().is_unspecified())
        })
    }

    /// Resets `id`: bytes not arrived are gone, both ends' waiters are woken to see it.
    fn reset(&mut self, simulation: &Simulation, id: u64, wakes: &mut Wakes) {
        let now = simulation.now();
        let Some(connection) = self.connections.get_mut(&id) else {
            return;
        };
        if connection.reset {
            return;
        }
        simulation.record("net.reset", &[&id.to_le_bytes()]);
        connection.reset = true;
        for pipe in &mut connection.pipes {
            // What arrived is read before the error; what is still on the way never comes.
            while pipe
                .segments
                .back()
                .is_some_and(|segment| segment.arrival.is_none_or(|arrival| arrival > now))
            {
                let segment = pipe.segments.pop_back().expect("a segment is there");
                pipe.queued -= segment.bytes.len();
            }
            wakes.extend(pipe.reader.take());
            wakes.extend(pipe.writer.take());
        }
    }

    /// Forgets a connection once no half of either end is held any more.
    fn collect(&mut self, id: u64) {
        if self
            .connections
            .get(&id)
            .is_some_and(|connection| connection.held.iter().flatten().all(|held| !held))
        {
            self.connections.remove(&id);
        }
    }

    /// Holds every segment of the pipes from `from` to `to` that has not arrived.
    fn hold(&mut self, now: Instant, from: IpAddr, to: IpAddr) {
        for connection in self.connections.values_mut() {
            for end in 0..2 {
                if connection.ends[end].ip() != from || connection.ends[1 - end].ip() != to {
                    continue;
                }
                for segment in &mut connection.pipes[end].segments {
                    if segment.arrival.is_none_or(|arrival| arrival > now) {
                        segment.arrival = None;
                    }
                }
            }
        }
    }

    /// Times every held segment of a pipe no partition blocks any more, in order, from now.
    fn release(&mut self, simulation: &Simulation, wakes: &mut Wakes) {
        let now = simulation.now();
        let ids: Vec<u64> = self.connections.keys().copied().collect();
        for id in ids {
            for end in 0..2 {
                let connection = &self.connections[&id];
                let (from, to) = (connection.ends[end].ip(), connection.ends[1 - end].ip());
                let held = connection.pipes[end]
                    .segments
                    .iter()
                    .filter(|segment| segment.arrival.is_none())
                    .count();
                if held == 0 || self.blocked.contains(&(from, to)) {
                    continue;
                }
                let delays: Vec<Duration> = (0..held)
                    .map(|_| self.delay(simulation, from, to))
                    .collect();
                let pipe = &mut self.connections.get_mut(&id).expect("listed above").pipes[end];
                let mut delays = delays.into_iter();
                for segment in pipe.segments.iter_mut().filter(|s| s.arrival.is_none()) {
                    let delay = delays.next().expect("one delay per held segment");
                    let arrival = pipe
                        .last_arrival
                        .map_or(now + delay, |last| last.max(now + delay));
                    segment.arrival = Some(arrival);
                    pipe.last_arrival = Some(arrival);
                }
                wakes.extend(pipe.reader.take());
            }
        }
    }

    /// Queues `segment` on the pipe end `end` of `id` writes, timed by its link (or held).
    fn push(&mut self, simulation: &Simulation, id: u64, end: usize, bytes: Bytes, fin: bool) {
        let now = simulation.now();
        let connection = &self.connections[&id];
        let (from, to) = (connection.ends[end].ip(), connection.ends[1 - end].ip());
        let held = self.blocked.contains(&(from, to))
            || connection.pipes[end]
                .segments
                .iter()
                .any(|segment| segment.arrival.is_none());
        let delay = (!held).then(|| self.delay(simulation, from, to));
        let pipe = &mut self
            .connections
            .get_mut(&id)
            .expect("looked up above")
            .pipes[end];
        let arrival = delay.map(|delay| {
            let arrival = pipe
                .last_arrival
                .map_or(now + delay, |last| last.max(now + delay));
            pipe.last_arrival = Some(arrival);
            arrival
        });
        pipe.queued += bytes.len();
        pipe.segments.push_back(Segment {
            arrival,
            bytes,
            fin,
        });
    }
}

impl Network {
    /// Sets the faults and the default link (before the run's first network call).
    pub(crate) fn configure(&self, faults: NetworkFaults) {
        self.state.lock().faults = faults;
    }

    /// Binds a listener on `address` (port 0: the next free port from a fixed base); returns
    /// the address it is bound to.
    pub(crate) fn bind(
        &self,
        simulation: &Simulation,
        address: SocketAddr,
    ) -> io::Result<SocketAddr> {
        let mut state = self.state.lock();
        let mut address = address;
        if address.port() == 0 {
            let mut port = state.next_listen_port;
            while state.in_use(SocketAddr::new(address.ip(), port)) {
                port = port.checked_add(1).ok_or(io::ErrorKind::AddrNotAvailable)?;
            }
            state.next_listen_port = port.wrapping_add(1).max(LISTEN_BASE);
            address.set_port(port);
        }
        let refused = state.in_use(address);
        simulation.record("net.bind", &[&addr_bytes(address), &[u8::from(refused)]]);
        if refused {
            return Err(io::ErrorKind::AddrInUse.into());
        }
        state.listeners.insert(address, ListenerState::default());
        Ok(address)
    }

    /// Closes the listener on `address`: connections it had not accepted are reset.
    pub(crate) fn unbind(&self, simulation: &Simulation, address: SocketAddr) {
        let mut wakes = Wakes::new();
        {
            let mut state = self.state.lock();
            simulation.record("net.unbind", &[&addr_bytes(address)]);
            let Some(listener) = state.listeners.remove(&address) else {
                return;
            };
            for (_, id) in listener.backlog {
                state.reset(simulation, id, &mut wakes);
                if let Some(connection) = state.connections.get_mut(&id) {
                    connection.held[1] = [false, false];
                }
                state.collect(id);
            }
        }
        wake_all(wakes);
    }

    /// Dials `to` from the current host (see [`with_host`]): the connection is queued on the
    /// listener when its SYN arrives, and the dialer learns the outcome a round trip after
    /// the call (a partition makes it wait `connect_timeout`, then fail).
    pub(crate) fn dial(
        &self,
        simulation: &Simulation,
        to: SocketAddr,
        connect_timeout: Duration,
    ) -> Dialed {
        let now = simulation.now();
        let from = dialing_host(to);
        let mut wakes = Wakes::new();
        let dialed = {
            let mut state = self.state.lock();
            let to_ip = if to.ip().is_unspecified() {
                from
            } else {
                to.ip()
            };
            let outcome: Result<(Instant, u64, SocketAddr), (Instant, io::ErrorKind)> = (|| {
                let timed_out = (now + connect_timeout, io::ErrorKind::TimedOut);
                if state.blocked.contains(&(from, to_ip)) || state.blocked.contains(&(to_ip, from))
                {
                    return Err(timed_out);
                }
                let out = state.delay(simulation, from, to_ip);
                let back = state.delay(simulation, to_ip, from);
                if out + back > connect_timeout {
                    return Err(timed_out);
                }
                let answered = now + out + back;
                let Some(listener) = state.listener_for(SocketAddr::new(to_ip, to.port())) else {
                    return Err((answered, io::ErrorKind::ConnectionRefused));
                };
                if chance(simulation, "net.refuse", state.faults.refuse_rate) {
                    return Err((answered, io::ErrorKind::ConnectionRefused));
                }
                let local = SocketAddr::new(from, state.next_ephemeral);
                state.next_ephemeral = state
                    .next_ephemeral
                    .checked_add(1)
                    .unwrap_or(EPHEMERAL_BASE);
                let id = state.next_connection;
                state.next_connection += 1;
                state.connections.insert(
                    id,
                    Connection {
                        ends: [local, SocketAddr::new(to_ip, to.port())],
                        pipes: [Pipe::default(), Pipe::default()],
                        reset: false,
                        held: [[true, true], [true, true]],
                    },
                );
                let listener = state.listeners.get_mut(&listener).expect("found above");
                listener.backlog.push_back((now + out, id));
                wakes.extend(listener.waker.take());
                Ok((answered, id, local))
            })(
            );
            let (at, result) = match outcome {
                Ok((at, id, local)) => (at, Ok((id, local))),
                Err((at, kind)) => (at, Err(kind)),
            };
            let id = result.as_ref().map_or(0, |(id, _)| *id);
            simulation.record(
                "net.dial",
                &[
                    &ip_bytes(from),
                    &addr_bytes(to),
                    &id.to_le_bytes(),
                    format!("{:?}", result.as_ref().err()).as_bytes(),
                ],
            );
            Dialed { at, result }
        };
        wake_all(wakes);
        dialed
    }

    /// The dialer of `id` gave up before learning the outcome: the connection is reset.
    pub(crate) fn abandon(&self, simulation: &Simulation, id: u64) {
        let mut wakes = Wakes::new();
        {
            let mut state = self.state.lock();
            state.reset(simulation, id, &mut wakes);
            if let Some(connection) = state.connections.get_mut(&id) {
                connection.held[0] = [false, false];
            }
            state.collect(id);
        }
        wake_all(wakes);
    }

    /// The next connection of the listener on `address` whose SYN has arrived.
    pub(crate) fn accept(
        &self,
        simulation: &Simulation,
        address: SocketAddr,
        waker: &Waker,
    ) -> Polled<Accepted> {
        let now = simulation.now();
        let mut state = self.state.lock();
        let Some(listener) = state.listeners.get_mut(&address) else {
            return Polled::Failed(io::ErrorKind::NotConnected);
        };
        let ready = listener.backlog.iter().position(|(at, _)| *at <= now);
        let Some(index) = ready else {
            let next = listener.backlog.iter().map(|(at, _)| *at).min();
            listener.waker = Some(waker.clone());
            return Polled::Wait(next);
        };
        let (_, id) = listener.backlog.remove(index).expect("found above");
        let connection = &state.connections[&id];
        let accepted = Accepted {
            connection: id,
            peer: connection.ends[0],
            local: connection.ends[1],
        };
        simulation.record("net.accept", &[&addr_bytes(address), &id.to_le_bytes()]);
        Polled::Ready(accepted)
    }

    /// Puts up to the window's room of `bytes` on the pipe end `end` of `id` writes: how many
    /// went in (at least one, or it waits for room).
    pub(crate) fn write(
        &self,
        simulation: &Simulation,
        id: u64,
        end: usize,
        bytes: &Bytes,
        waker: &Waker,
    ) -> Polled<usize> {
        let mut wakes = Wakes::new();
        let polled = {
            let mut state = self.state.lock();
            let Some(connection) = state.connections.get_mut(&id) else {
                return Polled::Failed(io::ErrorKind::NotConnected);
            };
            if connection.reset {
                return Polled::Failed(io::ErrorKind::ConnectionReset);
            }
            if connection.pipes[end].shut {
                return Polled::Failed(io::ErrorKind::BrokenPipe);
            }
            // The peer closed its socket (both halves gone): its kernel answers with a reset.
            if connection.held[1 - end] == [false, false] {
                state.reset(simulation, id, &mut wakes);
                drop(state);
                wake_all(wakes);
                return Polled::Failed(io::ErrorKind::ConnectionReset);
            }
            let room = WINDOW.saturating_sub(connection.pipes[end].queued);
            if room == 0 {
                connection.pipes[end].writer = Some(waker.clone());
                return Polled::Wait(None);
            }
            if chance(simulation, "net.reset", state.faults.reset_rate) {
                state.reset(simulation, id, &mut wakes);
                drop(state);
                wake_all(wakes);
                return Polled::Failed(io::ErrorKind::ConnectionReset);
            }
            let count = room.min(bytes.len());
            let taken = bytes.slice(..count);
            simulation.record("net.send", &[&id.to_le_bytes(), &[end as u8], &taken]);
            let reader_gone = !state.connections[&id].held[1 - end][1];
            if !reader_gone {
                // A peer that dropped its stream reads nothing more: the bytes are discarded
                // as its socket's shut reading side discards them.
                state.push(simulation, id, end, taken, false);
                let pipe = &mut state.connections.get_mut(&id).expect("looked up").pipes[end];
                wakes.extend(pipe.reader.take());
            }
            Polled::Ready(count)
        };
        wake_all(wakes);
        polled
    }

    /// Shuts the writing side of end `end` of `id`: its peer reads end-of-stream after every
    /// byte written before.
    pub(crate) fn shutdown(&self, simulation: &Simulation, id: u64, end: usize) {
        let mut wakes = Wakes::new();
        {
            let mut state = self.state.lock();
            let Some(connection) = state.connections.get_mut(&id) else {
                return;
            };
            if connection.reset || connection.pipes[end].shut {
                return;
            }
            connection.pipes[end].shut = true;
            simulation.record("net.shutdown", &[&id.to_le_bytes(), &[end as u8]]);
            state.push(simulation, id, end, Bytes::new(), true);
            let pipe = &mut state.connections.get_mut(&id).expect("looked up").pipes[end];
            wakes.extend(pipe.reader.take());
        }
        wake_all(wakes);
    }

    /// Takes up to `max` bytes that have arrived on the pipe end `end` of `id` reads.
    pub(crate) fn read(
        &self,
        simulation: &Simulation,
        id: u64,
        end: usize,
        max: usize,
        waker: &Waker,
    ) -> Polled<Vec<Bytes>> {
        let now = simulation.now();
        let mut wakes = Wakes::new();
        let polled = {
            let mut state = self.state.lock();
            let Some(connection) = state.connections.get_mut(&id) else {
                return Polled::Failed(io::ErrorKind::NotConnected);
            };
            let reset = connection.reset;
            let pipe = &mut connection.pipes[1 - end];
            let mut taken = Vec::new();
            let mut count = 0;
            while count < max && pipe.arrived(now) {
                let segment = pipe.segments.front_mut().expect("arrived");
                if segment.fin {
                    break;
                }
                let take = segment.bytes.len().min(max - count);
                taken.push(segment.bytes.split_to(take));
                count += take;
                if segment.bytes.is_empty() {
                    pipe.segments.pop_front();
                }
            }
            if count > 0 {
                pipe.queued -= count;
                wakes.extend(pipe.writer.take());
                let mut fields: Vec<&[u8]> = vec![&[]; taken.len() + 2];
                let id_bytes = id.to_le_bytes();
                let end_byte = [end as u8];
                fields[0] = &id_bytes;
                fields[1] = &end_byte;
                for (field, bytes) in fields[2..].iter_mut().zip(&taken) {
                    *field = bytes;
                }
                simulation.record("net.recv", &fields);
                Polled::Ready(taken)
            } else if pipe.arrived(now) {
                // Only the end-of-stream segment is left, and it has arrived.
                Polled::End
            } else if reset {
                Polled::Failed(io::ErrorKind::ConnectionReset)
            } else {
                pipe.reader = Some(waker.clone());
                Polled::Wait(pipe.segments.front().and_then(|segment| segment.arrival))
            }
        };
        wake_all(wakes);
        polled
    }

    /// End `end` of `id` no longer holds its sink (`half` 0) or its stream (`half` 1).
    pub(crate) fn release_half(&self, simulation: &Simulation, id: u64, end: usize, half: usize) {
        if half == 0 {
            self.shutdown(simulation, id, end);
        }
        let mut wakes = Wakes::new();
        {
            let mut state = self.state.lock();
            let Some(connection) = state.connections.get_mut(&id) else {
                return;
            };
            connection.held[end][half] = false;
            if half == 1 {
                // Bytes its stream never read are discarded, which frees the peer's window.
                let pipe = &mut connection.pipes[1 - end];
                pipe.segments.retain(|segment| segment.fin);
                pipe.queued = 0;
                wakes.extend(pipe.writer.take());
            }
            state.collect(id);
        }
        wake_all(wakes);
    }

    /// Sets the link from `from` to `to` (one direction).
    pub(crate) fn set_link(&self, simulation: &Simulation, from: IpAddr, to: IpAddr, link: Link) {
        simulation.record(
            "net.link",
            &[
                &ip_bytes(from),
                &ip_bytes(to),
                &(link.latency.as_nanos() as u64).to_le_bytes(),
                &(link.jitter.as_nanos() as u64).to_le_bytes(),
            ],
        );
        self.state.lock().links.insert((from, to), link);
    }

    /// Blocks the direction from `from` to `to`: its bytes are held until it heals.
    pub(crate) fn block(&self, simulation: &Simulation, from: IpAddr, to: IpAddr) {
        simulation.record("net.partition", &[&ip_bytes(from), &ip_bytes(to)]);
        let mut state = self.state.lock();
        state.blocked.insert((from, to));
        state.hold(simulation.now(), from, to);
    }

    /// Unblocks the directions `pairs` name (every one with `None`): held bytes go out.
    pub(crate) fn unblock(&self, simulation: &Simulation, pairs: Option<&[(IpAddr, IpAddr)]>) {
        let mut wakes = Wakes::new();
        {
            let mut state = self.state.lock();
            match pairs {
                Some(pairs) => {
                    for &(from, to) in pairs {
                        simulation.record("net.heal", &[&ip_bytes(from), &ip_bytes(to)]);
                        state.blocked.remove(&(from, to));
                    }
                }
                None => {
                    simulation.record("net.heal_all", &[]);
                    state.blocked.clear();
                }
            }
            state.release(simulation, &mut wakes);
        }
        wake_all(wakes);
    }

    /// Resets every connection with an end on `host`.
    pub(crate) fn reset_host(&self, simulation: &Simulation, host: IpAddr) {
        let mut wakes = Wakes::new();
        {
            let mut state = self.state.lock();
            let ids: Vec<u64> = state
                .connections
                .iter()
                .filter(|(_, connection)| connection.ends.iter().any(|end| end.ip() == host))
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                state.reset(simulation, id, &mut wakes);
            }
        }
        wake_all(wakes);
    }
}
