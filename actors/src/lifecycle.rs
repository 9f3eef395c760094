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
    /// After the end: the reason, if it is none of the common ones `EndedWith` keeps.
    reason: Option<ExitReason>,
}

/// What the end took out of a life, to deliver with no lock held.
pub(crate) struct Finished {
    id: ActorId,
    reason: ExitReason,
    extra: Option<Box<Extra>>,
}

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

    /// Whether the actor has ended.
    /// The callbacks waiting for the end: for the tests of those who add them.
    #[cfg(all(test, not(actors_loom)))]
    pub(crate) fn end_callbacks(&self) -> usize {
        let state = self.state.lock();
        state.extra.as_ref().map_or(0, |extra| extra.on_end.len())
    }

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

    /// Clears a stop request (a supervised actor's next incarnation starts without it).
    pub(crate) fn clear_stop(&self) {
        self.attention.fetch_and(!STOP_REQUESTED, Ordering::SeqCst);
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
                    drop(state);
                    self.consumer_waker.wake();
                    return;
                }
                Queued::Stop => extra.stop_queued = true,
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
            reason: _,
        } = *extra;
        // Signals it will never handle.
        drop((signals, kill));
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

impl Life {
    /// Removes the monitor `monitor` from the watchers of this (watched) actor.
    fn unwatch(&self, monitor: u64) {
        let mut state = self.state.lock();
        if let Some(extra) = state.extra.as_mut() {
            extra.watchers.remove(&monitor);
        }
    }

    /// Removes the link to `partner` from this actor; whether it was there.
    fn drop_link(&self, partner: ActorId) -> bool {
        let mut state = self.state.lock();
        let Some(extra) = state.extra.as_mut() else {
            return false;
        };
        extra.links.remove(&partner.serial()).is_some()
    }
}

/// A monitor set up with [`Context::monitor`](crate::Context::monitor); give it to
/// [`Context::demonitor`](crate::Context::demonitor) to cancel it.
#[derive(Debug)]
pub struct Monitor {
    id: u64,
    watched: ActorId,
    target: Weak<dyn Peer>,
}

impl Monitor {
    /// The monitored actor.
    pub fn actor(&self) -> ActorId {
        self.watched
    }
}

/// `watcher` starts monitoring `target`: exactly one down notification follows, at once if
/// it already ended.
pub(crate) fn monitor(watcher: &Arc<dyn Peer>, target: Arc<dyn Peer>) -> Monitor {
    let id = next_monitor();
    let watched = target.life().id();
    let monitor = Monitor {
        id,
        watched,
        target: Arc::downgrade(&target),
    };
    {
        let mut state = watcher.life().state.lock();
        if state.ended.is_some() {
            // An ended actor (its aborted handler still running) hears of nothing.
            return monitor;
        }
        let extra = state.extra.get_or_insert_with(Box::default);
        extra.monitoring.insert(id, Arc::downgrade(&target));
    }
    let ended = {
        let mut state = target.life().state.lock();
        match state.reason() {
            Some(reason) => Some(reason),
            None => {
                let extra = state.extra.get_or_insert_with(Box::default);
                extra.watchers.insert(id, Arc::downgrade(watcher));
                None
            }
        }
    };
    if let Some(reason) = ended {
        deliver_down(&**watcher, id, watched, reason);
    }
    monitor
}

/// Cancels `monitor`, held by `watcher`: no down notification for it is handled afterwards,
/// even one already queued.
pub(crate) fn demonitor(watcher: &dyn Peer, monitor: Monitor) {
    {
        let mut state = watcher.life().state.lock();
        if let Some(extra) = state.extra.as_mut() {
            extra.monitoring.remove(&monitor.id);
            extra.signals.retain(
                |(_, signal)| !matches!(signal, Queued::Down(down) if down.monitor == monitor.id),
            );
        }
    }
    if let Some(target) = monitor.target.upgrade() {
        target.life().unwatch(monitor.id);
    }
}

