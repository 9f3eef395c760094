//! What `#[actor]` and `#[interface]` share about handlers: how a method's signature becomes
//! a handler (its message variant, argument and reply types, context and delegated reply),
//! the checks on it, and the methods a ref gets for it.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::ext::IdentExt as _;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, Pat, ReturnType, Type};

/// Names the generated ref or actor already has: no handler may take them.
pub(crate) const RESERVED: &[&str] = &[
    "inner",
    "spawn",
    "spawn_with",
    "clone",
    "id",
    "stop",
    "join",
    "downgrade",
    "as_pool",
];

/// One handler, as the impl (or the interface) declares it.
pub(crate) struct Handler {
    pub(crate) name: Ident,
    pub(crate) variant: Ident,
    pub(crate) asyncness: bool,
    pub(crate) takes_context: bool,
    /// It takes a `Reply<R>` last (a delegated reply): `R` is the ask's reply, and the
    /// handler, not the generated arm, answers.
    pub(crate) delegated: bool,
    /// Argument names (as written, or generated for patterns) and types, `Self` resolved.
    pub(crate) arguments: Vec<(Ident, Type)>,
    pub(crate) reply: Type,
    pub(crate) docs: Vec<syn::Attribute>,
    /// `#[cfg]` attributes: they apply to everything generated for it. (`#[cfg_attr]` is
    /// left on the method alone: what it adds, such as `#[inline]`, may not fit a variant.)
    pub(crate) cfgs: Vec<syn::Attribute>,
    pub(crate) vis: syn::Visibility,
}

/// Whether `ty` is `&mut ...Context<...>`: the handler's context parameter.
pub(crate) fn is_context(ty: &Type) -> bool {
    let Type::Reference(reference) = ty else {
        return false;
    };
    if reference.mutability.is_none() {
        return false;
    }
    let Type::Path(path) = &*reference.elem else {
        return false;
    };
    path.path
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "Context")
}

pub(crate) fn check_generics(sig: &syn::Signature) -> syn::Result<()> {
    let generics = &sig.generics;
    if !generics.params.is_empty() || generics.where_clause.is_some() {
        let span = if generics.params.is_empty() {
            generics.where_clause.span()
        } else {
            generics.params.span()
        };
        return Err(syn::Error::new(
            span,
            format!(
                "handler `{}` cannot be generic: each handler's message has fixed types",
                sig.ident
            ),
        ));
    }
    Ok(())
}

/// `R` if `ty` is `Reply<R>` or `actors::Reply<R>`: a delegated reply.
pub(crate) fn reply_of(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    // `Reply`, `actors::Reply` or `::actors::Reply`: another crate's `Reply` stays an
    // ordinary argument.
    let segments: Vec<_> = path.path.segments.iter().collect();
    let segment = match segments.as_slice() {
        [only] if path.path.leading_colon.is_none() => *only,
        [krate, only] if krate.ident == "actors" && krate.arguments.is_empty() => *only,
        _ => return None,
    };
    if path.qself.is_some() || segment.ident != "Reply" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(arguments) = &segment.arguments else {
        return None;
    };
    match arguments.args.iter().collect::<Vec<_>>().as_slice() {
        [syn::GenericArgument::Type(reply)] => Some(reply.clone()),
        _ => None,
    }
}

/// Whether `ty` is a path whose last segment is `name` (such as `actors::ActorId`).
pub(crate) fn is_named(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == name && segment.arguments.is_empty()),
        _ => false,
    }
}

/// Whether `ty` is `&name` (shared, any lifetime).
pub(crate) fn is_reference_to(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Reference(reference) => {
            reference.mutability.is_none() && is_named(&reference.elem, name)
        }
        _ => false,
    }
}

