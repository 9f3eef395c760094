//! The struct half of an actor: `impl Declared` (placement, mailbox, label), the pool's `Send`
//! check, `<Name>Ref` and `<Name>PoolRef` with their trait impls, and `spawn`/`spawn_with`.
//! The ref types are declared here, with the struct's visibility; their handler methods come
//! from the impl half.

use super::checks::PoolSendCheck;
use super::debug::RefDebug;
use super::names;
use super::ref_methods::{Own, OwnMethods, Sender};
use super::ref_traits::{CloneImpl, FromImpl, RefType};
use crate::model::{ActorStruct, Placement};
use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, format_ident, quote};

/// What every item of the struct half names.
struct Shape<'a> {
    model: &'a ActorStruct,
    name: &'a Ident,
    /// `Name<T, ..>`.
    this: TokenStream,
    /// The struct's generics, with `Name<..>: Actor` when it has any: a generic ref names
    /// `Ref<Name<..>>`, which needs it.
    bounded: syn::Generics,
    ref_name: Ident,
    pool_name: Ident,
}

impl ToTokens for ActorStruct {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = Shape::of(self);
        self.errors.to_tokens(tokens);
        self.item.to_tokens(tokens);
        DeclaredImpl(&shape).to_tokens(tokens);
        if self.on_pool() {
            PoolSendCheck {
                name: shape.name,
                actor: &shape.this,
                generics: &self.generics,
            }
            .to_tokens(tokens);
        }
        RefStruct(&shape).to_tokens(tokens);
        PoolRefStruct(&shape).to_tokens(tokens);
        InnerAccessor(&shape).to_tokens(tokens);
        SpawnMethods(&shape).to_tokens(tokens);
    }
}

impl<'a> Shape<'a> {
    fn of(model: &'a ActorStruct) -> Self {
        let name = &model.item.ident;
        let (_, type_generics, _) = model.generics.split_for_impl();
        let this = quote!(#name #type_generics);
        let mut bounded = model.generics.clone();
        if !model.generics.params.is_empty() {
            bounded
                .make_where_clause()
                .predicates
                .push(syn::parse_quote!(#this: ::actors::Actor));
        }
        Shape {
            model,
            name,
            this,
            bounded,
            ref_name: names::ref_type(name),
            pool_name: names::pool_ref(name),
        }
    }

    /// `ty` (a ref type of the actor) as its impls name it.
    fn ref_type(&self, ty: &Ident) -> RefType {
        let (impl_generics, type_generics, _) = self.model.generics.split_for_impl();
        let where_clause = &self.bounded.where_clause;
        RefType {
            generics: impl_generics.to_token_stream(),
            ty: quote!(#ty #type_generics),
            where_clause: where_clause.to_token_stream(),
        }
    }
}

/// `impl Declared`: what the struct's options say.
struct DeclaredImpl<'a>(&'a Shape<'a>);

impl ToTokens for DeclaredImpl<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let model = self.0.model;
        let this = &self.0.this;
        let (impl_generics, _, where_clause) = model.generics.split_for_impl();
        let (label, mailbox) = (&model.label, model.mailbox);
        let (placement, placed) = match model.placement {
            Placement::Pool => (quote!(Pool), quote!(::actors::__private::OnPool)),
            Placement::Dedicated => (quote!(Dedicated), quote!(::actors::__private::OnItsThread)),
            Placement::Blocking => (quote!(Blocking), quote!(::actors::__private::OnItsThread)),
        };
        let ask_timeout = model.ask_timeout.map(|millis| {
            quote! {
                const ASK_TIMEOUT: ::core::option::Option<::core::time::Duration> =
                    ::core::option::Option::Some(::core::time::Duration::from_millis(#millis));
            }
        });
        let panic_fails_runner = model.panic_fails_runner.then(|| {
            quote!(
                const PANIC_FAILS_RUNNER: bool = true;
            )
        });
        tokens.extend(quote! {
            impl #impl_generics ::actors::Declared for #this #where_clause {
                const LABEL: &'static str = #label;
                const MAILBOX: usize = #mailbox;
                const PLACEMENT: ::actors::Placement = ::actors::Placement::#placement;
                #ask_timeout
                #panic_fails_runner
                type __Placed = #placed;
            }
        });
    }
}

/// `<Name>Ref`, around an `actors::Ref<Name>`.
struct RefStruct<'a>(&'a Shape<'a>);

impl ToTokens for RefStruct<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let Shape {
            model,
            name,
            this,
            bounded,
            ref_name,
            ..
        } = self.0;
        let (vis, params) = (&model.item.vis, &model.generics.params);
        let where_clause = &bounded.where_clause;
        let doc = format!(
            "A ref to the actor [`{name}`]: one method per handler (an ask), with `tell_`, \
             `try_` and `forward_` forms. Cheap to clone; the actor stops once every ref is \
             dropped."
        );
        let ty = self.0.ref_type(ref_name);
        let from = FromImpl {
            ty: &ty,
            wrapped: quote!(::actors::Ref<#this>),
            parameter: format_ident!("inner"),
        };
        let clone = CloneImpl(&ty);
        let debug = RefDebug {
            ty: &ty,
            name: ref_name,
        };
        tokens.extend(quote! {
            #[doc = #doc]
            #vis struct #ref_name<#params>(::actors::Ref<#this>) #where_clause;

            #clone
            #from
            #debug
        });
    }
}

/// `<Name>PoolRef`, around an `actors::PoolRef<Name>`, with `as_pool`.
struct PoolRefStruct<'a>(&'a Shape<'a>);

impl ToTokens for PoolRefStruct<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let Shape {
            model,
            name,
            this,
            bounded,
            pool_name,
            ..
        } = self.0;
        let (vis, params) = (&model.item.vis, &model.generics.params);
        let where_clause = &bounded.where_clause;
        let doc = format!(
            "A pool of [`{name}`] actors behind one ref (see [`actors::Pool`](::actors::Pool)): \
             the handler methods of [`{name}Ref`] (the same ask, with `.timeout` and \
             `.queued`, `tell_`, `forward_`, `try_`, and those of the interfaces it \
             implements), each routed to a member by the pool's routing; `id()` is the \
             pool's (its supervisor's), by which a registry holds it; `as_pool()` gives the \
             [`PoolRef`](::actors::PoolRef) for `route_by`, `resize` and `stop`."
        );
        let ty = self.0.ref_type(pool_name);
        let from = FromImpl {
            ty: &ty,
            wrapped: quote!(::actors::PoolRef<#this>),
            parameter: format_ident!("pool"),
        };
        let message = names::actor_message(name);
        let as_pool = OwnMethods {
            sender: &Sender::Pool {
                actor: this,
                message: &message,
                interface: None,
            },
            vis: vis.to_token_stream(),
            methods: &[Own::AsPool],
        };
        let clone = CloneImpl(&ty);
        let debug = RefDebug {
            ty: &ty,
            name: pool_name,
        };
        let RefType {
            generics,
            ty,
            where_clause: ref_where,
        } = &ty;
        tokens.extend(quote! {
            #[doc = #doc]
            #vis struct #pool_name<#params>(::actors::PoolRef<#this>) #where_clause;

            #clone
            #from

            impl #generics #ty #ref_where {
                #as_pool
            }

            #debug
        });
    }
}

