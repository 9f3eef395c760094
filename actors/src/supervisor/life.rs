//! A supervisor's own end, as its refs' `stop()` and `join()` wait for it: a [`Life`] of its
//! own (as an actor has, without a mailbox), finished once by whatever ends the supervisor,
//! which every joiner then hears of, however many there are and whenever they ask.
//!
//! Invariants:
//! - The end is recorded once (the first reason wins), after the supervisor's children were
//!   ended for good: a joiner that hears of it finds every child's mailbox closed, with its
//!   own reason. (One exception: a nested supervisor whose parent aborted its incarnation
//!   past its shutdown timeout while a child's thread was blocked; its children end when that
//!   incarnation's future is dropped, see `PutBack`.)
//! - A top-level supervisor's end is finished by [`Ending`], which its task holds from before
//!   it is spawned: ended by the loop (`Stopped`), by giving up (`Panicked`), or, when the
//!   task is aborted or never runs (its scope ended), by the guard's drop (`Shutdown`).
//! - A nested supervisor's end is its parent's to finish, when it is done with it for good
//!   (see `SupervisorChild::close`).

use crate::ExitReason;
use crate::lifecycle::{Life, Peer};
use crate::{ActorId, Join};
use std::sync::Arc;

/// A supervisor's life: its id and its end.
pub(crate) struct SupervisorLife {
    life: Life,
}

impl Peer for SupervisorLife {
    fn life(&self) -> &Life {
        &self.life
    }

    /// A supervisor has no mailbox: a signal queued to it (a link's exit) is stamped at 0
    /// and never taken; its end drops it.
    fn tail(&self) -> usize {
        0
    }
}

impl SupervisorLife {
    /// The life of a supervisor labelled `label`, with an id of its own.
    pub(crate) fn new(label: &'static str) -> Arc<Self> {
        Arc::new(SupervisorLife {
            life: Life::new(ActorId::next_named(label)),
        })
    }

    /// The supervisor's id.
    pub(crate) fn id(&self) -> ActorId {
        self.life.id()
    }

    /// Whether the supervisor has ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.life.has_ended()
    }

    /// How the supervisor ended, if it has.
    pub(crate) fn ended(&self) -> Option<crate::ExitReason> {
        self.life.reason()
    }

    /// Records the end, if none was, and tells every joiner.
    pub(crate) fn end(&self, reason: ExitReason) {
        if let Some(finished) = self.life.finish(reason) {
            finished.deliver();
        }
    }

    /// Resolves with the supervisor's exit reason once it ended.
    pub(crate) fn join(self: &Arc<Self>) -> Join {
        Join::on(self.clone())
    }
}

/// Holds a top-level supervisor's loop state `S` and ends its life when dropped: first the
/// state (which ends the children for good), then the life, with `Shutdown` unless
/// [`end`](Self::end) said otherwise.
pub(super) struct Ending<S> {
    state: Option<S>,
    life: Arc<SupervisorLife>,
}

impl<S> Ending<S> {
    pub(super) fn new(life: Arc<SupervisorLife>, state: S) -> Self {
        Ending {
            state: Some(state),
            life,
        }
    }

    /// The loop's state.
    pub(super) fn state(&mut self) -> &mut S {
        self.state.as_mut().expect("present until the end")
    }

    /// Drops the state, then ends the life with `reason`.
    pub(super) fn end(mut self, reason: ExitReason) {
        drop(self.state.take());
        self.life.end(reason);
    }
}

impl<S> Drop for Ending<S> {
    fn drop(&mut self) {
        drop(self.state.take());
        self.life.end(ExitReason::Shutdown);
    }
}