/// The handler `sig` declares (with `attrs` and `vis`), `Self` in its types resolved to
/// `self_ty` (named `actor`).
pub(crate) fn handler(
    sig: &syn::Signature,
    attrs: &[syn::Attribute],
    vis: &syn::Visibility,
    actor: &Ident,
    self_ty: &Type,
) -> syn::Result<Handler> {
    check_generics(sig)?;
    let name = sig.ident.clone();
    let plain = name.unraw().to_string();
    if RESERVED.contains(&plain.as_str()) {
        return Err(syn::Error::new(
            name.span(),
            format!(
                "a handler cannot be named `{plain}`: `#[actor]` generates that name (the \
                 ref's `inner`, `clone`, `id`, `stop`, `join` and `downgrade`, the pool \
                 ref's `as_pool`, the actor's `spawn` and `spawn_with`)"
            ),
        ));
    }
    let mut arguments = Vec::new();
    let mut takes_context = false;
    let mut delegated: Option<Type> = None;
    let count = sig.inputs.len() - 1;
    for (index, input) in sig.inputs.iter().skip(1).enumerate() {
        let FnArg::Typed(argument) = input else {
            continue;
        };
        if index == 0 && is_context(&argument.ty) {
            takes_context = true;
            continue;
        }
        if let Some(reply) = reply_of(&argument.ty) {
            if index + 1 != count {
                return Err(syn::Error::new(
                    argument.ty.span(),
                    format!(
                        "handler `{name}` takes its `Reply` before other arguments: the reply \
                         handle is the last argument"
                    ),
                ));
            }
            check_owned(&name, &reply)?;
            delegated = Some(resolve_self(&reply, actor, self_ty));
            continue;
        }
        check_owned(&name, &argument.ty)?;
        if let Pat::Ident(ident) = &*argument.pat
            && ident.ident.to_string().starts_with("__")
        {
            return Err(syn::Error::new(
                ident.ident.span(),
                format!(
                    "handler `{name}` names an argument `{}`: names starting with `__` are the \
                     generated code's; choose another",
                    ident.ident
                ),
            ));
        }
        let argument_name = match &*argument.pat {
            Pat::Ident(ident) if ident.by_ref.is_none() && ident.subpat.is_none() => {
                ident.ident.clone()
            }
            _ => format_ident!("__argument_{}", index),
        };
        arguments.push((argument_name, resolve_self(&argument.ty, actor, self_ty)));
    }
    let reply = match (&sig.output, delegated.clone()) {
        (ReturnType::Default, Some(reply)) => reply,
        (ReturnType::Type(_, ty), Some(_)) => {
            return Err(syn::Error::new(
                ty.span(),
                format!(
                    "handler `{name}` takes a `Reply`, so it answers through it: it returns \
                     nothing (the ask resolves to what is sent on the reply)"
                ),
            ));
        }
        (ReturnType::Default, None) => syn::parse_quote!(()),
        (ReturnType::Type(_, ty), None) => {
            check_owned(&name, ty)?;
            resolve_self(ty, actor, self_ty)
        }
    };
    let attributes = |wanted: &[&str]| {
        attrs
            .iter()
            .filter(|attribute| wanted.iter().any(|name| attribute.path().is_ident(name)))
            .cloned()
            .collect()
    };
    Ok(Handler {
        variant: format_ident!("{}", camel_case(&name.unraw().to_string())),
        name,
        asyncness: sig.asyncness.is_some(),
        takes_context,
        delegated: delegated.is_some(),
        arguments,
        reply,
        docs: attributes(&["doc"]),
        cfgs: attributes(&["cfg"]),
        vis: vis.clone(),
    })
}

/// `ty` with `Self` replaced by the actor's name: the generated message enum and ref methods
/// live outside the impl, where `Self` would mean something else.
pub(crate) fn resolve_self(ty: &Type, actor: &Ident, self_ty: &Type) -> Type {
    let mut ty = ty.clone();
    syn::visit_mut::VisitMut::visit_type_mut(&mut SelfResolver(actor, self_ty), &mut ty);
    ty
}

