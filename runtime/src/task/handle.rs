//! [`Handle`]: a task's result, read from the join slot it shares with the task's cell.

use super::cell::JoinRef;
use crate::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A task's result.
///
/// Resolves to `Ok(output)`, to `Err(Error::Closed)` if the task was aborted, cancelled,
/// refused or shut down, or to `Err(Error::Exited)` if it panicked while panics are caught.
/// Dropping a handle detaches the task: it keeps running.
pub struct Handle<T> {
    /// `None` for a spawn refused before a cell existed.
    join: Option<JoinRef<T>>,
    /// A refused handle's result, until taken.
    refused: bool,
}

impl<T> Handle<T> {
    pub(crate) fn new(join: JoinRef<T>) -> Self {
        Self {
            join: Some(join),
            refused: false,
        }
    }

    /// A handle that is already closed: what a refused spawn returns.
    pub(crate) fn closed() -> Self {
        Self {
            join: None,
            refused: true,
        }
    }

    /// Aborts the task and its descendants. The handle resolves to `Err(Error::Closed)` unless
    /// the task had already finished; the future is dropped by its next poll or by shutdown.
    pub fn abort(&self) {
        if let Some(join) = &self.join {
            join.task().abort();
        }
    }
}

impl<T> Future for Handle<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(join) = &mut this.join else {
            assert!(this.refused, "Handle polled after it resolved");
            this.refused = false;
            return Poll::Ready(Err(Error::Closed));
        };
        join.poll(cx.waker())
    }
}

impl<T> Unpin for Handle<T> {}

/// Shows the task (its cell's address, which the task's own `Context` shows as its node while
/// the task lives) and its state: `running` until its result is published, then `finished`
/// (whether or not the handle took it since), or `refused` for a spawn that never made a task.
/// One atomic load; never waits.
impl<T> std::fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Handle");
        match &self.join {
            Some(join) => {
                let state = if join.is_published() {
                    "finished"
                } else {
                    "running"
                };
                debug
                    .field("task", &format_args!("{:p}", join.task().identity()))
                    .field("state", &format_args!("{state}"))
            }
            None => debug.field("state", &format_args!("refused")),
        };
        debug.finish()
    }
}
