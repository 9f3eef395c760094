//! What a type says, read from its tokens alone: whether it is a handler's context, a
//! delegated reply, a named path; `Self` resolved to the actor's type; and whether a message
//! can carry it. Nothing here knows which attribute is being parsed.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Ident, Type};

/// The error for an actor that holds a borrow: a lifetime on its struct or its impl.
pub(crate) const BORROWING_ACTOR: &str = "an actor cannot borrow: its state moves to the \
                                          actor's task, so it owns what it holds (`'static`); \
                                          take the lifetime off";

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

/// Where `sig` names `Self` in an argument or its reply, if it does (the receiver and a
/// context argument may).
pub(crate) fn names_self(sig: &syn::Signature) -> Option<Span> {
    struct Finder(Option<Span>);
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
        if let syn::FnArg::Typed(argument) = input {
            if index == 1 && is_context(&argument.ty) {
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

/// The attributes among `attrs` whose path is one of `wanted` (`doc`, `cfg`).
pub(crate) fn attributes(attrs: &[syn::Attribute], wanted: &[&str]) -> Vec<syn::Attribute> {
    attrs
        .iter()
        .filter(|attribute| wanted.iter().any(|name| attribute.path().is_ident(name)))
        .cloned()
        .collect()
}
