//! Time: each worker's timer table ([`timers`]) and the layout of the I/O timeout wheel
//! ([`TimeoutWheel`]). The future that registers on the current worker's table is
//! `worker::sleep`.

pub mod clock;
pub(crate) mod timers;
pub(crate) mod wheel;

pub use timers::Timers;
pub use wheel::TimeoutWheel;