/// Links `this` and `other`: when either ends, the other gets its exit. If `other` already
/// ended, `this` gets its exit now.
pub(crate) fn link(this: &Arc<dyn Peer>, other: Arc<dyn Peer>) {
    let this_id = this.life().id();
    let other_id = other.life().id();
    if other_id == this_id {
        return;
    }
    {
        let mut state = this.life().state.lock();
        if state.ended.is_some() {
            // An ended actor (its aborted handler still running) links to nobody.
            return;
        }
        let extra = state.extra.get_or_insert_with(Box::default);
        if extra.links.contains_key(&other_id.serial()) {
            return;
        }
        extra
            .links
            .insert(other_id.serial(), Arc::downgrade(&other));
    }
    let ended = {
        let mut state = other.life().state.lock();
        match state.reason() {
            Some(reason) => Some(reason),
            None => {
                // Keyed by serial: `other` linking to `this` at the same moment leaves one
                // entry either way.
                let extra = state.extra.get_or_insert_with(Box::default);
                extra.links.insert(this_id.serial(), Arc::downgrade(this));
                None
            }
        }
    };
    if let Some(reason) = ended {
        deliver_exit(&**this, other_id, reason);
        return;
    }
    // `this` may have ended between the two sections, its end delivered before `other`
    // listed it: deliver it now. `deliver_exit` admits one of the two deliveries only (the
    // first takes the entry out), so `other` hears of it once either way.
    let ended = this.life().state.lock().reason();
    if let Some(reason) = ended {
        deliver_exit(&*other, this_id, reason);
    }
}

/// Removes the link between `this` and `other`, both ways: neither hears of the other's end
/// through it, even an end already queued.
pub(crate) fn unlink(this: &dyn Peer, other: &dyn Peer) {
    let other_id = other.life().id();
    this.life().drop_link(other_id);
    {
        let mut state = this.life().state.lock();
        if let Some(extra) = state.extra.as_mut() {
            extra.signals.retain(
                |(_, signal)| !matches!(signal, Queued::Exit(exit) if exit.from == other_id),
            );
            if matches!(&extra.kill, Some(Signal::Exit(exit)) if exit.from == other_id) {
                extra.kill = None;
            }
        }
    }
    other.life().drop_link(this.life().id());
}

