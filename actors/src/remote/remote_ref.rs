//! Reaching an actor elsewhere: [`Node::lookup`] and [`RemoteHandle`] (what it makes),
//! [`RemoteRef`]: what a generated `<Name>RemoteRef` wraps; [`RemoteAsk`]: an ask over NATS;
//! [`RemoteMonitor`]: waiting for a remote actor's end.
//!
//! An ask is one NATS request: the message goes to the target's subject with the client's
//! reply inbox, and the first reply answers it. While it waits, it is registered with the
//! node, which fails it at once when the target's node goes down; its registration is
//! withdrawn however the ask ends (answered, timed out, dropped).

use super::codec;
use super::nats_error::remote_error;
use super::node::Node;
use super::protocol::Protocol;
use super::subjects::{Target, check_name, check_node_name};
use super::waiting::WatchGuard;
use crate::{Error, ExitReason};
use futures::future::{Either, select};
use runtime::prelude::*;
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A remote ref type that [`Node::lookup`] can make: the generated `<Name>RemoteRef`.
pub trait RemoteHandle: Sized {
    /// The ref to `target` through `node` (generated).
    #[doc(hidden)]
    fn __new(node: &Node, target: Target) -> Self;
}

impl Node {
    /// A ref to the actor exposed as `name` on any node (each message goes to one of them).
    pub fn lookup<H: RemoteHandle>(&self, name: &str) -> H {
        H::__new(self, Target::Name(name.to_string()))
    }

    /// A ref to the actor the node `node` exposes as `name`.
    pub fn lookup_on<H: RemoteHandle>(&self, node: &str, name: &str) -> H {
        H::__new(
            self,
            Target::Node {
                node: node.to_string(),
                name: name.to_string(),
            },
        )
    }
}

struct Inner {
    node: Node,
    target: Target,
    subject: String,
    /// Why the target cannot be reached at all (a malformed name).
    invalid: Option<Error>,
}

/// A ref to an actor that another node (or this one) exposes, speaking the handlers of `A`
/// (a remote actor's type, or a remote interface's protocol). Cheap to clone.
pub struct RemoteRef<A> {
    inner: Arc<Inner>,
    _actor: PhantomData<fn() -> A>,
}

impl<A> Clone for RemoteRef<A> {
    fn clone(&self) -> Self {
        RemoteRef {
            inner: self.inner.clone(),
            _actor: PhantomData,
        }
    }
}

impl<A> fmt::Debug for RemoteRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteRef")
            .field("target", &self.inner.target)
            .field("via", &self.inner.node.name())
            .finish()
    }
}

impl<A: Protocol> RemoteRef<A> {
    /// A ref to `target` through `node` (what a generated `RemoteHandle::__new` makes).
    #[doc(hidden)]
    pub fn __new(node: &Node, target: Target) -> Self {
        let node = node.clone();
        let prefix = &node.inner.options.prefix;
        let (subject, invalid) = match &target {
            Target::Name(name) => (
                format!("{prefix}.a.{name}"),
                check_name(name, "actor").err(),
            ),
            Target::Node { node: on, name } => (
                format!("{prefix}.n.{on}.{name}"),
                check_name(name, "actor")
                    .and_then(|()| check_node_name(on))
                    .err(),
            ),
        };
        RemoteRef {
            inner: Arc::new(Inner {
                node,
                target,
                subject,
                invalid,
            }),
            _actor: PhantomData,
        }
    }

    /// What the ref reaches.
    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    /// An ask of `wire` (what a generated ask method calls).
    #[doc(hidden)]
    pub fn __ask<R: DeserializeOwned + Send + 'static>(&self, wire: &A::Wire) -> RemoteAsk<R> {
        RemoteAsk {
            reference: self.inner.clone(),
            payload: Some(self.request(wire)),
            timeout: self.inner.node.inner.options.ask_timeout,
            running: None,
            _reply: PhantomData,
        }
    }

    /// `wire` as a request's bytes, or why the target cannot be sent to.
    fn request(&self, wire: &A::Wire) -> Result<Vec<u8>, Error> {
        match &self.inner.invalid {
            Some(error) => Err(error.clone()),
            None => codec::request(wire, A::SCHEMA),
        }
    }

    /// A tell of `wire`, waiting while the node's NATS write buffer is full.
    #[doc(hidden)]
    pub async fn __tell(&self, wire: &A::Wire) -> Result<(), Error> {
        let bytes = self.request(wire)?;
        self.inner
            .node
            .inner
            .client
            .publish(&self.inner.subject, bytes)
            .await
            .map_err(remote_error)
    }

    /// A tell of `wire` that does not wait: [`Error::Full`] when the node's NATS write
    /// buffer is full.
    #[doc(hidden)]
    pub fn __try_tell(&self, wire: &A::Wire) -> Result<(), Error> {
        let bytes = self.request(wire)?;
        self.inner
            .node
            .inner
            .client
            .try_publish(&self.inner.subject, None, bytes)
            .map_err(remote_error)
    }

    /// Resolves with the remote actor's exit reason: the reason it ended with, or
    /// [`ExitReason::NodeDown`] when its node went down (for a name: when no node exposing it
    /// is left), or [`ExitReason::NotFound`] when no node was heard to expose it within the
    /// longest heartbeat silence known after the monitor began (OTP's `noproc`). It does not
    /// resolve while the target runs.
    pub fn monitor(&self) -> RemoteMonitor {
        let (guard, receiver) = self.inner.node.inner.watch_monitor(&self.inner.target);
        RemoteMonitor {
            _guard: guard,
            receiver,
        }
    }
}

