//! The user errors a parse found but went on past: each is reported, and the expansion is
//! made without what it refused, so the program reports every error and nothing that
//! follows from one.

/// Errors found so far, combined into one in the order they were found.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// The combined error, if any was found.
    pub(crate) fn get(&self) -> Option<&syn::Error> {
        self.0.as_ref()
    }
}

impl From<Option<syn::Error>> for Errors {
    fn from(error: Option<syn::Error>) -> Self {
        Self(error)
    }
}
