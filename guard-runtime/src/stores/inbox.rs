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
//! ([`Error::BadKey`](crate::Error::BadKey) otherwise).
//!
//! The table is `stateguard_inbox`; [`ddl`] gives its `CREATE TABLE` per
//! dialect. The free functions find it through the connection's search
//! path; an [`Inbox`] of [`stores!`](crate::stores!) finds it in a schema
//! named at compile time (`PAYMENTS.inbox().receive(&mut tx, consumer,
//! id)`), as a transaction-mode pooler needs.

use std::time::Duration;

use crate::ddl::Dialect as DdlDialect;
use crate::deadline::call::Call;
use crate::dialect::Backend;
use crate::executor::tx::Tx;
use crate::stores::changed_in_tx;
use crate::stores::idempotency::checked;
use crate::stores::schema::DEFAULT;
pub use crate::stores::schema::Inbox;
use crate::transition::bind::Fields;

/// The statements that create the inbox table and its index in
/// `dialect`, without trailing `;`. Run them once, in a migration. An
/// [`Inbox`] in a schema has its own ([`Inbox::ddl`]).
pub fn ddl(dialect: DdlDialect) -> &'static [&'static str] {
    DEFAULT.inbox().ddl(dialect)
}

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
/// [`Error::BadKey`](crate::Error::BadKey), and nothing is written.
///
/// One statement, in `tx`: nothing of it commits before `tx` does.
/// After any error, roll `tx` back (drop it) and let the message be
/// delivered again. An error whose outcome is unknown
/// ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown)) may
/// have recorded the message in `tx`, which must then not commit.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `inbox::receive(&mut tx, consumer, id).within(d)` ([`Call`]). Cut off,
/// [`Error::Timeout`](crate::Error::Timeout) (`receive`, outcome unknown) and `tx` can no longer
/// commit: roll it back, and let the message be delivered again.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// use stateguard::inbox::{self, Received};
/// use stateguard::Tx;
///
/// for statement in inbox::ddl(stateguard::ddl::Dialect::Sqlite) {
///     sqlx::raw_sql(*statement).execute(&pool).await?;
/// }
/// // The webhook arrives twice: only the first delivery does the work.
/// for expected in [Received::First, Received::Duplicate] {
///     let mut tx = Tx::begin(&pool).await?;
///     assert_eq!(inbox::receive(&mut tx, "bank-webhooks", "evt_1").await?, expected);
///     tx.commit(()).await?;
/// }
/// # Ok(()) }
/// ```
pub fn receive<'a, 'c, DB>(
    tx: &'a mut Tx<'c, DB>,
    consumer: &'a str,
    message_id: &'a str,
) -> Call<'a, Received>
where
    DB: Backend,
{
    DEFAULT.inbox().receive(tx, consumer, message_id)
}

/// Removes up to `limit` messages received more than `window` ago, oldest
/// first, and returns how many it removed: one bounded statement per
/// call, as for [`idempotency::prune`](crate::stores::idempotency::prune).
/// An error removed nothing, unless its outcome is unknown
/// ([`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown)).
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `inbox::prune(&pool, window, limit).within(d)` ([`Call`]); cut off,
/// [`Error::Timeout`](crate::Error::Timeout) (`prune`, outcome unknown).
pub fn prune<DB>(pool: &sqlx::Pool<DB>, window: Duration, limit: u32) -> Call<'_, u64>
where
    DB: Backend,
{
    DEFAULT.inbox().prune(pool, window, limit)
}

impl Inbox {
    /// [`receive`], into this inbox's table.
    pub fn receive<'a, 'c, DB>(
        &self,
        tx: &'a mut Tx<'c, DB>,
        consumer: &'a str,
        message_id: &'a str,
    ) -> Call<'a, Received>
    where
        DB: Backend,
    {
        let sql = self.sql;
        Call::new(move |deadline| async move {
            checked("inbox consumer", consumer)?;
            checked("message id", message_id)?;
            let fields = Fields {
                consumer: Some(consumer),
                message_id: Some(message_id),
                ..Fields::default()
            };
            let changed =
                changed_in_tx(tx, sql.table, "receive", deadline, &sql.receive, fields).await?;
            Ok(match changed {
                1 => Received::First,
                _ => Received::Duplicate,
            })
        })
    }

    /// [`prune`], on this inbox's table.
    pub fn prune<'p, DB>(
        &self,
        pool: &'p sqlx::Pool<DB>,
        window: Duration,
        limit: u32,
    ) -> Call<'p, u64>
    where
        DB: Backend,
    {
        let sql = self.sql;
        crate::stores::idempotency::prune_table::<DB>(pool, &sql.prune, sql.table, window, limit)
    }
}
