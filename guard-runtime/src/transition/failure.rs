//! The errors a transition reports, each naming its table and
//! transition, and which database errors are worth another try.

use super::Transition;
use crate::StateMachine;
use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::dialect::Backend;
use crate::error::{Error, Misuse};
use crate::executor::Runner;
use crate::executor::sealed::Run;
use crate::machine::key::BindError;

/// The names a transition's errors carry, with no type of the machine's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    pub(crate) machine: &'static str,
    pub(crate) table: &'static str,
    pub(crate) key: &'static str,
    pub(crate) column: &'static str,
    pub(crate) transition: &'static str,
}

impl<S: StateMachine, P, N> Transition<S, P, N> {
    /// The names its errors carry.
    pub(crate) fn names(&self) -> Names {
        let machine = S::MACHINE;
        Names {
            machine: machine.name(),
            table: machine.table(),
            key: machine.key(),
            column: machine.column(),
            transition: self.name(),
        }
    }
}

impl<S: StateMachine> Transition<S> {
    /// See [`Names::keys_error`].
    pub(crate) fn keys_error(self, error: BindError) -> Error {
        self.names().keys_error(error)
    }

    /// See [`Names::db_error`].
    pub(crate) fn db_error(self, source: sqlx::Error) -> Error {
        self.names().db_error(source)
    }

    /// See [`Names::contention`].
    pub(crate) fn contention(self, attempts: u32, last: Option<sqlx::Error>) -> Error {
        self.names().contention(attempts, last)
    }

    /// See [`Names::before_retry`].
    pub(crate) async fn before_retry<E: Runner>(
        self,
        executor: &mut E,
        error: sqlx::Error,
        attempts: u32,
    ) -> Result<(), Error> {
        self.names().before_retry(executor, error, attempts).await
    }
}

impl Names {
    /// A batch's keys that could not be bound.
    pub(crate) fn keys_error(self, error: BindError) -> Error {
        match error {
            BindError::Key { key, reason } => Error::Misuse(Misuse::BatchKey {
                table: self.table,
                transition: self.transition,
                key,
                reason,
            }),
            BindError::Encode(source) => self.db_error(source),
        }
    }

    /// An error of the `BEGIN` of a transaction that the call runs itself
    /// (a claim, a batch), named after the call: a `BEGIN` cut off by the
    /// deadline wrote nothing, so the outcome is known. SQLite's and
    /// MySQL's claims and batches, and MySQL's `finish_many`, run such a
    /// transaction.
    pub(crate) fn begin_error(self, error: Error) -> Error {
        match error {
            Error::Timeout { deadline, .. } => Error::Timeout {
                table: self.table,
                transition: self.transition,
                deadline,
                outcome_known: true,
            },
            other => other,
        }
    }

    pub(crate) fn db_error(self, source: sqlx::Error) -> Error {
        let (table, transition) = (self.table, self.transition);
        let source = match crate::error::mix_up(source) {
            Ok(mix_up) => return mix_up,
            Err(source) => source,
        };
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
    pub(crate) fn tx_error<DB: Backend>(self, source: sqlx::Error) -> Error {
        match DB::is_retryable(&source) {
            true => Error::RetryTransaction {
                table: self.table,
                transition: self.transition,
                source,
            },
            false => self.db_error(source),
        }
    }

    pub(crate) fn contention(self, attempts: u32, last: Option<sqlx::Error>) -> Error {
        Error::Contention {
            table: self.table,
            transition: self.transition,
            attempts,
            last,
        }
    }

    /// Decides what a failed statement means: `Ok` after sleeping when a
    /// fresh autocommit attempt may succeed, the error to return otherwise.
    pub(crate) async fn before_retry<E: Runner>(
        self,
        executor: &mut E,
        error: sqlx::Error,
        attempts: u32,
    ) -> Result<(), Error> {
        if !worth_retrying::<E>(&error) {
            return Err(self.db_error(error));
        }
        let fresh = !<E::Db as Backend>::is_retryable(&error);
        if executor.in_transaction() {
            return Err(Error::RetryTransaction {
                table: self.table,
                transition: self.transition,
                source: error,
            });
        }
        if attempts >= MAX_ATTEMPTS {
            return Err(match fresh {
                true => self.db_error(error),
                false => self.contention(attempts, Some(error)),
            });
        }
        tracing::debug!(
            table = self.table,
            transition = self.transition,
            attempts,
            %error,
            "retryable database error; backing off"
        );
        tokio::time::sleep(backoff(attempts)).await;
        Ok(())
    }
}

/// Whether a fresh autocommit attempt of a statement that failed with
/// `error` on `E` may get past it: a serialization failure, deadlock or
/// busy database; or, on a pool, a read-only server (a standby, a primary
/// demoted by a failover), which wrote nothing and whose connection the
/// pool closed, so that the next attempt takes a fresh one.
pub(super) fn worth_retrying<E: Run>(error: &sqlx::Error) -> bool {
    <E::Db as Backend>::is_retryable(error) || (E::POOLED && crate::error::read_only(error))
}
