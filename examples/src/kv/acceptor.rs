//! The service's acceptors: actors under the `kv` supervisor, each owning the accept loop of
//! one listener (the protocol's [`Acceptor`], the `/metrics` endpoint's
//! [`MetricsEndpoint`](super::metrics::MetricsEndpoint)), and the `Listening` slot that
//! keeps a listener from one incarnation of its acceptor to the next.
//!
//! Invariants:
//! - **One incarnation accepts at a time, on the listener the service bound**: between
//!   incarnations the listener waits in its slot. An incarnation's `on_start` takes it
//!   (waiting, if it must, until the previous incarnation's loop has let go of it) and runs
//!   the loop in a task of the actor's scope; its `on_stop` aborts that task and waits until
//!   the listener is back. A restart never closes the port: connections that arrive meanwhile
//!   wait in the listen backlog for the next incarnation.
//! - **A broken listener is replaced, not retried**: when accepting fails in a way that
//!   retrying on the same socket cannot mend
//!   ([`listener_is_broken`](crate::lines::listener_is_broken)), the loop closes the
//!   listener, leaves the slot empty and makes its acceptor fail. Its supervisor restarts
//!   it, and the next incarnation binds the same address again: the resolved one (a port 0
//!   became a real port at the first bind), which std binds with `SO_REUSEADDR`, so the
//!   connections still open on that port do not hold it. A bind that fails then fails the
//!   start, which the supervisor counts like any failure.
//! - **The port closes with the tree**: the slot belongs to the child's spec, which its
//!   supervisor drops once it is done with the child for good, after the last `on_stop` had
//!   the listener back (a loop's task tells it so only once it holds no part of the slot).
//! - **What the loop hands on outlives it**: a connection's handoff to the connections'
//!   supervisor and a refusal run in the service's scope, so an acceptor that stops or
//!   restarts does not drop a client it accepted: it is served, or told why not. They stay
//!   bounded: a handoff holds an admission slot, whose count the incarnations share; a
//!   refusal lasts at most its deadline, and each loop runs at most `REFUSALS_IN_FLIGHT`
//!   (a restarted loop's may overlap its predecessor's for that deadline, and restarts are
//!   bounded by the supervisor's intensity).

use super::connection::Connection;
use super::store::StoreRef;
use super::view::View;
use super::{MAX_CLIENTS_REACHED, refusal};
use crate::limits::Slot;
use crate::lines::accept_until_stopped;
use crate::refusal::{Refusal, refuse};
use actors::supervisor::{ChildSpec, DynamicSupervisorRef, Restart};
use futures::channel::oneshot;
use futures::lock::{Mutex, OwnedMutexGuard};
use runtime::Network as _;
use runtime::Spawner as _;
use runtime::net::{Listener, Sink, Stream};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// A listener and the address it was bound to, kept across its acceptor's incarnations.
#[derive(Debug)]
pub(super) struct Listening {
    /// Where it listens, resolved (never port 0): what a broken listener's successor binds.
    address: SocketAddr,
    /// The listener while no accept loop holds it, or held with the lock by the loop that
    /// runs; `None` once a broken one was closed, until an incarnation binds anew.
    slot: Arc<Mutex<Option<Listener>>>,
}

impl Listening {
    /// Keeps `listener`, bound to `asked`, and the address it resolved to (`asked` names
    /// the failure if that cannot be read).
    pub(super) fn new(listener: Listener, asked: SocketAddr) -> Result<Self, runtime::Error> {
        use runtime::Listener as _;
        let address = listener
            .local_addr()
            .map_err(|error| runtime::Error::BindFailed(asked, error))?;
        Ok(Listening {
            address,
            slot: Arc::new(Mutex::new(Some(listener))),
        })
    }

    /// Where it listens.
    pub(super) fn address(&self) -> SocketAddr {
        self.address
    }

