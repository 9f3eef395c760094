//! Exposing a local actor under a name: the two subscriptions (the name's queue group, and
//! this node's own subject for it), the serving task (`serve.rs`), and withdrawing it.
//!
//! Invariants:
//! - An exposure ends when its actor ends, when it is withdrawn, or when the node leaves; its
//!   end is announced so that monitors elsewhere resolve with the actor's exit reason.
//! - An exposure is known to be served only once the NATS server answered a flush sent after
//!   its subscriptions (a refusal of either has arrived by then); one that is not is removed
//!   and its end announced.
//! - A withdrawal returns once the asks already taken have been answered (or their deadlines
//!   passed), and only then is the end announced.

use super::codec::Exit;
use super::nats_error::remote_error;
use super::node::{Exposure, Node};
use super::protocol::{Exposable, Served, join_of};
use super::serve;
use super::subjects::check_name;
use crate::Error;
use runtime::prelude::*;

impl Node {
    /// Serves `actor` under `name` (tokens of letters, digits, `_` and `-` joined by `.`)
    /// until it ends, [`withdraw`](Self::withdraw) or [`leave`](Self::leave). Nodes
    /// exposing one name share its messages. The exposure holds a ref, so the actor runs
    /// while exposed even when no local ref is left. Fails if this node exposes `name`
    /// already, or the actor has ended. Once it returns, the NATS server routes the name's
    /// messages here.
    pub async fn expose<R: Exposable>(&self, name: &str, actor: &R) -> Result<(), Error> {
        let token = self.start_exposing(name, actor)?;
        // The subscriptions are in place once the server answered a ping sent after them, and
        // a refusal of either (the account's permissions) has arrived by then.
        let flushed = self.inner.client.flush().await.and_then(|()| {
            let state = self.inner.state.lock();
            let refused = state
                .exposed
                .get(name)
                .filter(|e| e.token == token)
                .and_then(|exposure| {
                    exposure
                        .unsubscribers
                        .iter()
                        .find_map(nats::Unsubscriber::error)
                });
            refused.map_or(Ok(()), Err)
        });
        if let Err(error) = flushed {
            // Not known to be served: not exposed (unless exposed again meanwhile).
            let removed = {
                let mut state = self.inner.state.lock();
                match state.exposed.get(name) {
                    Some(exposure) if exposure.token == token => {
                        let removed = state.exposed.remove(name);
                        self.inner.announce_exit(&mut state, name, Exit::Shutdown);
                        removed
                    }
                    _ => None,
                }
            };
            if let Some(exposure) = removed {
                exposure.end();
            }
            return Err(remote_error(error));
        }
        Ok(())
    }

    /// Subscribes and starts serving; the exposure's token.
    fn start_exposing<R: Exposable>(&self, name: &str, actor: &R) -> Result<u64, Error> {
        check_name(name, "actor")?;
        let served = actor.__served();
        if served.__is_closed() {
            return Err(Error::Closed);
        }
        let inner = &self.inner;
        let prefix = &inner.options.prefix;
        let mut state = inner.state.lock();
        if state.left {
            return Err(Error::Closed);
        }
        if let Some(exposure) = state.exposed.get(name) {
            return Err(Error::NameTaken {
                name: name.into(),
                holder: exposure.id,
            });
        }
        // Heartbeats list every exposed name: they must stay within the server's limit.
        let listed: usize = state.exposed.keys().map(|name| name.len() + 2).sum();
        if listed + name.len() + 256 > inner.client.max_payload() {
            return Err(Error::Remote(
                format!(
                    "this node exposes too many names for its heartbeat to fit the server's \
                     max_payload of {} bytes",
                    inner.client.max_payload()
                )
                .into(),
            ));
        }
        let shared_subject = format!("{prefix}.a.{name}");
        let shared = inner
            .client
            .queue_subscribe(&shared_subject, &shared_subject)
            .map_err(remote_error)?;
        let direct = inner
            .client
            .subscribe(&format!("{prefix}.n.{}.{name}", inner.name))
            .map_err(remote_error)?;
        let (id, join) = join_of(&served);
        let unsubscribers = [shared.unsubscriber(), direct.unsubscriber()];
        state.next_exposure += 1;
        let token = state.next_exposure;
        let task = {
            let inner = inner.clone();
            let name = name.to_string();
            inner
                .context
                .child("exposed")
                .spawn(move |_| serve::run(inner, name, token, served, join, shared, direct))
        };
        state.exposed.insert(
            name.to_string(),
            Exposure {
                id,
                token,
                task: Some(task),
                unsubscribers,
            },
        );
        drop(state);
        // Peers learn of the name with the next heartbeat; send it now.
        inner.announce_heartbeat();
        Ok(token)
    }

    /// Stops serving `name` (messages already put in the mailbox are still handled); false
    /// if this node did not expose it. Once it returns, the NATS server routes the name's
    /// messages here no more.
    ///
    /// The name's subscriptions are drained, not cut: a message the NATS server routed here
    /// before it saw the withdrawal is still delivered and served. It returns once the asks
    /// taken have been answered (or their deadlines passed), and only then is the end
    /// announced: an asker is never told `Closed` for an ask that reached this node.
    pub async fn withdraw(&self, name: &str) -> bool {
        let taken = {
            let mut state = self.inner.state.lock();
            state
                .exposed
                .get_mut(name)
                .map(|exposure| (exposure.unsubscribers.clone(), exposure.task.take()))
        };
        let Some((unsubscribers, task)) = taken else {
            return false;
        };
        // Drained, not cut: an ask the server routed here before it saw the UNSUB is still
        // delivered and answered (cut at once, it would be dropped on arrival, and its asker
        // told `Closed` once the end is announced). A withdrawal cancelled here still ends
        // them (a drain dropped unsubscribes), so the serving task ends and the exposure
        // with it.
        futures::future::join_all(
            unsubscribers
                .iter()
                .map(|unsubscriber| unsubscriber.drain()),
        )
        .await;
        // Its messages end, so the serving task answers what it took and announces the end
        // (a second withdrawal meanwhile finds no task: it returns once its own drain of the
        // same subscriptions did).
        if let Some(task) = task {
            let _ = task.await;
        }
        true
    }
}
