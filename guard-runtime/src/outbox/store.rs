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
use crate::stores::{changed_in_tx, changed_on_pool};
use crate::transition::bind::{Fields, store_arguments};

use super::Message;

/// The statements that create the outbox table and its indexes in
/// `dialect`, without trailing `;`. Run them once, in a migration. An
/// [`Outbox`] in a schema has its own ([`Outbox::ddl`]).
///
/// The table, `stateguard_outbox`, holds each message's id (unique), its
/// order key, topic and payload, the occurrence of the move that wrote it
/// (`emit`; NULL for a message written with [`enqueue`]), when it was
/// written, and what a relay
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
/// One statement, in `tx`: nothing of it commits before `tx` does.
/// After any error, roll `tx` back (drop it) and do the work again. An
/// error whose outcome is unknown ([`Error::is_outcome_unknown`]) may have
/// written the message in `tx`, which must then not commit.
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
            checked("message id", message.id)?;
            checked("order key", order_key)?;
            checked("topic", message.topic)?;
            let fields = Fields {
                message_id: Some(message.id),
                order_key: Some(order_key),
                topic: Some(message.topic),
                payload: Some(message.payload.to_vec()),
                ..Fields::default()
            };
            let changed =
                changed_in_tx(tx, sql.table, "enqueue", deadline, &sql.enqueue, fields).await?;
            Ok(match changed {
                1 => Enqueued::New,
                _ => Enqueued::Duplicate,
            })
        })
    }
}

/// A message the relay gave up on: published by no pass until
/// [`requeue`] brings it back, and holding back the later messages of
/// its order key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    id: String,
    topic: String,
    attempts: i64,
    last_error: Option<String>,
}

impl DeadLetter {
    /// The message's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// How many times a relay tried to publish it.
    pub fn attempts(&self) -> i64 {
        self.attempts
    }

    /// Why the last attempt failed, as the publisher said.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}

/// Up to `limit` messages the relay gave up on, oldest first.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `outbox::dead_letters(&pool, limit).within(d)` ([`Call`]).
pub fn dead_letters<DB: Backend>(pool: &sqlx::Pool<DB>, limit: u32) -> Call<'_, Vec<DeadLetter>> {
    DEFAULT.outbox().dead_letters(pool, limit)
}

/// How many messages wait to be published: committed, neither published
/// nor given up, due now or later. One statement that counts up to
/// [`COUNT_CAP`](crate::COUNT_CAP), which reads as that many or more.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `outbox::backlog(&pool).within(d)` ([`Call`]); cut off,
/// [`Error::Timeout`] (`backlog`, outcome known: it only reads).
pub fn backlog<DB: Backend>(pool: &sqlx::Pool<DB>) -> Call<'_, u64> {
    DEFAULT.outbox().backlog(pool)
}

/// Brings the given-up message `message_id` back: due at once, with no
/// attempts, for the next relay pass. `true` if there was such a dead
/// letter; `false` for a message that is not one (never written, waiting,
/// or published).
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `outbox::requeue(&pool, id).within(d)` ([`Call`]); cut off,
/// [`Error::Timeout`] (`requeue`, outcome unknown).
pub fn requeue<'p, DB: Backend>(pool: &'p sqlx::Pool<DB>, message_id: &'p str) -> Call<'p, bool> {
    DEFAULT.outbox().requeue(pool, message_id)
}

/// Where a message is: waiting for a relay, published, or given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageState {
    /// Committed and not yet published: due for a relay pass once its
    /// next attempt's time has come (at once, unless a publish failed).
    Waiting,
    /// Taken by the broker.
    Published,
    /// Given up after its last attempt: a dead letter, which
    /// [`requeue`] brings back.
    Dead,
}

/// One message's state, as [`status`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageStatus {
    state: MessageState,
    attempts: i64,
    last_error: Option<String>,
}

impl MessageStatus {
    /// Waiting, published or dead.
    pub fn state(&self) -> MessageState {
        self.state
    }

    /// How many publishes relays have tried.
    pub fn attempts(&self) -> i64 {
        self.attempts
    }

    /// Why the last attempt failed, as the publisher said; `None` before
    /// any failed.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}

/// The state of message `message_id`: `None` for an id that was never
/// committed, or whose message was published and then
/// [pruned](prune).
///
/// One read, on the pool. Deadline:
/// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `outbox::status(&pool, id).within(d)` ([`Call`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// use stateguard::outbox::{self, Message, MessageState};
/// use stateguard::Tx;
///
/// for statement in outbox::ddl(stateguard::ddl::Dialect::Sqlite) {
///     sqlx::raw_sql(*statement).execute(&pool).await?;
/// }
/// let mut tx = Tx::begin(&pool).await?;
/// let message = Message { id: "payout:42:1", topic: "payout.sent", payload: b"{}" };
/// outbox::enqueue(&mut tx, "42", message).await?;
/// tx.commit(()).await?;
///
/// let status = outbox::status(&pool, "payout:42:1").await?.expect("committed");
/// assert_eq!((status.state(), status.attempts()), (MessageState::Waiting, 0));
/// assert_eq!(outbox::status(&pool, "payout:7:1").await?, None);
/// # Ok(()) }
/// ```
pub fn status<'p, DB: Backend>(
    pool: &'p sqlx::Pool<DB>,
    message_id: &'p str,
) -> Call<'p, Option<MessageStatus>> {
    DEFAULT.outbox().status(pool, message_id)
}

