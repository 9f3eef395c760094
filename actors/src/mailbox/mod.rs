//! An actor's mailbox: a bounded MPSC channel of messages with per-sender FIFO order, a send
//! that waits for room (backpressure), a `try_send` that reports a full mailbox, a sender
//! count that tells the actor when nobody can reach it any more, and a stop request.
//!
//! Invariants:
//! - `state` holds the number of permits taken (`state >> 3`), the closed bit (bit 0), the
//!   parked bit (bit 1: the consumer waits, so the next push wakes it; a busy consumer costs
//!   its producers no wake at all) and the waiters bit (bit 2: a sender waits for room). A
//!   send takes a permit with one CAS before it pushes, and the consumer returns it after the
//!   pop: at most `capacity` messages are ever in the queue, so a push never finds it full.
//!   Once the closed bit is set no permit is handed out again.
//! - Every message pushed is either popped by the consumer or dropped by a drain: `close`
//!   sets the bit and then drains; a send that pushed re-reads the bit after its push and, if
//!   set, drains too. One of them sees the message, whatever the interleaving: both re-read
//!   `state` with a read-modify-write, and RMWs of one location are totally ordered (the later
//!   one acquires what the earlier one released). A drain stops at a slot claimed but not
//!   yet written; its writer then sees the bit and drains the rest itself. Dropping a message drops the
//!   reply channel of an ask, which resolves it to `Closed`: asks never hang.
//! - Uncontended, a send is a CAS on `state`, a CAS on the queue's tail, a stamp store and an
//!   RMW of `state` (which also tells whether the consumer waits); a wake only when it does;
//!   no lock and no allocation.
//! - Senders that find the mailbox full queue their wakers in `waiters` (a lock, only on this
//!   slow path). The waiters bit of `state` is set exactly while that queue is not empty, and
//!   changed only under the lock. A waiter sets it with an RMW of `state` as it registers
//!   and then looks for a permit again; returning a permit is an RMW of `state` that reads
//!   the bit. Both are RMWs of one location, so one comes first: either the return sees the
//!   bit (and wakes the first waiter), or the waiter's second look sees the permit. No
//!   ordering between two locations is needed, which is what lets loom check the handshake.
//!   A woken waiter that is dropped before it takes its permit passes the wake on.
//! - `senders` counts the refs. The consumer reports `Disconnected` only when that count is
//!   zero and a pop after reading it finds nothing: the last ref's decrement (`Release`)
//!   follows its last push, so the pop sees every message sent. A weak ref's upgrade
//!   increments the count only from above zero (a CAS), so zero is final but for the
//!   actor's own `Context::actor_ref`, made on the consumer's task: a `Disconnected` is never
//!   followed by a message from an upgraded ref.
//! - One consumer at a time: `Mailbox::consumer` hands out the single `Consumer`, and a new
//!   one only after the previous is dropped (a supervised actor's incarnations take turns).

mod queue;
mod sending;

use crate::lifecycle::{Life, Peer, STOP_REQUESTED, Signal};
use crate::{ActorId, Error, ExitReason};
use queue::{Popped, Queue};
pub(crate) use sending::{Channel, Sending};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

const CLOSED: usize = 1;
/// The consumer found nothing and waits: the next push must wake it.
const PARKED: usize = 2;
/// A sender waits for room: the next permit returned must wake one.
const WAITERS: usize = 4;
const PERMIT: usize = 8;
/// Permits are counted above the flag bits.
const PERMIT_SHIFT: u32 = 3;

/// The shared part of a mailbox.
pub(crate) struct Mailbox<M> {
    queue: Queue<M>,
    /// At most 2^31 (the slot queue's limit); narrow fields here keep an idle actor small.
    capacity: u32,
    /// Permits taken `<< PERMIT_SHIFT` (3), and the closed, parked and waiters bits (checked
    /// by loom, with the slot queue).
    state: crate::sync::AtomicUsize,
    /// Refs alive (checked by loom with weak refs' upgrades).
    senders: crate::sync::AtomicUsize,
    /// The actor's id, end, watchers and signals; holds the consumer's waker.
    pub(crate) life: Life,
    /// A `Consumer` exists.
    consumer_taken: AtomicBool,
    /// Boxed on first use: most mailboxes never fill, and an idle actor stays small.
    waiters: crate::sync::Mutex<Option<Box<Waiters>>>,
    /// The label's `actor_ask_timeouts_total`, set when an incarnation first starts; until
    /// then (a supervised child's ref exists before it starts) timeouts wait in
    /// `early_timeouts`, added to it when it is set or when a later incarnation starts.
    ask_timeouts: OnceLock<prometheus_client::metrics::counter::Counter>,
    early_timeouts: AtomicU32,
    /// Incarnations started on this mailbox, for the `tracing` feature's spans.
    #[cfg(feature = "tracing")]
    incarnations: AtomicU32,
}

