//! `remote` on `#[actor(remote)]` (an actor's handler impl) and `#[interface(remote)]` (an
//! interface): what other nodes need to reach the handlers.
//!
//! For a set of handlers under a name `Name` it generates:
//! - `__<Name>Wire`: one serde variant per handler, holding its arguments (what travels),
//!   and an `actors::remote::Protocol` impl naming it with the handlers' schema hash (on the
//!   actor type; on a generated marker `__<Name>Remote` for an interface);
//! - the serving half: for an actor, `impl Remote` (a wire message into the local message)
//!   and `impl Exposable for <Name>Ref` (serving its `actors::Ref`); for an interface,
//!   `impl Served` and `impl Exposable` for `<Name>Ref`, the interface ref;
//! - `<Name>RemoteRef`: per handler the same ask, `tell_` and `try_` methods as the local
//!   ref, plus `monitor()` and `target()`.
//!
//! Generated code names the crate by absolute paths, serde through `actors`' re-export (the
//! user needs serde only for their own types), and expands first to a check that the
//! `remote` feature is on.

use crate::handler::Handler;
use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use quote::{format_ident, quote};
use syn::ext::IdentExt as _;
use syn::{Generics, Ident, Type, Visibility};

/// `#[actor(remote)]` on the handler impl of the actor `name`.
pub(crate) fn expand(
    handlers: &[Handler],
    name: &Ident,
    self_ty: &Type,
    generics: &Generics,
    message: &Ident,
    remote: Span,
) -> syn::Result<TokenStream> {
    if !generics.params.is_empty() {
        return Err(syn::Error::new(
            remote,
            "a remote actor cannot be generic: its messages must have one type on every node; \
             take `remote` off, or make the actor concrete",
        ));
    }
    check_names(handlers)?;
    let vis: Visibility = syn::parse_quote!(pub);
    let wire = format_ident!("__{}Wire", name);
    let local_ref = format_ident!("{}Ref", name);
    let common = common(handlers, name, &vis, &quote!(#self_ty), &wire);
    let arms = arms(handlers, &wire, &quote!(#message));
    Ok(quote! {
        #common

        impl ::actors::remote::Remote for #self_ty {
            #[allow(unreachable_code, unused_variables)]
            fn __message(
                wire: #wire,
                responder: &mut ::actors::remote::Responder,
            ) -> <Self as ::actors::Actor>::Message {
                match wire {
                    #(#arms,)*
                }
            }
        }

        impl ::actors::remote::Exposable for #local_ref {
            type Served = ::actors::Ref<#self_ty>;

            fn __served(&self) -> ::actors::Ref<#self_ty> {
                ::core::clone::Clone::clone(self.inner())
            }
        }
    })
}

/// `#[interface(remote)]` on the interface `name` (visibility `vis`), whose messages are
/// `message` and whose local ref is `<name>Ref`.
pub(crate) fn expand_interface(
    handlers: &[Handler],
    name: &Ident,
    vis: &Visibility,
    message: &Ident,
) -> syn::Result<TokenStream> {
    check_names(handlers)?;
    let wire = format_ident!("__{}Wire", name);
    let marker = format_ident!("__{}Remote", name);
    let local_ref = format_ident!("{}Ref", name);
    let common = common(handlers, name, vis, &quote!(#marker), &wire);
    let arms = arms(handlers, &wire, &quote!(#message));
    let marker_doc = format!("The handlers of the interface `{name}` as they travel (generated).");
    Ok(quote! {
        #[doc = #marker_doc]
        #[doc(hidden)]
        #vis struct #marker;

        #common

        impl ::actors::remote::Served for #local_ref {
            type Protocol = #marker;

            #[allow(unreachable_code, unused_variables)]
            fn __deliver(
                &self,
                wire: #wire,
                responder: &mut ::actors::remote::Responder,
            ) -> ::core::result::Result<(), ::actors::Error> {
                self.0.try_send(match wire {
                    #(#arms,)*
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
    })
}

/// A handler named like a remote ref's own method would not compile: say so.
fn check_names(handlers: &[Handler]) -> syn::Result<()> {
    for handler in handlers {
        let plain = handler.name.unraw().to_string();
        if plain == "monitor" || plain == "target" {
            return Err(syn::Error::new(
                handler.name.span(),
                format!(
                    "a remote handler cannot be named `{plain}`: its remote ref has a method \
                     of that name; rename the handler"
                ),
            ));
        }
    }
    Ok(())
}

/// The match arms that turn a wire message into `message`'s variant, with replies from
/// `responder`.
fn arms(handlers: &[Handler], wire: &Ident, message: &TokenStream) -> Vec<TokenStream> {
    handlers
        .iter()
        .map(|handler| {
            let variant = &handler.variant;
            let cfgs = &handler.cfgs;
            let names: Vec<_> = (0..handler.arguments.len())
                .map(|index| format_ident!("__argument_{}", index))
                .collect();
            quote! {
                #(#cfgs)*
                #wire::#variant(#(#names),*) => #message::#variant(#(#names,)* responder.reply())
            }
        })
        .collect()
}

/// What actors and interfaces share: the wire enum, the `Protocol` impl on `protocol`, and
/// `<name>RemoteRef` speaking it.
fn common(
    handlers: &[Handler],
    name: &Ident,
    vis: &Visibility,
    protocol: &TokenStream,
    wire: &Ident,
) -> TokenStream {
    let remote_ref = format_ident!("{}RemoteRef", name);
    let local_ref = format_ident!("{}Ref", name);
    let protocol_name = name.to_string();
    let variants = handlers.iter().map(|handler| {
        let variant = &handler.variant;
        let cfgs = &handler.cfgs;
        let types = handler.arguments.iter().map(|(_, ty)| ty);
        quote!(#(#cfgs)* #variant(#(#types),*))
    });
    let schema = handlers.iter().map(|handler| {
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
    });
    let methods = handlers.iter().map(|handler| {
        let variant = &handler.variant;
        let method = &handler.name;
        let plain = method.unraw();
        let tell = format_ident!("tell_{}", plain);
        let attempt = format_ident!("try_{}", plain);
        let reply = &handler.reply;
        let names: Vec<_> = handler.arguments.iter().map(|(name, _)| name).collect();
        let parameters: Vec<_> = handler
            .arguments
            .iter()
            .map(|(name, ty)| quote!(#name: #ty))
            .collect();
        let docs = &handler.docs;
        let cfgs = &handler.cfgs;
        let vis = &handler.vis;
        let tell_doc = format!(
            "Sends `{plain}` without waiting for its reply; waits while this node's NATS write \
             buffer is full. At most once: a full remote mailbox drops it."
        );
        let try_doc = format!(
            "Sends `{plain}` without waiting: [`Error::Full`](::actors::Error::Full) when this \
             node's NATS write buffer is full. At most once: a full remote mailbox drops it."
        );
        quote! {
            #(#cfgs)*
            #(#docs)*
            #vis fn #method(&self, #(#parameters),*) -> ::actors::remote::RemoteAsk<#reply> {
                self.0.__ask(&#wire::#variant(#(#names),*))
            }

            #(#cfgs)*
            #[doc = #tell_doc]
            #vis async fn #tell(&self, #(#parameters),*) -> ::core::result::Result<(), ::actors::Error> {
                self.0.__tell(&#wire::#variant(#(#names),*)).await
            }

            #(#cfgs)*
            #[doc = #try_doc]
            #vis fn #attempt(&self, #(#parameters),*) -> ::core::result::Result<(), ::actors::Error> {
                self.0.__try_tell(&#wire::#variant(#(#names),*))
            }
        }
    });
    let remote_doc = format!(
        "A ref to a `{name}` another node exposes (or this one), from \
         [`Node::lookup`](::actors::remote::Node::lookup): the same asks, `tell_` and `try_` \
         sends as [`{local_ref}`], over NATS (generated by `remote`)."
    );
    quote! {
        ::actors::__private::remote_enabled!();

        #[doc(hidden)]
        #[allow(non_camel_case_types, private_interfaces)]
        #[derive(::actors::__private::serde::Serialize, ::actors::__private::serde::Deserialize)]
        #[serde(crate = "::actors::__private::serde")]
        #vis enum #wire {
            #(#variants,)*
        }

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

        #[doc = #remote_doc]
        #[derive(Clone, Debug)]
        #vis struct #remote_ref(::actors::remote::RemoteRef<#protocol>);

        impl ::actors::remote::RemoteHandle for #remote_ref {
            fn __new(node: &::actors::remote::Node, target: ::actors::remote::Target) -> Self {
                Self(::actors::remote::RemoteRef::<#protocol>::__new(node, target))
            }
        }

        #[allow(private_interfaces)]
        impl #remote_ref {
            /// What the ref reaches: a name, or one node's actor.
            pub fn target(&self) -> &::actors::remote::Target {
                self.0.target()
            }

            /// Resolves with the remote actor's exit reason, or
            /// [`ExitReason::NodeDown`](::actors::ExitReason::NodeDown) when its node goes
            /// down (see [`RemoteRef::monitor`](::actors::remote::RemoteRef::monitor)).
            pub fn monitor(&self) -> ::actors::remote::RemoteMonitor {
                self.0.monitor()
            }

            #(#methods)*
        }
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
