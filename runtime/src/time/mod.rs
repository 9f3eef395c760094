//! Time: each worker's timer table ([`timers`]), the [`Sleep`] future, and the layout of the
//! I/O timeout wheel ([`TimeoutWheel`]).

pub(crate) mod sleep;
pub(crate) mod timers;
pub(crate) mod wheel;

pub use sleep::Sleep;
pub use timers::Timers;
pub use wheel::TimeoutWheel;
