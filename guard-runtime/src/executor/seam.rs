//! What a call of several statements tells its caller when a later
//! statement fails after an earlier one changed rows.
//!
//! **Architecture Invariant:** a call that sends more than one statement
//! keeps a [`Seam`], marks it when a statement changed rows, and passes
//! every later error through [`Seam::failed`]: the one place that decides
//! what such a failure means. The rule (G10): what committed reaches the
//! caller (its wins), or the error says the outcome is unknown; changes
//! made inside the caller's transaction leave it unable to commit, so
//! that no move commits without its win.

use crate::error::Error;
use crate::executor::sealed::Run;

/// The changes a call of several statements has made so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seam {
    table: &'static str,
    call: &'static str,
    changed: bool,
}

impl Seam {
    /// A call of table `table`'s machine (`call`: the transition, or the
    /// call's name) that has changed nothing yet.
    pub(crate) fn new(table: &'static str, call: &'static str) -> Seam {
        Seam {
            table,
            call,
            changed: false,
        }
    }

    /// Marks that a statement changed rows when `changed`: committed on
    /// its own outside a transaction, or waiting inside the caller's.
    pub(crate) fn changed_if(&mut self, changed: bool) {
        self.changed |= changed;
    }

    /// The error to hand the caller for `error`, met after the changes
    /// marked so far, on `executor`:
    /// - nothing changed: `error` itself;
    /// - inside the caller's transaction: `error`, and the transaction can
    ///   no longer commit (its changes roll back with it);
    /// - committed already: `error` when its outcome is unknown anyway,
    ///   otherwise [`Error::Unreported`], whose outcome is unknown.
    pub(crate) fn failed<E: Run>(&self, executor: &mut E, error: Error) -> Error {
        if !self.changed {
            return error;
        }
        if E::IS_TRANSACTION {
            executor.abandoned();
            return error;
        }
        if error.is_outcome_unknown() {
            return error;
        }
        Error::Unreported {
            table: self.table,
            call: self.call,
            source: Box::new(error),
        }
    }
}
