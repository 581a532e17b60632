//! What a caller can do about an [`Error`]: its [`ErrorKind`].

use super::cause::connection_lost;
use super::{Error, StatementMixUp, mysql_number};
use crate::dialect::Backend;

/// What a caller can do about an [`Error`], as [`Error::kind`] sorts it.
/// Each error is of exactly one kind; the table at [`Error`] lists which
/// variant goes where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Calling again may succeed: nothing was changed (or the database
    /// rolled it back), and what stood in the way passes. Inside a
    /// transaction, roll back and run the whole transaction again.
    ///
    /// A database's error is transient when it is a serialization failure
    /// or deadlock (PostgreSQL 40001, 40P01; MySQL/MariaDB 1213, 1020), a
    /// lock that could not be had in time (PostgreSQL 55P03; MySQL 1205,
    /// 3572), a busy or locked SQLite database (5, 6 and their extended
    /// codes 261, 262, 517), a statement timeout (MySQL 3024, MariaDB
    /// 1969), too many connections (PostgreSQL 53300, MySQL 1040), a
    /// connection that failed or a server shutting down (PostgreSQL class
    /// 08, 57P01–57P03; MySQL 1053, 1927, 2006, 2013) when nothing was in
    /// flight, the pool's acquire timeout, a broken connection (an I/O
    /// or protocol error) when nothing was in flight, or a read-only server
    /// (PostgreSQL 25006; MySQL/MariaDB 1290, 1792, 1836: a standby or a
    /// demoted primary, see [`Error::ReadOnly`]).
    Transient,
    /// The change may have been applied although an error came back: see
    /// [`Error::is_outcome_unknown`]. Apply the transition again to learn
    /// the row's state (a committed change reads as `AlreadyInState`), and
    /// count the effect as possibly owed.
    OutcomeUnknown,
    /// The calling code asked for something the machine or the call does
    /// not allow: reading the history of a machine without one, a verdict
    /// naming no follow-up, … The same call fails again; the code needs
    /// fixing. Where the derive can see the misuse (`expecting` without a
    /// version column, a note without history), it is a compile error
    /// instead.
    Misuse,
    /// A value is not what the machine accepts: the caller's input (an
    /// idempotency key too long, a note's details that are not JSON) or
    /// what a row holds (a status that is no state, a key column that is
    /// not unique, history that names an unknown transition or holds
    /// details that are not JSON). Reject the input, or repair the row.
    ///
    /// A database's error is of this kind when the database refused a
    /// value a statement bound for what it is: an SQLSTATE of class 22,
    /// data exception (PostgreSQL 22001 too long for its column, 22003 out
    /// of range, 22P02 not text of the column's type, 22007 not a date …;
    /// MySQL/MariaDB 1406, 1264, 1292, which report it too), MySQL/MariaDB
    /// 1265 (data truncated: an ENUM's unknown label), 1366 (incorrect
    /// value for the column) and 3140 (invalid JSON text), and SQLite 3091
    /// (a `STRICT` table's column refusing a value of another type), 20
    /// and 18. SQLite does not check a length, and MySQL outside strict
    /// mode cuts a value short with a warning: there such a value is
    /// stored. A constraint (unique, foreign key, `CHECK`) is
    /// [`Database`](ErrorKind::Database), and the library's own check of
    /// a statement's tag is [`Error::StatementMixUp`].
    Data,
    /// Another request or session took the work over (an idempotency key's
    /// lease ran out and a retry holds it) or deleted the row: roll back
    /// and leave the work to whoever holds it.
    Superseded,
    /// The database refused for a reason a retry does not cure: a
    /// constraint violation, a syntax error, a missing table or column, a
    /// value that does not decode, a closed pool, a TLS or configuration
    /// failure, …
    Database,
}

