//! The executors on a pool: `&Pool`, a pooled connection, and the idle
//! connection `Run::try_idle` takes, each closing a connection that only
//! reads.

use sqlx::pool::PoolConnection;
use sqlx::{Connection, Pool};

use crate::dialect::connection::{ExecutedThenFetched, Inserts, OnConnection, When, WithInserts};
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, BoxFuture};
use crate::executor::{Runner, sealed};
use crate::outcome::Committed;

/// On a pool each statement takes a connection, and one that answers that
/// it only reads (a standby, a primary demoted by a failover) is closed
/// instead of going back to the pool, where every later statement on it
/// would fail the same way.
impl<DB: Backend> sealed::Run for &Pool<DB> {
    type Db = DB;
    type Idle = Idle<DB>;
    const IS_TRANSACTION: bool = false;

    const POOLED: bool = true;

    fn try_idle(&self) -> Option<Self::Idle> {
        Some(Idle {
            conn: Pool::try_acquire(self)?,
            multiplexed: self.multiplexed(),
            untagged: self.untagged(),
        })
    }

    fn multiplexed(&self) -> bool {
        crate::executor::marked::marked(self)
    }

    fn untagged(&self) -> bool {
        crate::executor::marked::untagged(self)
    }

    fn execute(
        &mut self,
        sql: &'static str,
        args: DB::Args,
    ) -> BoxFuture<'_, Result<DB::QueryResult, sqlx::Error>> {
        let pool = &**self;
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            let result = DB::execute_on(&mut conn, sql, args).await;
            closed_if_read_only(&mut conn, result)
        })
    }

    fn fetch_optional(
        &mut self,
        sql: &'static str,
        args: DB::Args,
    ) -> BoxFuture<'_, Result<Option<DB::Row>, sqlx::Error>> {
        let pool = &**self;
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            let result = DB::fetch_optional_on(&mut conn, sql, args).await;
            closed_if_read_only(&mut conn, result)
        })
    }

    fn fetch_all(
        &mut self,
        sql: &'static str,
        args: DB::Args,
    ) -> BoxFuture<'_, Result<Vec<DB::Row>, sqlx::Error>> {
        let pool = &**self;
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            let result = DB::fetch_all_on(&mut conn, sql, args).await;
            closed_if_read_only(&mut conn, result)
        })
    }

    fn execute_then_fetch(
        &mut self,
        sql: &'static str,
        args: DB::Args,
        then: &'static str,
        then_args: DB::Args,
        when: When<DB>,
    ) -> BoxFuture<'_, Result<ExecutedThenFetched<DB>, sqlx::Error>> {
        let pool = &**self;
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            let both = DB::execute_then_fetch_on(&mut conn, sql, args, then, then_args, when).await;
            closed_if_read_only(&mut conn, both)
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
        // On a server the transaction runs in a task of its own
        // (`task`): a caller that stops waiting cannot leave it
        // half-begun. SQLite's worker needs none (as `Tx::begin`).
        let pool = (*self).clone();
        let moved = async move {
            let mut conn = pool.acquire().await?;
            let moved = DB::with_inserts_on(&mut conn, inserts, update, args, rows, then).await;
            closed_if_read_only(&mut conn, moved)
        };
        match DB::EMBEDDED {
            true => Box::pin(moved),
            false => Box::pin(crate::executor::task::run_to_completion(
                "a move and its history or outbox rows",
                moved,
            )),
        }
    }
}

impl<DB: Backend> Runner for &Pool<DB> {
    type Database = DB;
    type Commit = Committed;
    fn in_transaction(&self) -> bool {
        false
    }
}

/// A pooled connection, borrowed: `let mut conn = pool.acquire().await?;`
/// and then `&mut conn`, as `&mut *conn` would be.
impl<DB: Backend> sealed::Run for &mut PoolConnection<DB> {
    type Db = DB;
    type Idle = Idle<DB>;
    const IS_TRANSACTION: bool = false;

    forwarded!(|this| &mut ***this);
}

impl<DB: Backend> Runner for &mut PoolConnection<DB> {
    type Database = DB;
    type Commit = Committed;
    fn in_transaction(&self) -> bool {
        Connection::is_in_transaction(&***self)
    }
}

/// A pooled connection, owned: what a pool's `try_idle` hands out, with
/// what the pooler check found of its pool. Not a `Runner`: only the
/// library runs statements on it.
pub struct Idle<DB: Backend> {
    conn: PoolConnection<DB>,
    multiplexed: bool,
    untagged: bool,
}

#[diagnostic::do_not_recommend]
impl<DB: Backend> sealed::Run for Idle<DB> {
    type Db = DB;
    type Idle = Idle<DB>;
    const IS_TRANSACTION: bool = false;

    fn ping(&mut self) -> BoxFuture<'_, Result<(), sqlx::Error>> {
        Box::pin(Connection::ping(&mut *self.conn))
    }

    fn multiplexed(&self) -> bool {
        self.multiplexed
    }

    fn untagged(&self) -> bool {
        self.untagged
    }

    forwarded!(|this| &mut *this.conn);
}

/// `result`, after marking `conn` to be closed (not returned to its pool)
/// when the server answered that it only reads.
fn closed_if_read_only<DB: sqlx::Database, T>(
    conn: &mut PoolConnection<DB>,
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