/// Removes up to `limit` messages published more than `window` ago,
/// oldest first, and returns how many it removed: one bounded statement
/// per call, as for [`idempotency::prune`](crate::stores::idempotency::prune).
/// Messages waiting to be published and given-up ones stay.
///
/// An id written again after its message was pruned is a new message,
/// published again: keep the window longer than any retry of the work
/// that writes it, and the broker's duplicate window.
///
/// An error removed nothing, unless its outcome is unknown
/// ([`Error::is_outcome_unknown`]).
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `outbox::prune(&pool, window, limit).within(d)` ([`Call`]); cut off,
/// [`Error::Timeout`] (`prune`, outcome unknown).
pub fn prune<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    window: std::time::Duration,
    limit: u32,
) -> Call<'_, u64> {
    DEFAULT.outbox().prune(pool, window, limit)
}

impl Outbox {
    /// [`prune`], on this outbox's table.
    pub fn prune<'p, DB: Backend>(
        &self,
        pool: &'p sqlx::Pool<DB>,
        window: std::time::Duration,
        limit: u32,
    ) -> Call<'p, u64> {
        let sql = self.sql;
        crate::stores::idempotency::prune_table::<DB>(pool, &sql.prune, sql.table, window, limit)
    }

    /// [`backlog`], of this outbox's table.
    pub fn backlog<'p, DB: Backend>(&self, pool: &'p sqlx::Pool<DB>) -> Call<'p, u64> {
        let sql = self.sql;
        Call::new(move |deadline| {
            crate::stores::counted_on_pool(pool, sql.table, "backlog", deadline, &sql.backlog)
        })
    }

    /// [`dead_letters`], of this outbox's table.
    pub fn dead_letters<'p, DB: Backend>(
        &self,
        pool: &'p sqlx::Pool<DB>,
        limit: u32,
    ) -> Call<'p, Vec<DeadLetter>> {
        let sql = self.sql;
        Call::new(move |deadline| async move {
            use crate::executor::proven::Proven;
            let sent = Sent::default();
            let work = async {
                let db_error = |source| Error::store(sql.table, "dead_letters", source);
                let statement = DB::choose(&sql.dead);
                let fields = Fields {
                    limit: Some(i64::from(limit)),
                    ..Fields::default()
                };
                let args = store_arguments::<DB>(statement, fields).map_err(db_error)?;
                let mut executor = pool;
                let rows = Proven::rows(&mut executor, statement, args)
                    .await
                    .map_err(db_error)?;
                let at = statement.after_tag();
                let mut letters = Vec::with_capacity(rows.len());
                for row in &rows {
                    let text = |i| DB::text_opt(row, at + i).map(Option::unwrap_or_default);
                    letters.push(DeadLetter {
                        id: text(0).map_err(db_error)?,
                        topic: text(1).map_err(db_error)?,
                        attempts: DB::int_opt(row, at + 2).map_err(db_error)?.unwrap_or(0),
                        last_error: DB::text_opt(row, at + 3).map_err(db_error)?,
                    });
                }
                Ok(letters)
            };
            bounded(sql.table, "dead_letters", deadline, &sent, work).await
        })
    }

    /// [`status`], in this outbox's table.
    pub fn status<'p, DB: Backend>(
        &self,
        pool: &'p sqlx::Pool<DB>,
        message_id: &'p str,
    ) -> Call<'p, Option<MessageStatus>> {
        let sql = self.sql;
        Call::new(move |deadline| async move {
            use crate::executor::proven::Proven;
            let sent = Sent::default();
            let work = async {
                let db_error = |source| Error::store(sql.table, "status", source);
                let statement = DB::choose(&sql.status);
                let fields = Fields {
                    message_id: Some(message_id),
                    ..Fields::default()
                };
                let args = store_arguments::<DB>(statement, fields).map_err(db_error)?;
                let mut executor = pool;
                let rows = Proven::rows(&mut executor, statement, args)
                    .await
                    .map_err(db_error)?;
                let Some(row) = rows.first() else {
                    return Ok(None);
                };
                let at = statement.after_tag();
                let state = match DB::text_opt(row, at).map_err(db_error)?.as_deref() {
                    Some("waiting") => MessageState::Waiting,
                    Some("published") => MessageState::Published,
                    Some("dead") => MessageState::Dead,
                    other => {
                        let text = format!("the outbox's status read returned state {other:?}");
                        return Err(db_error(sqlx::Error::Protocol(text)));
                    }
                };
                Ok(Some(MessageStatus {
                    state,
                    attempts: DB::int_opt(row, at + 1).map_err(db_error)?.unwrap_or(0),
                    last_error: DB::text_opt(row, at + 2).map_err(db_error)?,
                }))
            };
            bounded(sql.table, "status", deadline, &sent, work).await
        })
    }

    /// [`requeue`], in this outbox's table.
    pub fn requeue<'p, DB: Backend>(
        &self,
        pool: &'p sqlx::Pool<DB>,
        message_id: &'p str,
    ) -> Call<'p, bool> {
        let sql = self.sql;
        Call::new(move |deadline| async move {
            let fields = Fields {
                message_id: Some(message_id),
                ..Fields::default()
            };
            let changed =
                changed_on_pool(pool, sql.table, "requeue", deadline, &sql.requeue, fields).await?;
            Ok(changed == 1)
        })
    }
}
