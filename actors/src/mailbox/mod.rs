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

use crate::lifecycle::{Life, Peer, STOP_REQUESTED, Signal};
use crate::{ActorId, Error, ExitReason};
use queue::{Popped, Queue};
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
        })
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
        self.state.fetch_or(CLOSED, Ordering::SeqCst);
        // Under the waiters' lock even when nobody waits: a sender registering now either
        // registered first (and is taken here) or sees the closed bit on its second look.
        let waiters = {
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

    /// Clears a stop request (a supervised actor's next incarnation starts without it).
    pub(crate) fn clear_stop(&self) {
        self.life.clear_stop();
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

/// What a send needs of a mailbox, whatever type the message is sent as: `Mailbox<M>` itself
/// (sending its own `M`), or an erased mailbox sending `I` as one of its messages
/// ([`crate::erased`], behind interface refs and recipients). The permit and waiter logic is
/// the mailbox's either way; only the push converts.
pub(crate) trait Channel<M>: Send + Sync {
    /// Takes a permit, or says why not (`Full` or `Closed`).
    fn take_permit(&self) -> Result<(), Error>;
    /// Registers (or refreshes) a waiting sender's waker under `waiter`.
    fn register_waiter(&self, waiter: &mut Option<u64>, waker: &Waker);
    /// Leaves the waiters; `holds_message`: the sender still has a message (a wake it got
    /// passes on if it takes no permit).
    fn forget_waiter(&self, waiter: &mut Option<u64>, holds_message: bool);
    /// Pushes `message` under a permit taken.
    fn push_permitted(&self, message: M);
    /// The actor's id.
    fn id(&self) -> ActorId;
    /// Counts an ask to the actor whose deadline passed.
    fn count_ask_timeout(&self);
}

impl<M: Send> Channel<M> for Mailbox<M> {
    #[inline]
    fn take_permit(&self) -> Result<(), Error> {
        Mailbox::take_permit(self)
    }

    fn register_waiter(&self, waiter: &mut Option<u64>, waker: &Waker) {
        let mut waiters = self.waiters.lock();
        let waiters = waiters.get_or_insert_with(Box::default);
        let registered =
            waiter.and_then(|id| waiters.queue.iter_mut().find(|(other, _)| *other == id));
        match registered {
            Some((_, registered)) => registered.clone_from(waker),
            None => {
                let id = waiters.next_id;
                waiters.next_id += 1;
                waiters.queue.push_back((id, waker.clone()));
                // An RMW before the caller's second look for a permit (see the module
                // documentation).
                self.state.fetch_or(WAITERS, Ordering::AcqRel);
                *waiter = Some(id);
            }
        }
    }

    fn forget_waiter(&self, waiter: &mut Option<u64>, holds_message: bool) {
        let Some(id) = waiter.take() else {
            return;
        };
        let mut waiters = self.waiters.lock();
        let Some(list) = waiters.as_mut() else {
            return;
        };
        match list.queue.iter().position(|(other, _)| *other == id) {
            Some(position) => {
                list.queue.remove(position);
                self.settle_waiters(&list.queue);
            }
            None if holds_message => {
                drop(waiters);
                self.wake_waiter();
            }
            None => {}
        }
    }

    #[inline]
    fn push_permitted(&self, message: M) {
        self.push(message);
    }

    fn id(&self) -> ActorId {
        self.life.id()
    }

    fn count_ask_timeout(&self) {
        Mailbox::count_ask_timeout(self);
    }
}

/// A send waiting for room; see [`Mailbox::send`]. Generic over the channel: `C` is
/// `Mailbox<M>` for a typed ref, `dyn Channel<M>` for an erased one.
pub(crate) struct Sending<'a, M: Send, C: ?Sized + Channel<M> = Mailbox<M>> {
    channel: &'a C,
    message: Option<M>,
    /// Its id in the mailbox's waiters, once it registered.
    waiter: Option<u64>,
}

impl<'a, M: Send, C: ?Sized + Channel<M>> Sending<'a, M, C> {
    /// A send of `message` on `channel`.
    pub(crate) fn new(channel: &'a C, message: M) -> Self {
        Sending {
            channel,
            message: Some(message),
            waiter: None,
        }
    }
}

// The message is moved out by value, never pinned.
impl<M: Send, C: ?Sized + Channel<M>> Unpin for Sending<'_, M, C> {}

impl<M: Send, C: ?Sized + Channel<M>> Future for Sending<'_, M, C> {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let channel = this.channel;
        match channel.take_permit() {
            Ok(()) => return Poll::Ready(this.deliver()),
            Err(Error::Full) => {}
            Err(error) => {
                channel.forget_waiter(&mut this.waiter, true);
                this.message = None;
                return Poll::Ready(Err(error));
            }
        }
        // The registration (an RMW of `state` that sets the waiters bit), then a second look
        // for a permit: against `return_permit`'s RMW, one of the two sees the other.
        channel.register_waiter(&mut this.waiter, cx.waker());
        match channel.take_permit() {
            Ok(()) => Poll::Ready(this.deliver()),
            Err(Error::Full) => Poll::Pending,
            Err(error) => {
                channel.forget_waiter(&mut this.waiter, true);
                this.message = None;
                Poll::Ready(Err(error))
            }
        }
    }
}

