//! One io_uring ring per native worker: submission with a backlog beyond the ring's size,
//! completion reaping, the eventfd read that lets other threads interrupt a wait inside
//! `io_uring_enter`, and draining on close.
//!
//! Invariants:
//! - Every buffer and file descriptor an in-flight submission points at is owned by the
//!   driver's slot for it until its completion is reaped, so the kernel never writes into
//!   freed memory, whatever happened to the future that asked for it.
//! - The driver is only used from its worker's thread (`SINGLE_ISSUER`); completions become
//!   visible only when that thread enters the kernel (`DEFER_TASKRUN`).
//! - [`Driver::close`] cancels what can be cancelled and waits for every completion, so the
//!   ring is dropped with nothing in flight.
//! - Wakers are never called with the worker's state borrowed: completions push them to the
//!   caller's list, which the worker runs as deferred callbacks.
//! - The driver never blocks in the kernel while anything waits in the backlog: every wait
//!   (and the drain at close) first hands the kernel the whole backlog, so the eventfd read
//!   that lets another thread interrupt the wait, and the cancellations a drain waits for, are
//!   always submitted before the thread sleeps. No wait is bounded "just in case": a wait ends
//!   on a completion, the eventfd, or the caller's own timeout.
//! - An operation's `user_data` is its slot index with its generation (the low bits of its
//!   unique id) above it, so a cancellation names exactly one operation even if its slot is
//!   reused before the kernel sees the cancellation, and a completion that names no live
//!   operation is a bug: it fails a debug assertion and counts in
//!   `runtime_ring_unknown_completions_total`.
//! - A panic while one completion is handled loses no other: completions are taken off the
//!   ring into the driver's own queue and handled one at a time from there, and the operation
//!   whose handling panicked leaves its slot, so a later drain never waits for it.
//! - If the drain at close fails, everything the kernel may still write into is leaked, never
//!   freed, before the failure is reported.
//! - An operation with a deadline has exactly one entry in the timeout wheel while it is in
//!   flight: the entry goes when the operation is done, and an entry that expires first sends
//!   a cancellation, which the operation reports as `TimedOut`. The worker's waits end by the
//!   wheel's next deadline.
//! - Sends and writes are finished here, not by their futures: a short transfer is
//!   resubmitted for the rest under the same slot, so an observer-less write still completes.
//! - An operation whose future (or owner) is dropped before it is done is cancelled at once
//!   if it is cancellable (a send or a receive, say; never a write): its ring sends an
//!   `IORING_OP_ASYNC_CANCEL` naming its `user_data`, directly when the drop happens on the
//!   ring's thread, else through the ring's [`CancelInbox`], whose request wakes the ring's
//!   thread. Cancelling changes nothing about ownership: the operation keeps its slot, and so
//!   its buffers and descriptor, until the kernel posts its completion (`-ECANCELED`, or its
//!   result if it finished first); only then are they released, and with the descriptor's
//!   last owner gone, the socket closes.

mod cancels;
mod deadlines;
pub(crate) mod operation;
mod provided;
pub(crate) mod sockaddr;

use crate::slab::Slab;
pub(crate) use cancels::CancelInbox;
use deadlines::{Deadlines, Expired};
use io_uring::{IoUring, opcode, squeue, types};
use operation::{InFlight, Step};
use prometheus_client::metrics::counter::Counter;
use provided::ProvidedBuffers;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The closing flag of a worker: set once its cleanup has drained its ring. Whoever holds
/// results of that worker's registrations can tell whether they were observed in its life.
pub(crate) type RingClosed = std::sync::Arc<std::sync::atomic::AtomicBool>;

pub(crate) use operation::{Completion, Request, RequestOutput};

/// The `user_data` of the eventfd read. Its top bit is set, which no operation's is.
const EVENTFD_TOKEN: u64 = u64::MAX;
/// The `user_data` of cancellation requests, whose own completions carry nothing.
const CANCEL_TOKEN: u64 = u64::MAX - 1;
/// The bits of an operation's id kept as its generation in `user_data`: 31, so an operation's
/// `user_data` never has its top bit set and never equals the two tokens above.
const GENERATION_MASK: u64 = (1 << 31) - 1;

/// The `user_data` of the operation with `id` in slot `index`.
fn token(index: usize, id: u64) -> u64 {
    let index = u32::try_from(index).expect("fewer than 2^32 operations in flight on one ring");
    ((id & GENERATION_MASK) << 32) | u64::from(index)
}

/// The slot index and generation an operation's `user_data` names.
fn untoken(token: u64) -> (usize, u64) {
    ((token & u64::from(u32::MAX)) as usize, token >> 32)
}

/// The ring's metrics, shared by every worker of a runner.
#[derive(Clone, Default)]
pub(crate) struct RingMetrics {
    /// Operations in flight (submitted or in a backlog).
    pub(crate) pending_operations: crate::sharded::ShardedGauge,
    /// Completions whose `user_data` named no live operation (a bug; always zero).
    pub(crate) unknown_completions: Counter,
    /// Rings whose provided receive buffers the kernel refused.
    pub(crate) receive_buffers_refused: Counter,
}

