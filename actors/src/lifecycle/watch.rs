//! Who watches an actor's end: monitors (one down notification each, cancellable with
//! `demonitor`) and links (an exit each way, removable with `unlink`). Both are kept in the
//! watched and the watching actors' lives, under the invariants of the module above: a
//! notification is queued only while its monitor or link is still listed, and taken out of
//! the list in the same critical section.

use super::*;

impl Life {
    /// Removes the monitor `monitor` from the watchers of this (watched) actor.
    pub(super) fn unwatch(&self, monitor: u64) {
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
