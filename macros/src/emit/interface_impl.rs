//! `#[actor] impl Interface for Actor`: the impl as written, `From<ActorRef>` for the
//! interface's ref, spanned on the interface so that an undeclared one is reported there,
//! and the methods of the handlers the impl defines on the actor's ref and pool ref, which
//! send the interface's messages as the interface's ref does.

use super::names;
use super::ref_methods::{HandlerMethods, Sender};
use crate::model::InterfaceImpl;
use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;

impl ToTokens for InterfaceImpl {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (actor, interface_name) = (&self.actor, &self.interface_name);
        let interface = &self.interface;
        let self_arguments = &self.self_arguments;
        let interface_ref = names::sibling(interface, names::ref_type);
        let ref_name = names::ref_type(actor);
        let (impl_generics, _, where_clause) = self.item.generics.split_for_impl();
        let note = format!(
            "`{interface_name}` must be declared with `#[interface]` (which generates \
             `{interface_name}Ref`) for `#[actor] impl {interface_name} for {actor}`"
        );
        let from = quote_spanned! {interface.span()=>
            impl #impl_generics ::core::convert::From<#ref_name #self_arguments> for #interface_ref #where_clause {
                #[doc = #note]
                fn from(actor: #ref_name #self_arguments) -> Self {
                    #interface_ref::__of(actor.inner())
                }
            }
        };
        let item = &self.item;
        let self_ty = &item.self_ty;
        let actor_ty = quote!(#self_ty);
        let message = names::actor_message(actor);
        let interface_message = names::sibling(interface, names::interface_message);
        let sender = Sender::Actor {
            actor: &actor_ty,
            message: &message,
            interface: Some(&interface_message),
        };
        let pool = Sender::Pool {
            actor: &actor_ty,
            message: &message,
            interface: Some(&interface_message),
        };
        let methods = self.handlers.iter().map(|handler| HandlerMethods {
            sender: &sender,
            handler,
        });
        let pool_methods = self.handlers.iter().map(|handler| HandlerMethods {
            sender: &pool,
            handler,
        });
        let pool_name = names::pool_ref(actor);
        tokens.extend(quote! {
            #item
            #from

            #[allow(private_interfaces)]
            impl #impl_generics #ref_name #self_arguments #where_clause {
                #(#methods)*
            }

            #[allow(private_interfaces)]
            impl #impl_generics #pool_name #self_arguments #where_clause {
                #(#pool_methods)*
            }
        });
        self.options_error.to_tokens(tokens);
    }
}
