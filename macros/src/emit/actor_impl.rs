//! The impl half of an actor: the handler types' checks, the message enum (with a variant per
//! handler, per implemented interface, and for calls), `Implements` per interface, the
//! `Actor` impl, the remote glue, and the handler methods of `<Name>Ref` and
//! `<Name>PoolRef`, which the struct half declares.

use super::actor_trait::ActorTraitImpl;
use super::checks::SendChecks;
use super::debug::MessageDebug;
use super::message::MessageVariant;
use super::names;
use super::ref_methods::{HandlerMethods, Own, OwnMethods, Sender};
use super::ref_traits::{ActorHandleImpl, RefType};
use super::remote::RemoteActor;
use super::shape::Shape;
use crate::model::{ActorImpl, Remote};
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

impl ToTokens for ActorImpl {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = Shape::of(self);
        self.errors.to_tokens(tokens);
        self.item.to_tokens(tokens);
        SendChecks {
            handlers: &self.handlers,
            generics: &self.generics,
        }
        .to_tokens(tokens);
        MessageEnum(&shape).to_tokens(tokens);
        ImplementsImpls(&shape).to_tokens(tokens);
        ActorTraitImpl(&shape).to_tokens(tokens);
        match &self.remote {
            Remote::Off => {}
            Remote::On => RemoteActor(&shape).to_tokens(tokens),
            Remote::Refused(error) => error.to_compile_error().to_tokens(tokens),
        }
        RefImpls(&shape).to_tokens(tokens);
        self.options_error.to_tokens(tokens);
    }
}

/// `__<Name>Message`: what the actor's mailbox holds.
struct MessageEnum<'a>(&'a Shape<'a>);

impl ToTokens for MessageEnum<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = self.0;
        let (message, self_ty) = (&shape.message, &shape.self_ty);
        let generics = &shape.model.generics;
        let (params, where_clause) = (&generics.params, &generics.where_clause);
        let variants = shape.model.handlers.iter().map(MessageVariant);
        let interface_variants = shape
            .interfaces()
            .map(|(_, variant, messages)| quote!(#variant(#messages)));
        let doc = format!(
            "The messages of [`{}`]'s handlers (generated).",
            shape.model.name
        );
        let (impl_generics, _, impl_where) = generics.split_for_impl();
        let debug = MessageDebug {
            generics: impl_generics.to_token_stream(),
            ty: shape.message_ty.clone(),
            where_clause: impl_where.to_token_stream(),
            handlers: &shape.model.handlers,
            wrapped: shape.interfaces().map(|(_, variant, _)| variant).collect(),
            call: true,
        };
        tokens.extend(quote! {
            #[doc = #doc]
            #[doc(hidden)]
            #[allow(non_camel_case_types, private_interfaces, private_bounds)]
            pub enum #message<#params> #where_clause {
                #(#variants,)*
                #(#interface_variants,)*
                /// A closure run on the actor: a timer's tick, an attached stream's item.
                __Call(::actors::__private::Call<#self_ty>),
            }

            #debug
        });
    }
}

/// `Implements<Message>` per interface: how its messages become the actor's.
struct ImplementsImpls<'a>(&'a Shape<'a>);

impl ToTokens for ImplementsImpls<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = self.0;
        let (message, message_ty, self_ty) = (&shape.message, &shape.message_ty, &shape.self_ty);
        let (impl_generics, _, where_clause) = shape.model.generics.split_for_impl();
        for (_, variant, messages) in shape.interfaces() {
            tokens.extend(quote! {
                impl #impl_generics ::actors::__private::Implements<#messages> for #self_ty #where_clause {
                    fn wrap(message: #messages) -> #message_ty {
                        #message::#variant(message)
                    }
                }
            });
        }
    }
}

/// The methods of `<Name>Ref` and `<Name>PoolRef` for the handlers, and both refs'
/// `Registrable` and `ActorHandle`.
struct RefImpls<'a>(&'a Shape<'a>);

impl ToTokens for RefImpls<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = self.0;
        let model = shape.model;
        let (self_ty, ref_ty) = (&shape.self_ty, &shape.ref_ty);
        let (impl_generics, _, where_clause) = model.generics.split_for_impl();
        let sender = Sender::Actor {
            actor: self_ty,
            message: &shape.message,
            interface: None,
        };
        let own = OwnMethods {
            sender: &sender,
            vis: quote!(pub),
            methods: &[Own::Id, Own::Stop, Own::Join, Own::Downgrade],
        };
        let methods = model.handlers.iter().map(|handler| HandlerMethods {
            sender: &sender,
            handler,
        });
        let pool = Sender::Pool {
            actor: self_ty,
            message: &shape.message,
            interface: None,
        };
        let pool_methods = model.handlers.iter().map(|handler| HandlerMethods {
            sender: &pool,
            handler,
        });
        // Here, not with `as_pool`: it needs the actor's `Actor` impl, which an actor with no
        // impl half lacks (that error says so; this would add another).
        let pool_own = OwnMethods {
            sender: &pool,
            vis: quote!(pub),
            methods: &[Own::Id],
        };
        let pool_name = names::pool_ref(&model.name);
        let self_arguments = &model.self_arguments;
        let handle = ActorHandleImpl(&RefType {
            generics: impl_generics.to_token_stream(),
            ty: ref_ty.clone(),
            where_clause: where_clause.to_token_stream(),
        });
        let pool_handle = ActorHandleImpl(&RefType {
            generics: impl_generics.to_token_stream(),
            ty: quote!(#pool_name #self_arguments),
            where_clause: where_clause.to_token_stream(),
        });
        tokens.extend(quote! {
            #[allow(private_interfaces)]
            impl #impl_generics #ref_ty #where_clause {
                #own

                #(#methods)*
            }

            #[allow(private_interfaces)]
            impl #impl_generics #pool_name #self_arguments #where_clause {
                #pool_own

                #(#pool_methods)*
            }

            impl #impl_generics ::actors::Registrable for #ref_ty #where_clause {
                type Weak = ::actors::WeakRef<#self_ty>;

                fn __downgrade(&self) -> Self::Weak {
                    self.0.downgrade()
                }

                fn __upgrade(weak: &Self::Weak) -> ::core::option::Option<Self> {
                    weak.__upgrade_ref().map(::core::convert::From::from)
                }
            }

            #handle

            impl #impl_generics ::actors::Registrable for #pool_name #self_arguments #where_clause {
                type Weak = <::actors::PoolRef<#self_ty> as ::actors::Registrable>::Weak;

                fn __downgrade(&self) -> Self::Weak {
                    ::actors::Registrable::__downgrade(&self.0)
                }

                fn __upgrade(weak: &Self::Weak) -> ::core::option::Option<Self> {
                    <::actors::PoolRef<#self_ty> as ::actors::Registrable>::__upgrade(weak)
                        .map(::core::convert::From::from)
                }
            }

            #pool_handle
        });
    }
}
