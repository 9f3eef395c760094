//! The parsed models of what `#[actor]` and `#[interface]` are put on, with their arguments.
//!
//! Parsing is where every user error is found: a model holds only what expands, and the
//! errors found on the way (carried in `Errors` fields, reported with the expansion). The
//! emitters (`crate::emit`) read a model and never report an error of their own. Nothing
//! here builds tokens.

mod actor;
mod actor_impl;
mod actor_struct;
mod errors;
mod handler;
mod hook;
mod impl_options;
mod interface;
mod interface_impl;
mod remote;
mod struct_options;
mod types;

pub(crate) use actor::ActorAttribute;
pub(crate) use actor_impl::ActorImpl;
pub(crate) use actor_struct::ActorStruct;
pub(crate) use errors::Errors;
pub(crate) use handler::Handler;
pub(crate) use hook::{Hook, HookKind};
pub(crate) use interface::Interface;
pub(crate) use interface_impl::InterfaceImpl;
pub(crate) use remote::Remote;
pub(crate) use struct_options::Placement;
