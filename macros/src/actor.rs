//! `#[actor]`: on a struct it declares the actor (placement, mailbox, label) and generates its
//! ref type and `spawn`; on the struct's inherent impl it turns methods into handlers and
//! generates the message enum, the `Actor` impl and one ask, tell and try method per handler
//! on the ref.
//!
//! The two halves meet through names: the struct half defines `<Name>Ref` (with the struct's
//! visibility) and `impl Declared`; the impl half defines `__<Name>Message`, `impl Actor`
//! (whose supertrait `Declared` reports a missing struct half) and the ref's methods.
//! Generated code names the crate by absolute paths (`::actors::...`).

use crate::handler::{
    actor_of, check_generics, handle_arm, handler, is_context, is_named, is_reference_to,
    message_variant, pool_methods, ref_methods, resolve_self_in_generics, without_clashes,
};
use crate::options::edit_distance;
use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt as _;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Expr, ExprLit, FnArg, Ident, ImplItem, ImplItemFn, Item, ItemImpl, ItemStruct, Lit, Meta,
    ReturnType, Token, Type,
};

/// The largest mailbox: its slots come in at most eight blocks, allocated on first use.
const MAX_MAILBOX: u64 = 1 << 20;
const DEFAULT_MAILBOX: u64 = 64;

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let parsed: Item = syn::parse2(item.clone()).map_err(|_| {
        syn::Error::new(
            item.span(),
            "#[actor] goes on a struct, or on that struct's inherent `impl` block",
        )
    })?;
    match parsed {
        Item::Struct(structure) => expand_struct(args, structure),
        Item::Impl(impl_block) if impl_block.trait_.is_some() => {
            let mut expanded = expand_interface_impl(impl_block)?;
            if !args.is_empty() {
                expanded.extend(
                    syn::Error::new(
                        args.span(),
                        "#[actor] on an interface impl takes no options",
                    )
                    .into_compile_error(),
                );
            }
            Ok(expanded)
        }
        Item::Impl(impl_block) => {
            // A bad list is reported with the expansion, made without it: nothing else
            // then fails for want of the actor's impl.
            let (implements, remote, error) = match impl_options(args) {
                Ok((implements, remote)) => (implements, remote, None),
                Err(error) => (Vec::new(), None, Some(error.into_compile_error())),
            };
            let mut expanded = expand_impl(impl_block, &implements, remote)?;
            expanded.extend(error);
            Ok(expanded)
        }
        // The item stays, with the error: uses of it then report nothing more.
        Item::Enum(ref enumeration) => Ok(with_item(
            not_a_struct(enumeration.enum_token.span(), "an enum"),
            item,
        )),
        Item::Fn(ref function) => Ok(with_item(
            not_a_struct(function.sig.fn_token.span(), "a function"),
            item,
        )),
        Item::Trait(ref declaration) => Ok(with_item(
            not_a_struct(declaration.trait_token.span(), "a trait"),
            item,
        )),
        Item::Union(ref union) => Ok(with_item(
            not_a_struct(union.union_token.span(), "a union"),
            item,
        )),
        other => Err(syn::Error::new(
            other.span(),
            "#[actor] goes on a struct, or on that struct's inherent `impl` block",
        )),
    }
}

const BORROWING_ACTOR: &str = "an actor cannot borrow: its state moves to the actor's task, \
                               so it owns what it holds (`'static`); take the lifetime off";

fn with_item(error: syn::Error, item: TokenStream) -> TokenStream {
    let mut tokens = error.into_compile_error();
    tokens.extend(item);
    tokens
}

fn not_a_struct(span: Span, what: &str) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "#[actor] cannot go on {what}: it goes on a struct (the actor's state), and on that \
             struct's inherent `impl` block (its handlers)"
        ),
    )
}

/// Where the actor runs, as written.
#[derive(Clone, Copy)]
enum Placement {
    Pool,
    Dedicated,
    Blocking,
}

