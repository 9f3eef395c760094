//! `#[actor(..)]` on a struct: the actor's state type, where it runs, its mailbox and its
//! label. A parsed `ActorStruct` holds only valid values: bad options are an error carried
//! along, with the defaults in their place.

use super::errors::Errors;
use super::struct_options::{DEFAULT_MAILBOX, Placement, StructOptions};
use super::types::resolve_self_in_generics;
use crate::spelling::snake_case;
use proc_macro2::TokenStream;
use syn::ext::IdentExt as _;
use syn::{ItemStruct, Type};

pub(crate) struct ActorStruct {
    /// The options' error: the rest is made on the defaults, so that the program reports
    /// only its own errors besides.
    pub(crate) errors: Errors,
    /// The struct as written.
    pub(crate) item: ItemStruct,
    /// The struct's generics, `Self` in their bounds resolved to the struct's type.
    pub(crate) generics: syn::Generics,
    /// What the actor's ids show: ASCII letters, digits and `_`.
    pub(crate) label: String,
    pub(crate) mailbox: usize,
    pub(crate) placement: Placement,
    /// In milliseconds.
    pub(crate) ask_timeout: Option<u64>,
    /// Whether a panic of an unsupervised incarnation fails the runner.
    pub(crate) panic_fails_runner: bool,
}

impl ActorStruct {
    /// The actor `item` declares (it has no lifetime), with the options `args`.
    pub(crate) fn parse(args: TokenStream, item: ItemStruct) -> syn::Result<Self> {
        let (options, errors) = match syn::parse2::<StructOptions>(args) {
            Ok(options) => (options, Errors::default()),
            Err(error) => (StructOptions::default(), Errors::from(Some(error))),
        };
        let name = &item.ident;
        let label = match &options.name {
            Some((label, _)) => label.clone(),
            None => snake_case(&name.unraw().to_string()),
        };
        if !label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        {
            return Err(syn::Error::new(
                name.span(),
                format!(
                    "the default label of `{name}` would be {label:?}, but labels are ASCII \
                     letters, digits and `_`: give one with `#[actor(name = \"...\")]`"
                ),
            ));
        }
        let self_ty: Type = {
            let (_, type_generics, _) = item.generics.split_for_impl();
            syn::parse_quote!(#name #type_generics)
        };
        let generics = resolve_self_in_generics(&item.generics, name, &self_ty);
        Ok(ActorStruct {
            errors,
            generics,
            label,
            mailbox: options
                .mailbox
                .map_or(DEFAULT_MAILBOX, |(capacity, _)| capacity) as usize,
            placement: options
                .placement
                .map_or(Placement::Pool, |(placement, _)| placement),
            ask_timeout: options.ask_timeout,
            panic_fails_runner: options.panic_fails_runner.unwrap_or(false),
            item,
        })
    }

    /// Whether the actor runs on the shared pool (and so must be `Send`).
    pub(crate) fn on_pool(&self) -> bool {
        self.placement == Placement::Pool
    }
}
