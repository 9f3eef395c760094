//! A worker's mailbox: messages other threads send it, and its wake state.
//!
//! Invariants:
//! - A message is pushed under the lock and the worker is woken after, so a worker that takes
//!   the mailbox after a wake sees every message sent before that wake.
//! - `pending` is set with every push and cleared with every take, so the worker's check
//!   "anything to read?" is one atomic load.

use super::wake::WakeState;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Messages one thread sends a worker.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))] // sent by tests now, by forwarding workers later
pub enum Message {
    /// Poll the root again (it lives on worker zero; on other workers it only makes the worker
    /// go round its loop again).
    WakeRoot,
}

/// The most messages a worker takes in one turn.
pub const BATCH_SIZE: usize = 64;

/// A worker's mailbox.
pub struct Mailbox {
    messages: Mutex<Vec<Message>>,
    pending: AtomicBool,
    /// The worker's wake-state word.
    pub waker: WakeState,
}

impl Mailbox {
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Self {
            messages: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            waker: WakeState::new()?,
        })
    }

    /// Queues `message` and wakes the worker.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn send(&self, message: Message) {
        self.messages.lock().push(message);
        self.pending.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    /// Whether a message waits.
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Moves up to [`BATCH_SIZE`] messages into `out`, oldest first.
    pub(crate) fn take(&self, out: &mut Vec<Message>) {
        let mut messages = self.messages.lock();
        let count = messages.len().min(BATCH_SIZE);
        out.extend(messages.drain(..count));
        self.pending.store(!messages.is_empty(), Ordering::SeqCst);
    }
}