#[cfg(all(test, not(actors_loom)))]
mod tests {
    use super::*;
    use crate::mailbox::{Mailbox, Received};
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};

    fn mailbox() -> Arc<Mailbox<u32>> {
        let mailbox = Mailbox::new(8, ActorId::next(&"test"));
        mailbox.add_sender();
        mailbox
    }

    fn peer(mailbox: &Arc<Mailbox<u32>>) -> Arc<dyn Peer> {
        mailbox.clone()
    }

    /// What the consumer takes next, shown briefly.
    fn next(consumer: &mut crate::mailbox::Consumer<u32>) -> String {
        match consumer.try_recv() {
            Some(Received::Message(message)) => format!("m{message}"),
            Some(Received::Signal(Signal::Down(down))) => {
                format!("down {} {}", down.id.label(), down.reason.kind())
            }
            Some(Received::Signal(Signal::Exit(exit))) => {
                format!("exit {} {}", exit.from.label(), exit.reason.kind())
            }
            Some(Received::Signal(Signal::Stop)) => "stop".to_string(),
            Some(Received::Stop) => "requested".to_string(),
            Some(Received::Disconnected) => "disconnected".to_string(),
            None => "nothing".to_string(),
        }
    }

    /// A signal is two words, and a running actor's life stays small: both are in every
    /// idle actor (its run loop holds a `Received`; its mailbox a `Life`, one byte of which
    /// keeps the common end reasons, so most ends allocate nothing).
    #[test]
    fn signals_and_lives_stay_small() {
        assert!(std::mem::size_of::<Signal>() <= 2 * std::mem::size_of::<usize>());
        assert!(std::mem::size_of::<Option<EndedWith>>() == 1);
        assert!(
            std::mem::size_of::<Life>() <= 80,
            "{}",
            std::mem::size_of::<Life>()
        );
    }

    /// A signal is taken after the messages queued before it and before those queued after:
    /// mailbox order. Repeated ordered stops collapse into the first.
    #[test]
    fn signals_take_their_turn_in_mailbox_order() {
        let mailbox = mailbox();
        let mut consumer = mailbox.consumer().unwrap();
        mailbox.try_send(1).unwrap();
        mailbox.try_send(2).unwrap();
        request_ordered_stop(&*mailbox);
        mailbox.try_send(3).unwrap();
        request_ordered_stop(&*mailbox);
        let taken: Vec<_> = (0..5).map(|_| next(&mut consumer)).collect();
        assert_eq!(taken, ["m1", "m2", "stop", "m3", "nothing"]);
    }

    /// A stop that finds no signal waiting (kept apart from the queue) and one that finds
    /// one (queued behind it) both keep mailbox order with the signals around them.
    #[test]
    fn stops_keep_their_turn_among_signals() {
        let (watcher, first, second) = (mailbox(), mailbox(), mailbox());
        let _first = monitor(&peer(&watcher), peer(&first));
        let _second = monitor(&peer(&watcher), peer(&second));
        let mut consumer = watcher.consumer().unwrap();
        watcher.try_send(1).unwrap();
        request_ordered_stop(&*watcher);
        first.end(ExitReason::Normal);
        let taken: Vec<_> = (0..4).map(|_| next(&mut consumer)).collect();
        assert_eq!(taken, ["m1", "stop", "down test normal", "nothing"]);

        watcher.try_send(2).unwrap();
        second.end(ExitReason::Stopped);
        watcher.try_send(3).unwrap();
        request_ordered_stop(&*watcher);
        watcher.try_send(4).unwrap();
        let taken: Vec<_> = (0..6).map(|_| next(&mut consumer)).collect();
        assert_eq!(
            taken,
            ["m2", "down test stopped", "m3", "stop", "m4", "nothing"]
        );
    }

    /// A linked actor's abnormal end jumps the queue of a non-trapping actor (it ends it
    /// before its next message); a normal one is dropped. A trapping actor gets both in
    /// mailbox order.
    #[test]
    fn exits_kill_at_once_unless_trapped() {
        for traps in [false, true] {
            let this = mailbox();
            let partner = Mailbox::<u32>::new(8, ActorId::next(&"partner"));
            link(&peer(&this), partner.clone());
            this.life.set_traps_exits(traps);
            let mut consumer = this.consumer().unwrap();
            this.try_send(1).unwrap();
            partner.end(ExitReason::Panicked("boom".into()));
            this.try_send(2).unwrap();
            let taken: Vec<_> = (0..3).map(|_| next(&mut consumer)).collect();
            if traps {
                assert_eq!(taken, ["m1", "exit partner panicked", "m2"]);
            } else {
                assert_eq!(taken, ["exit partner panicked", "m1", "m2"]);
            }
        }
        let this = mailbox();
        let partner = Mailbox::<u32>::new(8, ActorId::next(&"partner"));
        link(&peer(&this), partner.clone());
        let mut consumer = this.consumer().unwrap();
        partner.end(ExitReason::Normal);
        this.try_send(1).unwrap();
        assert_eq!(
            next(&mut consumer),
            "m1",
            "a normal end is not an exit to heed"
        );
        assert_eq!(next(&mut consumer), "nothing");
    }

    /// Both sides of a link fire once: the survivor's end does not echo back, and `unlink`
    /// silences both ways.
    #[test]
    fn a_link_fires_once_and_unlink_is_final() {
        let first = mailbox();
        let second = Mailbox::<u32>::new(8, ActorId::next(&"second"));
        second.add_sender();
        link(&peer(&first), second.clone());
        let mut first_consumer = first.consumer().unwrap();
        let mut second_consumer = second.consumer().unwrap();
        second.end(ExitReason::Shutdown);
        assert_eq!(next(&mut first_consumer), "exit second shutdown");
        first.end(ExitReason::Panicked("after".into()));
        assert_eq!(
            next(&mut second_consumer),
            "disconnected",
            "an ended actor hears nothing"
        );

        let first = mailbox();
        let second = Mailbox::<u32>::new(8, ActorId::next(&"second"));
        link(&peer(&first), second.clone());
        unlink(&*first, &*second);
        let mut consumer = first.consumer().unwrap();
        second.end(ExitReason::Shutdown);
        assert_eq!(next(&mut consumer), "nothing");
    }

    /// A monitor delivers one notification, at once if the target already ended; a
    /// demonitor withdraws one already queued.
    #[test]
    fn monitors_notify_once_and_demonitor_withdraws() {
        let watcher = mailbox();
        let mut consumer = watcher.consumer().unwrap();
        let target = Mailbox::<u32>::new(8, ActorId::next(&"target"));
        let _monitor = monitor(&peer(&watcher), target.clone());
        target.end(ExitReason::Stopped);
        target.end(ExitReason::Normal);
        assert_eq!(next(&mut consumer), "down target stopped");
        assert_eq!(
            next(&mut consumer),
            "nothing",
            "once, with the first reason"
        );

        let _late = monitor(&peer(&watcher), target.clone());
        assert_eq!(next(&mut consumer), "down target stopped", "already ended");

        let other = Mailbox::<u32>::new(8, ActorId::next(&"other"));
        let cancelled = monitor(&peer(&watcher), other.clone());
        other.end(ExitReason::Shutdown);
        demonitor(&*watcher, cancelled);
        assert_eq!(
            next(&mut consumer),
            "nothing",
            "the queued one was withdrawn"
        );
    }

    /// A join resolves with the end's reason, and at once after it; a dropped pending join
    /// frees its slot for the next.
    #[test]
    fn joins_resolve_with_the_reason() {
        let target = mailbox();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let join = || crate::refs::tests_join(peer(&target));
        {
            let mut dropped = pin!(join());
            assert!(dropped.as_mut().poll(&mut cx).is_pending());
        }
        let mut pending = pin!(join());
        assert!(pending.as_mut().poll(&mut cx).is_pending());
        target.end(ExitReason::Stopped);
        assert_eq!(
            pending.as_mut().poll(&mut cx),
            Poll::Ready(ExitReason::Stopped)
        );
        assert_eq!(
            pin!(join()).as_mut().poll(&mut cx),
            Poll::Ready(ExitReason::Stopped)
        );
    }

    /// A joiner is woken after the end's down notifications are queued: whatever it does
    /// once it hears of the end (a message to a watcher, say) comes behind them.
    #[test]
    fn joiners_hear_of_the_end_after_the_watchers() {
        struct Checks {
            watcher: Arc<Mailbox<u32>>,
            down_queued: AtomicBool,
        }
        impl std::task::Wake for Checks {
            fn wake(self: Arc<Self>) {
                let queued = self.watcher.life.attention() & SIGNALS != 0;
                self.down_queued.store(queued, Ordering::SeqCst);
            }
        }
        let (target, watcher) = (mailbox(), mailbox());
        let _monitor = monitor(&peer(&watcher), peer(&target));
        let checks = Arc::new(Checks {
            watcher: watcher.clone(),
            down_queued: AtomicBool::new(false),
        });
        let waker = Waker::from(checks.clone());
        let mut join = pin!(crate::refs::tests_join(peer(&target)));
        assert!(
            join.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        target.end(ExitReason::Normal);
        assert!(
            checks.down_queued.load(Ordering::SeqCst),
            "the joiner was woken before the watcher's down notification was queued"
        );
    }
}

