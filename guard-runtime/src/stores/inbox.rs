//! A consumer's inbox: each message id applied once, however often the
//! message is delivered.
//!
//! Webhooks and queues deliver at least once. [`receive`] records a
//! message id for a consumer inside the consumer's own transaction, as an
//! insert against a unique key: the first delivery gets
//! [`Received::First`] and does its work in the same transaction; a
//! duplicate gets [`Received::Duplicate`] and does nothing. The inbox row
//! commits with the work, so a consumer that rolls back (or crashes) did
//! not consume, and the next delivery is `First` again. Two deliveries
//! racing in two transactions: the second insert waits for the first
//! transaction, and is `Duplicate` if it commits, `First` if it rolls back.
//!
//! It composes with [`apply`](crate::Transition::apply) in one
//! transaction:
//!
//! ```no_run
//! # use stateguard::StateMachine;
//! # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
//! # #[state_machine(table = "payouts", column = "status", key = "id")]
//! # enum PayoutStatus {
//! #     #[state(initial)]
//! #     #[transition(confirm -> Paid)]
//! #     Sending,
//! #     Paid,
//! # }
//! # async fn webhook(pool: sqlx::PgPool, event_id: &str, payout: i64) -> Result<(), stateguard::Error> {
//! use stateguard::inbox::{self, Received};
//! use stateguard::Tx;
//!
//! let mut tx = Tx::begin(&pool).await?;
//! if inbox::receive(&mut tx, "bank-webhooks", event_id).await? == Received::Duplicate {
//!     return Ok(()); // answered 200: delivered before
//! }
//! let outcome = PayoutStatus::confirm().apply(&mut tx, payout).await?;
//! let won = tx.commit(outcome.won()).await?; // the inbox row and the move, together
//! # let _ = won;
//! # Ok(()) }
//! ```
//!
//! Limits: a message id is remembered until [`prune`] removes it
//! ([`DEFAULT_WINDOW`](crate::stores::idempotency::DEFAULT_WINDOW), 24 hours, by
//! default); a duplicate delivered later than that is `First`. Consumer
//! and message id are 1 to 255 characters, compared byte for byte
//! ([`Error::BadKey`] otherwise).
//!
//! The table is `stateguard_inbox`; [`ddl`] gives its `CREATE TABLE` per
//! dialect.

use std::time::Duration;

use crate::ddl::Dialect as DdlDialect;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::{Backend, Sql, Statement};
use crate::error::Error;
use crate::executor::tx::Tx;
use crate::stores::idempotency::checked;
use crate::transition::bind::{Field, Fields, store_arguments};

/// The inbox's table, which [`Error::Store`] and [`Error::Timeout`] name.
pub(crate) const TABLE: &str = crate::error::store::INBOX;

const DDL_POSTGRES: &[&str] = &[
    "CREATE TABLE stateguard_inbox (
    consumer TEXT COLLATE \"C\" NOT NULL,
    message_id TEXT COLLATE \"C\" NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer, message_id)
)",
    "CREATE INDEX stateguard_inbox_received_at ON stateguard_inbox (received_at)",
];

const DDL_SQLITE: &[&str] = &[
    "CREATE TABLE stateguard_inbox (
    consumer TEXT NOT NULL,
    message_id TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (consumer, message_id)
)",
    "CREATE INDEX stateguard_inbox_received_at ON stateguard_inbox (received_at)",
];

// Bytes, compared exactly: MySQL's string collations ignore trailing
// spaces.
const DDL_MYSQL: &[&str] = &["CREATE TABLE stateguard_inbox (
    consumer VARBINARY(1020) NOT NULL,
    message_id VARBINARY(1020) NOT NULL,
    received_at DATETIME(3) NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY stateguard_inbox_received_at (received_at)
)"];

/// The statements that create the inbox table and its index in
/// `dialect`, without trailing `;`. Run them once, in a migration.
pub fn ddl(dialect: DdlDialect) -> &'static [&'static str] {
    match dialect {
        DdlDialect::Postgres => DDL_POSTGRES,
        DdlDialect::Sqlite => DDL_SQLITE,
        DdlDialect::MySql => DDL_MYSQL,
    }
}

/// The message's row; nothing if it is there. MySQL's `INSERT IGNORE` is
/// safe here: both values were checked to fit.
const RECEIVE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "INSERT INTO stateguard_inbox (consumer, message_id, received_at) VALUES ($1, $2, \
               statement_timestamp()) ON CONFLICT (consumer, message_id) DO NOTHING RETURNING \
               'stateguard 1e291bd415d26cf6'::text",
        &[Field::Scope, Field::Key],
    ),
    sqlite: Statement::new(
        "INSERT INTO stateguard_inbox (consumer, message_id, received_at) VALUES (?1, ?2, \
             strftime('%Y-%m-%d %H:%M:%f', 'now')) ON CONFLICT (consumer, message_id) DO NOTHING",
        &[Field::Scope, Field::Key],
    ),
    mysql: Statement::new(
        "INSERT IGNORE INTO stateguard_inbox (consumer, message_id, received_at) VALUES \
            (?, ?, UTC_TIMESTAMP(3))",
        &[Field::Scope, Field::Key],
    ),
};

