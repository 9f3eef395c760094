//! Graceful shutdown: `stop(value, timeout)` resolves every [`Stopped`] to `value` and waits
//! until every signal holder has let go of its signal.
//!
//! Invariants:
//! - The first `stop` value wins; later calls wait like the first but change nothing.
//! - A signal counts as "held" from its creation (or clone) to its drop, so `stop` returning
//!   `Ok` means every task that watched for the signal has finished with it.

use crate::sync::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};

#[derive(Default)]
struct State {
    value: Option<i32>,
    /// Signals alive now.
    held: usize,
    /// Wakers of pending signals, keyed by signal id.
    signals: Vec<(u64, Waker)>,
    /// Wakers of `stop` calls waiting for `held` to reach zero.
    stoppers: Vec<Waker>,
    next_id: u64,
}

/// The stop state a runner's contexts share.
#[derive(Default)]
pub(crate) struct Stopper {
    state: Arc<Mutex<State>>,
}

impl Stopper {
    pub(crate) fn signal(&self) -> Stopped {
        let id = {
            let mut state = self.state.lock();
            state.held += 1;
            state.next_id += 1;
            state.next_id
        };
        Stopped {
            state: self.state.clone(),
            id,
        }
    }

    /// Records `value` (if it is the first) and wakes every signal.
    pub(crate) fn stop(&self, value: i32) {
        let wakers = {
            let mut state = self.state.lock();
            if state.value.is_none() {
                state.value = Some(value);
            }
            std::mem::take(&mut state.signals)
        };
        for (_, waker) in wakers {
            waker.wake();
        }
    }

    /// A future that resolves once no signal is held.
    pub(crate) fn released(&self) -> Released {
        Released {
            state: self.state.clone(),
        }
    }
}

/// Resolves to the first value passed to `stop`: what [`Spawner::stopped`](crate::Spawner::stopped) returns. (Named `Signal` before the OS signals of [`Signal`](crate::Signal) came.)
pub struct Stopped {
    state: Arc<Mutex<State>>,
    id: u64,
}

impl Clone for Stopped {
    fn clone(&self) -> Self {
        let mut state = self.state.lock();
        state.held += 1;
        state.next_id += 1;
        Stopped {
            state: self.state.clone(),
            id: state.next_id,
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let stoppers = {
            let mut state = self.state.lock();
            state.held -= 1;
            let id = self.id;
            state.signals.retain(|(signal, _)| *signal != id);
            if state.held == 0 {
                std::mem::take(&mut state.stoppers)
            } else {
                Vec::new()
            }
        };
        for waker in stoppers {
            waker.wake();
        }
    }
}

impl Future for Stopped {
    type Output = i32;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<i32> {
        let mut state = self.state.lock();
        if let Some(value) = state.value {
            return Poll::Ready(value);
        }
        let id = self.id;
        match state.signals.iter_mut().find(|(signal, _)| *signal == id) {
            Some((_, waker)) => waker.clone_from(cx.waker()),
            None => state.signals.push((id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl std::fmt::Debug for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `try_lock`: Debug never waits, and never deadlocks on a lock its own thread holds.
        let mut debug = f.debug_struct("Stopped");
        match self.state.try_lock() {
            Some(state) => debug.field("value", &state.value).finish(),
            None => debug.finish_non_exhaustive(),
        }
    }
}

/// Resolves once no signal is held.
pub(crate) struct Released {
    state: Arc<Mutex<State>>,
}

impl Future for Released {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let mut state = self.state.lock();
        if state.held == 0 {
            return Poll::Ready(());
        }
        state.stoppers.push(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A stop signal's `Debug` shows its value, and does not wait for (nor deadlock on) the state
    /// lock held by its own thread: it shows `..` instead.
    #[test]
    fn debug_shows_the_value_and_never_waits_for_the_lock() {
        let stopper = Stopper::default();
        let signal = stopper.signal();
        stopper.stop(3);
        assert_eq!(format!("{signal:?}"), "Stopped { value: Some(3) }");
        let _held = stopper.state.lock();
        assert_eq!(format!("{signal:?}"), "Stopped { .. }");
    }
}
