//! [`Context`]: what a handler reaches besides its actor's state: the runtime context of the
//! actor's task, its own ref and id, children, monitors and links, and the way to stop.

use crate::lifecycle::{self, Monitor, Peer};
use crate::mailbox::Mailbox;
use crate::{Actor, ActorHandle, ActorId, Ref, WeakRef};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// A handler's view of its actor's surroundings. Handlers take it as `ctx: &mut
/// actors::Context<Self>`, the first argument after `self`.
pub struct Context<A: Actor> {
    runtime: runtime::Context,
    mailbox: Arc<Mailbox<A::Message>>,
    stopping: bool,
    /// This incarnation's token: set while its loop takes messages, cleared as the loop
    /// ends. Timers and attachments made here carry it, so that a call of theirs still
    /// queued does nothing on a later incarnation (see `timer`). Made on first use: most
    /// actors never schedule anything, and an allocation per spawn is what spawning costs.
    incarnation: OnceLock<Arc<AtomicBool>>,
    /// The loop stopped taking messages (a token made after that starts cleared).
    ended: AtomicBool,
}

/// Shows the actor's id (`label#n`), its runtime context (label path and node) and whether it
/// is stopping. Reads no lock.
impl<A: Actor> std::fmt::Debug for Context<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("actor", &self.id())
            .field("stopping", &self.stopping)
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}

impl<A: Actor> Context<A> {
    pub(crate) fn new(runtime: runtime::Context, mailbox: Arc<Mailbox<A::Message>>) -> Self {
        Context {
            runtime,
            mailbox,
            stopping: false,
            incarnation: OnceLock::new(),
            ended: AtomicBool::new(false),
        }
    }

    /// Whether `token` is this incarnation's (without making one: a call carrying a token
    /// can only be this incarnation's if the token was made).
    pub(crate) fn is_incarnation(&self, token: &Arc<AtomicBool>) -> bool {
        self.incarnation
            .get()
            .is_some_and(|own| Arc::ptr_eq(own, token))
    }

    /// This incarnation's token (see the field).
    pub(crate) fn incarnation(&self) -> &Arc<AtomicBool> {
        self.incarnation
            .get_or_init(|| Arc::new(AtomicBool::new(!self.ended.load(Ordering::Relaxed))))
    }

    /// The loop stopped taking messages: this incarnation's timers are over.
    pub(crate) fn end_incarnation(&self) {
        // Only the incarnation's own task reaches its context, so nothing makes the token
        // between these two steps.
        self.ended.store(true, Ordering::Relaxed);
        if let Some(token) = self.incarnation.get() {
            token.store(false, Ordering::Release);
        }
    }

    pub(crate) fn mailbox(&self) -> &Arc<Mailbox<A::Message>> {
        &self.mailbox
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping
    }

    /// The runtime context of the actor's task: its clock, network, storage and metrics.
    /// Tasks spawned from it live in the actor's scope and are aborted when it stops.
    pub fn runtime(&self) -> &runtime::Context {
        &self.runtime
    }

    /// A ref to this actor. Like any ref, it keeps the actor reachable while it lives: an
    /// actor that keeps its own ref stops only by [`stop`](Self::stop) or its scope ending.
    pub fn actor_ref(&self) -> A::Ref {
        A::Ref::from(Ref::new(self.mailbox.clone()))
    }

    /// A ref to this actor that does not keep it alive: for timers and self-messages that
    /// must not stop it from ending when nobody else can reach it.
    pub fn weak_ref(&self) -> WeakRef<A> {
        WeakRef::new(&self.mailbox)
    }

    /// This actor's id.
    pub fn id(&self) -> ActorId {
        self.mailbox.life.id()
    }

    /// Monitors `other`: exactly one down notification reaches this actor's `on_down` hook,
    /// in mailbox order, when `other` ends (for a supervised actor: ends for good), with the
    /// reason it ended. If it has already ended, the notification is queued at once, with
    /// that reason. Monitoring costs nothing until used, and one actor may monitor another
    /// several times (each monitor notifies once). Dropping the [`Monitor`] does not cancel
    /// it; [`demonitor`](Self::demonitor) does.
    pub fn monitor(&mut self, other: &impl ActorHandle) -> Monitor {
        let this: Arc<dyn Peer> = self.mailbox.clone();
        lifecycle::monitor(&this, other.__peer().0)
    }

    /// Cancels `monitor`: no down notification for it is handled from now on, even one
    /// already queued.
    pub fn demonitor(&mut self, monitor: Monitor) {
        lifecycle::demonitor(&*self.mailbox, monitor);
    }

    /// Links this actor and `other`, both ways: when either ends abnormally (not
    /// [`is_normal`](crate::ExitReason::is_normal)), the other ends too, with
    /// [`ExitReason::Linked`](crate::ExitReason::Linked), before its next message, unless it
    /// declares an `on_link_exit` hook (it traps exits): that hook then receives every linked
    /// actor's end, normal ones too, in mailbox order. Linking to an actor that already ended
    /// delivers its end at once. Linking twice is linking once; a link fires once.
    pub fn link(&mut self, other: &impl ActorHandle) {
        let this: Arc<dyn Peer> = self.mailbox.clone();
        lifecycle::link(&this, other.__peer().0);
    }

    /// Removes the link to `other`, both ways: from now on neither hears of the other's end
    /// through it, even an end already queued.
    pub fn unlink(&mut self, other: &impl ActorHandle) {
        lifecycle::unlink(&*self.mailbox, &*other.__peer().0);
    }

    /// Stops the actor once the current handler returns, and `on_stop` runs. Unsupervised,
    /// or supervised and not restarted, the mailbox closes: messages still queued are dropped
    /// (their asks resolve to [`Error::Closed`](crate::Error::Closed)). A supervised actor
    /// that its supervisor restarts (a permanent child) keeps its mailbox, and the next
    /// incarnation handles what is queued.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// The actor's label.
    pub fn label(&self) -> &'static str {
        A::LABEL
    }
}