#[derive(Default)]
struct Waiters {
    queue: VecDeque<(u64, Waker)>,
    next_id: u64,
}

/// What the consumer receives.
pub(crate) enum Received<M> {
    Message(M),
    /// `request_stop` was called.
    Stop,
    /// No ref is left and every message has been received, or the mailbox is closed.
    Disconnected,
    /// A down notification, a linked actor's exit, or an ordered stop (see `lifecycle`).
    Signal(Signal),
}

impl<M: Send> Mailbox<M> {
    /// A mailbox holding at most `capacity` messages for the actor `id`, with no ref yet.
    pub(crate) fn new(capacity: usize, id: ActorId) -> Arc<Self> {
        assert!(capacity > 0, "a mailbox holds at least one message");
        Arc::new(Mailbox {
            queue: Queue::new(capacity),
            capacity: u32::try_from(capacity)
                .ok()
                .filter(|_| capacity <= usize::MAX >> PERMIT_SHIFT)
                .expect("a mailbox holds at most 2^31 messages (2^29 on 32-bit targets)"),
            state: crate::sync::AtomicUsize::new(0),
            senders: crate::sync::AtomicUsize::new(0),
            life: Life::new(id),
            consumer_taken: AtomicBool::new(false),
            waiters: crate::sync::Mutex::new(None),
            ask_timeouts: OnceLock::new(),
            early_timeouts: AtomicU32::new(0),
            #[cfg(feature = "tracing")]
            incarnations: AtomicU32::new(0),
        })
    }