    /// The listener, for one accept loop: waits until no other loop holds it, and binds the
    /// address anew if the last one was closed as broken.
    async fn lease(&self, context: &runtime::Context) -> Result<Lease, runtime::Error> {
        let mut held = self.slot.clone().lock_owned().await;
        if held.is_none() {
            *held = Some(context.bind(self.address).await?);
        }
        let (returned, back) = oneshot::channel();
        Ok(Lease {
            held: Some(held),
            returned: Some(returned),
            back: Some(back),
        })
    }
}

/// An accept loop's hold on a listener: the slot's lock, given back when dropped (however
/// the loop's task ends), and then, only then, said so on `returned`. Said after the lock
/// and its share of the slot are dropped, so whoever hears it may drop the slot and know
/// the listener closed with it.
struct Lease {
    held: Option<OwnedMutexGuard<Option<Listener>>>,
    returned: Option<oneshot::Sender<()>>,
    /// Taken by the acceptor before the lease goes to its loop.
    back: Option<oneshot::Receiver<()>>,
}

impl Lease {
    fn listener(&mut self) -> &mut Listener {
        self.held
            .as_mut()
            .and_then(|held| held.as_mut())
            .expect("a lease holds a listener until it is closed")
    }

    /// Closes the listener (it is broken): the slot stays empty, for the next lease to
    /// bind anew.
    fn close(&mut self) {
        if let Some(held) = self.held.as_mut() {
            **held = None;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.held.take());
        if let Some(returned) = self.returned.take() {
            let _ = returned.send(());
        }
    }
}

/// An acceptor's accept loop: the task that runs it, in the actor's scope, and what tells
/// that the listener is back.
#[derive(Debug)]
pub(super) struct AcceptLoop {
    listening: Arc<Listening>,
    task: Option<runtime::Handle<()>>,
    back: Option<oneshot::Receiver<()>>,
}

impl AcceptLoop {
    pub(super) fn new(listening: Arc<Listening>) -> Self {
        AcceptLoop {
            listening,
            task: None,
            back: None,
        }
    }

    /// Where it listens.
    pub(super) fn address(&self) -> SocketAddr {
        self.listening.address()
    }

    /// Takes the listener (see [`Listening::lease`]) and accepts on it in a task of `scope`
    /// (the acceptor's own scope, so the task ends with the incarnation), handing each
    /// connection to `accepted`; refusals run in `service`'s scope. If the listener breaks,
    /// the task closes it, gives the slot back, and calls `broken` with the error: the
    /// acceptor must then fail.
    pub(super) async fn start<F, Fut>(
        &mut self,
        scope: &runtime::Context,
        service: runtime::Context,
        name: &'static str,
        accepted: impl FnMut(Sink, Stream) -> Option<Refusal> + Send + 'static,
        broken: F,
    ) -> Result<(), runtime::Error>
    where
        F: FnOnce(runtime::Error) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let mut lease = self.listening.lease(scope).await?;
        self.back = lease.back.take();
        self.task = Some(scope.clone().spawn(move |_| async move {
            let result = accept_until_stopped(&service, lease.listener(), name, accepted).await;
            if let Err(error) = result {
                lease.close();
                // The slot is free before the acceptor hears of it: its successor binds
                // without waiting.
                drop(lease);
                broken(error).await;
            }
        }));
        Ok(())
    }

    /// Ends the loop and waits until the listener is back in its slot. Immediate if the loop
    /// ended already; bounded by the abort, which drops the task's future at its next poll.
    pub(super) async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(back) = self.back.take() {
            // Never cancelled: the lease says so when dropped, whatever ends its task.
            let _ = back.await;
        }
    }
}

/// What every incarnation of the [`Acceptor`] shares: where it hands connections, and the
/// count that bounds them across incarnations (a connection holds its slot whichever
/// incarnation admitted it).
#[derive(Debug)]
pub(super) struct Handoff {
    /// The service's scope: handoffs and refusals run there (see the module's invariants).
    pub(super) service: runtime::Context,
    pub(super) store: StoreRef,
    pub(super) view: Arc<View>,
    pub(super) connections: DynamicSupervisorRef,
    pub(super) open: Arc<AtomicUsize>,
    pub(super) max: usize,
}

