//! [`RemoteTopic`]: a local [`Topic`] that spans nodes, one NATS subject per topic.
//!
//! Every node that spans a topic subscribes its subject and publishes what arrives to its
//! local topic, so a message published on any node reaches the subscribers on every node
//! (this one's included, through NATS) once. Delivery is at most once; messages from one
//! node arrive in the order it published them.

use super::nats_error::remote_error;
use super::node::{Node, NodeInner};
use super::subjects::check_name;
use crate::{Error, Topic};
use runtime::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;

/// A topic whose messages reach its subscribers on every node that spans it.
pub struct RemoteTopic<M> {
    node: Node,
    subject: String,
    _message: PhantomData<fn(M)>,
}

/// Shows the topic's subject and the node that spans it.
impl<M> std::fmt::Debug for RemoteTopic<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTopic")
            .field("subject", &self.subject)
            .field("node", &self.node.name())
            .finish()
    }
}

impl<M> Clone for RemoteTopic<M> {
    fn clone(&self) -> Self {
        RemoteTopic {
            node: self.node.clone(),
            subject: self.subject.clone(),
            _message: PhantomData,
        }
    }
}

impl<M> RemoteTopic<M>
where
    M: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    /// Publishes `message` to the topic on every node (waiting while the NATS write buffer
    /// is full).
    pub async fn publish(&self, message: &M) -> Result<(), Error> {
        let bytes = postcard::to_allocvec(message).map_err(|error| {
            Error::Remote(format!("the message could not be encoded: {error}").into())
        })?;
        self.node
            .inner
            .client
            .publish(&self.subject, bytes)
            .await
            .map_err(remote_error)
    }
}

impl Node {
    /// Spans `local` across the nodes under `name`: what any node publishes with the returned
    /// [`RemoteTopic`] reaches `local`'s subscribers here, and theirs. Items that do not
    /// decode as `M` are dropped and counted (`decode`). Once it returns, the NATS server
    /// routes the topic's messages here. A topic is spanned at most once per node; the span
    /// lasts as long as the node.
    pub async fn span_topic<M>(&self, name: &str, local: &Topic<M>) -> Result<RemoteTopic<M>, Error>
    where
        M: Serialize + DeserializeOwned + Clone + Send + 'static,
    {
        check_name(name, "topic")?;
        // A second bridge would deliver every message twice here.
        if !self.inner.span(name) {
            return Err(Error::Remote(
                format!("the topic `{name}` is spanned on this node already").into(),
            ));
        }
        let subject = format!("{}.t.{name}", self.inner.options.prefix);
        let mut subscription = match self.inner.client.subscribe(&subject) {
            Ok(subscription) => subscription,
            Err(error) => {
                self.inner.unspan(name);
                return Err(remote_error(error));
            }
        };
        if let Err(error) = self.inner.client.flush().await {
            // Not known to be in place: the subscription goes (dropped) and a retry may span
            // again.
            drop(subscription);
            self.inner.unspan(name);
            return Err(remote_error(error));
        }
        let local = local.clone();
        let inner = self.inner.clone();
        self.inner
            .context
            .child("topic")
            .spawn(move |_| async move {
                while let Some(message) = subscription.next().await {
                    match postcard::from_bytes::<M>(&message.payload) {
                        Ok(item) => {
                            local.publish(item).await;
                        }
                        Err(_) => {
                            inner.count("decode", 1);
                        }
                    }
                }
            });
        Ok(RemoteTopic {
            node: self.clone(),
            subject,
            _message: PhantomData,
        })
    }
}

impl NodeInner {
    /// Marks `name` spanned here; false if it was already.
    fn span(&self, name: &str) -> bool {
        self.state.lock().spanned.insert(name.to_string())
    }

    /// Unmarks `name` (its span failed).
    fn unspan(&self, name: &str) {
        self.state.lock().spanned.remove(name);
    }
}
