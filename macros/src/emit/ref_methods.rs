//! Every method of every generated ref, from one place.
//!
//! A ref's methods come in two sets: its own (`id`, `stop`, `join`, `inner`, ...), and per
//! handler the forms that send it (the ask, `tell_`, `forward_`, `try_` and `_recipient`).
//! Which of them a ref has, and how each sends, follows from its `Sender`: an actor's ref, an
//! interface's ref, a pool's ref or a remote ref. A form's name, parameters and return type
//! are written once, in `HandlerMethods`; a new ref method is one variant and one arm here.

use super::signature::handler_signature;
use crate::model::Handler;
use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote};
use syn::ext::IdentExt as _;

/// What a ref holds in its field `0`, and so how its methods send.
pub(crate) enum Sender<'a> {
    /// An `actors::Ref` of the actor type `actor`, which takes the enum `message`, or, with
    /// `interface`, the handlers of the interface whose message enum that is (wrapped into
    /// the actor's by its `Implements`).
    Actor {
        actor: &'a TokenStream,
        message: &'a Ident,
        interface: Option<&'a syn::Path>,
    },
    /// An `ErasedRef` of the interface `interface`, whose enum is `message`.
    Interface {
        interface: &'a Ident,
        message: &'a Ident,
    },
    /// An `actors::PoolRef` of the actor type `actor`, which takes the enum `message` (or
    /// an `interface`'s, as for `Actor`) and sends each to the member it routes to (`ask`,
    /// `send`, `try_send`, as an `actors::Ref`).
    Pool {
        actor: &'a TokenStream,
        message: &'a Ident,
        interface: Option<&'a syn::Path>,
    },
    /// An `actors::remote::RemoteRef` speaking the enum `wire`.
    Remote { wire: &'a Ident },
}

/// A ref's own methods, not a handler's.
#[derive(Clone, Copy)]
pub(crate) enum Own {
    /// The interface ref of an actor's ref (hidden: what generated `From` impls call).
    Of,
    Inner,
    AsPool,
    Id,
    Stop,
    Join,
    Downgrade,
    IsClosed,
    Target,
    Monitor,
}

/// The own methods `methods` of a ref that sends through `sender`, with the visibility
/// `vis`.
pub(crate) struct OwnMethods<'a> {
    pub(crate) sender: &'a Sender<'a>,
    pub(crate) vis: TokenStream,
    pub(crate) methods: &'a [Own],
}

impl ToTokens for OwnMethods<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        for method in self.methods {
            tokens.extend(match method {
                Own::Of => self.of(),
                Own::Inner | Own::AsPool | Own::Downgrade => self.accessor(*method),
                Own::Id | Own::Stop | Own::Join | Own::IsClosed => self.lifecycle(*method),
                Own::Target | Own::Monitor => self.remote(*method),
            });
        }
    }
}

