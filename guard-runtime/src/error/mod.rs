//! [`Error`]: everything that can go wrong, and what a caller can do
//! about it ([`Error::kind`]).
//!
//! **Architecture Invariant:** every variant is placed in exactly one
//! [`ErrorKind`], and a test in `kind/tests/` holds the placement of
//! each; a new variant is sorted there before it is returned anywhere.
//!
//! **Architecture Invariant:** what a database's error means (a lost
//! connection, a read-only server, a transient failure) is decided here
//! (`cause.rs`, `kind.rs`) from the error alone, once for every backend;
//! callers ask, they do not match on codes themselves.

use crate::machine::UnknownState;

mod cause;
mod kind;
mod message;
mod misuse;
mod mix_up;
mod multiplexing;

pub use kind::ErrorKind;
pub use misuse::Misuse;
pub use mix_up::StatementMixUp;
pub use multiplexing::{Multiplexing, ServerSession};

pub(crate) use self::cause::{mysql_number, read_only};
use self::message::timeout_message;

/// Everything that can go wrong while applying a transition.
///
/// Losing a race is not an error: it is an [`Outcome`](crate::Outcome).
///
/// [`Error::kind`] sorts every error into one [`ErrorKind`], the way a
/// caller branches on it:
///
/// | kind | what to do | variants |
/// | --- | --- | --- |
/// | [`Transient`](ErrorKind::Transient) | call again (the whole transaction, inside one), after a pause | `RetryTransaction`, `RolledBack`, `Contention`, `ReadOnly`, `Timeout` with nothing in flight; `Database`, `Begin`, `Commit`, `Store`, `Recovery`, `PoolerCheck` when the database's error is transient (see below) |
/// | [`OutcomeUnknown`](ErrorKind::OutcomeUnknown) | apply again to learn the row's state; an effect may be owed | whatever [`Error::is_outcome_unknown`] says: a broken connection or ended session while a statement or `COMMIT` was in flight, `Timeout` with the `UPDATE` in flight, `StatementMixUp`, `Unreported` |
/// | [`Misuse`](ErrorKind::Misuse) | fix the calling code: the same call fails again | `Misuse` (each of its variants says what) |
/// | [`Data`](ErrorKind::Data) | reject the input, or repair the row | `BadKey`, `UnknownState`, `NullStatus`, `AmbiguousKey`, `UnknownTransition`, `HistoryDetails`, `NoteDetails`; `Database`, `Store`, `Recovery` when the database refused a value for what it is (see below) |
/// | [`Superseded`](ErrorKind::Superseded) | roll back and stop: someone else holds the work | `IdempotencyLeaseLost`, `RowVanished` |
/// | [`Database`](ErrorKind::Database) | report it: a retry does not cure it (constraint, syntax, missing table, decode, closed pool, …) | `Multiplexed` (the deployment needs changing); `Database`, `Begin`, `Commit`, `Store`, `Recovery`, `PoolerCheck` with any other database error |
///
/// A database's error is transient when a fresh attempt may get past it:
/// a serialization failure, deadlock, lock wait timeout or busy database,
/// a statement timeout, too many connections, the pool's timeout, a
/// read-only server, or a broken connection or ended session where
/// nothing was in flight. The codes are listed at
/// [`ErrorKind::Transient`]. So is a statement the library did not send
/// because its transaction can no longer commit (see
/// [`Error::RolledBack`]).
///
/// A database's error is of kind `Data` when the database refused a value
/// the call bound for what the value is (a `set(col = bind(T))` value too
/// long for its column, out of its range, or not text of the column's
/// type): the codes are listed at [`ErrorKind::Data`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database refused a statement for a reason the library does not
    /// retry (connection lost, missing table, constraint violation, …).
    #[error("transition `{transition}` on table `{table}` failed: {source}")]
    Database {
        /// The table of the machine.
        table: &'static str,
        /// The transition that was being applied, or `load` for
        /// [`Machine::load`](crate::meta::Machine::load).
        transition: &'static str,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },

    /// The status column holds a string that is not a state of the machine.
    #[error(transparent)]
    UnknownState(#[from] UnknownState),

    /// A serialization failure or deadlock happened inside the caller's
    /// transaction. The database has aborted (or will abort) that
    /// transaction, so the library cannot retry the statement alone: roll
    /// back and run the whole transaction again.
    #[error(
        "transition `{transition}` on table `{table}` hit a serialization failure or deadlock \
         inside the caller's transaction: roll back and retry the whole transaction ({source})"
    )]
    RetryTransaction {
        /// The table of the machine.
        table: &'static str,
        /// The transition that was being applied.
        transition: &'static str,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },

    /// Autocommit attempts kept failing with serialization failures or
    /// deadlocks, or kept finding the row in a source state without being
    /// able to change it, until the retry budget ran out.
    #[error(
        "transition `{transition}` on table `{table}` did not settle after {attempts} attempts \
         (serialization failures, deadlocks or a row that kept changing)"
    )]
    Contention {
        /// The table of the machine.
        table: &'static str,
        /// The transition that was being applied.
        transition: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The last retryable error, if the last attempt failed with one.
        #[source]
        last: Option<sqlx::Error>,
    },

    /// The call ran out of its deadline
    /// ([`Transition::within`](crate::Transition::within),
    /// [`Tx::within`](crate::Tx::within) for a transaction's own
    /// statements, [`Call::within`](crate::Call::within) for the front
    /// doors, recovery's claim and history), waiting for a lock, a
    /// connection or an answer, or retrying.
    #[error("{}", timeout_message(table, transition, deadline, *outcome_known))]
    Timeout {
        /// The table of the machine; `stateguard_idempotency` or
        /// `stateguard_inbox` for a call of the idempotency store or the
        /// inbox; empty for a statement of a [`Tx`](crate::Tx) or
        /// [`Savepoint`](crate::Savepoint) itself, and for
        /// `stateguard::pooler::check`.
        table: &'static str,
        /// The transition that was being applied (`load` for
        /// [`Machine::load`](crate::meta::Machine::load), `history` for
        /// [`Machine::history`](crate::meta::Machine::history),
        /// `claim_expired` for [`claim_expired`](crate::claim_expired)),
        /// or the statement of a lease that was cut off: `renew` (a lease's
        /// renewal), `take_over` (recovery taking expired rows over) or
        /// `recover` (recovery listing them), or a transaction's statement:
        /// `BEGIN`, `COMMIT`, `SAVEPOINT`, `RELEASE SAVEPOINT`, `ROLLBACK`
        /// or `ROLLBACK TO SAVEPOINT`, or the call of the idempotency store
        /// or the inbox: `begin`, `begin_tx`, `complete`, `release`,
        /// `receive` or `prune`.
        transition: &'static str,
        /// The deadline that ran out.
        deadline: core::time::Duration,
        /// False when a write was in flight (the compare-and-set
        /// `UPDATE`, a lease's renewal or takeover, a follow-up, a write of
        /// the idempotency store or the inbox): it may commit after all,
        /// without a win.
        outcome_known: bool,
    },

    /// The calling code asked for something the machine or the call does
    /// not allow: the same call fails again until the code changes
    /// ([`ErrorKind::Misuse`]). [`Misuse`] says what.
    #[error(transparent)]
    Misuse(#[from] Misuse),

    /// The key matched more than one row, so the key column is not unique.
    /// Outside a transaction those rows have been changed.
    #[error(
        "transition `{transition}` on table `{table}` changed {rows} rows: the key column \
         `{key}` must identify one row"
    )]
    AmbiguousKey {
        /// The table of the machine.
        table: &'static str,
        /// The key column.
        key: &'static str,
        /// The transition that was being applied.
        transition: &'static str,
        /// How many rows the key matched.
        rows: u64,
    },

    /// The caller's transaction failed to commit, so the wins in it cannot
    /// run their effects. If the connection was lost during `COMMIT`, the
    /// transaction may have committed all the same; an in-flight state's
    /// lease and [`recover`](crate::recover) cover that case. A `COMMIT`
    /// refused for a deadlock or a serialization failure rolled back
    /// ([`is_retry_transaction`](Error::is_retry_transaction)): so does a
    /// MariaDB Galera cluster's certification failure (1213), which a
    /// multi-primary cluster reports only at `COMMIT`. The library's own
    /// transactions (claims, batches, sweeps) run again after one.
    #[error("the transaction did not commit, so its wins may not run their effects: {source}")]
    Commit {
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },

    /// The transaction was rolled back before it could commit, so its wins
    /// may not run their effects: an earlier statement in it failed and
    /// aborted it (PostgreSQL answers the `COMMIT` of an aborted
    /// transaction with a silent `ROLLBACK`), a deadlock rolled it back
    /// (MySQL), or the library had answered
    /// [`Error::RetryTransaction`] inside it, or a statement of the
    /// transaction was cut off by its deadline. Retry the whole
    /// transaction.
    ///
    /// [`Transition::apply`](crate::Transition::apply) in such a
    /// transaction answers it too, before sending anything: the database
    /// may have rolled the transaction back already, and the statement
    /// would run outside it, committing on its own. The library's other
    /// statements there (a `load`, a batch, an idempotency or inbox write)
    /// are not sent either; their error's [`Error::kind`] is
    /// [`Transient`](ErrorKind::Transient) and
    /// [`Error::is_retry_transaction`] is true.
    #[error(
        "the transaction was rolled back before it could commit, so its wins may not run their \
         effects: an earlier statement in it failed; retry the whole transaction{}",
        match source { Some(source) => format!(" ({source})"), None => String::new() }
    )]
    RolledBack {
        /// The error that the check before `COMMIT` ran into, if it ran
        /// into one.
        #[source]
        source: Option<sqlx::Error>,
    },

    /// Beginning a transaction or a savepoint failed.
    #[error("could not begin a transaction: {source}")]
    Begin {
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },

    /// The status column of the row is NULL.
    #[error("column `{column}` of table `{table}` is NULL: the row has no state")]
    NullStatus {
        /// The table of the machine.
        table: &'static str,
        /// The status column.
        column: &'static str,
    },

    /// An idempotency scope, key or fingerprint, or an inbox consumer or
    /// message id, that is empty or longer than 255 characters. Nothing was
    /// written; an HTTP service answers 400.
    #[error("the {field} must be 1 to 255 characters long, not {length}")]
    BadKey {
        /// Which value: `idempotency key`, `idempotency scope`, `request
        /// fingerprint`, `inbox consumer` or `message id`.
        field: &'static str,
        /// Its length in characters.
        length: usize,
    },

    /// `idempotency::Ticket::complete` of a
    /// request whose lease ran out and was taken over by a retry: roll the
    /// transaction back, so that only the holder of the lease commits its
    /// work.
    #[error(
        "idempotency key {key:?} of scope {scope:?} was taken over by another request after its \
         lease ran out: roll this request's transaction back"
    )]
    IdempotencyLeaseLost {
        /// The scope.
        scope: String,
        /// The key.
        key: String,
    },

    /// A statement of the idempotency store or the inbox failed.
    #[error("`{call}` on table `{table}` failed: {source}")]
    Store {
        /// `stateguard_idempotency` or `stateguard_inbox`.
        table: &'static str,
        /// `begin`, `complete`, `release`, `receive` or `prune`.
        call: &'static str,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },

    /// A history row names a transition the machine does not have (the
    /// enum changed since it was written, or someone wrote it by hand).
    #[error("history of {machine} names transition {name:?}, which it does not have")]
    UnknownTransition {
        /// The machine.
        machine: &'static str,
        /// The name found.
        name: String,
    },

    /// A history row's `details` hold text that is not a JSON document:
    /// the history table was written to by hand, or its `details` column
    /// does not check JSON (SQLite's `TEXT` does not, nor does a column a
    /// migration made plain text). The moves themselves write only JSON.
    #[error(
        "history table `{table}`: move {position} of the row (transition `{transition}` into \
         occurrence {occurrence}) has details that are not JSON: {problem}"
    )]
    HistoryDetails {
        /// The history table.
        table: &'static str,
        /// Which move of the row's history, from 1 (oldest first).
        position: usize,
        /// The transition the history row names.
        transition: &'static str,
        /// The occurrence the history row records.
        occurrence: i64,
        /// What the JSON parser found wrong, and where.
        problem: String,
    },

    /// A note's details ([`Note::details`](crate::Note::details)) are not
    /// a JSON document. The call checks them before it sends anything, so
    /// nothing moved and the error is the same on every backend: fix the
    /// caller's input. A verdict's note is checked before its follow-up is
    /// sent; the effect has run by then, and the row stays in flight.
    #[error(
        "transition `{transition}` on table `{table}` was not sent: the note's details are not \
         a JSON document: {problem}"
    )]
    NoteDetails {
        /// The table of the machine.
        table: &'static str,
        /// The transition the note was for.
        transition: &'static str,
        /// What the JSON parser found wrong, and where.
        problem: String,
    },

    /// The server answered that it only reads: PostgreSQL's 25006
    /// (`read_only_sql_transaction`), MySQL/MariaDB's 1290 (`--read-only`),
    /// 1792 (a read-only transaction) or 1836 (read-only mode). The
    /// connection reached a standby, or a primary that a failover demoted:
    /// typically a pooled connection opened before the failover. Nothing
    /// was written, so the outcome is known. On a pool the library closed
    /// that connection, so that the pool opens a fresh one, and tried
    /// again on fresh connections within the call's deadline; this error
    /// means every try met a read-only server (or the connection was your
    /// own, or the call ran in your transaction). Calling again may
    /// succeed once the failover settles.
    #[error(
        "transition `{transition}` on table `{table}` reached a read-only server (a standby, or \
         a primary demoted by a failover); nothing was written: {source}"
    )]
    ReadOnly {
        /// The table of the machine.
        table: &'static str,
        /// The transition that was being applied.
        transition: &'static str,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },

    /// The row was deleted while its effect ran.
    #[error("the row vanished from table `{table}` before `{transition}` could finish it")]
    RowVanished {
        /// The table of the machine.
        table: &'static str,
        /// The follow-up transition.
        transition: &'static str,
    },

    /// `stateguard::pooler::check` found that the pool's
    /// connections are multiplexed onto shared server sessions: a
    /// connection pooler in transaction or statement mode (PgBouncer's
    /// `pool_mode = transaction`, or the like) stands between the pool and
    /// PostgreSQL. sqlx prepares a named statement in one round trip and
    /// runs it in the next; a pooler that hands the server session to
    /// another client in between, or lets two clients' statement names
    /// meet on one session, makes the server run another client's
    /// statement with this call's values, so a call could be told it won
    /// a move it did not make. Nothing was moved.
    ///
    /// Use session pooling (`pool_mode = session`) or a direct
    /// connection. A pooler that tracks each client's prepared statements
    /// (PgBouncer 1.21 or later with `max_prepared_statements` above 0) is
    /// safe: say so with
    /// `Check::acknowledge` (in `stateguard::pooler`).
    #[error(
        "the PostgreSQL pool is multiplexed by a connection pooler in transaction or statement \
         mode ({seen}): sqlx's prepared statements can then run on another client's server \
         session, and a call could be told it won a move it did not make. Use session pooling \
         (PgBouncer `pool_mode = session`) or a direct connection; or, with PgBouncer 1.21 or \
         later and `max_prepared_statements` above 0, acknowledge it with \
         `pooler::check(&pool).acknowledge(Acknowledgement::PgBouncerTracksPreparedStatements)`"
    )]
    Multiplexed {
        /// What the check saw.
        seen: Multiplexing,
    },

    /// A statement of `stateguard::pooler::check` failed, or
    /// it could not open the connection it probes with. Nothing was
    /// written.
    #[error("the connection pooler check could not run: {source}")]
    PoolerCheck {
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },

    /// PostgreSQL answered a statement with the rows of another: a
    /// connection pooler is mixing prepared statements between clients.
    /// The outcome is unknown; see [`StatementMixUp`].
    #[error(transparent)]
    StatementMixUp(StatementMixUp),

    /// A call of several statements changed rows with one statement and
    /// then failed in a later one, before it could hand the caller what
    /// it had committed (the wins of an
    /// [`apply_many`](crate::Transition::apply_many) whose read of the
    /// other keys failed, say). The changes are committed; which rows
    /// they were is unknown to the caller, so the outcome is unknown
    /// ([`Error::is_outcome_unknown`]): apply again to learn each row's
    /// state (a committed move reads as `AlreadyInState`), and count the
    /// rows' effects as possibly owed. A row moved into an in-flight state
    /// is recovered after its lease and runs its effect under the same
    /// effect key; an effect that must not be lost belongs there. The
    /// stores' calls say in their docs what stays of theirs (a key
    /// claimed by `begin_tx`, messages a relay pass took).
    #[error(
        "`{call}` on table `{table}` committed changes, then failed before it could report \
         them, so the outcome is unknown (read the rows again to learn what changed): {source}"
    )]
    Unreported {
        /// The table of the machine, or of the store.
        table: &'static str,
        /// The transition, or the call.
        call: &'static str,
        /// The error of the later statement.
        #[source]
        source: Box<Error>,
    },

    /// Listing or taking over expired in-flight rows failed.
    #[error("recovering in-flight `{state}` rows of table `{table}` failed: {source}")]
    Recovery {
        /// The table of the machine.
        table: &'static str,
        /// The in-flight state's database string.
        state: &'static str,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
}