/// A worker's ring.
pub struct Driver {
    ring: IoUring,
    /// The buffers multishot receives pick from, registered at the first such receive. The
    /// kernel writes into them only for a receive in flight: `close` drains every receive
    /// before the driver (and so this) is dropped, and `abandon` leaks them when it cannot.
    provided: Option<ProvidedBuffers>,
    /// How many provided buffers to register, and their size; a count of 0 means none (the
    /// configuration disabled them, or registering them failed once).
    provided_layout: (u16, u32),
    /// Operations in flight (submitted or waiting in the backlog), by `user_data`.
    operations: Slab<InFlight>,
    /// Submissions that did not fit in the submission queue yet, in order.
    backlog: VecDeque<squeue::Entry>,
    eventfd: RawFd,
    eventfd_armed: bool,
    eventfd_buffer: Box<u64>,
    metrics: RingMetrics,
    /// Deadlines of operations that time out (connects, sends, receives).
    deadlines: Deadlines,
    /// The id the next operation gets.
    next_id: u64,
    /// Completions taken off the ring and not handled yet (`user_data`, result, flags). A
    /// panic while one is handled leaves the rest here for the next reap.
    completions: VecDeque<(u64, i32, u32)>,
    /// Cancellations of dropped operations asked by other threads.
    cancels: std::sync::Arc<CancelInbox>,
    /// Scratch for the tokens taken from `cancels`.
    cancel_tokens: Vec<u64>,
    #[cfg(test)]
    pub(crate) fail_next_service: Option<&'static str>,
    /// Test hook: handling the completion of the operation in this slot panics (once).
    #[cfg(test)]
    pub(crate) panic_on_completion: Option<usize>,
    /// Test hook: every enter of the drain at close fails with this error.
    #[cfg(test)]
    pub(crate) fail_drain: Option<i32>,
    /// Blocking enters made while an entry was unsubmitted (see `note_blocking_enter`).
    #[cfg(test)]
    blocked_with_unsubmitted: usize,
    /// Test bookkeeping: entries resubmitted under the same slot (`Step::Again`).
    #[cfg(test)]
    pub(crate) resubmissions: usize,
}