impl<M: Send, C: ?Sized + Channel<M>> Sending<'_, M, C> {
    /// Pushes the message under the permit just taken.
    fn deliver(&mut self) -> Result<(), Error> {
        let message = self.message.take().expect("polled after it finished");
        // It takes a permit: a wake it got is used, not passed on. (Most sends never wait:
        // they skip the call, which may go through a vtable.)
        if self.waiter.is_some() {
            self.channel.forget_waiter(&mut self.waiter, false);
        }
        self.channel.push_permitted(message);
        Ok(())
    }
}

impl<M: Send, C: ?Sized + Channel<M>> Drop for Sending<'_, M, C> {
    fn drop(&mut self) {
        if self.waiter.is_some() {
            let holds_message = self.message.is_some();
            self.channel.forget_waiter(&mut self.waiter, holds_message);
        }
    }
}

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// Counts its drops, so a test can tell a message was dropped and not leaked.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn message<M: Send>(received: Option<Received<M>>) -> M {
        match received {
            Some(Received::Message(message)) => message,
            Some(Received::Stop) => panic!("a stop, not a message"),
            Some(Received::Disconnected) => panic!("disconnected, not a message"),
            Some(Received::Signal(_)) => panic!("a signal, not a message"),
            None => panic!("nothing received"),
        }
    }

    /// Messages come out in the order they went in; at capacity `try_send` is `Full` and hands
    /// the message back; a receive makes room again, also across the queue's wrap-around.
    #[test]
    fn fifo_within_capacity_and_full_beyond_it() {
        let mailbox = Mailbox::new(3, ActorId::next(&"test"));
        mailbox.add_sender();
        let mut consumer = mailbox.consumer().expect("the first consumer");
        assert!(mailbox.consumer().is_none(), "one consumer at a time");
        for round in 0..5 {
            for i in 0..3 {
                mailbox.try_send(round * 10 + i).expect("room");
            }
            assert_eq!(mailbox.len(), 3);
            match mailbox.try_send(99) {
                Err((Error::Full, 99)) => {}
                other => panic!("expected Full with the message back, got {other:?}"),
            }
            for i in 0..3 {
                assert_eq!(message(consumer.try_recv()), round * 10 + i);
            }
            assert!(consumer.try_recv().is_none(), "empty, and a sender is left");
        }
    }

    /// A send that finds the mailbox full waits, and is woken when a receive returns a
    /// permit; a dropped waiting send passes its wake on to the next waiter.
    #[test]
    fn a_full_mailbox_wakes_a_waiting_sender_when_room_appears() {
        let mailbox = Mailbox::new(1, ActorId::next(&"test"));
        mailbox.add_sender();
        let mut consumer = mailbox.consumer().unwrap();
        mailbox.try_send(1u32).unwrap();
        let (first_wakes, second_wakes) = (Arc::new(Wakes::default()), Arc::new(Wakes::default()));
        let (first_waker, second_waker) = (
            Waker::from(first_wakes.clone()),
            Waker::from(second_wakes.clone()),
        );
        let mut first = mailbox.send(2);
        let mut second = mailbox.send(3);
        let mut cx = Context::from_waker(&first_waker);
        assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
        let mut cx = Context::from_waker(&second_waker);
        assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
        assert_eq!(message(consumer.try_recv()), 1);
        assert_eq!(
            first_wakes.0.load(Ordering::SeqCst),
            1,
            "the first waiter is woken"
        );
        assert_eq!(second_wakes.0.load(Ordering::SeqCst), 0);
        // The first waiter gives up: its wake goes to the second, which then sends.
        drop(first);
        assert_eq!(
            second_wakes.0.load(Ordering::SeqCst),
            1,
            "the wake was passed on"
        );
        let mut cx = Context::from_waker(&second_waker);
        assert!(matches!(
            Pin::new(&mut second).poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
        drop(second);
        assert_eq!(message(consumer.try_recv()), 3);
    }

    /// `close` drops every queued message (an ask among them would resolve `Closed`), refuses
    /// later sends, wakes waiting senders with `Closed`, and the consumer sees `Disconnected`.
    #[test]
    fn close_drops_what_is_queued_and_refuses_the_rest() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mailbox = Mailbox::new(2, ActorId::next(&"test"));
        mailbox.add_sender();
        let mut consumer = mailbox.consumer().unwrap();
        for _ in 0..2 {
            assert!(mailbox.try_send(Counted(drops.clone())).is_ok());
        }
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        let mut waiting = mailbox.send(Counted(drops.clone()));
        assert!(
            Pin::new(&mut waiting)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        mailbox.close();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2,
            "the queued messages are dropped"
        );
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "the waiting sender is woken"
        );
        assert!(matches!(
            Pin::new(&mut waiting).poll(&mut Context::from_waker(&waker)),
            Poll::Ready(Err(Error::Closed))
        ));
        assert_eq!(
            drops.load(Ordering::SeqCst),
            3,
            "its message is dropped too"
        );
        assert!(matches!(
            mailbox.try_send(Counted(drops.clone())),
            Err((Error::Closed, _))
        ));
        assert!(matches!(consumer.try_recv(), Some(Received::Disconnected)));
        assert_eq!(mailbox.len(), 0, "every permit came back");
    }

    /// The consumer receives everything the last ref sent before it left, then
    /// `Disconnected`; a stop request comes before any further message.
    #[test]
    fn the_last_sender_leaving_disconnects_after_its_messages() {
        let mailbox = Mailbox::new(4, ActorId::next(&"test"));
        mailbox.add_sender();
        let mut consumer = mailbox.consumer().unwrap();
        mailbox.try_send(1u8).unwrap();
        mailbox.request_stop();
        assert!(matches!(consumer.try_recv(), Some(Received::Stop)));
        mailbox.clear_stop();
        mailbox.try_send(2).unwrap();
        mailbox.remove_sender();
        assert_eq!(message(consumer.try_recv()), 1);
        assert_eq!(message(consumer.try_recv()), 2);
        assert!(matches!(consumer.try_recv(), Some(Received::Disconnected)));
    }

    /// Producers on other threads and a consumer parking between messages: every message
    /// arrives once, in order per producer, and no wake is lost (the consumer would hang).
    #[test]
    fn producers_on_other_threads_reach_a_parking_consumer() {
        const PRODUCERS: usize = 2;
        let per_producer = if cfg!(miri) { 20 } else { 2000 };
        let mailbox = Mailbox::new(4, ActorId::next(&"test"));
        let mut consumer = mailbox.consumer().unwrap();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|producer| {
                mailbox.add_sender();
                let mailbox = mailbox.clone();
                std::thread::spawn(move || {
                    for i in 0..per_producer {
                        futures::executor::block_on(mailbox.send((producer, i))).unwrap();
                    }
                    mailbox.remove_sender();
                })
            })
            .collect();
        let mut next = [0; PRODUCERS];
        futures::executor::block_on(async {
            loop {
                match consumer.recv().await {
                    Received::Message((producer, i)) => {
                        assert_eq!(i, next[producer], "per-producer order");
                        next[producer] += 1;
                    }
                    Received::Disconnected => break,
                    Received::Stop | Received::Signal(_) => {
                        unreachable!("nobody asked to stop or signalled")
                    }
                }
            }
        });
        for producer in producers {
            producer.join().unwrap();
        }
        assert_eq!(next, [per_producer; PRODUCERS]);
    }
}

