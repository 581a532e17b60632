//! The reference crash-safe payout workflow: a payout moves
//! `pending → sending` in a statement of its own, the bank is called with
//! an idempotency key derived from that win, and `sending → sent` records
//! the answer. A worker that dies anywhere in between leaves the payout in
//! `sending`; once its lease runs out, any worker takes it over and calls
//! the bank again with the same key, so the money moves once.
//!
//! Shared by `examples/recovery/main.rs` and `tests/examples/crash.rs`, and
//! written once for every backend: only the few statements that differ
//! between SQLite, PostgreSQL and MySQL live in [`Store`], as literals per
//! backend.

use std::error::Error;
use std::time::Duration;

use sqlx::{MySql, MySqlPool, PgPool, Pool, Postgres, Sqlite, SqlitePool};
use stateguard::{Effect, Finished, Retry, StateMachine, Verdict};

/// Errors of the workflow: the library's, sqlx's, or a task that died.
pub type BoxError = Box<dyn Error + Send + Sync>;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "recovery_payouts",
    column = "status",
    key = "id",
    key_type = "i64",
    version = "version",
    history = "recovery_payout_history"
)]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    // Entering `sending` stamps `sending_since`; a row still here 100 ms
    // later belongs to a worker presumed dead, and recovery takes it over.
    // Each attempt at the bank is counted in `attempts`; one the bank
    // turns away waits 20 ms, then 40, … up to 200 ms (`next_attempt_at`),
    // and a payout turned away 50 times ends in `failed`.
    #[state(in_flight(
        lease = "100ms",
        since = "sending_since",
        done = confirm,
        failed = fail,
        retry(max = 50, backoff = "20ms..200ms", attempts = "attempts", next_attempt = "next_attempt_at")
    ))]
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// Rows taken over per recovery pass.
pub const RECOVER_BATCH: u32 = 16;

/// Pending payouts a worker claims at a time.
pub const CLAIM_BATCH: u32 = 4;

/// How a worker finishes the payouts it claimed or took over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finishing {
    /// One after another: `Won::finish` per payout, `recover` per pass.
    OneByOne,
    /// `finish_many` and `recover_many`: the bank calls at this
    /// concurrency, one heartbeat and one follow-up statement per batch.
    Batched { concurrency: usize },
    /// The library's own loops: a `Worker` that claims, runs the bank
    /// calls at this concurrency, and recovers when a claim comes back
    /// empty, until every payout is finished.
    Worker { concurrency: usize },
}

/// How long a row may stay in `sending` before recovery takes it over.
fn lease() -> Duration {
    PayoutStatus::MACHINE
        .state(PayoutStatus::Sending)
        .and_then(|state| state.in_flight())
        .map_or(Duration::from_millis(100), |in_flight| in_flight.lease())
}

/// Counts over the whole database, read at the end of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub payouts: i64,
    pub pending: i64,
    pub sending: i64,
    pub sent: i64,
    pub failed: i64,
    /// Every request the bank received, repeats included.
    pub raw_calls: i64,
    /// Money movements: one per distinct idempotency key.
    pub transfers: i64,
    /// Payouts whose money moved other than exactly once.
    pub not_exactly_once: i64,
    /// Requests the bank turned away before moving money.
    pub refusals: i64,
    /// Payouts whose attempts column counts fewer attempts than the bank
    /// saw (calls and refusals): an attempt that went uncounted.
    pub uncounted: i64,
}

/// The statements that differ between backends, each a literal.
///
/// The methods return `Send` futures so that workers can be spawned.
pub trait Store: stateguard::bounds::Batched {
    /// The dialect of `stateguard::ddl` for this backend.
    const DIALECT: stateguard::ddl::Dialect;