impl Driver {
    /// Creates the ring with `config`'s size and provided-buffer layout. `eventfd` is the
    /// worker's wake eventfd, which must outlive the driver; `wheel` is the timeout wheel's tick
    /// and slot count.
    pub(crate) fn new(
        config: &crate::RingConfig,
        eventfd: RawFd,
        metrics: RingMetrics,
        wheel: (Duration, u64),
    ) -> io::Result<Self> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(config.size.saturating_mul(2).max(8))
            .build(config.size)
            .map_err(explain_setup_error)?;
        Ok(Self {
            ring,
            provided: None,
            provided_layout: (config.receive_buffers, config.receive_buffer_size),
            operations: Slab::default(),
            backlog: VecDeque::new(),
            eventfd,
            eventfd_armed: false,
            eventfd_buffer: Box::new(0),
            metrics,
            deadlines: Deadlines::new(wheel.0, wheel.1),
            next_id: 0,
            completions: VecDeque::new(),
            cancels: std::sync::Arc::new(CancelInbox::new(eventfd)),
            cancel_tokens: Vec::new(),
            #[cfg(test)]
            fail_next_service: None,
            #[cfg(test)]
            panic_on_completion: None,
            #[cfg(test)]
            fail_drain: None,
            #[cfg(test)]
            blocked_with_unsubmitted: 0,
            #[cfg(test)]
            resubmissions: 0,
        })
    }

    /// Whether completions wait to be reaped: posted already, or pending as deferred task
    /// work (which only an enter posts). Reads shared ring memory, no system call.
    pub(crate) fn has_completions(&mut self) -> bool {
        if !self.completions.is_empty() {
            return true;
        }
        if self.operations.is_empty() {
            return false;
        }
        self.ring.submission().taskrun() || !self.ring.completion().is_empty()
    }

    /// Number of operations in flight (submitted or waiting in the backlog).
    pub(crate) fn in_flight(&self) -> usize {
        self.operations.len()
    }

    /// Queues `in_flight`, which keeps its resources alive until it is done; with a
    /// `deadline`, it is cancelled (and fails with `TimedOut`) if it is not done by then.
    /// Returns its `user_data`, which names it to [`Driver::cancel_dropped`].
    pub(crate) fn submit(&mut self, mut in_flight: InFlight, deadline: Option<Instant>) -> u64 {
        self.next_id += 1;
        in_flight.id = self.next_id;
        let entry = in_flight.entry();
        let index = self.operations.insert(in_flight);
        if let Some(deadline) = deadline {
            let position = self.deadlines.insert(deadline, index, self.next_id);
            self.operations
                .get_mut(index)
                .expect("just inserted")
                .deadline = Some(position);
        }
        self.metrics.pending_operations.inc();
        let token = token(index, self.next_id);
        self.push(entry.user_data(token));
        token
    }

    /// The inbox through which other threads ask this ring to cancel dropped operations.
    pub(crate) fn cancel_inbox(&self) -> &std::sync::Arc<CancelInbox> {
        &self.cancels
    }

    /// Cancels the operation `token` names, whose future or owner was dropped: if it is still
    /// in flight, cancellable and not cancelled already, an `IORING_OP_ASYNC_CANCEL` naming it
    /// is queued. It keeps its slot (and everything the kernel points at) until its
    /// completion is reaped. A token of an operation that finished, or of an earlier occupant
    /// of a reused slot, names no live operation (the generation differs) and is ignored.
    pub(crate) fn cancel_dropped(&mut self, token: u64) {
        let (index, generation) = untoken(token);
        let Some(operation) = self
            .operations
            .get_mut(index)
            .filter(|operation| operation.id & GENERATION_MASK == generation)
        else {
            return;
        };
        if !operation.is_cancellable() || operation.cancelled {
            return;
        }
        operation.cancelled = true;
        operation.abandoned = true;
        self.push(
            opcode::AsyncCancel::new(token)
                .build()
                .user_data(CANCEL_TOKEN),
        );
    }

    /// Queues the cancellations other threads asked for since the last look.
    fn take_cancels(&mut self) {
        self.cancels.take(&mut self.cancel_tokens);
        let mut tokens = std::mem::take(&mut self.cancel_tokens);
        for token in tokens.drain(..) {
            self.cancel_dropped(token);
        }
        self.cancel_tokens = tokens;
    }

    /// Whether multishot receives can run here: registers the provided buffers at the first
    /// call. A ring whose configuration has none, or whose registration failed, answers every
    /// multishot receive with `ReceiveEnd::Unsupported`, and its streams receive one call at a
    /// time.
    pub(crate) fn has_provided_buffers(&mut self) -> bool {
        let (count, size) = self.provided_layout;
        if self.provided.is_none() && count > 0 {
            // SAFETY: the buffers are kept in `self.provided`, which is dropped only with the
            // driver, after `close` drained every operation (the `Drop` below), or leaked by
            // `abandon` when the drain fails.
            match unsafe { ProvidedBuffers::register(&self.ring, count, size) } {
                Ok(buffers) => self.provided = Some(buffers),
                // Not worth failing a receive over: one-call-at-a-time receives still work. The
                // metric says it happened (the pinned entry ring counts against the
                // locked-memory limit, for one).
                Err(_) => {
                    self.provided_layout.0 = 0;
                    self.metrics.receive_buffers_refused.inc();
                }
            }
        }
        self.provided.is_some()
    }

    /// When the earliest operation deadline comes due, if any.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.next_deadline()
    }

    /// Cancels every operation whose deadline has passed at `now`.
    pub(crate) fn expire(&mut self, now: Instant) {
        if self.deadlines.len() == 0 {
            return;
        }
        let (mut expired, mut moved) = (Vec::new(), Vec::new());
        self.deadlines.expire(now, &mut expired, &mut moved);
        for (token, position) in moved {
            if let Some(operation) = self.operations.get_mut(token) {
                operation.deadline = Some(position);
            }
        }
        for Expired { token, id } in expired {
            let Some(operation) = self.operations.get_mut(token) else {
                continue;
            };
            if operation.id != id {
                continue;
            }
            operation.deadline = None;
            if operation.abandoned {
                // Its cancellation is under way already: its future was dropped.
                continue;
            }
            operation.timed_out = true;
            operation.cancelled = true;
            self.push(
                opcode::AsyncCancel::new(self::token(token, id))
                    .build()
                    .user_data(CANCEL_TOKEN),
            );
        }
    }

    /// Forgets the deadline of the operation in slot `index`.
    fn clear_deadline(&mut self, index: usize) {
        let Some(position) = self
            .operations
            .get_mut(index)
            .and_then(|operation| operation.deadline.take())
        else {
            return;
        };
        if let Some(moved) = self.deadlines.remove(position)
            && let Some(operation) = self.operations.get_mut(moved)
        {
            operation.deadline = Some(position);
        }
    }

    fn push(&mut self, entry: squeue::Entry) {
        if !self.backlog.is_empty() {
            self.backlog.push_back(entry);
            return;
        }
        // SAFETY: every entry's memory is owned by its slot (module invariants) or is the
        // driver's own eventfd buffer, alive until the completion is reaped.
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.backlog.push_back(entry);
        }
    }

    fn flush_backlog(&mut self) {
        while let Some(entry) = self.backlog.front() {
            // SAFETY: as in `push`.
            if unsafe { self.ring.submission().push(entry) }.is_err() {
                break;
            }
            self.backlog.pop_front();
        }
    }

    /// Hands what is queued to the kernel now, without reaping: for a task that registered
    /// work and goes on computing, so the work runs meanwhile instead of at the worker's next
    /// service. A failure is left for that service to meet and report.
    pub(crate) fn submit_now(&mut self) {
        self.flush_backlog();
        let mut submission = self.ring.submission();
        submission.sync();
        let queued = !submission.is_empty();
        drop(submission);
        if queued {
            let _ = self.ring.submit();
        }
    }

    /// Hands the kernel every queued entry, the backlog included, entering it as often as the
    /// submission queue's size requires. Returns whether everything went in: it stops early
    /// when the kernel takes nothing more (`EBUSY`, `EAGAIN`, or no entry taken), and the
    /// caller must then not sleep (it reaps, or lets its caller service the ring, and comes
    /// back).
    fn submit_all(&mut self) -> io::Result<bool> {
        loop {
            self.flush_backlog();
            let queued = {
                let mut submission = self.ring.submission();
                submission.sync();
                submission.len()
            };
            if queued == 0 {
                debug_assert!(self.backlog.is_empty(), "the backlog fills an empty queue");
                return Ok(true);
            }
            match self.ring.submit() {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
                Err(error) if matches!(error.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {
                    return Ok(false);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Submits what is queued and reaps every completion, pushing the wakers to notify.
    pub(crate) fn service(&mut self, wakes: &mut Vec<Waker>) -> io::Result<()> {
        if self.operations.is_empty() && !self.eventfd_armed && self.completions.is_empty() {
            return Ok(());
        }
        self.take_cancels();
        self.flush_backlog();
        // Enter the kernel only when there is something to submit or deferred task work to
        // run (DEFER_TASKRUN posts completions only then); a quiet ring costs no syscall.
        let needs_enter = {
            let mut submission = self.ring.submission();
            submission.sync();
            !submission.is_empty() || submission.taskrun() || submission.cq_overflow()
        };
        if needs_enter {
            match self.ring.submit() {
                Ok(_) => {}
                Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {}
                Err(error) if error.raw_os_error() == Some(libc::EINTR) => {}
                Err(error) => return Err(error),
            }
        }
        let reaped = self.reap(wakes);
        #[cfg(test)]
        if reaped > 0
            && let Some(cause) = self.fail_next_service.take()
        {
            return Err(io::Error::other(cause));
        }
        let _ = reaped;
        Ok(())
    }

    /// Takes every completion off the ring and handles them in order (see the module
    /// invariants for a panic in between). Returns how many were handled.
    fn reap(&mut self, wakes: &mut Vec<Waker>) -> usize {
        let mut reaped = 0;
        // Taken off first, handled after: handling pushes submissions, which needs the ring.
        self.completions.extend(
            self.ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())),
        );
        while let Some((token, result, flags)) = self.completions.pop_front() {
            reaped += 1;
            match token {
                EVENTFD_TOKEN => self.eventfd_armed = false,
                CANCEL_TOKEN => {}
                token => self.complete(token, result, flags, wakes),
            }
        }
        if !self.backlog.is_empty() {
            self.flush_backlog();
        }
        reaped
    }

    /// Handles one operation's completion.
    fn complete(&mut self, token: u64, result: i32, flags: u32, wakes: &mut Vec<Waker>) {
        let (index, generation) = untoken(token);
        // A multishot receive's bytes: copied into its inbox, and the buffer given back before
        // anything else (an unknown operation, the test hook's panic), so no path loses one.
        let inbox_full = io_uring::cqueue::buffer_select(flags).is_some_and(|id| {
            let operation = self
                .operations
                .get(index)
                .filter(|operation| operation.id & GENERATION_MASK == generation);
            let buffers = self
                .provided
                .as_mut()
                .expect("a completion selects a buffer only from this ring's provided ones");
            let len = usize::try_from(result).unwrap_or(0);
            buffers.take(id, len, |bytes| match operation {
                Some(operation) if !bytes.is_empty() => operation.deliver(bytes, wakes),
                _ => false,
            })
        });
        let live = self
            .operations
            .get(index)
            .is_some_and(|operation| operation.id & GENERATION_MASK == generation);
        if !live {
            self.metrics.unknown_completions.inc();
            debug_assert!(
                false,
                "a completion (user_data {token:#x}, result {result}) names no live operation"
            );
            return;
        }
        // If handling panics, the operation leaves its slot all the same (its resources are
        // released: the kernel is done with them unless more completions follow), so a drain
        // never waits for a completion that was already taken off the ring.
        let more = io_uring::cqueue::more(flags);
        let mut guard = ForgetOnUnwind {
            driver: self,
            index,
            armed: !more,
        };
        #[cfg(test)]
        if guard.driver.panic_on_completion == Some(index) {
            guard.driver.panic_on_completion = None;
            panic!("test hook: handling the completion of slot {index} panics");
        }
        let driver = &mut *guard.driver;
        // A full inbox pauses a receive that goes on: cancelled, it ends as a pause.
        if inbox_full && more && driver.operations.get_mut(index).expect("live").pause() {
            driver.push(
                opcode::AsyncCancel::new(token)
                    .build()
                    .user_data(CANCEL_TOKEN),
            );
        }
        let operation = driver.operations.get_mut(index).expect("live");
        match operation.step(result, flags) {
            Step::More => {}
            Step::Again => {
                let entry = operation.entry().user_data(token);
                driver.push(entry);
                #[cfg(test)]
                {
                    driver.resubmissions += 1;
                }
            }
            Step::Done(output) => {
                driver.clear_deadline(index);
                let operation = driver.operations.remove_if(index, |_| true).expect("live");
                driver.metrics.pending_operations.dec();
                guard.armed = false;
                wakes.extend(operation.publish(output));
            }
        }
        guard.armed = false;
    }

    /// Waits inside `io_uring_enter` for a completion, a wake through `waker`'s eventfd, or
    /// `timeout` (none: no limit). Returns at once if `begin` says a wake is already pending.
    /// Everything queued, the backlog included, reaches the kernel before the thread sleeps.
    pub(crate) fn wait(
        &mut self,
        timeout: Option<Duration>,
        begin: impl FnOnce() -> bool,
        end: impl FnOnce(),
    ) -> io::Result<()> {
        self.arm_eventfd();
        // Asked before this look: submitted with the rest. Asked after it: the request's
        // eventfd write ends the wait (see `cancels`).
        self.take_cancels();
        let submitted = self.submit_all()?;
        // Completions taken off the ring but not handled (a handler panicked) end the wait
        // before it starts; so does anything the kernel did not take (it is out of memory or
        // holds completions to reap): the caller services the ring and comes back.
        if !self.completions.is_empty() || !submitted || !begin() {
            return Ok(());
        }
        #[cfg(test)]
        self.note_blocking_enter();
        let timespec = timeout.map(types::Timespec::from);
        let result = match &timespec {
            Some(timespec) => {
                let args = types::SubmitArgs::new().timespec(timespec);
                self.ring.submitter().submit_with_args(1, &args)
            }
            None => self.ring.submitter().submit_and_wait(1),
        };
        end();
        match result {
            Ok(_) => Ok(()),
            Err(error)
                if matches!(
                    error.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Queues the eventfd read that lets another thread end a wait, unless it is in flight.
    fn arm_eventfd(&mut self) {
        if self.eventfd_armed {
            return;
        }
        let entry = opcode::Read::new(
            types::Fd(self.eventfd),
            (&raw mut *self.eventfd_buffer).cast::<u8>(),
            std::mem::size_of::<u64>() as u32,
        )
        .build()
        .user_data(EVENTFD_TOKEN);
        self.eventfd_armed = true;
        self.push(entry);
    }

    /// Cancels every cancellable operation and the eventfd read, then waits until nothing is
    /// in flight. Durable work (writes) is left to complete.
    ///
    /// # Panics
    /// If the kernel refuses the drain: everything the kernel may still write into is leaked
    /// first (see [`Driver::abandon`]), so dropping the driver afterwards is sound.
    pub(crate) fn close(&mut self, wakes: &mut Vec<Waker>) {
        let cancellable: Vec<u64> = self
            .operations
            .iter()
            .filter(|(_, operation)| operation.is_cancellable())
            .map(|(index, operation)| token(index, operation.id))
            .collect();
        for &token in &cancellable {
            if let Some(operation) = self.operations.get_mut(untoken(token).0) {
                operation.cancelled = true;
            }
        }
        for token in cancellable {
            self.push(
                opcode::AsyncCancel::new(token)
                    .build()
                    .user_data(CANCEL_TOKEN),
            );
        }
        if self.eventfd_armed {
            self.push(
                opcode::AsyncCancel::new(EVENTFD_TOKEN)
                    .build()
                    .user_data(CANCEL_TOKEN),
            );
        }
        // A panic while a completion is handled (a bug, or the debug assertion) must not free
        // what the kernel may still write into on the way out: leak it first.
        let drained = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.drain(wakes)));
        if let Err(payload) = drained {
            self.abandon();
            std::panic::resume_unwind(payload);
        }
    }

    /// The loop of [`Driver::close`]: submits, waits and reaps until nothing is in flight.
    fn drain(&mut self, wakes: &mut Vec<Waker>) {
        while !self.operations.is_empty() || self.eventfd_armed || !self.backlog.is_empty() {
            // Completions already taken off the ring are handled before any wait: the kernel
            // may have nothing more to post for them.
            if !self.completions.is_empty() {
                self.reap(wakes);
                continue;
            }
            // Everything goes in before the wait: a cancellation left in the backlog behind
            // the entry it cancels would never be submitted while this thread sleeps. If the
            // kernel took less (it is out of memory, or holds completions to reap), reap and
            // try again instead of sleeping.
            let waited = self.submit_all().and_then(|submitted| {
                if submitted {
                    self.drain_enter().map(drop)
                } else {
                    Ok(())
                }
            });
            match waited {
                Ok(()) => {}
                Err(error)
                    if matches!(
                        error.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                    ) => {}
                Err(error) => {
                    let abandoned = self.abandon();
                    panic!(
                        "io_uring driver could not drain its ring ({error}); the memory of its \
                         {abandoned} unfinished operations is leaked so that the kernel never \
                         writes into freed memory"
                    );
                }
            }
            self.reap(wakes);
        }
    }

    /// One blocking enter of the drain: waits for at least one completion.
    fn drain_enter(&mut self) -> io::Result<usize> {
        #[cfg(test)]
        if let Some(errno) = self.fail_drain {
            return Err(io::Error::from_raw_os_error(errno));
        }
        #[cfg(test)]
        self.note_blocking_enter();
        self.ring.submitter().submit_and_wait(1)
    }

    /// Whether entries wait in the backlog or the submission queue, unseen by the kernel.
    #[cfg(test)]
    fn holds_unsubmitted(&mut self) -> bool {
        if !self.backlog.is_empty() {
            return true;
        }
        let mut submission = self.ring.submission();
        submission.sync();
        !submission.is_empty()
    }

    /// Test bookkeeping: counts blocking enters made while an entry was still unsubmitted,
    /// which the module invariants forbid (tests assert the count stays zero).
    #[cfg(test)]
    fn note_blocking_enter(&mut self) {
        if self.holds_unsubmitted() {
            self.blocked_with_unsubmitted += 1;
        }
    }

    /// Leaks every resource the kernel may still use (the operations' buffers, descriptors and
    /// addresses, and the eventfd buffer), so that nothing it writes lands in freed memory, and
    /// leaves the driver with nothing in flight. Returns how many operations were abandoned.
    fn abandon(&mut self) -> usize {
        let operations = std::mem::take(&mut self.operations);
        let abandoned = operations.len();
        std::mem::forget(operations);
        std::mem::forget(std::mem::replace(&mut self.eventfd_buffer, Box::new(0)));
        std::mem::forget(self.provided.take());
        self.provided_layout.0 = 0;
        self.eventfd_armed = false;
        // The entries themselves are plain data; what they point at was leaked above.
        self.backlog.clear();
        self.completions.clear();
        abandoned
    }
}

/// Removes an operation from its slot if the handling of its completion unwinds (see
/// [`Driver::complete`]).
struct ForgetOnUnwind<'a> {
    driver: &'a mut Driver,
    index: usize,
    armed: bool,
}

impl Drop for ForgetOnUnwind<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.driver.clear_deadline(self.index);
        if self
            .driver
            .operations
            .remove_if(self.index, |_| true)
            .is_some()
        {
            self.driver.metrics.pending_operations.dec();
        }
    }
}

