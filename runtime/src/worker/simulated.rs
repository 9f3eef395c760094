//! The loop of a deterministic run: worker zero alone, on the caller's thread, with no ring.
//!
//! Each round, as commonware's deterministic runtime does it: fire the timers that are due
//! (virtual time) and run their wakes; take every runnable queued (the worker's own queue,
//! then the global queue) and the root if it was woken; shuffle them with the run's generator;
//! poll each once, in that order; advance virtual time by one cycle. A task woken during the
//! round runs in the next one, so a task that wakes itself cannot starve the others. When
//! nothing is ready, time jumps to the earliest deadline; with none left, the run has stalled
//! (every task waits for something nothing will do) and fails saying so.
//!
//! Invariants:
//! - Every decision that orders polls is drawn from the run's generator, and every round
//!   records what it took and the order it chose in the auditor: two runs of one seed poll the
//!   same tasks in the same order at the same virtual times.
//! - A task's panic (when panics are not caught) or a callback's fails the run at once, after
//!   the poll that raised it, before any other task is polled.
//! - Virtual time never passes the run's limit: past it the run fails with a timeout.

use super::{RootWake, push_local, run_deferred, service};
use crate::simulation::Simulation;
use crate::supervision::TaskNode;
use crate::task::{Polled, Runnable};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// How a deterministic run paces and bounds virtual time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    /// Virtual time added after every scheduling round.
    pub(crate) cycle: Duration,
    /// The virtual time past which the run fails with a timeout.
    pub(crate) limit: Duration,
}

/// One entry of a round: a task's runnable or the root.
enum Ready {
    Task(u64, Runnable),
    Root,
}

impl super::Worker {
    /// Runs the deterministic loop with `root` until it completes (see the module). The
    /// worker leaves the pool however it ends, as [`block_on`](Self::block_on) does.
    pub(crate) fn block_on_simulated<S: 'static, F: Future>(
        &mut self,
        root: Pin<&mut F>,
        wake: &Arc<RootWake>,
        simulation: &Simulation,
        pace: Pace,
    ) -> F::Output {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.drive_simulated::<S, F>(root, wake, simulation, pace)
        }));
        self.local.leave_pool();
        outcome.unwrap_or_else(|payload| std::panic::resume_unwind(payload))
    }

    fn drive_simulated<S: 'static, F: Future>(
        &mut self,
        mut root: Pin<&mut F>,
        wake: &Arc<RootWake>,
        simulation: &Simulation,
        pace: Pace,
    ) -> F::Output {
        let waker = Waker::from(wake.clone());
        let mut cx = Context::from_waker(&waker);
        self.shared.panicker.set_root_waker(Some(waker.clone()));
        let mut round: Vec<Ready> = Vec::new();
        loop {
            self.fire_timers(simulation);
            self.take_ready::<S>(&mut round, wake);
            if round.is_empty() {
                self.skip_idle_time(simulation, pace);
                continue;
            }
            let mut ids = Vec::with_capacity(round.len() * 8);
            for ready in &round {
                let id = match ready {
                    Ready::Task(id, _) => *id,
                    Ready::Root => 0,
                };
                ids.extend_from_slice(&id.to_le_bytes());
            }
            simulation.record("ready", &[&ids]);
            simulation.draw("shuffle", |rng| rng.shuffle(&mut round));
            let mut order = round.drain(..);
            while let Some(ready) = order.next() {
                match ready {
                    Ready::Root => {
                        simulation.record("poll", &[&0u64.to_le_bytes()]);
                        if let Poll::Ready(output) = root.as_mut().poll(&mut cx) {
                            // The rest of the round is discarded, in order; shutdown drops
                            // their tasks.
                            drop(order);
                            return output;
                        }
                    }
                    Ready::Task(id, runnable) => {
                        simulation.record("poll", &[&id.to_le_bytes()]);
                        match runnable.run() {
                            Polled::Done(task) => self.shared.tasks.remove(&task),
                            Polled::Requeue(runnable) => push_local(self.pool(), 0, runnable),
                            Polled::Idle | Polled::Stale => {}
                        }
                    }
                }
                self.fail_on_failure();
            }
            drop(order);
            simulation.advance(pace.cycle);
            check_limit(simulation, pace);
        }
    }

    /// Fires the timers due at the virtual now and runs their wakes (and any other deferred
    /// callback), recording how many fired.
    fn fire_timers(&mut self, simulation: &Simulation) {
        service(&self.local, true);
        let fired = self.local.state.borrow().deferred.wakes.len() as u64;
        if fired > 0 {
            simulation.record(
                "timers",
                &[
                    &fired.to_le_bytes(),
                    &(simulation.elapsed().as_nanos() as u64).to_le_bytes(),
                ],
            );
        }
        run_deferred(&self.local, &mut self.panics);
        if let Some(payload) = self.panics.take() {
            std::panic::resume_unwind(payload);
        }
        self.fail_on_failure();
    }

    /// Moves every queued runnable, and the root if woken, into `round`, each with its task's
    /// logical id.
    fn take_ready<S: 'static>(&mut self, round: &mut Vec<Ready>, wake: &RootWake) {
        let ready = |runnable: Runnable| {
            let id = runnable.owner::<TaskNode<S>>().simulated_id;
            Ready::Task(id, runnable)
        };
        // SAFETY: this thread is worker zero, the queue's only producer and consumer.
        while let Some(runnable) = unsafe { self.pool().queue(0).pop() } {
            round.push(ready(runnable));
        }
        self.pool()
            .global()
            .take_into(usize::MAX, |runnable| round.push(ready(runnable)));
        if wake.take() {
            round.push(Ready::Root);
        }
    }

    /// Nothing is ready: jumps virtual time to the earliest deadline, or fails the run as
    /// stalled when there is none.
    fn skip_idle_time(&mut self, simulation: &Simulation, pace: Pace) {
        let next = self.local.state.borrow_mut().next_deadline();
        let Some(deadline) = next else {
            panic!(
                "deterministic run stalled after {:?} of virtual time: every task waits and no \
                 timer is set, so nothing can ever run again (a deadlock, or a wait for \
                 something outside the simulation)",
                simulation.elapsed()
            );
        };
        simulation.advance_to(deadline);
        check_limit(simulation, pace);
    }

    /// Fails the run with the failure a task or callback published, if any.
    fn fail_on_failure(&mut self) {
        if self.shared.panicker.has_failure()
            && let Some(payload) = self.shared.panicker.take()
        {
            std::panic::resume_unwind(payload);
        }
    }
}

/// Fails the run once virtual time has passed its limit.
fn check_limit(simulation: &Simulation, pace: Pace) {
    let elapsed = simulation.elapsed();
    if elapsed > pace.limit {
        panic!(
            "deterministic run timed out: {elapsed:?} of virtual time passed its limit of {:?} \
             (a livelock, or a run longer than its `timeout`)",
            pace.limit
        );
    }
}
