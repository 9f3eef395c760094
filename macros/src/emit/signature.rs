//! A handler's arguments as generated code takes and passes them.

use crate::model::Handler;
use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

/// The argument names, and the parameters (`name: Type`) a generated method takes.
pub(crate) fn handler_signature(handler: &Handler) -> (Vec<&Ident>, Vec<TokenStream>) {
    let names = handler.arguments.iter().map(|(name, _)| name).collect();
    let parameters = handler
        .arguments
        .iter()
        .map(|(name, ty)| quote!(#name: #ty))
        .collect();
    (names, parameters)
}

/// Names for the handler's arguments in generated patterns: `__argument_0`, ... (a user's
/// argument may be called `ctx` or another name the generated code uses).
pub(crate) fn positional_names(handler: &Handler) -> Vec<Ident> {
    (0..handler.arguments.len())
        .map(|index| format_ident!("__argument_{}", index))
        .collect()
}