impl AsRawFd for Driver {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // From here on no thread writes the worker's eventfd for this ring, which may close
        // once the ring is gone. Whatever is still in flight is cancelled by the close below.
        self.cancels.close();
        if !self.operations.is_empty() || self.eventfd_armed {
            // Never free buffers the kernel may still write: finish everything first. The
            // wakers are dropped here; the worker normally closes the driver itself, with its
            // callbacks, before this runs.
            let mut wakes = Vec::new();
            self.close(&mut wakes);
            drop(wakes);
        }
    }
}

/// Turns a ring setup failure into an error that says what is wrong and how to fix it.
fn explain_setup_error(error: io::Error) -> io::Error {
    let hint = match error.raw_os_error() {
        Some(libc::ENOSYS) => {
            "the kernel has no io_uring (it needs Linux 6.1 or newer built with CONFIG_IO_URING)"
        }
        Some(libc::EPERM) => {
            "io_uring is disabled or filtered: check `sysctl kernel.io_uring_disabled` (set it to \
             0) and any seccomp profile of the container (allow io_uring_setup, io_uring_enter \
             and io_uring_register)"
        }
        Some(libc::EINVAL) => {
            "the kernel rejected SINGLE_ISSUER | DEFER_TASKRUN: it needs Linux 6.1 or newer"
        }
        Some(libc::ENOMEM) => {
            "the ring could not be allocated: lower RingConfig::size or raise the locked-memory \
             limit (ulimit -l)"
        }
        Some(libc::EMFILE | libc::ENFILE) => "too many open files: raise the limit (ulimit -n)",
        _ => "see io_uring_setup(2)",
    };
    io::Error::new(error.kind(), format!("{error}; {hint}"))
}

