//! The relay: takes due messages from the outbox table under a lease,
//! publishes them, and marks each published, or due again later, or given
//! up.

use std::time::Duration;

use crate::deadline::call::{Sent, bounded};
use crate::deadline::retry::{backoff, jittered, random};
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Statement};
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::executor::seam::Seam;
use crate::stores::schema::{DEFAULT, Outbox};
use crate::transition::bind::{Field, Fields, store_arguments};

use super::{Message, Publisher};

/// Publishes what the outbox holds: each [`pass`](Relay::pass) takes up to
/// a batch of due messages under a lease, hands them to the
/// [`Publisher`] all at once, and marks those it accepted published, in
/// one statement fenced by the pass's claim; a message the publisher
/// refused is due again after a jittered, growing delay, and given up (a
/// dead letter, [`requeue`](super::requeue) brings it back) once it has
/// had its last attempt.
///
/// Any number of relays, in any number of processes, may run passes at
/// once: each message is taken by one pass at a time (`FOR UPDATE SKIP
/// LOCKED` on PostgreSQL and MySQL/MariaDB; SQLite has one writer). A
/// relay that dies leaves its messages to another once their lease has
/// run out, and they are published again under the same id, which a
/// broker that deduplicates ids within a window
/// ([`JetStream`](super::JetStream)) keeps once. Messages that share an
/// order key leave in order: none is taken while an earlier one of its
/// key is unpublished, given-up ones included.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// use stateguard::outbox::{self, Message, Published, Publisher, Relay};
/// use stateguard::Tx;
///
/// /// A publisher that prints, for this example.
/// struct Print;
///
/// impl Publisher for Print {
///     type Error = std::convert::Infallible;
///
///     async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
///         println!("{} {}", message.id, message.topic);
///         Ok(Published::new(false))
///     }
/// }
///
/// for statement in outbox::ddl(stateguard::ddl::Dialect::Sqlite) {
///     sqlx::raw_sql(*statement).execute(&pool).await?;
/// }
/// let mut tx = Tx::begin(&pool).await?;
/// let message = Message { id: "payout:42:paid:1", topic: "payout.paid", payload: b"{}" };
/// outbox::enqueue(&mut tx, "42", message).await?;
/// tx.commit(()).await?;
///
/// let relay = Relay::new(Print);
/// assert_eq!(relay.pass(&pool).await?.published(), 1);
/// assert_eq!(relay.pass(&pool).await?.published(), 0); // nothing left
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Relay<P> {
    outbox: Outbox,
    publisher: P,
    batch: u32,
    lease: Duration,
    attempts: u32,
    first_retry: Duration,
    last_retry: Duration,
    deadline: Duration,
}

/// What one [`Relay::pass`] did with the messages it took.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    published: usize,
    duplicates: usize,
    retried: usize,
    given_up: usize,
    lost: usize,
}

impl Pass {
    /// Messages published and marked so.
    pub fn published(&self) -> usize {
        self.published
    }

    /// Of those, how many the broker recognized as held already: published
    /// before by a relay that could not mark them.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    /// Messages the publisher refused, due again later.
    pub fn retried(&self) -> usize {
        self.retried
    }

    /// Messages the publisher refused at their last attempt: dead letters
    /// now.
    pub fn given_up(&self) -> usize {
        self.given_up
    }

    /// Messages whose lease ran out before the pass could mark them:
    /// another relay has them now, and publishes them again under the same
    /// id.
    pub fn lost(&self) -> usize {
        self.lost
    }

    /// Every message the pass took.
    pub fn taken(&self) -> usize {
        self.published + self.retried + self.given_up + self.lost
    }
}

/// One message a pass took: where it is, the lease it holds it under,
/// and what it carries.
struct Taken {
    seq: i64,
    lease: i64,
    id: String,
    topic: String,
    payload: Vec<u8>,
    attempts: i64,
}

