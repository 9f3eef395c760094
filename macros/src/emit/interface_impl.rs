//! `#[actor] impl Interface for Actor`: the impl as written, and `From<ActorRef>` for the
//! interface's ref, spanned on the interface so that an undeclared one is reported there.

use super::names;
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
        tokens.extend(quote! {
            #item
            #from
        });
        self.options_error.to_tokens(tokens);
    }
}