    /// Counts an incarnation starting on this mailbox; its number, from 1.
    #[cfg(feature = "tracing")]
    pub(crate) fn next_incarnation(&self) -> u32 {
        // Relaxed: one incarnation starts at a time (its supervisor's loop starts them), and
        // the number is only a label.
        self.incarnations
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1)
    }

    /// Counts an ask to this actor whose deadline passed.
    pub(crate) fn count_ask_timeout(&self) {
        match self.ask_timeouts.get() {
            Some(counter) => drop(counter.inc()),
            // Saturating: a count this large is lost in the label's anyway.
            None => drop(self.early_timeouts.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |early| early.checked_add(1),
            )),
        }
    }

    /// Gives the mailbox its label's timeout counter (the first call's wins), and adds the
    /// timeouts counted before it had one.
    pub(crate) fn bind_ask_timeouts(
        &self,
        counter: impl FnOnce() -> prometheus_client::metrics::counter::Counter,
    ) {
        let counter = self.ask_timeouts.get_or_init(counter);
        let early = self.early_timeouts.swap(0, Ordering::Relaxed);
        if early > 0 {
            counter.inc_by(u64::from(early));
        }
    }

    /// Messages queued now (a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.state.load(Ordering::Relaxed) >> PERMIT_SHIFT
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity as usize
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Counts a new ref made from a weak one, unless none is left (the actor is finishing
    /// what is queued, or gone): once the count is zero it stays zero but for the actor's own
    /// `Context::actor_ref`, so the consumer's `Disconnected` is final.
    pub(crate) fn try_add_sender(&self) -> bool {
        let mut senders = self.senders.load(Ordering::Relaxed);
        loop {
            if senders == 0 || self.is_closed() {
                return false;
            }
            match self.senders.compare_exchange_weak(
                senders,
                senders + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(current) => senders = current,
            }
        }
    }

    /// Counts a new ref.
    pub(crate) fn add_sender(&self) {
        // Relaxed: a new ref is made from an existing one (or by the actor, which holds the
        // mailbox), so the count is not zero and nothing is published by the increment.
        self.senders.fetch_add(1, Ordering::Relaxed);
    }

    /// Uncounts a ref; the last one wakes the consumer, which drains and reports
    /// `Disconnected`.
    pub(crate) fn remove_sender(&self) {
        if self.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.life.consumer_waker.wake();
        }
    }

    /// Sends `message` if there is room now.
    pub(crate) fn try_send(&self, message: M) -> Result<(), (Error, M)> {
        match self.take_permit() {
            Ok(()) => {
                self.push(message);
                Ok(())
            }
            Err(error) => Err((error, message)),
        }
    }

    /// Sends `message`, waiting for room.
    pub(crate) fn send(&self, message: M) -> Sending<'_, M> {
        Sending::new(self, message)
    }

    fn take_permit(&self) -> Result<(), Error> {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & CLOSED != 0 {
                return Err(Error::Closed);
            }
            if state >> PERMIT_SHIFT >= self.capacity as usize {
                return Err(Error::Full);
            }
            match self.state.compare_exchange_weak(
                state,
                state + PERMIT,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(current) => state = current,
            }
        }
    }

    /// Pushes under a permit taken; returns whether it woke a parked consumer.
    fn push(&self, message: M) -> bool {
        self.queue.push(message);
        // One read-modify-write of `state` after the push, which reads the closed bit and
        // takes the parked bit. RMWs of one location are totally ordered: `close`'s
        // `fetch_or`, or the consumer's parking `fetch_or`, either comes first (and this sees
        // its bit) or comes after and acquires this push (and finds the message).
        let state = self.state.fetch_and(!PARKED, Ordering::AcqRel);
        if state & CLOSED != 0 {
            // Closed while this send held its permit: nobody may consume the message, so drop
            // it (and any other left) here.
            self.drain();
            return false;
        }
        if state & PARKED != 0 {
            self.life.consumer_waker.wake();
            return true;
        }
        false
    }

    /// Returns a permit and wakes one waiting sender, if any.
    fn return_permit(&self) {
        // One RMW: it reads the waiters bit in the same step that frees the permit (see the
        // module documentation).
        if self.state.fetch_sub(PERMIT, Ordering::AcqRel) & WAITERS != 0 {
            self.wake_waiter();
        }
    }

    fn wake_waiter(&self) {
        let mut waiters = self.waiters.lock();
        let first = waiters.as_mut().and_then(|waiters| {
            let first = waiters.queue.pop_front();
            self.settle_waiters(&waiters.queue);
            first
        });
        if let Some((_, waker)) = first {
            drop(waiters);
            waker.wake();
        }
    }

    /// Clears the waiters bit once the queue is empty; called under the waiters lock after
    /// the queue lost an entry.
    fn settle_waiters(&self, queue: &VecDeque<(u64, Waker)>) {
        if queue.is_empty() {
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
        }
    }

    /// Ends the actor for good with `reason` (the first reason given wins): closes the
    /// mailbox, then tells its joiners, monitors and links.
    pub(crate) fn end(&self, reason: ExitReason) {
        let finished = self.life.finish(reason);
        self.close();
        if let Some(finished) = finished {
            finished.deliver();
        }
    }

    /// Closes the mailbox: sends fail with `Closed` from now on, waiting senders are woken to
    /// see it, and every queued message is dropped (an ask among them resolves to `Closed`).
    pub(crate) fn close(&self) {
        // `AcqRel` at least: see `push`.
        let state = self.state.fetch_or(CLOSED, Ordering::SeqCst);
        // The waiters lock only when the waiters bit was set: a sender registering sets it
        // with an RMW of `state` and then looks again, so it either registered before this
        // RMW (and the bit is seen here) or its second look sees the closed bit.
        let waiters = if state & WAITERS == 0 {
            VecDeque::new()
        } else {
            let mut waiters = self.waiters.lock();
            let taken = waiters
                .as_mut()
                .map(|waiters| std::mem::take(&mut waiters.queue))
                .unwrap_or_default();
            self.state.fetch_and(!WAITERS, Ordering::AcqRel);
            taken
        };
        for (_, waker) in waiters {
            waker.wake();
        }
        self.drain();
        self.life.consumer_waker.wake();
    }

    fn drain(&self) {
        while let Some(message) = self.queue.pop() {
            self.state.fetch_sub(PERMIT, Ordering::SeqCst);
            drop(message);
        }
    }

    /// Asks the consumer to stop before its next message.
    pub(crate) fn request_stop(&self) {
        self.life.request_stop();
    }

    /// Clears what the last incarnation left for itself alone: a stop request, a kill that
    /// came while it ended (see `Life::clear_last_incarnation`).
    pub(crate) fn clear_last_incarnation(&self) {
        self.life.clear_last_incarnation();
    }

    /// The consumer, unless one exists.
    pub(crate) fn consumer(self: &Arc<Self>) -> Option<Consumer<M>> {
        if self.consumer_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(Consumer {
            mailbox: self.clone(),
        })
    }
}

impl<M: Send> Peer for Mailbox<M> {
    fn life(&self) -> &Life {
        &self.life
    }

    fn tail(&self) -> usize {
        self.queue.tail()
    }
}

