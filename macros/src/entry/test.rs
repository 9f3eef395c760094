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
