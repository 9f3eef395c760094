//! An actor's life beyond its messages: its id, how it ended, who waits for that end
//! (`join`), who monitors it, whom it is linked to, and the signals (down notifications,
//! exits of linked actors, ordered stop requests) waiting to be handled in mailbox order.
//!
//! Every mailbox holds one [`Life`]; the rest of the crate reaches another actor's life
//! type-erased, as a [`Peer`] (implemented by every `Mailbox<M>`).
//!
//! Invariants:
//! - An actor ends once: [`Life::finish`] records the first reason and takes every watcher
//!   out under the lock, so each joiner, monitor and link hears of the end exactly once, and
//!   anything registered afterwards sees the recorded reason at once instead.
//! - Nothing is delivered while a lock is held, and no code holds two lives' locks at once:
//!   delivering to another actor locks only that actor's life.
//! - A down notification is delivered only if the receiver still lists the monitor in
//!   `monitoring`, and it is taken out of that list in the same critical section as the
//!   signal is queued. `demonitor` removes it from the list, and a queued notification from
//!   the signals, under the same lock: after it returns, no notification for that monitor is
//!   handled, whatever the watched actor does concurrently. Links work the same way through
//!   `links`, so `unlink` is as final.
//! - A signal is stamped with the queue's tail when it is queued, and is handled once the
//!   consumer's head has passed that stamp: after every message that was in the mailbox
//!   before it (mailbox order). Stamps are read under the lock, so they grow along the list.
//!   An exit signal that kills (the actor does not trap exits) is kept apart and taken at
//!   once, ahead of queued messages, as a link's death should be; a normal exit is dropped
//!   for such an actor when it arrives. Taking a signal is constant time.
//! - A supervised actor keeps its life across incarnations. What was for one incarnation
//!   only (a supervisor's stop request, a kill that came while it was ending) is cleared
//!   before the next starts (`clear_last_incarnation`); the rest is the actor's.
//! - Until an actor is monitored, linked, joined or signalled, all of this is one null
//!   pointer: `Extra` is boxed on first use.

use crate::id::Few;
use crate::sync::{AtomicU8, AtomicWaker, Mutex};
use crate::{ActorId, ExitReason};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;

/// `Life::attention`: a supervisor's stop request waits.
pub(crate) const STOP_REQUESTED: u8 = 1;
/// `Life::attention`: a signal may wait.
pub(crate) const SIGNALS: u8 = 2;

/// What an actor receives besides its messages. Two words: it shares the consumer's
/// `Received` with messages, which every idle actor's run loop holds.
pub(crate) enum Signal {
    /// A monitored actor ended.
    Down(Box<Down>),
    /// A linked actor ended.
    Exit(Box<LinkExit>),
    /// A ref asked the actor to stop after what it had queued.
    Stop,
}

/// A monitored actor's end.
pub(crate) struct Down {
    pub(crate) monitor: u64,
    pub(crate) id: ActorId,
    pub(crate) reason: ExitReason,
}

/// A linked actor's end.
pub(crate) struct LinkExit {
    pub(crate) from: ActorId,
    pub(crate) reason: ExitReason,
}

/// A signal as it waits in an actor's queue: unboxed, so the actor that ends and sends it
/// allocates nothing; the consumer boxes it when it takes it, on its own thread (where the
/// allocator's cache serves it, and where the box is freed).
enum Queued {
    Down(Down),
    Exit(LinkExit),
    Stop,
}

impl Queued {
    fn into_signal(self) -> Signal {
        match self {
            Queued::Down(down) => Signal::Down(Box::new(down)),
            Queued::Exit(exit) => Signal::Exit(Box::new(exit)),
            Queued::Stop => Signal::Stop,
        }
    }
}

/// Another actor's life, type-erased: its mailbox.
pub(crate) trait Peer: Send + Sync {
    fn life(&self) -> &Life;
    /// The mailbox queue's tail now: the stamp of a signal queued now.
    fn tail(&self) -> usize;
}