impl OwnMethods<'_> {
    fn of(&self) -> TokenStream {
        let Sender::Interface { interface, message } = self.sender else {
            unreachable!("only an interface ref is made from an actor's ref");
        };
        let vis = &self.vis;
        quote! {
            /// The interface ref of `actor` (what the generated `From` impls call).
            #[doc(hidden)]
            #vis fn __of<A: #interface + ::actors::__private::Implements<#message>>(
                actor: &::actors::Ref<A>,
            ) -> Self {
                Self(::actors::__private::ErasedRef::new(
                    actor,
                    <A as ::actors::__private::Implements<#message>>::wrap,
                ))
            }
        }
    }

    /// The typed refs underneath: the actor's, the pool's, a weak one.
    fn accessor(&self, method: Own) -> TokenStream {
        let vis = &self.vis;
        let (Sender::Actor { actor, .. } | Sender::Pool { actor, .. }) = self.sender else {
            unreachable!("only an actor's or a pool's ref holds a typed ref");
        };
        match method {
            Own::Inner => quote! {
                /// The untyped ref underneath: mailbox depth, capacity, whether it is closed.
                #vis fn inner(&self) -> &::actors::Ref<#actor> {
                    &self.0
                }
            },
            Own::AsPool => quote! {
                /// The pool itself: `route`, `route_by`, `all`, `size`, `resize`, `stop`.
                #vis fn as_pool(&self) -> &::actors::PoolRef<#actor> {
                    &self.0
                }
            },
            _ => quote! {
                /// A ref that does not keep the actor alive.
                #vis fn downgrade(&self) -> ::actors::WeakRef<#actor> {
                    self.0.downgrade()
                }
            },
        }
    }

    /// What an actor's ref and an interface's ref say of the actor's life; the docs differ
    /// as the interface ref does not know which actor it reaches.
    fn lifecycle(&self, method: Own) -> TokenStream {
        let vis = &self.vis;
        let interface = matches!(self.sender, Sender::Interface { .. });
        if let (Own::Id, Sender::Pool { .. }) = (method, self.sender) {
            return quote! {
                /// The pool's id: its supervisor's, shown `label#n`, not any member's (see
                /// [`PoolRef::id`](::actors::PoolRef::id)).
                #vis fn id(&self) -> ::actors::ActorId {
                    self.0.id()
                }
            };
        }
        match (method, interface) {
            (Own::Id, false) => quote! {
                /// The actor's id, shown as `label#n`.
                #vis fn id(&self) -> ::actors::ActorId {
                    self.0.id()
                }
            },
            (Own::Id, true) => quote! {
                /// The id of the actor behind it.
                #vis fn id(&self) -> ::actors::ActorId {
                    self.0.id()
                }
            },
            (Own::Stop, false) => quote! {
                /// Asks the actor to stop after the messages queued before this call; resolves
                /// with its exit reason once its `on_stop` has finished (see
                /// [`Ref::stop`](::actors::Ref::stop)).
                #vis fn stop(&self) -> ::actors::Join {
                    self.0.stop()
                }
            },
            (Own::Stop, true) => quote! {
                /// Asks the actor to stop after the messages queued before this call (see
                /// [`Ref::stop`](::actors::Ref::stop)).
                #vis fn stop(&self) -> ::actors::Join {
                    self.0.stop()
                }
            },
            (Own::Join, false) => quote! {
                /// Resolves with the actor's exit reason whenever it ends, without asking it to
                /// (see [`Ref::join`](::actors::Ref::join)).
                #vis fn join(&self) -> ::actors::Join {
                    self.0.join()
                }
            },
            (Own::Join, true) => quote! {
                /// Resolves with the actor's exit reason whenever it ends (see
                /// [`Ref::join`](::actors::Ref::join)).
                #vis fn join(&self) -> ::actors::Join {
                    self.0.join()
                }
            },
            _ => quote! {
                /// Whether the actor has stopped for good.
                #vis fn is_closed(&self) -> bool {
                    self.0.is_closed()
                }
            },
        }
    }

    fn remote(&self, method: Own) -> TokenStream {
        let vis = &self.vis;
        match method {
            Own::Target => quote! {
                /// What the ref reaches: a name, or one node's actor.
                #vis fn target(&self) -> &::actors::remote::Target {
                    self.0.target()
                }
            },
            _ => quote! {
                /// Resolves with the remote actor's exit reason, or
                /// [`ExitReason::NodeDown`](::actors::ExitReason::NodeDown) when its node goes
                /// down (see [`RemoteRef::monitor`](::actors::remote::RemoteRef::monitor)).
                #vis fn monitor(&self) -> ::actors::remote::RemoteMonitor {
                    self.0.monitor()
                }
            },
        }
    }
}

/// The ways a ref sends to one handler, each a method.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `<handler>(..)`: sends and resolves to the reply.
    Ask,
    /// `tell_<handler>(..)`: sends, waiting for room but not for the reply.
    Tell,
    /// `forward_<handler>(.., reply)`: sends with another ask's reply handle.
    Forward,
    /// `try_<handler>(..)`: sends if there is room now.
    Try,
    /// `<handler>_recipient()`: the handler alone as an `actors::Recipient`.
    Recipient,
}

