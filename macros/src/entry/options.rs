//! The options both attributes accept (`name = value`, comma separated), parsed and checked
//! at compile time, and the `Config` expression they build.

use crate::spelling::{duration_millis, edit_distance};
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, Meta, Token};

/// Which attribute is parsing: the test attribute also accepts `timeout`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attribute {
    Main,
    Test,
}

impl Attribute {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Attribute::Main => "#[runtime::main]",
            Attribute::Test => "#[runtime::test]",
        }
    }

    fn options(self) -> &'static [&'static str] {
        match self {
            Attribute::Main => &[
                "worker_threads",
                "catch_panics",
                "storage_directory",
                "config",
            ],
            Attribute::Test => &[
                "worker_threads",
                "catch_panics",
                "storage_directory",
                "config",
                "timeout",
            ],
        }
    }
}

/// The parsed options.
#[derive(Default)]
pub(crate) struct Options {
    worker_threads: Option<(usize, Span)>,
    catch_panics: Option<(bool, Span)>,
    storage_directory: Option<(String, Span)>,
    config: Option<syn::Path>,
    /// The timeout in milliseconds, with its source text for messages.
    pub(crate) timeout: Option<(u64, String, Span)>,
}

impl Options {
    pub(crate) fn parse(attribute: Attribute, args: TokenStream) -> syn::Result<Self> {
        let metas = Punctuated::<Meta, Token![,]>::parse_terminated
            .parse2(args)
            .map_err(|error| {
                syn::Error::new(
                    error.span(),
                    format!(
                        "{} takes options as `name = value` pairs separated by commas; allowed: {}",
                        attribute.name(),
                        attribute.options().join(", ")
                    ),
                )
            })?;
        let mut options = Options::default();
        let mut seen: Vec<String> = Vec::new();
        for meta in metas {
            let pair = name_value(attribute, meta)?;
            let name = path_name(&pair.path);
            if !attribute.options().contains(&name.as_str()) {
                return Err(unknown_option(attribute, &pair.path, &name));
            }
            if seen.contains(&name) {
                return Err(syn::Error::new(
                    pair.path.span(),
                    format!("duplicate option `{name}`: give each option at most once"),
                ));
            }
            seen.push(name.clone());
            options.set(&name, &pair.value)?;
        }
        Ok(options)
    }

    /// Sets the option `name` (one the attribute accepts) to `value`, checked.
    fn set(&mut self, name: &str, value: &Expr) -> syn::Result<()> {
        match name {
            "worker_threads" => {
                let threads = int(value).filter(|threads| *threads >= 1).ok_or_else(|| {
                    syn::Error::new(
                        value.span(),
                        "`worker_threads` must be a whole number of at least 1 (at most \
                         runtime::MAX_WORKERS), such as `worker_threads = 2`",
                    )
                })?;
                self.worker_threads = Some((threads, value.span()));
            }
            "catch_panics" => {
                let catch = boolean(value).ok_or_else(|| {
                    syn::Error::new(value.span(), "`catch_panics` must be `true` or `false`")
                })?;
                self.catch_panics = Some((catch, value.span()));
            }
            "storage_directory" => {
                let path = string(value)
                    .filter(|path| !path.is_empty())
                    .ok_or_else(|| {
                        syn::Error::new(
                            value.span(),
                            "`storage_directory` must be a non-empty string literal, such as \
                             `storage_directory = \"/var/lib/app\"`",
                        )
                    })?;
                self.storage_directory = Some((path, value.span()));
            }
            "config" => self.config = Some(config_path(value)?),
            "timeout" => self.timeout = Some(timeout(value)?),
            _ => unreachable!("every allowed option is handled"),
        }
        Ok(())
    }

