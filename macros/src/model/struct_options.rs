//! The arguments of `#[actor(..)]` on a struct: a placement and `mailbox`, `name`,
//! `ask_timeout` and `panic_fails_runner`, each checked against what the runtime accepts.

use crate::spelling::did_you_mean;
use proc_macro2::Span;
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, Meta, MetaNameValue, Token};

/// The largest mailbox: its slots come in at most eight blocks, allocated on first use.
const MAX_MAILBOX: u64 = 1 << 20;
pub(crate) const DEFAULT_MAILBOX: u64 = 64;

const PLACEMENTS: &[&str] = &["dedicated", "blocking"];
const OPTIONS: &[&str] = &["mailbox", "name", "ask_timeout", "panic_fails_runner"];

/// Where the actor runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    Pool,
    Dedicated,
    Blocking,
}

/// The options as written; each at most once, each valid.
#[derive(Default)]
pub(crate) struct StructOptions {
    pub(crate) placement: Option<(Placement, Ident)>,
    pub(crate) mailbox: Option<(u64, Span)>,
    pub(crate) name: Option<(String, Span)>,
    /// In milliseconds.
    pub(crate) ask_timeout: Option<u64>,
    /// Whether a panic of an unsupervised incarnation fails the runner (opt-in).
    pub(crate) panic_fails_runner: Option<bool>,
}

impl Parse for StructOptions {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let metas = Punctuated::<Meta, Token![,]>::parse_terminated(input).map_err(|error| {
            syn::Error::new(
                error.span(),
                "#[actor] options are a placement (`dedicated` or `blocking`) and \
                 `mailbox = N`, `name = \"label\"`, comma separated",
            )
        })?;
        let mut options = StructOptions::default();
        for meta in metas {
            match meta {
                Meta::Path(path) => options.placement(&path)?,
                Meta::NameValue(pair) => options.value(&pair)?,
                Meta::List(list) => {
                    return Err(syn::Error::new(
                        list.span(),
                        "#[actor] options are a placement (`dedicated` or `blocking`) and \
                         `mailbox = N`, `name = \"label\"`",
                    ));
                }
            }
        }
        Ok(options)
    }
}

impl StructOptions {
    /// Takes a bare word: a placement.
    fn placement(&mut self, path: &syn::Path) -> syn::Result<()> {
        let ident = path.get_ident().cloned().ok_or_else(|| {
            syn::Error::new(path.span(), "a placement is `dedicated` or `blocking`")
        })?;
        let placement = match ident.to_string().as_str() {
            "dedicated" => Placement::Dedicated,
            "blocking" => Placement::Blocking,
            "pool" | "shared" => Placement::Pool,
            other if OPTIONS.contains(&other) => {
                return Err(syn::Error::new(
                    ident.span(),
                    format!("`{other}` needs a value: `{other} = ...`"),
                ));
            }
            other => {
                return Err(syn::Error::new(
                    ident.span(),
                    format!(
                        "unknown placement `{other}`{}: an actor runs `dedicated` (a thread of \
                         its own), `blocking` (a thread that may block), or, with no \
                         placement, on the shared pool",
                        did_you_mean(other, &[PLACEMENTS, OPTIONS].concat())
                    ),
                ));
            }
        };
        if let Some((_, first)) = &self.placement {
            return Err(syn::Error::new(
                ident.span(),
                format!(
                    "two placements, `{first}` and `{ident}`: an actor has one (`dedicated`, \
                     `blocking`, or none for the shared pool)"
                ),
            ));
        }
        self.placement = Some((placement, ident));
        Ok(())
    }

