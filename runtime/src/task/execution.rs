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

/// The three placements a spawn can have, named: what the crate matches on instead of
/// `Shared(bool)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// The work-stealing pool.
    Pool,
    /// A thread of its own, reused by later blocking tasks.
    Blocking,
    /// A thread and ring of its own.
    Dedicated,
}

impl Execution {
    pub(crate) fn placement(self) -> Placement {
        match self {
            Execution::Shared(false) => Placement::Pool,
            Execution::Shared(true) => Placement::Blocking,
            Execution::Dedicated => Placement::Dedicated,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self.placement() {
            Placement::Pool => "shared",
            Placement::Blocking => "blocking",
            Placement::Dedicated => "dedicated",
        }
    }

    pub(crate) fn slot(self) -> usize {
        self.placement() as usize
    }
}
