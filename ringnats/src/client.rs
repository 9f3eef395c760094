//! [`Client`]: what callers publish, subscribe and request through. It owns nothing but a
//! handle on its connection (`owner.rs`); every call is a step on the state it shares with
//! the connection's tasks (`shared/`), where the invariants of the client's behaviour live.

use crate::Error;
use crate::connection;
use crate::headers::Headers;
use crate::options::Options;
use crate::owner::Owner;
use crate::protocol::Message;
use crate::random::random_u64;
use crate::shared::{CloseOnDrop, Shared};
use crate::subscription::Subscription;
use runtime::Context;
use runtime::prelude::*;
use std::sync::Arc;
use std::time::Duration;

/// A connection to a NATS server (or to the first of a list that answers), which reconnects
/// by itself. Cheap to clone; the connection closes when the last clone and the last
/// [`Subscription`] are dropped, or at [`close`](Self::close).
///
/// Its tasks run in a child scope of the context given to [`connect`](Self::connect):
/// when that context's task ends, the connection ends with it.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Owner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Client");
        if let Some((status, server)) = self.shared().try_status_and_server() {
            debug.field("status", &status).field("server", &server);
        }
        debug.finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the first server of `options` that answers and completes the handshake
    /// (`INFO`, `CONNECT`, `PING`/`PONG`, so a refused credential is reported here as
    /// [`Error::Authorization`]). From then on the client reconnects by itself.
    pub async fn connect(context: &Context, options: Options) -> Result<Client, Error> {
        options.validate()?;
        let shared = Arc::new(Shared::new(options));
        let established = connection::first(&shared, context).await?;
        shared.install(&established);
        let task = {
            // Closes the client however the connection task ends: returned, aborted (its
            // scope ended), panicked, or never started (a refused spawn drops it).
            let guard = CloseOnDrop(shared.clone());
            context
                .child("nats")
                .spawn(move |context| connection::run(guard, context, established))
        };
        if shared.is_closed() {
            return Err(Error::Closed);
        }
        Ok(Client {
            inner: Arc::new(Owner {
                shared,
                context: context.clone(),
                task,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Whether the client is connected now (it reconnects by itself when not).
    pub fn is_connected(&self) -> bool {
        self.shared().is_connected()
    }

    /// The largest message (headers and payload) the current server accepts.
    pub fn max_payload(&self) -> usize {
        self.shared().max_payload()
    }

    /// The server the client is connected to, if any.
    pub fn server(&self) -> Option<String> {
        self.shared().server()
    }

    /// A fresh subject under this client's inbox, for replies.
    pub fn new_inbox(&self) -> String {
        format!("_INBOX.{:016x}{:016x}", random_u64(), random_u64())
    }
    /// Publishes `payload` to `subject`. It resolves once the message is queued for the
    /// server (waiting only while the write buffer is above its high-water mark); delivery
    /// is at most once. A message above the server's `max_payload` is refused with
    /// [`Error::TooLarge`] and nothing is sent.
    pub async fn publish(&self, subject: &str, payload: impl AsRef<[u8]>) -> Result<(), Error> {
        self.shared()
            .send(subject, None, None, payload.as_ref())
            .await
    }

    /// Publishes with a reply subject, for a responder to answer to.
    pub async fn publish_with_reply(
        &self,
        subject: &str,
        reply: &str,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        self.shared()
            .send(subject, Some(reply), None, payload.as_ref())
            .await
    }

    /// Publishes with headers (and a reply subject if given).
    pub async fn publish_with_headers(
        &self,
        subject: &str,
        reply: Option<&str>,
        headers: &Headers,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        let block = headers.encode()?;
        self.shared()
            .send(subject, reply, Some(&block), payload.as_ref())
            .await
    }

    /// Publishes without waiting: [`Error::WouldBlock`] when the write buffer is above its
    /// high-water mark.
    pub fn try_publish(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        self.shared().try_publish(subject, reply, payload.as_ref())
    }

    /// Publishes at once, into a reserve of 64 KiB past the write buffer's high-water mark
    /// ([`Error::WouldBlock`] beyond it; the reconnect buffer's limit still applies): for
    /// small messages that must not be refused behind a burst, such as heartbeats.
    /// Everything queued before it still goes out first.
    pub fn publish_urgent(&self, subject: &str, payload: impl AsRef<[u8]>) -> Result<(), Error> {
        self.shared().publish_urgent(subject, payload.as_ref())
    }

    /// Subscribes to `subject` (wildcards `*` and `>` allowed).
    pub fn subscribe(&self, subject: &str) -> Result<Subscription, Error> {
        self.add_subscription(subject, None)
    }

    /// Subscribes to `subject` in `queue_group`: each message goes to one member of the
    /// group (across every client subscribed with the same group).
    pub fn queue_subscribe(&self, subject: &str, queue_group: &str) -> Result<Subscription, Error> {
        self.add_subscription(subject, Some(queue_group))
    }

    fn add_subscription(
        &self,
        subject: &str,
        queue_group: Option<&str>,
    ) -> Result<Subscription, Error> {
        let (sid, queue) = self.shared().subscribe(subject, queue_group)?;
        Ok(Subscription::new(sid, queue, self.inner.clone()))
    }

    /// Resolves once the server has processed everything queued before it (a `PING` answered
    /// by its `PONG`). Fails with [`Error::Disconnected`] if the connection drops first, and
    /// with [`Error::Timeout`] after the request timeout.
    pub async fn flush(&self) -> Result<(), Error> {
        let answer = self.shared().queue_flush()?;
        let timeout = self.shared().options.request_timeout;
        match self.inner.context.timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    /// Sends a request and waits for the first reply, within the request timeout (default
    /// 5 s). Fails at once with [`Error::NoResponders`] when nobody subscribes to `subject`,
    /// and with [`Error::Disconnected`] when the connection drops before the reply.
    pub async fn request(
        &self,
        subject: &str,
        payload: impl AsRef<[u8]>,
    ) -> Result<Message, Error> {
        let timeout = self.shared().options.request_timeout;
        self.request_with_timeout(subject, payload, timeout).await
    }

    /// [`request`](Self::request) with its own timeout, which covers the wait for room in
    /// the write buffer too.
    pub async fn request_with_timeout(
        &self,
        subject: &str,
        payload: impl AsRef<[u8]>,
        timeout: Duration,
    ) -> Result<Message, Error> {
        let request = self.shared().request(subject, payload.as_ref());
        match self.inner.context.timeout(timeout, request).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    /// Requests waiting for their reply now (for tests that check nothing leaks).
    #[doc(hidden)]
    pub fn __pending_requests(&self) -> usize {
        self.shared().pending_requests()
    }

    /// Flushes what is queued (within the request timeout) if connected, then closes:
    /// subscriptions end, and waiting calls fail with [`Error::Closed`].
    pub async fn close(&self) {
        // While disconnected there is no server to confirm anything: close at once.
        if self.is_connected() {
            let _ = self.flush().await;
        }
        self.shared().close();
        self.inner.task.abort();
    }
}
