//! The names of generated items, each derived from the actor's or interface's name (with its
//! span, so an error about a missing item points at that name). The struct half and the impl
//! half of an actor, and an actor and the interfaces it implements, meet through these names
//! alone.

use proc_macro2::Ident;
use quote::format_ident;
use syn::ext::IdentExt as _;

/// `<Name>Ref`: an actor's ref, or an interface's.
pub(crate) fn ref_type(name: &Ident) -> Ident {
    format_ident!("{}Ref", name)
}

/// `<Name>PoolRef`: the ref of a pool of the actor.
pub(crate) fn pool_ref(actor: &Ident) -> Ident {
    format_ident!("{}PoolRef", actor)
}

/// `__<Name>Message`: an actor's message enum (hidden: only its ref sends it).
pub(crate) fn actor_message(actor: &Ident) -> Ident {
    format_ident!("__{}Message", actor)
}

/// `<Name>Message`: an interface's message enum, which implementing actors' enums carry.
pub(crate) fn interface_message(interface: &Ident) -> Ident {
    format_ident!("{}Message", interface)
}

/// The variant of an actor's message enum carrying the `index`th interface it implements
/// (by position: two interfaces may share a last segment, `a::Store` and `b::Store`).
pub(crate) fn interface_variant(index: usize) -> Ident {
    format_ident!("__Interface{}", index)
}

/// `__<Name>Wire`: the handlers' arguments as they travel to another node.
pub(crate) fn wire(name: &Ident) -> Ident {
    format_ident!("__{}Wire", name)
}

/// `<Name>RemoteRef`: a ref to an actor or interface another node exposes.
pub(crate) fn remote_ref(name: &Ident) -> Ident {
    format_ident!("{}RemoteRef", name)
}

/// `__<Name>Remote`: the type an interface's remote protocol is implemented on.
pub(crate) fn remote_marker(interface: &Ident) -> Ident {
    format_ident!("__{}Remote", interface)
}

/// `path` with its last segment renamed by `rename` (`api::Greeter` to `api::GreeterRef`).
pub(crate) fn sibling(path: &syn::Path, rename: impl FnOnce(&Ident) -> Ident) -> syn::Path {
    let mut path = path.clone();
    let last = path.segments.last_mut().expect("a path has a segment");
    last.ident = rename(&last.ident);
    path
}

/// A handler's method with `prefix`: `tell_<handler>`, `try_<handler>`, `forward_<handler>`.
pub(crate) fn prefixed(prefix: &str, handler: &Ident) -> Ident {
    format_ident!("{}{}", prefix, handler.unraw())
}

/// `<handler>_recipient`.
pub(crate) fn recipient(handler: &Ident) -> Ident {
    format_ident!("{}_recipient", handler.unraw())
}
