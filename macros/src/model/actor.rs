//! What `#[actor]` was put on: a struct, its inherent impl, an interface impl, or something
//! it does not go on (kept, with the error, so that its uses report nothing more).

use super::actor_impl::ActorImpl;
use super::actor_struct::ActorStruct;
use super::interface_impl::InterfaceImpl;
use super::types::BORROWING_ACTOR;
use proc_macro2::{Span, TokenStream};
use syn::Item;
use syn::spanned::Spanned;

/// One use of `#[actor]`, parsed with its arguments.
pub(crate) enum ActorAttribute {
    Struct(ActorStruct),
    Impl(ActorImpl),
    InterfaceImpl(InterfaceImpl),
    /// An item `#[actor]` cannot make an actor of: the error, and the item as written.
    Refused {
        error: syn::Error,
        item: TokenStream,
    },
}

impl ActorAttribute {
    pub(crate) fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Self> {
        let parsed: Item = syn::parse2(item.clone()).map_err(|_| {
            syn::Error::new(
                item.span(),
                "#[actor] goes on a struct, or on that struct's inherent `impl` block",
            )
        })?;
        let refused = |error| {
            Ok(ActorAttribute::Refused {
                error,
                item: item.clone(),
            })
        };
        match parsed {
            Item::Struct(structure) => match structure.generics.lifetimes().next() {
                Some(lifetime) => refused(syn::Error::new(lifetime.span(), BORROWING_ACTOR)),
                None => ActorStruct::parse(args, structure).map(ActorAttribute::Struct),
            },
            Item::Impl(block) if block.trait_.is_some() => {
                InterfaceImpl::parse(args, block).map(ActorAttribute::InterfaceImpl)
            }
            Item::Impl(block) => ActorImpl::parse(args, block).map(ActorAttribute::Impl),
            Item::Enum(enumeration) => {
                refused(not_a_struct(enumeration.enum_token.span(), "an enum"))
            }
            Item::Fn(function) => refused(not_a_struct(function.sig.fn_token.span(), "a function")),
            Item::Trait(declaration) => {
                refused(not_a_struct(declaration.trait_token.span(), "a trait"))
            }
            Item::Union(union) => refused(not_a_struct(union.union_token.span(), "a union")),
            other => Err(syn::Error::new(
                other.span(),
                "#[actor] goes on a struct, or on that struct's inherent `impl` block",
            )),
        }
    }
}

fn not_a_struct(span: Span, what: &str) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "#[actor] cannot go on {what}: it goes on a struct (the actor's state), and on that \
             struct's inherent `impl` block (its handlers)"
        ),
    )
}