struct StructOptions {
    placement: Option<(Placement, Ident)>,
    mailbox: Option<(u64, Span)>,
    name: Option<(String, Span)>,
    /// In milliseconds.
    ask_timeout: Option<u64>,
}

const PLACEMENTS: &[&str] = &["dedicated", "blocking"];
const OPTIONS: &[&str] = &["mailbox", "name", "ask_timeout"];

impl StructOptions {
    fn parse(args: TokenStream) -> syn::Result<Self> {
        let metas = Punctuated::<Meta, Token![,]>::parse_terminated
            .parse2(args)
            .map_err(|error| {
                syn::Error::new(
                    error.span(),
                    "#[actor] options are a placement (`dedicated` or `blocking`) and \
                     `mailbox = N`, `name = \"label\"`, comma separated",
                )
            })?;
        let mut options = StructOptions {
            placement: None,
            mailbox: None,
            name: None,
            ask_timeout: None,
        };
        for meta in metas {
            match meta {
                Meta::Path(path) => {
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
                                    "unknown placement `{other}`{}: an actor runs `dedicated` \
                                     (a thread of its own), `blocking` (a thread that may \
                                     block), or, with no placement, on the shared pool",
                                    did_you_mean(other, &[PLACEMENTS, OPTIONS].concat())
                                ),
                            ));
                        }
                    };
                    if let Some((_, first)) = &options.placement {
                        return Err(syn::Error::new(
                            ident.span(),
                            format!(
                                "two placements, `{first}` and `{ident}`: an actor has one \
                                 (`dedicated`, `blocking`, or none for the shared pool)"
                            ),
                        ));
                    }
                    options.placement = Some((placement, ident));
                }
                Meta::NameValue(pair) => {
                    let key = pair
                        .path
                        .get_ident()
                        .map(Ident::to_string)
                        .unwrap_or_default();
                    let span = pair.path.span();
                    match key.as_str() {
                        "mailbox" => {
                            if options.mailbox.is_some() {
                                return Err(duplicate(span, "mailbox"));
                            }
                            options.mailbox = Some((mailbox(&pair.value)?, pair.value.span()));
                        }
                        "name" => {
                            if options.name.is_some() {
                                return Err(duplicate(span, "name"));
                            }
                            options.name = Some((label(&pair.value)?, pair.value.span()));
                        }
                        "ask_timeout" => {
                            if options.ask_timeout.is_some() {
                                return Err(duplicate(span, "ask_timeout"));
                            }
                            options.ask_timeout = Some(ask_timeout(&pair.value)?);
                        }
                        other => {
                            return Err(syn::Error::new(
                                span,
                                format!(
                                    "unknown option `{other}`{}: #[actor] accepts `mailbox = N`, \
                                     `name = \"label\"` and `ask_timeout = \"5s\"`",
                                    did_you_mean(other, OPTIONS)
                                ),
                            ));
                        }
                    }
                }
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

fn duplicate(span: Span, option: &str) -> syn::Error {
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
        .and_then(crate::options::duration_millis)
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
    let valid = !label.is_empty()
        && label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
    if !valid {
        return Err(syn::Error::new(
            value.span(),
            format!("invalid actor name {label:?}: {message}"),
        ));
    }
    Ok(label)
}

/// ", did you mean `x`?" for the closest of `candidates` within two edits, or nothing.
fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    candidates
        .iter()
        .map(|candidate| (edit_distance(word, candidate), candidate))
        .filter(|(distance, _)| *distance <= 2.max(word.len() / 3))
        .min()
        .map(|(_, candidate)| format!(" (did you mean `{candidate}`?)"))
        .unwrap_or_default()
}

fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (index, character) in name.chars().enumerate() {
        if character.is_ascii_uppercase() {
            if index > 0 {
                out.push('_');
            }
            out.push(character.to_ascii_lowercase());
        } else {
            out.push(character);
        }
    }
    out
}

