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
                "deterministic",
                "seed",
                "seeds",
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
    /// `deterministic`: the test is a deterministic run (virtual time, one thread).
    pub(crate) deterministic: Option<Span>,
    /// `seed = N` or `seeds = a..b`: the seeds a deterministic test runs, as a range.
    pub(crate) seeds: Option<(u64, u64, Span)>,
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
            if attribute == Attribute::Test
                && let Meta::Path(path) = &meta
                && path.is_ident("deterministic")
            {
                if options.deterministic.is_some() {
                    return Err(syn::Error::new(
                        path.span(),
                        "duplicate option `deterministic`: give each option at most once",
                    ));
                }
                options.deterministic = Some(path.span());
                continue;
            }
            if attribute == Attribute::Main
                && let Meta::Path(path) = &meta
                && path.is_ident("deterministic")
            {
                return Err(syn::Error::new(
                    path.span(),
                    "`deterministic` is only for #[runtime::test]: a program runs on the native \
                     runtime; to run one deterministically, start it with \
                     `runtime::deterministic::Runner::seeded(n)`",
                ));
            }
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
            if (name == "seed" && seen.iter().any(|seen| seen == "seeds"))
                || (name == "seeds" && seen.iter().any(|seen| seen == "seed"))
            {
                return Err(syn::Error::new(
                    pair.path.span(),
                    "give either `seed = N` or `seeds = a..b`, not both",
                ));
            }
            seen.push(name.clone());
            options.set(&name, &pair.value)?;
        }
        options.check_deterministic()?;
        Ok(options)
    }

    /// `seed`/`seeds` need `deterministic`, and a deterministic test takes no option that
    /// shapes a native runner.
    fn check_deterministic(&self) -> syn::Result<()> {
        match self.deterministic {
            None => match self.seeds {
                Some((_, _, span)) => Err(syn::Error::new(
                    span,
                    "`seed` and `seeds` choose the seeds of a deterministic test: add \
                     `deterministic`, as `#[runtime::test(deterministic, seed = 7)]`",
                )),
                None => Ok(()),
            },
            Some(_) => {
                let native = [
                    ("worker_threads", self.worker_threads.map(|(_, span)| span)),
                    (
                        "storage_directory",
                        self.storage_directory.as_ref().map(|(_, span)| *span),
                    ),
                    ("config", self.config.as_ref().map(Spanned::span)),
                ];
                match native
                    .into_iter()
                    .find_map(|(name, span)| Some((name, span?)))
                {
                    Some((name, span)) => Err(syn::Error::new(
                        span,
                        format!(
                            "`{name}` shapes a native runner; a deterministic test runs on one \
                             thread with simulated storage and takes only `seed`, `seeds`, \
                             `timeout` (virtual time) and `catch_panics`"
                        ),
                    )),
                    None => Ok(()),
                }
            }
        }
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
            "seed" => {
                let seed = u64_literal(value).ok_or_else(|| {
                    syn::Error::new(
                        value.span(),
                        "`seed` must be a whole number, such as `seed = 7`",
                    )
                })?;
                self.seeds = Some((seed, seed.saturating_add(1), value.span()));
            }
            "seeds" => self.seeds = Some(seed_range(value)?),
            "deterministic" => {
                return Err(syn::Error::new(
                    value.span(),
                    "`deterministic` takes no value: write `deterministic`",
                ));
            }
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

    /// The `catch_panics` option, if given.
    pub(crate) fn catch_panics(&self) -> Option<bool> {
        self.catch_panics.map(|(catch, _)| catch)
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

/// A whole number literal as a `u64`.
fn u64_literal(value: &Expr) -> Option<u64> {
    match lit(value)? {
        Lit::Int(int) => int.base10_parse().ok(),
        _ => None,
    }
}

/// `seeds = a..b`: a non-empty half-open range of literal seeds.
fn seed_range(value: &Expr) -> syn::Result<(u64, u64, Span)> {
    let error = || {
        syn::Error::new(
            value.span(),
            "`seeds` must be a non-empty range of whole numbers, such as `seeds = 0..1000`",
        )
    };
    let Expr::Range(range) = value else {
        return Err(error());
    };
    let start = range.start.as_deref().and_then(u64_literal);
    let end = range.end.as_deref().and_then(u64_literal);
    let (Some(start), Some(end)) = (start, end) else {
        return Err(error());
    };
    let end = match range.limits {
        syn::RangeLimits::HalfOpen(_) => end,
        syn::RangeLimits::Closed(_) => end.saturating_add(1),
    };
    if start >= end {
        return Err(error());
    }
    Ok((start, end, value.span()))
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
