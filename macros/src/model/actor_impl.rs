//! `#[actor(..)]` on an actor's inherent impl: its handlers and hooks, the interfaces it
//! implements, and whether it is remote. A bad method is reported and left out; a parsed
//! `ActorImpl` expands with the rest.

use super::errors::Errors;
use super::handler::{Handler, Owner, without_clashes};
use super::hook::{Hook, HookKind};
use super::impl_options::ImplOptions;
use super::remote::Remote;
use super::types::BORROWING_ACTOR;
use super::types::{actor_of, resolve_self_in_generics};
use proc_macro2::TokenStream;
use syn::spanned::Spanned;
use syn::{Ident, ImplItem, ImplItemFn, ItemImpl};

pub(crate) struct ActorImpl {
    /// Bad handlers and hooks, left out of the expansion.
    pub(crate) errors: Errors,
    /// The impl as written.
    pub(crate) item: ItemImpl,
    /// The actor's name, as the impl's self type writes it.
    pub(crate) name: Ident,
    /// The self type's generic arguments (`<K, V>` of `Cache<K, V>`).
    pub(crate) self_arguments: syn::PathArguments,
    /// The impl's generics, `Self` in their bounds resolved to the self type.
    pub(crate) generics: syn::Generics,
    pub(crate) handlers: Vec<Handler>,
    pub(crate) hooks: Vec<Hook>,
    /// The interfaces of `implements(..)`, in the order listed.
    pub(crate) implements: Vec<syn::Path>,
    pub(crate) remote: Remote,
    /// The options' error: the expansion is made without the options.
    pub(crate) options_error: Errors,
}

impl ActorImpl {
    pub(crate) fn parse(args: TokenStream, item: ItemImpl) -> syn::Result<Self> {
        let (options, options_error) = match syn::parse2::<ImplOptions>(args) {
            Ok(options) => (options, Errors::default()),
            Err(error) => (ImplOptions::default(), Errors::from(Some(error))),
        };
        if let Some(lifetime) = item.generics.lifetimes().next() {
            return Err(syn::Error::new(lifetime.span(), BORROWING_ACTOR));
        }
        let (name, self_arguments) = actor_of(&item.self_ty, "impl Name { ... }")?;
        let owner = Owner {
            name: &name,
            self_ty: &item.self_ty,
        };
        let mut errors = Errors::default();
        let mut handlers = Vec::new();
        let mut hooks = Vec::new();
        for member in &item.items {
            let ImplItem::Fn(method) = member else {
                continue;
            };
            let Some(receiver) = method.sig.receiver() else {
                // An associated function (a constructor, say): not a handler.
                continue;
            };
            let parsed = check_receiver(method, receiver).and_then(|()| {
                match HookKind::of(&method.sig.ident.to_string()) {
                    Some(kind) => Hook::parse(method, kind).map(|hook| hooks.push(hook)),
                    None => Handler::parse(&method.sig, &method.attrs, &method.vis, &owner)
                        .map(|handler| handlers.push(handler)),
                }
            });
            if let Err(error) = parsed {
                errors.push(error);
            }
        }
        let handlers = without_clashes(handlers, true, &mut errors);
        let generics = resolve_self_in_generics(&item.generics, &name, &item.self_ty);
        let remote = Remote::check(options.remote, !generics.params.is_empty(), &handlers);
        Ok(ActorImpl {
            errors,
            name,
            self_arguments,
            generics,
            handlers,
            hooks,
            implements: options.implements,
            remote,
            options_error,
            item,
        })
    }
}

/// A handler or hook takes `&self` or `&mut self`: the actor keeps its state.
fn check_receiver(method: &ImplItemFn, receiver: &syn::Receiver) -> syn::Result<()> {
    let name = &method.sig.ident;
    if receiver.colon_token.is_some() {
        return Err(syn::Error::new(
            receiver.span(),
            format!("handler `{name}` declares its receiver's type: write `&self` or `&mut self`"),
        ));
    }
    if receiver.reference.is_none() {
        return Err(syn::Error::new(
            receiver.span(),
            format!(
                "handler `{name}` takes `self` by value: a handler takes `&self` or `&mut \
                 self`, since the actor keeps its state between messages"
            ),
        ));
    }
    Ok(())
}
