//! The executor impls: one per backend for pools, connections, `Tx` and
//! `Savepoint`, through the macros that write them.

#[allow(unused_imports)] // unused when no backend feature is enabled
use sqlx::{Connection, Pool};

#[allow(unused_imports)]
use crate::executor::tx::{Savepoint, Tx};

use super::{ExecutedThenFetched, Executor, When, WithHistory, sealed};
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, BoxFuture};
use crate::outcome::{Committed, Uncommitted};

/// The body of `Run::with_history` on a connection `$conn` (a `&mut` connection,
/// possibly inside a transaction, where `begin` makes a savepoint).
macro_rules! with_history_on {
    ($db:ty, $conn:expr, $history_insert:expr, $history_args:expr, $update:expr, $args:expr, $rows:expr, $then:expr) => {{
        let mut tx = sqlx::Connection::begin($conn).await?;
        let inserted = <$db as Driver>::rows_affected(
            &sqlx::Executor::execute(&mut *tx, sqlx::query_with($history_insert, $history_args))
                .await?,
        );
        let (updated, rows, last_id) = if $rows {
            let rows =
                sqlx::Executor::fetch_all(&mut *tx, sqlx::query_with($update, $args)).await?;
            (rows.len() as u64, rows, 0)
        } else {
            let done = sqlx::Executor::execute(&mut *tx, sqlx::query_with($update, $args)).await?;
            let last_id = match <$db as Driver>::id_lost(&done) {
                true => {
                    let read = sqlx::query(<$db as Driver>::LAST_ID);
                    let row = sqlx::Executor::fetch_one(&mut *tx, read).await?;
                    // As the OK packet carries it: the same 64 bits.
                    <$db as Driver>::int(&row, 0)? as u64
                }
                false => <$db as Driver>::last_insert_id(&done),
            };
            (<$db as Driver>::rows_affected(&done), Vec::new(), last_id)
        };
        let then = match $then {
            Some((sql, args)) if updated > 0 => {
                sqlx::Executor::fetch_optional(&mut *tx, sqlx::query_with(sql, args)).await?
            }
            _ => None,
        };
        if inserted != updated {
            // Dropping the transaction rolls both back.
            return Err(sqlx::Error::Protocol(format!(
                "the history insert wrote {inserted} rows and the move changed {updated}; \
                 rolled back"
            )));
        }
        tx.commit().await?;
        Ok(WithHistory {
            updated,
            rows,
            then,
            last_id,
        })
    }};
}

/// The statement methods, given how to reach a connection from `self`.
macro_rules! statements {
    ($db:ty, |$this:ident| $conn:expr) => {
        fn execute(
            &mut self,
            sql: &'static str,
            args: <$db as Driver>::Args,
        ) -> BoxFuture<'_, Result<<$db as sqlx::Database>::QueryResult, sqlx::Error>> {
            let $this = self;
            sqlx::Executor::execute($conn, sqlx::query_with(sql, args))
        }

        fn fetch_optional(
            &mut self,
            sql: &'static str,
            args: <$db as Driver>::Args,
        ) -> BoxFuture<'_, Result<Option<<$db as sqlx::Database>::Row>, sqlx::Error>> {
            let $this = self;
            sqlx::Executor::fetch_optional($conn, sqlx::query_with(sql, args))
        }

        fn fetch_all(
            &mut self,
            sql: &'static str,
            args: <$db as Driver>::Args,
        ) -> BoxFuture<'_, Result<Vec<<$db as sqlx::Database>::Row>, sqlx::Error>> {
            let $this = self;
            sqlx::Executor::fetch_all($conn, sqlx::query_with(sql, args))
        }
    };
}

