//! [`Shape`]: what every generated item of an actor's impl half names (its self type, its
//! message enum, its ref type), derived once from the model and shared by their emitters.

use super::names;
use crate::model::ActorImpl;
use proc_macro2::{Ident, TokenStream};
use quote::quote;

/// What every item of the impl half names.
pub(crate) struct Shape<'a> {
    pub(crate) model: &'a ActorImpl,
    /// The impl's self type, `Name<T, ..>`.
    pub(crate) self_ty: TokenStream,
    /// `__<Name>Message`, and with the impl's generic arguments.
    pub(crate) message: Ident,
    pub(crate) message_ty: TokenStream,
    /// `<Name>Ref<T, ..>`.
    pub(crate) ref_ty: TokenStream,
}

impl<'a> Shape<'a> {
    pub(crate) fn of(model: &'a ActorImpl) -> Self {
        let self_ty = &model.item.self_ty;
        let message = names::actor_message(&model.name);
        let (_, type_generics, _) = model.generics.split_for_impl();
        let ref_name = names::ref_type(&model.name);
        let self_arguments = &model.self_arguments;
        Shape {
            model,
            self_ty: quote!(#self_ty),
            message_ty: quote!(#message #type_generics),
            message,
            ref_ty: quote!(#ref_name #self_arguments),
        }
    }

    /// The interfaces the actor implements: each one's path, its variant of the message
    /// enum, and the interface's message enum.
    pub(crate) fn interfaces(&self) -> impl Iterator<Item = (&'a syn::Path, Ident, syn::Path)> {
        self.model
            .implements
            .iter()
            .enumerate()
            .map(|(index, interface)| {
                let messages = names::sibling(interface, names::interface_message);
                (interface, names::interface_variant(index), messages)
            })
    }
}