    /// An expression building the runner's `Config`: the `config` function's (or the
    /// default), with the other options applied on top.
    pub(crate) fn config(&self) -> TokenStream {
        let mut config = match &self.config {
            Some(path) => quote_spanned!(path.span()=> {
                let config: ::runtime::Config = #path();
                config
            }),
            None => quote!(::runtime::Config::default()),
        };
        if let Some((threads, span)) = self.worker_threads {
            config = quote_spanned!(span=> #config.with_worker_threads(#threads));
        }
        if let Some((catch, span)) = self.catch_panics {
            config = quote_spanned!(span=> #config.with_catch_panics(#catch));
        }
        if let Some((path, span)) = &self.storage_directory {
            config = quote_spanned!(*span=> #config.with_storage_directory(#path));
        }
        config
    }

    /// Compile-time checks the macro cannot make itself: `worker_threads` against
    /// `runtime::MAX_WORKERS` (a constant of the runtime, not copied here).
    pub(crate) fn checks(&self) -> TokenStream {
        match self.worker_threads {
            Some((threads, span)) => quote_spanned! {span=>
                const _: () = ::core::assert!(
                    #threads <= ::runtime::MAX_WORKERS,
                    "`worker_threads` is above runtime::MAX_WORKERS"
                );
            },
            None => TokenStream::new(),
        }
    }
}

/// `meta` as `name = value`, or the error saying that is what options are.
fn name_value(attribute: Attribute, meta: Meta) -> syn::Result<syn::MetaNameValue> {
    match meta {
        Meta::NameValue(pair) => Ok(pair),
        Meta::Path(path) => {
            let name = path_name(&path);
            Err(syn::Error::new(
                path.span(),
                format!("option `{name}` needs a value: write `{name} = ...`"),
            ))
        }
        Meta::List(list) => Err(syn::Error::new(
            list.span(),
            format!(
                "{} takes options as `name = value` pairs, not `{}(...)`",
                attribute.name(),
                path_name(&list.path)
            ),
        )),
    }
}

/// `config = path::to::fn`.
fn config_path(value: &Expr) -> syn::Result<syn::Path> {
    match value {
        Expr::Path(path) if path.qself.is_none() => Ok(path.path.clone()),
        _ => Err(syn::Error::new(
            value.span(),
            "`config` must be the path of a `fn() -> runtime::Config`, such as \
             `config = my_config`",
        )),
    }
}

/// `timeout = "10s"`: milliseconds, the text as written (trimmed), and where.
fn timeout(value: &Expr) -> syn::Result<(u64, String, Span)> {
    let text = string(value);
    let millis = text.as_deref().and_then(duration_millis).ok_or_else(|| {
        syn::Error::new(
            value.span(),
            "`timeout` must be a string literal with a positive whole number and \
             a unit `ms`, `s` or `m`, such as `timeout = \"10s\"`",
        )
    })?;
    let text = text.unwrap_or_default().trim().to_owned();
    Ok((millis, text, value.span()))
}

fn path_name(path: &syn::Path) -> String {
    path.get_ident()
        .map(ToString::to_string)
        .unwrap_or_else(|| quote!(#path).to_string().replace(' ', ""))
}

fn lit(value: &Expr) -> Option<&Lit> {
    match value {
        Expr::Lit(ExprLit { lit, .. }) => Some(lit),
        _ => None,
    }
}

fn int(value: &Expr) -> Option<usize> {
    match lit(value)? {
        Lit::Int(int) => int.base10_parse().ok(),
        _ => None,
    }
}

fn boolean(value: &Expr) -> Option<bool> {
    match lit(value)? {
        Lit::Bool(flag) => Some(flag.value),
        _ => None,
    }
}

fn string(value: &Expr) -> Option<String> {
    match lit(value)? {
        Lit::Str(text) => Some(text.value()),
        _ => None,
    }
}

fn unknown_option(attribute: Attribute, path: &syn::Path, name: &str) -> syn::Error {
    let allowed = attribute.options();
    let nearest = allowed
        .iter()
        .map(|option| (edit_distance(name, option), *option))
        .min()
        .filter(|(distance, _)| *distance <= 3);
    let hint = match nearest {
        Some((_, suggestion)) => format!(" (did you mean `{suggestion}`?)"),
        None if name == "timeout" => " (`timeout` is only for #[runtime::test])".to_owned(),
        None => String::new(),
    };
    let message = format!(
        "unknown option `{name}`{hint}; {} accepts: {}",
        attribute.name(),
        allowed.join(", ")
    );
    syn::Error::new(path.span(), message)
}
