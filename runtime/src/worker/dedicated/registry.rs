//! The registry of dedicated and blocking workers: a count of leases that shutdown closes and
//! waits on, and the blocking threads parked between tasks.
//!
//! Invariants:
//! - A lease ([`Lease`]) is taken before a dedicated task's factory runs and released only
//!   after its worker has finished all cleanup, so `wait` returning means no dedicated worker
//!   holds anything of the runner any more.
//! - `reserve` after `close` returns `None` and counts nothing; leases taken before `close`
//!   stay counted until dropped.
//! - The lock is never held while user code runs (factories, destructors).
//! - A parked blocking thread holds no lease and nothing of the runner but this registry (and
//!   its own drained ring). A thread is in `parked` exactly while no task has been handed to
//!   it: whoever removes it from the list, under the lock, decides what it does next (a
//!   spawner hands it a task, `close` or its own keep-alive timeout tells it to exit), so a
//!   task handed over is never lost to a thread that is leaving.

use super::Launch;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a blocking thread waits for another blocking task before it exits (tokio's
/// blocking pool waits as long).
const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The registry's counters.
pub struct State {
    /// Leases outstanding.
    pub active: usize,
    /// Whether new leases are refused.
    pub closed: bool,
    /// Blocking threads waiting for a task, the most recently parked last.
    parked: Vec<Arc<Parked>>,
    /// Blocking threads parked or leaving after their last park; `wait` waits for them too.
    idle_threads: usize,
    /// How long a parked blocking thread waits for a task before it exits.
    keep_alive: Duration,
    /// Threads blocked in `wait`, so a test can tell that shutdown is waiting.
    #[cfg(test)]
    pub(crate) waiters: usize,
}

impl Default for State {
    fn default() -> Self {
        Self {
            active: 0,
            closed: false,
            parked: Vec::new(),
            idle_threads: 0,
            keep_alive: BLOCKING_KEEP_ALIVE,
            #[cfg(test)]
            waiters: 0,
        }
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("active", &self.active)
            .field("closed", &self.closed)
            .field("parked", &self.parked.len())
            .finish()
    }
}

/// The dedicated and blocking worker registry.
#[derive(Default)]
pub struct ThreadRegistry {
    /// The counters (non-poisoning lock).
    pub state: Mutex<State>,
    released: Condvar,
}

/// A lease on the registry; released on drop.
pub struct Lease(pub Arc<ThreadRegistry>);

/// What a parked blocking thread is told.
enum Handoff {
    Waiting,
    Run(Box<Launch>),
    Exit,
}

/// A parked blocking thread's mailbox.
struct Parked {
    handoff: Mutex<Handoff>,
    changed: Condvar,
}

impl Parked {
    fn tell(&self, handoff: Handoff) {
        *self.handoff.lock() = handoff;
        self.changed.notify_one();
    }
}

impl ThreadRegistry {
    /// Takes a lease unless the registry is closed.
    pub fn reserve(self: &Arc<Self>) -> Option<Lease> {
        let mut state = self.state.lock();
        if state.closed {
            return None;
        }
        state.active += 1;
        Some(Lease(self.clone()))
    }

    /// Refuses every later lease and tells parked blocking threads to exit.
    pub fn close(&self) {
        let parked = {
            let mut state = self.state.lock();
            state.closed = true;
            std::mem::take(&mut state.parked)
        };
        for thread in parked {
            thread.tell(Handoff::Exit);
        }
    }

    /// Blocks until every lease is released and every parked blocking thread has left.
    pub fn wait(&self) {
        let mut state = self.state.lock();
        #[cfg(test)]
        {
            state.waiters += 1;
        }
        while state.active > 0 || state.idle_threads > 0 {
            self.released.wait(&mut state);
        }
        #[cfg(test)]
        {
            state.waiters -= 1;
        }
    }

    /// Hands `launch` to the most recently parked blocking thread (its ring and caches are
    /// the warmest), or gives it back if none is parked.
    pub(crate) fn hand_to_parked(&self, launch: Launch) -> Result<(), Launch> {
        let parked = self.state.lock().parked.pop();
        match parked {
            Some(thread) => {
                thread.tell(Handoff::Run(Box::new(launch)));
                Ok(())
            }
            None => Err(launch),
        }
    }

    /// Parks the calling blocking thread until a spawner hands it a task, or until the
    /// keep-alive passes or the registry closes (`None`: the thread should exit, and then
    /// call [`ThreadRegistry::left`]).
    pub(crate) fn park(&self) -> Option<Launch> {
        let me = Arc::new(Parked {
            handoff: Mutex::new(Handoff::Waiting),
            changed: Condvar::new(),
        });
        let deadline = {
            let mut state = self.state.lock();
            state.idle_threads += 1;
            if state.closed {
                return None;
            }
            state.parked.push(me.clone());
            Instant::now() + state.keep_alive
        };
        let mut handoff = me.handoff.lock();
        let mut leaving = false;
        loop {
            match std::mem::replace(&mut *handoff, Handoff::Waiting) {
                Handoff::Run(launch) => {
                    drop(handoff);
                    self.state.lock().idle_threads -= 1;
                    return Some(*launch);
                }
                Handoff::Exit => return None,
                Handoff::Waiting => {}
            }
            if leaving {
                // A spawner removed us from the list before our timeout could: its task is
                // on its way.
                me.changed.wait(&mut handoff);
            } else if me.changed.wait_until(&mut handoff, deadline).timed_out() {
                drop(handoff);
                let mut state = self.state.lock();
                if let Some(at) = state.parked.iter().position(|p| Arc::ptr_eq(p, &me)) {
                    state.parked.swap_remove(at);
                    return None;
                }
                drop(state);
                leaving = true;
                handoff = me.handoff.lock();
            }
        }
    }

    /// Called by a blocking thread that [`park`](Self::park) told to exit, once it has
    /// dropped its ring: `wait` stops waiting for it.
    pub(crate) fn left(&self) {
        let mut state = self.state.lock();
        state.idle_threads -= 1;
        if state.active == 0 && state.idle_threads == 0 {
            self.released.notify_all();
        }
    }
}

#[cfg(test)]
impl ThreadRegistry {
    /// Blocking threads parked now.
    pub(crate) fn parked_threads(&self) -> usize {
        self.state.lock().parked.len()
    }

    /// Blocking threads parked or leaving.
    pub(crate) fn idle_threads(&self) -> usize {
        self.state.lock().idle_threads
    }

    /// Sets how long blocking threads parked from now on wait for a task.
    pub(crate) fn set_keep_alive(&self, keep_alive: Duration) {
        self.state.lock().keep_alive = keep_alive;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.active -= 1;
        if state.active == 0 && state.idle_threads == 0 {
            self.0.released.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lease_taken_before_close_stays_counted_until_released() {
        const TIMEOUT: Duration = Duration::from_secs(10);
        let workers = Arc::new(ThreadRegistry::default());
        // The lease is taken on a thread of its own, as a dedicated worker takes it.
        let (reserved, reservation) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = {
            let workers = workers.clone();
            std::thread::spawn(move || {
                let lease = workers.reserve().expect("open registry");
                reserved.send(()).unwrap();
                released.recv_timeout(TIMEOUT).unwrap();
                drop(lease);
            })
        };
        reservation.recv_timeout(TIMEOUT).unwrap();
        workers.close();
        assert_eq!(workers.state.lock().active, 1);
        assert!(workers.reserve().is_none());
        let (finished, completion) = std::sync::mpsc::channel();
        let waiter = {
            let workers = workers.clone();
            std::thread::spawn(move || {
                workers.wait();
                finished.send(()).unwrap();
            })
        };
        // The waiter is blocked in `wait`, not merely not yet started.
        let deadline = Instant::now() + TIMEOUT;
        while workers.state.lock().waiters == 0 {
            assert!(Instant::now() < deadline, "the waiter must reach wait");
            std::thread::yield_now();
        }
        assert!(
            completion.try_recv().is_err(),
            "wait blocks while a lease is out"
        );
        release.send(()).unwrap();
        // Bounded: a release that never wakes the waiter fails instead of hanging.
        completion
            .recv_timeout(TIMEOUT)
            .expect("wait returns once the lease is released");
        holder.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(workers.state.lock().active, 0);
    }

    #[test]
    fn reserve_after_close_counts_nothing() {
        let workers = Arc::new(ThreadRegistry::default());
        workers.close();
        assert!(workers.reserve().is_none());
        assert_eq!(workers.state.lock().active, 0);
        workers.wait();
    }
}
