//! `#[interface]` on a trait: a set of handler signatures that several actor types implement
//! (`#[actor] impl Greeter for English { ... }`, with `#[actor(implements(Greeter))]` on the
//! actor's inherent impl), and a ref any of them can stand behind.
//!
//! For `trait Greeter` it generates, next to the trait:
//! - `GreeterMessage`, one variant per handler, which every implementing actor's message enum
//!   carries as one variant (so a send through the interface allocates nothing);
//! - `GreeterRef`, an erased ref with the same ask, `tell_`, `try_` and `forward_` methods as
//!   a generated ref (but no `downgrade` or recipients), `id`, `stop`, `join`, and
//!   `From<ActorRef>` for each implementing actor's ref;
//! - on the trait, the supertrait `Actor` and a hidden provided `__handle` that dispatches a
//!   `GreeterMessage` to the trait's methods (async ones become `-> impl Future` in the
//!   trait; an impl may still write them `async fn`).
//!
//! With `#[interface(remote)]` it also generates `<Trait>RemoteRef` and what a node needs to
//! expose an interface ref (see `remote.rs`).
//!
//! The trait may not be generic, have supertraits or items other than handlers: each is a
//! compile error saying so.

use crate::handler::{Handler, handle_arm, handler, message_variant, ref_methods, without_clashes};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{FnArg, ItemTrait, TraitItem, Type};

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    // `remote` is the one option: the interface's handlers reach other nodes too.
    let remote = if args.is_empty() {
        None
    } else {
        let path: syn::Path = syn::parse2(args.clone())
            .ok()
            .filter(|p: &syn::Path| p.is_ident("remote"))
            .ok_or_else(|| {
                syn::Error::new(
                    args.span(),
                    "#[interface] takes only `remote`: the actors that implement it bring their \
                 other options",
                )
            })?;
        Some(path)
    };
    let mut item: ItemTrait = syn::parse2(item.clone()).map_err(|_| {
        syn::Error::new(
            item.span(),
            "#[interface] goes on a trait declaring the handlers its actors share",
        )
    })?;
    let name = item.ident.clone();
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            item.generics.span(),
            format!(
                "interface `{name}` cannot be generic: its messages have fixed types (an \
                 interface per instantiation does the same)"
            ),
        ));
    }
    if let Some(bound) = item.supertraits.first() {
        return Err(syn::Error::new(
            bound.span(),
            format!(
                "interface `{name}` cannot have supertraits: an actor implements several \
                 interfaces side by side instead"
            ),
        ));
    }
    if let Some(unsafety) = item.unsafety {
        return Err(syn::Error::new(
            unsafety.span(),
            "an interface is not `unsafe`",
        ));
    }
    let this: Type = syn::parse_quote!(Self);
    let mut handlers: Vec<Handler> = Vec::new();
    let mut errors: Option<syn::Error> = None;
    let mut report = |error: syn::Error| match &mut errors {
        Some(errors) => errors.combine(error),
        None => errors = Some(error),
    };
    for member in &mut item.items {
        let TraitItem::Fn(method) = member else {
            report(syn::Error::new(
                member.span(),
                format!(
                    "interface `{name}` holds handlers only (`fn` with `&self` or `&mut \
                     self`): no types, constants or macros"
                ),
            ));
            continue;
        };
        let Some(FnArg::Receiver(receiver)) = method.sig.inputs.first() else {
            report(syn::Error::new(
                method.sig.span(),
                format!(
                    "`{}` in interface `{name}` takes no `self`: every item of an \
                     interface is a handler, taking `&self` or `&mut self`",
                    method.sig.ident
                ),
            ));
            continue;
        };
        if receiver.reference.is_none() || receiver.colon_token.is_some() {
            report(syn::Error::new(
                receiver.span(),
                format!(
                    "handler `{}` of interface `{name}` takes `&self` or `&mut self`",
                    method.sig.ident
                ),
            ));
            continue;
        }
        let plain = method.sig.ident.to_string();
        if ["on_start", "on_stop", "on_down", "on_link_exit"].contains(&plain.as_str()) {
            report(syn::Error::new(
                method.sig.ident.span(),
                format!(
                    "`{plain}` is an actor's hook, not a handler: declare it in the actor's \
                     own `#[actor]` impl"
                ),
            ));
            continue;
        }
        if let Some(span) = names_self(&method.sig) {
            report(syn::Error::new(
                span,
                format!(
                    "handler `{plain}` of interface `{name}` names `Self` in its arguments or \
                     reply: every actor behind the interface has its own `Self`, so the \
                     types are fixed ones"
                ),
            ));
            continue;
        }
        if ["is_closed", "__of", "__handle"].contains(&plain.as_str()) {
            report(syn::Error::new(
                method.sig.ident.span(),
                format!(
                    "an interface's handler cannot be named `{plain}`: `#[interface]` \
                     generates that name (the ref's `is_closed` and `__of`, the trait's \
                     `__handle`)"
                ),
            ));
            continue;
        }
        match handler(&method.sig, &method.attrs, &item.vis, &name, &this) {
            Ok(handler) => handlers.push(handler),
            Err(error) => report(error),
        }
        // An async handler is `-> impl Future` in the trait (an impl may still write `async
        // fn`): a public trait's `async fn` cannot promise `Send`, which rustc warns about.
        if let Some(asyncness) = method.sig.asyncness.take() {
            let output = match &method.sig.output {
                syn::ReturnType::Default => quote!(()),
                syn::ReturnType::Type(_, ty) => quote!(#ty),
            };
            method.sig.output = syn::parse_quote_spanned! {asyncness.span()=>
                -> impl ::core::future::Future<Output = #output>
            };
            if let Some(body) = &mut method.default {
                // Every argument moves into the future, as with an `async fn`: one the body
                // leaves unused (a `Reply`, say) is dropped when the future is, not at the
                // call.
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
    }
    let handlers = without_clashes(handlers, false, &mut report);
    let errors = errors.map(syn::Error::into_compile_error);
    let vis = &item.vis;
    let message = format_ident!("{}Message", name);
    let ref_name = format_ident!("{}Ref", name);
    let variants = handlers.iter().map(message_variant);
    let callee = quote!(<Self as #name>);
    let arms = handlers
        .iter()
        .map(|handler| handle_arm(handler, &quote!(#message), &callee));
    let methods = handlers.iter().map(|handler| {
        let reply = &handler.reply;
        ref_methods(
            handler,
            &quote!(#message),
            &quote!(::actors::ErasedAsk<'_, #message, #reply>),
            false,
        )
    });
    let checks = handlers.iter().flat_map(|handler| {
        let reply = std::iter::once(&handler.reply);
        let cfgs = &handler.cfgs;
        handler.arguments.iter().map(|(_, ty)| ty).chain(reply).map(move |ty| {
            quote::quote_spanned! {ty.span()=>
                #(#cfgs)*
                const _: () = {
                    #[allow(dead_code)]
                    fn check() {
                        fn handler_types_must_be_send_and_static<T: ::core::marker::Send + 'static>() {}
                        handler_types_must_be_send_and_static::<#ty>();
                    }
                };
            }
        })
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
        "`{{Self}}` lists the interface `{name}` in `#[actor(implements(..))]` but does not \
         implement it"
    );
    let unimplemented_note = format!("write `#[actor] impl {name} for {{Self}} {{ ... }}`");
    item.attrs
        .push(syn::parse_quote!(#[diagnostic::on_unimplemented(
            message = #unimplemented,
            note = #unimplemented_note
        )]));
    let remote = match remote {
        Some(_) => match crate::remote::expand_interface(&handlers, &name, vis, &message) {
            Ok(tokens) => tokens,
            Err(error) => error.into_compile_error(),
        },
        None => quote!(),
    };
    let message_doc = format!("The messages of the interface [`{name}`] (generated).");
    let ref_doc = format!(
        "A ref to any actor that implements the interface [`{name}`]: one method per \
         handler (an ask), with `tell_`, `try_` and `forward_` forms, as a generated ref has. \
         Made from such an actor's ref with `From`; it keeps the actor reachable, like a ref."
    );
    Ok(quote! {
        #errors
        #item

        #(#checks)*

        #[doc = #message_doc]
        #[doc(hidden)]
        #vis enum #message {
            #(#variants,)*
        }

        #[doc = #ref_doc]
        #vis struct #ref_name(::actors::__private::ErasedRef<#message>);

        impl #ref_name {
            /// The interface ref of `actor` (what the generated `From` impls call).
            #[doc(hidden)]
            pub fn __of<A: #name + ::actors::__private::Implements<#message>>(
                actor: &::actors::Ref<A>,
            ) -> Self {
                Self(::actors::__private::ErasedRef::new(
                    actor,
                    <A as ::actors::__private::Implements<#message>>::wrap,
                ))
            }

            /// The id of the actor behind it.
            pub fn id(&self) -> ::actors::ActorId {
                self.0.id()
            }

            /// Asks the actor to stop after the messages queued before this call (see
            /// [`Ref::stop`](::actors::Ref::stop)).
            pub fn stop(&self) -> ::actors::Join {
                self.0.stop()
            }

            /// Resolves with the actor's exit reason whenever it ends (see
            /// [`Ref::join`](::actors::Ref::join)).
            pub fn join(&self) -> ::actors::Join {
                self.0.join()
            }

            /// Whether the actor has stopped for good.
            pub fn is_closed(&self) -> bool {
                self.0.is_closed()
            }

            #(#methods)*
        }

        impl ::core::clone::Clone for #ref_name {
            fn clone(&self) -> Self {
                Self(::core::clone::Clone::clone(&self.0))
            }
        }

        impl ::core::fmt::Debug for #ref_name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Debug::fmt(&self.0, f)
            }
        }

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

        impl ::actors::ActorHandle for #ref_name {
            fn actor_id(&self) -> ::actors::ActorId {
                self.0.id()
            }

            fn __peer(&self) -> ::actors::PeerHandle {
                ::actors::ActorHandle::__peer(&self.0)
            }
        }
    })
}

/// Where `sig` names `Self` in an argument or its reply, if it does (the receiver and a
/// context argument may).
fn names_self(sig: &syn::Signature) -> Option<proc_macro2::Span> {
    struct Finder(Option<proc_macro2::Span>);
    impl<'a> syn::visit::Visit<'a> for Finder {
        fn visit_path(&mut self, path: &'a syn::Path) {
            if let Some(first) = path.segments.first()
                && first.ident == "Self"
            {
                self.0.get_or_insert(first.ident.span());
            }
            syn::visit::visit_path(self, path);
        }
    }
    let mut finder = Finder(None);
    for (index, input) in sig.inputs.iter().enumerate().skip(1) {
        if let FnArg::Typed(argument) = input {
            if index == 1 && crate::handler::is_context(&argument.ty) {
                continue;
            }
            syn::visit::visit_type(&mut finder, &argument.ty);
        }
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        syn::visit::visit_type(&mut finder, ty);
    }
    finder.0
}