impl Error {
    /// [`Error::Database`] for `source`, or the [`Error::StatementMixUp`]
    /// it reports.
    pub(crate) fn database(
        table: &'static str,
        transition: &'static str,
        source: sqlx::Error,
    ) -> Error {
        mix_up(source).unwrap_or_else(|source| Error::Database {
            table,
            transition,
            source,
        })
    }

    /// [`Error::Store`] for `source`, or the [`Error::StatementMixUp`] it
    /// reports.
    pub(crate) fn store(table: &'static str, call: &'static str, source: sqlx::Error) -> Error {
        mix_up(source).unwrap_or_else(|source| Error::Store {
            table,
            call,
            source,
        })
    }
}

/// `source` as [`Error::StatementMixUp`] when it is one; otherwise
/// `source` back, for the caller to wrap.
pub(crate) fn mix_up(source: sqlx::Error) -> Result<Error, sqlx::Error> {
    match StatementMixUp::of(&source) {
        Some(mix_up) => Ok(Error::StatementMixUp(mix_up.clone())),
        None => Err(source),
    }
}

/// The error of a statement that a transaction which can no longer commit
/// did not send (`tx::TxHealth::refuse`), which [`Error::kind`] sorts with
/// [`Error::RolledBack`].
pub(crate) const REFUSED: &str = "not sent: the transaction was rolled back or a statement of it \
                                  was cut off, so it can no longer commit; roll it back and retry \
                                  the whole transaction";