impl<P: Publisher> Relay<P> {
    /// A relay of the outbox found through the connection's search path,
    /// publishing through `publisher`: batches of 100, a lease of 30
    /// seconds, 10 attempts, retries after 1 second doubling up to 15
    /// minutes (jittered), each statement within
    /// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE).
    pub fn new(publisher: P) -> Self {
        Relay {
            outbox: DEFAULT.outbox(),
            publisher,
            batch: 100,
            lease: Duration::from_secs(30),
            attempts: 10,
            first_retry: Duration::from_secs(1),
            last_retry: Duration::from_secs(15 * 60),
            deadline: crate::DEFAULT_DEADLINE,
        }
    }

    /// Relays the messages of `outbox` ([`Stores::outbox`](crate::Stores::outbox)).
    pub fn outbox(mut self, outbox: Outbox) -> Self {
        self.outbox = outbox;
        self
    }

    /// Takes up to `messages` per pass (at least 1).
    pub fn batch(mut self, messages: u32) -> Self {
        self.batch = messages.max(1);
        self
    }

    /// Holds what a pass took for `lease`: each publish must finish within
    /// it, and another relay takes the message over once it has run out.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Gives a message up after `attempts` refusals (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Retries a refused message after a delay drawn between zero and
    /// `first`, doubling per attempt, up to `last`.
    pub fn retry(mut self, first: Duration, last: Duration) -> Self {
        self.first_retry = first;
        self.last_retry = last.max(first);
        self
    }

    /// Each of the pass's statements within `deadline`.
    pub fn within(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The outbox table, as errors and reports name it.
    pub(crate) fn table(&self) -> &'static str {
        self.outbox.sql.table
    }

    /// Takes up to a batch of due messages, publishes them, and marks
    /// them.
    ///
    /// The batch is published at once: it holds at most one message of
    /// each order key, so each key's order holds. The messages the
    /// publisher accepted are marked published in one statement, each only
    /// while the pass still holds it (a message another relay took over
    /// once the lease ran out is [`lost`](Pass::lost)); each refused one
    /// is marked with its error.
    ///
    /// A publish that does not finish within the lease counts as a
    /// refusal. The claim cut off by the deadline is [`Error::Timeout`]
    /// (the outcome unknown: it may still take messages), and a failed
    /// one an [`Error::Store`] naming the outbox table, which took
    /// nothing.
    ///
    /// When a later statement fails after the claim took messages
    /// (MySQL's read of what it claimed, marking a refused message,
    /// marking the published ones), the error is [`Error::Unreported`],
    /// whose outcome is unknown: what was marked stays marked, and the
    /// messages left unmarked are taken again once their lease has run
    /// out, and published again under their ids (a broker that
    /// deduplicates ids keeps one copy). A claim that took nothing sends
    /// nothing after it.
    ///
    /// Each pass is a `stateguard.relay` span (the table as
    /// `db.collection.name`), whose `stateguard.outcome` is `relayed` with
    /// the messages it took in `stateguard.rows`, or `error`; with the
    /// `metrics` feature, `stateguard_relayed_total` counts its messages
    /// by result ([`telemetry`](crate::telemetry)).
    pub async fn pass<DB: Backend>(&self, pool: &sqlx::Pool<DB>) -> Result<Pass, Error> {
        use tracing::Instrument;
        let span = crate::telemetry::span!(
            "stateguard.relay",
            table = self.outbox.sql.table,
            machine = "",
            DB,
            "UPDATE",
            "relay"
        );
        let pass = self.pass_traced(pool).instrument(span.clone()).await;
        match &pass {
            Ok(pass) => {
                span.record("stateguard.outcome", "relayed");
                span.record("stateguard.rows", pass.taken());
            }
            Err(_) => {
                span.record("stateguard.outcome", "error");
            }
        }
        pass
    }