fn expand_struct(args: TokenStream, item: ItemStruct) -> syn::Result<TokenStream> {
    // With bad options, the error comes with an expansion on the defaults, so that the rest
    // of the program reports only its own errors.
    let (options, error) = match StructOptions::parse(args) {
        Ok(options) => (options, None),
        Err(error) => (
            StructOptions {
                placement: None,
                mailbox: None,
                name: None,
                ask_timeout: None,
            },
            Some(error.into_compile_error()),
        ),
    };
    if let Some(lifetime) = item.generics.lifetimes().next() {
        let error = syn::Error::new(lifetime.span(), BORROWING_ACTOR);
        return Ok(with_item(error, item.into_token_stream()));
    }
    let name = &item.ident;
    let generic = !item.generics.params.is_empty();
    let self_ty: Type = {
        let (_, type_generics, _) = item.generics.split_for_impl();
        syn::parse_quote!(#name #type_generics)
    };
    let generics = resolve_self_in_generics(&item.generics, name, &self_ty);
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    let this = quote!(#name #type_generics);
    // A generic ref names `Ref<Name<..>>`, which needs `Name<..>: Actor`: its items say so.
    let mut bounded = generics.clone();
    if generic {
        bounded
            .make_where_clause()
            .predicates
            .push(syn::parse_quote!(#this: ::actors::Actor));
    }
    let ref_where = &bounded.where_clause;
    let struct_params = &generics.params;
    let vis = &item.vis;
    let ref_name = format_ident!("{}Ref", name);
    let spawn_bound =
        generic.then(|| quote!(Self: ::actors::Actor<Ref = #ref_name #type_generics>));
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
    let mailbox = options
        .mailbox
        .map_or(DEFAULT_MAILBOX, |(capacity, _)| capacity) as usize;
    let placement = options.placement.as_ref().map(|(placement, _)| *placement);
    let on_pool = matches!(placement, None | Some(Placement::Pool));
    let placement = match placement {
        None | Some(Placement::Pool) => quote!(Pool),
        Some(Placement::Dedicated) => quote!(Dedicated),
        Some(Placement::Blocking) => quote!(Blocking),
    };
    let placed = if on_pool {
        quote!(::actors::__private::OnPool)
    } else {
        quote!(::actors::__private::OnItsThread)
    };
    // A pool actor moves between workers: its state must be `Send`, said where the struct is
    // declared (the check in its generated `__launch` would also catch it, less plainly).
    let pool_check = on_pool.then(|| {
        quote_spanned! {name.span()=>
            const _: () = {
                #[allow(dead_code)]
                fn check #impl_generics () #where_clause {
                    fn actors_on_the_shared_pool_must_be_send_use_actor_dedicated_for_state_that_is_not<
                        T: ::core::marker::Send,
                    >() {}
                    actors_on_the_shared_pool_must_be_send_use_actor_dedicated_for_state_that_is_not::<#this>();
                }
            };
        }
    });
    let ask_timeout = options.ask_timeout.map(|millis| {
        quote! {
            const ASK_TIMEOUT: ::core::option::Option<::core::time::Duration> =
                ::core::option::Option::Some(::core::time::Duration::from_millis(#millis));
        }
    });
    let ref_doc = format!(
        "A ref to the actor [`{name}`]: one method per handler (an ask), with `tell_`, \
         `try_` and `forward_` forms. Cheap to clone; the actor stops once every ref is dropped."
    );
    let pool_name = format_ident!("{}PoolRef", name);
    let pool_doc = format!(
        "A pool of [`{name}`] actors behind one ref (see [`actors::Pool`](::actors::Pool)): \
         the handler methods of [`{name}Ref`] (ask, `tell_`, `try_`), each routed to a member \
         by the pool's routing; `as_pool()` gives the [`PoolRef`](::actors::PoolRef) for \
         `route_by`, `resize` and `stop`."
    );
    let spawn_doc = format!(
        "Runs this actor in a child scope of `context` named `{label}`, and returns its ref."
    );
    let spawn_with_doc = if on_pool {
        format!(
            "Runs the actor `factory` builds (called where it runs) in a child scope of \
             `context` named `{label}`, and returns its ref."
        )
    } else {
        format!(
            "Runs the actor `factory` builds on the actor's own thread, in a child scope of \
             `context` named `{label}`, and returns its ref: its state need not be `Send`, as \
             it never leaves that thread."
        )
    };
    Ok(quote! {
        #error
        #item

        impl #impl_generics ::actors::Declared for #this #where_clause {
            const LABEL: &'static str = #label;
            const MAILBOX: usize = #mailbox;
            const PLACEMENT: ::actors::Placement = ::actors::Placement::#placement;
            #ask_timeout
            type __Placed = #placed;
        }

        #pool_check

        #[doc = #ref_doc]
        #vis struct #ref_name<#struct_params>(::actors::Ref<#this>) #ref_where;

        impl #impl_generics ::core::clone::Clone for #ref_name #type_generics #ref_where {
            fn clone(&self) -> Self {
                Self(::core::clone::Clone::clone(&self.0))
            }
        }

        impl #impl_generics ::core::convert::From<::actors::Ref<#this>> for #ref_name #type_generics #ref_where {
            fn from(inner: ::actors::Ref<#this>) -> Self {
                Self(inner)
            }
        }

        impl #impl_generics ::core::fmt::Debug for #ref_name #type_generics #ref_where {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Debug::fmt(&self.0, f)
            }
        }

        #[doc = #pool_doc]
        #vis struct #pool_name<#struct_params>(::actors::PoolRef<#this>) #ref_where;

        impl #impl_generics ::core::clone::Clone for #pool_name #type_generics #ref_where {
            fn clone(&self) -> Self {
                Self(::core::clone::Clone::clone(&self.0))
            }
        }

        impl #impl_generics ::core::convert::From<::actors::PoolRef<#this>> for #pool_name #type_generics #ref_where {
            fn from(pool: ::actors::PoolRef<#this>) -> Self {
                Self(pool)
            }
        }

        impl #impl_generics #pool_name #type_generics #ref_where {
            /// The pool itself: `route`, `route_by`, `all`, `size`, `resize`, `stop`.
            #vis fn as_pool(&self) -> &::actors::PoolRef<#this> {
                &self.0
            }
        }

        impl #impl_generics ::core::fmt::Debug for #pool_name #type_generics #ref_where {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl #impl_generics #ref_name #type_generics #ref_where {
            /// The untyped ref underneath: mailbox depth, capacity, whether it is closed.
            #vis fn inner(&self) -> &::actors::Ref<#this> {
                &self.0
            }

        }

        impl #impl_generics #this #where_clause {
            #[doc = #spawn_doc]
            ///
            /// The actor is built by the caller and moved to where it runs, so it must be
            /// `Send`; `spawn_with` builds one that is not on its own thread.
            #vis fn spawn<'__moved: 'static>(self, context: &::actors::__private::runtime::Context) -> #ref_name #type_generics
            where
                ::actors::__private::Moved<'__moved, Self>: ::core::marker::Send,
                #spawn_bound
            {
                ::actors::__private::spawn_moved(::actors::__private::Moved::new(self), context)
            }

            #[doc = #spawn_with_doc]
            #vis fn spawn_with(
                context: &::actors::__private::runtime::Context,
                factory: impl ::core::ops::FnOnce() -> Self + ::core::marker::Send + 'static,
            ) -> #ref_name #type_generics
            where
                #spawn_bound
            {
                ::actors::spawn_with(context, factory)
            }
        }
    })
}

