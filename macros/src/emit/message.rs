//! A handler as a message: its variant of a message enum, and the arm of `handle` that runs
//! it. Shared by an actor's enum and an interface's.

use super::signature::positional_names;
use crate::model::Handler;
use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote};

/// The variant for a handler: its arguments and its reply channel.
pub(crate) struct MessageVariant<'a>(pub(crate) &'a Handler);

impl ToTokens for MessageVariant<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let handler = self.0;
        let variant = &handler.variant;
        let types = handler.arguments.iter().map(|(_, ty)| ty);
        let reply = &handler.reply;
        let cfgs = &handler.cfgs;
        tokens.extend(quote!(#(#cfgs)* #variant(#(#types,)* ::actors::Reply<#reply>)));
    }
}

/// The `handle` arm that runs `handler` for its variant of the enum `message`, calling the
/// method through `callee` (`<Actor>` or `<Self as Interface>`) and answering the reply
/// (unless the handler answers it itself, a delegated reply).
pub(crate) struct HandleArm<'a> {
    pub(crate) handler: &'a Handler,
    pub(crate) message: &'a Ident,
    pub(crate) callee: &'a TokenStream,
}

impl ToTokens for HandleArm<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let Self {
            handler,
            message,
            callee,
        } = self;
        let variant = &handler.variant;
        let method = &handler.name;
        let names = positional_names(handler);
        let context = handler.takes_context.then(|| quote!(ctx,));
        let delegated = handler.delegated.then(|| quote!(__reply));
        let call = quote!(#callee::#method(self, #context #(#names,)* #delegated));
        let call = if handler.asyncness {
            quote!(#call.await)
        } else {
            call
        };
        let body = if handler.delegated {
            quote!(#call;)
        } else {
            quote!(__reply.send(#call);)
        };
        let cfgs = &handler.cfgs;
        // A remote ask whose asker has given up is not run: its effect could come after the
        // asker was told it failed.
        tokens.extend(quote! {
            #(#cfgs)*
            #message::#variant(#(#names,)* __reply) => {
                if !__reply.__expired() {
                    #body
                }
            }
        });
    }
}
