//! `#[actor(remote)]` on an actor's handler impl: what other nodes need to reach it.
//!
//! Generates, for an actor `Name` whose handlers `handlers` are:
//! - `__<Name>Wire`: one serde variant per handler, holding its arguments (what travels);
//! - `impl actors::remote::Remote for Name`: a wire message into the local message, with
//!   replies a `Responder` sends back;
//! - `impl actors::remote::Exposable for <Name>Ref`, so a node can expose the actor;
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
use syn::{Generics, Ident, Type};

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
    for handler in handlers {
        let plain = handler.name.unraw().to_string();
        if plain == "monitor" || plain == "target" {
            return Err(syn::Error::new(
                handler.name.span(),
                format!(
                    "a remote actor's handler cannot be named `{plain}`: its remote ref has a \
                     method of that name; rename the handler"
                ),
            ));
        }
    }
    let wire = format_ident!("__{}Wire", name);
    let local_ref = format_ident!("{}Ref", name);
    let remote_ref = format_ident!("{}RemoteRef", name);
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
    let arms = handlers.iter().map(|handler| {
        let variant = &handler.variant;
        let cfgs = &handler.cfgs;
        let names: Vec<_> = (0..handler.arguments.len())
            .map(|index| format_ident!("__argument_{}", index))
            .collect();
        quote! {
            #(#cfgs)*
            #wire::#variant(#(#names),*) => #message::#variant(#(#names,)* responder.reply())
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
        let parameters = handler
            .arguments
            .iter()
            .map(|(name, ty)| quote!(#name: #ty));
        let parameters: Vec<_> = parameters.collect();
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
        "A ref to a [`{name}`] another node exposes (or this one), from \
         [`Node::lookup`](::actors::remote::Node::lookup): the same asks, `tell_` and `try_` \
         sends as [`{local_ref}`], over NATS (generated by `#[actor(remote)]`)."
    );
    Ok(quote! {
        ::actors::__private::remote_enabled!();

        #[doc(hidden)]
        #[allow(non_camel_case_types, private_interfaces)]
        #[derive(::actors::__private::serde::Serialize, ::actors::__private::serde::Deserialize)]
        #[serde(crate = "::actors::__private::serde")]
        pub enum #wire {
            #(#variants,)*
        }

        impl ::actors::remote::Remote for #self_ty {
            type Wire = #wire;

            const SCHEMA: u32 = {
                let mut hash: u32 = 0x811c_9dc5;
                #(#schema)*
                hash
            };

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
            type Actor = #self_ty;

            fn __weak(&self) -> ::actors::WeakRef<#self_ty> {
                self.downgrade()
            }
        }

        #[doc = #remote_doc]
        #[derive(Clone, Debug)]
        pub struct #remote_ref(::actors::remote::RemoteRef<#self_ty>);

        impl ::actors::remote::RemoteHandle for #remote_ref {
            fn __new(node: &::actors::remote::Node, target: ::actors::remote::Target) -> Self {
                Self(::actors::remote::RemoteRef::<#self_ty>::__new(node, target))
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
    })
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