    async fn pass_traced<DB: Backend>(&self, pool: &sqlx::Pool<DB>) -> Result<Pass, Error> {
        let sql = self.outbox.sql;
        let claim = random() as i64 & i64::MAX;
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        // Once the claim took messages, each later failure passes through
        // the seam: the messages are taken, and the caller is not told
        // which.
        let mut seam = Seam::new(sql.table, PASS);
        let mut executor = pool;
        let (returned, rows) = self.claim(pool, claim, lease_ms, &mut seam).await?;
        let mut messages = Vec::with_capacity(rows.len());
        let at = returned.after_tag();
        for row in &rows {
            let message = read::<DB>(at, row)
                .map_err(|e| seam.failed(&mut executor, Error::store(sql.table, CLAIM, e)))?;
            messages.push(message);
        }
        messages.sort_by_key(|m| m.seq);
        // The whole batch at once: it holds at most one message of each
        // order key (none is taken while an earlier one of its key is
        // unpublished), so publishing them together keeps every key's
        // order.
        let publishes = messages.iter().map(|message| {
            tokio::time::timeout(
                self.lease,
                self.publisher.publish(Message {
                    id: &message.id,
                    topic: &message.topic,
                    payload: &message.payload,
                }),
            )
        });
        let results = futures_util::future::join_all(publishes).await;
        let mut pass = Pass::default();
        let (mut published, mut duplicates) = (Vec::new(), 0);
        for (message, result) in messages.iter().zip(results) {
            match result {
                Ok(Ok(answer)) => {
                    published.push(message.seq);
                    duplicates += usize::from(answer.duplicate());
                }
                refused => {
                    let reason = match refused {
                        Ok(Err(error)) => error.to_string(),
                        _ => format!("not published within the lease of {:?}", self.lease),
                    };
                    let last = message.attempts >= i64::from(self.attempts);
                    let marked = self.failed(pool, message, &reason).await;
                    if !marked.map_err(|e| seam.failed(&mut executor, e))? {
                        pass.lost += 1;
                    } else if last {
                        pass.given_up += 1;
                    } else {
                        pass.retried += 1;
                    }
                }
            }
        }
        if !published.is_empty() {
            // One statement marks them all, those the pass still holds.
            let marked = self.published(pool, claim, &published).await;
            let marked = marked.map_err(|e| seam.failed(&mut executor, e))?;
            pass.published = marked;
            pass.lost += published.len().saturating_sub(marked);
            pass.duplicates = duplicates.min(marked);
        }
        crate::telemetry::relayed(sql.table, &pass);
        Ok(pass)
    }

    /// Takes up to a batch of due messages under claim `claim` for
    /// `lease_ms`: their rows, and the statement that returned them (the
    /// claim, or MySQL's read of what it claimed). `seam` learns whether
    /// the claim took any.
    async fn claim<DB: Backend>(
        &self,
        pool: &sqlx::Pool<DB>,
        claim: i64,
        lease_ms: i64,
        seam: &mut Seam,
    ) -> Result<(Statement<Field>, Vec<DB::Row>), Error> {
        let sql = self.outbox.sql;
        let statement = DB::choose(&sql.claim);
        let batch = i64::from(self.batch);
        let fields = move || Fields {
            limit: Some(batch),
            millis: Some(lease_ms),
            claim: Some(claim),
            ..Fields::default()
        };
        if <DB as Driver>::RETURNING {
            let rows = self
                .run(CLAIM, pool, |mut pool| async move {
                    let args = store_arguments::<DB>(statement, fields())?;
                    Proven::rows(&mut pool, statement, args).await
                })
                .await?;
            seam.changed_if(!rows.is_empty());
            return Ok((statement, rows));
        }
        let changed = self
            .run(CLAIM, pool, |mut pool| async move {
                let args = store_arguments::<DB>(statement, fields())?;
                Proven::changed(&mut pool, statement, args).await
            })
            .await?;
        let taken = DB::choose(&sql.taken);
        if changed == 0 {
            return Ok((taken, Vec::new()));
        }
        seam.changed_if(true);
        let rows = self
            .run(CLAIM, pool, |mut pool| async move {
                let fields = Fields {
                    claim: Some(claim),
                    ..Fields::default()
                };
                let args = store_arguments::<DB>(taken, fields)?;
                Proven::rows(&mut pool, taken, args).await
            })
            .await;
        let mut executor = pool;
        Ok((taken, rows.map_err(|e| seam.failed(&mut executor, e))?))
    }

