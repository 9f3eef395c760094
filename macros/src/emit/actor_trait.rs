//! `impl Actor` for an actor: its message and ref types, its launch on its placement, the
//! `handle` match over every variant of its message enum, and the hooks it overrides.

use super::handler_name::ActorHandlerName;
use super::message::HandleArm;
use super::shape::Shape;
use crate::model::{Hook, HookKind};
use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};

pub(crate) struct ActorTraitImpl<'a>(pub(crate) &'a Shape<'a>);

impl ToTokens for ActorTraitImpl<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let shape = self.0;
        let (message, message_ty) = (&shape.message, &shape.message_ty);
        let (self_ty, ref_ty) = (&shape.self_ty, &shape.ref_ty);
        let (impl_generics, _, where_clause) = shape.model.generics.split_for_impl();
        let callee = quote!(<#self_ty>);
        let arms = shape.model.handlers.iter().map(|handler| HandleArm {
            handler,
            message,
            callee: &callee,
        });
        let interface_arms = shape.interfaces().map(|(interface, variant, _)| {
            quote! {
                #message::#variant(message) => <Self as #interface>::__handle(self, ctx, message).await,
            }
        });
        let hooks = shape
            .model
            .hooks
            .iter()
            .map(|hook| HookMethod { hook, self_ty });
        let handler_name = ActorHandlerName {
            handlers: &shape.model.handlers,
            message,
            message_ty,
            interface_variants: shape.interfaces().map(|(_, variant, _)| variant).collect(),
        };
        tokens.extend(quote! {
            impl #impl_generics ::actors::Actor for #self_ty #where_clause {
                type Message = #message_ty;
                type Ref = #ref_ty;

                fn __call(call: ::actors::__private::Call<Self>) -> #message_ty {
                    #message::__Call(call)
                }

                fn __launch(
                    scope: ::actors::__private::runtime::Context,
                    launch: ::actors::__private::Launch<Self>,
                ) -> ::actors::__private::runtime::Handle<()> {
                    // The concrete type is named here: on the pool, this is where the compiler
                    // sees whether the incarnation's future (the handlers' included) is `Send`.
                    <<Self as ::actors::Declared>::__Placed as ::actors::__private::Place<_>>::launch(
                        scope,
                        launch,
                        ::actors::__private::Launch::<Self>::run,
                    )
                }

                #[allow(unused_variables)]
                async fn handle(&mut self, ctx: &mut ::actors::Context<Self>, message: #message_ty) {
                    match message {
                        #(#arms)*
                        #(#interface_arms)*
                        #message::__Call(call) => call.run(self, ctx),
                    }
                }

                #(#hooks)*

                #handler_name
            }
        });
    }
}

/// The `Actor` trait's hook method that calls the impl's hook of the same name, passing what
/// it takes.
struct HookMethod<'a> {
    hook: &'a Hook,
    self_ty: &'a TokenStream,
}

impl ToTokens for HookMethod<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let hook = self.hook;
        let (method, parameters, arguments, unused) = self.signature();
        let context = hook.takes_context.then(|| quote!(ctx,));
        let cfgs = &hook.cfgs;
        let self_ty = self.self_ty;
        let call = quote!(<#self_ty>::#method(self, #context #arguments));
        let call = if hook.asyncness {
            quote!(#call.await;)
        } else {
            quote!(#call;)
        };
        let traps = (hook.kind == HookKind::LinkExit)
            .then(|| quote!(#(#cfgs)* const TRAPS_EXITS: bool = true;));
        tokens.extend(quote! {
            #traps
            #(#cfgs)*
            async fn #method(&mut self, ctx: &mut ::actors::Context<Self> #parameters) {
                #unused
                #call
            }
        });
    }
}

impl HookMethod<'_> {
    /// The trait method's name and extra parameters, the arguments passed on, and what
    /// marks the parameters the hook does not take as used.
    fn signature(
        &self,
    ) -> (
        proc_macro2::Ident,
        TokenStream,
        TokenStream,
        Option<TokenStream>,
    ) {
        let hook = self.hook;
        match hook.kind {
            HookKind::Start => (
                format_ident!("on_start"),
                quote!(),
                quote!(),
                (!hook.takes_context).then(|| quote!(let _ = ctx;)),
            ),
            HookKind::Stop => (
                format_ident!("on_stop"),
                quote!(, reason: &::actors::ExitReason),
                if hook.takes_reason {
                    quote!(reason)
                } else {
                    quote!()
                },
                Some(match (hook.takes_context, hook.takes_reason) {
                    (false, false) => quote!(let _ = (ctx, reason);),
                    (false, true) => quote!(let _ = ctx;),
                    (true, false) => quote!(let _ = reason;),
                    (true, true) => quote!(),
                }),
            ),
            HookKind::Down | HookKind::LinkExit => (
                format_ident!(
                    "{}",
                    if hook.kind == HookKind::Down {
                        "on_down"
                    } else {
                        "on_link_exit"
                    }
                ),
                quote!(, id: ::actors::ActorId, reason: ::actors::ExitReason),
                quote!(id, reason),
                (!hook.takes_context).then(|| quote!(let _ = ctx;)),
            ),
        }
    }
}
