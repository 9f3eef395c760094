//! A handler: one method of an actor's inherent impl or of an interface, as a message. Its
//! parse checks everything a message needs (owned, `Send`-able types, no generics, a `Reply`
//! last, names the generated code leaves free); a parsed `Handler` always expands.

use super::errors::Errors;
use super::types::{attributes, check_owned, is_context, reply_of, resolve_self};
use crate::spelling::camel_case;
use quote::format_ident;
use syn::ext::IdentExt as _;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, Pat, PatType, ReturnType, Type};

/// Names the generated ref or actor already has: no handler may take them.
const RESERVED: &[&str] = &[
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

/// Where a handler is declared, for resolving `Self` in its types.
pub(crate) struct Owner<'a> {
    /// The actor's (or interface's) name.
    pub(crate) name: &'a Ident,
    /// What `Self` means there: the actor's full type, or `Self` itself in an interface.
    pub(crate) self_ty: &'a Type,
}

/// The arguments a handler takes after `&self`, sorted out.
struct Inputs {
    takes_context: bool,
    arguments: Vec<(Ident, Type)>,
    /// `R` of a trailing `Reply<R>`, `Self` resolved.
    delegated: Option<Type>,
}

impl Handler {
    /// The handler `sig` declares (with `attrs` and `vis`), `Self` in its types resolved.
    pub(crate) fn parse(
        sig: &syn::Signature,
        attrs: &[syn::Attribute],
        vis: &syn::Visibility,
        owner: &Owner,
    ) -> syn::Result<Self> {
        check_generics(sig)?;
        let name = sig.ident.clone();
        check_reserved(&name)?;
        let inputs = Inputs::parse(sig, owner)?;
        let reply = reply(sig, &inputs, owner)?;
        Ok(Handler {
            variant: format_ident!("{}", camel_case(&name.unraw().to_string())),
            name,
            asyncness: sig.asyncness.is_some(),
            takes_context: inputs.takes_context,
            delegated: inputs.delegated.is_some(),
            arguments: inputs.arguments,
            reply,
            docs: attributes(attrs, &["doc"]),
            cfgs: attributes(attrs, &["cfg"]),
            vis: vis.clone(),
        })
    }
}

/// A handler's message has fixed types: it takes no generics.
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

fn check_reserved(name: &Ident) -> syn::Result<()> {
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
    Ok(())
}

impl Inputs {
    fn parse(sig: &syn::Signature, owner: &Owner) -> syn::Result<Self> {
        let name = &sig.ident;
        let mut inputs = Inputs {
            takes_context: false,
            arguments: Vec::new(),
            delegated: None,
        };
        let count = sig.inputs.len() - 1;
        for (index, input) in sig.inputs.iter().skip(1).enumerate() {
            let FnArg::Typed(argument) = input else {
                continue;
            };
            if index == 0 && is_context(&argument.ty) {
                inputs.takes_context = true;
                continue;
            }
            if let Some(reply) = reply_of(&argument.ty) {
                if index + 1 != count {
                    return Err(syn::Error::new(
                        argument.ty.span(),
                        format!(
                            "handler `{name}` takes its `Reply` before other arguments: the \
                             reply handle is the last argument"
                        ),
                    ));
                }
                check_owned(name, &reply)?;
                inputs.delegated = Some(resolve_self(&reply, owner.name, owner.self_ty));
                continue;
            }
            let argument_name = argument_name(name, argument, index)?;
            let ty = resolve_self(&argument.ty, owner.name, owner.self_ty);
            inputs.arguments.push((argument_name, ty));
        }
        Ok(inputs)
    }
}

/// The name the generated code gives `argument` (the `index`th after `self`): as written,
/// or generated for a pattern.
fn argument_name(handler: &Ident, argument: &PatType, index: usize) -> syn::Result<Ident> {
    check_owned(handler, &argument.ty)?;
    if let Pat::Ident(ident) = &*argument.pat
        && ident.ident.to_string().starts_with("__")
    {
        return Err(syn::Error::new(
            ident.ident.span(),
            format!(
                "handler `{handler}` names an argument `{}`: names starting with `__` are the \
                 generated code's; choose another",
                ident.ident
            ),
        ));
    }
    Ok(match &*argument.pat {
        Pat::Ident(ident) if ident.by_ref.is_none() && ident.subpat.is_none() => {
            ident.ident.clone()
        }
        _ => format_ident!("__argument_{}", index),
    })
}

/// What an ask of the handler resolves to: its return type, or what its `Reply` carries.
fn reply(sig: &syn::Signature, inputs: &Inputs, owner: &Owner) -> syn::Result<Type> {
    let name = &sig.ident;
    match (&sig.output, inputs.delegated.clone()) {
        (ReturnType::Default, Some(reply)) => Ok(reply),
        (ReturnType::Type(_, ty), Some(_)) => Err(syn::Error::new(
            ty.span(),
            format!(
                "handler `{name}` takes a `Reply`, so it answers through it: it returns \
                 nothing (the ask resolves to what is sent on the reply)"
            ),
        )),
        (ReturnType::Default, None) => Ok(syn::parse_quote!(())),
        (ReturnType::Type(_, ty), None) => {
            check_owned(name, ty)?;
            Ok(resolve_self(ty, owner.name, owner.self_ty))
        }
    }
}

/// `handlers` without those named like a generated method of another (`tell_x`, `try_x`,
/// `forward_x`, and `x_recipient` when refs get recipients), each reported: the rest still
/// expand, so the program reports every clash and nothing that follows from one.
pub(crate) fn without_clashes(
    handlers: Vec<Handler>,
    recipients: bool,
    errors: &mut Errors,
) -> Vec<Handler> {
    let names: Vec<String> = handlers
        .iter()
        .map(|handler| handler.name.unraw().to_string())
        .collect();
    let mut kept = Vec::with_capacity(handlers.len());
    for (handler, plain) in handlers.into_iter().zip(&names) {
        match clash(plain, &names, recipients) {
            Some((generated, stripped)) => errors.push(syn::Error::new(
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

/// The generated method named `plain` and the handler it is for, if another of `names`
/// gets a method named `plain`.
fn clash<'a>(plain: &'a str, names: &[String], recipients: bool) -> Option<(String, &'a str)> {
    let prefixed = ["tell_", "try_", "forward_"].iter().find_map(|prefix| {
        let stripped = plain.strip_prefix(prefix)?;
        names
            .iter()
            .any(|other| other == stripped)
            .then(|| (format!("{prefix}{stripped}"), stripped))
    });
    prefixed.or_else(|| {
        let stripped = plain.strip_suffix("_recipient").filter(|_| recipients)?;
        names
            .iter()
            .any(|other| other == stripped)
            .then(|| (format!("{stripped}_recipient"), stripped))
    })
}