    /// Takes `key = value`: an option.
    fn value(&mut self, pair: &MetaNameValue) -> syn::Result<()> {
        let key = pair
            .path
            .get_ident()
            .map(Ident::to_string)
            .unwrap_or_default();
        let span = pair.path.span();
        let value = &pair.value;
        match key.as_str() {
            "mailbox" => once(&mut self.mailbox, span, "mailbox", || {
                Ok((mailbox(value)?, value.span()))
            }),
            "name" => once(&mut self.name, span, "name", || {
                Ok((label(value)?, value.span()))
            }),
            "ask_timeout" => once(&mut self.ask_timeout, span, "ask_timeout", || {
                ask_timeout(value)
            }),
            "panic_fails_runner" => once(
                &mut self.panic_fails_runner,
                span,
                "panic_fails_runner",
                || boolean(value, "panic_fails_runner"),
            ),
            other => Err(syn::Error::new(
                span,
                format!(
                    "unknown option `{other}`{}: #[actor] accepts `mailbox = N`, \
                     `name = \"label\"`, `ask_timeout = \"5s\"` and \
                     `panic_fails_runner = true`",
                    did_you_mean(other, OPTIONS)
                ),
            )),
        }
    }
}

/// Sets `slot` to what `value` gives, unless it is set already.
fn once<T>(
    slot: &mut Option<T>,
    span: Span,
    option: &str,
    value: impl FnOnce() -> syn::Result<T>,
) -> syn::Result<()> {
    if slot.is_some() {
        return Err(duplicate(span, option));
    }
    *slot = Some(value()?);
    Ok(())
}

pub(crate) fn duplicate(span: Span, option: &str) -> syn::Error {
    syn::Error::new(span, format!("`{option}` is given twice"))
}

fn mailbox(value: &Expr) -> syn::Result<u64> {
    let error = |message: String| syn::Error::new(value.span(), message);
    let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    else {
        return Err(error(format!(
            "`mailbox` takes an integer literal from 1 to {MAX_MAILBOX}"
        )));
    };
    let capacity: u64 = int.base10_parse().map_err(|_| {
        error(format!(
            "`mailbox` takes an integer literal from 1 to {MAX_MAILBOX}"
        ))
    })?;
    if capacity == 0 {
        return Err(error(
            "`mailbox = 0` holds no message: a mailbox holds at least 1".to_string(),
        ));
    }
    if capacity > MAX_MAILBOX {
        return Err(error(format!(
            "`mailbox = {capacity}` is too large: at most {MAX_MAILBOX} (its slots come in \
             eight blocks, each allocated whole on first use)"
        )));
    }
    Ok(capacity)
}

/// `panic_fails_runner = true` (or `false`): a bool literal.
fn boolean(value: &Expr, option: &str) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(value),
            ..
        }) => Ok(value.value),
        other => Err(syn::Error::new(
            other.span(),
            format!(
                "`{option}` takes `true` or `false`; {} is not one",
                other.to_token_stream()
            ),
        )),
    }
}

/// `ask_timeout = "5s"`: milliseconds, from a positive whole number and a unit.
fn ask_timeout(value: &Expr) -> syn::Result<u64> {
    let text = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Some(text.value()),
        _ => None,
    };
    text.as_deref()
        .and_then(crate::spelling::duration_millis)
        .ok_or_else(|| {
            let shown = text.map_or_else(
                || format!("`{}`, not a string,", value.to_token_stream()),
                |text| format!("{text:?}"),
            );
            syn::Error::new(
                value.span(),
                format!(
                    "`ask_timeout` takes a string with a positive whole number and a unit, \
                     `ms`, `s` or `m` (such as `ask_timeout = \"5s\"`); {shown} is not one"
                ),
            )
        })
}

/// A label: ASCII letters, digits and `_`, at least one.
pub(crate) fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

fn label(value: &Expr) -> syn::Result<String> {
    let message = "`name` takes a string of ASCII letters, digits and `_`, such as \
                   `name = \"orders\"`";
    let Expr::Lit(ExprLit {
        lit: Lit::Str(text),
        ..
    }) = value
    else {
        return Err(syn::Error::new(value.span(), message));
    };
    let label = text.value();
    if !is_label(&label) {
        return Err(syn::Error::new(
            value.span(),
            format!("invalid actor name {label:?}: {message}"),
        ));
    }
    Ok(label)
}
