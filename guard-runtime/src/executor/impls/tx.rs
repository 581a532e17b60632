//! The executors inside a transaction: `&mut Tx` and `&mut Savepoint`,
//! which send nothing once their transaction can no longer commit.

use super::Idle;
use crate::executor::tx::{Savepoint, Tx};

use crate::dialect::connection::{ExecutedThenFetched, Inserts, When, WithInserts};
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, BoxFuture};
use crate::executor::{Runner, sealed};
use crate::outcome::Uncommitted;

/// The `Run` methods of a transaction or savepoint, written once; each
/// `impl` header is written out, so that the compiler names both types
/// when a value is neither (a macro-written header made it list the
/// macro instead).
macro_rules! in_transaction {
    () => {
        type Db = DB;
        type Idle = Idle<DB>;
        const IS_TRANSACTION: bool = true;

        fn execute(
            &mut self,
            sql: &'static str,
            args: DB::Args,
        ) -> BoxFuture<'_, Result<DB::QueryResult, sqlx::Error>> {
            guarded::<DB, _>(self.parts(), move |conn| DB::execute_on(conn, sql, args))
        }

        fn fetch_optional(
            &mut self,
            sql: &'static str,
            args: DB::Args,
        ) -> BoxFuture<'_, Result<Option<DB::Row>, sqlx::Error>> {
            guarded::<DB, _>(self.parts(), move |conn| {
                DB::fetch_optional_on(conn, sql, args)
            })
        }

        fn fetch_all(
            &mut self,
            sql: &'static str,
            args: DB::Args,
        ) -> BoxFuture<'_, Result<Vec<DB::Row>, sqlx::Error>> {
            guarded::<DB, _>(self.parts(), move |conn| DB::fetch_all_on(conn, sql, args))
        }

        fn execute_then_fetch(
            &mut self,
            sql: &'static str,
            args: DB::Args,
            then: &'static str,
            then_args: DB::Args,
            when: When<DB>,
        ) -> BoxFuture<'_, Result<ExecutedThenFetched<DB>, sqlx::Error>> {
            guarded::<DB, _>(self.parts(), move |conn| {
                DB::execute_then_fetch_on(conn, sql, args, then, then_args, when)
            })
        }

        fn with_inserts(
            &mut self,
            inserts: Inserts<DB>,
            update: &'static str,
            args: DB::Args,
            rows: bool,
            then: Option<(&'static str, DB::Args)>,
        ) -> BoxFuture<'_, Result<WithInserts<DB>, sqlx::Error>> {
            guarded::<DB, _>(self.parts(), move |conn| {
                DB::with_inserts_on(conn, inserts, update, args, rows, then)
            })
        }

        fn prepare_first(
            &mut self,
            statements: Vec<&'static str>,
        ) -> BoxFuture<'_, Result<(), sqlx::Error>> {
            if !<DB as Driver>::PREPARES_FIRST {
                return Box::pin(async { Ok(()) });
            }
            guarded::<DB, _>(self.parts(), move |conn| {
                Box::pin(async move {
                    for sql in statements {
                        DB::prepare_on(&mut *conn, sql).await?;
                    }
                    Ok(())
                })
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

        fn multiplexed(&self) -> bool {
            self.health().multiplexed
        }

        fn untagged(&self) -> bool {
            self.health().untagged
        }
    };
}

// A stateguard transaction and a savepoint in one: their statements run
// on their connection, and a failure that ends the transaction is
// recorded, so that its commit refuses to hand out wins.
impl<DB: Backend> sealed::Run for &mut Tx<'_, DB> {
    in_transaction!();
}

impl<DB: Backend> Runner for &mut Tx<'_, DB> {
    type Database = DB;
    type Commit = Uncommitted;
    fn in_transaction(&self) -> bool {
        true
    }
}

impl<DB: Backend> sealed::Run for &mut Savepoint<'_, DB> {
    in_transaction!();
}

impl<DB: Backend> Runner for &mut Savepoint<'_, DB> {
    type Database = DB;
    type Commit = Uncommitted;
    fn in_transaction(&self) -> bool {
        true
    }
}

/// `run` on the connection of a transaction or savepoint, unless it can no
/// longer commit; its error, if any, recorded in the transaction's health.
fn guarded<'a, DB: Backend, T: Send + 'a>(
    (conn, health): (
        &'a mut DB::Connection,
        &'a mut crate::executor::tx::TxHealth,
    ),
    run: impl FnOnce(&'a mut DB::Connection) -> BoxFuture<'a, Result<T, sqlx::Error>> + Send + 'a,
) -> BoxFuture<'a, Result<T, sqlx::Error>> {
    Box::pin(async move {
        health.refuse()?;
        let result = run(conn).await;
        recorded::<DB, _>(health, result)
    })
}

/// `result`, after recording its error in the transaction's health.
fn recorded<DB: Backend, T>(
    health: &mut crate::executor::tx::TxHealth,
    result: Result<T, sqlx::Error>,
) -> Result<T, sqlx::Error> {
    match &result {
        Ok(_) => health.succeeded(),
        Err(error) => health.failed::<DB>(error),
    }
    result
}