#[cfg(all(test, actors_loom))]
mod models {
    use super::*;

    /// A two-message mailbox with one ref, and its consumer.
    fn referenced() -> (Arc<Mailbox<u8>>, Consumer<u8>) {
        let mailbox = Mailbox::new(2, ActorId::next(&"test"));
        mailbox.add_sender();
        let consumer = mailbox.consumer().expect("the first consumer");
        (mailbox, consumer)
    }

    /// A push racing the consumer's parking: either the consumer's last look finds the
    /// message, or the push sees the parked bit and wakes it. Never neither (a lost wake).
    #[test]
    fn a_push_racing_the_consumer_parking_is_never_lost() {
        crate::sync::model(|| {
            let (mailbox, mut consumer) = referenced();
            let producer = {
                let mailbox = mailbox.clone();
                loom::thread::spawn(move || {
                    mailbox.take_permit().expect("room");
                    mailbox.push(7u8)
                })
            };
            let found = consumer.try_recv().is_some() || consumer.park().is_some();
            let woke = producer.join().unwrap();
            assert!(found || woke, "the message was neither found nor signalled");
        });
    }

    /// A weak ref's upgrade racing the last ref's drop: the upgrade fails, or it succeeds and
    /// the consumer receives what the upgraded ref sends before it reports `Disconnected`.
    #[test]
    fn an_upgrade_racing_the_last_drop_never_loses_its_message() {
        crate::sync::model(|| {
            let (mailbox, mut consumer) = referenced();
            let upgrader = {
                let mailbox = mailbox.clone();
                loom::thread::spawn(move || {
                    let upgraded = mailbox.try_add_sender();
                    if upgraded {
                        mailbox.try_send(1u8).expect("room");
                        mailbox.remove_sender();
                    }
                    upgraded
                })
            };
            mailbox.remove_sender();
            let mut received = false;
            loop {
                match consumer.try_recv() {
                    Some(Received::Message(_)) => received = true,
                    Some(Received::Disconnected) => break,
                    Some(_) => unreachable!("no stop or signal"),
                    None => loom::thread::yield_now(),
                }
            }
            let upgraded = upgrader.join().unwrap();
            assert_eq!(received, upgraded, "an upgraded ref's message was lost");
        });
    }