impl Error {
    /// What a caller can do about this error. See the table at [`Error`].
    pub fn kind(&self) -> ErrorKind {
        // One notion of an unknown outcome: `is_outcome_unknown`'s.
        if self.is_outcome_unknown() {
            return ErrorKind::OutcomeUnknown;
        }
        // No wildcard: a new variant must be sorted here to compile.
        match self {
            Error::RetryTransaction { .. }
            | Error::ReadOnly { .. }
            | Error::RolledBack { .. }
            | Error::Contention { .. }
            | Error::Timeout { .. } => ErrorKind::Transient,
            Error::Database { source, .. }
            | Error::Begin { source }
            | Error::Commit { source }
            | Error::Store { source, .. }
            | Error::Recovery { source, .. }
            | Error::PoolerCheck { source } => {
                if transient(source) {
                    ErrorKind::Transient
                } else if refused_value(source)
                    && matches!(
                        self,
                        Error::Database { .. } | Error::Store { .. } | Error::Recovery { .. }
                    )
                {
                    // Only a statement binds the caller's values.
                    ErrorKind::Data
                } else {
                    ErrorKind::Database
                }
            }
            Error::Misuse(_) => ErrorKind::Misuse,
            Error::BadKey { .. }
            | Error::UnknownState(_)
            | Error::NullStatus { .. }
            | Error::AmbiguousKey { .. }
            // Like `UnknownState`: a stored string the machine does not
            // know (the enum changed, or the row was written by hand).
            | Error::UnknownTransition { .. }
            | Error::HistoryDetails { .. }
            | Error::NoteDetails { .. } => ErrorKind::Data,
            Error::IdempotencyLeaseLost { .. } | Error::RowVanished { .. } => {
                ErrorKind::Superseded
            }
            // The deployment, not the code or a row: a retry meets the
            // same pooler.
            Error::Multiplexed { .. } => ErrorKind::Database,
            // Sorted by `is_outcome_unknown` above.
            Error::StatementMixUp(_) | Error::Unreported { .. } => ErrorKind::OutcomeUnknown,
        }
    }

    /// True when calling again may succeed (inside a transaction: rolling
    /// back and running the whole transaction again): the error is of
    /// kind [`ErrorKind::Transient`]. An error whose outcome is unknown
    /// ([`Error::is_outcome_unknown`]) is not transient: apply again to
    /// learn what happened before retrying an effect.
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }

    /// True when the calling code used the API in a way the machine does
    /// not allow ([`ErrorKind::Misuse`]): the same call fails again until
    /// the code changes.
    pub fn is_misuse(&self) -> bool {
        self.kind() == ErrorKind::Misuse
    }
}

/// Whether a fresh attempt may get past `error` (see
/// [`ErrorKind::Transient`]).
fn transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::InvalidArgument(_) => refused(error),
        sqlx::Error::PoolTimedOut
        | sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or_default();
            // PostgreSQL: connection exceptions (class 08), lock not
            // available, too many connections, shutting down or not yet
            // accepting connections.
            code.starts_with("08")
                || matches!(code, "55P03" | "53300" | "57P01" | "57P02" | "57P03")
                || mysql_number(error).is_some_and(|n| {
                    // Too many connections, lock wait timeout, NOWAIT lock,
                    // statement timeouts (MySQL, MariaDB), shutdown, killed,
                    // gone away, lost.
                    matches!(
                        n,
                        1040 | 1205 | 3572 | 3024 | 1969 | 1053 | 1927 | 2006 | 2013
                    )
                })
                || retryable(error)
                || crate::error::read_only(error)
        }
        _ => false,
    }
}

/// Whether the database refused a value a statement bound for what the
/// value is (see [`ErrorKind::Data`]). Not the library's own check of a
/// statement's tag, a failed cast that is also 22P02: that is a mix-up.
fn refused_value(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    if db.message().contains("stateguard mix-up: ran ") {
        return false;
    }
    let code = db.code();
    let code = code.as_deref().unwrap_or_default();
    // An SQLSTATE of class 22, data exception (PostgreSQL, and MySQL's
    // 1406, 1264, 1292, …, whose state it reports): five characters,
    // where SQLite's codes are numbers of at most four digits.
    let data_exception = code.len() == 5 && code.starts_with("22");
    // MySQL/MariaDB: data truncated (an ENUM's unknown label), incorrect
    // value for the column, invalid JSON text.
    let mysql = mysql_number(error).is_some_and(|n| matches!(n, 1265 | 1366 | 3140));
    // SQLite: a STRICT table's column refusing a value of another type,
    // a datatype mismatch, a string or blob too big.
    let sqlite = cfg!(feature = "sqlite") && matches!(code, "3091" | "20" | "18");
    data_exception || mysql || sqlite
}

