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
//! - An operation with a deadline has exactly one entry in the timeout wheel while it is in
//!   flight: the entry goes when the operation is done, and an entry that expires first sends
//!   a cancellation, which the operation reports as `TimedOut`. The worker's waits end by the
//!   wheel's next deadline.
//! - Sends and writes are finished here, not by their futures: a short transfer is
//!   resubmitted for the rest under the same slot, so an observer-less write still completes.

mod deadlines;
pub(crate) mod operation;
mod sockaddr;

use crate::slab::Slab;
use deadlines::{Deadlines, Expired};
use io_uring::{IoUring, opcode, squeue, types};
use operation::{InFlight, Step};
use prometheus_client::metrics::gauge::Gauge;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::task::Waker;
use std::time::{Duration, Instant};

pub(crate) use operation::{Operation, Request, RequestOutput};

/// The `user_data` of the eventfd read; operations use their slot index.
const EVENTFD_TOKEN: u64 = u64::MAX;

/// The longest a wait inside `io_uring_enter` lasts before it is entered again. Waits end on a
/// completion; this bounds the cost of one whose wake is lost. Under load on Linux 6.18 a
/// drain wait once slept through the completion it waited for (one `shutdown_drains_…` run
/// beside the paged tests hung until a debugger's signal made it enter again, and then it
/// finished at once), so no wait trusts its wake alone. An idle worker with operations in
/// flight pays one system call per bound; a closing one, draining, re-enters sooner.
const LOST_WAKE_BOUND: Duration = Duration::from_millis(500);
const DRAIN_LOST_WAKE_BOUND: Duration = Duration::from_millis(50);
/// The `user_data` of cancellation requests, whose own completions carry nothing.
const CANCEL_TOKEN: u64 = u64::MAX - 1;

/// A worker's ring.
pub struct Driver {
    ring: IoUring,
    /// Operations in flight (submitted or waiting in the backlog), by `user_data`.
    operations: Slab<InFlight>,
    /// Submissions that did not fit in the submission queue yet, in order.
    backlog: VecDeque<squeue::Entry>,
    eventfd: RawFd,
    eventfd_armed: bool,
    eventfd_buffer: Box<u64>,
    pending_operations: Gauge,
    /// Deadlines of operations that time out (connects, sends, receives).
    deadlines: Deadlines,
    /// The id the next operation gets.
    next_id: u64,
    /// Reused buffer of reaped completions (`user_data`, result, flags).
    completions: Vec<(u64, i32, u32)>,
    #[cfg(test)]
    pub(crate) fail_next_service: Option<&'static str>,
}

impl Driver {
    /// Creates the ring. `eventfd` is the worker's wake eventfd, which must outlive the driver;
    /// `wheel` is the timeout wheel's tick and slot count.
    pub(crate) fn new(
        size: u32,
        eventfd: RawFd,
        pending_operations: Gauge,
        wheel: (Duration, u64),
    ) -> io::Result<Self> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(size.saturating_mul(2).max(8))
            .build(size)
            .map_err(explain_setup_error)?;
        Ok(Self {
            ring,
            operations: Slab::default(),
            backlog: VecDeque::new(),
            eventfd,
            eventfd_armed: false,
            eventfd_buffer: Box::new(0),
            pending_operations,
            deadlines: Deadlines::new(wheel.0, wheel.1),
            next_id: 0,
            completions: Vec::new(),
            #[cfg(test)]
            fail_next_service: None,
        })
    }

    /// Whether completions wait to be reaped: posted already, or pending as deferred task
    /// work (which only an enter posts). Reads shared ring memory, no system call.
    pub(crate) fn has_completions(&mut self) -> bool {
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
    pub(crate) fn submit(&mut self, mut in_flight: InFlight, deadline: Option<Instant>) {
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
        self.pending_operations.inc();
        self.push(entry.user_data(index as u64));
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
            operation.timed_out = true;
            operation.cancelled = true;
            self.push(
                opcode::AsyncCancel::new(token as u64)
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

    /// Submits what is queued and reaps every completion, pushing the wakers to notify.
    pub(crate) fn service(&mut self, wakes: &mut Vec<Waker>) -> io::Result<()> {
        if self.operations.is_empty() && !self.eventfd_armed {
            return Ok(());
        }
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

    fn reap(&mut self, wakes: &mut Vec<Waker>) -> usize {
        let mut reaped = 0;
        // Reaped first, handled after: handling pushes submissions, which needs the ring.
        let mut completions = std::mem::take(&mut self.completions);
        completions.clear();
        completions.extend(
            self.ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())),
        );
        for &(token, result, flags) in &completions {
            reaped += 1;
            match token {
                EVENTFD_TOKEN => self.eventfd_armed = false,
                CANCEL_TOKEN => {}
                index => {
                    let index = index as usize;
                    let Some(operation) = self.operations.get_mut(index) else {
                        continue;
                    };
                    match operation.step(result, flags) {
                        Step::Again => {
                            let entry = operation.entry().user_data(index as u64);
                            self.push(entry);
                        }
                        Step::Done(output) => {
                            self.clear_deadline(index);
                            let operation =
                                self.operations.remove_if(index, |_| true).expect("present");
                            self.pending_operations.dec();
                            wakes.extend(operation.publish(output));
                        }
                    }
                }
            }
        }
        self.completions = completions;
        if !self.backlog.is_empty() {
            self.flush_backlog();
        }
        reaped
    }

    /// Waits inside `io_uring_enter` for a completion, a wake through `waker`'s eventfd, or
    /// `timeout`. Returns at once if `begin` says a wake is already pending.
    pub(crate) fn wait(
        &mut self,
        timeout: Option<Duration>,
        begin: impl FnOnce() -> bool,
        end: impl FnOnce(),
    ) -> io::Result<()> {
        if !self.eventfd_armed {
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
        self.flush_backlog();
        if !begin() {
            return Ok(());
        }
        let timeout = timeout.map_or(LOST_WAKE_BOUND, |timeout| timeout.min(LOST_WAKE_BOUND));
        let timespec = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&timespec);
        let result = self.ring.submitter().submit_with_args(1, &args);
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

    /// Cancels every cancellable operation and the eventfd read, then waits until nothing is
    /// in flight. Durable work (writes) is left to complete.
    pub(crate) fn close(&mut self, wakes: &mut Vec<Waker>) {
        let cancellable: Vec<u64> = self
            .operations
            .iter()
            .filter(|(_, operation)| operation.is_cancellable())
            .map(|(index, _)| index as u64)
            .collect();
        for &token in &cancellable {
            if let Some(operation) = self.operations.get_mut(token as usize) {
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
        while !self.operations.is_empty() || self.eventfd_armed || !self.backlog.is_empty() {
            self.flush_backlog();
            let timespec = types::Timespec::from(DRAIN_LOST_WAKE_BOUND);
            let args = types::SubmitArgs::new().timespec(&timespec);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(error)
                    if matches!(
                        error.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                    ) => {}
                Err(error) => panic!("io_uring driver service failed: {error}"),
            }
            self.reap(wakes);
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
    use super::*;

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