    /// A ref asks for an ordered stop and then sends a message: however the consumer's looks
    /// interleave with the two, it receives the stop first (mailbox order).
    #[test]
    fn a_signal_queued_before_a_message_is_received_before_it() {
        crate::sync::model(|| {
            let (mailbox, mut consumer) = referenced();
            let producer = {
                let mailbox = mailbox.clone();
                loom::thread::spawn(move || {
                    crate::lifecycle::request_ordered_stop(&*mailbox);
                    mailbox.try_send(1u8).expect("room");
                })
            };
            let mut stopped = false;
            loop {
                match consumer.try_recv() {
                    Some(Received::Signal(Signal::Stop)) => stopped = true,
                    Some(Received::Message(_)) => {
                        assert!(stopped, "the message overtook the stop queued before it");
                        break;
                    }
                    Some(_) => unreachable!("one stop and one message"),
                    None => loom::thread::yield_now(),
                }
            }
            producer.join().unwrap();
        });
    }

    /// The consumer parks (`recv_after_empty`, as the run loop does after an empty look)
    /// while another thread does `act`: the parked receive is woken and returns what `act`
    /// left, never sleeps through it. `loom::future::block_on` parks the thread until a wake,
    /// so a lost wake is a deadlock the model reports.
    fn parked_receive_sees(act: fn(&Arc<Mailbox<u8>>), expect: fn(&Received<u8>) -> bool) {
        crate::sync::model(move || {
            let (mailbox, mut consumer) = referenced();
            let actor = {
                let mailbox = mailbox.clone();
                loom::thread::spawn(move || act(&mailbox))
            };
            let received = loom::future::block_on(consumer.recv_after_empty());
            assert!(expect(&received), "the parked receive got something else");
            actor.join().unwrap();
        });
    }

    #[test]
    fn an_ordered_stop_wakes_the_parked_receive() {
        parked_receive_sees(
            |mailbox| crate::lifecycle::request_ordered_stop(&**mailbox),
            |received| matches!(received, Received::Signal(Signal::Stop)),
        );
    }

    #[test]
    fn a_stop_request_wakes_the_parked_receive() {
        parked_receive_sees(
            |mailbox| mailbox.request_stop(),
            |received| matches!(received, Received::Stop),
        );
    }

    #[test]
    fn the_last_refs_drop_wakes_the_parked_receive() {
        parked_receive_sees(
            |mailbox| mailbox.remove_sender(),
            |received| matches!(received, Received::Disconnected),
        );
    }

    #[test]
    fn a_close_wakes_the_parked_receive() {
        parked_receive_sees(
            |mailbox| mailbox.close(),
            |received| matches!(received, Received::Disconnected),
        );
    }

    #[test]
    fn a_push_wakes_the_parked_receive() {
        parked_receive_sees(
            |mailbox| mailbox.try_send(3).expect("room"),
            |received| matches!(received, Received::Message(3)),
        );
    }

    /// A monitored actor ends while its watcher's consumer parks: the down notification
    /// wakes it.
    #[test]
    fn a_down_notification_wakes_the_parked_receive() {
        crate::sync::model(|| {
            let (watcher, mut consumer) = referenced();
            let watched = Mailbox::<u8>::new(1, ActorId::next(&"watched"));
            let watcher_peer: Arc<dyn crate::lifecycle::Peer> = watcher.clone();
            let _monitor = crate::lifecycle::monitor(&watcher_peer, watched.clone());
            let ender = loom::thread::spawn(move || watched.end(ExitReason::Stopped));
            let received = loom::future::block_on(consumer.recv_after_empty());
            assert!(matches!(received, Received::Signal(Signal::Down(_))));
            ender.join().unwrap();
        });
    }

