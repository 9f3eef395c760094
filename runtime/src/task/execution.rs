//! Where a task runs: the placement a context spawns with.

/// Where a spawned task runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Execution {
    /// On the work-stealing pool (`false`), or on a thread of its own because it blocks
    /// (`true`).
    Shared(bool),
    /// On a thread and ring of its own.
    Dedicated,
}

impl Default for Execution {
    fn default() -> Self {
        Execution::Shared(false)
    }
}

impl Execution {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Execution::Shared(false) => "shared",
            Execution::Shared(true) => "blocking",
            Execution::Dedicated => "dedicated",
        }
    }

    pub(crate) fn slot(self) -> usize {
        match self {
            Execution::Shared(false) => 0,
            Execution::Shared(true) => 1,
            Execution::Dedicated => 2,
        }
    }
}
