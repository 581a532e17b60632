//! The errors a transition reports, each naming its table and
//! transition, and which database errors are worth another try.

use super::Transition;
use crate::StateMachine;
use crate::dialect::Backend;
use crate::error::Error;
use crate::executor::sealed::Run;

impl<S: StateMachine> Transition<S> {
    /// A batch's keys that could not be bound.
    pub(crate) fn keys_error(self, error: crate::machine::key::BindError) -> Error {
        match error {
            crate::machine::key::BindError::Key { key, reason } => Error::BatchKey {
                table: S::MACHINE.table(),
                transition: self.name(),
                key,
                reason,
            },
            crate::machine::key::BindError::Encode(source) => self.db_error(source),
        }
    }

    /// An error of the `BEGIN` of a transaction that the call runs itself
    /// (a claim, a batch), named after the call: a `BEGIN` cut off by the
    /// deadline wrote nothing, so the outcome is known. Only SQLite and
    /// MySQL run such a transaction.
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    pub(crate) fn begin_error(self, error: Error) -> Error {
        match error {
            Error::Timeout { deadline, .. } => Error::Timeout {
                table: S::MACHINE.table(),
                transition: self.name(),
                deadline,
                outcome_known: true,
            },
            other => other,
        }
    }

    pub(crate) fn db_error(self, source: sqlx::Error) -> Error {
        let (table, transition) = (S::MACHINE.table(), self.name());
        match crate::error::read_only(&source) {
            true => Error::ReadOnly {
                table,
                transition,
                source,
            },
            false => Error::Database {
                table,
                transition,
                source,
            },
        }
    }

    /// A statement's error inside a transaction the call runs itself: a
    /// deadlock or busy database rolled it back, so the whole transaction
    /// is tried again.
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    pub(crate) fn tx_error<DB: Backend>(self, source: sqlx::Error) -> Error {
        match DB::is_retryable(&source) {
            true => Error::RetryTransaction {
                table: S::MACHINE.table(),
                transition: self.name(),
                source,
            },
            false => self.db_error(source),
        }
    }

    pub(crate) fn contention(self, attempts: u32, last: Option<sqlx::Error>) -> Error {
        Error::Contention {
            table: S::MACHINE.table(),
            transition: self.name(),
            attempts,
            last,
        }
    }
}

/// Whether a fresh autocommit attempt of a statement that failed with
/// `error` on `E` may get past it: a serialization failure, deadlock or
/// busy database; or, on a pool, a read-only server (a standby, a primary
/// demoted by a failover), which wrote nothing and whose connection the
/// pool closed, so that the next attempt takes a fresh one.
pub(super) fn worth_retrying<E: Run>(error: &sqlx::Error) -> bool {
    <E::Database as Backend>::is_retryable(error) || (E::POOLED && crate::error::read_only(error))
}
