//! [`ExitReason`]: why an actor ended, as `join`, `stop`, monitors, links, supervisors and
//! `on_stop` see it.

use crate::ActorId;

/// Why an actor ended.
///
/// `Normal` and `Stopped` are normal ends ([`is_normal`](Self::is_normal)): they do not
/// propagate through links. Every other reason is abnormal and ends linked actors that do not
/// trap exits.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExitReason {
    /// It stopped itself ([`Context::stop`](crate::Context::stop)) or its last ref was
    /// dropped and it handled what was queued.
    Normal,
    /// It was asked to stop: by a ref's `stop()`, by its supervisor, or by
    /// `DynamicSupervisorRef::terminate_child`.
    Stopped,
    /// A handler or hook panicked; the panic's message.
    Panicked(String),
    /// It was shut down without finishing: its scope ended, its supervisor aborted it past its
    /// shutdown timeout, or it never started (the runtime refused the spawn). `on_stop` did
    /// not run.
    Shutdown,
    /// An actor it was linked to ended abnormally, and it did not trap exits.
    Linked {
        /// The linked actor that ended.
        partner: ActorId,
        /// Why that actor ended.
        reason: Box<ExitReason>,
    },
    /// A remote actor's node died, left, or was cut off from this one (it missed its
    /// heartbeats): what a monitor of a remote actor reports then.
    NodeDown {
        /// The node's name.
        node: String,
    },
    /// A monitored remote actor was not there: no node exposed its name (or its node was
    /// unknown) for a whole heartbeat silence after the monitor began (OTP's `noproc`).
    NotFound,
}

impl ExitReason {
    /// Whether this is a normal end (`Normal` or `Stopped`), which links do not propagate.
    pub fn is_normal(&self) -> bool {
        matches!(self, ExitReason::Normal | ExitReason::Stopped)
    }

    /// The reason's name in metrics: `normal`, `stopped`, `panicked`, `shutdown`, `linked`,
    /// `node_down` or `not_found`.
    pub fn kind(&self) -> &'static str {
        match self {
            ExitReason::Normal => "normal",
            ExitReason::Stopped => "stopped",
            ExitReason::Panicked(_) => "panicked",
            ExitReason::Shutdown => "shutdown",
            ExitReason::Linked { .. } => "linked",
            ExitReason::NodeDown { .. } => "node_down",
            ExitReason::NotFound => "not_found",
        }
    }

    /// The message of a panic payload, as `Panicked` carries it.
    pub(crate) fn panicked(payload: &(dyn std::any::Any + Send)) -> Self {
        let message = if let Some(text) = payload.downcast_ref::<&str>() {
            (*text).to_string()
        } else if let Some(text) = payload.downcast_ref::<String>() {
            text.clone()
        } else {
            "a panic with a payload that is not a string".to_string()
        };
        ExitReason::Panicked(message)
    }
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitReason::Normal => write!(f, "ended normally"),
            ExitReason::Stopped => write!(f, "stopped on request"),
            ExitReason::Panicked(message) => write!(f, "panicked: {message}"),
            ExitReason::Shutdown => write!(f, "shut down"),
            ExitReason::Linked { partner, reason } => {
                write!(f, "its linked actor {partner} ended ({reason})")
            }
            ExitReason::NodeDown { node } => write!(f, "its node `{node}` went down"),
            ExitReason::NotFound => write!(f, "it was not found on any node"),
        }
    }
}
