use core::fmt::Display;

use quote::ToTokens;

/// Collects every error found in one derive, so a user with three bad
/// attributes sees all three at once.
#[derive(Default)]
pub struct Ctxt {
    errors: Option<syn::Error>,
}

impl Ctxt {
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.errors {
            Some(errors) => errors.combine(error),
            None => self.errors = Some(error),
        }
    }

    pub fn error(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// An error on `second` that also points at `first`.
    pub fn duplicate(
        &mut self,
        second: impl ToTokens,
        message: impl Display,
        first: impl ToTokens,
        first_note: impl Display,
    ) {
        let mut error = syn::Error::new_spanned(second, message);
        error.combine(syn::Error::new_spanned(first, first_note));
        self.push(error);
    }

    pub fn finish(self) -> syn::Result<()> {
        match self.errors {
            Some(errors) => Err(errors),
            None => Ok(()),
        }
    }
}
