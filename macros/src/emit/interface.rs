//! `#[interface]`: next to the trait, `<Trait>Message` (a variant per handler, which every
//! implementing actor's message enum carries as one variant, so a send through the interface
//! allocates nothing) and `<Trait>Ref`, an erased ref any implementing actor can stand
//! behind; on the trait, the supertrait `Actor` and a hidden provided `__handle` that
//! dispatches a message to the trait's methods. With `remote`, the remote glue too.

use super::checks::SendChecks;
use super::debug::{MessageDebug, RefDebug};
use super::handler_name::InterfaceHandlerName;
use super::message::{HandleArm, MessageVariant};
use super::names;
use super::ref_methods::{HandlerMethods, Own, OwnMethods, Sender};
use super::ref_traits::{ActorHandleImpl, CloneImpl, RefType};
use super::remote::RemoteInterface;
use crate::model::{Interface, Remote};
use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote};
use syn::{FnArg, TraitItem, TraitItemFn};

impl ToTokens for Interface {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let name = &self.item.ident;
        let message = names::interface_message(name);
        self.errors.to_tokens(tokens);
        InterfaceTrait {
            model: self,
            message: &message,
        }
        .to_tokens(tokens);
        SendChecks {
            handlers: &self.handlers,
            generics: &syn::Generics::default(),
        }
        .to_tokens(tokens);
        InterfaceRef {
            model: self,
            message: &message,
        }
        .to_tokens(tokens);
    }
}

/// The trait as written, with the supertrait `Actor`, `__handle`, a message for actors that
/// list it but do not implement it, and each `async fn` as `-> impl Future`.
struct InterfaceTrait<'a> {
    model: &'a Interface,
    message: &'a Ident,
}

impl ToTokens for InterfaceTrait<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let mut item = self.model.item.clone();
        let name = &item.ident;
        let message = self.message;
        for member in &mut item.items {
            if let TraitItem::Fn(method) = member {
                without_async(method);
            }
        }
        let callee = quote!(<Self as #name>);
        let arms = self.model.handlers.iter().map(|handler| HandleArm {
            handler,
            message,
            callee: &callee,
        });
        item.supertraits.push(syn::parse_quote!(::actors::Actor));
        item.items.push(syn::parse_quote! {
            /// Runs the handler `message` is for (generated: what an implementing actor's
            /// `handle` calls for this interface's variant).
            #[doc(hidden)]
            #[allow(unused_variables)]
            fn __handle(
                &mut self,
                ctx: &mut ::actors::Context<Self>,
                message: #message,
            ) -> impl ::core::future::Future<Output = ()> {
                async move {
                    match message {
                        #(#arms)*
                    }
                }
            }
        });
        let unimplemented = format!(
            "`{{Self}}` lists the interface `{name}` in `#[actor(implements(..))]` but does \
             not implement it"
        );
        let unimplemented_note = format!("write `#[actor] impl {name} for {{Self}} {{ ... }}`");
        item.attrs
            .push(syn::parse_quote!(#[diagnostic::on_unimplemented(
                message = #unimplemented,
                note = #unimplemented_note
            )]));
        item.to_tokens(tokens);
    }
}

/// An async handler is `-> impl Future` in the trait (an impl may still write `async fn`): a
/// public trait's `async fn` cannot promise `Send`, which rustc warns about.
fn without_async(method: &mut TraitItemFn) {
    let Some(asyncness) = method.sig.asyncness.take() else {
        return;
    };
    let output = match &method.sig.output {
        syn::ReturnType::Default => quote!(()),
        syn::ReturnType::Type(_, ty) => quote!(#ty),
    };
    method.sig.output = syn::parse_quote_spanned! {asyncness.span=>
        -> impl ::core::future::Future<Output = #output>
    };
    if let Some(body) = &mut method.default {
        // Every argument moves into the future, as with an `async fn`: one the body leaves
        // unused (a `Reply`, say) is dropped when the future is, not at the call.
        let arguments = method.sig.inputs.iter().filter_map(|input| match input {
            FnArg::Typed(argument) => match &*argument.pat {
                syn::Pat::Ident(ident) if ident.by_ref.is_none() => {
                    let (mutability, name) = (&ident.mutability, &ident.ident);
                    Some(quote!(let #mutability #name = #name;))
                }
                _ => None,
            },
            FnArg::Receiver(_) => None,
        });
        *body = syn::parse_quote!({ async move { #(#arguments)* #body } });
    }
}

/// `<Trait>Message`, `<Trait>Ref` with its methods and trait impls, and the remote glue.
struct InterfaceRef<'a> {
    model: &'a Interface,
    message: &'a Ident,
}

impl ToTokens for InterfaceRef<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (name, vis) = (&self.model.item.ident, &self.model.item.vis);
        let message = self.message;
        let ref_name = names::ref_type(name);
        let variants = self.model.handlers.iter().map(MessageVariant);
        let sender = Sender::Interface {
            interface: name,
            message,
        };
        let own = OwnMethods {
            sender: &sender,
            vis: quote!(pub),
            methods: &[Own::Of, Own::Id, Own::Stop, Own::Join, Own::IsClosed],
        };
        let methods = self.model.handlers.iter().map(|handler| HandlerMethods {
            sender: &sender,
            handler,
        });
        let ty = RefType {
            generics: quote!(),
            ty: quote!(#ref_name),
            where_clause: quote!(),
        };
        let (clone, handle) = (CloneImpl(&ty), ActorHandleImpl(&ty));
        let debug = RefDebug {
            ty: &ty,
            name: &ref_name,
        };
        let message_debug = MessageDebug {
            generics: quote!(),
            ty: quote!(#message),
            where_clause: quote!(),
            handlers: &self.model.handlers,
            wrapped: Vec::new(),
            call: false,
        };
        let handler_name = InterfaceHandlerName {
            handlers: &self.model.handlers,
            message,
        };
        let remote = match &self.model.remote {
            Remote::Off => quote!(),
            Remote::On => RemoteInterface {
                model: self.model,
                message,
            }
            .to_token_stream(),
            Remote::Refused(error) => error.to_compile_error(),
        };
        let message_doc = format!("The messages of the interface [`{name}`] (generated).");
        let ref_doc = format!(
            "A ref to any actor that implements the interface [`{name}`]: one method per \
             handler (an ask), with `tell_`, `try_` and `forward_` forms, as a generated ref \
             has. Made from such an actor's ref with `From`; it keeps the actor reachable, \
             like a ref."
        );
        tokens.extend(quote! {
            #[doc = #message_doc]
            #[doc(hidden)]
            #vis enum #message {
                #(#variants,)*
            }

            #handler_name

            #[doc = #ref_doc]
            #vis struct #ref_name(::actors::__private::ErasedRef<#message>);

            impl #ref_name {
                #own

                #(#methods)*
            }

            #clone
            #debug
            #message_debug

            impl ::actors::Registrable for #ref_name {
                type Weak = ::actors::__private::WeakErasedRef<#message>;

                fn __downgrade(&self) -> Self::Weak {
                    self.0.downgrade()
                }

                fn __upgrade(weak: &Self::Weak) -> ::core::option::Option<Self> {
                    weak.upgrade().map(Self)
                }
            }

            #remote

            #handle
        });
    }
}
