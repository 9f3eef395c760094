//! Tasks: the cell and its state machine ([`cell`]), the supervised wrapper and its
//! [`Handle`] ([`handle`]), and the set of live tasks ([`set`]).

pub(crate) mod cell;
pub(crate) mod handle;
pub(crate) mod set;

pub(crate) use cell::{Home, Inbox, Polled, Runnable, Task};
pub use handle::Handle;
pub use set::Tasks;
