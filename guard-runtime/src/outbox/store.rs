//! The outbox table: messages written in the transaction of the work
//! they announce, waiting for a relay to publish them.

use crate::ddl::Dialect as DdlDialect;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Backend;
use crate::error::Error;
use crate::executor::tx::Tx;
use crate::stores::idempotency::checked;
use crate::stores::schema::DEFAULT;
pub use crate::stores::schema::Outbox;
use crate::transition::bind::{Fields, store_arguments};

use super::Message;

/// The statements that create the outbox table and its indexes in
/// `dialect`, without trailing `;`. Run them once, in a migration. An
/// [`Outbox`] in a schema has its own ([`Outbox::ddl`]).
///
/// The table, `stateguard_outbox`, holds each message's id (unique), its
/// order key, topic and payload, when it was written, and what a relay
/// keeps about it: its attempts, when it is next due, the last error, the
/// lease a relay holds it under, and when it was published or given up.
pub fn ddl(dialect: DdlDialect) -> &'static [&'static str] {
    DEFAULT.outbox().ddl(dialect)
}

/// What [`enqueue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// The message's row was written, and commits with the transaction.
    New,
    /// A message with this id was written before, and committed: nothing
    /// was written. Its id names it for good, so this is the same message.
    Duplicate,
}

/// Writes `message` to the outbox in `tx`, the transaction of the work it
/// announces: the message leaves only if the work commits, and a
/// rollback (or a crash) takes both back. [`Enqueued::Duplicate`] when a
/// committed transaction wrote a message with the same id before.
///
/// `order_key` says which messages keep their order: those with the same
/// key (for a payout, its id) are published in the order their
/// transactions wrote them. Give the message an id that names it for
/// good, such as the win's [`effect_key`](crate::Won::effect_key): a move
/// replayed or recovered writes the same id, and so no second message.
///
/// An empty or over-long message id, order key or topic (more than 255
/// characters) is [`Error::BadKey`], and nothing is written.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `outbox::enqueue(&mut tx, key, message).within(d)` ([`Call`]). Cut
/// off, [`Error::Timeout`] (`enqueue`, outcome unknown) and `tx` can no
/// longer commit: roll it back, and do the work again.
///
/// ```
/// # use stateguard::StateMachine;
/// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// # #[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
/// # enum PayoutStatus {
/// #     #[state(initial)]
/// #     #[transition(pay -> Paid)]
/// #     Pending,
/// #     Paid,
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// # sqlx::raw_sql("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
/// #     version INTEGER NOT NULL DEFAULT 0); INSERT INTO payouts (id, status) VALUES (42, 'pending')")
/// #     .execute(&pool).await?;
/// use stateguard::outbox::{self, Enqueued, Message};
/// use stateguard::{Outcome, Tx};
///
/// for statement in outbox::ddl(stateguard::ddl::Dialect::Sqlite) {
///     sqlx::raw_sql(*statement).execute(&pool).await?;
/// }
/// let mut tx = Tx::begin(&pool).await?;
/// if let Outcome::Applied(won) = PayoutStatus::pay().apply(&mut tx, 42).await? {
///     // Only the win writes the message, under the win's effect key.
///     let id = won.effect_key();
///     let message = Message { id: &id, topic: "payout.paid", payload: b"{}" };
///     assert_eq!(outbox::enqueue(&mut tx, "42", message).await?, Enqueued::New);
///     tx.commit(won).await?; // the move and its message, together
/// }
/// let waiting: i64 = sqlx::query_scalar("SELECT count(*) FROM stateguard_outbox")
///     .fetch_one(&pool)
///     .await?;
/// assert_eq!(waiting, 1);
/// # Ok(()) }
/// ```
pub fn enqueue<'a, 'c, DB>(
    tx: &'a mut Tx<'c, DB>,
    order_key: &'a str,
    message: Message<'a>,
) -> Call<'a, Enqueued>
where
    DB: Backend,
{
    DEFAULT.outbox().enqueue(tx, order_key, message)
}

impl Outbox {
    /// [`enqueue`], into this outbox's table.
    pub fn enqueue<'a, 'c, DB>(
        &self,
        tx: &'a mut Tx<'c, DB>,
        order_key: &'a str,
        message: Message<'a>,
    ) -> Call<'a, Enqueued>
    where
        DB: Backend,
    {
        let sql = self.sql;
        Call::new(move |deadline| async move {
            use crate::executor::proven::Proven;
            use crate::executor::sealed::Run;
            let mut tx = tx;
            checked("message id", message.id)?;
            checked("order key", order_key)?;
            checked("topic", message.topic)?;
            let sent = Sent::default();
            let work = async {
                let db_error = |source| Error::store(sql.table, "enqueue", source);
                let statement = DB::choose(&sql.enqueue);
                let fields = Fields {
                    key: Some(message.id),
                    scope: Some(order_key),
                    topic: Some(message.topic),
                    body: Some(message.payload.to_vec()),
                    ..Fields::default()
                };
                let args = store_arguments::<DB>(statement, fields).map_err(db_error)?;
                sent.write();
                let done = Proven::changed(&mut tx, statement, args)
                    .await
                    .map_err(db_error)?;
                Ok(match done {
                    1 => Enqueued::New,
                    _ => Enqueued::Duplicate,
                })
            };
            let enqueued = bounded(sql.table, "enqueue", deadline, &sent, work).await;
            if let Err(Error::Timeout { .. }) = enqueued {
                // The INSERT may still run: the transaction must not commit.
                Run::abandoned(&mut tx);
            }
            enqueued
        })
    }
}
