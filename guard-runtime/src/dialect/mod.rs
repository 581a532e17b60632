//! What differs between databases: which SQL text runs, how rows-affected is
//! read, and which errors are worth retrying.

use crate::machine::Sql;

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// A database that stateguard can run transitions on: `sqlx::Postgres`,
/// `sqlx::Sqlite` or `sqlx::MySql`, each behind its cargo feature.
pub trait Backend: sqlx::Database + Sealed {
    /// A short name for messages and logs.
    const NAME: &'static str;

    /// `Self::Arguments`, named again so that its `IntoArguments` bound is
    /// known to generic code.
    #[doc(hidden)]
    type Args: sqlx::Arguments<Database = Self> + sqlx::IntoArguments<Self> + Send;

    #[doc(hidden)]
    fn sql(sql: &Sql) -> &'static str;

    /// How many placeholders the exact key match takes: MySQL's `?` is
    /// positional, so the key is bound once for each use.
    #[doc(hidden)]
    const KEY_BINDS: usize;

    #[doc(hidden)]
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// Whether `UPDATE … RETURNING` exists; without it the new version is
    /// read back with `LAST_INSERT_ID()` on the same connection.
    #[doc(hidden)]
    const RETURNING: bool;

    #[doc(hidden)]
    fn text_opt(row: &Self::Row, index: usize) -> Result<Option<String>, sqlx::Error>;

    #[doc(hidden)]
    fn int(row: &Self::Row, index: usize) -> Result<i64, sqlx::Error>;

    #[doc(hidden)]
    fn int_opt(row: &Self::Row, index: usize) -> Result<Option<i64>, sqlx::Error>;

    #[doc(hidden)]
    fn bind_int(args: &mut Self::Args, value: i64) -> Result<(), sqlx::Error>;

    #[doc(hidden)]
    fn column<T>(row: &Self::Row, index: usize) -> Result<T, sqlx::Error>
    where
        T: for<'r> sqlx::Decode<'r, Self> + sqlx::Type<Self>;

    /// Whether `error` is a serialization failure, deadlock or busy database
    /// that a fresh attempt may get past.
    fn is_retryable(error: &sqlx::Error) -> bool;

    /// Asked just before `COMMIT`: whether the connection's transaction is
    /// still open and not aborted, so that the `COMMIT` really commits.
    #[doc(hidden)]
    fn transaction_open(
        conn: &mut Self::Connection,
    ) -> crate::executor::BoxFuture<'_, Result<bool, sqlx::Error>>;
}

/// The accessors that read rows and extend arguments the same way on every
/// backend; only the row type differs.
macro_rules! row_access {
    ($row:ty) => {
        fn text_opt(row: &$row, index: usize) -> Result<Option<String>, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn int(row: &$row, index: usize) -> Result<i64, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn int_opt(row: &$row, index: usize) -> Result<Option<i64>, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn bind_int(args: &mut Self::Args, value: i64) -> Result<(), sqlx::Error> {
            sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
        }

        fn column<T>(row: &$row, index: usize) -> Result<T, sqlx::Error>
        where
            T: for<'r> sqlx::Decode<'r, Self> + sqlx::Type<Self>,
        {
            sqlx::Row::try_get(row, index)
        }
    };
}
#[allow(unused_imports)] // unused when no backend feature is enabled
use row_access;

/// The database's own error code, for the backends that report one as text.
#[allow(dead_code)] // unused when no backend feature is enabled
pub(crate) fn db_code(error: &sqlx::Error) -> Option<std::borrow::Cow<'_, str>> {
    match error {
        sqlx::Error::Database(db) => db.code(),
        _ => None,
    }
}
