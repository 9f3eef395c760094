//! Tasks: where one runs ([`Execution`]), the cell and its state machine ([`cell`]), the join
//! slot a task shares with its [`Handle`] ([`join`], [`handle`]), and the set of live tasks
//! ([`set`]).

pub(crate) mod cell;
mod execution;
pub(crate) mod handle;
pub(crate) mod join;
pub(crate) mod set;
mod state;

pub(crate) use cell::{Home, Inbox, Polled, Runnable, Task};
pub use execution::Execution;
pub(crate) use execution::Placement;
pub use handle::Handle;
pub use set::Tasks;