impl Handoff {
    /// Admits a connection as a temporary child of the connections' supervisor, at most
    /// `max` at once: the admission is decided here, at the accept, by taking a slot (so a
    /// burst cannot slip past it), and a connection past it is refused with its error line
    /// (see [`crate::refusal`]).
    fn admit(&self, sink: Sink, stream: Stream) -> Option<Refusal> {
        let Some(slot) = Slot::take(&self.open, self.max) else {
            return Some(refusal(sink, stream, MAX_CLIENTS_REACHED));
        };
        let connections = self.connections.clone();
        let store = self.store.clone();
        let view = self.view.clone();
        drop(self.service.clone().spawn(move |clock| async move {
            // Started once (temporary): the factory takes the socket and the slot. If the
            // child is refused (the service is stopping), they are taken back here.
            let socket = Arc::new(parking_lot::Mutex::new(Some((sink, stream, slot))));
            let spec = ChildSpec::new({
                let socket = socket.clone();
                move || {
                    let (sink, stream, slot) =
                        socket.lock().take().expect("a temporary child starts once");
                    Connection {
                        sink: Some(sink),
                        stream: Some(stream),
                        store: store.clone(),
                        view: view.clone(),
                        _slot: slot,
                    }
                }
            })
            .restart(Restart::Temporary);
            let Err(error) = connections.start_child(spec).await else {
                return;
            };
            let Some((sink, stream, _slot)) = socket.lock().take() else {
                // It started, and failed in `on_start`: the socket went with it.
                return;
            };
            let why = match error {
                actors::Error::TooManyChildren { .. } => MAX_CLIENTS_REACHED,
                _ => "the server is stopping",
            };
            // Bounded by the slot, held until the refusal ends.
            refuse(&clock, refusal(sink, stream, why)).await;
        }));
        None
    }
}

/// The protocol's acceptor: a permanent child of the `kv` supervisor that accepts clients
/// and hands each to the connections' supervisor as a temporary child, at most
/// `KV_MAX_CONNECTIONS` at once (one more is refused with Redis's error line).
#[actors::actor(name = "kv_acceptor")]
#[derive(Debug)]
pub struct Acceptor {
    accept_loop: AcceptLoop,
    handoff: Arc<Handoff>,
}

impl Acceptor {
    /// An incarnation accepting on `listening`'s listener.
    pub(super) fn new(listening: Arc<Listening>, handoff: Arc<Handoff>) -> Self {
        Acceptor {
            accept_loop: AcceptLoop::new(listening),
            handoff,
        }
    }
}

