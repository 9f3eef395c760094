//! The `tracing` feature's spans and events, in one place so that their names, fields and
//! levels are written once (the README's "Tracing" section lists them). Compiled only with
//! the feature: every call site is behind `#[cfg(feature = "tracing")]`, so without it no
//! span is built and no callsite is registered.
//!
//! Every span and event names its actor by `actor` (the label) and `id` (`label#n`); an
//! exit's or a failure's reason by `reason` (its [`kind`](ExitReason::kind), for filters)
//! and `detail` (its text, the panic message among it).

use crate::{ActorId, ExitReason};
use std::time::Duration;

/// The span of one incarnation of the actor `id` (its `incarnation`-th on its mailbox, from
/// 1; a supervised child's restarts count up): entered on every poll of its run loop.
pub(crate) fn incarnation(id: ActorId, incarnation: u32) -> tracing::Span {
    tracing::info_span!("actor", actor = id.label(), id = %id, incarnation)
}

/// The span of one message handled by the actor `id`, through its handler `handler` (the
/// method's name; `call` for a timer's tick or a stream's item).
pub(crate) fn message(id: ActorId, handler: &'static str) -> tracing::Span {
    tracing::debug_span!("message", actor = id.label(), id = %id, handler)
}

/// The actor's `on_start` returned.
pub(crate) fn started(id: ActorId, incarnation: u32) {
    tracing::debug!(actor = id.label(), id = %id, incarnation, "actor started");
}

/// An incarnation ended with `reason`: ERROR for a panic, WARN for another abnormal end
/// (a linked actor's), DEBUG for a normal end or a shutdown.
pub(crate) fn exited(id: ActorId, incarnation: u32, reason: &ExitReason) {
    let kind = reason.kind();
    match reason {
        ExitReason::Panicked(_) => tracing::error!(
            actor = id.label(), id = %id, incarnation, reason = kind, detail = %reason,
            "actor exited"
        ),
        ExitReason::Normal | ExitReason::Stopped | ExitReason::Shutdown => tracing::debug!(
            actor = id.label(), id = %id, incarnation, reason = kind, detail = %reason,
            "actor exited"
        ),
        _ => tracing::warn!(
            actor = id.label(), id = %id, incarnation, reason = kind, detail = %reason,
            "actor exited"
        ),
    }
}

/// The supervisor `supervisor` restarts its child `child`, which ended with `reason`: its
/// `restart`-th restart (from 1; the child's incarnations so far), after `delay` (its
/// backoff; zero for none).
pub(crate) fn restarting(
    supervisor: &'static str,
    child: ActorId,
    reason: &ExitReason,
    restart: u64,
    delay: Duration,
) {
    tracing::info!(
        supervisor,
        actor = child.label(),
        id = %child,
        reason = reason.kind(),
        detail = %reason,
        restart,
        delay = ?delay,
        "supervisor restarts a child"
    );
}

/// The supervisor `supervisor` gave up: its child `child` ended with `reason`, one restart
/// more than `intensity` allows; it stops its children and escalates.
pub(crate) fn gave_up(
    supervisor: &'static str,
    child: ActorId,
    reason: &ExitReason,
    (restarts, within): (usize, Duration),
) {
    tracing::error!(
        supervisor,
        actor = child.label(),
        id = %child,
        reason = reason.kind(),
        detail = %reason,
        restarts,
        within = ?within,
        "supervisor gave up"
    );
}

/// An ask to the actor `id` passed its deadline before its reply came; `handler` is the
/// handler asked (empty for an ask through an interface ref or a recipient).
pub(crate) fn ask_timed_out(id: ActorId, handler: &'static str) {
    tracing::warn!(actor = id.label(), id = %id, handler, "ask timed out");
}
