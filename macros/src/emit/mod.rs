//! The emitters: each generated item is one `ToTokens` type reading a model
//! (`crate::model`). Emitters report no errors of their own; they only place the errors
//! the parse found, where the expansion reports them.
//!
//! Generated code names the crate by absolute paths (`::actors::...`), so it expands the
//! same wherever the attribute is used.

mod actor_impl;
mod actor_struct;
mod actor_trait;
mod checks;
mod debug;
mod handler_name;
mod interface;
mod interface_impl;
mod message;
mod names;
mod ref_methods;
mod ref_traits;
mod remote;
mod shape;
mod signature;

use crate::model::{ActorAttribute, Errors};
use proc_macro2::TokenStream;
use quote::ToTokens;

impl ToTokens for ActorAttribute {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            ActorAttribute::Struct(model) => model.to_tokens(tokens),
            ActorAttribute::Impl(model) => model.to_tokens(tokens),
            ActorAttribute::InterfaceImpl(model) => model.to_tokens(tokens),
            // The item stays, with the error: uses of it then report nothing more.
            ActorAttribute::Refused { error, item } => {
                tokens.extend(error.to_compile_error());
                tokens.extend(item.clone());
            }
        }
    }
}

impl ToTokens for Errors {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        if let Some(error) = self.get() {
            tokens.extend(error.to_compile_error());
        }
    }
}
