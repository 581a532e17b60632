//! The executor impls. What needs a backend's own connection type (sqlx
//! implements its `Runner` per connection) is written once per backend,
//! as [`OnConnection`] and the impls on `&mut PgConnection`,
//! `&mut SqliteConnection` and `&mut MySqlConnection`. Pools, pooled
//! connections, `Tx` and `Savepoint` are generic over the backend on top
//! of it, so that generic code over `DB: Backend` needs no bound of its own
//! to run a transition on `&Pool<DB>`, `&mut Tx<'_, DB>` or a pooled
//! connection.

use sqlx::Connection;

use super::{Runner, fault, sealed};
use crate::dialect::BoxFuture;
use crate::dialect::connection::{ExecutedThenFetched, Inserts, OnConnection, When, WithInserts};
use crate::dialect::sealed::Driver;
use crate::outcome::Committed;

/// The body of `Run::with_inserts` on a connection `$conn` (a `&mut` connection,
/// possibly inside a transaction, where `begin` makes a savepoint).
macro_rules! inserts_then_move {
    ($db:ty, $conn:expr, $inserts:expr, $update:expr, $args:expr, $rows:expr, $then:expr) => {{
        let conn = $conn;
        if <$db as Driver>::PREPARES_FIRST {
            // Every statement the transaction may send after its first
            // write, prepared (or found in the connection's cache) first.
            let then: Option<&'static str> = $then.as_ref().map(|(sql, _)| *sql);
            let later = ($inserts.iter().skip(1).map(|(insert, _)| *insert))
                .chain([$update, <$db as Driver>::LAST_ID])
                .chain(then);
            for sql in later {
                <$db as OnConnection>::prepare_on(&mut *conn, sql).await?;
            }
        }
        let mut tx = fault::statement("BEGIN", sqlx::Connection::begin(conn)).await?;
        let mut inserted = Vec::new();
        for (insert, insert_args) in $inserts {
            let done = fault::statement(
                insert,
                sqlx::Executor::execute(&mut *tx, sqlx::query_with(insert, insert_args)),
            )
            .await?;
            inserted.push(<$db as Driver>::rows_affected(&done));
        }
        let (updated, rows, last_id) = if $rows {
            let rows = fault::statement(
                $update,
                sqlx::Executor::fetch_all(&mut *tx, sqlx::query_with($update, $args)),
            )
            .await?;
            (rows.len() as u64, rows, 0)
        } else {
            let done = fault::statement(
                $update,
                sqlx::Executor::execute(&mut *tx, sqlx::query_with($update, $args)),
            )
            .await?;
            let last_id = match <$db as Driver>::id_lost(&done) {
                true => {
                    let read = sqlx::query(<$db as Driver>::LAST_ID);
                    let last = <$db as Driver>::LAST_ID;
                    let row =
                        fault::statement(last, sqlx::Executor::fetch_one(&mut *tx, read)).await?;
                    // As the OK packet carries it: the same 64 bits.
                    <$db as Driver>::int(&row, 0)? as u64
                }
                false => <$db as Driver>::last_insert_id(&done),
            };
            (<$db as Driver>::rows_affected(&done), Vec::new(), last_id)
        };
        let then = match $then {
            Some((sql, args)) if updated > 0 => {
                fault::statement(
                    sql,
                    sqlx::Executor::fetch_optional(&mut *tx, sqlx::query_with(sql, args)),
                )
                .await?
            }
            _ => None,
        };
        if let Some(inserted) = inserted.into_iter().find(|&inserted| inserted != updated) {
            // Dropping the transaction rolls them all back.
            return Err(sqlx::Error::Protocol(format!(
                "an insert beside the move wrote {inserted} rows and the move changed \
                 {updated}; rolled back"
            )));
        }
        fault::statement("COMMIT", tx.commit()).await?;
        Ok(WithInserts {
            updated,
            rows,
            then,
            last_id,
        })
    }};
}