/// The optional hooks, by name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HookKind {
    Start,
    Stop,
    Down,
    LinkExit,
}

impl HookKind {
    fn of(name: &str) -> Option<Self> {
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

/// A hook: `on_start`, `on_stop`, `on_down` or `on_link_exit`.
struct Hook {
    asyncness: bool,
    takes_context: bool,
    /// `on_stop` takes the exit reason.
    takes_reason: bool,
    /// Its `#[cfg]` attributes: compiled out, the trait's default hook applies.
    cfgs: Vec<syn::Attribute>,
}

/// The options an inherent impl takes: `remote` (its span) and the interfaces
/// `implements(A, path::B)` lists.
fn impl_options(args: TokenStream) -> syn::Result<(Vec<syn::Path>, Option<Span>)> {
    if args.is_empty() {
        return Ok((Vec::new(), None));
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
    Ok((implements.unwrap_or_default(), remote))
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
        path_ident(path)?;
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
fn path_ident(path: &syn::Path) -> syn::Result<&Ident> {
    let last = path.segments.last().expect("a path has a segment");
    if !last.arguments.is_empty() {
        return Err(syn::Error::new(
            last.arguments.span(),
            "an interface is not generic: name it without arguments",
        ));
    }
    Ok(&last.ident)
}

/// `path` with its last segment renamed by `rename` (`api::Greeter` to `api::GreeterRef`).
fn sibling(path: &syn::Path, rename: impl FnOnce(&Ident) -> Ident) -> syn::Path {
    let mut path = path.clone();
    let last = path.segments.last_mut().expect("a path has a segment");
    last.ident = rename(&last.ident);
    path
}

/// Traits of the standard library an actor may implement, none of them an interface.
const STANDARD_TRAITS: &[&str] = &[
    "Clone",
    "Copy",
    "Debug",
    "Default",
    "Display",
    "Drop",
    "Eq",
    "From",
    "Hash",
    "Into",
    "Iterator",
    "Ord",
    "PartialEq",
    "PartialOrd",
    "Send",
    "Sync",
    "TryFrom",
];

/// `#[actor] impl Interface for Actor { ... }`: the impl as written, and `From<ActorRef>`
/// for the interface's ref. The trait's own declaration (`#[interface]`) checks the
/// handlers; the actor lists the interface in `implements(..)` for its messages to carry it.
fn expand_interface_impl(item: ItemImpl) -> syn::Result<TokenStream> {
    let (_, interface, _) = item.trait_.as_ref().expect("a trait impl");
    if let Some(lifetime) = item.generics.lifetimes().next() {
        return Err(syn::Error::new(lifetime.span(), BORROWING_ACTOR));
    }
    let (name, self_arguments) = actor_of(&item.self_ty, "impl Interface for Name { ... }")?;
    let interface_name = path_ident(interface)?;
    // A standard trait is never an interface: say so, rather than let the generated code
    // miss its `<Trait>Ref` (which is what an undeclared interface of one's own reports).
    if STANDARD_TRAITS.contains(&interface_name.to_string().as_str()) {
        return Err(syn::Error::new(
            interface.span(),
            format!(
                "`{interface_name}` is not an interface: #[actor] goes on the actor's inherent \
                 `impl` block, or on `impl Interface for Actor` for a trait declared with \
                 `#[interface]`; take #[actor] off this impl"
            ),
        ));
    }
    let interface_ref = sibling(interface, |ident| format_ident!("{}Ref", ident));
    let ref_name = format_ident!("{}Ref", name);
    let (impl_generics, _, where_clause) = item.generics.split_for_impl();
    let note = format!(
        "`{interface_name}` must be declared with `#[interface]` (which generates \
         `{interface_name}Ref`) for `#[actor] impl {interface_name} for {name}`"
    );
    let from = quote_spanned! {interface.span()=>
        impl #impl_generics ::core::convert::From<#ref_name #self_arguments> for #interface_ref #where_clause {
            #[doc = #note]
            fn from(actor: #ref_name #self_arguments) -> Self {
                #interface_ref::__of(actor.inner())
            }
        }
    };
    Ok(quote! {
        #item
        #from
    })
}

fn expand_impl(
    item: ItemImpl,
    implements: &[syn::Path],
    remote: Option<Span>,
) -> syn::Result<TokenStream> {
    if let Some(lifetime) = item.generics.lifetimes().next() {
        return Err(syn::Error::new(lifetime.span(), BORROWING_ACTOR));
    }
    let (name, self_arguments) = actor_of(&item.self_ty, "impl Name { ... }")?;
    let mut handlers = Vec::new();
    let mut hooks: Vec<(HookKind, Hook)> = Vec::new();
    // A bad handler is reported and left out of the expansion, which goes on with the rest:
    // the program then reports every bad handler, and nothing that follows from them.
    let mut errors: Option<syn::Error> = None;
    let mut report = |error: syn::Error| match &mut errors {
        Some(errors) => errors.combine(error),
        None => errors = Some(error),
    };
    for member in &item.items {
        let ImplItem::Fn(method) = member else {
            continue;
        };
        let Some(receiver) = method.sig.receiver() else {
            // An associated function (a constructor, say): not a handler.
            continue;
        };
        if receiver.colon_token.is_some() {
            report(syn::Error::new(
                receiver.span(),
                format!(
                    "handler `{}` declares its receiver's type: write `&self` or `&mut self`",
                    method.sig.ident
                ),
            ));
            continue;
        }
        if receiver.reference.is_none() {
            report(syn::Error::new(
                receiver.span(),
                format!(
                    "handler `{}` takes `self` by value: a handler takes `&self` or `&mut \
                     self`, since the actor keeps its state between messages",
                    method.sig.ident
                ),
            ));
            continue;
        }
        match HookKind::of(&method.sig.ident.to_string()) {
            Some(kind) => match hook(method, kind) {
                Ok(hook) => hooks.push((kind, hook)),
                Err(error) => report(error),
            },
            None => match handler(
                &method.sig,
                &method.attrs,
                &method.vis,
                &name,
                &item.self_ty,
            ) {
                Ok(handler) => handlers.push(handler),
                Err(error) => report(error),
            },
        }
    }
    let handlers = without_clashes(handlers, true, &mut report);
    let errors = errors.map(syn::Error::into_compile_error);

    let message = format_ident!("__{}Message", name);
    let ref_name = format_ident!("{}Ref", name);
    let self_ty = &*item.self_ty;
    let generics = resolve_self_in_generics(&item.generics, &name, self_ty);
    let (impl_generics, type_generics, where_clause) = generics.split_for_impl();
    // Items naming `Ref<Name<..>>` or `Call<Name<..>>` need `Name<..>: Actor`, which the
    // `Actor` impl below proves from the impl's own bounds (a where-bound saying so would
    // hide that impl's `Message` from them).
    let actor_where = where_clause;
    let enum_params = &generics.params;
    let ref_ty = quote!(#ref_name #self_arguments);
    let message_ty = quote!(#message #type_generics);
    let variants = handlers.iter().map(message_variant);
    let callee = quote!(<#self_ty>);
    let arms = handlers
        .iter()
        .map(|handler| handle_arm(handler, &quote!(#message), &callee));
    let hook_methods = hooks.iter().map(|(kind, hook)| {
        let context = hook.takes_context.then(|| quote!(ctx,));
        let cfgs = &hook.cfgs;
        let (method, parameters, arguments, unused) = match kind {
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
                    if *kind == HookKind::Down {
                        "on_down"
                    } else {
                        "on_link_exit"
                    }
                ),
                quote!(, id: ::actors::ActorId, reason: ::actors::ExitReason),
                quote!(id, reason),
                (!hook.takes_context).then(|| quote!(let _ = ctx;)),
            ),
        };
        let call = quote!(<#self_ty>::#method(self, #context #arguments));
        let call = if hook.asyncness {
            quote!(#call.await;)
        } else {
            quote!(#call;)
        };
        let traps = (*kind == HookKind::LinkExit)
            .then(|| quote!(#(#cfgs)* const TRAPS_EXITS: bool = true;));
        quote! {
            #traps
            #(#cfgs)*
            async fn #method(&mut self, ctx: &mut ::actors::Context<Self> #parameters) {
                #unused
                #call
            }
        }
    });
    let interfaces: Vec<_> = implements
        .iter()
        .enumerate()
        .map(|(index, interface)| {
            // By position: two interfaces may share a last segment (`a::Store`, `b::Store`).
            let variant = format_ident!("__Interface{}", index);
            let messages = sibling(interface, |ident| format_ident!("{}Message", ident));
            (interface, variant, messages)
        })
        .collect();
    let interface_variants = interfaces
        .iter()
        .map(|(_, variant, messages)| quote!(#variant(#messages)));
    let interface_arms = interfaces.iter().map(|(interface, variant, _)| {
        quote! {
            #message::#variant(message) => <Self as #interface>::__handle(self, ctx, message).await,
        }
    });
    let accepts = interfaces.iter().map(|(_, variant, messages)| {
        quote! {
            impl #impl_generics ::actors::__private::Implements<#messages> for #self_ty #actor_where {
                fn wrap(message: #messages) -> #message_ty {
                    #message::#variant(message)
                }
            }
        }
    });
    let pool_ty = {
        let pool_name = format_ident!("{}PoolRef", name);
        quote!(#pool_name #self_arguments)
    };
    let pool_methods = handlers.iter().map(pool_methods);
    let methods = handlers.iter().map(|handler| {
        let reply = &handler.reply;
        ref_methods(
            handler,
            &quote!(#message),
            &quote!(::actors::Ask<'_, #self_ty, #reply>),
            true,
        )
    });
    // Each argument travels in a message: it must be `Send + 'static`, checked where it is
    // written so the error points there.
    let (check_generics, check_where) = (&impl_generics, &where_clause);
    let checks = handlers.iter().flat_map(|handler| {
        let reply = std::iter::once(&handler.reply);
        let cfgs = &handler.cfgs;
        handler.arguments.iter().map(|(_, ty)| ty).chain(reply).map(move |ty| {
            // In a generic impl the types may name its parameters: the check is a function
            // with the impl's generics and bounds.
            quote_spanned! {ty.span()=>
                #(#cfgs)*
                const _: () = {
                    #[allow(dead_code)]
                    fn check #check_generics () #check_where {
                        fn handler_types_must_be_send_and_static<T: ::core::marker::Send + 'static>() {}
                        handler_types_must_be_send_and_static::<#ty>();
                    }
                };
            }
        })
    });
    let remote = match remote {
        Some(span) => {
            match crate::remote::expand(&handlers, &name, self_ty, &generics, &message, span) {
                Ok(tokens) => tokens,
                Err(error) => error.into_compile_error(),
            }
        }
        None => quote!(),
    };
    let message_doc = format!("The messages of [`{name}`]'s handlers (generated).");
    Ok(quote! {
        #errors
        #item

        #(#checks)*

        #[doc = #message_doc]
        #[doc(hidden)]
        #[allow(non_camel_case_types, private_interfaces, private_bounds)]
        pub enum #message<#enum_params> #actor_where {
            #(#variants,)*
            #(#interface_variants,)*
            /// A closure run on the actor: a timer's tick, an attached stream's item.
            __Call(::actors::__private::Call<#self_ty>),
        }

        #(#accepts)*

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

            #(#hook_methods)*
        }

        #remote

        #[allow(private_interfaces)]
        impl #impl_generics #ref_ty #actor_where {
            /// The actor's id, shown as `label#n`.
            pub fn id(&self) -> ::actors::ActorId {
                self.0.id()
            }

            /// Asks the actor to stop after the messages queued before this call; resolves
            /// with its exit reason once its `on_stop` has finished (see
            /// [`Ref::stop`](::actors::Ref::stop)).
            pub fn stop(&self) -> ::actors::Join {
                self.0.stop()
            }

            /// Resolves with the actor's exit reason whenever it ends, without asking it to
            /// (see [`Ref::join`](::actors::Ref::join)).
            pub fn join(&self) -> ::actors::Join {
                self.0.join()
            }

            /// A ref that does not keep the actor alive.
            pub fn downgrade(&self) -> ::actors::WeakRef<#self_ty> {
                self.0.downgrade()
            }

            #(#methods)*
        }

        #[allow(private_interfaces)]
        impl #impl_generics #pool_ty #actor_where {
            #(#pool_methods)*
        }

        impl #impl_generics ::actors::Registrable for #ref_ty #actor_where {
            type Weak = ::actors::WeakRef<#self_ty>;

            fn __downgrade(&self) -> Self::Weak {
                self.0.downgrade()
            }

            fn __upgrade(weak: &Self::Weak) -> ::core::option::Option<Self> {
                weak.__upgrade_ref().map(::core::convert::From::from)
            }
        }

        impl #impl_generics ::actors::ActorHandle for #ref_ty #actor_where {
            fn actor_id(&self) -> ::actors::ActorId {
                self.0.id()
            }

            fn __peer(&self) -> ::actors::PeerHandle {
                ::actors::ActorHandle::__peer(&self.0)
            }
        }
    })
}

fn hook(method: &ImplItemFn, kind: HookKind) -> syn::Result<Hook> {
    check_generics(&method.sig)?;
    let name = &method.sig.ident;
    let wrong =
        |span: Span| syn::Error::new(span, format!("`{name}` is a hook: {}", kind.signature()));
    let mut inputs = method.sig.inputs.iter().skip(1).peekable();
    let takes_context = match inputs.peek() {
        Some(FnArg::Typed(argument)) if is_context(&argument.ty) => {
            inputs.next();
            true
        }
        _ => false,
    };
    let rest: Vec<&FnArg> = inputs.collect();
    let typed = |argument: &FnArg| match argument {
        FnArg::Typed(argument) => Some((*argument.ty).clone()),
        FnArg::Receiver(_) => None,
    };
    let mut takes_reason = false;
    match kind {
        HookKind::Start => {
            if let Some(extra) = rest.first() {
                return Err(wrong(extra.span()));
            }
        }
        HookKind::Stop => match rest.as_slice() {
            [] => {}
            [reason] if typed(reason).is_some_and(|ty| is_reference_to(&ty, "ExitReason")) => {
                takes_reason = true;
            }
            [first, ..] => {
                let offending = if typed(first).is_some_and(|ty| is_reference_to(&ty, "ExitReason"))
                {
                    rest[1]
                } else {
                    first
                };
                return Err(wrong(offending.span()));
            }
        },
        HookKind::Down | HookKind::LinkExit => {
            let expected = ["ActorId", "ExitReason"];
            for (index, wanted) in expected.iter().enumerate() {
                match rest.get(index) {
                    Some(argument) if typed(argument).is_some_and(|ty| is_named(&ty, wanted)) => {}
                    Some(argument) => return Err(wrong(argument.span())),
                    None => return Err(wrong(method.sig.paren_token.span.join())),
                }
            }
            if let Some(extra) = rest.get(expected.len()) {
                return Err(wrong(extra.span()));
            }
        }
    }
    if let ReturnType::Type(_, ty) = &method.sig.output {
        return Err(syn::Error::new(
            ty.span(),
            format!("`{name}` is a hook: it returns nothing"),
        ));
    }
    Ok(Hook {
        asyncness: method.sig.asyncness.is_some(),
        takes_context,
        takes_reason,
        cfgs: method
            .attrs
            .iter()
            .filter(|attribute| attribute.path().is_ident("cfg"))
            .cloned()
            .collect(),
    })
}