/// A remote ask once sent.
type Running<R> = Pin<Box<dyn Future<Output = Result<R, Error>> + Send>>;

/// A remote ask: resolves to the handler's reply, or why there is none. Its deadline (the
/// node's ask timeout, 5 s by default, unless [`timeout`](Self::timeout) sets one) runs from
/// its first poll, when the message is sent.
#[must_use = "an ask does nothing unless awaited"]
pub struct RemoteAsk<R> {
    reference: Arc<Inner>,
    payload: Option<Result<Vec<u8>, Error>>,
    timeout: Duration,
    running: Option<Running<R>>,
    _reply: PhantomData<fn() -> R>,
}

impl<R> RemoteAsk<R> {
    /// Gives the ask a deadline of `timeout` (at most about 49 days) in place of the node's
    /// ask timeout. Only before the first poll.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.clamp(
            Duration::from_millis(1),
            Duration::from_millis(u32::MAX.into()),
        );
        self
    }
}

impl<R> fmt::Debug for RemoteAsk<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteAsk")
            .field("target", &self.reference.target)
            .field("sent", &self.running.is_some())
            .finish()
    }
}

impl<R: DeserializeOwned + Send + 'static> Future for RemoteAsk<R> {
    type Output = Result<R, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.running.is_none() {
            let payload = self
                .payload
                .take()
                .expect("a remote ask polled after it resolved");
            let bytes = match payload {
                Ok(bytes) => bytes,
                Err(error) => return Poll::Ready(Err(error)),
            };
            let running = ask::<R>(self.reference.clone(), bytes, self.timeout);
            self.running = Some(Box::pin(running));
        }
        let running = self.running.as_mut().expect("running");
        let output = std::task::ready!(running.as_mut().poll(cx));
        self.running = None;
        Poll::Ready(output)
    }
}

async fn ask<R: DeserializeOwned>(
    reference: Arc<Inner>,
    mut bytes: Vec<u8>,
    timeout: Duration,
) -> Result<R, Error> {
    let node = &reference.node.inner;
    let started = Instant::now();
    let (_guard, mut down, incarnation): (WatchGuard, _, _) = node.watch_ask(&reference.target);
    codec::set_deadline(&mut bytes, timeout, codec::wall_millis());
    codec::set_incarnation(&mut bytes, incarnation);
    // Resolved as it was registered (its node is known down, or this node has left): it
    // cannot be answered, so it is not sent.
    if let Ok(Some(error)) = down.try_recv() {
        return Err(error);
    }
    let request = pin!(
        node.client
            .request_with_timeout(&reference.subject, &bytes, timeout)
    );
    let answered = match select(request, &mut down).await {
        // The connection dropped after the request may have reached its node: it may still
        // run there, but never after its deadline (the serving node checks it), so the ask
        // waits for its deadline (or for its node to be seen down) rather than fail now.
        Either::Left((Err(nats::Error::Disconnected), _)) => {
            let left = timeout.saturating_sub(started.elapsed());
            let deadline = pin!(node.context.sleep(left));
            return match select(deadline, down).await {
                Either::Left(_) => Err(Error::Timeout),
                Either::Right((Ok(error), _)) => Err(error),
                Either::Right((Err(_), _)) => Err(Error::Closed),
            };
        }
        answered => answered,
    };
    match answered {
        Either::Left((Ok(reply), _)) => codec::decode_reply(&reply.payload),
        Either::Left((Err(nats::Error::NoResponders { .. }), _)) => Err(match &reference.target {
            Target::Name(name) => Error::NotExposed {
                name: name.as_str().into(),
            },
            Target::Node { node, name } => Error::NotExposed {
                name: format!("{name} on node {node}").into(),
            },
        }),
        Either::Left((Err(error), _)) => Err(remote_error(error)),
        Either::Right((Ok(error), _)) => Err(error),
        // The node's registry is gone: the node left.
        Either::Right((Err(_), _)) => Err(Error::Closed),
    }
}

/// A remote actor's end, as [`RemoteRef::monitor`] waits for it.
#[must_use = "a monitor does nothing unless awaited"]
pub struct RemoteMonitor {
    _guard: WatchGuard,
    receiver: futures::channel::oneshot::Receiver<ExitReason>,
}

/// Shows nothing but the type: the watch it holds is the node's (see [`RemoteRef::monitor`]).
impl fmt::Debug for RemoteMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteMonitor").finish_non_exhaustive()
    }
}

impl Future for RemoteMonitor {
    type Output = ExitReason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ExitReason> {
        Pin::new(&mut self.receiver)
            .poll(cx)
            .map(|reason| reason.unwrap_or(ExitReason::Shutdown))
    }
}
