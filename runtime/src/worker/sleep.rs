//! [`Sleep`]: a future that completes at a deadline, registered on the timer table of the
//! worker that first polls it.
//!
//! A sleep whose deadline has already passed completes without registering; one whose deadline
//! lies past what an `Instant` can represent (`Duration::MAX`, say) never completes and never
//! registers, as a deadline of "never" should. A registered
//! sleep may be polled on any thread: it leaves its waker in the shared entry. When the owning
//! worker closes before the deadline, the sleep cannot complete any more, and polling it
//! panics with "io_uring sleep polled after its worker closed".

use super::Local;
use crate::time::timers::{CLOSED, Cancellations, Entry, FIRED, Key};
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
    /// The owner's count of remote cancellations, for a drop elsewhere.
    cancellations: Cancellations,
    /// Id of the worker whose table holds the entry.
    owner: u64,
}

/// A future that completes once its deadline has passed.
pub struct Sleep {
    /// `None`: never (the deadline is past what an `Instant` represents).
    deadline: Option<Instant>,
    registration: Option<Registration>,
}

impl Sleep {
    /// A sleep of `duration` from now; one that ends past the representable range of time
    /// (`Duration::MAX`, say) never ends.
    pub fn new(duration: Duration) -> Self {
        Self {
            deadline: crate::time::clock::now().checked_add(duration),
            registration: None,
        }
    }
}

impl std::fmt::Debug for Sleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("registered", &self.registration.is_some())
            .finish_non_exhaustive()
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
        let Some(deadline) = self.deadline else {
            // Never: nothing will wake this sleep, so nothing is registered.
            return Poll::Pending;
        };
        if crate::time::clock::now() >= deadline {
            return Poll::Ready(());
        }
        let registered = Local::with_current(|local| {
            local.with_open_timers(|timers| {
                let entry = Arc::new(Entry::default());
                entry.waker.register(cx.waker());
                let key = timers.insert(deadline, entry.clone());
                Registration {
                    entry,
                    key,
                    cancellations: timers.cancellations().clone(),
                    owner: local.id(),
                }
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
        let Some(Registration {
            entry,
            key,
            cancellations,
            owner,
        }) = self.registration.take()
        else {
            return;
        };
        // On the owner's thread (and outside its borrow) the entry leaves the table at once;
        // anywhere else it is cancelled for the owner to sweep (see `timers`).
        let removed = Local::with_current(|current| {
            if current.id() != owner {
                return false;
            }
            current
                .try_with_timers(|timers| timers.remove(&key))
                .is_some()
        })
        .unwrap_or(false);
        if !removed {
            entry.cancel(&cancellations);
        }
    }
}