/// The statement methods on a pool: each takes a connection, and one that
/// answers that it only reads (a standby, a primary demoted by a failover)
/// is closed instead of going back to the pool, where every later
/// statement on it would fail the same way.
macro_rules! pool_statements {
    ($db:ty) => {
        pool_statements!(@one $db, execute, <$db as sqlx::Database>::QueryResult);
        pool_statements!(@one $db, fetch_optional, Option<<$db as sqlx::Database>::Row>);
        pool_statements!(@one $db, fetch_all, Vec<<$db as sqlx::Database>::Row>);
    };
    (@one $db:ty, $method:ident, $output:ty) => {
        fn $method(
            &mut self,
            sql: &'static str,
            args: <$db as Driver>::Args,
        ) -> BoxFuture<'_, Result<$output, sqlx::Error>> {
            let pool = &**self;
            Box::pin(async move {
                let mut conn = pool.acquire().await?;
                let result = sqlx::Executor::$method(&mut *conn, sqlx::query_with(sql, args)).await;
                closed_if_read_only(&mut conn, result)
            })
        }
    };
}

/// `result`, after marking `conn` to be closed (not returned to its pool)
/// when the server answered that it only reads.
#[allow(dead_code)] // unused when no backend feature is enabled
fn closed_if_read_only<DB: sqlx::Database, T>(
    conn: &mut sqlx::pool::PoolConnection<DB>,
    result: Result<T, sqlx::Error>,
) -> Result<T, sqlx::Error> {
    if let Err(error) = &result
        && crate::error::read_only(error)
    {
        tracing::warn!(
            %error,
            "the server only reads (a standby, or a primary demoted by a failover): \
             closing this pooled connection"
        );
        conn.close_on_drop();
    }
    result
}

/// The executor of a stateguard transaction or savepoint: its statements
/// run on its connection, and a failure that ends the transaction is
/// recorded, so that its commit refuses to hand out wins.
macro_rules! in_transaction {
    ($feature:literal, $db:ty, $tx:ty) => {
        #[cfg(feature = $feature)]
        impl sealed::Run for &mut $tx {
            type Database = $db;
            type Idle = sqlx::pool::PoolConnection<$db>;
            const IS_TRANSACTION: bool = true;

            fn execute(
                &mut self,
                sql: &'static str,
                args: <$db as Driver>::Args,
            ) -> BoxFuture<'_, Result<<$db as sqlx::Database>::QueryResult, sqlx::Error>> {
                Box::pin(async move {
                    let (conn, health) = self.parts();
                    health.refuse()?;
                    let done = sqlx::Executor::execute(conn, sqlx::query_with(sql, args)).await;
                    recorded::<$db, _>(health, done)
                })
            }

            fn fetch_optional(
                &mut self,
                sql: &'static str,
                args: <$db as Driver>::Args,
            ) -> BoxFuture<'_, Result<Option<<$db as sqlx::Database>::Row>, sqlx::Error>> {
                Box::pin(async move {
                    let (conn, health) = self.parts();
                    health.refuse()?;
                    let row =
                        sqlx::Executor::fetch_optional(conn, sqlx::query_with(sql, args)).await;
                    recorded::<$db, _>(health, row)
                })
            }

            fn fetch_all(
                &mut self,
                sql: &'static str,
                args: <$db as Driver>::Args,
            ) -> BoxFuture<'_, Result<Vec<<$db as sqlx::Database>::Row>, sqlx::Error>> {
                Box::pin(async move {
                    let (conn, health) = self.parts();
                    health.refuse()?;
                    let rows = sqlx::Executor::fetch_all(conn, sqlx::query_with(sql, args)).await;
                    recorded::<$db, _>(health, rows)
                })
            }

            fn execute_then_fetch(
                &mut self,
                sql: &'static str,
                args: <$db as Driver>::Args,
                then: &'static str,
                then_args: <$db as Driver>::Args,
                when: When<$db>,
            ) -> BoxFuture<'_, Result<ExecutedThenFetched<$db>, sqlx::Error>> {
                Box::pin(async move {
                    let (conn, health) = self.parts();
                    health.refuse()?;
                    // The connection's own `execute_then_fetch`.
                    let mut on: &mut <$db as sqlx::Database>::Connection = conn;
                    let both =
                        sealed::Run::execute_then_fetch(&mut on, sql, args, then, then_args, when)
                            .await;
                    recorded::<$db, _>(health, both)
                })
            }

            fn with_history(
                &mut self,
                history_insert: &'static str,
                history_args: <$db as Driver>::Args,
                update: &'static str,
                args: <$db as Driver>::Args,
                rows: bool,
                then: Option<(&'static str, <$db as Driver>::Args)>,
            ) -> BoxFuture<'_, Result<WithHistory<$db>, sqlx::Error>> {
                Box::pin(async move {
                    let (conn, health) = self.parts();
                    health.refuse()?;
                    let done = async {
                        with_history_on!(
                            $db,
                            &mut *conn,
                            history_insert,
                            history_args,
                            update,
                            args,
                            rows,
                            then
                        )
                    }
                    .await;
                    recorded::<$db, _>(health, done)
                })
            }

            fn scope(&self) -> u64 {
                self.scope_id()
            }

            fn abandoned(&mut self) {
                self.parts().1.abandon();
            }

            fn rolled_back(&self) -> bool {
                self.health().rolled_back()
            }
        }

        #[cfg(feature = $feature)]
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl Executor for &mut $tx {
            type Commit = Uncommitted;
            fn in_transaction(&self) -> bool {
                true
            }
        }
    };
}