pub(crate) struct Life {
    id: ActorId,
    /// The consumer's waker: woken by pushes, the last ref's drop, `close`, stop requests
    /// and signals.
    pub(crate) consumer_waker: AtomicWaker,
    /// `STOP_REQUESTED` (a supervisor asks the actor to stop before its next message) and
    /// `SIGNALS` (`signals` or `kill` may hold something): the consumer's one load per
    /// message. Set (`SeqCst`) before the wake; the consumer reads it after it registers its
    /// waker, so it sees the bit or gets the wake.
    attention: AtomicU8,
    /// The actor declares `on_link_exit`: linked actors' exits are signals in mailbox order
    /// rather than kills. Fixed when the mailbox is made, before any signal can arrive.
    traps_exits: AtomicBool,
    state: Mutex<State>,
}

struct State {
    /// How the actor ended; `None` while it runs.
    ended: Option<EndedWith>,
    /// Before the end: what a monitored, linked, joined or signalled actor holds. After it:
    /// only an uncommon reason (`EndedWith::Other`), in `Extra::reason`.
    extra: Option<Box<Extra>>,
}

/// The reason an actor ended with, as its life keeps it: a byte, the common reasons in
/// place and the rest in `Extra::reason` (a running actor pays one byte here, beside the
/// lock's, and most ends allocate nothing).
#[derive(Clone, Copy)]
enum EndedWith {
    Normal,
    Stopped,
    Shutdown,
    Other,
}

impl EndedWith {
    fn new(reason: &ExitReason) -> Self {
        match reason {
            ExitReason::Normal => EndedWith::Normal,
            ExitReason::Stopped => EndedWith::Stopped,
            ExitReason::Shutdown => EndedWith::Shutdown,
            _ => EndedWith::Other,
        }
    }
}

impl State {
    /// The reason the actor ended with, if it has.
    fn reason(&self) -> Option<ExitReason> {
        Some(match self.ended? {
            EndedWith::Normal => ExitReason::Normal,
            EndedWith::Stopped => ExitReason::Stopped,
            EndedWith::Shutdown => ExitReason::Shutdown,
            EndedWith::Other => self
                .extra
                .as_ref()
                .and_then(|extra| extra.reason.clone())
                .expect("an uncommon reason is kept with the end"),
        })
    }
}

/// What a monitored, linked, joined or signalled actor holds.
#[derive(Default)]
struct Extra {
    /// Wakers of pending `join`s; a dropped join leaves `None` for the next one to reuse.
    joiners: Vec<Option<Waker>>,
    /// Monitors on this actor: their ids and the monitoring actors.
    watchers: Few<Weak<dyn Peer>>,
    /// Monitors this actor holds: their ids and the watched actors.
    monitoring: Few<Weak<dyn Peer>>,
    /// Actors linked to this one, by serial.
    links: Few<Weak<dyn Peer>>,
    /// Signals waiting, with their stamps.
    signals: VecDeque<(usize, Queued)>,
    /// A linked actor's abnormal end, for an actor that does not trap exits: taken before
    /// any signal or message. Only the first is kept: one kill ends the actor.
    kill: Option<Signal>,
    /// A `Signal::Stop` is in `signals` or `stop_at`.
    stop_queued: bool,
    /// An ordered stop that came while no signal waited, with its stamp: due before any
    /// signal in `signals` (all came after it, so their stamps are at least its), it needs
    /// no room in the queue (a stop then allocates nothing).
    stop_at: Option<usize>,
    /// What runs when the actor ends, before anyone else hears of it (a registry's entry
    /// leaving, say).
    on_end: Vec<Box<dyn FnOnce() + Send>>,
    /// Told of an ordered stop as it is queued: a supervisor waiting out a backoff before it
    /// restarts the actor, which ends it for good at once rather than at its next start.
    stop_watch: Option<StopWatch>,
    /// After the end: the reason, if it is none of the common ones `EndedWith` keeps.
    reason: Option<ExitReason>,
}

/// What the end took out of a life, to deliver with no lock held.
pub(crate) struct Finished {
    id: ActorId,
    reason: ExitReason,
    extra: Option<Box<Extra>>,
}

/// What [`Life::watch_stop`] calls.
pub(crate) type StopWatch = Arc<dyn Fn() + Send + Sync>;