/// Whether `error` is a statement that was not sent because its
/// transaction can no longer commit: like [`Error::RolledBack`], whose
/// cure is the whole transaction again.
pub(super) fn refused(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::InvalidArgument(message) if message == super::REFUSED)
}

/// Whether a backend built in retries `error` by itself: serialization
/// failures, deadlocks, a busy database.
fn retryable(error: &sqlx::Error) -> bool {
    let mut any = false;
    #[cfg(feature = "postgres")]
    {
        any |= <sqlx::Postgres as Backend>::is_retryable(error);
    }
    #[cfg(feature = "sqlite")]
    {
        any |= <sqlx::Sqlite as Backend>::is_retryable(error);
    }
    #[cfg(feature = "mysql")]
    {
        any |= <sqlx::MySql as Backend>::is_retryable(error);
    }
    let _ = error;
    any
}

#[cfg(test)]
mod tests;

/// The questions a caller asks of an error besides its kind: whether to
/// retry the whole transaction, and whether the change may have been
/// applied.
impl Error {
    /// True when the caller must roll back and retry its whole transaction:
    /// it was rolled back, or its `COMMIT` was refused for a deadlock or a
    /// serialization failure (on a Galera cluster, a certification
    /// failure).
    pub fn is_retry_transaction(&self) -> bool {
        match self {
            Error::RetryTransaction { .. } | Error::RolledBack { .. } => true,
            // A statement not sent in a transaction that can no longer
            // commit (`apply` says `RolledBack` itself).
            Error::Database { source, .. } => refused(source),
            // A store's statement in the caller's transaction that hit a
            // deadlock or a serialization failure ended that transaction
            // (a Galera node aborts a local transaction that conflicts
            // with a replicated one); in autocommit, the call is the
            // whole transaction.
            Error::Store { source, .. } => refused(source) || retryable(source),
            // A `COMMIT` the database refused for a deadlock or a
            // serialization failure rolled the transaction back: a
            // multi-primary cluster (Galera) certifies a transaction only
            // there, and answers 1213 for one that lost to another node's.
            Error::Commit { source } => retryable(source),
            _ => false,
        }
    }

    /// True when a transaction the library ran itself (a claim, a batch)
    /// may be run again from its start: it was rolled back, or could not
    /// begin, for a deadlock or a busy database.
    pub(crate) fn retries_whole<DB: crate::Backend>(&self) -> bool {
        match self {
            Error::Begin { source } | Error::Database { source, .. } | Error::Commit { source } => {
                DB::is_retryable(source)
            }
            other => other.is_retry_transaction(),
        }
    }

    /// True when the change may have been applied although an error came
    /// back: the connection broke while a statement or a `COMMIT` was in
    /// flight, so the database may have committed it without the answer
    /// arriving. Apply the transition again (a committed change then reads
    /// as `AlreadyInState`) and treat an effect as possibly owed: an effect
    /// that must not be lost belongs in an in-flight state, whose recovery
    /// covers exactly this case.
    ///
    /// Besides a broken connection, these count: the server ending the
    /// session (PostgreSQL 57P01 admin shutdown, 57P02 crash shutdown, 57P03
    /// cannot connect now; MySQL/MariaDB 1053 server shutdown, 1927
    /// connection killed, 2006 server gone away, 2013 lost connection), and
    /// a statement or COMMIT cancelled while PostgreSQL waited for its
    /// synchronous replicas (57014 `query_canceled`: the commit is local
    /// already).
    ///
    /// So does [`Error::StatementMixUp`]: the server ran another statement
    /// in this one's place, which may have written; and
    /// [`Error::Unreported`]: a call of several statements committed
    /// changes and failed before it could report them.
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            Error::Database { source, .. }
            | Error::Recovery { source, .. }
            | Error::Store { source, .. }
            | Error::Commit { source }
            | Error::RolledBack {
                source: Some(source),
            } => connection_lost(source) || StatementMixUp::of(source).is_some(),
            Error::Timeout { outcome_known, .. } => !outcome_known,
            Error::StatementMixUp(_) | Error::Unreported { .. } => true,
            _ => false,
        }
    }
}
