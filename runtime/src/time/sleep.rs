//! [`Sleep`]: a future that completes at a deadline, registered on the timer table of the
//! worker that first polls it.
//!
//! A sleep whose deadline has already passed completes without registering. A registered
//! sleep may be polled on any thread: it leaves its waker in the shared entry. When the owning
//! worker closes before the deadline, the sleep cannot complete any more, and polling it
//! panics with "io_uring sleep polled after its worker closed".

use super::timers::{CANCELLED, CLOSED, Entry, FIRED, Key};
use crate::worker::Local;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

const CLOSED_MESSAGE: &str = "io_uring sleep polled after its worker closed";

struct Registration {
    entry: Arc<Entry>,
    key: Key,
    /// Id of the worker whose table holds the entry.
    owner: u64,
}

/// A future that completes once its deadline has passed.
pub struct Sleep {
    deadline: Instant,
    registration: Option<Registration>,
}

impl Sleep {
    /// A sleep of `duration` from now.
    pub fn new(duration: Duration) -> Self {
        Self::until(Instant::now() + duration)
    }

    /// A sleep until `deadline`.
    pub fn until(deadline: Instant) -> Self {
        Self {
            deadline,
            registration: None,
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(registration) = &self.registration {
            let entry = &registration.entry;
            entry.waker.register(cx.waker());
            return match entry.state.load(Ordering::Acquire) {
                FIRED => Poll::Ready(()),
                CLOSED => panic!("{CLOSED_MESSAGE}"),
                _ => Poll::Pending,
            };
        }
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        let registered = Local::with_current(|local| {
            if local.is_closing() {
                return None;
            }
            let mut state = local.state.borrow_mut();
            if state.timers.is_closed() {
                return None;
            }
            let entry = Arc::new(Entry::default());
            entry.waker.register(cx.waker());
            let key = state.timers.insert(deadline, entry.clone());
            Some(Registration {
                entry,
                key,
                owner: local.id(),
            })
        });
        match registered {
            Some(Some(registration)) => {
                self.registration = Some(registration);
                Poll::Pending
            }
            Some(None) => panic!("{CLOSED_MESSAGE}"),
            None => panic!("a runtime Sleep must be polled on a runtime worker thread"),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        let Some(Registration { entry, key, owner }) = self.registration.take() else {
            return;
        };
        // On the owner's thread (and outside its borrow) the entry leaves the table at once;
        // anywhere else the table discards it when its deadline comes.
        let removed = Local::with_current(|current| {
            if current.id() != owner {
                return false;
            }
            match current.state.try_borrow_mut() {
                Ok(mut state) => {
                    state.timers.remove(&key);
                    true
                }
                Err(_) => false,
            }
        })
        .unwrap_or(false);
        if !removed {
            entry.state.store(CANCELLED, Ordering::Release);
        }
    }
}