    /// The payouts table and the bank's two tables.
    fn create_tables(pool: &Pool<Self>) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Pending payouts `first..=last`.
    fn seed(
        pool: &Pool<Self>,
        first: i64,
        last: i64,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Payouts not yet `sent` or `failed`.
    fn unfinished(pool: &Pool<Self>) -> impl Future<Output = sqlx::Result<i64>> + Send;

    /// The bank's side of one call, in one bank-side transaction: log the
    /// raw call, and move the money unless this key already did.
    fn bank_transfer(
        pool: &Pool<Self>,
        effect_key: &str,
        payout: i64,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// The bank turning a request for `payout` away before moving money
    /// (a 503), logged.
    fn bank_refusal(
        pool: &Pool<Self>,
        payout: i64,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    fn tally(pool: &Pool<Self>) -> impl Future<Output = sqlx::Result<Tally>> + Send;
}

/// Counts states, raw bank calls and transfers, and the payouts whose money
/// moved other than once. The SQL is the same on every backend; only the
/// pool's type differs.
macro_rules! tally {
    ($pool:expr) => {{
        let (payouts, pending, sending, sent, failed): (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT COUNT(*),
                        COUNT(CASE WHEN status = 'pending' THEN 1 END),
                        COUNT(CASE WHEN status = 'sending' THEN 1 END),
                        COUNT(CASE WHEN status = 'sent' THEN 1 END),
                        COUNT(CASE WHEN status = 'failed' THEN 1 END)
                 FROM recovery_payouts",
        )
        .fetch_one($pool)
        .await?;
        let (raw_calls, transfers, not_exactly_once, refusals, uncounted): (
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM bank_calls),
                    (SELECT COUNT(*) FROM bank_transfers),
                    (SELECT COUNT(*) FROM recovery_payouts p
                     WHERE (SELECT COUNT(*) FROM bank_transfers t WHERE t.payout_id = p.id) <> 1),
                    (SELECT COUNT(*) FROM bank_refusals),
                    (SELECT COUNT(*) FROM recovery_payouts p
                     WHERE p.attempts < (SELECT COUNT(*) FROM bank_calls c WHERE c.payout_id = p.id)
                         + (SELECT COUNT(*) FROM bank_refusals r WHERE r.payout_id = p.id))",
        )
        .fetch_one($pool)
        .await?;
        Ok(Tally {
            payouts,
            pending,
            sending,
            sent,
            failed,
            raw_calls,
            transfers,
            not_exactly_once,
            refusals,
            uncounted,
        })
    }};
}

impl Store for Sqlite {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Sqlite;

    async fn create_tables(pool: &SqlitePool) -> sqlx::Result<()> {
        for statement in [
            "CREATE TABLE recovery_payouts (
                id INTEGER PRIMARY KEY,
                status TEXT NOT NULL DEFAULT 'pending',
                version INTEGER NOT NULL DEFAULT 0,
                sending_since TEXT,
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at TEXT,
                sent_at TEXT
            )",
            "CREATE INDEX recovery_payouts_by_status ON recovery_payouts (status, id)",
            "CREATE TABLE bank_calls (
                call_id INTEGER PRIMARY KEY,
                effect_key TEXT NOT NULL,
                payout_id INTEGER NOT NULL
            )",
            "CREATE TABLE bank_transfers (
                effect_key TEXT PRIMARY KEY,
                payout_id INTEGER NOT NULL
            )",
            "CREATE TABLE bank_refusals (payout_id INTEGER NOT NULL)",
        ] {
            sqlx::query(statement).execute(pool).await?;
        }
        // The history table, and the database's own enforcement of the
        // machine.
        for statement in stateguard::ddl::generate::<PayoutStatus>(Self::DIALECT).up() {
            sqlx::query(statement).execute(pool).await?;
        }
        Ok(())
    }

    async fn seed(pool: &SqlitePool, first: i64, last: i64) -> sqlx::Result<()> {
        sqlx::query(
            "WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g WHERE i < ?2)
             INSERT INTO recovery_payouts (id) SELECT i FROM g",
        )
        .bind(first)
        .bind(last)
        .execute(pool)
        .await?;
        Ok(())
    }

    async fn unfinished(pool: &SqlitePool) -> sqlx::Result<i64> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM recovery_payouts WHERE status NOT IN ('sent', 'failed')",
        )
        .fetch_one(pool)
        .await
    }

    async fn bank_transfer(pool: &SqlitePool, effect_key: &str, payout: i64) -> sqlx::Result<()> {
        // Writes only, but IMMEDIATE all the same: SQLite takes the write
        // lock up front instead of failing a deferred upgrade.
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO bank_calls (effect_key, payout_id) VALUES (?1, ?2)")
            .bind(effect_key)
            .bind(payout)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO bank_transfers (effect_key, payout_id) VALUES (?1, ?2)
             ON CONFLICT (effect_key) DO NOTHING",
        )
        .bind(effect_key)
        .bind(payout)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    async fn bank_refusal(pool: &SqlitePool, payout: i64) -> sqlx::Result<()> {
        sqlx::query("INSERT INTO bank_refusals (payout_id) VALUES (?1)")
            .bind(payout)
            .execute(pool)
            .await?;
        Ok(())
    }

    async fn tally(pool: &SqlitePool) -> sqlx::Result<Tally> {
        tally!(pool)
    }
}