#[actors::actor]
impl Acceptor {
    /// Takes the listener (binding its address again if the last one broke: a bind that
    /// fails is a failed start) and starts accepting.
    async fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        let handoff = self.handoff.clone();
        let acceptor = ctx.actor_ref();
        let started = self
            .accept_loop
            .start(
                ctx.runtime(),
                self.handoff.service.clone(),
                "kv",
                move |sink, stream| handoff.admit(sink, stream),
                move |error| async move {
                    let _ = acceptor.tell_listener_broke(error.to_string()).await;
                },
            )
            .await;
        if let Err(error) = started {
            panic!("kv acceptor: cannot listen again: {error}");
        }
    }

    async fn on_stop(&mut self) {
        self.accept_loop.stop().await;
    }

    /// Where it accepts clients (the same address across restarts).
    pub fn address(&self) -> SocketAddr {
        self.accept_loop.address()
    }

    /// Fails on purpose: for showing a supervised restart.
    pub fn fail(&mut self) {
        panic!("kv acceptor failing on purpose");
    }

    /// The accept loop found the listener broken and closed it: the acceptor fails, and the
    /// next incarnation binds the address anew.
    fn listener_broke(&mut self, error: String) {
        panic!("kv acceptor: the listener broke ({error}); it is bound again on restart");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lines::listener_is_broken;
    use futures::StreamExt as _;
    use futures::channel::mpsc;

    /// Shuts down the listening socket bound to `address`, found among the process's
    /// descriptors (the runtime's listener does not show its own): accepting on it then
    /// fails with `EINVAL`, as on a listener broken for good.
    fn shut_down_listener(address: SocketAddr) {
        use std::os::fd::FromRawFd as _;
        for entry in std::fs::read_dir("/proc/self/fd").expect("the process's descriptors") {
            let Some(fd) = entry
                .ok()
                .and_then(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            else {
                continue;
            };
            let mut listening: libc::c_int = 0;
            let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: `listening` and `length` are valid for the call; a descriptor that is
            // not a listening socket (or is closed meanwhile) only makes it fail.
            let asked = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_ACCEPTCONN,
                    (&raw mut listening).cast(),
                    &raw mut length,
                )
            };
            if asked != 0 || listening == 0 {
                continue;
            }
            // SAFETY: borrowed, never closed (ManuallyDrop), for the duration of the call.
            let socket =
                std::mem::ManuallyDrop::new(unsafe { std::net::TcpListener::from_raw_fd(fd) });
            if socket.local_addr().ok() == Some(address) {
                // SAFETY: a live socket of this process; shutdown has no memory preconditions.
                assert_eq!(unsafe { libc::shutdown(fd, libc::SHUT_RDWR) }, 0);
                return;
            }
        }
        panic!("no listener on {address}");
    }

    /// Starts an accept loop on `listening` that hands each connection to the channel it
    /// returns, and says on the other what broke its listener.
    async fn accepting(
        context: &runtime::Context,
        listening: &Arc<Listening>,
    ) -> (
        AcceptLoop,
        mpsc::UnboundedReceiver<(Sink, Stream)>,
        oneshot::Receiver<runtime::Error>,
    ) {
        let (hand, accepted) = mpsc::unbounded();
        let (broke, broken) = oneshot::channel();
        let mut accept_loop = AcceptLoop::new(listening.clone());
        accept_loop
            .start(
                context,
                context.clone(),
                "test",
                move |sink, stream| {
                    let _ = hand.unbounded_send((sink, stream));
                    None
                },
                move |error| async move {
                    let _ = broke.send(error);
                },
            )
            .await
            .expect("the listener is taken");
        (accept_loop, accepted, broken)
    }

    /// A listener that breaks ends its loop with the error, closed and out of its slot; the
    /// next loop (the next incarnation's) binds the same address again, though a connection
    /// accepted on the old listener is still open on that port, and accepts there; a loop
    /// that stops puts its listener back.
    #[test]
    fn a_broken_listener_is_closed_and_its_address_bound_again() {
        runtime::Runner::new(runtime::Config::default()).start(|context| async move {
            let asked: SocketAddr = "127.0.0.1:0".parse().unwrap();
            let listener = context.bind(asked).await.unwrap();
            let listening = Arc::new(Listening::new(listener, asked).unwrap());
            let address = listening.address();
            assert_ne!(address.port(), 0, "resolved");
            let (mut first, mut accepted, broken) = accepting(&context, &listening).await;
            let _client = context.dial(address).await.unwrap();
            let _served = accepted.next().await.expect("accepted");

            shut_down_listener(address);
            let error = broken.await.expect("the loop reports the broken listener");
            assert!(listener_is_broken(&error), "{error}");
            assert!(
                listening.slot.try_lock().expect("let go").is_none(),
                "closed, and the slot left empty"
            );
            // The loop has ended: stopping it is immediate.
            first.stop().await;

            let (mut next, mut accepted, _broken) = accepting(&context, &listening).await;
            let _again = context.dial(address).await.unwrap();
            let _served = accepted
                .next()
                .await
                .expect("accepted on the address bound again");
            next.stop().await;
            assert!(
                listening.slot.try_lock().expect("let go").is_some(),
                "stopped, the loop put its listener back"
            );
        });
    }
}
