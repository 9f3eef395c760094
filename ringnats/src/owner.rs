//! What keeps a client's connection open: the state it shares with its connection task, the
//! context its calls time out on, and that task. Every [`Client`](crate::Client) clone and
//! every [`Subscription`](crate::Subscription) holds it; the last one dropped closes the
//! client and stops the task. Below both, so that a subscription keeps the connection open
//! without knowing the client.

use crate::shared::Shared;
use runtime::{Context, Handle};
use std::sync::Arc;

pub(crate) struct Owner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) context: Context,
    pub(crate) task: Handle<()>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.close();
        self.task.abort();
    }
}
