//! Work an actor schedules on itself: timers (`Context::run_after`, `Context::run_every`)
//! and attached streams (`Context::attach`). Each arrives as a `Call`, a closure queued in
//! the actor's mailbox like any message and run on the actor by its loop.
//!
//! Invariants:
//! - A timer or attachment is a task spawned from the actor's runtime context, so it is
//!   aborted when the incarnation that made it ends (its future dropped at its next poll).
//!   It belongs to that incarnation: its calls carry the incarnation's token, cleared as the
//!   incarnation's loop stops taking messages, and a call runs only on the incarnation that
//!   made it while the token is set. A call still queued for a restarted actor's next
//!   incarnation, or sent by a task not yet dropped, does nothing.
//! - It holds the mailbox but is not a ref: before each send it takes a sender count only if
//!   the count is above zero (as `WeakRef::upgrade`), and drops it once the call is queued.
//!   An actor nobody else can reach ends, and its timers with it.
//! - An interval has at most one tick queued: `pending` is set when a tick is sent and
//!   cleared when it runs; a deadline that finds it set is skipped (missed ticks are not made
//!   up). A tick that finds the mailbox full waits for room, and no other tick is due while
//!   it waits.
//! - An attached stream is polled for its next item only once the previous one is queued:
//!   at most one item is taken ahead of room in the mailbox, so a full mailbox holds the
//!   producer back.

use crate::actor::call::Call;
use crate::mailbox::Mailbox;
use crate::{Actor, Context, Ref};
use futures::{Stream, StreamExt as _};
use runtime::Spawner as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A call of `schedule` that runs `call` on the actor unless the schedule was cancelled or
/// finished, or it is not the incarnation that made it, or that incarnation stopped taking
/// messages. Running the `last` one finishes the schedule (a one-shot timer's call, a
/// stream's end). Every call is checked here, once.
fn scheduled<A: Actor>(
    schedule: &Arc<Schedule>,
    last: bool,
    call: impl FnOnce(&mut A, &mut Context<A>) + Send + 'static,
) -> Call<A> {
    let schedule = schedule.clone();
    Call::new(move |actor: &mut A, ctx: &mut Context<A>| {
        if !ctx.is_incarnation(&schedule.incarnation)
            || !schedule.incarnation.load(Ordering::Acquire)
        {
            return;
        }
        let cancelled = if last {
            // Marks the schedule finished as it runs.
            schedule.cancelled.swap(true, Ordering::AcqRel)
        } else {
            schedule.cancelled.load(Ordering::Acquire)
        };
        if !cancelled {
            call(actor, ctx);
        }
    })
}

/// The state a timer or attachment shares with its calls.
struct Schedule {
    cancelled: AtomicBool,
    /// An interval's tick is queued and has not run yet.
    pending: AtomicBool,
    /// The token of the incarnation it belongs to.
    incarnation: Arc<AtomicBool>,
}

impl Schedule {
    /// Cancelled, finished, or its incarnation is over.
    fn is_over(&self) -> bool {
        self.cancelled.load(Ordering::Acquire) || !self.incarnation.load(Ordering::Acquire)
    }
}

/// Marks the schedule cancelled when the task's future is dropped (finished or aborted),
/// unless disarmed: a last call queued marks it when it runs.
struct CancelOnDrop {
    schedule: Arc<Schedule>,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.schedule.cancelled.store(true, Ordering::Release);
        }
    }
}

/// A handle on a timer or an attached stream. [`cancel`](Self::cancel) stops it; dropping
/// the handle leaves it running until the actor stops.
pub struct Timer {
    schedule: Arc<Schedule>,
    task: runtime::Handle<()>,
}

impl Timer {
    /// Stops it: no tick (or item) runs on the actor from now on, not even one already
    /// queued. Cancelling twice, or after it finished, does nothing.
    pub fn cancel(&self) {
        self.schedule.cancelled.store(true, Ordering::Release);
        self.task.abort();
    }

    /// Whether it was cancelled, or finished (a one-shot timer that ran, a stream whose end
    /// was handled, an actor whose incarnation that made it stopped taking messages).
    pub fn is_finished(&self) -> bool {
        self.schedule.is_over()
    }
}

/// The handle [`Context::attach`] returns: the same as a timer's.
pub type Attachment = Timer;

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Queues `call` unless its `schedule` is over or the actor is unreachable or gone; returns
/// whether it did. The ref it upgrades to lives only until the call is queued.
async fn deliver<A: Actor>(
    mailbox: &Arc<Mailbox<A::Message>>,
    schedule: &Schedule,
    call: Call<A>,
) -> bool {
    if schedule.is_over() {
        return false;
    }
    let Some(sender) = Ref::<A>::upgrade(mailbox) else {
        return false;
    };
    sender.send(A::__call(call)).await.is_ok()
}

/// The next deadline of an interval that started at `start`: the first multiple of `period`
/// after both `previous` and now (missed deadlines are skipped, not made up); `None` past
/// what an `Instant` holds (never).
fn next_deadline(
    start: Instant,
    previous: Instant,
    period: Duration,
    now: Instant,
) -> Option<Instant> {
    let next = previous.checked_add(period)?;
    if next > now {
        return Some(next);
    }
    let period_nanos = period.as_nanos();
    let into_period = now.duration_since(start).as_nanos() % period_nanos;
    let remaining = u64::try_from(period_nanos - into_period).ok()?;
    now.checked_add(Duration::from_nanos(remaining))
}

