//! `Debug` for the public items the attributes generate, so that a user's `#[derive(Debug)]`
//! over a struct holding them compiles, and a crate under
//! `#![deny(missing_debug_implementations)]` can use `#[actor]` and `#[interface]`:
//!
//! - a ref (`<Name>Ref`, `<Name>PoolRef`, an interface's `<Trait>Ref`) shows as its own name
//!   around the ref it wraps, which shows the actor's id (`label#n`) or the pool's label;
//! - a message enum (an actor's, an interface's, a remote wire enum) shows the handler a
//!   message is for and never its arguments, which need not be `Debug` and may be large;
//! - a marker type shows its name.

use super::ref_traits::RefType;
use crate::model::Handler;
use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote};

/// `Debug` for the ref `ty` named `name`: `Name(<the wrapped ref's Debug>)`.
pub(crate) struct RefDebug<'a> {
    pub(crate) ty: &'a RefType,
    pub(crate) name: &'a Ident,
}

impl ToTokens for RefDebug<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let RefType {
            generics,
            ty,
            where_clause,
        } = self.ty;
        let name = self.name.to_string();
        tokens.extend(quote! {
            impl #generics ::core::fmt::Debug for #ty #where_clause {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.debug_tuple(#name).field(&self.0).finish()
                }
            }
        });
    }
}

/// `Debug` for a message enum `ty` whose variants are `handlers`' (each shown as
/// `handler(..)`), then `wrapped` ones holding another message enum (an implemented
/// interface's, shown as `Variant(<its Debug>)`), then, with `call`, the `__Call` variant (a
/// timer's or attached stream's closure).
pub(crate) struct MessageDebug<'a> {
    pub(crate) generics: TokenStream,
    pub(crate) ty: TokenStream,
    pub(crate) where_clause: TokenStream,
    pub(crate) handlers: &'a [Handler],
    pub(crate) wrapped: Vec<Ident>,
    pub(crate) call: bool,
}

impl ToTokens for MessageDebug<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let Self {
            generics,
            ty,
            where_clause,
            handlers,
            wrapped,
            call,
        } = self;
        let handler_arms = handlers.iter().map(|handler| {
            let (variant, cfgs) = (&handler.variant, &handler.cfgs);
            let shown = variant.to_string();
            quote! {
                #(#cfgs)*
                Self::#variant(..) => f.debug_tuple(#shown).finish_non_exhaustive(),
            }
        });
        let wrapped_arms = wrapped.iter().map(|variant| {
            let shown = variant.to_string();
            quote! {
                Self::#variant(ref message) => f.debug_tuple(#shown).field(message).finish(),
            }
        });
        let call_arm = call.then(|| {
            quote! {
                Self::__Call(ref call) => ::core::fmt::Debug::fmt(call, f),
            }
        });
        // `*self`: an enum without variants (an interface with no handlers) still matches.
        tokens.extend(quote! {
            impl #generics ::core::fmt::Debug for #ty #where_clause {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    match *self {
                        #(#handler_arms)*
                        #(#wrapped_arms)*
                        #call_arm
                    }
                }
            }
        });
    }
}

/// `Debug` for the unit struct `name` (a marker type): its name.
pub(crate) struct MarkerDebug<'a>(pub(crate) &'a Ident);

impl ToTokens for MarkerDebug<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let name = self.0;
        let shown = name.to_string();
        tokens.extend(quote! {
            impl ::core::fmt::Debug for #name {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.write_str(#shown)
                }
            }
        });
    }
}
