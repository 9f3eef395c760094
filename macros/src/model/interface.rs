//! `#[interface]` on a trait: a set of handler signatures several actor types implement. The
//! trait is not generic, has no supertraits, and holds handlers only, each taking `&self`
//! or `&mut self` and naming fixed types; a bad handler is reported and left out.

use super::errors::Errors;
use super::handler::{Handler, Owner, without_clashes};
use super::remote::Remote;
use super::types::names_self;
use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{FnArg, ItemTrait, TraitItem, TraitItemFn, Type};

/// Names an interface generates besides the handlers' methods.
const GENERATED: &[&str] = &["is_closed", "__of", "__handle"];
const HOOKS: &[&str] = &["on_start", "on_stop", "on_down", "on_link_exit"];

/// The arguments of `#[interface(..)]`: `remote` is the one option, as the actors that
/// implement the interface bring the others.
struct InterfaceOptions {
    remote: Option<syn::Path>,
}

impl Parse for InterfaceOptions {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let args: TokenStream = input.parse()?;
        if args.is_empty() {
            return Ok(InterfaceOptions { remote: None });
        }
        let path = syn::parse2(args.clone())
            .ok()
            .filter(|path: &syn::Path| path.is_ident("remote"))
            .ok_or_else(|| {
                syn::Error::new(
                    args.span(),
                    "#[interface] takes only `remote`: the actors that implement it bring their \
                 other options",
                )
            })?;
        Ok(InterfaceOptions { remote: Some(path) })
    }
}

pub(crate) struct Interface {
    /// Bad handlers, left out of the expansion.
    pub(crate) errors: Errors,
    /// The trait as written.
    pub(crate) item: ItemTrait,
    pub(crate) handlers: Vec<Handler>,
    pub(crate) remote: Remote,
}

impl Interface {
    pub(crate) fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Self> {
        let options: InterfaceOptions = syn::parse2(args)?;
        let item: ItemTrait = syn::parse2(item.clone()).map_err(|_| {
            syn::Error::new(
                item.span(),
                "#[interface] goes on a trait declaring the handlers its actors share",
            )
        })?;
        check_declaration(&item)?;
        let this: Type = syn::parse_quote!(Self);
        let owner = Owner {
            name: &item.ident,
            self_ty: &this,
        };
        let mut errors = Errors::default();
        let mut handlers = Vec::new();
        for member in &item.items {
            let parsed = handler_of(member, &item)
                .and_then(|method| Handler::parse(&method.sig, &method.attrs, &item.vis, &owner));
            match parsed {
                Ok(handler) => handlers.push(handler),
                Err(error) => errors.push(error),
            }
        }
        let handlers = without_clashes(handlers, false, &mut errors);
        let remote = Remote::check(options.remote.as_ref().map(Spanned::span), false, &handlers);
        Ok(Interface {
            errors,
            item,
            handlers,
            remote,
        })
    }
}

/// An interface has one set of fixed types and stands alone: no generics, no supertraits.
fn check_declaration(item: &ItemTrait) -> syn::Result<()> {
    let name = &item.ident;
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            item.generics.span(),
            format!(
                "interface `{name}` cannot be generic: its messages have fixed types (an \
                 interface per instantiation does the same)"
            ),
        ));
    }
    if let Some(bound) = item.supertraits.first() {
        return Err(syn::Error::new(
            bound.span(),
            format!(
                "interface `{name}` cannot have supertraits: an actor implements several \
                 interfaces side by side instead"
            ),
        ));
    }
    if let Some(unsafety) = item.unsafety {
        return Err(syn::Error::new(
            unsafety.span(),
            "an interface is not `unsafe`",
        ));
    }
    Ok(())
}

/// `member` as a handler's method of the interface `item`, or why it cannot be one.
fn handler_of<'a>(member: &'a TraitItem, item: &ItemTrait) -> syn::Result<&'a TraitItemFn> {
    let name = &item.ident;
    let TraitItem::Fn(method) = member else {
        return Err(syn::Error::new(
            member.span(),
            format!(
                "interface `{name}` holds handlers only (`fn` with `&self` or `&mut self`): no \
                 types, constants or macros"
            ),
        ));
    };
    let Some(FnArg::Receiver(receiver)) = method.sig.inputs.first() else {
        return Err(syn::Error::new(
            method.sig.span(),
            format!(
                "`{}` in interface `{name}` takes no `self`: every item of an interface is a \
                 handler, taking `&self` or `&mut self`",
                method.sig.ident
            ),
        ));
    };
    if receiver.reference.is_none() || receiver.colon_token.is_some() {
        return Err(syn::Error::new(
            receiver.span(),
            format!(
                "handler `{}` of interface `{name}` takes `&self` or `&mut self`",
                method.sig.ident
            ),
        ));
    }
    check_name(method, item)?;
    Ok(method)
}

/// A handler's name and types are its own: not a hook's, not `Self`, not a generated name.
fn check_name(method: &TraitItemFn, item: &ItemTrait) -> syn::Result<()> {
    let name = &item.ident;
    let plain = method.sig.ident.to_string();
    if HOOKS.contains(&plain.as_str()) {
        return Err(syn::Error::new(
            method.sig.ident.span(),
            format!(
                "`{plain}` is an actor's hook, not a handler: declare it in the actor's own \
                 `#[actor]` impl"
            ),
        ));
    }
    if let Some(span) = names_self(&method.sig) {
        return Err(syn::Error::new(
            span,
            format!(
                "handler `{plain}` of interface `{name}` names `Self` in its arguments or \
                 reply: every actor behind the interface has its own `Self`, so the types are \
                 fixed ones"
            ),
        ));
    }
    if GENERATED.contains(&plain.as_str()) {
        return Err(syn::Error::new(
            method.sig.ident.span(),
            format!(
                "an interface's handler cannot be named `{plain}`: `#[interface]` generates \
                 that name (the ref's `is_closed` and `__of`, the trait's `__handle`)"
            ),
        ));
    }
    Ok(())
}