impl Store for Postgres {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Postgres;

    async fn create_tables(pool: &PgPool) -> sqlx::Result<()> {
        for statement in [
            "CREATE TABLE recovery_payouts (
                id BIGINT PRIMARY KEY,
                status TEXT NOT NULL DEFAULT 'pending',
                version INT NOT NULL DEFAULT 0,
                sending_since TIMESTAMPTZ,
                attempts INT NOT NULL DEFAULT 0,
                next_attempt_at TIMESTAMPTZ,
                sent_at TIMESTAMPTZ
            )",
            "CREATE INDEX recovery_payouts_by_status ON recovery_payouts (status, id)",
            "CREATE TABLE bank_calls (
                call_id BIGSERIAL PRIMARY KEY,
                effect_key TEXT NOT NULL,
                payout_id BIGINT NOT NULL
            )",
            "CREATE TABLE bank_transfers (
                effect_key TEXT PRIMARY KEY,
                payout_id BIGINT NOT NULL
            )",
            "CREATE TABLE bank_refusals (payout_id BIGINT NOT NULL)",
        ] {
            sqlx::query(statement).execute(pool).await?;
        }
        // The history table, and the database's own enforcement of the
        // machine.
        for statement in stateguard::ddl::generate::<PayoutStatus>(Self::DIALECT).up() {
            sqlx::query(statement).execute(pool).await?;
        }
        Ok(())
    }

    async fn seed(pool: &PgPool, first: i64, last: i64) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO recovery_payouts (id) SELECT g FROM generate_series($1::BIGINT, $2) g",
        )
        .bind(first)
        .bind(last)
        .execute(pool)
        .await?;
        Ok(())
    }

    async fn unfinished(pool: &PgPool) -> sqlx::Result<i64> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM recovery_payouts WHERE status NOT IN ('sent', 'failed')",
        )
        .fetch_one(pool)
        .await
    }

    async fn bank_transfer(pool: &PgPool, effect_key: &str, payout: i64) -> sqlx::Result<()> {
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO bank_calls (effect_key, payout_id) VALUES ($1, $2)")
            .bind(effect_key)
            .bind(payout)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO bank_transfers (effect_key, payout_id) VALUES ($1, $2)
             ON CONFLICT (effect_key) DO NOTHING",
        )
        .bind(effect_key)
        .bind(payout)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    async fn bank_refusal(pool: &PgPool, payout: i64) -> sqlx::Result<()> {
        sqlx::query("INSERT INTO bank_refusals (payout_id) VALUES ($1)")
            .bind(payout)
            .execute(pool)
            .await?;
        Ok(())
    }

    async fn tally(pool: &PgPool) -> sqlx::Result<Tally> {
        tally!(pool)
    }
}

impl Store for MySql {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::MySql;

