//! The fixed-table stores: idempotency keys for the requests a client may
//! retry ([`idempotency`]) and the consumer's inbox of messages already
//! handled ([`inbox`]).
//!
//! **Architecture Invariant:** each store's table has a fixed name, in the
//! connection's search path or in a schema named at compile time
//! ([`stores!`](crate::stores!)), so that every statement is a literal
//! the derive crate writes at compile time, as it writes a machine's
//! (`guard-macros/src/stores/`: the schema's quoted name before each
//! table name, the placeholders numbered by `plan.rs`), beside its plan
//! of `bind::Field`s, bound by `bind::store_arguments`; no value is ever
//! formatted into one.
//!
//! **Architecture Invariant:** no connection is held while waiting for
//! another: a call that uses two pooled connections at once
//! (`idempotency::begin_tx`) takes the second only if it is idle now
//! (`Run::try_idle`).
//!
//! **Architecture Invariant:** a statement that claims or prunes at most
//! `limit` rows chooses them once, whatever the plan. On PostgreSQL the
//! rows are chosen in a `WITH … AS MATERIALIZED (SELECT … LIMIT $n FOR
//! UPDATE SKIP LOCKED)`, which the write filters or joins by: a plain
//! subquery (`IN (SELECT …)` or `FROM (SELECT …)`) on the inner side of a
//! nested loop runs again for each outer row, skips the rows the statement
//! already wrote, and takes more. SQLite's `IN (SELECT … LIMIT ?)` is
//! uncorrelated, evaluated once into a transient table. MySQL's
//! `DELETE … ORDER BY … LIMIT ?` limits the rows it deletes, and the
//! relay's claim joins a derived table with a `LIMIT`, which MySQL and
//! MariaDB cannot merge into the update and materialise once. The
//! backends' `limits` tests hold each to its limit.

pub mod idempotency;
pub mod inbox;
pub(crate) mod schema;

pub use self::schema::Stores;

use std::time::Duration;

use crate::deadline::call::{Sent, bounded};
use crate::dialect::{Backend, Sql, Statement};
use crate::error::Error;
use crate::executor::tx::Tx;
use crate::transition::bind::{Field, Fields, store_arguments};

/// Runs one write of a fixed-table store in the caller's transaction,
/// within `deadline`, and returns the rows it changed: the inbox's
/// `receive`, the outbox's `enqueue`. Cut off, it may still run, so the
/// transaction is marked as one that must not commit.
pub(crate) async fn changed_in_tx<DB: Backend>(
    tx: &mut Tx<'_, DB>,
    table: &'static str,
    call: &'static str,
    deadline: Duration,
    sql: &'static Sql<Statement<Field>>,
    fields: Fields<'_>,
) -> Result<u64, Error> {
    use crate::executor::sealed::Run;
    let mut tx = tx;
    let changed = changed_on(&mut tx, table, call, deadline, sql, fields).await;
    if let Err(Error::Timeout { .. }) = changed {
        Run::abandoned(&mut tx);
    }
    changed
}

/// Runs one write of a fixed-table store on `pool`, in autocommit, within
/// `deadline`, and returns the rows it changed: the bounded prunes, the
/// outbox's `requeue`.
pub(crate) async fn changed_on_pool<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    table: &'static str,
    call: &'static str,
    deadline: Duration,
    sql: &'static Sql<Statement<Field>>,
    fields: Fields<'_>,
) -> Result<u64, Error> {
    let mut executor = pool;
    changed_on(&mut executor, table, call, deadline, sql, fields).await
}

/// `sql`'s statement for `E`'s database, bound to `fields` and run on
/// `executor` within `deadline`: the rows it changed, its error the
/// store's.
async fn changed_on<E: crate::executor::sealed::Run>(
    executor: &mut E,
    table: &'static str,
    call: &'static str,
    deadline: Duration,
    sql: &'static Sql<Statement<Field>>,
    fields: Fields<'_>,
) -> Result<u64, Error>
where
    E::Db: Backend,
{
    use crate::executor::proven::Proven;
    let sent = Sent::default();
    let work = async {
        let db_error = |source| Error::store(table, call, source);
        let statement = <E::Db as crate::dialect::sealed::Driver>::choose(sql);
        let args = store_arguments::<E::Db>(statement, fields).map_err(db_error)?;
        sent.write();
        Proven::changed(executor, statement, args)
            .await
            .map_err(db_error)
    };
    bounded(table, call, deadline, &sent, work).await
}

/// Runs a count of a fixed-table store on `pool` within `deadline`: the
/// rows `sql` counts, up to [`COUNT_CAP`](crate::COUNT_CAP), which reads as
/// that many or more. The outbox's backlog, the idempotency keys running.
pub(crate) async fn counted_on_pool<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    table: &'static str,
    call: &'static str,
    deadline: Duration,
    sql: &'static Sql<Statement<Field>>,
) -> Result<u64, Error> {
    use crate::executor::proven::Proven;
    use crate::transition::counts::COUNT_CAP;
    let sent = Sent::default();
    let work = async {
        let db_error = |source| Error::store(table, call, source);
        let statement = <DB as crate::dialect::sealed::Driver>::choose(sql);
        let fields = Fields {
            limit: Some(i64::try_from(COUNT_CAP).unwrap_or(i64::MAX)),
            ..Fields::default()
        };
        let args = store_arguments::<DB>(statement, fields).map_err(db_error)?;
        let mut executor = pool;
        let rows = Proven::rows(&mut executor, statement, args)
            .await
            .map_err(db_error)?;
        // A count answers one row: none is another statement's answer.
        let Some(row) = rows.first() else {
            let none = sqlx::Error::Protocol(format!("no count from {}", statement.text()));
            return Err(db_error(none));
        };
        let counted = DB::int_opt(row, statement.after_tag()).map_err(db_error)?;
        Ok(u64::try_from(counted.unwrap_or(0)).unwrap_or(0))
    };
    bounded(table, call, deadline, &sent, work).await
}
