//! The asks and monitors waiting on targets: each registered with the node while it waits
//! (withdrawn by its guard however it ends), and resolved when its target can no longer
//! answer.
//!
//! Invariants:
//! - When a peer goes down, every waiting ask and monitor whose target can no longer answer
//!   is resolved at once (one node's actor: that node is down; a name: no live node, this
//!   one included, exposes it any more), each exactly once, outside the state lock. Asks
//!   and monitors made later for a node known down resolve `NodeDown` at once.
//! - An ask to one node's actor carries the incarnation of that node it was sent to: only
//!   that incarnation going down fails it (another one is the one to answer, or refuse).
//! - On a node that has left, a new registration resolves at once.

use super::membership::Change;
use super::node::{NodeInner, State, Waiter};
use super::subjects::Target;
use crate::{Error, ExitReason};
use futures::channel::oneshot;
use std::sync::Arc;
use std::time::Instant;

impl NodeInner {
    /// Registers an ask or monitor on `target`; the guard withdraws it when dropped. On a
    /// node that has left it resolves at once.
    pub(super) fn watch(self: &Arc<Self>, target: &Target, waiter: Waiter) -> WatchGuard {
        self.watch_with(target, |_| waiter)
    }

    /// [`watch`](Self::watch), with the waiter made under the same hold of the lock.
    pub(super) fn watch_with(
        self: &Arc<Self>,
        target: &Target,
        make: impl FnOnce(&State) -> Waiter,
    ) -> WatchGuard {
        let mut state = self.state.lock();
        let waiter = make(&state);
        state.next_waiter += 1;
        let id = state.next_waiter;
        if state.left {
            drop(state);
            waiter.resolve(|| Error::Closed, || ExitReason::Shutdown);
        } else if let Some(node) = self.known_down(&state, target) {
            drop(state);
            waiter.resolve(
                || Error::NodeDown {
                    node: node.as_str().into(),
                },
                || ExitReason::NodeDown { node: node.clone() },
            );
        } else {
            state.waiting.insert(id, (target.clone(), waiter));
        }
        WatchGuard {
            node: self.clone(),
            id,
        }
    }

    /// Resolves the waiters `matches` picks, outside the lock.
    pub(super) fn resolve(
        &self,
        mut state: crate::sync::MutexGuard<'_, State>,
        matches: impl Fn(&State, &Target, &Waiter) -> bool,
        ask: impl Fn() -> Error,
        monitor: impl Fn() -> ExitReason,
    ) {
        let ids: Vec<u64> = state
            .waiting
            .iter()
            .filter(|(_, (target, waiter))| matches(&state, target, waiter))
            .map(|(id, _)| *id)
            .collect();
        let resolved: Vec<_> = ids
            .into_iter()
            .filter_map(|id| state.waiting.remove(&id))
            .collect();
        drop(state);
        for (_, waiter) in resolved {
            waiter.resolve(&ask, &monitor);
        }
    }

    /// The node of `target`, when it is another node known down (it was up, and has not come
    /// back): an ask to it cannot be answered.
    pub(super) fn known_down(&self, state: &State, target: &Target) -> Option<String> {
        match target {
            Target::Node { node, .. } if *node != self.name && state.peers.known_down(node) => {
                Some(node.clone())
            }
            _ => None,
        }
    }

    /// Resolves what waited on what `changes` ended, outside the lock.
    pub(super) fn apply<'a>(
        &'a self,
        state: crate::sync::MutexGuard<'a, State>,
        changes: Vec<Change>,
    ) {
        let mut state = Some(state);
        for change in changes {
            let state = state.take().unwrap_or_else(|| self.state.lock());
            match change {
                Change::Down {
                    node,
                    incarnation,
                    exposed,
                } => {
                    self.resolve(
                        state,
                        |state, target, waiter| match target {
                            // An ask sent to another incarnation than the one down is that
                            // one's to answer (or refuse).
                            Target::Node { node: on, .. } => {
                                *on == node
                                    && match waiter {
                                        Waiter::Ask(_, to) => *to == 0 || *to == incarnation,
                                        Waiter::Monitor(..) => true,
                                    }
                            }
                            Target::Name(name) => {
                                exposed.contains(name) && !state.exposed_anywhere(name)
                            }
                        },
                        || Error::NodeDown {
                            node: node.as_str().into(),
                        },
                        || ExitReason::NodeDown { node: node.clone() },
                    );
                }
                // Names it stopped exposing without an `Exited` (lost on the way): its actor
                // there ended, for a reason lost with it; a name nobody exposes any more ended
                // everywhere.
                Change::Withdrawn { node, names } => {
                    self.resolve(
                        state,
                        |state, target, _| match target {
                            Target::Node { node: on, name } => *on == node && names.contains(name),
                            Target::Name(name) => {
                                names.contains(name) && !state.exposed_anywhere(name)
                            }
                        },
                        || Error::Closed,
                        || ExitReason::Shutdown,
                    );
                }
            }
        }
    }

    /// Registers a pending ask on `target`: the receiver gets why it will not be answered
    /// (at once when its node is known down or this node has left).
    /// Also gives the incarnation of its node the ask goes to (0 when the node is not up, or
    /// for a name), for the request's header.
    pub(crate) fn watch_ask(
        self: &Arc<Self>,
        target: &Target,
    ) -> (WatchGuard, oneshot::Receiver<Error>, u64) {
        let (sender, receiver) = oneshot::channel();
        let mut incarnation = 0;
        let guard = self.watch_with(target, |state| {
            incarnation = match target {
                Target::Node { node, .. } if *node == self.name => state.incarnation,
                Target::Node { node, .. } => state.peers.get(node).map_or(0, |p| p.incarnation),
                Target::Name(_) => 0,
            };
            Waiter::Ask(sender, incarnation)
        });
        (guard, receiver, incarnation)
    }

    pub(crate) fn watch_monitor(
        self: &Arc<Self>,
        target: &Target,
    ) -> (WatchGuard, oneshot::Receiver<ExitReason>) {
        let (sender, receiver) = oneshot::channel();
        (
            self.watch(target, Waiter::Monitor(sender, Instant::now())),
            receiver,
        )
    }
}

/// Withdraws an ask's or monitor's registration when dropped.
pub(crate) struct WatchGuard {
    node: Arc<NodeInner>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.node.state.lock().waiting.remove(&self.id);
    }
}
