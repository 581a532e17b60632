//! What `Transition::apply` accepts: a pool, a connection or a transaction.

use sqlx::{Connection, Pool, Transaction};

use crate::dialect::Backend;

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
    type Inner<'e>: sqlx::Executor<'e, Database = Self::Database>
    where
        Self: 'e;

    #[doc(hidden)]
    fn reborrow(&mut self) -> Self::Inner<'_>;

    /// Whether the statements run inside a transaction the caller owns.
    fn in_transaction(&self) -> bool;
}

impl<DB: Backend> sealed::Sealed for &Pool<DB> {}

impl<'p, DB: Backend> Executor for &'p Pool<DB>
where
    for<'e> &'e Pool<DB>: sqlx::Executor<'e, Database = DB>,
{
    type Database = DB;

    type Inner<'e>
        = &'e Pool<DB>
    where
        Self: 'e;

    fn reborrow(&mut self) -> &Pool<DB> {
        self
    }

    fn in_transaction(&self) -> bool {
        false
    }
}

impl<DB: Backend> sealed::Sealed for &mut Transaction<'_, DB> {}

impl<DB: Backend> Executor for &mut Transaction<'_, DB>
where
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
{
    type Database = DB;

    type Inner<'e>
        = &'e mut DB::Connection
    where
        Self: 'e;

    fn reborrow(&mut self) -> &mut DB::Connection {
        self
    }

    fn in_transaction(&self) -> bool {
        true
    }
}

macro_rules! connection_executor {
    ($feature:literal, $db:ty, $conn:ty) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for &mut $conn {}

        #[cfg(feature = $feature)]
        impl Executor for &mut $conn {
            type Database = $db;

            type Inner<'e>
                = &'e mut $conn
            where
                Self: 'e;

            fn reborrow(&mut self) -> &mut $conn {
                self
            }

            fn in_transaction(&self) -> bool {
                Connection::is_in_transaction(&**self)
            }
        }
    };
}

connection_executor!("postgres", sqlx::Postgres, sqlx::PgConnection);
connection_executor!("sqlite", sqlx::Sqlite, sqlx::SqliteConnection);
connection_executor!("mysql", sqlx::MySql, sqlx::MySqlConnection);