/// `result`, after recording its error in the transaction's health.
#[allow(dead_code)] // unused when no backend feature is enabled
fn recorded<DB: Backend, T>(
    health: &mut crate::executor::tx::Health,
    result: Result<T, sqlx::Error>,
) -> Result<T, sqlx::Error> {
    match &result {
        Ok(_) => health.succeeded(),
        Err(error) => health.failed::<DB>(error),
    }
    result
}

/// The statement methods of `Run` on a connection reached by `&mut **self`
/// (a `&mut` connection, or a pooled one).
macro_rules! on_connection {
    ($db:ty) => {
        statements!($db, |this| &mut **this);

        // Both statements on the one connection (a pool's and a
        // transaction's `execute_then_fetch` run this on theirs).
        fn execute_then_fetch(
            &mut self,
            sql: &'static str,
            args: <$db as Driver>::Args,
            then: &'static str,
            then_args: <$db as Driver>::Args,
            when: When<$db>,
        ) -> BoxFuture<'_, Result<ExecutedThenFetched<$db>, sqlx::Error>> {
            Box::pin(async move {
                let conn = &mut **self;
                let done = sqlx::Executor::execute(&mut *conn, sqlx::query_with(sql, args)).await?;
                // Nothing to read (a losing attempt stays at its two
                // statements, the update and the fresh read).
                if !when(&done) {
                    return Ok((done, None));
                }
                let row =
                    sqlx::Executor::fetch_optional(&mut *conn, sqlx::query_with(then, then_args))
                        .await?;
                Ok((done, row))
            })
        }

        fn with_history(
            &mut self,
            history_insert: &'static str,
            history_args: <$db as Driver>::Args,
            update: &'static str,
            args: <$db as Driver>::Args,
            rows: bool,
            then: Option<(&'static str, <$db as Driver>::Args)>,
        ) -> BoxFuture<'_, Result<WithHistory<$db>, sqlx::Error>> {
            Box::pin(async move {
                with_history_on!(
                    $db,
                    &mut **self,
                    history_insert,
                    history_args,
                    update,
                    args,
                    rows,
                    then
                )
            })
        }
    };
}