/// The receiving end; one at a time per mailbox.
pub(crate) struct Consumer<M: Send> {
    mailbox: Arc<Mailbox<M>>,
}

impl<M: Send> Consumer<M> {
    pub(crate) fn mailbox(&self) -> &Arc<Mailbox<M>> {
        &self.mailbox
    }

    /// The next message, a stop request, or `Disconnected`.
    #[cfg(test)]
    pub(crate) fn recv(&mut self) -> Recv<'_, M> {
        Recv {
            consumer: self,
            looked: false,
        }
    }

    /// [`recv`](Self::recv), for a caller whose [`try_recv`](Self::try_recv) just found
    /// nothing: its first poll registers and parks at once, without looking a second time
    /// (parking looks again after the parked bit is set, which covers any push since).
    pub(crate) fn recv_after_empty(&mut self) -> Recv<'_, M> {
        Recv {
            consumer: self,
            looked: true,
        }
    }

    /// Polls for the next message; `looked`: the caller found the mailbox empty just before.
    fn poll_recv(&mut self, cx: &mut Context<'_>, looked: bool) -> Poll<Received<M>> {
        if !looked && let Some(received) = self.try_recv() {
            return Poll::Ready(received);
        }
        self.mailbox.life.consumer_waker.register(cx.waker());
        match self.park() {
            Some(received) => Poll::Ready(received),
            None => Poll::Pending,
        }
    }

    /// Sets the parked bit, then looks once more: the next push wakes the consumer, and a
    /// push before the bit is found here (see `push`).
    fn park(&mut self) -> Option<Received<M>> {
        self.mailbox.state.fetch_or(PARKED, Ordering::AcqRel);
        let received = self.try_recv();
        if received.is_some() {
            self.mailbox.state.fetch_and(!PARKED, Ordering::Relaxed);
        }
        received
    }

    /// The next message, a stop request or `Disconnected`, if one is there now.
    ///
    /// Signals are looked at after the head message is found written and before it is
    /// taken: a signal queued before that message was pushed, by its sender or by anyone
    /// whose actions the sender saw, is then visible (the pusher's `Release` stamp, acquired
    /// by the pop), and taken first if its stamp says so. With no message written, they are
    /// looked at after.
    pub(crate) fn try_recv(&mut self) -> Option<Received<M>> {
        let mailbox = &*self.mailbox;
        match mailbox.queue.pop_unless(|| self.attend()) {
            Popped::Value(message) => {
                mailbox.return_permit();
                return Some(Received::Message(message));
            }
            Popped::Deferred(first) => return Some(first),
            Popped::Empty => {
                if let Some(received) = self.attend() {
                    return Some(received);
                }
            }
        }
        if mailbox.is_closed() {
            return Some(Received::Disconnected);
        }
        if mailbox.senders.load(Ordering::Acquire) == 0 {
            // The last ref's pushes, and the signals it queued before them, happened before
            // its decrement: one more look finds them.
            if let Some(received) = self.attend() {
                return Some(received);
            }
            return Some(match mailbox.queue.pop() {
                Some(message) => {
                    mailbox.return_permit();
                    Received::Message(message)
                }
                None => Received::Disconnected,
            });
        }
        None
    }

    /// A stop request, or a signal due before the head message. One load covers both: the
    /// common case pays nothing more.
    #[inline]
    fn attend(&self) -> Option<Received<M>> {
        let life = &self.mailbox.life;
        let attention = life.attention();
        if attention == 0 {
            return None;
        }
        if attention & STOP_REQUESTED != 0 {
            return Some(Received::Stop);
        }
        life.take_signal(self.mailbox.queue.head())
            .map(Received::Signal)
    }
}

impl<M: Send> Drop for Consumer<M> {
    fn drop(&mut self) {
        // Nobody consumes until the next consumer registers its own waker: the waker left
        // here would only be woken by the end that usually follows (`close`), scheduling the
        // task that is ending for nothing.
        drop(self.mailbox.life.consumer_waker.take());
        self.mailbox.consumer_taken.store(false, Ordering::Release);
    }
}

pub(crate) struct Recv<'a, M: Send> {
    consumer: &'a mut Consumer<M>,
    /// The caller found the mailbox empty just before this future's first poll.
    looked: bool,
}

impl<M: Send> Future for Recv<'_, M> {
    type Output = Received<M>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Received<M>> {
        let looked = std::mem::take(&mut self.looked);
        self.consumer.poll_recv(cx, looked)
    }
}

#[cfg(all(test, not(actors_loom)))]
mod tests;

#[cfg(all(test, actors_loom))]
mod models;
