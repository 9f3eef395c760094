//! A worker's mailbox: messages other threads send it, and its wake state.
//!
//! Invariants:
//! - A message is pushed under the lock and the worker is woken after, so a worker that takes
//!   the mailbox after a wake sees every message sent before that wake.
//! - `pending` is set with every push and cleared with every take, so the worker's check
//!   "anything to read?" is one atomic load.
//! - Once the worker has stopped ([`Mailbox::close`]), `send` refuses and hands the message
//!   back: nobody would read it.

use super::wake::WakeState;
use crate::sync::Mutex;
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

#[derive(Default)]
struct Messages {
    queue: Vec<Message>,
    closed: bool,
}

/// A worker's mailbox.
pub struct Mailbox {
    messages: Mutex<Messages>,
    pending: AtomicBool,
    /// The worker's wake-state word.
    pub waker: WakeState,
}

impl Mailbox {
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Self {
            messages: Mutex::new(Messages::default()),
            pending: AtomicBool::new(false),
            waker: WakeState::new()?,
        })
    }

    /// Queues `message` and wakes the worker, or hands the message back if the worker has
    /// stopped.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn send(&self, message: Message) -> Result<(), Message> {
        {
            let mut messages = self.messages.lock();
            if messages.closed {
                return Err(message);
            }
            messages.queue.push(message);
            self.pending.store(true, Ordering::SeqCst);
        }
        self.waker.wake();
        Ok(())
    }

    /// Refuses every later message; what is queued is dropped.
    pub(crate) fn close(&self) {
        let mut messages = self.messages.lock();
        messages.closed = true;
        messages.queue.clear();
        self.pending.store(false, Ordering::SeqCst);
    }

    /// Whether a message waits.
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Moves up to [`BATCH_SIZE`] messages into `out`, oldest first.
    pub(crate) fn take(&self, out: &mut Vec<Message>) {
        let mut messages = self.messages.lock();
        let count = messages.queue.len().min(BATCH_SIZE);
        out.extend(messages.queue.drain(..count));
        self.pending
            .store(!messages.queue.is_empty(), Ordering::SeqCst);
    }
}