// One impl per backend rather than one generic impl: a generic impl needs a
// higher-ranked `for<'e> &'e mut DB::Connection: sqlx::Executor<'e>` bound,
// and such bounds make the `apply` future fail the `Send` check that
// `tokio::spawn` performs ("implementation is not general enough").
macro_rules! executors {
    ($feature:literal, $db:ty, $conn:ty) => {
        #[cfg(feature = $feature)]
        impl sealed::Run for &Pool<$db> {
            type Database = $db;
            type Idle = sqlx::pool::PoolConnection<$db>;
            const IS_TRANSACTION: bool = false;

            const POOLED: bool = true;

            fn try_idle(&self) -> Option<Self::Idle> {
                Pool::try_acquire(self)
            }

            pool_statements!($db);

            fn execute_then_fetch(
                &mut self,
                sql: &'static str,
                args: <$db as Driver>::Args,
                then: &'static str,
                then_args: <$db as Driver>::Args,
                when: When<$db>,
            ) -> BoxFuture<'_, Result<ExecutedThenFetched<$db>, sqlx::Error>> {
                let pool = &**self;
                Box::pin(async move {
                    let mut conn = pool.acquire().await?;
                    let both = {
                        let mut on: &mut <$db as sqlx::Database>::Connection = &mut conn;
                        sealed::Run::execute_then_fetch(&mut on, sql, args, then, then_args, when)
                            .await
                    };
                    closed_if_read_only(&mut conn, both)
                })
            }

            fn with_history(
                &mut self,
                history_insert: &'static str,
                history_args: <$db as Driver>::Args,
                update: &'static str,
                args: <$db as Driver>::Args,
                rows: bool,
                then: Option<(&'static str, <$db as Driver>::Args)>,
            ) -> BoxFuture<'_, Result<WithHistory<$db>, sqlx::Error>> {
                // On a server the transaction runs in a task of its own
                // (`task`): a caller that stops waiting cannot leave it
                // half-begun. SQLite's worker needs none (as `Tx::begin`).
                let pool = (*self).clone();
                let moved = async move {
                    let mut conn = pool.acquire().await?;
                    let moved: Result<WithHistory<$db>, sqlx::Error> = async {
                        with_history_on!(
                            $db,
                            &mut *conn,
                            history_insert,
                            history_args,
                            update,
                            args,
                            rows,
                            then
                        )
                    }
                    .await;
                    closed_if_read_only(&mut conn, moved)
                };
                match <$db as Driver>::EMBEDDED {
                    true => Box::pin(moved),
                    false => Box::pin(crate::executor::task::run_to_completion(
                        "a move and its history",
                        moved,
                    )),
                }
            }
        }

        #[cfg(feature = $feature)]
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl Executor for &Pool<$db> {
            type Commit = Committed;
            fn in_transaction(&self) -> bool {
                false
            }
        }

        in_transaction!($feature, $db, Tx<'_, $db>);
        in_transaction!($feature, $db, Savepoint<'_, $db>);

        #[cfg(feature = $feature)]
        impl sealed::Run for &mut $conn {
            type Database = $db;
            type Idle = sqlx::pool::PoolConnection<$db>;
            const IS_TRANSACTION: bool = false;

            on_connection!($db);
        }

        #[cfg(feature = $feature)]
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl Executor for &mut $conn {
            type Commit = Committed;
            fn in_transaction(&self) -> bool {
                Connection::is_in_transaction(&**self)
            }
        }

        // A pooled connection, owned: what a pool's `try_idle` hands out. Not
        // an `Executor`: only the library runs statements on it.
        #[cfg(feature = $feature)]
        impl sealed::Run for sqlx::pool::PoolConnection<$db> {
            type Database = $db;
            type Idle = sqlx::pool::PoolConnection<$db>;
            const IS_TRANSACTION: bool = false;

            fn ping(&mut self) -> BoxFuture<'_, Result<(), sqlx::Error>> {
                Box::pin(Connection::ping(&mut **self))
            }

            on_connection!($db);
        }
    };
}

executors!("postgres", sqlx::Postgres, sqlx::PgConnection);
executors!("sqlite", sqlx::Sqlite, sqlx::SqliteConnection);
executors!("mysql", sqlx::MySql, sqlx::MySqlConnection);