#[cfg(test)]
mod tests {
    mod multishot;

    use super::*;
    use crate::buffer::IoBufs;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::task::Poll;

    /// Far longer than any of these tests takes: a bound on waits that must make progress, so
    /// a regression fails the test instead of hanging it.
    const PROGRESS: Duration = Duration::from_secs(10);

    /// A non-blocking eventfd, as a worker's wake state has.
    pub(super) fn eventfd() -> OwnedFd {
        // SAFETY: no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(fd >= 0, "eventfd: {}", io::Error::last_os_error());
        // SAFETY: a fresh descriptor nobody else owns.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// A pipe's read and write ends.
    fn pipe() -> (Arc<OwnedFd>, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors; the result is checked.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: fresh descriptors nobody else owns.
        unsafe {
            (
                Arc::new(OwnedFd::from_raw_fd(fds[0])),
                OwnedFd::from_raw_fd(fds[1]),
            )
        }
    }

    fn write_byte(fd: &OwnedFd) {
        // SAFETY: one byte from a live buffer to a live descriptor.
        assert_eq!(
            unsafe { libc::write(fd.as_raw_fd(), [7u8].as_ptr().cast(), 1) },
            1
        );
    }

    fn driver(size: u32, eventfd: &OwnedFd) -> Driver {
        Driver::new(
            &crate::RingConfig {
                size,
                ..Default::default()
            },
            eventfd.as_raw_fd(),
            RingMetrics::default(),
            (Duration::from_millis(10), 64),
        )
        .expect("a ring")
    }

    /// Whether the operation behind `shared` has finished (its output is taken).
    fn finished(shared: &operation::Completion) -> bool {
        output(shared).is_some()
    }

    /// The output of the operation behind `shared`, taken, if it has finished.
    fn output(shared: &operation::Completion) -> Option<RequestOutput> {
        match shared.poll(Waker::noop()) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        }
    }

