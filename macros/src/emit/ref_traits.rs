//! The trait impls generated refs share: `Clone` through the ref they wrap, `From` that ref,
//! and `ActorHandle` (what monitors and links take). Their `Debug` is `debug`'s.

use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote};

/// A generated ref type as its impls name it: `impl #generics Trait for #ty #where_clause`.
pub(crate) struct RefType {
    pub(crate) generics: TokenStream,
    pub(crate) ty: TokenStream,
    pub(crate) where_clause: TokenStream,
}

/// `Clone`, cloning the wrapped ref.
pub(crate) struct CloneImpl<'a>(pub(crate) &'a RefType);

impl ToTokens for CloneImpl<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let RefType {
            generics,
            ty,
            where_clause,
        } = self.0;
        tokens.extend(quote! {
            impl #generics ::core::clone::Clone for #ty #where_clause {
                fn clone(&self) -> Self {
                    Self(::core::clone::Clone::clone(&self.0))
                }
            }
        });
    }
}

/// `From<wrapped>`: the ref around a `wrapped` (taken as `parameter`).
pub(crate) struct FromImpl<'a> {
    pub(crate) ty: &'a RefType,
    pub(crate) wrapped: TokenStream,
    pub(crate) parameter: Ident,
}

impl ToTokens for FromImpl<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let RefType {
            generics,
            ty,
            where_clause,
        } = self.ty;
        let (wrapped, parameter) = (&self.wrapped, &self.parameter);
        tokens.extend(quote! {
            impl #generics ::core::convert::From<#wrapped> for #ty #where_clause {
                fn from(#parameter: #wrapped) -> Self {
                    Self(#parameter)
                }
            }
        });
    }
}

/// `ActorHandle`, through the wrapped ref's.
pub(crate) struct ActorHandleImpl<'a>(pub(crate) &'a RefType);

impl ToTokens for ActorHandleImpl<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let RefType {
            generics,
            ty,
            where_clause,
        } = self.0;
        tokens.extend(quote! {
            impl #generics ::actors::ActorHandle for #ty #where_clause {
                fn actor_id(&self) -> ::actors::ActorId {
                    self.0.id()
                }

                fn __peer(&self) -> ::actors::PeerHandle {
                    ::actors::ActorHandle::__peer(&self.0)
                }
            }
        });
    }
}