/// `generics` with `Self` in its bounds resolved: generated items (the message enum, the
/// ref's impls, the checks) take the actor's bounds where `Self` means something else.
pub(crate) fn resolve_self_in_generics(
    generics: &syn::Generics,
    actor: &Ident,
    self_ty: &Type,
) -> syn::Generics {
    let mut generics = generics.clone();
    syn::visit_mut::VisitMut::visit_generics_mut(&mut SelfResolver(actor, self_ty), &mut generics);
    generics
}

/// Replaces `Self` by the actor's type (see `resolve_self`).
struct SelfResolver<'a>(&'a Ident, &'a Type);

impl syn::visit_mut::VisitMut for SelfResolver<'_> {
    fn visit_type_mut(&mut self, node: &mut Type) {
        // A bare `Self` is the whole self type, generic arguments included.
        if let Type::Path(path) = node
            && path.qself.is_none()
            && path.path.is_ident("Self")
        {
            *node = self.1.clone();
            return;
        }
        syn::visit_mut::visit_type_mut(self, node);
    }

    fn visit_type_path_mut(&mut self, node: &mut syn::TypePath) {
        if node.qself.is_none()
            && node
                .path
                .segments
                .first()
                .is_some_and(|segment| segment.ident == "Self")
        {
            let span = node.path.segments[0].ident.span();
            let mut actor = self.0.clone();
            actor.set_span(span);
            node.path.segments[0].ident = actor;
        }
        syn::visit_mut::visit_type_path_mut(self, node);
    }
}

