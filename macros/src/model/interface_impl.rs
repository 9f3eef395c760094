//! `#[actor] impl Interface for Actor { ... }`: an actor implementing an interface. The
//! trait's own declaration (`#[interface]`) checks the handlers; this checks that the impl
//! is one of a declared interface for an actor of this module, and reads the handlers the
//! impl defines, which the actor's own refs get methods for.

use super::errors::Errors;
use super::handler::{Handler, Owner};
use super::hook::HookKind;
use super::impl_options::interface_name;
use super::types::BORROWING_ACTOR;
use super::types::actor_of;
use proc_macro2::TokenStream;
use syn::spanned::Spanned;
use syn::{Ident, ItemImpl};

/// Traits of the standard library an actor may implement, none of them an interface.
const STANDARD_TRAITS: &[&str] = &[
    "Clone",
    "Copy",
    "Debug",
    "Default",
    "Display",
    "Drop",
    "Eq",
    "From",
    "Hash",
    "Into",
    "Iterator",
    "Ord",
    "PartialEq",
    "PartialOrd",
    "Send",
    "Sync",
    "TryFrom",
];

pub(crate) struct InterfaceImpl {
    /// The impl as written.
    pub(crate) item: ItemImpl,
    /// The actor's name and generic arguments, as the impl's self type writes them.
    pub(crate) actor: Ident,
    pub(crate) self_arguments: syn::PathArguments,
    /// The interface's path as written, and its last segment's name.
    pub(crate) interface: syn::Path,
    pub(crate) interface_name: Ident,
    /// The handlers the impl defines (every required one, and the defaults it overrides),
    /// `Self` resolved to the actor, visible as `pub`: the actor's ref and pool ref get a
    /// method for each, as the interface's ref has. One the trait refuses is left out here
    /// without an error, which the trait's own expansion reports.
    pub(crate) handlers: Vec<Handler>,
    /// Options were given, which it takes none of: the expansion is made without them.
    pub(crate) options_error: Errors,
}

impl InterfaceImpl {
    pub(crate) fn parse(args: TokenStream, item: ItemImpl) -> syn::Result<Self> {
        let (_, interface, _) = item.trait_.as_ref().expect("a trait impl");
        if let Some(lifetime) = item.generics.lifetimes().next() {
            return Err(syn::Error::new(lifetime.span(), BORROWING_ACTOR));
        }
        let (actor, self_arguments) = actor_of(&item.self_ty, "impl Interface for Name { ... }")?;
        let interface_name = interface_name(interface)?.clone();
        // A standard trait is never an interface: say so, rather than let the generated code
        // miss its `<Trait>Ref` (which is what an undeclared interface of one's own reports).
        if STANDARD_TRAITS.contains(&interface_name.to_string().as_str()) {
            return Err(syn::Error::new(
                interface.span(),
                format!(
                    "`{interface_name}` is not an interface: #[actor] goes on the actor's \
                     inherent `impl` block, or on `impl Interface for Actor` for a trait \
                     declared with `#[interface]`; take #[actor] off this impl"
                ),
            ));
        }
        let options_error = (!args.is_empty()).then(|| {
            syn::Error::new(
                args.span(),
                "#[actor] on an interface impl takes no options",
            )
        });
        let owner = Owner {
            name: &actor,
            self_ty: &item.self_ty,
        };
        let public: syn::Visibility = syn::parse_quote!(pub);
        let handlers = item
            .items
            .iter()
            .filter_map(|member| match member {
                syn::ImplItem::Fn(method) => Some(method),
                _ => None,
            })
            .filter(|method| {
                method.sig.receiver().is_some()
                    && HookKind::of(&method.sig.ident.to_string()).is_none()
            })
            .filter_map(|method| Handler::parse(&method.sig, &method.attrs, &public, &owner).ok())
            .collect();
        Ok(InterfaceImpl {
            handlers,
            interface: interface.clone(),
            interface_name,
            actor,
            self_arguments,
            options_error: Errors::from(options_error),
            item,
        })
    }
}
