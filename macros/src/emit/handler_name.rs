//! The name of the handler a message is for, which the `tracing` feature of actors puts on
//! the span of each message handled and on an ask's timeout event: `Actor::__handler_name`
//! for an actor's message enum, and an inherent `__handler_name` on an interface's, which
//! the actor's delegates to. Both are wrapped in `::actors::__private::if_tracing!`, which
//! keeps them only when actors has the feature: without it, nothing of this is compiled.

use crate::model::Handler;
use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote};
use syn::ext::IdentExt;

/// The match arms naming each handler's variant of the enum `message` by the method's name.
struct Arms<'a> {
    handlers: &'a [Handler],
    message: &'a Ident,
}

impl ToTokens for Arms<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let message = self.message;
        for handler in self.handlers {
            let (variant, cfgs) = (&handler.variant, &handler.cfgs);
            let name = handler.name.unraw().to_string();
            tokens.extend(quote!(#(#cfgs)* #message::#variant(..) => #name,));
        }
    }
}

/// `Actor::__handler_name` in an actor's `impl Actor`: its handlers by name, an implemented
/// interface's variant by the interface's handler, a closure run on the actor as `call`.
pub(crate) struct ActorHandlerName<'a> {
    pub(crate) handlers: &'a [Handler],
    pub(crate) message: &'a Ident,
    pub(crate) message_ty: &'a TokenStream,
    /// The enum's variants that hold an interface's messages.
    pub(crate) interface_variants: Vec<Ident>,
}

impl ToTokens for ActorHandlerName<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (message, message_ty) = (self.message, self.message_ty);
        let arms = Arms {
            handlers: self.handlers,
            message,
        };
        let interfaces = &self.interface_variants;
        tokens.extend(quote! {
            ::actors::__private::if_tracing! {
                fn __handler_name(message: &#message_ty) -> &'static str {
                    match *message {
                        #arms
                        #(#message::#interfaces(ref message) => message.__handler_name(),)*
                        #message::__Call(..) => "call",
                    }
                }
            }
        });
    }
}

/// The inherent `__handler_name` of an interface's message enum `message`.
pub(crate) struct InterfaceHandlerName<'a> {
    pub(crate) handlers: &'a [Handler],
    pub(crate) message: &'a Ident,
}

impl ToTokens for InterfaceHandlerName<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let message = self.message;
        let arms = Arms {
            handlers: self.handlers,
            message,
        };
        tokens.extend(quote! {
            ::actors::__private::if_tracing! {
                impl #message {
                    /// The name of the handler this message is for (generated).
                    #[doc(hidden)]
                    pub fn __handler_name(&self) -> &'static str {
                        match *self {
                            #arms
                        }
                    }
                }
            }
        });
    }
}