    /// The full-mailbox handshake: a sender waits for room while the consumer takes the one
    /// message. The consumer's permit return (an RMW of `state` that reads the waiters bit)
    /// and the sender's registration (an RMW that sets it, then a second look for a permit)
    /// cannot both miss: the send completes.
    #[test]
    fn a_sender_waiting_for_room_gets_it_when_the_consumer_takes_a_message() {
        crate::sync::model(|| {
            let mailbox = Mailbox::new(1, ActorId::next(&"test"));
            mailbox.add_sender();
            let mut consumer = mailbox.consumer().expect("the first consumer");
            mailbox.try_send(0u8).expect("room for one");
            let sender = {
                let mailbox = mailbox.clone();
                loom::thread::spawn(move || loom::future::block_on(mailbox.send(1u8)))
            };
            loop {
                match consumer.try_recv() {
                    Some(Received::Message(0)) => break,
                    None => loom::thread::yield_now(),
                    Some(_) => unreachable!("the first message"),
                }
            }
            sender.join().unwrap().expect("the send got room");
            assert!(matches!(consumer.try_recv(), Some(Received::Message(1))));
        });
    }

    /// Two senders wait on a full mailbox; the first is woken by a permit's return and then
    /// dropped before it takes the permit: it passes the wake on, and the second sends.
    #[test]
    fn a_woken_waiter_dropped_passes_the_wake_on() {
        crate::sync::model(|| {
            let mailbox = Mailbox::new(1, ActorId::next(&"test"));
            mailbox.add_sender();
            let mut consumer = mailbox.consumer().expect("the first consumer");
            mailbox.try_send(0u8).expect("room for one");
            let mut first = mailbox.send(1u8);
            let noop = Waker::noop();
            assert!(
                Pin::new(&mut first)
                    .poll(&mut Context::from_waker(noop))
                    .is_pending()
            );
            let second = {
                let mailbox = mailbox.clone();
                loom::thread::spawn(move || loom::future::block_on(mailbox.send(2u8)))
            };
            assert!(matches!(consumer.try_recv(), Some(Received::Message(0))));
            drop(first);
            second.join().unwrap().expect("the second send got room");
            assert!(matches!(consumer.try_recv(), Some(Received::Message(2))));
        });
    }

    /// A sender that finds the mailbox full registers as `close` runs: either `close` finds
    /// it and wakes it, or its look after registering sees the mailbox closed. Never left
    /// waiting on a closed mailbox.
    #[test]
    fn a_sender_waiting_as_the_mailbox_closes_is_never_left_waiting() {
        struct Woken(loom::sync::atomic::AtomicBool);
        impl std::task::Wake for Woken {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        crate::sync::model(|| {
            let mailbox = Mailbox::new(1, ActorId::next(&"test"));
            mailbox.try_send(0u8).expect("room for one");
            let closer = {
                let mailbox = mailbox.clone();
                loom::thread::spawn(move || mailbox.close())
            };
            let woken = Arc::new(Woken(loom::sync::atomic::AtomicBool::new(false)));
            let waker = Waker::from(woken.clone());
            let mut cx = Context::from_waker(&waker);
            let mut sending = mailbox.send(1u8);
            let first = Pin::new(&mut sending).poll(&mut cx);
            closer.join().unwrap();
            if first.is_pending() {
                assert!(
                    woken.0.load(Ordering::SeqCst),
                    "a waiting sender was not woken by the close"
                );
                let again = Pin::new(&mut sending).poll(&mut cx);
                assert!(matches!(again, Poll::Ready(Err(Error::Closed))));
            } else {
                assert!(matches!(first, Poll::Ready(Err(Error::Closed))));
            }
        });
    }

    /// A send racing `close`: the message is either refused or, once pushed, dropped by one
    /// of the two drains; never left in a closed mailbox (where an ask would wait forever).
    #[test]
    fn a_send_racing_close_is_never_stranded() {
        crate::sync::model(|| {
            let mailbox = Mailbox::new(2, ActorId::next(&"test"));
            let message = Arc::new(());
            let sender = {
                let (mailbox, message) = (mailbox.clone(), message.clone());
                loom::thread::spawn(move || {
                    let _ = mailbox.try_send(message);
                })
            };
            mailbox.close();
            sender.join().unwrap();
            assert_eq!(Arc::strong_count(&message), 1, "the message was dropped");
        });
    }
}