/// The statements on one connection of `$db`, its [`OnConnection`].
macro_rules! on_connection {
    ($feature:literal, $db:ty, $conn:ty) => {
        #[cfg(feature = $feature)]
        impl OnConnection for $db {
            fn prepare_on<'c>(
                conn: &'c mut $conn,
                sql: &'static str,
            ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    sqlx::Executor::prepare(conn, sqlx::SqlSafeStr::into_sql_str(sql))
                        .await
                        .map(drop)
                })
            }

            fn forget_prepared_on(conn: &mut $conn) -> BoxFuture<'_, Result<(), sqlx::Error>> {
                Box::pin(sqlx::Connection::clear_cached_statements(conn))
            }

            fn execute_on<'c>(
                conn: &'c mut $conn,
                sql: &'static str,
                args: <$db as Driver>::Args,
            ) -> BoxFuture<'c, Result<<$db as sqlx::Database>::QueryResult, sqlx::Error>> {
                fault::boxed_statement(
                    sql,
                    sqlx::Executor::execute(conn, sqlx::query_with(sql, args)),
                )
            }

            fn fetch_optional_on<'c>(
                conn: &'c mut $conn,
                sql: &'static str,
                args: <$db as Driver>::Args,
            ) -> BoxFuture<'c, Result<Option<<$db as sqlx::Database>::Row>, sqlx::Error>> {
                fault::boxed_statement(
                    sql,
                    sqlx::Executor::fetch_optional(conn, sqlx::query_with(sql, args)),
                )
            }

            fn fetch_all_on<'c>(
                conn: &'c mut $conn,
                sql: &'static str,
                args: <$db as Driver>::Args,
            ) -> BoxFuture<'c, Result<Vec<<$db as sqlx::Database>::Row>, sqlx::Error>> {
                fault::boxed_statement(
                    sql,
                    sqlx::Executor::fetch_all(conn, sqlx::query_with(sql, args)),
                )
            }

            fn execute_then_fetch_on<'c>(
                conn: &'c mut $conn,
                sql: &'static str,
                args: <$db as Driver>::Args,
                then: &'static str,
                then_args: <$db as Driver>::Args,
                when: When<$db>,
            ) -> BoxFuture<'c, Result<ExecutedThenFetched<$db>, sqlx::Error>> {
                Box::pin(async move {
                    let done = fault::statement(
                        sql,
                        sqlx::Executor::execute(&mut *conn, sqlx::query_with(sql, args)),
                    )
                    .await?;
                    // Nothing to read (a losing attempt stays at its two
                    // statements, the update and the fresh read).
                    if !when(&done) {
                        return Ok((done, Ok(None)));
                    }
                    let row = fault::statement(
                        then,
                        sqlx::Executor::fetch_optional(
                            &mut *conn,
                            sqlx::query_with(then, then_args),
                        ),
                    )
                    .await;
                    Ok((done, row))
                })
            }

            fn with_inserts_on<'c>(
                conn: &'c mut $conn,
                inserts: Inserts<$db>,
                update: &'static str,
                args: <$db as Driver>::Args,
                rows: bool,
                then: Option<(&'static str, <$db as Driver>::Args)>,
            ) -> BoxFuture<'c, Result<WithInserts<$db>, sqlx::Error>> {
                Box::pin(async move {
                    inserts_then_move!($db, &mut *conn, inserts, update, args, rows, then)
                })
            }
        }

        #[cfg(feature = $feature)]
        impl sealed::Run for &mut $conn {
            type Db = $db;
            type Idle = Idle<$db>;
            const IS_TRANSACTION: bool = false;

            forwarded!(|this| &mut **this);
        }

        #[cfg(feature = $feature)]
        #[cfg_attr(docsrs, doc(cfg(feature = $feature)))]
        impl Runner for &mut $conn {
            type Database = $db;
            type Commit = Committed;
            fn in_transaction(&self) -> bool {
                Connection::is_in_transaction(&**self)
            }
        }
    };
}

/// The statement methods of `Run` for an executor that reaches its
/// connection by `$conn`, forwarded to the backend's
/// [`OnConnection`].
macro_rules! forwarded {
    (|$this:ident| $conn:expr) => {
        fn execute(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
        ) -> BoxFuture<'_, Result<<Self::Db as sqlx::Database>::QueryResult, sqlx::Error>> {
            let $this = self;
            <Self::Db as OnConnection>::execute_on($conn, sql, args)
        }

        fn fetch_optional(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
        ) -> BoxFuture<'_, Result<Option<<Self::Db as sqlx::Database>::Row>, sqlx::Error>> {
            let $this = self;
            <Self::Db as OnConnection>::fetch_optional_on($conn, sql, args)
        }

        fn fetch_all(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
        ) -> BoxFuture<'_, Result<Vec<<Self::Db as sqlx::Database>::Row>, sqlx::Error>> {
            let $this = self;
            <Self::Db as OnConnection>::fetch_all_on($conn, sql, args)
        }

        fn execute_then_fetch(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
            then: &'static str,
            then_args: <Self::Db as Driver>::Args,
            when: When<Self::Db>,
        ) -> BoxFuture<'_, Result<ExecutedThenFetched<Self::Db>, sqlx::Error>> {
            let $this = self;
            <Self::Db as OnConnection>::execute_then_fetch_on(
                $conn, sql, args, then, then_args, when,
            )
        }

        fn with_inserts(
            &mut self,
            inserts: Inserts<Self::Db>,
            update: &'static str,
            args: <Self::Db as Driver>::Args,
            rows: bool,
            then: Option<(&'static str, <Self::Db as Driver>::Args)>,
        ) -> BoxFuture<'_, Result<WithInserts<Self::Db>, sqlx::Error>> {
            let $this = self;
            <Self::Db as OnConnection>::with_inserts_on($conn, inserts, update, args, rows, then)
        }
    };
}

on_connection!("postgres", sqlx::Postgres, sqlx::PgConnection);
on_connection!("sqlite", sqlx::Sqlite, sqlx::SqliteConnection);
on_connection!("mysql", sqlx::MySql, sqlx::MySqlConnection);

mod pool;
mod tx;

pub(crate) use self::pool::Idle;
