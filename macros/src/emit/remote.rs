//! The remote glue of `#[actor(remote)]` and `#[interface(remote)]`: what other nodes need to
//! reach the handlers.
//!
//! For handlers under a name `Name`:
//! - `__<Name>Wire`: one serde variant per handler, holding its arguments (what travels),
//!   and an `actors::remote::Protocol` impl naming it with the handlers' schema hash (on the
//!   actor type; on a generated marker `__<Name>Remote` for an interface);
//! - the serving half: for an actor, `impl Remote` (a wire message into the local message)
//!   and `impl Exposable for <Name>Ref` (serving its `actors::Ref`); for an interface,
//!   `impl Served` and `impl Exposable` for `<Name>Ref`, the interface ref;
//! - `<Name>RemoteRef`: per handler the same ask, `tell_` and `try_` methods as the local
//!   ref, plus `monitor()` and `target()`.
//!
//! Generated code names serde through `actors`' re-export (the user needs serde only for
//! their own types), and expands first to a check that the `remote` feature is on.

use super::debug::{MarkerDebug, MessageDebug};
use super::names;
use super::ref_methods::{HandlerMethods, Own, OwnMethods, Sender};
use super::shape::Shape;
use super::signature::positional_names;
use crate::model::{Handler, Interface};
use proc_macro2::{Delimiter, Ident, TokenStream, TokenTree};
use quote::{ToTokens, quote};

/// `#[actor(remote)]`: the protocol on the actor type, `Remote`, and `Exposable` for its ref.
pub(crate) struct RemoteActor<'a>(pub(crate) &'a Shape<'a>);

impl ToTokens for RemoteActor<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = self.0;
        let name = &shape.model.name;
        let self_ty = &shape.self_ty;
        let wire = names::wire(name);
        let local_ref = names::ref_type(name);
        let arms = WireArms {
            handlers: &shape.model.handlers,
            wire: &wire,
            message: &shape.message,
        };
        RemoteProtocol {
            handlers: &shape.model.handlers,
            name,
            vis: &syn::parse_quote!(pub),
            protocol: self_ty,
            wire: &wire,
        }
        .to_tokens(tokens);
        tokens.extend(quote! {
            impl ::actors::remote::Remote for #self_ty {
                #[allow(unreachable_code, unused_variables)]
                fn __message(
                    wire: #wire,
                    responder: &mut ::actors::remote::Responder,
                ) -> <Self as ::actors::Actor>::Message {
                    match wire {
                        #arms
                    }
                }
            }

            impl ::actors::remote::Exposable for #local_ref {
                type Served = ::actors::Ref<#self_ty>;

                fn __served(&self) -> ::actors::Ref<#self_ty> {
                    ::core::clone::Clone::clone(self.inner())
                }
            }
        });
    }
}

/// `#[interface(remote)]`: the protocol on a marker type, and `Served` and `Exposable` for
/// the interface ref (`message` is the interface's message enum).
pub(crate) struct RemoteInterface<'a> {
    pub(crate) model: &'a Interface,
    pub(crate) message: &'a Ident,
}

impl ToTokens for RemoteInterface<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (name, vis) = (&self.model.item.ident, &self.model.item.vis);
        let wire = names::wire(name);
        let marker = names::remote_marker(name);
        let local_ref = names::ref_type(name);
        let arms = WireArms {
            handlers: &self.model.handlers,
            wire: &wire,
            message: self.message,
        };
        let protocol = RemoteProtocol {
            handlers: &self.model.handlers,
            name,
            vis,
            protocol: &quote!(#marker),
            wire: &wire,
        };
        let marker_doc =
            format!("The handlers of the interface `{name}` as they travel (generated).");
        let marker_debug = MarkerDebug(&marker);
        tokens.extend(quote! {
            #[doc = #marker_doc]
            #[doc(hidden)]
            #vis struct #marker;

            #marker_debug

            #protocol

            impl ::actors::remote::Served for #local_ref {
                type Protocol = #marker;

                #[allow(unreachable_code, unused_variables)]
                fn __deliver(
                    &self,
                    wire: #wire,
                    responder: &mut ::actors::remote::Responder,
                ) -> ::core::result::Result<(), ::actors::Error> {
                    self.0.try_send(match wire {
                        #arms
                    })
                }

                fn __label(&self) -> &'static str {
                    self.0.__label()
                }

                fn __is_closed(&self) -> bool {
                    self.0.is_closed()
                }
            }

            impl ::actors::remote::Exposable for #local_ref {
                type Served = #local_ref;

                fn __served(&self) -> #local_ref {
                    ::core::clone::Clone::clone(self)
                }
            }
        });
    }
}

/// The match arms that turn a wire message into `message`'s variant, with replies from
/// `responder`.
struct WireArms<'a> {
    handlers: &'a [Handler],
    wire: &'a Ident,
    message: &'a Ident,
}