    /// A wake from another thread while the worker sleeps in the ring ends the wait, even when
    /// the eventfd read that carries it sat behind idle reads in the backlog of a one-entry
    /// ring: the backlog is submitted whole before the thread blocks.
    #[test]
    fn a_wake_ends_a_wait_whose_eventfd_read_was_backlogged() {
        let wake = Arc::new(eventfd());
        let (entered, on_enter) = mpsc::channel::<()>();
        let waker = {
            let wake = wake.clone();
            std::thread::spawn(move || {
                on_enter.recv().expect("the wait begins");
                // SAFETY: eight bytes from a live buffer to the live eventfd.
                let written =
                    unsafe { libc::write(wake.as_raw_fd(), (&1u64 as *const u64).cast(), 8) };
                assert_eq!(written, 8);
            })
        };
        let (done, waited) = mpsc::channel();
        // The ring is used only by the thread that made it (SINGLE_ISSUER).
        let sleeper = std::thread::spawn(move || {
            let mut ring = driver(1, &wake);
            let (first, _first_writer) = pipe();
            let (second, _second_writer) = pipe();
            let _idle = [
                ring.register(Request::Read { fd: first, len: 1 }),
                ring.register(Request::Read { fd: second, len: 1 }),
            ];
            ring.wait(
                None,
                || {
                    entered.send(()).expect("the waker listens");
                    true
                },
                || {},
            )
            .expect("the wait succeeds");
            let _ = done.send(());
            let blocked = ring.blocked_with_unsubmitted;
            let mut wakes = Vec::new();
            ring.close(&mut wakes);
            (ring.in_flight(), blocked + ring.blocked_with_unsubmitted)
        });
        waited
            .recv_timeout(PROGRESS)
            .expect("the wake ended the wait: the eventfd read was submitted before it");
        waker.join().unwrap();
        let (left, blocked) = sleeper.join().unwrap();
        assert_eq!(left, 0);
        assert_eq!(
            blocked, 0,
            "no blocking enter with an entry still unsubmitted"
        );
    }

    /// `close` on a one-entry ring whose cancellations queue behind the eventfd read and two
    /// reads finishes: every cancellation is submitted before the drain blocks. With data
    /// waiting the reads finish with it or are cancelled; either way nothing is left.
    #[rstest::rstest]
    fn close_submits_cancellations_queued_behind_the_entries_they_cancel(
        #[values(false, true)] data_ready: bool,
    ) {
        let (done, closed) = mpsc::channel();
        std::thread::spawn(move || {
            let wake = eventfd();
            let mut ring = driver(1, &wake);
            let (first, first_writer) = pipe();
            let (second, second_writer) = pipe();
            if data_ready {
                write_byte(&first_writer);
                write_byte(&second_writer);
            }
            let reads = [
                ring.register(Request::Read { fd: first, len: 1 }),
                ring.register(Request::Read { fd: second, len: 1 }),
            ];
            // The eventfd read queues behind the reads, nothing submitted yet.
            ring.arm_eventfd();
            assert!(
                !ring.backlog.is_empty(),
                "a one-entry ring backlogs the rest"
            );
            let mut wakes = Vec::new();
            ring.close(&mut wakes);
            let all_finished = reads.iter().all(|read| finished(read));
            let _ = done.send((
                ring.in_flight(),
                all_finished,
                ring.blocked_with_unsubmitted,
            ));
        });
        let (left, all_finished, blocked) = closed
            .recv_timeout(PROGRESS)
            .expect("close finished: its cancellations were submitted before it blocked");
        assert_eq!(left, 0);
        assert!(all_finished, "every read was answered");
        assert_eq!(
            blocked, 0,
            "no blocking enter with an entry still unsubmitted"
        );
    }

