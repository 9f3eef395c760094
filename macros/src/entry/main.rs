//! `#[runtime::main]`: `async fn main` becomes `fn main` that starts a runner with the body as
//! its root; its return value (`()` or `Result<(), E: Debug>`) is the program's.

use super::function::Entry;
use super::options::{Attribute, Options};
use proc_macro2::TokenStream;
use quote::quote;

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let entry = Entry::parse(Attribute::Main, item)?;
    let options = Options::parse(Attribute::Main, args)?;
    let ident = &entry.function.sig.ident;
    if ident != "main" {
        return Err(syn::Error::new(
            ident.span(),
            format!(
                "#[runtime::main] goes on `async fn main`, not `{ident}`; use #[runtime::test] \
                 for tests, or `runtime::Runner` to start a runtime from another function"
            ),
        ));
    }
    let attrs = entry.outer_attributes();
    let vis = &entry.function.vis;
    let output = entry.output();
    let (body, call) = entry.body();
    let config = options.config();
    let checks = options.checks();
    Ok(quote! {
        #(#attrs)*
        #vis fn main() #output {
            #checks
            #body
            ::runtime::Runner::new(#config).start(#call)
        }
    })
}