/// Monitor ids, unique in the process.
fn next_monitor() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Life {
    pub(crate) fn new(id: ActorId) -> Self {
        Life {
            id,
            consumer_waker: AtomicWaker::new(),
            attention: AtomicU8::new(0),
            traps_exits: AtomicBool::new(false),
            state: Mutex::new(State {
                ended: None,
                extra: None,
            }),
        }
    }

    pub(crate) fn id(&self) -> ActorId {
        self.id
    }

    /// Records the end (the first reason wins) and takes every watcher out; `None` if it had
    /// ended already.
    pub(crate) fn finish(&self, reason: ExitReason) -> Option<Finished> {
        let mut state = self.state.lock();
        if state.ended.is_some() {
            return None;
        }
        let ended = EndedWith::new(&reason);
        state.ended = Some(ended);
        let extra = state.extra.take();
        if let EndedWith::Other = ended {
            state.extra = Some(Box::new(Extra {
                reason: Some(reason.clone()),
                ..Extra::default()
            }));
        }
        self.attention.fetch_and(!SIGNALS, Ordering::Relaxed);
        Some(Finished {
            id: self.id,
            reason,
            extra,
        })
    }

    /// Polls for the end: the reason if it ended, else registers `waker` in `slot`.
    pub(crate) fn poll_join(&self, slot: &mut Option<usize>, waker: &Waker) -> Option<ExitReason> {
        // A replaced waker is dropped after the lock: its drop may free a task whose own
        // `Join` on this actor locks it again.
        let mut replaced = None;
        let mut state = self.state.lock();
        if let Some(reason) = state.reason() {
            return Some(reason);
        }
        let joiners = &mut state.extra.get_or_insert_with(Box::default).joiners;
        match *slot {
            Some(index) => match &mut joiners[index] {
                Some(registered) if registered.will_wake(waker) => {}
                entry => replaced = entry.replace(waker.clone()),
            },
            None => {
                let index = match joiners.iter().position(Option::is_none) {
                    Some(free) => {
                        joiners[free] = Some(waker.clone());
                        free
                    }
                    None => {
                        joiners.push(Some(waker.clone()));
                        joiners.len() - 1
                    }
                };
                *slot = Some(index);
            }
        }
        drop(state);
        drop(replaced);
        None
    }

    /// Runs `callback` when the actor ends (at once, here, if it has ended).
    pub(crate) fn on_end(&self, callback: Box<dyn FnOnce() + Send>) {
        let mut state = self.state.lock();
        if state.ended.is_some() {
            drop(state);
            callback();
            return;
        }
        state
            .extra
            .get_or_insert_with(Box::default)
            .on_end
            .push(callback);
    }

    /// The callbacks waiting for the end: for the tests of those who add them.
    #[cfg(all(test, not(actors_loom)))]
    pub(crate) fn end_callbacks(&self) -> usize {
        let state = self.state.lock();
        state.extra.as_ref().map_or(0, |extra| extra.on_end.len())
    }

    /// The reason the actor ended with, if it has.
    pub(crate) fn reason(&self) -> Option<ExitReason> {
        self.state.lock().reason()
    }

    /// Whether the actor has ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.state.lock().ended.is_some()
    }

    /// A join registered in `slot` is dropped.
    pub(crate) fn forget_join(&self, slot: usize) {
        let mut state = self.state.lock();
        let waker = state
            .extra
            .as_mut()
            .and_then(|extra| extra.joiners.get_mut(slot))
            .and_then(Option::take);
        // Dropped after the lock, as in `poll_join`.
        drop(state);
        drop(waker);
    }

    /// What the consumer must look at before its next message: `STOP_REQUESTED`, `SIGNALS`.
    #[inline]
    pub(crate) fn attention(&self) -> u8 {
        self.attention.load(Ordering::SeqCst)
    }

    /// Asks the consumer to stop before its next message.
    pub(crate) fn request_stop(&self) {
        self.attention.fetch_or(STOP_REQUESTED, Ordering::SeqCst);
        self.consumer_waker.wake();
    }

    /// Clears what a supervised actor's last incarnation left that was meant for it alone,
    /// before the next one starts (no consumer exists meanwhile): its supervisor's stop
    /// request, and a linked actor's abnormal exit that came while it was already ending (in
    /// `on_stop`, or after its loop stopped taking messages) or while no incarnation ran (a
    /// backoff before the restart). A kill ends the incarnation it
    /// reaches, and that one was ending anyway; carried over, it would end the next one
    /// before its first message and spend a restart of the supervisor's intensity on nothing.
    ///
    /// What belongs to the actor stays, as its mailbox and queued messages do: its links and
    /// monitors (a partner linked by an earlier incarnation that ends later ends the
    /// incarnation running or starting then), queued signals (down notifications, and linked
    /// exits for an actor that traps them, handled in mailbox order), and an ordered stop
    /// from a ref's `stop()`, which asks the actor, not one incarnation, to end for good. A
    /// kill that arrives after this call is for the incarnation about to start: it takes it
    /// before its first message.
    pub(crate) fn clear_last_incarnation(&self) {
        // Only the supervisor's loop requests a stop, and it is the caller: no request for
        // the next incarnation can be lost here.
        self.attention.fetch_and(!STOP_REQUESTED, Ordering::SeqCst);
        let mut state = self.state.lock();
        if let Some(extra) = state.extra.as_mut()
            && extra.kill.take().is_some()
        {
            // Under the lock, as every change of what waits: a signal queued next sets
            // `SIGNALS` again after this.
            self.settle(extra);
        }
    }

    /// Has `watch` called when an ordered stop (a ref's `stop()`) is queued from now on, or
    /// no one with `None`; whether one is queued already (the caller acts on it: `watch` is
    /// not called for it). Nothing is watched once the actor ended.
    pub(crate) fn watch_stop(&self, watch: Option<StopWatch>) -> bool {
        let mut state = self.state.lock();
        if state.ended.is_some() {
            return false;
        }
        if watch.is_none() && state.extra.is_none() {
            return false;
        }
        let extra = state.extra.get_or_insert_with(Box::default);
        let replaced = std::mem::replace(&mut extra.stop_watch, watch);
        let queued = extra.stop_queued;
        // A closure's drop may run anything: not under the lock.
        drop(state);
        drop(replaced);
        queued
    }

    /// Declares whether the actor traps exits; called once, as its mailbox is made.
    pub(crate) fn set_traps_exits(&self, traps: bool) {
        self.traps_exits.store(traps, Ordering::Relaxed);
    }

    /// The next signal to handle with the consumer at `head`: a kill first, else the oldest
    /// signal whose stamp `head` has passed. Constant time.
    pub(crate) fn take_signal(&self, head: usize) -> Option<Signal> {
        let mut state = self.state.lock();
        let extra = state.extra.as_mut()?;
        if let Some(kill) = extra.kill.take() {
            self.settle(extra);
            return Some(kill);
        }
        let passed = |stamp: usize| head.wrapping_sub(stamp) as isize >= 0;
        let mut taken = None;
        if let Some(stamp) = extra.stop_at {
            if passed(stamp) {
                extra.stop_at = None;
                extra.stop_queued = false;
                taken = Some(Queued::Stop);
            }
        } else if let Some(&(stamp, _)) = extra.signals.front()
            && passed(stamp)
        {
            taken = extra.signals.pop_front().map(|(_, signal)| signal);
            if matches!(taken, Some(Queued::Stop)) {
                extra.stop_queued = false;
            }
        }
        self.settle(extra);
        drop(state);
        taken.map(Queued::into_signal)
    }

    /// Clears `SIGNALS` once nothing waits.
    fn settle(&self, extra: &Extra) {
        if extra.signals.is_empty() && extra.kill.is_none() && extra.stop_at.is_none() {
            self.attention.fetch_and(!SIGNALS, Ordering::SeqCst);
        }
    }

    /// Queues `signal` (stamped `tail()`), unless the actor ended; `admit` decides under the
    /// lock whether it still applies (a monitor or link not yet cancelled) and updates the
    /// bookkeeping. Wakes the consumer.
    fn queue(
        &self,
        tail: impl FnOnce() -> usize,
        signal: Queued,
        admit: impl FnOnce(&mut Extra) -> bool,
    ) {
        let mut watch = None;
        {
            let mut state = self.state.lock();
            if state.ended.is_some() {
                return;
            }
            let extra = state.extra.get_or_insert_with(Box::default);
            if !admit(extra) {
                return;
            }
            match &signal {
                // An earlier stop, earlier in mailbox order, already does it.
                Queued::Stop if extra.stop_queued => return,
                Queued::Stop if extra.signals.is_empty() => {
                    extra.stop_queued = true;
                    extra.stop_at = Some(tail());
                    self.attention.fetch_or(SIGNALS, Ordering::SeqCst);
                    let watch = extra.stop_watch.clone();
                    drop(state);
                    self.consumer_waker.wake();
                    if let Some(watch) = watch {
                        watch();
                    }
                    return;
                }
                Queued::Stop => {
                    extra.stop_queued = true;
                    watch = extra.stop_watch.clone();
                }
                Queued::Exit(exit) if !self.traps_exits.load(Ordering::Relaxed) => {
                    // A normal end is nothing to a non-trapping actor; an abnormal one ends
                    // it before anything else (the first one does).
                    if !exit.reason.is_normal() && extra.kill.is_none() {
                        extra.kill = Some(signal.into_signal());
                        self.attention.fetch_or(SIGNALS, Ordering::SeqCst);
                    } else {
                        return;
                    }
                    drop(state);
                    self.consumer_waker.wake();
                    return;
                }
                _ => {}
            }
            extra.signals.push_back((tail(), signal));
            self.attention.fetch_or(SIGNALS, Ordering::SeqCst);
        }
        self.consumer_waker.wake();
        if let Some(watch) = watch {
            watch();
        }
    }
}