impl<A: Actor> Context<A> {
    /// Spawns `work` (given the schedule, its drop guard and the mailbox) as this
    /// incarnation's task, and returns its handle. `work` must move the guard into its
    /// future (`let guard = guard;`: a closure capturing only a field of it would drop the
    /// rest, and cancel the schedule, at once); made here, a refused spawn drops it too.
    fn schedule<F, Fut>(&self, work: F) -> Timer
    where
        F: FnOnce(Arc<Schedule>, CancelOnDrop, Arc<Mailbox<A::Message>>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let schedule = Arc::new(Schedule {
            cancelled: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            incarnation: self.incarnation().clone(),
        });
        let finished = CancelOnDrop {
            schedule: schedule.clone(),
            armed: true,
        };
        let (shared, mailbox) = (schedule.clone(), self.mailbox().clone());
        let task = self
            .runtime()
            .clone()
            .spawn(move |_| work(shared, finished, mailbox));
        Timer { schedule, task }
    }

    /// Runs `call` on this actor once, `delay` from now, in mailbox order (queued behind
    /// what is queued by then, waiting for room if the mailbox is full). Cancelled by the
    /// returned [`Timer`] or when the actor stops; it does not keep the actor alive.
    pub fn run_after(
        &self,
        delay: Duration,
        call: impl FnOnce(&mut A, &mut Context<A>) + Send + 'static,
    ) -> Timer {
        self.schedule(move |schedule, finished, mailbox| async move {
            let mut finished = finished;
            runtime::Sleep::new(delay).await;
            // Queued, the call marks the timer finished when it runs.
            finished.armed = !deliver(&mailbox, &schedule, scheduled(&schedule, true, call)).await;
        })
    }

    /// Runs `tick` on this actor every `period` (the first `period` from now), in mailbox
    /// order, until the returned [`Timer`] is cancelled or the actor stops; it does not keep
    /// the actor alive. At most one tick is ever queued: a tick that finds the mailbox full
    /// waits for room, and deadlines that pass while a tick is still queued are skipped.
    /// A zero `period` is taken as one millisecond.
    pub fn run_every(
        &self,
        period: Duration,
        tick: impl FnMut(&mut A, &mut Context<A>) + Send + 'static,
    ) -> Timer {
        let period = period.max(Duration::from_millis(1));
        let tick = Arc::new(crate::sync::Mutex::new(tick));
        self.schedule(move |schedule, finished, mailbox| async move {
            let _finished = finished;
            let start = runtime::clock::now();
            let Some(mut deadline) = start.checked_add(period) else {
                // A period past what an `Instant` holds never ends.
                return std::future::pending().await;
            };
            loop {
                runtime::Sleep::new(deadline.saturating_duration_since(runtime::clock::now()))
                    .await;
                if !schedule.pending.swap(true, Ordering::AcqRel) {
                    let (pending, tick) = (schedule.clone(), tick.clone());
                    let call = scheduled(&schedule, false, move |actor, ctx| {
                        pending.pending.store(false, Ordering::Release);
                        (tick.lock())(actor, ctx);
                    });
                    if !deliver(&mailbox, &schedule, call).await {
                        return;
                    }
                }
                match next_deadline(start, deadline, period, runtime::clock::now()) {
                    Some(next) => deadline = next,
                    None => return std::future::pending().await,
                }
            }
        })
    }

    /// Handles each item of `stream` on this actor with `on_item`, in mailbox order with its
    /// other messages, until the stream ends, the returned [`Timer`] is cancelled or the
    /// actor stops (which drops the stream). The stream is polled for its next item only
    /// once the previous one is queued, so a full mailbox holds the producer back (at most
    /// one item is taken ahead of room). Use [`attach_with_end`](Self::attach_with_end) to
    /// hear of the end.
    pub fn attach<S>(
        &self,
        stream: S,
        on_item: impl Fn(&mut A, &mut Context<A>, S::Item) + Send + Sync + 'static,
    ) -> Attachment
    where
        S: Stream + Send + 'static,
        S::Item: Send + 'static,
    {
        self.attach_with_end(stream, on_item, |_, _| {})
    }

    /// [`attach`](Self::attach), and `on_end` runs on the actor once, in mailbox order after
    /// the last item, when the stream ends (not when it is cancelled or the actor stops).
    pub fn attach_with_end<S>(
        &self,
        stream: S,
        on_item: impl Fn(&mut A, &mut Context<A>, S::Item) + Send + Sync + 'static,
        on_end: impl FnOnce(&mut A, &mut Context<A>) + Send + 'static,
    ) -> Attachment
    where
        S: Stream + Send + 'static,
        S::Item: Send + 'static,
    {
        let on_item = Arc::new(on_item);
        self.schedule(move |schedule, finished, mailbox| async move {
            let mut finished = finished;
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let on_item = on_item.clone();
                let call = scheduled(&schedule, false, move |actor, ctx| {
                    on_item(actor, ctx, item)
                });
                if !deliver(&mailbox, &schedule, call).await {
                    return;
                }
            }
            // Queued, the end call marks the attachment finished when it runs.
            finished.armed =
                !deliver(&mailbox, &schedule, scheduled(&schedule, true, on_end)).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_skips_the_deadlines_it_missed() {
        let start = Instant::now();
        let period = Duration::from_millis(10);
        let first = start + period;
        // On time: the next period.
        assert_eq!(
            next_deadline(start, first, period, first),
            Some(start + period * 2)
        );
        // 35 ms in: the deadlines at 20 and 30 ms are skipped.
        let late = start + Duration::from_millis(35);
        assert_eq!(
            next_deadline(start, first, period, late),
            Some(start + period * 4)
        );
        // A period past what an `Instant` holds: never.
        assert_eq!(next_deadline(start, first, Duration::MAX, late), None);
    }
}
