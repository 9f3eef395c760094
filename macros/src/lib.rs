//! Attribute macros for the runtime: `#[runtime::main]` and `#[runtime::test]` (re-exported by
//! the `runtime` crate; use them through it), and `#[actor]` and `#[interface]` (re-exported by
//! `actors`).
//!
//! Both attributes turn an `async fn` into a plain function that starts a
//! [`Runner`](../runtime/struct.Runner.html) and runs the body as its root. The body keeps its
//! own signature (it becomes an inner `async fn`), so `?`, `return` and the declared return type
//! work as written. Generated code names the runtime only by absolute paths (`::runtime::...`).
//!
//! Every misuse is a compile error spanning the offending tokens and saying what is allowed;
//! `ui-tests/` holds one case per error.
//!
//! Each attribute is parsed once into a model that holds every check (`model`, and `entry`
//! for the runtime's attributes), then emitted item by item (`emit`): see `ARCHITECTURE.md`.

#![warn(missing_docs)]

mod emit;
mod entry;
mod model;
mod spelling;

use proc_macro::TokenStream;
use quote::ToTokens;

/// Runs `async fn main()` (or `async fn main(context: runtime::Context)`) on the runtime.
///
/// Options: `worker_threads = N`, `catch_panics = bool`, `storage_directory = "path"`,
/// `config = path::to::fn` (a `fn() -> runtime::Config`; the other options apply on top).
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    entry::main::expand(args.into(), item.clone().into())
        .unwrap_or_else(|error| {
            // With the error, a stand-in `main` when the item was one: the program's only
            // error is then ours, not also "`main` function not found".
            let mut tokens = error.into_compile_error();
            if syn::parse::<syn::ItemFn>(item).is_ok_and(|function| function.sig.ident == "main") {
                tokens.extend(quote::quote!(
                    fn main() {}
                ));
            }
            tokens
        })
        .into()
}

/// Runs an `async fn` test on a fresh runtime with its own storage directory, removed
/// afterwards even when the test fails.
///
/// Options: those of `#[runtime::main]`, plus `timeout = "10s"` (also `"500ms"`, `"2m"`): the
/// test fails, naming the timeout, if its future has not finished by then.
///
/// `deterministic` runs the body on `runtime::deterministic::Runner` instead (the runtime's
/// `deterministic` feature): once per seed of `seed = N` (0 by default) or `seeds = a..b`,
/// each a run of its own, on as many threads as there are cores; `timeout` is then virtual
/// time and `catch_panics` applies, while the options that shape a native runner are refused.
/// A failing seed prints itself; `RUNTIME_SEED=n` replays it.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    entry::test::expand(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Declares an actor: on a struct, its placement (`dedicated`, `blocking`, or none for the
/// shared pool) and options `mailbox = N`, `name = "label"`; on the struct's inherent impl,
/// its handlers. See the `actors` crate.
#[proc_macro_attribute]
pub fn actor(args: TokenStream, item: TokenStream) -> TokenStream {
    model::ActorAttribute::parse(args.into(), item.into())
        .map_or_else(syn::Error::into_compile_error, ToTokens::into_token_stream)
        .into()
}

/// Declares an interface: a trait of handler signatures that several actor types implement
/// (`#[actor] impl Trait for Actor`), and a `<Trait>Ref` any of them can stand behind.
/// Re-exported by `actors`; see its documentation.
#[proc_macro_attribute]
pub fn interface(args: TokenStream, item: TokenStream) -> TokenStream {
    model::Interface::parse(args.into(), item.into())
        .map_or_else(syn::Error::into_compile_error, ToTokens::into_token_stream)
        .into()
}