/// Up to `$2` messages received more than `$1` milliseconds ago, oldest
/// first, removed.
const PRUNE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "DELETE FROM stateguard_inbox WHERE (consumer, message_id) IN (SELECT consumer, \
               message_id FROM stateguard_inbox WHERE received_at < statement_timestamp() - \
               CAST($1 AS BIGINT) * INTERVAL '1 millisecond' ORDER BY received_at LIMIT $2 FOR \
               UPDATE SKIP LOCKED) RETURNING 'stateguard 83de7c51cf2339ad'::text",
        &[Field::Millis, Field::Limit],
    ),
    sqlite: Statement::new(
        "DELETE FROM stateguard_inbox WHERE rowid IN (SELECT rowid FROM stateguard_inbox \
             WHERE received_at < strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', \
             CAST(?1 AS INTEGER) / 1000.0)) ORDER BY received_at LIMIT ?2)",
        &[Field::Millis, Field::Limit],
    ),
    mysql: Statement::new(
        "DELETE FROM stateguard_inbox WHERE received_at < UTC_TIMESTAMP(3) - INTERVAL \
            (? * 1000) MICROSECOND ORDER BY received_at LIMIT ?",
        &[Field::Millis, Field::Limit],
    ),
};

/// What [`receive`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a duplicate must not do the work again"]
pub enum Received {
    /// The first delivery: do the work in this transaction.
    First,
    /// Delivered before, and committed: do nothing.
    Duplicate,
}

/// Records `message_id` for `consumer` in `tx`, the transaction of the
/// consumer's work: [`Received::First`] the first time, and
/// [`Received::Duplicate`] when a committed transaction recorded it
/// before. An empty or over-long consumer or message id is
/// [`Error::BadKey`], and nothing is written.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `inbox::receive(&mut tx, consumer, id).within(d)` ([`Call`]). Cut off,
/// [`Error::Timeout`] (`receive`, outcome unknown) and `tx` can no longer
/// commit: roll it back, and let the message be delivered again.
pub fn receive<'a, 'c, DB>(
    tx: &'a mut Tx<'c, DB>,
    consumer: &'a str,
    message_id: &'a str,
) -> Call<'a, Received>
where
    DB: Backend,
{
    Call::new(move |deadline| async move {
        use crate::executor::proven::Proven;
        use crate::executor::sealed::Run;
        let mut tx = tx;
        checked("inbox consumer", consumer)?;
        checked("message id", message_id)?;
        let sent = Sent::default();
        let work = async {
            let db_error = |source| Error::store(TABLE, "receive", source);
            let statement = DB::choose(&RECEIVE);
            let fields = Fields {
                scope: Some(consumer),
                key: Some(message_id),
                ..Fields::default()
            };
            let args = store_arguments::<DB>(statement, fields).map_err(db_error)?;
            sent.write();
            let done = Proven::changed(&mut tx, statement, args)
                .await
                .map_err(db_error)?;
            Ok(match done {
                1 => Received::First,
                _ => Received::Duplicate,
            })
        };
        let received = bounded(TABLE, "receive", deadline, &sent, work).await;
        if let Err(Error::Timeout { .. }) = received {
            // The INSERT may still run: the transaction must not commit.
            Run::abandoned(&mut tx);
        }
        received
    })
}

/// Removes up to `limit` messages received more than `window` ago, oldest
/// first, and returns how many it removed: one bounded statement per
/// call, as for [`idempotency::prune`](crate::stores::idempotency::prune).
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `inbox::prune(&pool, window, limit).within(d)` ([`Call`]); cut off,
/// [`Error::Timeout`] (`prune`, outcome unknown).
pub fn prune<DB>(pool: &sqlx::Pool<DB>, window: Duration, limit: u32) -> Call<'_, u64>
where
    DB: Backend,
{
    crate::stores::idempotency::prune_table::<DB>(pool, &PRUNE, TABLE, window, limit)
}

#[cfg(test)]
mod plans {
    use super::*;

    #[test]
    fn every_statement_has_a_plan_entry_per_placeholder() {
        crate::transition::bind::assert_plans_fit("RECEIVE", &RECEIVE);
        crate::transition::bind::assert_plans_fit("PRUNE", &PRUNE);
    }
}