/// Refuses types a message cannot carry: borrowed ones and `impl Trait`.
pub(crate) fn check_owned(handler: &Ident, ty: &Type) -> syn::Result<()> {
    struct Finder(Option<(Span, &'static str)>);
    impl<'a> syn::visit::Visit<'a> for Finder {
        fn visit_type_reference(&mut self, node: &'a syn::TypeReference) {
            match &node.lifetime {
                Some(lifetime) if lifetime.ident == "static" => {
                    syn::visit::visit_type_reference(self, node);
                }
                _ => {
                    self.0.get_or_insert((node.span(), "borrows"));
                }
            }
        }
        fn visit_lifetime(&mut self, node: &'a syn::Lifetime) {
            if node.ident != "static" {
                self.0.get_or_insert((node.span(), "borrows"));
            }
        }
        fn visit_type_impl_trait(&mut self, node: &'a syn::TypeImplTrait) {
            self.0.get_or_insert((node.span(), "is `impl Trait`"));
        }
    }
    let mut finder = Finder(None);
    syn::visit::visit_type(&mut finder, ty);
    match finder.0 {
        None => Ok(()),
        Some((span, what)) => Err(syn::Error::new(
            span,
            format!(
                "a type of handler `{handler}` {what}: arguments and replies travel in \
                 messages between tasks, so they must be owned, `Send + 'static` types \
                 (take `String` rather than `&str`, `Vec<T>` rather than `&[T]`)"
            ),
        )),
    }
}

pub(crate) fn camel_case(name: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for character in name.chars() {
        if character == '_' {
            upper = true;
        } else if upper {
            out.push(character.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(character);
        }
    }
    if out.is_empty() {
        out.push_str("Handler");
    }
    out
}

impl Handler {
    /// The argument names, and the parameters (`name: Type`) a generated method takes.
    fn signature(&self) -> (Vec<&Ident>, Vec<TokenStream>) {
        let names = self.arguments.iter().map(|(name, _)| name).collect();
        let parameters = self
            .arguments
            .iter()
            .map(|(name, ty)| quote!(#name: #ty))
            .collect();
        (names, parameters)
    }
}

/// The methods a ref gets for `handler`: the ask (returning `ask`), `tell_`, `forward_` and
/// `try_` forms, sending variants of the enum `message`; and, when `recipient`, a
/// `<handler>_recipient()` giving the handler alone as an `actors::Recipient`. The ref's
/// field `0` is what sends: an `actors::Ref` or an `ErasedRef`, which have the same methods.
pub(crate) fn ref_methods(
    handler: &Handler,
    message: &TokenStream,
    ask: &TokenStream,
    recipient: bool,
) -> TokenStream {
    let variant = &handler.variant;
    let method = &handler.name;
    let plain = method.unraw();
    let tell = format_ident!("tell_{}", plain);
    let attempt = format_ident!("try_{}", plain);
    let forward = format_ident!("forward_{}", plain);
    let reply = &handler.reply;
    let (names, parameters) = handler.signature();
    let docs = &handler.docs;
    let cfgs = &handler.cfgs;
    let vis = &handler.vis;
    let tell_doc =
        format!("Sends `{plain}` without waiting for its reply; waits while the mailbox is full.");
    let forward_doc = format!(
        "Sends `{plain}` with a reply handle taken from another ask (a delegated reply): \
         the handler's answer goes to that ask's asker. Waits while the mailbox is full; \
         if the send fails, the reply is dropped and its asker sees the error."
    );
    let try_doc = format!(
        "Sends `{plain}` if the mailbox has room now, without waiting for its reply: \
         [`Error::Full`](::actors::Error::Full) if it has none."
    );
    let recipient = recipient.then(|| {
        let name = format_ident!("{}_recipient", plain);
        let doc = format!(
            "The handler `{plain}` alone, as an [`actors::Recipient`](::actors::Recipient) \
             that hides the actor's type: for callbacks. It keeps the actor reachable, like \
             a ref."
        );
        let types: Vec<_> = handler.arguments.iter().map(|(_, ty)| ty).collect();
        let (args, pattern) = match names.as_slice() {
            [] => (quote!(()), quote!(())),
            [only] => (quote!(#(#types)*), quote!(#only)),
            _ => (quote!((#(#types,)*)), quote!((#(#names,)*))),
        };
        quote! {
            #(#cfgs)*
            #[doc = #doc]
            #vis fn #name(&self) -> ::actors::Recipient<#args, #reply> {
                ::actors::Recipient::__new(&self.0, |(#pattern, __reply)| {
                    #message::#variant(#(#names,)* __reply)
                })
            }
        }
    });
    quote! {
        #(#cfgs)*
        #(#docs)*
        #vis fn #method(&self, #(#parameters),*) -> #ask {
            self.0.ask(|__reply| #message::#variant(#(#names,)* __reply))
        }

        #(#cfgs)*
        #[doc = #tell_doc]
        #vis async fn #tell(&self, #(#parameters),*) -> ::core::result::Result<(), ::actors::Error> {
            self.0.send(#message::#variant(#(#names,)* ::actors::Reply::none())).await
        }

        #(#cfgs)*
        #[doc = #forward_doc]
        #vis async fn #forward(&self, #(#parameters,)* __reply: ::actors::Reply<#reply>) -> ::core::result::Result<(), ::actors::Error> {
            self.0.send(#message::#variant(#(#names,)* __reply)).await
        }

        #(#cfgs)*
        #[doc = #try_doc]
        #vis fn #attempt(&self, #(#parameters),*) -> ::core::result::Result<(), ::actors::Error> {
            self.0.try_send(#message::#variant(#(#names,)* ::actors::Reply::none()))
        }

        #recipient
    }
}

/// `handlers` without those named like a generated method of another (`tell_x`, `try_x`,
/// `forward_x`, and `x_recipient` when refs get recipients), each reported: the rest still
/// expand, so the program reports every clash and nothing that follows from one.
pub(crate) fn without_clashes(
    handlers: Vec<Handler>,
    recipients: bool,
    report: &mut impl FnMut(syn::Error),
) -> Vec<Handler> {
    let names: Vec<String> = handlers
        .iter()
        .map(|handler| handler.name.unraw().to_string())
        .collect();
    let mut kept = Vec::with_capacity(handlers.len());
    for (handler, plain) in handlers.into_iter().zip(&names) {
        let prefixed = ["tell_", "try_", "forward_"].iter().find_map(|prefix| {
            let stripped = plain.strip_prefix(prefix)?;
            names
                .iter()
                .any(|other| other == stripped)
                .then(|| (format!("{prefix}{stripped}"), stripped))
        });
        let clash = prefixed.or_else(|| {
            let stripped = plain.strip_suffix("_recipient").filter(|_| recipients)?;
            names
                .iter()
                .any(|other| other == stripped)
                .then(|| (format!("{stripped}_recipient"), stripped))
        });
        match clash {
            Some((generated, stripped)) => report(syn::Error::new(
                handler.name.span(),
                format!(
                    "handler `{plain}` has the name of the ref's `{generated}` method for the \
                     handler `{stripped}`: rename one of them"
                ),
            )),
            None => kept.push(handler),
        }
    }
    kept
}

/// The methods a pool's ref gets for `handler`: the ask, `tell_` and `try_` forms, each on
/// the member the pool routes to (`self.0.route()`).
pub(crate) fn pool_methods(handler: &Handler) -> TokenStream {
    let method = &handler.name;
    let plain = method.unraw();
    let tell = format_ident!("tell_{}", plain);
    let attempt = format_ident!("try_{}", plain);
    let reply = &handler.reply;
    let (names, parameters) = handler.signature();
    let cfgs = &handler.cfgs;
    let docs = &handler.docs;
    let vis = &handler.vis;
    let tell_doc = format!("`tell_{plain}` on the member the pool routes to.");
    let try_doc = format!("`try_{plain}` on the member the pool routes to.");
    quote! {
        #(#cfgs)*
        #(#docs)*
        #vis async fn #method(&self, #(#parameters),*) -> ::core::result::Result<#reply, ::actors::Error> {
            self.0.route().#method(#(#names),*).await
        }

        #(#cfgs)*
        #[doc = #tell_doc]
        #vis async fn #tell(&self, #(#parameters),*) -> ::core::result::Result<(), ::actors::Error> {
            self.0.route().#tell(#(#names),*).await
        }

        #(#cfgs)*
        #[doc = #try_doc]
        #vis fn #attempt(&self, #(#parameters),*) -> ::core::result::Result<(), ::actors::Error> {
            self.0.route().#attempt(#(#names),*)
        }
    }
}

/// The message enum's variant for `handler`: its arguments and its reply channel.
pub(crate) fn message_variant(handler: &Handler) -> TokenStream {
    let variant = &handler.variant;
    let types = handler.arguments.iter().map(|(_, ty)| ty);
    let reply = &handler.reply;
    let cfgs = &handler.cfgs;
    quote!(#(#cfgs)* #variant(#(#types,)* ::actors::Reply<#reply>))
}

/// The `handle` arm that runs `handler` for its variant of the enum `message`, calling the
/// method through `callee` (`<Actor>` or `<Self as Interface>`) and answering the reply
/// (unless the handler answers it itself, a delegated reply).
pub(crate) fn handle_arm(
    handler: &Handler,
    message: &TokenStream,
    callee: &TokenStream,
) -> TokenStream {
    let variant = &handler.variant;
    let method = &handler.name;
    // Generated names: a user's argument may be called `ctx` or another name the arm uses.
    let names: Vec<_> = (0..handler.arguments.len())
        .map(|index| format_ident!("__argument_{}", index))
        .collect();
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
    quote! {
        #(#cfgs)*
        #message::#variant(#(#names,)* __reply) => {
            if !__reply.__expired() {
                #body
            }
        }
    }
}

/// The actor's name and generic arguments from the self type of an `#[actor]` impl, which
/// must be a plain `Name<..>` of this module; `form` shows the impl's form in the error.
pub(crate) fn actor_of(self_ty: &Type, form: &str) -> syn::Result<(Ident, syn::PathArguments)> {
    match self_ty {
        Type::Path(path)
            if path.qself.is_none()
                && path.path.leading_colon.is_none()
                && path.path.segments.len() == 1 =>
        {
            let segment = &path.path.segments[0];
            Ok((segment.ident.clone(), segment.arguments.clone()))
        }
        other => Err(syn::Error::new(
            other.span(),
            format!("#[actor] goes on `{form}` for an actor struct `Name` declared in this module"),
        )),
    }
}