    /// A panic while one completion is handled loses none of the others taken off the ring with
    /// it: they are handled by the next service, and the operation whose handling panicked
    /// leaves its slot, so the drain at close does not wait for it.
    #[test]
    fn a_panic_while_handling_a_completion_loses_no_other_completion() {
        let wake = eventfd();
        let mut ring = driver(8, &wake);
        let pipes: Vec<_> = (0..3).map(|_| pipe()).collect();
        let reads: Vec<_> = pipes
            .iter()
            .map(|(read, _)| {
                ring.register(Request::Read {
                    fd: read.clone(),
                    len: 1,
                })
            })
            .collect();
        ring.submit_now();
        for (_, writer) in &pipes {
            write_byte(writer);
        }
        // Wait until all three completions are on the ring (DEFER_TASKRUN posts them at an
        // enter that waits), then make handling the first of them panic.
        let timespec = types::Timespec::from(PROGRESS);
        let args = types::SubmitArgs::new().timespec(&timespec);
        ring.ring
            .submitter()
            .submit_with_args(3, &args)
            .expect("three completions");
        assert_eq!(ring.ring.completion().len(), 3);
        ring.panic_on_completion = Some(0);
        let mut wakes = Vec::new();
        let panicked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.service(&mut wakes)));
        assert!(panicked.is_err(), "the hook panics");
        assert!(
            ring.operations.get(0).is_none(),
            "the operation whose handling panicked left its slot"
        );
        ring.service(&mut wakes).expect("service");
        let left = ring.in_flight();
        if left != 0 {
            // Old behaviour: the other completions were lost and a drain would wait forever.
            std::mem::forget(ring);
            panic!("{left} operations never finished: their completions were lost");
        }
        assert!(finished(&reads[1]) && finished(&reads[2]));
        ring.close(&mut wakes);
    }

    /// `close` right after a handler panicked, with the other completion still queued in the
    /// driver, a durable write (not cancellable) as the only operation left and no eventfd
    /// read armed: the queued completion is handled, not waited for, so the drain finishes.
    #[test]
    fn close_handles_completions_left_by_a_panicked_handler_before_waiting() {
        let (done, closed) = mpsc::channel();
        std::thread::spawn(move || {
            let wake = eventfd();
            let mut ring = driver(8, &wake);
            let path = std::env::temp_dir()
                .join(format!("driver-close-after-panic-{}", std::process::id()));
            let file = std::fs::File::create(&path).expect("a scratch file");
            let _ = std::fs::remove_file(&path);
            let fd = Arc::new(OwnedFd::from(file));
            let writes: Vec<_> = (0..2u64)
                .map(|at| {
                    ring.register(Request::Write {
                        fd: fd.clone(),
                        offset: at * 8,
                        bufs: IoBufs::from(vec![7u8; 8]),
                        sync: false,
                    })
                })
                .collect();
            let timespec = types::Timespec::from(PROGRESS);
            let args = types::SubmitArgs::new().timespec(&timespec);
            ring.ring
                .submitter()
                .submit_with_args(2, &args)
                .expect("two completions");
            // Take both off the ring, then make the first one's handling panic.
            let taken: Vec<_> = ring
                .ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags()))
                .collect();
            assert_eq!(taken.len(), 2);
            ring.completions.extend(taken);
            ring.panic_on_completion = Some(untoken(ring.completions[0].0).0);
            let mut wakes = Vec::new();
            let panicked =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.service(&mut wakes)));
            assert!(panicked.is_err(), "the hook panics");
            assert!(!ring.eventfd_armed && ring.completions.len() == 1);
            ring.close(&mut wakes);
            let answered = writes.iter().filter(|write| finished(write)).count();
            let _ = done.send((ring.in_flight(), answered));
        });
        let (left, answered) = closed
            .recv_timeout(PROGRESS)
            .expect("close finished without waiting for a completion already taken");
        assert_eq!(left, 0);
        assert_eq!(
            answered, 1,
            "the write whose handler did not panic was answered"
        );
    }

    /// A drain the kernel refuses leaks what the kernel may still write into (here a read's
    /// descriptor and buffer) instead of freeing it, says so, and leaves a driver that can be
    /// dropped without draining again.
    #[test]
    fn a_failed_drain_leaks_the_memory_of_unfinished_operations() {
        let wake = eventfd();
        let mut ring = driver(4, &wake);
        let (read, _writer) = pipe();
        let _pending = ring.register(Request::Read {
            fd: read.clone(),
            len: 1,
        });
        ring.submit_now();
        ring.fail_drain = Some(libc::EFAULT);
        let mut wakes = Vec::new();
        let panicked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.close(&mut wakes)))
                .expect_err("a failed drain panics");
        let message = panicked
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(
            message.contains("could not drain") && message.contains("1 unfinished"),
            "{message}"
        );
        assert_eq!(ring.in_flight(), 0);
        drop(ring);
        assert_eq!(
            Arc::strong_count(&read),
            2,
            "the in-flight read's descriptor is leaked, not closed under the kernel"
        );
    }

    /// A cancellation names exactly one operation: a stale cancellation of an operation that
    /// already finished does not cancel the next operation to take its slot, neither when a
    /// drop asks for it (`cancel_dropped` checks the generation) nor when it reaches the
    /// kernel (the user_data differs).
    #[test]
    fn a_stale_cancellation_does_not_cancel_the_next_operation_in_its_slot() {
        let wake = eventfd();
        let mut ring = driver(8, &wake);
        let (read, writer) = pipe();
        let first = ring.register(Request::Read {
            fd: read.clone(),
            len: 1,
        });
        let (index, _) = ring.operations.iter().next().expect("one operation");
        let stale = token(index, ring.operations.get(index).unwrap().id);
        write_byte(&writer);
        let mut wakes = Vec::new();
        while !finished(&first) {
            ring.wait(Some(PROGRESS), || true, || {}).expect("wait");
            ring.service(&mut wakes).expect("service");
        }
        // Both completions (the read's and the eventfd read's wake) are handled.
        wakes.clear();
        let second = ring.register(Request::Read { fd: read, len: 1 });
        assert!(
            ring.operations.get(index).is_some(),
            "the slot is reused (what makes a stale cancellation dangerous)"
        );
        // A drop's cancellation with the stale token (a request that raced the first read's
        // completion) names no live operation: nothing is queued, the new read is untouched.
        ring.submit_now();
        ring.cancel_dropped(stale);
        assert!(!ring.holds_unsubmitted(), "a stale token queues nothing");
        let occupant = ring.operations.get(index).unwrap();
        assert!(!occupant.cancelled && !occupant.abandoned);
        // Even one that reaches the kernel names the old operation, not the new one.
        ring.push(
            opcode::AsyncCancel::new(stale)
                .build()
                .user_data(CANCEL_TOKEN),
        );
        ring.submit_now();
        write_byte(&writer);
        let output = loop {
            if let Some(output) = output(&second) {
                break output;
            }
            ring.wait(Some(PROGRESS), || true, || {}).expect("wait");
            ring.service(&mut wakes).expect("service");
        };
        // The read got its byte: the cancellation did not reach it.
        let RequestOutput::Read(read) = output else {
            unreachable!("a read answers Read");
        };
        assert_eq!(read.expect("not cancelled"), vec![7]);
        ring.close(&mut wakes);
    }

    /// A read given up is cancelled, and keeps its slot (its buffer and descriptor) until the
    /// kernel's completion for it is reaped: only then does it leave, answering
    /// `Interrupted`. Asked again, or once it is done, nothing more is sent.
    #[test]
    fn a_cancelled_operation_keeps_its_resources_until_its_completion() {
        let wake = eventfd();
        let mut ring = driver(8, &wake);
        let (read, _writer) = pipe();
        let slot = ring.register(Request::Read {
            fd: read.clone(),
            len: 1,
        });
        ring.submit_now();
        let (_, token) = slot.request_cancel().expect("the first request");
        assert!(slot.request_cancel().is_none(), "asked once");
        ring.cancel_dropped(token);
        assert!(ring.holds_unsubmitted(), "the cancellation is queued");
        assert_eq!(
            ring.in_flight(),
            1,
            "still in flight: the kernel has the read"
        );
        assert_eq!(Arc::strong_count(&read), 2, "its descriptor is still held");
        let mut wakes = Vec::new();
        let output = loop {
            if let Some(output) = output(&slot) {
                break output;
            }
            assert_eq!(ring.in_flight(), 1, "left only with its completion");
            ring.wait(Some(PROGRESS), || true, || {}).expect("wait");
            ring.service(&mut wakes).expect("service");
        };
        let RequestOutput::Read(Err(error)) = output else {
            unreachable!("a cancelled read fails, got {output:?}");
        };
        assert_eq!(error.kind(), io::ErrorKind::Interrupted, "{error}");
        assert_eq!(ring.in_flight(), 0);
        assert_eq!(Arc::strong_count(&read), 1, "released with its completion");
        // Stale now: the token names no live operation, and nothing is sent.
        ring.cancel_dropped(token);
        assert!(!ring.holds_unsubmitted());
        assert!(slot.request_cancel().is_none(), "done: nothing to give up");
        ring.close(&mut wakes);
    }

    /// A completion that names no live operation is counted (and fails a debug assertion).
    #[test]
    fn a_completion_for_no_operation_is_counted() {
        let wake = eventfd();
        let mut ring = driver(4, &wake);
        let (read, _writer) = pipe();
        let _pending = ring.register(Request::Read { fd: read, len: 1 });
        ring.push(opcode::Nop::new().build().user_data(token(3, 42)));
        let mut wakes = Vec::new();
        let mut reaped = false;
        while !reaped {
            ring.wait(Some(PROGRESS), || true, || {}).expect("wait");
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.service(&mut wakes)));
            reaped = ring.metrics.unknown_completions.get() == 1;
            assert_eq!(outcome.is_err(), cfg!(debug_assertions) && reaped);
        }
        ring.close(&mut wakes);
    }

    #[test]
    fn setup_errors_name_the_cause_and_the_fix() {
        let disabled = explain_setup_error(io::Error::from_raw_os_error(libc::EPERM));
        assert!(
            disabled.to_string().contains("kernel.io_uring_disabled"),
            "{disabled}"
        );
        assert!(disabled.to_string().contains("seccomp"), "{disabled}");
        let missing = explain_setup_error(io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(missing.to_string().contains("Linux 6.1"), "{missing}");
        let old = explain_setup_error(io::Error::from_raw_os_error(libc::EINVAL));
        assert!(old.to_string().contains("DEFER_TASKRUN"), "{old}");
    }
}