/// `inner()` on `<Name>Ref`: declared with the struct, as the ref's field is.
struct InnerAccessor<'a>(&'a Shape<'a>);

impl ToTokens for InnerAccessor<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = self.0;
        let message = names::actor_message(shape.name);
        let inner = OwnMethods {
            sender: &Sender::Actor {
                actor: &shape.this,
                message: &message,
                interface: None,
            },
            vis: shape.model.item.vis.to_token_stream(),
            methods: &[Own::Inner],
        };
        let RefType {
            generics,
            ty,
            where_clause,
        } = shape.ref_type(&shape.ref_name);
        tokens.extend(quote! {
            impl #generics #ty #where_clause {
                #inner
            }
        });
    }
}

/// `spawn` and `spawn_with` on the actor's type.
struct SpawnMethods<'a>(&'a Shape<'a>);

impl ToTokens for SpawnMethods<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let Shape {
            model,
            this,
            ref_name,
            ..
        } = self.0;
        let (impl_generics, type_generics, where_clause) = model.generics.split_for_impl();
        let vis = &model.item.vis;
        let label = &model.label;
        let spawn_bound = (!model.generics.params.is_empty())
            .then(|| quote!(Self: ::actors::Actor<Ref = #ref_name #type_generics>));
        let spawn_doc = format!(
            "Runs this actor in a child scope of `context` named `{label}`, and returns its ref."
        );
        let spawn_with_doc = if model.on_pool() {
            format!(
                "Runs the actor `factory` builds (called where it runs) in a child scope of \
                 `context` named `{label}`, and returns its ref."
            )
        } else {
            format!(
                "Runs the actor `factory` builds on the actor's own thread, in a child scope of \
                 `context` named `{label}`, and returns its ref: its state need not be `Send`, \
                 as it never leaves that thread."
            )
        };
        tokens.extend(quote! {
            impl #impl_generics #this #where_clause {
                #[doc = #spawn_doc]
                ///
                /// The actor is built by the caller and moved to where it runs, so it must be
                /// `Send`; `spawn_with` builds one that is not on its own thread.
                #vis fn spawn<'__moved: 'static>(self, context: &::actors::__private::runtime::Context) -> #ref_name #type_generics
                where
                    ::actors::__private::Moved<'__moved, Self>: ::core::marker::Send,
                    #spawn_bound
                {
                    ::actors::__private::spawn_moved(::actors::__private::Moved::new(self), context)
                }

                #[doc = #spawn_with_doc]
                #vis fn spawn_with(
                    context: &::actors::__private::runtime::Context,
                    factory: impl ::core::ops::FnOnce() -> Self + ::core::marker::Send + 'static,
                ) -> #ref_name #type_generics
                where
                    #spawn_bound
                {
                    ::actors::spawn_with(context, factory)
                }
            }
        });
    }
}