impl ToTokens for WireArms<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let (wire, message) = (self.wire, self.message);
        for handler in self.handlers {
            let variant = &handler.variant;
            let cfgs = &handler.cfgs;
            let names = positional_names(handler);
            tokens.extend(quote! {
                #(#cfgs)*
                #wire::#variant(#(#names),*) => #message::#variant(#(#names,)* responder.reply()),
            });
        }
    }
}

/// What actors and interfaces share: the feature check, the wire enum, the `Protocol` impl
/// on `protocol`, and `<name>RemoteRef` speaking it.
struct RemoteProtocol<'a> {
    handlers: &'a [Handler],
    name: &'a Ident,
    vis: &'a syn::Visibility,
    protocol: &'a TokenStream,
    wire: &'a Ident,
}

impl ToTokens for RemoteProtocol<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let Self {
            handlers,
            name,
            vis,
            protocol,
            wire,
        } = self;
        let variants = handlers.iter().map(|handler| {
            let variant = &handler.variant;
            let cfgs = &handler.cfgs;
            let types = handler.arguments.iter().map(|(_, ty)| ty);
            quote!(#(#cfgs)* #variant(#(#types),*))
        });
        let schema = handlers.iter().map(schema_step);
        let protocol_name = name.to_string();
        let debug = MessageDebug {
            generics: quote!(),
            ty: quote!(#wire),
            where_clause: quote!(),
            handlers,
            wrapped: Vec::new(),
            call: false,
        };
        tokens.extend(quote! {
            ::actors::__private::remote_enabled!();

            #[doc(hidden)]
            #[allow(non_camel_case_types, private_interfaces)]
            #[derive(::actors::__private::serde::Serialize, ::actors::__private::serde::Deserialize)]
            #[serde(crate = "::actors::__private::serde")]
            #vis enum #wire {
                #(#variants,)*
            }

            #debug

            impl ::actors::remote::Protocol for #protocol {
                type Wire = #wire;

                const SCHEMA: u32 = {
                    // The actor's or interface's name first: two protocols that happen to share
                    // their handlers' signatures still refuse each other.
                    let mut hash = ::actors::remote::__schema_mix(0x811c_9dc5, #protocol_name);
                    #(#schema)*
                    hash
                };
            }
        });
        RemoteRefStruct(self).to_tokens(tokens);
    }
}

/// The schema hash's step for `handler`: its variant, argument and reply types as text.
fn schema_step(handler: &Handler) -> TokenStream {
    let cfgs = &handler.cfgs;
    let types: Vec<String> = handler
        .arguments
        .iter()
        .map(|(_, ty)| canonical(quote!(#ty)))
        .collect();
    let reply = &handler.reply;
    let signature = format!(
        "{}({})->{}",
        handler.variant,
        types.join(","),
        canonical(quote!(#reply))
    );
    quote! {
        #(#cfgs)*
        {
            hash = ::actors::remote::__schema_mix(hash, #signature);
        }
    }
}

/// `<Name>RemoteRef`, around a `RemoteRef` of the protocol.
struct RemoteRefStruct<'a>(&'a RemoteProtocol<'a>);

impl ToTokens for RemoteRefStruct<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let RemoteProtocol {
            handlers,
            name,
            vis,
            protocol,
            wire,
        } = self.0;
        let remote_ref = names::remote_ref(name);
        let local_ref = names::ref_type(name);
        let sender = Sender::Remote { wire };
        let own = OwnMethods {
            sender: &sender,
            vis: quote!(pub),
            methods: &[Own::Target, Own::Monitor],
        };
        let methods = handlers.iter().map(|handler| HandlerMethods {
            sender: &sender,
            handler,
        });
        let doc = format!(
            "A ref to a `{name}` another node exposes (or this one), from \
             [`Node::lookup`](::actors::remote::Node::lookup): the same asks, `tell_` and \
             `try_` sends as [`{local_ref}`], over NATS (generated by `remote`)."
        );
        tokens.extend(quote! {
            #[doc = #doc]
            #[derive(Clone, Debug)]
            #vis struct #remote_ref(::actors::remote::RemoteRef<#protocol>);

            impl ::actors::remote::RemoteHandle for #remote_ref {
                fn __new(node: &::actors::remote::Node, target: ::actors::remote::Target) -> Self {
                    Self(::actors::remote::RemoteRef::<#protocol>::__new(node, target))
                }
            }

            #[allow(private_interfaces)]
            impl #remote_ref {
                #own

                #(#methods)*
            }
        });
    }
}

/// The text of `tokens`, one space apart, groups walked: the same for the same source on
/// every toolchain (rustc's own printer has changed its spacing between releases), so two
/// builds of one actor agree on its schema.
fn canonical(tokens: TokenStream) -> String {
    let mut out = String::new();
    for tree in tokens {
        match tree {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::None => ("", ""),
                };
                out.push_str(open);
                out.push(' ');
                out.push_str(&canonical(group.stream()));
                out.push_str(close);
            }
            TokenTree::Ident(ident) => out.push_str(&ident.to_string()),
            TokenTree::Punct(punct) => out.push(punct.as_char()),
            TokenTree::Literal(literal) => out.push_str(&literal.to_string()),
        }
        out.push(' ');
    }
    out
}