    /// Marks the messages at `seqs` published, those that claim `claim`
    /// still holds: how many it marked.
    async fn published<DB: Backend>(
        &self,
        pool: &sqlx::Pool<DB>,
        claim: i64,
        seqs: &[i64],
    ) -> Result<usize, Error> {
        let statement = DB::choose(&self.outbox.sql.published);
        let seqs = serde_json::to_string(seqs).map_err(|e| {
            Error::store(
                self.outbox.sql.table,
                "relay published",
                sqlx::Error::Encode(e.into()),
            )
        })?;
        let seqs = seqs.as_str();
        let changed = self
            .run("relay published", pool, move |mut pool| async move {
                let fields = Fields {
                    claim: Some(claim),
                    seqs: Some(seqs),
                    ..Fields::default()
                };
                let args = store_arguments::<DB>(statement, fields)?;
                Proven::changed(&mut pool, statement, args).await
            })
            .await?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    /// Marks `message` refused with `reason`, if the pass still holds it:
    /// due again after a delay that grows with its attempts, or given up
    /// after its last. Whether it did.
    async fn failed<DB: Backend>(
        &self,
        pool: &sqlx::Pool<DB>,
        message: &Taken,
        reason: &str,
    ) -> Result<bool, Error> {
        let statement = DB::choose(&self.outbox.sql.failed);
        let attempt = u32::try_from(message.attempts.max(1) - 1).unwrap_or(u32::MAX);
        let retry = jittered(self.first_retry, self.last_retry, attempt);
        let retry_ms = i64::try_from(retry.as_millis()).unwrap_or(i64::MAX);
        let (seq, lease, attempts) = (message.seq, message.lease, i64::from(self.attempts));
        let changed = self
            .run("relay failed", pool, move |mut pool| async move {
                let fields = Fields {
                    seq: Some(seq),
                    lease: Some(lease),
                    reason: Some(reason),
                    millis: Some(retry_ms),
                    attempts: Some(attempts),
                    ..Fields::default()
                };
                let args = store_arguments::<DB>(statement, fields)?;
                Proven::changed(&mut pool, statement, args).await
            })
            .await?;
        Ok(changed == 1)
    }

    /// `work` on `pool` within the deadline, its error the store's; tried
    /// again, after a jittered pause, where the database says a fresh
    /// attempt may get past it (a deadlock, a serialization failure, a
    /// busy SQLite), as each is one autocommit statement.
    async fn run<'p, DB, T, F, Fut>(
        &self,
        name: &'static str,
        pool: &'p sqlx::Pool<DB>,
        work: F,
    ) -> Result<T, Error>
    where
        DB: Backend,
        F: Fn(&'p sqlx::Pool<DB>) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let table = self.outbox.sql.table;
        let sent = Sent::default();
        sent.write();
        let work = async {
            let mut attempt = 0;
            loop {
                match work(pool).await {
                    Err(error) if DB::is_retryable(&error) => {
                        tokio::time::sleep(backoff(attempt)).await;
                        attempt += 1;
                    }
                    done => return done.map_err(|e| Error::store(table, name, e)),
                }
            }
        };
        bounded(table, name, self.deadline, &sent, work).await
    }
}

/// What [`Error::Unreported`] names a pass that failed after its claim
/// took messages.
const PASS: &str = "relay pass";

/// What [`Error::Store`] and [`Error::Timeout`] name the claim.
const CLAIM: &str = "relay claim";

/// A taken message from `row` of the claim's result, whose own columns
/// begin `at` (after its tag).
fn read<DB: Backend>(at: usize, row: &DB::Row) -> Result<Taken, sqlx::Error> {
    let int = |i: usize| {
        DB::int_opt(row, at + i)?
            .ok_or_else(|| sqlx::Error::Protocol(format!("the outbox's column {i} is NULL")))
    };
    let text = |i: usize| {
        DB::text_opt(row, at + i)?
            .ok_or_else(|| sqlx::Error::Protocol(format!("the outbox's column {i} is NULL")))
    };
    Ok(Taken {
        seq: int(0)?,
        lease: int(1)?,
        id: text(2)?,
        topic: text(3)?,
        payload: DB::bytes_opt(row, at + 4)?.unwrap_or_default(),
        attempts: int(5)?,
    })
}
