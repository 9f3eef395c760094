//! The function an attribute goes on: `async fn name()` or `async fn name(context: Context)`,
//! with no generics and no other qualifiers. Its parts are kept for the expansion.

use super::options::Attribute;
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

/// A checked function.
pub(crate) struct Entry {
    pub(crate) function: ItemFn,
    /// The parameter receiving the root `Context`, if the function declares one.
    pub(crate) context: Option<(Box<Pat>, Box<Type>)>,
}

impl Entry {
    /// Parses `item` and checks its signature.
    pub(crate) fn parse(attribute: Attribute, item: TokenStream) -> syn::Result<Self> {
        let function: ItemFn = syn::parse2(item.clone()).map_err(|_| {
            syn::Error::new(
                item.span(),
                format!(
                    "{} goes on an `async fn` with no parameters or one `context: \
                     runtime::Context` parameter",
                    attribute.name()
                ),
            )
        })?;
        check_signature(attribute, &function.sig)?;
        let context = context_parameter(attribute, &function.sig)?;
        Ok(Self { function, context })
    }

    /// The body as an inner `async fn` with the user's signature, so `?`, `return` and the
    /// declared return type work unchanged, and the closure that calls it with the root
    /// context.
    pub(crate) fn body(&self) -> (TokenStream, TokenStream) {
        let output = &self.function.sig.output;
        // syn hands a body's inner attributes (`#![allow(..)]`) over with the function's: they
        // go back inside the body, the outer ones stay on the generated function.
        let inner = self
            .function
            .attrs
            .iter()
            .filter(|attribute| matches!(attribute.style, syn::AttrStyle::Inner(_)));
        let statements = &self.function.block.stmts;
        let block = quote!({ #(#inner)* #(#statements)* });
        match &self.context {
            Some((pat, ty)) => (
                quote! {
                    async fn __runtime_body(#pat: #ty) #output #block
                },
                // Spanned on the user's type, so a type error points there.
                quote_spanned!(ty.span()=> |context: #ty| __runtime_body(context)),
            ),
            None => (
                quote! {
                    async fn __runtime_body() #output #block
                },
                quote!(|_: ::runtime::Context| __runtime_body()),
            ),
        }
    }

    /// The function's outer attributes (`#[doc]`, `#[should_panic]`, ...), for the generated
    /// function.
    pub(crate) fn outer_attributes(&self) -> impl Iterator<Item = &syn::Attribute> {
        self.function
            .attrs
            .iter()
            .filter(|attribute| matches!(attribute.style, syn::AttrStyle::Outer))
    }

    /// The declared return type.
    pub(crate) fn output(&self) -> &ReturnType {
        &self.function.sig.output
    }
}

/// An `async fn`, not `const`, `unsafe` or `extern`, with no generics and no variadic.
fn check_signature(attribute: Attribute, signature: &syn::Signature) -> syn::Result<()> {
    if signature.asyncness.is_none() {
        return Err(syn::Error::new(
            signature.fn_token.span(),
            format!(
                "{} requires an `async fn`: write `async fn {}`",
                attribute.name(),
                signature.ident
            ),
        ));
    }
    let qualifier = signature
        .constness
        .as_ref()
        .map(|token| (token.span(), "const"))
        .or(signature
            .unsafety
            .as_ref()
            .map(|token| (token.span(), "unsafe")))
        .or(signature.abi.as_ref().map(|abi| (abi.span(), "extern")));
    if let Some((span, qualifier)) = qualifier {
        return Err(syn::Error::new(
            span,
            format!(
                "{} does not allow `{qualifier}` functions",
                attribute.name()
            ),
        ));
    }
    if !signature.generics.params.is_empty() || signature.generics.where_clause.is_some() {
        // With no parameters the generics print no tokens, so point at the `where` clause.
        let span = if signature.generics.params.is_empty() {
            signature.generics.where_clause.span()
        } else {
            signature.generics.span()
        };
        return Err(syn::Error::new(
            span,
            format!(
                "{} does not allow generic parameters or `where` clauses",
                attribute.name()
            ),
        ));
    }
    if let Some(variadic) = &signature.variadic {
        return Err(syn::Error::new(
            variadic.span(),
            format!("{} does not allow variadic parameters", attribute.name()),
        ));
    }
    Ok(())
}

/// The parameter receiving the root `Context`, if the function declares one; no other.
fn context_parameter(
    attribute: Attribute,
    signature: &syn::Signature,
) -> syn::Result<Option<(Box<Pat>, Box<Type>)>> {
    let mut inputs = signature.inputs.iter();
    let context = match inputs.next() {
        None => None,
        Some(FnArg::Receiver(receiver)) => {
            return Err(syn::Error::new(
                receiver.span(),
                format!(
                    "{} goes on a free function, not a method; its only parameter may be \
                     `context: runtime::Context`",
                    attribute.name()
                ),
            ));
        }
        Some(FnArg::Typed(typed)) => {
            if !is_context(&typed.ty) {
                let ty = &typed.ty;
                return Err(syn::Error::new(
                    ty.span(),
                    format!(
                        "the parameter of {} must have type `runtime::Context`, found `{}`",
                        attribute.name(),
                        quote!(#ty).to_string().replace(' ', "")
                    ),
                ));
            }
            Some((typed.pat.clone(), typed.ty.clone()))
        }
    };
    if let Some(extra) = inputs.next() {
        return Err(syn::Error::new(
            extra.span(),
            format!(
                "{} takes at most one parameter, `context: runtime::Context`",
                attribute.name()
            ),
        ));
    }
    Ok(context)
}

/// Whether `ty` names `Context` (`Context`, `runtime::Context` or `::runtime::Context`).
fn is_context(ty: &Type) -> bool {
    let Type::Path(path) = ty else {
        return false;
    };
    if path.qself.is_some() {
        return false;
    }
    let segments: Vec<String> = path
        .path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect();
    let no_arguments = path
        .path
        .segments
        .iter()
        .all(|segment| segment.arguments.is_none());
    no_arguments
        && matches!(
            segments
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .as_slice(),
            ["Context"] | ["runtime", "Context"]
        )
}
