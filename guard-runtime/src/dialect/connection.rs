//! What a backend runs on one of its connections: the statements every
//! executor reaches through it (`executor/impls/`), and what they
//! return.

use super::BoxFuture;
use super::sealed::Driver;

/// The result of `execute_then_fetch`: the first statement's result and
/// what the second returned, its row or its own error. The second's error
/// comes apart from the first's: the first has run (and may have changed
/// rows, committed on their own outside a transaction), so the caller
/// decides what the failure means (`executor/seam.rs`, or
/// [`read_back_failed`]).
pub(crate) type ExecutedThenFetched<DB> = (
    <DB as sqlx::Database>::QueryResult,
    Result<Option<<DB as sqlx::Database>::Row>, sqlx::Error>,
);

/// The error of a read back after a statement that changed rows: the
/// change stands, the caller cannot see it, so the outcome is unknown
/// (an I/O error, as a connection lost before the answer is).
pub(crate) fn read_back_failed(error: sqlx::Error) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other(format!(
        "the statement ran, and reading its result back failed, so its outcome is unknown: \
         {error}"
    )))
}

/// Whether the second statement of `execute_then_fetch` runs, given the
/// first one's result ([`Driver::changed`](crate::dialect::sealed::Driver::changed),
/// [`Driver::id_lost`](crate::dialect::sealed::Driver::id_lost)).
pub(crate) type When<DB> = fn(&<DB as sqlx::Database>::QueryResult) -> bool;

/// The inserts `Run::with_inserts` runs before the move, each with its
/// values: the history row's, the outbox row's, or both.
pub(crate) type Inserts<DB> = Vec<(&'static str, <DB as super::sealed::Driver>::Args)>;

/// What `Run::with_inserts` did: the rows the update changed (as many as
/// each insert wrote), its rows when asked for, the follow-up read's
/// row, and the update's `LAST_INSERT_ID` on MySQL.
pub struct WithInserts<DB: sqlx::Database> {
    pub(crate) updated: u64,
    pub(crate) rows: Vec<DB::Row>,
    pub(crate) then: Option<DB::Row>,
    pub(crate) last_id: u64,
}

/// The statements on one connection of a backend, out of callers'
/// reach: what every executor runs once it has reached its connection.
/// Implemented per backend, where sqlx's `Executor` is (on its
/// connection type); the executors are generic over the backend on
/// top of it.
pub trait OnConnection: Driver {
    /// Prepares `sql` on `conn` without running it: whether the database
    /// can plan it against the schema it has.
    fn prepare_on<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;

    /// Empties `conn`'s cache of prepared statements, so that the next
    /// [`prepare_on`](Self::prepare_on) of a statement plans it against
    /// the schema as it is now rather than returning the plan of before.
    fn forget_prepared_on(conn: &mut Self::Connection) -> BoxFuture<'_, Result<(), sqlx::Error>>;

    fn execute_on<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: Self::Args,
    ) -> BoxFuture<'c, Result<Self::QueryResult, sqlx::Error>>;

    fn fetch_optional_on<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: Self::Args,
    ) -> BoxFuture<'c, Result<Option<Self::Row>, sqlx::Error>>;

    fn fetch_all_on<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: Self::Args,
    ) -> BoxFuture<'c, Result<Vec<Self::Row>, sqlx::Error>>;

    /// As the executors' `Run::execute_then_fetch`, on `conn`.
    fn execute_then_fetch_on<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        args: Self::Args,
        then: &'static str,
        then_args: Self::Args,
        when: When<Self>,
    ) -> BoxFuture<'c, Result<ExecutedThenFetched<Self>, sqlx::Error>>;

    /// As the executors' `Run::with_inserts`, on `conn`: a transaction of its own,
    /// or a savepoint inside the one `conn` is in.
    #[allow(clippy::too_many_arguments)]
    fn with_inserts_on<'c>(
        conn: &'c mut Self::Connection,
        inserts: Inserts<Self>,
        update: &'static str,
        args: Self::Args,
        rows: bool,
        then: Option<(&'static str, Self::Args)>,
    ) -> BoxFuture<'c, Result<WithInserts<Self>, sqlx::Error>>;
}