    async fn create_tables(pool: &MySqlPool) -> sqlx::Result<()> {
        for statement in [
            "CREATE TABLE recovery_payouts (
                id BIGINT PRIMARY KEY,
                status VARCHAR(32) NOT NULL DEFAULT 'pending',
                version INT NOT NULL DEFAULT 0,
                sending_since DATETIME(3) NULL,
                attempts INT NOT NULL DEFAULT 0,
                next_attempt_at DATETIME(3) NULL,
                sent_at DATETIME(3) NULL
            )",
            "CREATE INDEX recovery_payouts_by_status ON recovery_payouts (status, id)",
            "CREATE TABLE bank_calls (
                call_id BIGINT AUTO_INCREMENT PRIMARY KEY,
                effect_key VARCHAR(255) NOT NULL,
                payout_id BIGINT NOT NULL
            )",
            "CREATE TABLE bank_transfers (
                effect_key VARCHAR(255) PRIMARY KEY,
                payout_id BIGINT NOT NULL
            )",
            "CREATE TABLE bank_refusals (payout_id BIGINT NOT NULL)",
        ] {
            sqlx::query(statement).execute(pool).await?;
        }
        // The history table, and the database's own enforcement of the
        // machine.
        for statement in stateguard::ddl::generate::<PayoutStatus>(Self::DIALECT).up() {
            sqlx::query(statement).execute(pool).await?;
        }
        Ok(())
    }

    async fn seed(pool: &MySqlPool, first: i64, last: i64) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO recovery_payouts (id)
             WITH RECURSIVE g(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM g WHERE i < ?)
             SELECT i FROM g",
        )
        .bind(first)
        .bind(last)
        .execute(pool)
        .await?;
        Ok(())
    }

    async fn unfinished(pool: &MySqlPool) -> sqlx::Result<i64> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM recovery_payouts WHERE status NOT IN ('sent', 'failed')",
        )
        .fetch_one(pool)
        .await
    }

    async fn bank_transfer(pool: &MySqlPool, effect_key: &str, payout: i64) -> sqlx::Result<()> {
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO bank_calls (effect_key, payout_id) VALUES (?, ?)")
            .bind(effect_key)
            .bind(payout)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT IGNORE INTO bank_transfers (effect_key, payout_id) VALUES (?, ?)")
            .bind(effect_key)
            .bind(payout)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    async fn bank_refusal(pool: &MySqlPool, payout: i64) -> sqlx::Result<()> {
        sqlx::query("INSERT INTO bank_refusals (payout_id) VALUES (?)")
            .bind(payout)
            .execute(pool)
            .await?;
        Ok(())
    }

    async fn tally(pool: &MySqlPool) -> sqlx::Result<Tally> {
        tally!(pool)
    }
}

/// A fake bank that behaves like Stripe: every request is logged, the
/// money moves once per idempotency key, and a repeated key is answered
/// with success without moving it again. Its ledger lives in the same
/// database for the sake of the example, written in transactions of its
/// own, never in the caller's.
pub struct Bank<DB: Store> {
    pool: Pool<DB>,
    /// Time a request and its answer each spend on the wire: a crash can
    /// land after the bank moved the money but before the answer arrived.
    latency: Duration,
}

// By hand: a derive would ask `DB: Clone`.
impl<DB: Store> Clone for Bank<DB> {
    fn clone(&self) -> Self {
        Bank {
            pool: self.pool.clone(),
            latency: self.latency,
        }
    }
}

impl<DB: Store> Bank<DB> {
    pub fn new(pool: Pool<DB>, latency: Duration) -> Self {
        Bank { pool, latency }
    }

    /// Asks the bank to pay `effect`'s payout, with its effect key as the
    /// idempotency key.
    pub async fn pay(&self, effect: Effect<PayoutStatus, i64>) -> Verdict<PayoutStatus> {
        tokio::time::sleep(self.latency).await;
        // The bank turns every fifth payout's first request away, before
        // moving money: the payout waits its backoff, and a later attempt,
        // with the same key, goes through.
        if *effect.key() % 5 == 0 && effect.attempt() == Some(1) {
            if let Err(error) = DB::bank_refusal(&self.pool, *effect.key()).await {
                eprintln!("logging a refusal failed: {error}");
            }
            return Retry::later().because("the bank answered 503").into();
        }
        let answer = DB::bank_transfer(&self.pool, effect.effect_key(), *effect.key()).await;
        tokio::time::sleep(self.latency).await;
        match answer {
            Ok(()) => Verdict::done(),
            // No answer, or an error: the money may or may not have moved.
            // Leave the row in flight; recovery asks again with the same key.
            Err(error) => {
                eprintln!(
                    "bank call {} failed, retrying later: {error}",
                    effect.effect_key()
                );
                Verdict::RetryLater
            }
        }
    }
}

/// What one worker did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Worked {
    /// Payouts this worker moved to `sending` itself.
    pub started: usize,
    /// Rows left in flight by others (or by a dead process) that this
    /// worker took over.
    pub recovered: usize,
    /// Payouts this worker saw through to `sent`.
    pub sent: usize,
    pub failed: usize,
    /// Bank calls that ended without an answer and were left to recovery.
    pub retry_later: usize,
}

