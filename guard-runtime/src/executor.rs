//! What `Transition::apply` accepts: a pool, a connection or a transaction.

#[allow(unused_imports)] // unused when no backend feature is enabled
use sqlx::{Connection, Pool, Transaction};

use core::pin::Pin;

use crate::dialect::Backend;

/// The future type sqlx's own executors return.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

mod sealed {
    pub trait Sealed {}
}

/// Something a transition can run on: `&Pool<DB>`, `&mut DB::Connection`
/// (a `PgConnection`, `SqliteConnection` or `MySqlConnection`, including
/// `&mut *pool_connection`), or `&mut Transaction<'_, DB>`.
///
/// On a pool, or on a connection that is not inside a transaction, each
/// statement commits on its own, so the library retries serialization
/// failures and deadlocks itself. Inside a transaction it cannot, and returns
/// [`Error::RetryTransaction`](crate::Error::RetryTransaction) instead.
pub trait Executor: Send + sealed::Sealed {
    /// The database the statements run on.
    type Database: Backend;

    #[doc(hidden)]
    fn execute(
        &mut self,
        sql: &'static str,
        args: <Self::Database as Backend>::Args,
    ) -> BoxFuture<'_, Result<<Self::Database as sqlx::Database>::QueryResult, sqlx::Error>>;

    #[doc(hidden)]
    fn fetch_optional(
        &mut self,
        sql: &'static str,
        args: <Self::Database as Backend>::Args,
    ) -> BoxFuture<'_, Result<Option<<Self::Database as sqlx::Database>::Row>, sqlx::Error>>;

    /// Whether the statements run inside a transaction the caller owns.
    fn in_transaction(&self) -> bool;
}

// One impl per backend rather than one generic impl: a generic impl needs a
// higher-ranked `for<'e> &'e mut DB::Connection: sqlx::Executor<'e>` bound,
// and such bounds make the `apply` future fail the `Send` check that
// `tokio::spawn` performs ("implementation is not general enough").
macro_rules! executors {
    ($feature:literal, $db:ty, $conn:ty) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for &Pool<$db> {}

        #[cfg(feature = $feature)]
        impl Executor for &Pool<$db> {
            type Database = $db;

            fn execute(
                &mut self,
                sql: &'static str,
                args: <$db as Backend>::Args,
            ) -> BoxFuture<'_, Result<<$db as sqlx::Database>::QueryResult, sqlx::Error>> {
                sqlx::Executor::execute(&**self, sqlx::query_with(sql, args))
            }

            fn fetch_optional(
                &mut self,
                sql: &'static str,
                args: <$db as Backend>::Args,
            ) -> BoxFuture<'_, Result<Option<<$db as sqlx::Database>::Row>, sqlx::Error>> {
                sqlx::Executor::fetch_optional(&**self, sqlx::query_with(sql, args))
            }

            fn in_transaction(&self) -> bool {
                false
            }
        }

        #[cfg(feature = $feature)]
        impl sealed::Sealed for &mut Transaction<'_, $db> {}

        #[cfg(feature = $feature)]
        impl Executor for &mut Transaction<'_, $db> {
            type Database = $db;

            fn execute(
                &mut self,
                sql: &'static str,
                args: <$db as Backend>::Args,
            ) -> BoxFuture<'_, Result<<$db as sqlx::Database>::QueryResult, sqlx::Error>> {
                sqlx::Executor::execute(&mut ***self, sqlx::query_with(sql, args))
            }

            fn fetch_optional(
                &mut self,
                sql: &'static str,
                args: <$db as Backend>::Args,
            ) -> BoxFuture<'_, Result<Option<<$db as sqlx::Database>::Row>, sqlx::Error>> {
                sqlx::Executor::fetch_optional(&mut ***self, sqlx::query_with(sql, args))
            }

            fn in_transaction(&self) -> bool {
                true
            }
        }

        #[cfg(feature = $feature)]
        impl sealed::Sealed for &mut $conn {}

        #[cfg(feature = $feature)]
        impl Executor for &mut $conn {
            type Database = $db;

            fn execute(
                &mut self,
                sql: &'static str,
                args: <$db as Backend>::Args,
            ) -> BoxFuture<'_, Result<<$db as sqlx::Database>::QueryResult, sqlx::Error>> {
                sqlx::Executor::execute(&mut **self, sqlx::query_with(sql, args))
            }

            fn fetch_optional(
                &mut self,
                sql: &'static str,
                args: <$db as Backend>::Args,
            ) -> BoxFuture<'_, Result<Option<<$db as sqlx::Database>::Row>, sqlx::Error>> {
                sqlx::Executor::fetch_optional(&mut **self, sqlx::query_with(sql, args))
            }

            fn in_transaction(&self) -> bool {
                Connection::is_in_transaction(&**self)
            }
        }
    };
}

executors!("postgres", sqlx::Postgres, sqlx::PgConnection);
executors!("sqlite", sqlx::Sqlite, sqlx::SqliteConnection);
executors!("mysql", sqlx::MySql, sqlx::MySqlConnection);
