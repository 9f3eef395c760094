//! `#[runtime::test]`: an `async fn` test runs as the root of a fresh runner, with a fresh
//! storage directory that is removed afterwards, pass or fail, and an optional timeout.

use super::function::Entry;
use super::options::{Attribute, Options};
use proc_macro2::TokenStream;
use quote::quote;

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let entry = Entry::parse(Attribute::Test, item)?;
    let options = Options::parse(Attribute::Test, args)?;
    let attrs = entry.outer_attributes();
    let vis = &entry.function.vis;
    let ident = &entry.function.sig.ident;
    let output = entry.output();
    let (body, call) = entry.body();
    let config = options.config();
    let checks = options.checks();
    if options.deterministic.is_some() {
        return Ok(deterministic(&entry, &options));
    }
    let timeout = match &options.timeout {
        Some((millis, text, _)) => quote!(::core::option::Option::Some((#millis, #text))),
        None => quote!(::core::option::Option::None),
    };
    Ok(quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        #vis fn #ident() #output {
            #checks
            #body
            ::runtime::__private::run_test(#config, #timeout, #call)
        }
    })
}

/// A deterministic test: the body runs once per seed, each a deterministic run; its output
/// (`()` or a `Result`) is checked inside the run, so an `Err` fails that seed.
fn deterministic(entry: &Entry, options: &Options) -> TokenStream {
    let attrs = entry.outer_attributes();
    let vis = &entry.function.vis;
    let ident = &entry.function.sig.ident;
    let (body, call) = entry.body();
    let (start, end) = match options.seeds {
        Some((start, end, _)) => (start, end),
        None => (0u64, 1u64),
    };
    let mut runner = quote!(::runtime::deterministic::Runner::seeded(seed));
    if let Some((millis, _, _)) = &options.timeout {
        runner = quote!(#runner.with_timeout(::core::time::Duration::from_millis(#millis)));
    }
    if let Some(catch) = options.catch_panics() {
        runner = quote!(#runner.with_catch_panics(#catch));
    }
    quote! {
        #[::core::prelude::v1::test]
        #(#attrs)*
        #vis fn #ident() {
            #body
            let call = #call;
            ::runtime::__private::run_deterministic_test(
                #start..#end,
                |seed: u64| #runner,
                move |context: ::runtime::Context| {
                    let body = call(context);
                    async move { ::runtime::__private::TestOutput::check(body.await) }
                },
            )
        }
    }
}
