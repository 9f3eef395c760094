//! The arguments of `#[actor(..)]` on an actor's inherent impl: `remote`, and the interfaces
//! it implements, `implements(A, path::B)`, each listed once and named without arguments.

use super::struct_options::duplicate;
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Ident, Meta, Token};

/// The options as written.
#[derive(Default)]
pub(crate) struct ImplOptions {
    pub(crate) implements: Vec<syn::Path>,
    /// Where `remote` is written, if it is.
    pub(crate) remote: Option<Span>,
}

impl Parse for ImplOptions {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let args: TokenStream = input.parse()?;
        if args.is_empty() {
            return Ok(ImplOptions::default());
        }
        let misplaced = |span: Span| {
            syn::Error::new(
                span,
                "#[actor] on an `impl` block takes only `remote` and `implements(Interface, ..)`: \
                 put the placement and options on the struct, as `#[actor(dedicated, mailbox = \
                 128)]`",
            )
        };
        let metas = Punctuated::<Meta, Token![,]>::parse_terminated
            .parse2(args.clone())
            .map_err(|_| misplaced(args.span()))?;
        let mut implements = None;
        let mut remote = None;
        for meta in &metas {
            match meta {
                Meta::Path(path) if path.is_ident("remote") => {
                    if remote.is_some() {
                        return Err(duplicate(path.span(), "remote"));
                    }
                    remote = Some(path.span());
                }
                Meta::List(list) if list.path.is_ident("implements") => {
                    if implements.is_some() {
                        return Err(duplicate(list.path.span(), "implements"));
                    }
                    implements = Some(interfaces(list)?);
                }
                Meta::List(list) => return Err(misplaced(list.path.span())),
                other => return Err(misplaced(other.span())),
            }
        }
        Ok(ImplOptions {
            implements: implements.unwrap_or_default(),
            remote,
        })
    }
}

/// The interfaces `implements(A, path::B)` lists.
fn interfaces(list: &syn::MetaList) -> syn::Result<Vec<syn::Path>> {
    let paths = Punctuated::<syn::Path, Token![,]>::parse_terminated.parse2(list.tokens.clone())?;
    if paths.is_empty() {
        return Err(syn::Error::new(
            list.span(),
            "`implements(..)` names at least one interface",
        ));
    }
    let mut seen: Vec<String> = Vec::new();
    for path in &paths {
        interface_name(path)?;
        let written = path.to_token_stream().to_string();
        if seen.contains(&written) {
            return Err(syn::Error::new(
                path.span(),
                format!("the interface `{written}` is listed twice"),
            ));
        }
        seen.push(written);
    }
    Ok(paths.into_iter().collect())
}

/// The last segment's name of an interface's path, which must carry no generic arguments.
pub(crate) fn interface_name(path: &syn::Path) -> syn::Result<&Ident> {
    let last = path.segments.last().expect("a path has a segment");
    if !last.arguments.is_empty() {
        return Err(syn::Error::new(
            last.arguments.span(),
            "an interface is not generic: name it without arguments",
        ));
    }
    Ok(&last.ident)
}