#[cfg(all(test, actors_loom))]
mod models {
    use super::*;
    use crate::mailbox::{Mailbox, Received};

    /// The linked exits `mailbox` holds now, taken by its consumer; it holds nothing else.
    fn exits_heard(mailbox: &Arc<Mailbox<u8>>) -> usize {
        let mut consumer = mailbox.consumer().expect("the first consumer");
        let mut exits = 0;
        while let Some(received) = consumer.try_recv() {
            match received {
                Received::Signal(Signal::Exit(_)) => exits += 1,
                _ => unreachable!("only a linked actor's exit is sent"),
            }
        }
        exits
    }

    /// Two actors link each other at the same moment, then one ends abnormally: the other
    /// (which traps exits) hears of it exactly once.
    #[test]
    fn links_made_from_both_sides_at_once_fire_once() {
        crate::sync::model(|| {
            let a = Mailbox::<u8>::new(2, ActorId::next(&"a"));
            a.life.set_traps_exits(true);
            a.add_sender();
            let b = Mailbox::<u8>::new(2, ActorId::next(&"b"));
            let (a_peer, b_peer): (Arc<dyn Peer>, Arc<dyn Peer>) = (a.clone(), b.clone());
            let other = {
                let (a_peer, b_peer) = (a_peer.clone(), b_peer.clone());
                loom::thread::spawn(move || link(&b_peer, a_peer))
            };
            link(&a_peer, b_peer);
            other.join().unwrap();
            b.end(ExitReason::Panicked("boom".into()));
            assert_eq!(exits_heard(&a), 1, "one link, one exit");
        });
    }

    /// An actor links to another as it ends itself (an aborted handler still running): the
    /// partner hears of the end exactly once, or holds no link to it at all (the link came
    /// too late to be made); never a link that stays silent.
    #[test]
    fn a_link_racing_the_linkers_own_end_is_heard_or_not_made() {
        crate::sync::model(|| {
            let a = Mailbox::<u8>::new(2, ActorId::next(&"a"));
            let b = Mailbox::<u8>::new(2, ActorId::next(&"b"));
            b.life.set_traps_exits(true);
            b.add_sender();
            let a_peer: Arc<dyn Peer> = a.clone();
            let ender = {
                let a = a.clone();
                loom::thread::spawn(move || a.end(ExitReason::Panicked("boom".into())))
            };
            link(&a_peer, b.clone());
            ender.join().unwrap();
            let exits = exits_heard(&b);
            let linked = b
                .life
                .state
                .lock()
                .extra
                .as_ref()
                .is_some_and(|extra| !extra.links.is_empty());
            assert!(
                exits <= 1 && !linked,
                "{exits} exits heard, link left: {linked}"
            );
        });
    }
}