/// Asks `peer` to stop after what is queued now.
pub(crate) fn request_ordered_stop(peer: &dyn Peer) {
    peer.life().queue(|| peer.tail(), Queued::Stop, |_| true);
}

/// Delivers the down notification of `monitor` to `to`, if it still holds that monitor.
fn deliver_down(to: &dyn Peer, monitor: u64, id: ActorId, reason: ExitReason) {
    to.life().queue(
        || to.tail(),
        Queued::Down(Down {
            monitor,
            id,
            reason,
        }),
        |extra| extra.monitoring.remove(&monitor).is_some(),
    );
}

/// Delivers the exit of the linked actor `from` to `to`, if the link still stands (and ends
/// it: a link fires once).
fn deliver_exit(to: &dyn Peer, from: ActorId, reason: ExitReason) {
    to.life().queue(
        || to.tail(),
        Queued::Exit(LinkExit { from, reason }),
        |extra| extra.links.remove(&from.serial()).is_some(),
    );
}

impl Finished {
    /// Tells every joiner, monitor and link about the end, and withdraws the monitors the
    /// ended actor held from the actors they watched.
    pub(crate) fn deliver(self) {
        let Some(extra) = self.extra else {
            return;
        };
        let Extra {
            joiners,
            watchers,
            monitoring,
            links,
            signals,
            kill,
            stop_queued: _,
            stop_at: _,
            on_end,
            stop_watch,
            reason: _,
        } = *extra;
        // Signals it will never handle, and nobody waits to restart it.
        drop((signals, kill, stop_watch));
        // First: whoever hears of the end (a joiner, a monitor) finds the registry without
        // the actor.
        for callback in on_end {
            callback();
        }
        for (monitor, watcher) in watchers {
            if let Some(watcher) = watcher.upgrade() {
                deliver_down(&*watcher, monitor, self.id, self.reason.clone());
            }
        }
        for (_, partner) in links {
            if let Some(partner) = partner.upgrade() {
                deliver_exit(&*partner, self.id, self.reason.clone());
            }
        }
        for (monitor, watched) in monitoring {
            if let Some(watched) = watched.upgrade() {
                watched.life().unwatch(monitor);
            }
        }
        // Joiners last: whatever a joiner does once it hears of the end (a message to a
        // monitoring actor, say) comes after the down notifications in every mailbox.
        for waker in joiners.into_iter().flatten() {
            waker.wake();
        }
    }
}

mod watch;
pub use watch::Monitor;
pub(crate) use watch::{demonitor, link, monitor, unlink};

#[cfg(all(test, not(actors_loom)))]
mod tests;

#[cfg(all(test, actors_loom))]
mod models;
