//! A hook: `on_start`, `on_stop`, `on_down` or `on_link_exit` in an actor's inherent impl. Its
//! parse checks the signature against the hook's; a parsed `Hook` overrides the `Actor`
//! trait's default of that name.

use super::handler::check_generics;
use super::types::{attributes, is_context, is_named, is_reference_to};
use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, ImplItemFn, ReturnType, Type};

/// The optional hooks, by name.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookKind {
    Start,
    Stop,
    Down,
    LinkExit,
}

impl HookKind {
    /// The hook a method named `name` is, if it is one.
    pub(crate) fn of(name: &str) -> Option<Self> {
        Some(match name {
            "on_start" => HookKind::Start,
            "on_stop" => HookKind::Stop,
            "on_down" => HookKind::Down,
            "on_link_exit" => HookKind::LinkExit,
            _ => return None,
        })
    }

    /// What the hook takes, for error messages.
    fn signature(self) -> &'static str {
        match self {
            HookKind::Start => {
                "it takes `&mut self` and optionally `ctx: &mut actors::Context<Self>`"
            }
            HookKind::Stop => {
                "it takes `&mut self`, optionally `ctx: &mut actors::Context<Self>`, and \
                 optionally `reason: &actors::ExitReason`"
            }
            HookKind::Down | HookKind::LinkExit => {
                "it takes `&mut self`, optionally `ctx: &mut actors::Context<Self>`, then \
                 `id: actors::ActorId, reason: actors::ExitReason`"
            }
        }
    }
}

/// A hook, as the impl declares it.
pub(crate) struct Hook {
    pub(crate) kind: HookKind,
    pub(crate) asyncness: bool,
    pub(crate) takes_context: bool,
    /// `on_stop` takes the exit reason.
    pub(crate) takes_reason: bool,
    /// Its `#[cfg]` attributes: compiled out, the trait's default hook applies.
    pub(crate) cfgs: Vec<syn::Attribute>,
}

impl Hook {
    /// The hook `method` declares, its signature checked against `kind`'s.
    pub(crate) fn parse(method: &ImplItemFn, kind: HookKind) -> syn::Result<Self> {
        check_generics(&method.sig)?;
        let mut inputs = method.sig.inputs.iter().skip(1).peekable();
        let takes_context = match inputs.peek() {
            Some(FnArg::Typed(argument)) if is_context(&argument.ty) => {
                inputs.next();
                true
            }
            _ => false,
        };
        let rest: Vec<&FnArg> = inputs.collect();
        let wrong = |span: Span| {
            syn::Error::new(
                span,
                format!("`{}` is a hook: {}", method.sig.ident, kind.signature()),
            )
        };
        let takes_reason = match kind {
            HookKind::Start => match rest.first() {
                Some(extra) => return Err(wrong(extra.span())),
                None => false,
            },
            HookKind::Stop => stop_arguments(&rest).map_err(|offending| wrong(offending.span()))?,
            HookKind::Down | HookKind::LinkExit => {
                exit_arguments(&rest, method).map_err(wrong)?;
                false
            }
        };
        if let ReturnType::Type(_, ty) = &method.sig.output {
            return Err(syn::Error::new(
                ty.span(),
                format!("`{}` is a hook: it returns nothing", method.sig.ident),
            ));
        }
        Ok(Hook {
            kind,
            asyncness: method.sig.asyncness.is_some(),
            takes_context,
            takes_reason,
            cfgs: attributes(&method.attrs, &["cfg"]),
        })
    }
}

fn typed(argument: &FnArg) -> Option<&Type> {
    match argument {
        FnArg::Typed(argument) => Some(&argument.ty),
        FnArg::Receiver(_) => None,
    }
}

/// Whether `on_stop`'s arguments after the context, `rest`, are its exit reason; or the
/// first argument that does not fit.
fn stop_arguments<'a>(rest: &[&'a FnArg]) -> Result<bool, &'a FnArg> {
    let is_reason =
        |argument: &FnArg| typed(argument).is_some_and(|ty| is_reference_to(ty, "ExitReason"));
    match rest {
        [] => Ok(false),
        [reason] if is_reason(reason) => Ok(true),
        [first, ..] => Err(if is_reason(first) { rest[1] } else { first }),
    }
}

/// Checks that `on_down`'s or `on_link_exit`'s arguments after the context, `rest`, are the
/// actor's id and exit reason; or where they are not.
fn exit_arguments(rest: &[&FnArg], method: &ImplItemFn) -> Result<(), Span> {
    let expected = ["ActorId", "ExitReason"];
    for (index, wanted) in expected.iter().enumerate() {
        match rest.get(index) {
            Some(argument) if typed(argument).is_some_and(|ty| is_named(ty, wanted)) => {}
            Some(argument) => return Err(argument.span()),
            None => return Err(method.sig.paren_token.span.join()),
        }
    }
    match rest.get(expected.len()) {
        Some(extra) => Err(extra.span()),
        None => Ok(()),
    }
}