/// The worker loop: recover what others left in flight, claim a few
/// pending payouts and send them, one by one or as a batch
/// (`finishing`), and repeat until every payout is `sent` or `failed`.
///
/// Any number of workers may run it at once, in any number of processes,
/// and any of them may be killed at any moment.
pub async fn run_worker<DB: Store>(
    pool: &Pool<DB>,
    bank: &Bank<DB>,
    finishing: Finishing,
) -> Result<Worked, BoxError>
where
    i64: for<'q> sqlx::Encode<'q, DB>
        + for<'r> sqlx::Decode<'r, DB>
        + sqlx::Type<DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    if let Finishing::Worker { concurrency } = finishing {
        return run_library_worker(pool, bank, concurrency).await;
    }
    let mut worked = Worked::default();
    loop {
        // Rows whose worker died: the same occurrence, hence the same
        // effect key, so the bank does not move their money again if it
        // already did.
        let pay = |effect| bank.pay(effect);
        let recovered = match finishing {
            Finishing::OneByOne => {
                stateguard::recover(pool, PayoutStatus::Sending, RECOVER_BATCH, pay).await?
            }
            Finishing::Batched { concurrency } | Finishing::Worker { concurrency } => {
                let state = PayoutStatus::Sending;
                stateguard::recover_many(pool, state, RECOVER_BATCH, concurrency, pay).await?
            }
        };
        worked.recovered += recovered.claimed;
        worked.sent += recovered.done;
        worked.failed += recovered.failed + recovered.gave_up;
        worked.retry_later += recovered.retry_later;

        // Claim a few pending payouts: their `sending` is committed before
        // the bank hears of them, so from here on a crash leaves rows that
        // recovery finds, each under its lease. No other worker gets them.
        let claimed = PayoutStatus::start().claim(pool, CLAIM_BATCH).await?;
        if !claimed.is_empty() {
            worked.started += claimed.len();
            let finished = match finishing {
                Finishing::OneByOne => {
                    let mut finished = Vec::with_capacity(claimed.len());
                    for won in claimed {
                        finished.push(won.finish(pool, pay).await?);
                    }
                    finished
                }
                Finishing::Batched { concurrency } | Finishing::Worker { concurrency } => {
                    let rows = stateguard::finish_many(pool, claimed, concurrency, pay).await?;
                    rows.into_iter()
                        .map(|row| row.finished)
                        .collect::<Result<Vec<_>, _>>()?
                }
            };
            for finished in finished {
                match finished {
                    Finished::Done { .. } => worked.sent += 1,
                    Finished::Failed { .. } => worked.failed += 1,
                    Finished::RetryLater => worked.retry_later += 1,
                    Finished::GaveUp { .. } => worked.failed += 1,
                    // The row left `sending` some other way while the bank
                    // answered (a recovery that took it over after our
                    // lease ran out failed it), or another worker took it
                    // over after this one stalled past its lease: its
                    // outcome is that worker's to count.
                    Finished::Superseded { .. }
                    | Finished::LeaseLost { .. }
                    | Finished::Skipped { .. } => {}
                }
            }
            continue;
        }

        if DB::unfinished(pool).await? == 0 {
            return Ok(worked);
        }
        // Nothing pending, but rows are in flight: their workers may be
        // alive and about to finish, or dead, in which case their leases
        // run out soon.
        tokio::time::sleep(lease() / 4).await;
    }
}

/// [`Finishing::Worker`]: the same loop, run by `stateguard::worker`,
/// until no payout is left unfinished.
async fn run_library_worker<DB: Store>(
    pool: &Pool<DB>,
    bank: &Bank<DB>,
    concurrency: usize,
) -> Result<Worked, BoxError>
where
    i64: for<'q> sqlx::Encode<'q, DB>
        + for<'r> sqlx::Decode<'r, DB>
        + sqlx::Type<DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    let bank = bank.clone();
    let finished = async {
        while DB::unfinished(pool).await.unwrap_or(1) > 0 {
            tokio::time::sleep(lease() / 4).await;
        }
    };
    let report = stateguard::worker::Worker::new(pool.clone())
        .effects(
            PayoutStatus::start(),
            CLAIM_BATCH,
            concurrency,
            move |effect: Effect<PayoutStatus, i64>| {
                let bank = bank.clone();
                async move { bank.pay(effect).await }
            },
        )
        .poll(stateguard::worker::Poll::new(
            Duration::from_millis(5),
            lease() / 4,
        ))
        .run(finished)
        .await?;
    let mut worked = Worked::default();
    for lp in report.loops {
        worked.started += lp.claimed;
        worked.recovered += lp.recovered;
        worked.sent += lp.done;
        worked.failed += lp.failed;
        worked.retry_later += lp.retry_later;
    }
    Ok(worked)
}
