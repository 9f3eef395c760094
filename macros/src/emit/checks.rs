//! Compile-time checks that the macro cannot make itself and leaves to the compiler, each
//! spanned where the user wrote the type, so the error points there.

use crate::model::Handler;
use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote_spanned};
use syn::spanned::Spanned;

/// Each argument and reply of `handlers` travels in a message: it must be `Send + 'static`.
/// In a generic impl the types may name its parameters: each check is a function with the
/// impl's `generics` and bounds.
pub(crate) struct SendChecks<'a> {
    pub(crate) handlers: &'a [Handler],
    pub(crate) generics: &'a syn::Generics,
}

impl ToTokens for SendChecks<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (impl_generics, _, where_clause) = self.generics.split_for_impl();
        for handler in self.handlers {
            let cfgs = &handler.cfgs;
            let reply = std::iter::once(&handler.reply);
            for ty in handler.arguments.iter().map(|(_, ty)| ty).chain(reply) {
                tokens.extend(quote_spanned! {ty.span()=>
                    #(#cfgs)*
                    const _: () = {
                        #[allow(dead_code)]
                        fn check #impl_generics () #where_clause {
                            fn handler_types_must_be_send_and_static<T: ::core::marker::Send + 'static>() {}
                            handler_types_must_be_send_and_static::<#ty>();
                        }
                    };
                });
            }
        }
    }
}

/// A pool actor moves between workers: its state `actor` (named `name`) must be `Send`, said
/// where the struct is declared (the check in its generated `__launch` would also catch it,
/// less plainly).
pub(crate) struct PoolSendCheck<'a> {
    pub(crate) name: &'a Ident,
    pub(crate) actor: &'a TokenStream,
    pub(crate) generics: &'a syn::Generics,
}

impl ToTokens for PoolSendCheck<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (impl_generics, _, where_clause) = self.generics.split_for_impl();
        let actor = self.actor;
        tokens.extend(quote_spanned! {self.name.span()=>
            const _: () = {
                #[allow(dead_code)]
                fn check #impl_generics () #where_clause {
                    fn actors_on_the_shared_pool_must_be_send_use_actor_dedicated_for_state_that_is_not<
                        T: ::core::marker::Send,
                    >() {}
                    actors_on_the_shared_pool_must_be_send_use_actor_dedicated_for_state_that_is_not::<#actor>();
                }
            };
        });
    }
}
