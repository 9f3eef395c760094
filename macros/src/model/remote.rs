//! `remote` on an actor's impl or an interface, checked: a remote actor is not generic, and
//! no remote handler takes the name of a remote ref's own method.

use super::handler::Handler;
use syn::ext::IdentExt as _;

/// Whether the handlers are reached from other nodes too.
pub(crate) enum Remote {
    Off,
    On,
    /// `remote` was asked for but cannot be had: the error stands where the remote glue
    /// would, and the rest expands.
    Refused(syn::Error),
}

impl Remote {
    /// `remote` for `handlers`, when `asked`, with `generic` saying whether the actor has
    /// generic parameters (an interface has none).
    pub(crate) fn check(
        asked: Option<proc_macro2::Span>,
        generic: bool,
        handlers: &[Handler],
    ) -> Self {
        let Some(span) = asked else {
            return Remote::Off;
        };
        if generic {
            return Remote::Refused(syn::Error::new(
                span,
                "a remote actor cannot be generic: its messages must have one type on every \
                 node; take `remote` off, or make the actor concrete",
            ));
        }
        match check_names(handlers) {
            Ok(()) => Remote::On,
            Err(error) => Remote::Refused(error),
        }
    }
}

/// A handler named like a remote ref's own method would not compile: say so.
fn check_names(handlers: &[Handler]) -> syn::Result<()> {
    for handler in handlers {
        let plain = handler.name.unraw().to_string();
        if plain == "monitor" || plain == "target" {
            return Err(syn::Error::new(
                handler.name.span(),
                format!(
                    "a remote handler cannot be named `{plain}`: its remote ref has a method \
                     of that name; rename the handler"
                ),
            ));
        }
    }
    Ok(())
}