impl Sender<'_> {
    /// The forms its ref has for each handler, in the order they are generated.
    fn forms(&self) -> &'static [Form] {
        match self {
            Sender::Actor { .. } => &[
                Form::Ask,
                Form::Tell,
                Form::Forward,
                Form::Try,
                Form::Recipient,
            ],
            Sender::Interface { .. } | Sender::Pool { .. } => {
                &[Form::Ask, Form::Tell, Form::Forward, Form::Try]
            }
            Sender::Remote { .. } => &[Form::Ask, Form::Tell, Form::Try],
        }
    }
}

/// The methods a ref that sends through `sender` has for `handler`.
pub(crate) struct HandlerMethods<'a> {
    pub(crate) sender: &'a Sender<'a>,
    pub(crate) handler: &'a Handler,
}

impl ToTokens for HandlerMethods<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        for form in self.sender.forms() {
            self.method(*form).to_tokens(tokens);
        }
    }
}

impl HandlerMethods<'_> {
    /// The method of `form`: the one place a ref method's shape is written.
    fn method(&self, form: Form) -> TokenStream {
        let handler = self.handler;
        let name = match form {
            Form::Ask => handler.name.clone(),
            Form::Tell => super::names::prefixed("tell_", &handler.name),
            Form::Forward => super::names::prefixed("forward_", &handler.name),
            Form::Try => super::names::prefixed("try_", &handler.name),
            Form::Recipient => super::names::recipient(&handler.name),
        };
        let (_, mut parameters) = handler_signature(handler);
        let reply = &handler.reply;
        match form {
            Form::Forward => parameters.push(quote!(__reply: ::actors::Reply<#reply>)),
            Form::Recipient => parameters.clear(),
            _ => {}
        }
        let asyncness = self.is_async(form).then(|| quote!(async));
        let output = self.output(form);
        let body = self.body(form);
        let docs = self.docs(form);
        let (cfgs, vis) = (&handler.cfgs, &handler.vis);
        quote! {
            #(#cfgs)*
            #docs
            #vis #asyncness fn #name(&self, #(#parameters),*) -> #output {
                #body
            }
        }
    }

    fn is_async(&self, form: Form) -> bool {
        match form {
            Form::Ask => false,
            Form::Tell | Form::Forward => true,
            Form::Try | Form::Recipient => false,
        }
    }

    fn output(&self, form: Form) -> TokenStream {
        let reply = &self.handler.reply;
        match (form, self.sender) {
            (Form::Ask, Sender::Actor { actor, .. } | Sender::Pool { actor, .. }) => {
                quote!(::actors::Ask<'_, #actor, #reply>)
            }
            (Form::Ask, Sender::Interface { message, .. }) => {
                quote!(::actors::ErasedAsk<'_, #message, #reply>)
            }
            (Form::Ask, Sender::Remote { .. }) => quote!(::actors::remote::RemoteAsk<#reply>),
            (Form::Recipient, _) => {
                let types = self.handler.arguments.iter().map(|(_, ty)| ty);
                let arguments = match self.handler.arguments.len() {
                    0 => quote!(()),
                    1 => quote!(#(#types)*),
                    _ => quote!((#(#types,)*)),
                };
                quote!(::actors::Recipient<#arguments, #reply>)
            }
            _ => quote!(::core::result::Result<(), ::actors::Error>),
        }
    }

    /// What the method does: sends the handler's message (a pool's to the member it routes
    /// to).
    fn body(&self, form: Form) -> TokenStream {
        let (names, _) = handler_signature(self.handler);
        let variant = &self.handler.variant;
        let body = match self.sender {
            Sender::Actor {
                actor,
                message,
                interface,
            }
            | Sender::Pool {
                actor,
                message,
                interface,
            } => {
                let build = match interface {
                    None => Build::Own(message),
                    Some(interface) => Build::Wrapped { actor, interface },
                };
                local_send(form, &build, variant, &names)
            }
            Sender::Interface { message, .. } => {
                local_send(form, &Build::Own(message), variant, &names)
            }
            Sender::Remote { wire } => {
                let send = match form {
                    Form::Ask => quote!(__ask),
                    Form::Tell => quote!(__tell),
                    _ => quote!(__try_tell),
                };
                quote!(self.0.#send(&#wire::#variant(#(#names),*)))
            }
        };
        match form {
            Form::Tell | Form::Forward => quote!(#body.await),
            _ => body,
        }
    }

    fn docs(&self, form: Form) -> TokenStream {
        let plain = self.handler.name.unraw();
        let text = match (form, self.sender) {
            (Form::Ask, _) if !self.handler.docs.is_empty() => {
                let docs = &self.handler.docs;
                return quote!(#(#docs)*);
            }
            // An undocumented handler (an interface's, implemented without docs) still gets
            // one line, so a crate that denies `missing_docs` can declare it.
            (Form::Ask, _) => format!(
                "Asks the actor's `{plain}` handler; resolves to its reply, or to the error                  that kept it from one."
            ),
            (Form::Tell | Form::Forward | Form::Try, Sender::Pool { .. }) => {
                let prefix = match form {
                    Form::Tell => "tell",
                    Form::Forward => "forward",
                    _ => "try",
                };
                format!(
                    "`{prefix}_{plain}` on the member the pool routes to (`{prefix}_` on the \
                     actor's ref says how)."
                )
            }
            (Form::Tell, Sender::Remote { .. }) => format!(
                "Sends `{plain}` without waiting for its reply; waits while this node's NATS \
                 write buffer is full. At most once: a full remote mailbox drops it."
            ),
            (_, Sender::Remote { .. }) => format!(
                "Sends `{plain}` without waiting: [`Error::Full`](::actors::Error::Full) when \
                 this node's NATS write buffer is full. At most once: a full remote mailbox \
                 drops it."
            ),
            (Form::Tell, _) => format!(
                "Sends `{plain}` without waiting for its reply; waits while the mailbox is full."
            ),
            (Form::Forward, _) => format!(
                "Sends `{plain}` with a reply handle taken from another ask (a delegated \
                 reply): the handler's answer goes to that ask's asker. Waits while the \
                 mailbox is full; if the send fails, the reply is dropped and its asker sees \
                 the error."
            ),
            (Form::Try, _) => format!(
                "Sends `{plain}` if the mailbox has room now, without waiting for its reply: \
                 [`Error::Full`](::actors::Error::Full) if it has none."
            ),
            (Form::Recipient, _) => format!(
                "The handler `{plain}` alone, as an [`actors::Recipient`](::actors::Recipient) \
                 that hides the actor's type: for callbacks. It keeps the actor reachable, \
                 like a ref."
            ),
        };
        quote!(#[doc = #text])
    }
}

/// How a local ref builds a handler's message.
enum Build<'a> {
    /// A variant of the enum its field `0` takes.
    Own(&'a Ident),
    /// A variant of an interface's enum (at `interface`), wrapped into the messages of
    /// `actor`, which implements it.
    Wrapped {
        actor: &'a TokenStream,
        interface: &'a syn::Path,
    },
}

/// How a local ref (an actor's, an interface's or a pool's, whose field `0` has the same
/// methods) sends `form` of the handler whose variant is `variant`.
fn local_send(form: Form, message: &Build, variant: &Ident, names: &[&Ident]) -> TokenStream {
    let build = |reply: TokenStream| match message {
        Build::Own(message) => quote!(#message::#variant(#(#names,)* #reply)),
        Build::Wrapped { actor, interface } => quote! {
            <#actor as ::actors::__private::Implements<#interface>>::wrap(
                #interface::#variant(#(#names,)* #reply)
            )
        },
    };
    match form {
        Form::Ask => {
            let message = build(quote!(__reply));
            quote!(self.0.ask(|__reply| #message))
        }
        Form::Tell => {
            let message = build(quote!(::actors::Reply::none()));
            quote!(self.0.send(#message))
        }
        Form::Forward => {
            let message = build(quote!(__reply));
            quote!(self.0.send(#message))
        }
        Form::Try => {
            let message = build(quote!(::actors::Reply::none()));
            quote!(self.0.try_send(#message))
        }
        Form::Recipient => {
            let pattern = match names {
                [] => quote!(()),
                [only] => quote!(#only),
                _ => quote!((#(#names,)*)),
            };
            let message = build(quote!(__reply));
            quote! {
                ::actors::Recipient::__new(&self.0, |(#pattern, __reply)| {
                    #message
                })
            }
        }
    }
}
